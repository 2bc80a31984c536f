"""The compiled dependency graph and the as-soon-as-possible sweep.

``compile_graph`` flattens a schedule into a :class:`Graph`: columns indexed by action in
device order (device, position, kind code, stage, the action on another device each one
waits for) and the raw facts that :mod:`schedverify.check` turns into Violations
(duplicates, misplaced actions, same-device inversions, ...), as action indices.

One definition, two implementations:

- the reference, :func:`_reference` below: docs/spec.md sections 3 and 4 one action at a time,
  with the dependency rules read from :mod:`schedverify.deps`.  It takes every schedule, and
  it is the one to read.
- ``compile_plain`` in the optional compiled kernel (schedverify/_kernel.c, reached through
  :mod:`schedverify._accel`), for the common case only: every action a single F, B, I, W,
  SEND or RECV in range, on its placed device, no duplicate, no pair mixing B with I/W, at
  most one wait on another device, and (under eager semantics) every SEND/RECV matched and
  received; over a schedule's columns also UNSHARD, RESHARD and REDUCE_GRAD on
  a device holding their stage (what PyTorch's lowering adds).  It declines anything else,
  so the facts it leaves empty are empty.

Both build the same frozen Graph, every field with the same meaning whichever built it;
tests/test_graph.py and tests/test_kernel.py hold them equal field by field.

``sweep`` runs every device's list in order, each action as soon as its device is free and
its dependencies have ended (docs/spec.md section 4).  It is both the timeline and the deadlock
detector: when no device can move, the devices' waits form a cycle, which is the witness.
Everything is linear in the number of actions; only cross-device dependencies are stored,
since a same-device dependency that comes earlier is implied by device order.
"""

from __future__ import annotations

from array import array
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, cast

from . import _accel
from . import deps as rules
from .grammar import CODED_KINDS, COLUMN_KINDS, COSTED_KINDS, INDEX_TYPECODE, KIND_CODE, NCODES, PlainRows
from .lazy import LazyField, Later, given
from .model import (
    B,
    BOOKKEEPING_KINDS,
    COMM_KINDS,
    F,
    I,
    OVERLAP_F_B,
    BATCH,
    REDUCE_GRAD,
    SEND_B,
    SEND_F,
    SEND_WAIT_KINDS,
    WAIT_REDUCE_GRAD,
    W,
    Action,
    Schedule,
    malformation,
    per_stage,
)

# The integer codes of the kinds another action can need are the grammar's (KIND_CODE).
_KINDS_BY_CODE = CODED_KINDS
_SEND_CODES = (KIND_CODE[SEND_F], KIND_CODE[SEND_B])
#: What an entry of each column code past the coded kinds is, for the kernel's
#: compile_columns (its ROLE_* values): 0 bookkeeping (UNSHARD, RESHARD), 1 REDUCE_GRAD
#: (Graph.reduce_grads), 2 WAIT_REDUCE_GRAD (Graph.reduce_waits), 3 a send's wait
#: (Graph.send_waits), as _bookkeeping and _send_wait below sort them.
_COLUMN_ROLES = bytes({REDUCE_GRAD: 1, WAIT_REDUCE_GRAD: 2}.get(k, 3 if k in SEND_WAIT_KINDS else 0)
                      for k in COLUMN_KINDS[NCODES:])

#: deps.NEEDS by kind code: per code, its needs as (producer stage offset, producer codes
#: (the second an alternative, as B or I), the code of the RECV that stands in for a producer
#: on another device, or -1).  The reference and the kernel read this one table.
_NEEDS_BY_CODE = tuple(
    tuple((n.offset, tuple(KIND_CODE[k] for k in n.kinds), KIND_CODE[n.recv] if n.recv else -1)
          for n in rules.NEEDS.get(kind, ()))
    for kind in _KINDS_BY_CODE)
#: deps.MATCH by kind code: (the peer's code, the peer's stage offset), or None.  The kernel
#: reads a code with a peer as communication (allowed under eager semantics only).
_MATCH_BY_CODE = tuple((KIND_CODE[rules.MATCH[k][0]], rules.MATCH[k][1]) if k in rules.MATCH else None
                       for k in _KINDS_BY_CODE)
#: The pairs of kind codes that one (stage, microbatch) may not both have (docs/spec.md 3.3: a
#: full backward B, or a split one, I and W), and per code the codes it may not meet.
_MIXED_BY_CODE = ((KIND_CODE[B], KIND_CODE[I]), (KIND_CODE[B], KIND_CODE[W]))
_MIXED_WITH = tuple(tuple(b for a, b in _MIXED_BY_CODE if a == c) + tuple(a for a, b in _MIXED_BY_CODE if b == c)
                    for c in range(NCODES))


class KernelColumns:
    """A mixin for what holds the kernel's columns as memoryviews of its bytes (memoryviews
    cannot be pickled): pickled, each such column becomes an array of its format, which
    every reader of the column takes alike."""

    def __getstate__(self):
        return {k: array(v.format, v.tobytes()) if isinstance(v, memoryview) else v for k, v in vars(self).items()}

    def __setstate__(self, state) -> None:
        vars(self).update(state)


