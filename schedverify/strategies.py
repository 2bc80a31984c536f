"""Hypothesis strategies for pipeline schedules, for testing schedulers and tools.

The strategies and the record type:

- :func:`valid_schedules` draws schedules that are valid by construction (docs/spec.md section 3):
  random sizes, ``loop``/``v``/explicit-list placements, optional bidirectional routes, full
  (``B``) or split (``I``/``W``) backward, ``OVERLAP_F_B`` ops, optional explicit
  ``SEND``/``RECV`` communication (eager or rendezvous), idle slots and ``REDUCE_GRAD``.
  Each draw is a randomized topological execution of the dependency rules in
  :mod:`schedverify.deps`, so every draw is valid and shrinking leads to small, plain
  schedules (one device, one microbatch, no overlap, no communication).
- :func:`schedules` draws any schedule: valid ones, mutated ones, and arbitrary ones with
  out-of-range and malformed actions.
- :func:`mutations` draws single-step mutations of a valid schedule (swap, move to another
  device, drop, duplicate, reorder communication, change an index, insert an idle slot),
  each a :class:`Mutation` that says which violation codes it must cause (``must``), which
  it may also cause (``may``), or that the schedule stays valid.
- :func:`costs` and :func:`memory_models` draw :class:`~schedverify.model.Costs` and
  :class:`~schedverify.model.MemoryModel` with exactly representable values.
- :func:`with_batches` draws a schedule whose runs of consecutive SEND/RECV on a device are
  cut into ``BATCH`` actions (posted and waited for together, as Megatron-LM's batched
  p2p: docs/spec.md 10).
- :func:`with_waits` draws a schedule in PyTorch 2.15's dialect: a ``WAIT_SEND_F`` or
  ``WAIT_SEND_B`` per send at a random later place on its device (or where PyTorch's own
  lowering puts it), a ``WAIT_REDUCE_GRAD`` per ``REDUCE_GRAD``; a random place may hang
  (docs/spec.md 9.2), which is what a checker of 2.15 schedules must find.

Example: test your own schedule generator, and your own checker::

    from hypothesis import given, strategies as st
    import schedverify
    from schedverify.strategies import costs, mutations, valid_schedules
    from my_pipeline import my_schedule, my_checker   # yours

    @given(st.integers(1, 8), st.integers(1, 16), costs(comm=False))
    def test_my_schedule(d, m, c):
        report = schedverify.check(my_schedule(d, m), costs=c)
        assert report.is_valid, "\\n".join(map(str, report.violations))
        assert report.metrics.peak_inflight <= d                      # 1F1B's memory promise
        assert report.metrics.makespan <= (m + d - 1) * (c.F + c.B)  # and its time bound

    @given(valid_schedules(comm=None).flatmap(mutations))
    def test_my_checker(m):
        assert my_checker(m.schedule).ok == m.valid

Importing this module imports Hypothesis; ``import schedverify`` does not.
"""

from __future__ import annotations

from typing import NamedTuple
from collections.abc import Sequence

from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument
from hypothesis.strategies import SearchStrategy

from . import deps
from . import diagnostics as dx
from .model import (
    ALL_KINDS,
    B,
    BOOKKEEPING_KINDS,
    COMM_KINDS,
    COMM_SEMANTICS,
    COMPOSITE_KINDS,
    F,
    I,
    OVERLAP_F_B,
    RECV_B,
    RECV_F,
    REDUCE_GRAD,
    SEND_B,
    SEND_F,
    W,
    Action,
    Costs,
    MemoryModel,
    Placement,
    Schedule,
    overlap,
    stage_devices,
)

__all__ = [
    "MUTATION_KINDS", "Mutation", "costs", "memory_models", "mutations", "schedules", "valid_schedules",
    "with_batches", "with_waits",
]

PLACEMENTS = ("loop", "v", "list")
BACKWARDS = ("B", "split", "mixed")
COMMS = ("none", "eager", "rendezvous")
MUTATION_KINDS = ("swap", "move", "drop", "duplicate", "reorder-comm", "change-index", "insert-idle")

_SENDS = frozenset({SEND_F, SEND_B})


def _ints(name: str, value, low: int) -> SearchStrategy[int]:
    if isinstance(value, SearchStrategy):
        return value
    if type(value) is not int or value < low:
        raise InvalidArgument(f"{name} must be a whole number >= {low} or a strategy, got {value!r}")
    return st.just(value)


def _choice(name: str, value, allowed: tuple[str, ...]) -> SearchStrategy[str]:
    if value is None:
        return st.sampled_from(allowed)
    values = (value,) if isinstance(value, str) else tuple(value)
    bad = [v for v in values if v not in allowed]
    if bad or not values:
        raise InvalidArgument(f"{name} must be one or more of {allowed}, got {value!r}")
    return st.sampled_from(values)


