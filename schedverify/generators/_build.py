"""Shared plumbing of the generators: size checks, the 1F1B phase pattern, assembling a Schedule."""

from __future__ import annotations

from typing import Sequence

from ..errors import UnsupportedSize
from ..model import B, F, I, W, Action, Placement, PlacementSpec, Schedule

#: A unit of work on one device: (stage, microbatch).
Work = tuple[int, int]


def require(condition: bool, family: str, rule: str) -> None:
    """Refuse sizes outside a family's domain with a message that states the rule."""
    if not condition:
        raise UnsupportedSize(f"{family}: {rule}")


def positive(family: str, **sizes: int) -> None:
    """Every size is a whole number >= 1 (bools are refused too: ``True`` is not a size)."""
    for name, value in sizes.items():
        if type(value) is not int or value < 1:
            raise UnsupportedSize(f"{family}: {name} must be a whole number >= 1, got {value!r}")


def phases(
    forwards: Sequence[Work],
    backwards: Sequence[Work],
    warmup: int,
    *,
    w_lag: int | None = None,
) -> list[Action]:
    """One device's order in the warm-up / steady / cool-down pattern of 1F1B (Megatron-LM).

    ``forwards`` and ``backwards`` are the device's (stage, microbatch) pairs in the order it
    runs their forwards and backwards.  The device runs ``warmup`` forwards, then alternates
    one forward and one backward until the forwards run out, then the remaining backwards.

    With ``w_lag`` None each backward is one full ``B``.  Otherwise it is split (Zero
    Bubble): the input-gradient ``I`` runs where ``B`` would, and the weight-gradient ``W`` of
    the backward ``w_lag`` positions earlier runs right after it; the last ``w_lag`` ``W``
    run at the end.  So ``w_lag`` = 0 is 1F1B with ``B`` cut in two, and every unit of lag
    keeps one more microbatch's activations alive in exchange for filling the tail.
    """
    if len(forwards) != len(backwards):
        raise ValueError("phases: one backward per forward")
    n = len(forwards)
    warmup = min(warmup, n)
    row = [Action(s, F, i) for s, i in forwards[:warmup]]
    weights = 0

    def backward(k: int) -> None:
        nonlocal weights
        s, i = backwards[k]
        if w_lag is None:
            row.append(Action(s, B, i))
            return
        row.append(Action(s, I, i))
        if k >= w_lag:
            ws, wi = backwards[weights]
            row.append(Action(ws, W, wi))
            weights += 1

    for k in range(n - warmup):
        s, i = forwards[warmup + k]
        row.append(Action(s, F, i))
        backward(k)
    for k in range(n - warmup, n):
        backward(k)
    if w_lag is not None:
        row += [Action(s, W, i) for s, i in backwards[weights:]]
    return row


def assemble(
    name: str,
    order: Sequence[Sequence[Action | None]],
    *,
    stages: int,
    microbatches: int,
    placement: PlacementSpec | Placement = "loop",
    metadata: dict | None = None,
) -> Schedule:
    """A fresh Schedule; ``metadata`` records the family and its parameters."""
    devices = len(order)
    if not isinstance(placement, Placement):
        placement = Placement.of(placement, devices, stages)
    return Schedule(
        devices, stages, microbatches, tuple(tuple(row) for row in order), placement, name,
        metadata=dict(metadata or {}),
    )