@dataclass(frozen=True)
class Graph(KernelColumns):
    """A schedule flattened for the engines.  ``i`` indexes actions in device order.

    A frozen record: whichever implementation built it, each field means what its comment
    says (the lists are not modified after compile_graph either).  A "leaf" is what an
    action runs: the action itself, or each half of an overlapped F;B.  A leaf's key is
    ``(stage * microbatches + microbatch) * NCODES + kind code`` (:meth:`key`)."""

    schedule: Schedule
    explicit_comm: bool  # the schedule lists SEND/RECV actions
    rendezvous: bool  # explicit_comm under rendezvous semantics (a SEND waits for its RECV)
    #: the actions in device order; compiled from the schedule's columns, made from its
    #: order on first read (:mod:`schedverify.lazy`)
    if TYPE_CHECKING:  # to mypy a plain field; at run time the lazy descriptor (no default)
        acts: list[Action]
    else:
        acts: LazyField[list[Action]] = LazyField()
    # The integer columns are arrays (array.array: code of typecode b, starts q, the others
    # i, 4 bytes an entry, or q where an entry does not fit in 32 bits: only the reference
    # takes such a schedule) or, from the kernel, memoryviews of its bytes in those formats
    # (its own allocation, on huge pages), so the kernel reads them as C arrays.
    if TYPE_CHECKING:  # the device of each action
        dev: array[int]
    else:  # (made on first read for a graph of a schedule's columns, as pos)
        dev: LazyField[array[int]] = LazyField()
    if TYPE_CHECKING:  # position in its device's row of schedule.order (idle slots count)
        pos: array[int]
    else:  # (made on first read for a graph of a schedule's columns, which have no idle slot)
        pos: LazyField[array[int]] = LazyField()
    starts: array[int]  # device d's actions are starts[d]:starts[d+1]
    #: kind code of each action that is a single action of one of the eight kinds with an
    #: int stage in range and a microbatch, else -1 (overlaps, bookkeeping, malformed ones)
    code: array[int] | memoryview[int]
    #: the stage of each action with a code; of another single action (bookkeeping, a send's
    #: wait, one out of range) its stage when an int of 32 bits, as a schedule's columns hold
    #: it, else -1 (an overlap: -1).  A reader of an entry's index reads its code first.
    stage: array[int] | memoryview[int]
    #: the microbatch of each action with a code when it is an int in range, else -1; of
    #: another single action its microbatch when an int >= 0 of 32 bits, else -1.  A graph
    #: of a schedule's columns holds the columns' own stage and mb bytes: no copy.
    mb: array[int] | memoryview[int]
    #: wait[i]: the first action on another device that action i needs, or n (none).  A
    #: need on the same device that comes earlier is implied by device order and not kept.
    #: Made on first read for a graph compiled for a run of PyTorch's runtime, which reads
    #: its data through the RECVs (:func:`compile_graph`'s ``wait_when_read``).
    if TYPE_CHECKING:
        wait: array[int] | memoryview[int]
    else:
        wait: LazyField[array[int] | memoryview[int]] = LazyField()
    #: further waits of the few actions that have more: i -> ((j, rendezvous?), ...).  A
    #: rendezvous wait (a SEND until its RECV is posted: until j ends on the peer) has no latency.
    more_waits: dict[int, tuple[tuple[int, bool], ...]]
    counts: list[int]  # per kind code, how many distinct in-range leaves of that kind
    # raw facts for the checker (empty: none)
    malformed: list[tuple[int, str]] = field(default_factory=list)  # (i, why)
    out_of_range: list[tuple[int, Action]] = field(default_factory=list)  # (i, leaf)
    duplicates: list[tuple[int, int]] = field(default_factory=list)  # (first i, repeat i)
    wrong_device: list[tuple[int, Action, int]] = field(default_factory=list)  # (i, leaf, expected)
    inversions: list[tuple[int, int]] = field(default_factory=list)  # i needs j, later on its device
    missing_recv: list[tuple[int, int, Action]] = field(default_factory=list)  # (i, producer j, recv)
    unmatched_comm: list[int] = field(default_factory=list)  # SEND/RECV in range without its peer
    reduce_grads: list[int] = field(default_factory=list)
    #: i of each well-formed, in-range, placed WAIT_REDUCE_GRAD and WAIT_SEND_F/WAIT_SEND_B
    #: (the send waits an int column: one per send of a 2.15 lowering)
    reduce_waits: list[int] = field(default_factory=list)
    send_waits: array[int] = field(default_factory=lambda: array("i"))
    #: the SEND/RECV of each BATCH, consecutive indices at the BATCH's position (a BATCH is
    #: laid out as its operations, docs/spec.md 10)
    batches: list[tuple[int, ...]] = field(default_factory=list)
    mixed: list[int] = field(default_factory=list)  # i of a B, I or W meeting its pair's other backward
    uncoded: array[int] = field(default_factory=lambda: array("i"))  # every i whose code is -1, in order

    @cached_property
    def producer(self) -> dict[int, int]:
        """key -> the first action that runs that leaf, over every well-formed leaf in range.
        Derived on first use, the same way for every graph, from the columns (``code``,
        ``stage``, ``mb``) and the leaves of the overlaps (the reference hands over the very
        index it built; tests/test_graph.py derives it again)."""
        S, M = self.schedule.stages, self.schedule.microbatches
        code, stage, mb = self.code, self.stage, self.mb
        coded = [i for i in range(self.n) if code[i] >= 0 and mb[i] >= 0]
        keys = [(stage[i] * M + mb[i]) * NCODES + code[i] for i in coded]
        out = dict(zip(reversed(keys), reversed(coded)))  # the first of each key wins
        acts = self.acts if self.overlapped else ()
        for i in self.overlapped:
            for x in _leaves(acts[i]) or ():
                key = _leaf_key(x, S, M)
                if key >= 0 and out.get(key, i) >= i:
                    out[key] = i
        return out

    def device_of(self, i: int) -> int:
        """``dev[i]``, found from ``starts`` (a device's actions are contiguous), so that a rule
        reading a few actions' devices does not make the column of a graph of columns."""
        return bisect_right(self.starts, i) - 1

    def stage_of(self, i: int) -> Any:
        """The stage action ``i`` names, coded or not (a bookkeeping action's too; None for
        an overlap), read off the schedule's columns when it was given so."""
        if self.code[i] >= 0:
            return self.stage[i]
        cols = self.schedule.columns
        if cols is not None:
            return memoryview(cols.stages).cast(INDEX_TYPECODE)[i]
        return self.acts[i].stage

    def kind_of(self, i: int) -> str:
        """The kind of action ``i`` (an overlap's or a batch's own kind), read off the
        schedule's columns when it was given so."""
        if self.code[i] >= 0:
            return CODED_KINDS[self.code[i]]
        cols = self.schedule.columns
        if cols is not None:
            return COLUMN_KINDS[cols.codes[i]]
        return self.acts[i].kind

    @cached_property
    def uncoded_leaves(self) -> list[int]:
        """Every i without a code that may run leaves of a kind with a cost or a memory
        effect (an overlap; a malformed or out-of-range action of a costed kind), in order:
        ``uncoded`` without the single actions of other kinds (bookkeeping, waits), whose
        duration and memory effects are 0.  For a schedule given as columns this is read off
        its codes (no Action is made to find it out): an uncoded entry there is bookkeeping or
        an action of a coded kind with an index out of range."""
        cols = self.schedule.columns
        if cols is not None:
            codes = cols.codes
            # the entries of codes past the coded kinds are all uncoded: when they are all the
            # uncoded ones (the common case, counted by byte), none is of a coded kind
            past = sum(codes.count(c) for c in range(NCODES, len(COLUMN_KINDS)))
            if past == len(self.uncoded):
                return []
            return [i for i in self.uncoded if codes[i] < NCODES]
        acts = self.acts if self.uncoded else ()
        return [i for i in self.uncoded if acts[i].sub is not None or acts[i].kind in COSTED_KINDS]

    @cached_property
    def overlapped(self) -> list[int]:
        """Every i of an entry with sub-actions (an OVERLAP_F_B, well-formed or not), in
        order: the only entries without a code that run leaves.  A schedule given as columns
        has none, so its Actions are not made to find that out."""
        if self.schedule.columns is not None:
            return []
        acts = self.acts
        return [i for i in self.uncoded if acts[i].sub is not None]

    @cached_property
    def waits(self) -> list[tuple[int, ...]]:
        """Per action, all its cross-device waits: ``j`` a data edge, ``~j`` a rendezvous
        edge (wait until ``j`` has ended on the peer device)."""
        n = self.n
        out: list[tuple[int, ...]] = [() if j == n else (j,) for j in self.wait]
        for i, extra in self.more_waits.items():
            out[i] += tuple(~j if sync else j for j, sync in extra)
        return out

    def key(self, stage: int, microbatch: int, kind: str) -> int:
        return (stage * self.schedule.microbatches + microbatch) * NCODES + KIND_CODE[kind]

    def find(self, stage: int, microbatch: int, kind: str) -> int | None:
        return self.producer.get(self.key(stage, microbatch, kind))

    @property
    def n(self) -> int:
        return len(self.code)  # (not dev: a graph of a schedule's columns makes it on demand)

    def names(self, indices: list[int]) -> list[str]:
        """``str`` of the actions at these indices."""
        cols = self._columns()
        if cols is not None:
            return cols.names(indices)
        kernel = _accel.kernel
        names = kernel.format_plain(self.acts, indices, Action) if kernel is not None else None
        return names if names is not None else list(map(str, map(self.acts.__getitem__, indices)))

    def namer(self) -> Graph | PlainRows:
        """What names this graph's actions as :meth:`names` does, holding no more of it than
        that: the schedule's columns for a graph of them (so that a report's critical path
        does not keep the graph), else the graph."""
        cols = self._columns()
        return self if cols is None else cols

    def _columns(self) -> PlainRows | None:
        """The schedule's columns when this graph's actions are theirs, one for one."""
        cols = self.schedule.columns
        return cols if cols is not None and isinstance(given(self, "acts"), _ActsOf) else None

    def position_of(self, i: int) -> int:
        """``pos[i]``, found from ``starts`` for a graph of a schedule's columns (rows without
        idle slots) when the column is not made, as :meth:`device_of`."""
        if isinstance(given(self, "pos"), _ByDevice):
            return i - self.starts[self.device_of(i)]
        return self.pos[i]

    def action(self, i: int) -> Action:
        """``acts[i]``, read off the schedule's columns when the list is not made (a rule or an
        explanation that names a few actions of a million)."""
        cols = self._columns()
        return self.acts[i] if cols is None else cols.action(i)

    def where(self, i: int) -> tuple[int, int, str]:
        return self.dev[i], self.pos[i], str(self.acts[i])