def _flag(value: bool | None) -> SearchStrategy[bool]:
    return st.booleans() if value is None else st.just(bool(value))


# --------------------------------------------------------------------------- costs


def costs(*, stages: int | None = None, comm: bool = True, overlap: bool = True,
          comm_actions: bool = False) -> SearchStrategy[Costs]:
    """Costs with positive values that binary floating point represents exactly (quarters
    from 0.25 to 4), so sums in different orders agree.

    ``stages`` given: each kind's cost may be a per-stage tuple.  ``comm``: draw a
    cross-device latency (else 0).  ``overlap``: sometimes give ``OVERLAP_F_B`` its own cost
    (else the sum of its two parts).  ``comm_actions``: give SEND/RECV a cost too.
    """
    value = st.integers(1, 16).map(lambda k: k / 4)
    if stages is not None:
        if type(stages) is not int or stages < 1:
            raise InvalidArgument(f"stages must be a whole number >= 1, got {stages!r}")
        value = st.one_of(value, st.tuples(*[value] * stages))
    zero = st.just(0)
    return st.builds(
        Costs,
        F=value, B=value, I=value, W=value,
        OVERLAP_F_B=st.one_of(st.none(), value) if overlap else st.none(),
        SEND_F=value if comm_actions else zero, RECV_F=value if comm_actions else zero,
        SEND_B=value if comm_actions else zero, RECV_B=value if comm_actions else zero,
        comm=st.one_of(zero, st.integers(1, 8).map(lambda k: k / 4)) if comm else zero,
    )


def memory_models(*, stages: int | None = None) -> SearchStrategy[MemoryModel]:
    """Memory models without a limit: activation sizes (per stage when ``stages`` is given),
    ``w`` in quarters, and static memory, all exactly representable."""
    quarter = st.integers(1, 16).map(lambda k: k / 4)
    size = st.one_of(st.just(1), quarter)
    if stages is not None:
        size = st.one_of(size, st.tuples(*[quarter] * stages))
    return st.builds(MemoryModel, activation=size, w=st.sampled_from([0, 0.25, 0.5, 0.75, 1]),
                     static=st.one_of(st.just(0), quarter))


# --------------------------------------------------------------------------- valid schedules


def valid_schedules(
    *,
    devices: int | SearchStrategy[int] = st.integers(1, 4),
    microbatches: int | SearchStrategy[int] = st.integers(1, 5),
    chunks: int | SearchStrategy[int] = st.integers(1, 2),
    placements: str | Sequence[str] | None = None,
    bidirectional: bool | None = None,
    backward: str | Sequence[str] | None = None,
    overlap: bool | None = None,
    comm: str | Sequence[str] | None = "none",
    idle: bool | None = None,
    reduce_grad: bool | None = None,
    with_costs: bool | SearchStrategy[Costs] = False,
    with_memory: bool | SearchStrategy[MemoryModel] = False,
) -> SearchStrategy[Schedule]:
    """Random valid schedules, built by a randomized topological execution of docs/spec.md's
    dependency rules (so every draw is valid under its own ``comm_semantics``).

    Sizes are ints or strategies.  ``chunks`` is the number of stages per device for the
    ``loop`` and ``v`` placements (``S = D * chunks``); an explicit ``list`` placement has
    any ``1 <= S <= D * chunks`` stages on random devices (some devices may hold none).

    The other options take a value to fix, or None (the default where it says so) to vary:

    - ``placements``: ``"loop"``, ``"v"``, ``"list"`` or a sequence of them (default all).
    - ``bidirectional``: two routes, the placement and its mirror image (device ``D-1-d``),
      each microbatch on a random route (DualPipe, Chimera).  Default: sometimes.
    - ``backward``: ``"B"`` full backward, ``"split"`` I and W, ``"mixed"`` per pair.
    - ``overlap``: sometimes fuse a forward and a backward that are ready together on one
      device into one ``OVERLAP_F_B``.
    - ``comm``: ``"none"`` (default), ``"eager"`` (explicit SEND/RECV on every
      cross-device dependency, valid under eager semantics) or ``"rendezvous"`` (each SEND
      placed so that its RECV is already posted: valid under both); None varies.
    - ``idle``: sprinkle ``null`` idle slots.  ``reduce_grad``: add a ``REDUCE_GRAD`` after
      the last backward of some stages on their devices.
    - ``with_costs``: attach drawn :func:`costs` (or costs from the given strategy).
    - ``with_memory``: attach a drawn :class:`MemoryModel` without a limit (activation
      sizes, ``w``, static memory), or one from the given strategy.

    Shrinking goes towards one device, one microbatch, the ``loop`` placement, full
    backward, no overlap, no communication, no idle slots.
    """
    return _valid(
        _ints("devices", devices, 1), _ints("microbatches", microbatches, 1), _ints("chunks", chunks, 1),
        _choice("placements", placements, PLACEMENTS), _flag(bidirectional),
        _choice("backward", backward, BACKWARDS), _flag(overlap), _choice("comm", comm, COMMS),
        _flag(idle), _flag(reduce_grad), with_costs, with_memory,
    )


