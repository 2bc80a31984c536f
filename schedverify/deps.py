"""The dependency rules of docs/spec.md sections 3.4 and 3.5, written once, as data.

Every engine (the graph checker, the timeline, the Z3 encodings, the formulas) reads these
tables instead of restating the rules:

- ``NEEDS[kind]``: what an action of that kind needs before it can start.  A need names the
  producer's stage offset and the kinds that can satisfy it (``B`` or ``I`` for "the first
  backward").  A producer stage outside ``0..S-1`` means "no such need": that is how the
  first stage's forward and the last stage's backward start without input.
- ``Need.recv``: with explicit communication, when the producer sits on another device, the
  consumer waits for this RECV on its own device instead of the producer itself.
- ``MATCH``: which RECV a SEND pairs with (and back).
- ``RENDEZVOUS``: under rendezvous semantics a SEND also waits until its RECV is posted.
"""

from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Iterator

from .model import B, F, I, RECV_B, RECV_F, SEND_B, SEND_F, W, Action


@dataclass(frozen=True)
class Need:
    offset: int
    kinds: tuple[str, ...]
    why: str
    recv: str | None = None


_FIRST_BACKWARD = (B, I)

NEEDS: dict[str, tuple[Need, ...]] = {
    F: (Need(-1, (F,), "needs the activation that {dep} produces", recv=RECV_F),),
    B: (
        Need(0, (F,), "needs its own forward {dep}"),
        Need(+1, _FIRST_BACKWARD, "needs the gradient that {dep} produces", recv=RECV_B),
    ),
    I: (
        Need(0, (F,), "needs its own forward {dep}"),
        Need(+1, _FIRST_BACKWARD, "needs the gradient that {dep} produces", recv=RECV_B),
    ),
    W: (Need(0, (I,), "needs the input-gradient pass {dep}"),),
    SEND_F: (Need(0, (F,), "sends what {dep} produces"),),
    SEND_B: (Need(0, _FIRST_BACKWARD, "sends what {dep} produces"),),
    RECV_F: (Need(-1, (SEND_F,), "receives what {dep} sends"),),
    RECV_B: (Need(+1, (SEND_B,), "receives what {dep} sends"),),
}

#: SEND kind -> (matching RECV kind, stage offset of the receiver), and RECV -> SEND.
MATCH: dict[str, tuple[str, int]] = {
    SEND_F: (RECV_F, +1),
    SEND_B: (RECV_B, -1),
    RECV_F: (SEND_F, -1),
    RECV_B: (SEND_B, +1),
}

#: Under rendezvous semantics, these kinds also wait for their peer to be posted.
RENDEZVOUS = frozenset({SEND_F, SEND_B})

RENDEZVOUS_WHY = "waits, under rendezvous semantics, until {dep} is posted"


def needs(action: Action, num_stages: int) -> Iterator[tuple[Need, int]]:
    """The needs of one (leaf) action, each with the producer's stage, in range only."""
    own = action.stage
    assert own is not None, f"{action} is not a leaf action"  # a leaf's stage is an int
    for need in NEEDS.get(action.kind, ()):
        stage = own + need.offset
        if 0 <= stage < num_stages:
            yield need, stage


#: kind -> (the producer's stage offset, the RECV kind) of its need that, from another device,
#: arrives through a RECV on the consumer's own device (``F``: the activation, ``B``/``I``:
#: the gradient).
RECEIVED: dict[str, tuple[int, str]] = {k: (n.offset, n.recv) for k, ns in NEEDS.items() if k in (F, B, I)
                                        for n in ns if n.recv is not None}


def last_backward_kinds(split: bool) -> tuple[str, ...]:
    """The kind that frees a pair's activation last: ``W`` when split, else ``B``."""
    return (W,) if split else (B,)


def intended_receive(send: Action) -> Action:
    """The RECV a SEND's data is meant for: ``SEND_F(s,i)`` -> ``RECV_F(s+1,i)``."""
    kind, offset = MATCH[send.kind]
    assert send.stage is not None  # a SEND carries its stage
    return Action(send.stage + offset, kind, send.microbatch)