def compile_graph(schedule: Schedule, *, comm_semantics: str = "eager", fast: bool = True,
                  wait_when_read: bool = False) -> Graph:
    """Compile ``schedule``: with the compiled kernel when it is built, ``fast`` and the
    schedule its case (see the module's docstring), else (or when it declines) with the
    reference.  Both give the same Graph.  ``wait_when_read``: a graph for a run of
    PyTorch's runtime, whose ``wait`` column (4 bytes an action) the kernel's run does not
    read when only SEND/RECVs wait on another device (it takes the data through the RECVs):
    then the column is made when something first reads it, by compiling again."""
    kernel = _accel.kernel
    if fast and kernel is not None:
        pl = schedule.placement
        # the routes as they are (tuples, or compact sequences for huge sizes: the kernel
        # reads them only when the schedule is dense enough for its tables)
        rules_args = (schedule.stages, schedule.microbatches, tuple(pl.routes), pl.microbatch_route,
                      _NEEDS_BY_CODE, _MATCH_BY_CODE, _MIXED_BY_CODE, _KINDS_BY_CODE, comm_semantics == "eager")
        cols = schedule.columns
        lazy_wait = wait_when_read and cols is not None and cols.has_comm
        columns = (_compile_columns(kernel, cols, rules_args, keep_wait=not lazy_wait)
                   if cols is not None else kernel.compile_plain(schedule.order, *rules_args))
        if columns is not None:  # it declined every schedule with a fact it leaves empty
            (acts, dev, pos, starts, wait, counts, inversions, code, stage, explicit, uncoded, reduces, reduce_waits,
             waits, mb) = columns
            # the kernel's columns are bytes of int8 (code) and int32, read where they lie
            code = memoryview(code).cast("b")
            stage, mb = (memoryview(c).cast("i") for c in (stage, mb))
            # (made when first read: the recipe as Graph.acts's, dev's and pos's)
            wait = cast(Any, _WaitOf(schedule, rules_args)) if wait is None else memoryview(wait).cast("i")
            if cols is not None:  # d and i - starts[d]: not held through the check, which reads
                dev, pos = _ByDevice(starts, True), _ByDevice(starts, False)  # them to name a place
            else:
                dev, pos = memoryview(dev).cast("i"), memoryview(pos).cast("i")
            return Graph(schedule, explicit, False, cast(list, _ActsOf(schedule)) if acts is None else acts,
                         dev, pos, starts, code, stage, mb, wait, {}, counts, inversions=inversions,
                         uncoded=uncoded, reduce_grads=reduces, reduce_waits=reduce_waits, send_waits=waits)
    explicit = schedule.has_explicit_comm
    return _reference(schedule, explicit, explicit and comm_semantics == "rendezvous")