def _kind_rank(a: Action) -> tuple:
    return (a.microbatch, a.stage, a.kind)


@st.composite
def _valid(draw, devices, microbatches, chunks, placements, bidirectional, backward, overlaps,
           comm, idle, reduce_grad, with_costs, with_memory) -> Schedule:
    D = draw(devices)
    M = draw(microbatches)
    v = draw(chunks)
    shape = draw(placements)
    if shape == "list":
        S = draw(st.integers(1, D * v))
        spec: str | tuple[int, ...] = tuple(draw(st.lists(st.integers(0, D - 1), min_size=S, max_size=S)))
    else:
        S = D * v
        spec = shape
    if draw(bidirectional):
        mirror = tuple(D - 1 - d for d in stage_devices(spec, D, S))
        route = draw(st.lists(st.integers(0, 1), min_size=M, max_size=M))
        placement = Placement.bidirectional([spec, mirror], route, D, S)
    else:
        placement = Placement.of(spec, D, S)
    mode = draw(backward)
    if mode == "mixed":
        split = draw(st.lists(st.booleans(), min_size=S * M, max_size=S * M))
    else:
        split = [mode == "split"] * (S * M)
    fuse = draw(overlaps)
    semantics = draw(comm)

    def device(a: Action) -> int:
        assert a.stage is not None  # every node is a plain action with its stage
        return placement.device(a.stage, a.microbatch)

    # The nodes (compute leaves and communication) and what each needs, from deps.NEEDS.
    nodes: set[Action] = set()
    for s in range(S):
        for i in range(M):
            nodes.add(Action(s, F, i))
            if split[s * M + i]:
                nodes.update((Action(s, I, i), Action(s, W, i)))
            else:
                nodes.add(Action(s, B, i))
    prereqs: dict[Action, list[Action]] = {}
    todo = list(nodes)
    while todo:
        a = todo.pop()
        assert a.stage is not None  # a plain action with its stage
        pre = prereqs[a] = []
        for need, ps in deps.needs(a, S):
            p = next(Action(ps, k, a.microbatch) for k in need.kinds if Action(ps, k, a.microbatch) in nodes)
            if semantics != "none" and need.recv and device(p) != device(a):
                recv = Action(a.stage, need.recv, a.microbatch)
                send_kind, offset = deps.MATCH[need.recv]
                send = Action(a.stage + offset, send_kind, a.microbatch)
                for c in (send, recv):
                    if c not in nodes:
                        nodes.add(c)
                        todo.append(c)
                p = recv
            pre.append(p)
    waiting = {a: len(pre) for a, pre in prereqs.items()}
    dependents: dict[Action, list[Action]] = {}
    for a, pre in prereqs.items():
        for p in pre:
            dependents.setdefault(p, []).append(a)

    # The randomized topological execution: emit any ready node, append it to its device.
    ready = sorted((a for a, n in waiting.items() if n == 0), key=_kind_rank)
    order: list[list[Action | None]] = [[] for _ in range(D)]

    def finish(a: Action) -> None:
        for c in dependents.get(a, ()):
            waiting[c] -= 1
            if waiting[c] == 0:
                ready.append(c)

    while ready:
        a = ready.pop(draw(st.integers(0, len(ready) - 1)))
        entry = a
        if fuse and a.kind in (F, B, I):
            wanted = (B, I) if a.kind == F else (F,)
            partners = [b for b in ready if b.kind in wanted and device(b) == device(a)]
            if partners and draw(st.booleans()):
                b = partners[draw(st.integers(0, len(partners) - 1))]
                ready.remove(b)
                entry = overlap(a, b) if a.kind == F else overlap(b, a)
        order[device(a)].append(entry)
        for x in entry.leaves():
            finish(x)
        if semantics == "rendezvous" and a.kind in _SENDS:
            # Post the RECV right away: everything before it on its device is done, so the
            # SEND's rendezvous wait is satisfied (and the RECV's data wait too).
            peer_kind, offset = deps.MATCH[a.kind]
            assert a.stage is not None  # a plain SEND
            recv = Action(a.stage + offset, peer_kind, a.microbatch)
            ready.remove(recv)
            order[device(recv)].append(recv)
            finish(recv)
        ready.sort(key=_kind_rank)

    if draw(reduce_grad):
        for row in order:
            last: dict[int, int] = {}
            for pos, e in enumerate(row):
                assert e is not None  # the idle slots are added below
                for x in e.leaves():
                    if x.kind in (B, I, W):
                        assert x.stage is not None  # a compute leaf
                        last[x.stage] = pos
            inserts: list[tuple[int, int]] = []
            for s in sorted(last):
                if draw(st.booleans()):
                    inserts.append((draw(st.integers(last[s] + 1, len(row))), s))
            for at, s in sorted(inserts, reverse=True):
                row.insert(at, Action(s, REDUCE_GRAD, None))
    if draw(idle):
        for _ in range(draw(st.integers(0, 3))):
            row = order[draw(st.integers(0, D - 1))]
            row.insert(draw(st.integers(0, len(row))), None)

    cost = None
    if isinstance(with_costs, SearchStrategy):
        cost = draw(with_costs)
    elif with_costs:
        cost = draw(costs(stages=S))
    memory = None
    if isinstance(with_memory, SearchStrategy):
        memory = draw(with_memory)
    elif with_memory:
        memory = draw(memory_models(stages=S))
    return Schedule(
        D, S, M, tuple(tuple(row) for row in order), placement, name="random", costs=cost,
        memory=memory, comm_semantics=None if semantics == "none" else semantics,
    )