class _ByDevice(Later[array]):
    """Graph.dev (``device``) or Graph.pos of a graph compiled from the schedule's columns
    (rows without idle slots): each action's device, or its index on its device."""

    def __init__(self, starts: array, device: bool):
        self.starts, self.device = starts, device

    def make(self) -> array:
        out = array("i")
        for d, (lo, hi) in enumerate(zip(self.starts, self.starts[1:])):
            out.extend(array("i", [d]) * (hi - lo) if self.device else range(hi - lo))
        return out


def _compile_columns(kernel, cols: PlainRows, rules_args: tuple, keep_wait: bool = True):
    """The kernel's ``compile_columns`` over a schedule's columns (None: it declined)."""
    return kernel.compile_columns(cols.codes, cols.stages, cols.mbs, cols.lengths, *rules_args, COLUMN_KINDS,
                                  _COLUMN_ROLES, keep_wait)


class _WaitOf(Later[Any]):
    """Graph.wait of a graph compiled without it (``compile_graph``'s ``wait_when_read``):
    the kernel's column, from compiling the schedule's columns again."""

    def __init__(self, schedule: Schedule, rules_args: tuple):
        self.schedule, self.rules_args = schedule, rules_args

    def make(self) -> Any:
        kernel, cols = _accel.kernel, self.schedule.columns
        got = _compile_columns(kernel, cols, self.rules_args) if kernel is not None and cols is not None else None
        if got is not None:
            return memoryview(got[4]).cast("i")
        # read back where no kernel is (a pickled graph): the reference's, the same column
        return _reference(self.schedule, self.schedule.has_explicit_comm, False).wait


class _ActsOf(Later[list[Action]]):
    """Graph.acts of a graph compiled from the schedule's columns: its order, flattened
    (plain rows have no idle slot)."""

    def __init__(self, schedule: Schedule):
        self.schedule = schedule

    def make(self) -> list[Action]:
        return [a for row in self.schedule.order for a in row if a is not None]


# --------------------------------------------------------------------------- the reference


def _reference(schedule: Schedule, explicit: bool, rendezvous: bool) -> Graph:
    """docs/spec.md 3 and 4, one action at a time: lay the actions out in device order,
    index what each one runs (:func:`_index`), then resolve what each one needs
    (:func:`_link`)."""
    acts: list[Action] = []
    dev: list[int] = []
    pos: list[int] = []
    starts: list[int] = []
    facts = _Facts()
    for d, row in enumerate(schedule.order):
        starts.append(len(acts))
        if any(a is not None and a.kind == BATCH for a in row):
            _lay_out_batches(row, d, acts, dev, pos, facts)
            continue
        kept = [p for p, a in enumerate(row) if a is not None]  # None: an idle slot
        acts.extend([a for a in row if a is not None])
        dev.extend([d] * len(kept))
        pos.extend(kept)
    starts.append(len(acts))
    code, stage, mb, producer = _index(schedule, acts, dev, facts)
    wait, more_waits = _link(schedule, acts, dev, starts, code, stage, producer, explicit, rendezvous, facts)
    if explicit:
        facts.unmatched_comm = _unmatched_comm(schedule, acts, producer)
    found = {**vars(facts), "uncoded": array("i", facts.uncoded), "send_waits": array("i", facts.send_waits)}
    g = Graph(schedule, explicit, rendezvous, acts, array("i", dev), _int_column(pos), array("q", starts),
              array("b", code), _int_column(stage), _int_column(mb), _int_column(wait), more_waits, **found)
    # _index built Graph.producer's very value on its way (tests/test_graph.py derives it
    # again and compares): hand it to the cached property rather than derive it twice
    g.__dict__["producer"] = producer
    return g