# --------------------------------------------------------------------------- batches


def with_batches(schedule: Schedule) -> SearchStrategy[Schedule]:
    """``schedule`` with each run of consecutive SEND/RECV actions on a device cut, at random
    places, into ``BATCH`` actions (docs/spec.md 10); some operations stay alone."""
    return _with_batches(schedule)


@st.composite
def _with_batches(draw, schedule: Schedule) -> Schedule:
    from .model import batch

    def cut(run: list[Action], into: list[Action | None]) -> None:
        """``run`` into ``into`` as BATCH actions of random lengths (a lone one sometimes plain)."""
        while run:
            k = draw(st.integers(1, len(run)))
            part = run[:k]
            del run[:k]
            into.extend(part if len(part) == 1 and draw(st.booleans()) else [batch(*part)])

    rows = []
    for row in schedule.order:
        new: list[Action | None] = []
        run: list[Action] = []
        for a in row:
            if a is not None and a.sub is None and a.kind in COMM_KINDS:
                run.append(a)
                continue
            cut(run, new)
            new.append(a)
        cut(run, new)
        rows.append(tuple(new))
    return schedule.with_(order=tuple(rows))


# --------------------------------------------------------------------------- 2.15's waits


def with_waits(schedule: Schedule, *, placement: str | None = None) -> SearchStrategy[Schedule]:
    """``schedule`` (which lists its communication) with a wait per send and per gradient
    reduction, as PyTorch 2.15's runtime needs them (docs/spec.md 9.2, 9.3).

    ``placement``: ``"pytorch"`` puts each wait where PyTorch's lowering does (a forward
    send's right after its stage's backward of that microbatch, a backward send's at the end
    of the device's list: :func:`schedverify.lowering.add_wait_send`), ``"random"`` at a
    random place after its send, None (default) draws per wait.  A WAIT_REDUCE_GRAD goes
    right after its REDUCE_GRAD, or (random) at a random place before the device's next
    REDUCE_GRAD.  Waits already in ``schedule`` are kept as they are."""
    if placement not in (None, "pytorch", "random"):
        raise InvalidArgument(f"with_waits: placement must be 'pytorch', 'random' or None, got {placement!r}")
    return _with_waits(schedule, placement)


@st.composite
def _with_waits(draw, schedule: Schedule, placement: str | None) -> Schedule:
    from .lowering import add_wait_send
    from .model import SEND_WAIT_KINDS, WAIT_OF, WAIT_REDUCE_GRAD

    rows = [[a for a in row if a is not None] for row in schedule.order]
    if not any(a.kind in SEND_WAIT_KINDS for row in rows for a in row):
        pytorch = add_wait_send(dict(enumerate(rows)))
        out = []
        for d, row in enumerate(rows):
            keep = list(pytorch[d])
            # each wait: PyTorch's place, or a random one after its send
            for a in row:
                if a.kind not in _SENDS or a.microbatch is None:
                    continue
                wait = Action(a.stage, WAIT_OF[a.kind], a.microbatch)
                if wait not in keep:
                    continue  # a second send of one label: PyTorch's pass names it once
                if placement == "pytorch" or (placement is None and draw(st.booleans())):
                    continue
                keep.remove(wait)
                at = keep.index(a) + 1
                keep.insert(draw(st.integers(at, len(keep))), wait)
            out.append(keep)
        rows = out
    final = []
    for row in rows:
        new = list(row)
        reduces = [k for k, a in enumerate(new) if a.kind == REDUCE_GRAD]
        for j, k in reversed(list(enumerate(reduces))):
            s = new[k].stage
            if any(a.kind == WAIT_REDUCE_GRAD and a.stage == s for a in new):
                continue
            limit = reduces[j + 1] if j + 1 < len(reduces) else len(new)
            at = k + 1
            if placement == "random" or (placement is None and draw(st.booleans())):
                at = draw(st.integers(k + 1, limit))
            new.insert(at, Action(s, WAIT_REDUCE_GRAD, None))
        final.append(tuple(new))
    return schedule.with_(order=tuple(final))


# --------------------------------------------------------------------------- any schedule


def schedules(**options) -> SearchStrategy[Schedule]:
    """Any schedule, valid or not: valid draws (``options`` go to :func:`valid_schedules`),
    single mutations of them, and arbitrary orders of random actions (indices possibly out
    of range, malformed overlaps, bookkeeping actions).  Every action prints as an action
    string that parses back, so the result can be written to a file."""
    valid = valid_schedules(**options)
    return st.one_of(
        valid,
        valid.flatmap(mutations).map(lambda m: m.schedule),
        _arbitrary(),
    )


@st.composite
def _arbitrary(draw) -> Schedule:
    D = draw(st.integers(1, 4))
    S = draw(st.integers(1, 6))
    M = draw(st.integers(1, 4))
    stage = st.integers(0, S + 1)
    mb = st.integers(0, M + 1)
    # (lambdas, not Action itself: st.builds would also invent the ``sub`` field)
    simple = st.builds(lambda s, k, i: Action(s, k, i), stage,
                       st.sampled_from(sorted(ALL_KINDS - BOOKKEEPING_KINDS - COMPOSITE_KINDS)), mb)
    book = st.builds(lambda s, k: Action(s, k), stage, st.sampled_from(sorted(BOOKKEEPING_KINDS)))
    fused = st.builds(overlap, simple, simple)
    action = st.one_of(simple, simple, book, fused, st.none())
    order = draw(st.lists(st.lists(action, max_size=12), min_size=D, max_size=D))
    spec = draw(st.one_of(st.sampled_from(["loop", "v"]),
                          st.lists(st.integers(0, D - 1), min_size=S, max_size=S).map(tuple)))
    return Schedule(D, S, M, tuple(tuple(r) for r in order), Placement.of(spec, D, S), name="arbitrary",
                    comm_semantics=draw(st.sampled_from([None, *COMM_SEMANTICS])))


# --------------------------------------------------------------------------- mutations


class Mutation(NamedTuple):
    """One single-step change to a valid schedule and what checking it must report.

    ``valid``: whether the mutated schedule is still valid.  ``must``: codes the check must
    report.  ``may``: codes it may report as well (the mutation can, but need not, cause
    them); anything outside ``must | may`` is a checker bug.  An invalid mutation with an
    empty ``must`` says "one or more of ``may``" (for example a deadlock in a rendezvous
    schedule, reported as SV402 or SV403 depending on which cycle the checker meets first).

    The tags come from first principles (docs/spec.md), not from the checker: a reorder is judged
    by running the devices naively, so a swap that deadlocks is tagged SV402 and one that
    does not is tagged "still valid".
    """

    kind: str
    description: str
    schedule: Schedule
    must: frozenset[str]
    may: frozenset[str] = frozenset()
    valid: bool = False

    @property
    def tag(self) -> str:
        if self.valid:
            return "still valid"
        may = ", ".join(sorted(self.may))
        if not self.must:
            return f"one or more of {may}"
        text = ", ".join(sorted(self.must))
        return f"{text} (and possibly {may})" if may else text

    def accepts(self, codes) -> bool:
        """Whether a check that reported ``codes`` (a Report or an iterable of code strings)
        agrees with this mutation's tag."""
        found = set(codes.codes() if hasattr(codes, "codes") else codes)
        if self.valid:
            return not found
        return bool(found) and self.must <= found <= self.must | self.may


def _mutation(kind: str, description: str, schedule: Schedule, must=frozenset(), may=frozenset()) -> Mutation:
    must, may = frozenset(must), frozenset(may)
    return Mutation(kind, description, schedule, must, may - must, valid=not must and not may)