def _int_column(values: list[int]) -> array[int]:
    """A Graph's int column: typecode i when every entry fits in 32 bits (always, but for
    indices beyond 2^31), else q."""
    try:
        return array("i", values)
    except OverflowError:
        return array("q", values)


def _lay_out_batches(row, d: int, acts: list[Action], dev: list[int], pos: list[int], facts: _Facts) -> None:
    """Lay out a row with BATCH entries: each well-formed BATCH as its operations, at its
    position, remembered as one batch; a malformed one stays one (malformed) entry."""
    for p, a in enumerate(row):
        if a is None:
            continue
        if a.kind == BATCH and a.sub and all(x.sub is None and x.kind in COMM_KINDS for x in a.sub):
            first = len(acts)
            acts.extend(a.sub)
            facts.batches.append(tuple(range(first, len(acts))))
            dev.extend([d] * len(a.sub))
            pos.extend([p] * len(a.sub))
            continue
        acts.append(a)
        dev.append(d)
        pos.append(p)


@dataclass
class _Facts:
    """The raw facts the reference collects on its way (Graph's fields of the same names)."""

    counts: list[int] = field(default_factory=lambda: [0] * NCODES)
    malformed: list[tuple[int, str]] = field(default_factory=list)
    out_of_range: list[tuple[int, Action]] = field(default_factory=list)
    duplicates: list[tuple[int, int]] = field(default_factory=list)
    wrong_device: list[tuple[int, Action, int]] = field(default_factory=list)
    inversions: list[tuple[int, int]] = field(default_factory=list)
    missing_recv: list[tuple[int, int, Action]] = field(default_factory=list)
    unmatched_comm: list[int] = field(default_factory=list)
    reduce_grads: list[int] = field(default_factory=list)
    reduce_waits: list[int] = field(default_factory=list)
    send_waits: list[int] = field(default_factory=list)
    batches: list[tuple[int, ...]] = field(default_factory=list)
    mixed: list[int] = field(default_factory=list)
    uncoded: list[int] = field(default_factory=list)


_MALFORMED, _OUT_OF_RANGE = -1, -2
#: an uncoded action's index is kept when it fits a schedule's index columns (INDEX_TYPECODE)
_INDEX_BOUND = 2 ** (8 * array(INDEX_TYPECODE).itemsize - 1)


def _leaves(a: Action) -> tuple[Action, ...] | None:
    """What entry ``a`` runs: itself, or an overlap's F and B (or I); None for an overlap
    that is not of that form (malformed)."""
    sub = a.sub
    if sub is None:
        return (a,)
    if (a.kind != OVERLAP_F_B or len(sub) != 2 or sub[0].kind != F or sub[1].kind not in (B, I)
            or any(x.sub is not None for x in sub)):
        return None
    return sub


def _leaf_key(x: Action, S: int, M: int) -> int:
    """Leaf ``x``'s key, or _MALFORMED (no such kind, an index not an int >= 0) or
    _OUT_OF_RANGE (an index beyond the schedule's sizes)."""
    c = KIND_CODE.get(x.kind)
    s, mb = x.stage, x.microbatch
    if c is None or type(s) is not int or type(mb) is not int or s < 0 or mb < 0:
        return _MALFORMED
    if s >= S or mb >= M:
        return _OUT_OF_RANGE
    return (s * M + mb) * NCODES + c


def _index(schedule: Schedule, acts: list[Action], dev: list[int],
           facts: _Facts) -> tuple[list[int], list[int], list[int], dict[int, int]]:
    """Each action's kind code, stage and microbatch, the producer index (see Graph.producer), and the
    facts about actions one by one: malformed, out of range, duplicate, misplaced, mixing
    B with I/W (docs/spec.md 3.1-3.3)."""
    S, M = schedule.stages, schedule.microbatches
    placement = schedule.placement
    routes, mroute = placement.routes, placement.microbatch_route
    n = len(acts)
    code = [-1] * n
    stage = [-1] * n
    mbs = [-1] * n
    producer: dict[int, int] = {}
    counts, uncoded, malformed = facts.counts, facts.uncoded, facts.malformed
    for i, a in enumerate(acts):
        s, kind, mb, sub = a
        c = KIND_CODE.get(kind, -1) if sub is None and mb is not None and type(s) is int and 0 <= s < S else -1
        if c >= 0:
            code[i] = c
            stage[i] = s  # type: ignore[assignment]  # c >= 0: s is an int
            if type(mb) is int and 0 <= mb < M:
                mbs[i] = mb
        else:
            uncoded.append(i)
            if sub is None:  # its own indices where they are ints, as a schedule's columns hold them
                if type(s) is int and -_INDEX_BOUND <= s < _INDEX_BOUND:
                    stage[i] = s
                if type(mb) is int and 0 <= mb < _INDEX_BOUND:
                    mbs[i] = mb
            if sub is None and kind in BOOKKEEPING_KINDS:
                _bookkeeping(schedule, i, a, dev[i], facts)
                continue
            if sub is None and kind in SEND_WAIT_KINDS:
                _send_wait(schedule, i, a, dev[i], facts)
                continue
        leaves = (a,) if sub is None else _leaves(a)
        if leaves is None:
            malformed.append((i, malformation(a)))
            continue
        for x in leaves:
            key = _leaf_key(x, S, M)
            if key < 0:
                if key == _MALFORMED:
                    malformed.append((i, malformation(x)))
                else:
                    facts.out_of_range.append((i, x))
                continue
            if key in producer:
                facts.duplicates.append((producer[key], i))
                continue
            producer[key] = i
            k = key % NCODES
            counts[k] += 1
            for other in _MIXED_WITH[k]:  # a full backward meets a split one (I or W) of its pair
                if key - k + other in producer:
                    facts.mixed.append(i)
                    break
            ls, lmb = x.stage, x.microbatch
            assert ls is not None and lmb is not None  # a leaf with a key has both
            expected = (routes[mroute[lmb]] if mroute is not None else routes[0])[ls]
            if expected != dev[i]:
                facts.wrong_device.append((i, x, expected))
    return code, stage, mbs, producer