def mutations(schedule: Schedule, *, kinds: Sequence[str] = MUTATION_KINDS) -> SearchStrategy[Mutation]:
    """Single-step mutations of ``schedule``, which must be valid (as
    :func:`valid_schedules` draws it; checked under its own ``comm_semantics``).

    Kinds: ``swap`` two actions on one device; ``move`` an action to another device;
    ``drop`` an action; ``duplicate`` one (right after itself, or anywhere);
    ``reorder-comm`` move a SEND/RECV within its device; ``change-index`` set a stage or
    microbatch to another value, in range or not; ``insert-idle`` add a null slot.  Kinds
    that do not apply to the schedule (reorder-comm without communication, move with one
    device) are skipped.  Use as ``valid_schedules().flatmap(mutations)``.
    """
    from .check import check

    bad = [k for k in kinds if k not in MUTATION_KINDS]
    if bad or not kinds:
        raise InvalidArgument(f"kinds must be some of {MUTATION_KINDS}, got {kinds!r}")
    if not isinstance(schedule, Schedule):
        raise InvalidArgument(f"mutations needs a Schedule, got {type(schedule).__name__}")
    report = check(schedule)
    if not report.is_valid:
        raise InvalidArgument(f"mutations needs a valid schedule; {schedule.name or 'this one'} has "
                              f"{report.violations[0]}")
    entries = [(d, p, a) for d, row in enumerate(schedule.order) for p, a in enumerate(row) if a is not None]
    applicable = [k for k in kinds if _applies(k, schedule, entries)]
    if not applicable:
        raise InvalidArgument(f"none of the mutation kinds {tuple(kinds)} applies to this schedule")
    return st.sampled_from(applicable).flatmap(lambda k: _MUTATORS[k](schedule, entries))


def _applies(kind: str, s: Schedule, entries) -> bool:
    if kind == "insert-idle":
        return True
    real = [e for e in entries if e[2].kind not in BOOKKEEPING_KINDS]
    if not real:
        return False
    if kind == "swap":
        return any(sum(1 for a in row if a is not None) >= 2 for row in s.order)
    if kind == "move":
        return s.devices >= 2
    if kind == "reorder-comm":
        return any(a.kind in COMM_KINDS and sum(1 for x in s.order[d] if x is not None) >= 2
                   for d, _, a in entries)
    if kind == "change-index":
        return any(a.sub is None for _, _, a in real)
    return True


def _replace_row(s: Schedule, d: int, row) -> Schedule:
    order = list(s.order)
    order[d] = tuple(row)
    return s.with_(order=tuple(order))


def _context(s: Schedule) -> tuple[frozenset[str], bool]:
    """Codes a disturbed order may add besides the main one, for this schedule's features."""
    rdv = s.comm_semantics == "rendezvous" and s.has_explicit_comm
    extra = {dx.RUNS_BEFORE_DEPENDENCY.code, dx.DEADLOCK.code}
    if rdv:
        extra.add(dx.RENDEZVOUS_DEADLOCK.code)
    if s.has_explicit_comm:
        extra.add(dx.MISSING_RECV.code)
    if any(a is not None and a.kind == REDUCE_GRAD for row in s.order for a in row):
        extra.add(dx.REDUCE_GRAD_TOO_EARLY.code)
    return frozenset(extra), rdv


def _drop_codes(a: Action) -> frozenset[str]:
    """What removing ``a`` from a valid schedule causes, exactly."""
    if a.kind in (F, B, I, W, OVERLAP_F_B):
        return frozenset({dx.MISSING_ACTION.code})  # the pair lacks it; nothing else changes
    if a.kind in _SENDS:
        return frozenset({dx.UNMATCHED_RECV.code})
    if a.kind in (RECV_F, RECV_B):
        # its SEND is unmatched and its consumer (on another device) has no RECV
        return frozenset({dx.UNMATCHED_SEND.code, dx.MISSING_RECV.code})
    return frozenset()  # REDUCE_GRAD is optional


def _pick(draw, entries, keep=lambda a: True):
    pool = [e for e in entries if keep(e[2])]
    return pool[draw(st.integers(0, len(pool) - 1))]


@st.composite
def _swap(draw, s: Schedule, entries) -> Mutation:
    rows = [d for d, row in enumerate(s.order) if sum(1 for a in row if a is not None) >= 2]
    d = draw(st.sampled_from(rows))
    filled = [p for p, a in enumerate(s.order[d]) if a is not None]
    p = draw(st.sampled_from(filled[:-1]))
    q = draw(st.sampled_from([x for x in filled if x > p]))
    row = list(s.order[d])
    row[p], row[q] = row[q], row[p]
    new = _replace_row(s, d, row)
    must, may = _order_codes(new)
    return _mutation("swap", f"swap {row[q]} and {row[p]} (device {d}, positions {p} and {q})", new, must, may)


@st.composite
def _reorder_comm(draw, s: Schedule, entries) -> Mutation:
    busy = {d for d, row in enumerate(s.order) if sum(1 for x in row if x is not None) >= 2}
    d, p, a = _pick(draw, [e for e in entries if e[0] in busy], lambda a: a.kind in COMM_KINDS)
    row = list(s.order[d])
    del row[p]
    q = draw(st.integers(0, len(row)).filter(lambda q: q != p))
    row.insert(q, a)
    new = _replace_row(s, d, row)
    must, may = _order_codes(new)
    return _mutation("reorder-comm", f"move {a} on device {d} from position {p} to {q}", new, must, may)


@st.composite
def _move(draw, s: Schedule, entries) -> Mutation:
    d, p, a = _pick(draw, entries, lambda a: a.kind not in BOOKKEEPING_KINDS)
    e = draw(st.integers(0, s.devices - 2))
    e += e >= d
    order = [list(r) for r in s.order]
    del order[d][p]
    q = draw(st.integers(0, len(order[e])))
    order[e].insert(q, a)
    new = s.with_(order=tuple(map(tuple, order)))
    extra, _ = _context(s)
    return _mutation("move", f"move {a} from device {d} (position {p}) to device {e} (position {q})",
                    new, frozenset({dx.WRONG_DEVICE.code}), extra)


@st.composite
def _drop(draw, s: Schedule, entries) -> Mutation:
    d, p, a = _pick(draw, entries)
    row = list(s.order[d])
    del row[p]
    return _mutation("drop", f"drop {a} (device {d}, position {p})", _replace_row(s, d, row), _drop_codes(a))


@st.composite
def _duplicate(draw, s: Schedule, entries) -> Mutation:
    d, p, a = _pick(draw, entries, lambda a: a.kind not in BOOKKEEPING_KINDS)
    must = frozenset({dx.DUPLICATE_ACTION.code})
    order = [list(r) for r in s.order]
    if draw(st.booleans()):
        # Later on its own device: the copy needs what the original needed, all done by
        # then, and nothing resolves to the copy, so only the duplicate is reported, unless
        # the copy is a backward that lands after its stage's REDUCE_GRAD.
        q = draw(st.integers(p + 1, len(order[d])))
        stages = {x.stage for x in a.leaves() if x.kind in (B, I, W)}
        if any(b is not None and b.kind == REDUCE_GRAD and b.stage in stages for b in order[d][:q]):
            must |= {dx.REDUCE_GRAD_TOO_EARLY.code}
        order[d].insert(q, a)
        return _mutation("duplicate", f"repeat {a} on device {d} at position {q} (first at {p})",
                        s.with_(order=tuple(map(tuple, order))), must)
    e = draw(st.integers(0, s.devices - 1))
    q = draw(st.integers(0, len(order[e])))
    order[e].insert(q, a)
    extra, _ = _context(s)
    # Whichever copy comes first in device order becomes the one the others depend on, so
    # the copy may also be misplaced or disturb the order.
    return _mutation("duplicate", f"copy {a} (device {d}, position {p}) to device {e}, position {q}",
                    s.with_(order=tuple(map(tuple, order))), must, extra | {dx.WRONG_DEVICE.code})


@st.composite
def _change_index(draw, s: Schedule, entries) -> Mutation:
    d, p, a = _pick(draw, entries, lambda a: a.sub is None and a.kind not in BOOKKEEPING_KINDS)
    field = draw(st.sampled_from(["microbatch", "stage"]))
    limit = s.microbatches if field == "microbatch" else s.stages
    old = getattr(a, field)
    out_of_range = limit == 1 or a.kind in COMM_KINDS or draw(st.booleans())
    new_value = limit + draw(st.integers(0, 3)) if out_of_range else \
        draw(st.integers(0, limit - 2).map(lambda k: k + (k >= old)))
    b = a._replace(**{field: new_value})
    row = list(s.order[d])
    row[p] = b
    new = _replace_row(s, d, row)
    what = f"change {a} to {b} (device {d}, position {p})"
    if out_of_range:
        # An out-of-range action is reported and otherwise ignored: as if dropped.
        return _mutation("change-index", what, new, frozenset({dx.INDEX_OUT_OF_RANGE.code}) | _drop_codes(a))
    # A compute action moved to another pair: its own pair lacks it (SV201), and the other
    # pair has it twice (SV202) or mixes B with I/W (SV203).
    extra, _ = _context(s)
    leaves = {x for row_ in s.order for e in row_ if e is not None for x in e.leaves()}
    misplaced = s.placement.device(b.stage, b.microbatch) != d
    must = {dx.MISSING_ACTION.code}
    may = set(extra)
    if b in leaves:
        must.add(dx.DUPLICATE_ACTION.code)
        if misplaced:  # reported only when the copy comes first in device order
            may.add(dx.WRONG_DEVICE.code)
    else:
        must.add(dx.MIXED_BACKWARD.code)
        if misplaced:
            must.add(dx.WRONG_DEVICE.code)
    return _mutation("change-index", what, new, frozenset(must), frozenset(may - must))