def _bookkeeping(schedule: Schedule, i: int, a: Action, d: int, facts: _Facts) -> None:
    """UNSHARD, RESHARD, REDUCE_GRAD: a stage and no microbatch, on a device holding the stage."""
    if type(a.stage) is not int or a.stage < 0 or a.microbatch is not None:
        facts.malformed.append((i, malformation(a)))
    elif a.stage >= schedule.stages:
        facts.out_of_range.append((i, a))
    else:
        holders = schedule.placement.devices_of_stage(a.stage)
        if d not in holders:
            facts.wrong_device.append((i, a, min(holders)))
        if a.kind == REDUCE_GRAD:
            facts.reduce_grads.append(i)
        elif a.kind == WAIT_REDUCE_GRAD:
            facts.reduce_waits.append(i)


def _send_wait(schedule: Schedule, i: int, a: Action, d: int, facts: _Facts) -> None:
    """WAIT_SEND_F, WAIT_SEND_B: a stage and a microbatch, like the send they retire, on the
    device of that send (its stage's, on the microbatch's route)."""
    s, mb = a.stage, a.microbatch
    if type(s) is not int or s < 0 or type(mb) is not int or mb < 0:
        facts.malformed.append((i, malformation(a)))
    elif s >= schedule.stages or mb >= schedule.microbatches:
        facts.out_of_range.append((i, a))
    else:
        expected = schedule.placement.device(s, mb)
        if expected != d:
            facts.wrong_device.append((i, a, expected))
        else:
            facts.send_waits.append(i)


def _link(schedule: Schedule, acts: list[Action], dev: list[int], starts: list[int], code: list[int],
          stage: list[int], producer: dict[int, int], explicit: bool, rendezvous: bool,
          facts: _Facts) -> tuple[list[int], dict[int, tuple[tuple[int, bool], ...]]]:
    """Resolve each leaf's needs (deps.NEEDS) to action indices: the waits on other devices,
    and the facts about needs: same-device inversions, missing RECVs (docs/spec.md 3.4-3.5).
    A need whose producer is missing is no wait (the completeness rule reports it)."""
    S, M = schedule.stages, schedule.microbatches
    inversions, missing_recv = facts.inversions, facts.missing_recv
    n = len(acts)
    wait = [n] * n
    more_waits: dict[int, tuple[tuple[int, bool], ...]] = {}

    def needs(i: int, c: int, s: int, mb: int, found: list[tuple[int, bool]]) -> None:
        """Add the waits of leaf (c, s, mb) of action i to ``found``."""
        d = dev[i]
        for offset, codes, recv in _NEEDS_BY_CODE[c]:
            ps = s + offset
            if not 0 <= ps < S:
                continue  # no such need: the first or last stage
            base = (ps * M + mb) * NCODES
            j = producer.get(base + codes[0])
            if j is None and len(codes) > 1:
                j = producer.get(base + codes[1])
            if j is None:
                continue
            if j == i:  # an overlap's backward needs its own forward half: impossible
                inversions.append((i, i))
                continue
            if explicit and recv >= 0 and dev[j] != d:  # from another device, through a RECV
                r = producer.get((s * M + mb) * NCODES + recv)
                if r is None:
                    missing_recv.append((i, j, Action(s, _KINDS_BY_CODE[recv], mb)))
                else:
                    j = r
            if dev[j] == d:
                if j > i:
                    inversions.append((i, j))
                continue
            found.append((j, False))
        if rendezvous and c in _SEND_CODES:  # until its RECV is posted: the action before it ends
            peer_code, off = _MATCH_BY_CODE[c]  # type: ignore[misc]  # a SEND has a match
            if 0 <= s + off < S:
                r = producer.get(((s + off) * M + mb) * NCODES + peer_code)
                if r is not None and dev[r] != d and r > starts[dev[r]]:
                    found.append((r - 1, True))

    for i in range(n):
        found: list[tuple[int, bool]] = []
        c = code[i]
        if c >= 0:
            mb = acts[i].microbatch
            if type(mb) is int and 0 <= mb < M:
                needs(i, c, stage[i], mb, found)
        elif acts[i].sub is not None:
            for x in acts[i].sub:  # type: ignore[union-attr]  # not None, just tested
                k, s, mb = KIND_CODE.get(x.kind), x.stage, x.microbatch
                if k is not None and type(s) is int and type(mb) is int and 0 <= s < S and 0 <= mb < M:
                    needs(i, k, s, mb, found)
        if found:
            if not found[0][1]:
                wait[i] = found.pop(0)[0]
            if found:
                more_waits[i] = tuple(found)
    return wait, more_waits