@st.composite
def _insert_idle(draw, s: Schedule, entries) -> Mutation:
    d = draw(st.integers(0, s.devices - 1))
    row = list(s.order[d])
    q = draw(st.integers(0, len(row)))
    row.insert(q, None)
    return _mutation("insert-idle", f"insert an idle slot on device {d} at position {q}",
                    _replace_row(s, d, row), frozenset())


_MUTATORS = {
    "swap": _swap, "move": _move, "drop": _drop, "duplicate": _duplicate,
    "reorder-comm": _reorder_comm, "change-index": _change_index, "insert-idle": _insert_idle,
}


# --------------------------------------------------------------------------- the order oracle


def _order_codes(s: Schedule) -> tuple[frozenset[str], frozenset[str]]:
    """(must, may) for a schedule whose actions are complete and placed, so only their order
    can be wrong: judged from docs/spec.md directly, by running the devices naively.

    An action placed before a same-device action it needs is SV401 (the checker may also
    find a deadlock around it); a REDUCE_GRAD before a backward of its stage is SV404; with
    no such inversion, the order deadlocks (SV402, or SV403 when only rendezvous waits make
    it hang) exactly when the naive run gets stuck.
    """
    rdv = s.comm_semantics == "rendezvous" and s.has_explicit_comm
    explicit = s.has_explicit_comm
    rows = [[a for a in row if a is not None] for row in s.order]
    where: dict[Action, tuple[int, int]] = {}
    for d, row in enumerate(rows):
        for k, a in enumerate(row):
            if a.kind not in BOOKKEEPING_KINDS:
                for x in a.leaves():
                    where[x] = (d, k)
    must: set[str] = set()
    may: set[str] = set()
    waits: dict[tuple[int, int], list[tuple[int, int]]] = {}
    posts: dict[tuple[int, int], list[tuple[int, int]]] = {}
    inverted = False
    for d, row in enumerate(rows):
        for k, a in enumerate(row):
            if a.kind == REDUCE_GRAD:
                if any(x.stage == a.stage and x.kind in (B, I, W) for b in row[k + 1:] for x in b.leaves()):
                    must.add(dx.REDUCE_GRAD_TOO_EARLY.code)
                continue
            if a.kind in BOOKKEEPING_KINDS:
                continue
            for x in a.leaves():
                for need, ps in deps.needs(x, s.stages):
                    producer = next(where[y] for kind in need.kinds
                                    if (y := Action(ps, kind, x.microbatch)) in where)
                    if explicit and need.recv and producer[0] != d:
                        producer = where[Action(x.stage, need.recv, x.microbatch)]
                    if producer[0] == d:
                        inverted |= producer[1] > k
                    else:
                        waits.setdefault((d, k), []).append(producer)
                if rdv and x.kind in _SENDS:
                    peer_kind, offset = deps.MATCH[x.kind]
                    assert x.stage is not None  # complete and placed: a plain SEND
                    recv = where[Action(x.stage + offset, peer_kind, x.microbatch)]
                    if recv[0] != d:
                        posts.setdefault((d, k), []).append(recv)
    if inverted:
        must.add(dx.RUNS_BEFORE_DEPENDENCY.code)
        may.add(dx.DEADLOCK.code)
        if rdv:
            may.add(dx.RENDEZVOUS_DEADLOCK.code)
    elif not _runs(rows, waits, posts):
        if rdv and _runs(rows, waits, {}):
            must.add(dx.RENDEZVOUS_DEADLOCK.code)
        elif rdv:
            # A cycle of data waits exists, but the checker may meet (and break) a cycle
            # through a rendezvous wait first: it reports SV402, SV403 or both.
            may.update((dx.DEADLOCK.code, dx.RENDEZVOUS_DEADLOCK.code))
        else:
            must.add(dx.DEADLOCK.code)
    return frozenset(must), frozenset(may)


def _runs(rows, waits, posts) -> bool:
    """Run every device whose next action's waits are done until none can move: True when
    all finish.  A rendezvous post (e, k) is satisfied once device e has reached position k."""
    done = [0] * len(rows)
    moved = True
    while moved:
        moved = False
        for d, row in enumerate(rows):
            while done[d] < len(row):
                here = (d, done[d])
                if all(done[e] > k for e, k in waits.get(here, ())) and \
                        all(done[e] >= k for e, k in posts.get(here, ())):
                    done[d] += 1
                    moved = True
                else:
                    break
    return all(done[d] == len(row) for d, row in enumerate(rows))