def _unmatched_comm(schedule: Schedule, acts: list[Action], producer: dict[int, int]) -> list[int]:
    """Each SEND/RECV with indices in range whose peer (deps.MATCH) the schedule does not
    list (docs/spec.md 3.5)."""
    S, M = schedule.stages, schedule.microbatches
    out = []
    for i, (s, kind, mb, _) in enumerate(acts):
        if kind not in COMM_KINDS or type(s) is not int or type(mb) is not int:
            continue
        if not (0 <= s < S and 0 <= mb < M):
            continue  # reported as out of range
        peer_kind, off = rules.MATCH[kind]
        if not (0 <= s + off < S and (((s + off) * M + mb) * NCODES + KIND_CODE[peer_kind]) in producer):
            out.append(i)
    return out


# --------------------------------------------------------------------------- the sweep


@dataclass(frozen=True, eq=False)
class Times(KernelColumns, Later[list]):
    """Times as the compiled sweep returns them: ``values``, doubles (an array, or a
    memoryview of the kernel's bytes; int32 where every time is an int that fits, as
    ``runtime_plain`` may give them), and
    ``floats``, 1 where the time is a float and 0 where it is an int (exactly its double: at
    most 2^53).  The list Python's sweep makes is made from them on its first read
    (:mod:`schedverify.lazy`); the critical path and the makespan read the columns."""

    values: array | memoryview[float] | memoryview[int]
    floats: bytes

    def make(self) -> list:
        kernel = _accel.kernel
        if kernel is not None:
            made: list = kernel.times_list(self.values, self.floats)
            return made
        return [v if f else int(v) for v, f in zip(self.values, self.floats)]

    def at(self, i: int):
        """The list's entry ``i``, made alone."""
        v = self.values[i]
        return v if self.floats[i] else int(v)


@dataclass
class SweepResult:
    """Each action's start and end (lists: given as :class:`Times` by the compiled sweep, made
    on their first read) and the wait cycles that stalled it."""

    if TYPE_CHECKING:  # to mypy plain fields; at run time the lazy descriptors (no default)
        start: list[float]
        end: list[float]
    else:
        start: LazyField[list] = LazyField()
        end: LazyField[list] = LazyField()
    cycles: list[list[tuple[int, int]]]  # each cycle: [(head i, awaited j)], in wait order
    #: max(end, default=0), when the sweep that made the times knew it (the compiled one)
    makespan: float | None = field(default=None, compare=False)

    @property
    def completed(self) -> bool:
        return not self.cycles

    @property
    def times(self) -> tuple[Times, Times] | None:
        """The start and end columns, when the compiled sweep gave them."""
        start, end = given(self, "start"), given(self, "end")
        return (start, end) if isinstance(start, Times) and isinstance(end, Times) else None


def sweep(g: Graph, durations: list[float], comm: float = 0, *, max_cycles: int = 10) -> SweepResult:
    """Run the schedule as soon as possible.  On a stall, record the wait cycle, break it at
    one edge and go on, so that every independent deadlock is found (up to ``max_cycles``).

    A wait is reported as ``(i, j)``: action ``i`` needs ``j`` (a data edge, plus ``comm``
    when it crosses devices), or ``(i, ~j)``: a rendezvous SEND waits until its RECV is
    posted, that is until ``j`` has ended on the receiver's device (no latency).
    """
    kernel = _accel.kernel
    if kernel is not None and not g.more_waits and type(durations) is list:
        timed = kernel.sweep_plain(g.starts, g.wait, durations, comm)
        if timed is not None:  # it ran to the end: no cycle to find
            sv, sf, ev, ef, makespan = timed
            start: Any = Times(sv, sf)  # a recipe for the list field (lazy.py)
            end: Any = Times(ev, ef)
            return SweepResult(start, end, [], makespan)
    n = g.n
    starts, dev = g.starts, g.dev
    wait, more = g.wait, g.more_waits
    D = len(starts) - 1
    start = [0.0] * n
    end = [0.0] * n + [float("-inf")]  # end[n]: the "no producer" sentinel, always done
    done = bytearray(n + 1)
    done[n] = 1
    ptr = starts[:-1]
    clock: list[float] = [0] * D
    waiting: dict[int, list[int]] = {}
    ignored: set[tuple[int, int]] = set()
    cycles: list[list[tuple[int, int]]] = []
    blocked: dict[int, tuple[int, int]] = {}
    stack = list(range(D - 1, -1, -1))

    def block(i: int, j: int, edge: int, d: int) -> bool:
        """Register that device d waits at i for j; False if that wait was broken."""
        if ignored and (i, edge) in ignored:
            return False
        waiting.setdefault(j, []).append(d)
        blocked[d] = (i, edge)
        return True

    while True:
        while stack:
            d = stack.pop()
            i = ptr[d]
            stop = starts[d + 1]
            now = clock[d]
            while i < stop:
                j = wait[i]
                if done[j]:
                    st = end[j] + comm
                    if st < now:
                        st = now
                elif block(i, j, j, d):
                    break
                else:
                    st = now
                if more and i in more:
                    stuck = False
                    for j, sync in more[i]:
                        if not done[j]:
                            if block(i, j, ~j if sync else j, d):
                                stuck = True
                                break
                            continue
                        e = end[j] if sync else end[j] + comm
                        if e > st:
                            st = e
                    if stuck:
                        break
                start[i] = st
                now = st + durations[i]
                end[i] = now
                done[i] = 1
                if waiting:
                    woken = waiting.pop(i, None)
                    if woken is not None:
                        stack.extend(woken)
                i += 1
            ptr[d] = i
            clock[d] = now
            if i == stop:
                blocked.pop(d, None)
        if not blocked:
            break
        if len(cycles) >= max_cycles:
            cycles.append([])  # marks "more than max_cycles"
            break
        cycle = _find_cycle(blocked, dev)
        cycles.append(cycle)
        head, awaited = cycle[0]
        ignored.add((head, awaited))
        waiter_list = waiting.get(awaited if awaited >= 0 else ~awaited)
        if waiter_list is not None and dev[head] in waiter_list:
            waiter_list.remove(dev[head])
        del blocked[dev[head]]
        stack.append(dev[head])
    del end[n]
    return SweepResult(start, end, cycles)


def _find_cycle(blocked: dict[int, tuple[int, int]], dev: Sequence[int]) -> list[tuple[int, int]]:
    """Follow "device d waits for an action on device e" until a device repeats."""
    d = min(blocked)
    seen: dict[int, int] = {}
    path: list[int] = []
    while d not in seen:
        seen[d] = len(path)
        path.append(d)
        _, j = blocked[d]
        d = dev[j if j >= 0 else ~j]
        if d not in blocked:  # cannot happen: an unfinished device is blocked
            raise AssertionError("wait chain leads to a device that is not blocked")
    return [blocked[x] for x in path[seen[d]:]]


def explain_wait(g: Graph, i: int, j: int) -> str:
    """Why action ``i`` waits for ``j`` (as stored in ``waits``), in words."""
    if j < 0:
        return rules.RENDEZVOUS_WHY.format(dep=_posted_after(g, ~j))
    target = g.acts[j]
    S = g.schedule.stages
    for x in g.acts[i].leaves():
        for need, ps in rules.needs(x, S):
            for y in target.leaves():
                if y.stage == ps and y.microbatch == x.microbatch and y.kind in need.kinds:
                    return need.why.format(dep=str(target))
            if need.recv and target.kind == need.recv and target.stage == x.stage \
                    and target.microbatch == x.microbatch:
                return f"needs the input that {target} receives"
    return f"waits for {target}"


def _posted_after(g: Graph, k: int) -> str:
    """The RECV that follows action ``k`` on its device (a rendezvous SEND waits for it)."""
    nxt = g.acts[k + 1] if k + 1 < g.starts[g.dev[k] + 1] else None
    return f"{nxt} (after {g.acts[k]})" if nxt is not None else str(g.acts[k])


class CodeDurations(Sequence):
    """Each action's duration as its kind's, read off the graph's code column: the list
    :func:`durations_for` gives, without a Python object per action.  ``table``: one number
    per kind code, then the one for code -1 (bookkeeping), so that ``table[code[i]]`` reads
    both.  Indexing and iterating read the table; :meth:`tolist` makes the list."""

    def __init__(self, code: array[int] | memoryview[int], table: tuple):
        self.code, self.table = code, table

    def __len__(self) -> int:
        return len(self.code)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self.table[c] for c in self.code[i]]
        return self.table[self.code[i]]

    def __iter__(self):
        return map(self.table.__getitem__, self.code)

    def tolist(self) -> list:
        kernel = _accel.kernel
        return kernel.durations_plain(self.code, list(self.table)) if kernel is not None else list(self)

    def with_zero(self, codes) -> CodeDurations:
        """The same with the kinds of ``codes`` lasting the int 0 (their compute share)."""
        return CodeDurations(self.code, tuple(0 if c in codes else v for c, v in enumerate(self.table[:-1]))
                             + self.table[-1:])

    def device_sums(self, starts: Sequence[int]) -> list | None:
        """Each device's sum of its actions' durations (``starts`` as Graph.starts), exactly
        as Python's sum adds them, when every entry is an int: a count per kind and device,
        no pass over the actions in Python.  None when one is not."""
        if not all(type(v) is int for v in self.table):
            return None
        raw = memoryview(self.code).cast("B")  # the codes as bytes: -1 is 0xFF, the table's last
        byte_of = [*range(len(self.table) - 1), 0xFF]
        out = []
        for lo, hi in zip(starts, starts[1:]):
            seg = raw[lo:hi].tobytes()
            out.append(sum(v * seg.count(b) for b, v in zip(byte_of, self.table) if v))
        return out

    def __reduce__(self):  # the code column (a memoryview of the kernel's bytes) as an array
        return CodeDurations, (array("b", memoryview(self.code).cast("B").tobytes()), self.table)


def _by_kind(g: Graph, costs) -> CodeDurations | None:
    """Each action's duration as its kind's cost (bookkeeping and uncoded leaves 0), or None
    when a cost is per stage."""
    values = tuple(getattr(costs, k) for k in CODED_KINDS)  # in code order
    return None if any(isinstance(v, tuple) for v in values) else CodeDurations(g.code, values + (0,))


def code_durations(g: Graph, costs) -> CodeDurations | None:
    """:func:`durations_for` as a :class:`CodeDurations`, when every action's duration is its
    kind's (one cost per kind, no overlapped or malformed action); else None."""
    return None if g.uncoded_leaves else _by_kind(g, costs)


def durations_for(g: Graph, costs) -> list[float]:
    """Each action's duration under ``costs`` (a :class:`schedverify.model.Costs`)."""
    by_kind = _by_kind(g, costs)
    if by_kind is not None:
        out = by_kind.tolist()  # the uncoded leaves patched below
    else:
        values = [getattr(costs, k) for k in CODED_KINDS]
        S = g.schedule.stages
        table = [[per_stage(v, s) for s in range(S)] for v in values]
        out = [table[c][s] if c >= 0 else 0 for c, s in zip(g.code, g.stage)]
    for i in g.uncoded_leaves:  # an overlap, a malformed action: read the action
        try:
            out[i] = costs.of(g.acts[i])
        except (IndexError, TypeError):
            out[i] = 0  # an out-of-range stage on a per-stage cost: reported as a violation
    return out
