"""PyTorch's pipeline runtime, modelled: positional matching, send retirement and the
host/stream sweep.

docs/spec.md sections 8 and 9 are the contract; this module is their reference
implementation for the ``torch`` (PyTorch's ``_PipelineScheduleRuntime`` over gloo) and
``torch-nccl`` (over NCCL) communication semantics, for every modelled release: what differs
between releases is data, a :class:`~schedverify.releases.Runtime` (release, backend,
communicator layout), which every function here reads.  The Z3 engine
(:mod:`schedverify.smt.check`) encodes the same sections independently.

- :func:`match` pairs SENDs with RECVs as the runtime does: all messages carry tag 0, so on
  each communicator and ordered pair of devices the k-th send posted is received by the k-th
  receive posted, whatever the labels say.  Which communicator a message goes on is the
  layout's (:meth:`~schedverify.releases.Layout.communicator`).
- :func:`send_waits` pairs each WAIT_SEND_F/WAIT_SEND_B (PyTorch 2.15) with the pending
  send of its label on its device, as ``_PendingSendTracker`` does.
- :func:`simulate` runs the schedule.  Every device has *lanes* that each run a list of
  actions in order: under ``torch`` one lane, the host thread, which blocks in ``wait()`` at
  the consumer of a RECV and at a WAIT_SEND; under ``torch-nccl`` a compute stream (where a
  ``wait()`` makes the stream, not the host, wait) and one communication stream per
  communicator (or, for a lazily initialised shared group, per peer), none of which waits
  for the host.  A lane goes as far as it can; when it needs an event that has not happened
  (a RECV's or a send's completion, a peer's receive reaching the head of its stream, the
  compute a SEND was posted after), it registers a wait and stops; the event wakes it.  When
  nothing can move and a lane has not finished, the lanes' waits form a functional graph
  (each stuck lane waits for one other lane, or for a message that never comes), and its
  cycles are the hangs, found in linear time.

Every action is visited once and every wait is woken once: linear in the number of actions.
"""

from __future__ import annotations

from array import array
from bisect import bisect_right
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from itertools import islice
from typing import TYPE_CHECKING, Any

from . import _accel
from .deps import MATCH, RECEIVED, intended_receive  # noqa: F401 - intended_receive re-exported
from .errors import UsageError
from .grammar import CODED_KINDS, COLUMN_KINDS
from .graph import KIND_CODE, NCODES, CodeDurations, Graph, KernelColumns, Times
from .lazy import LazyField, Later, given
from .model import RECV_B, RECV_F, SEND_B, SEND_F, SEND_OF, SEND_WAIT_KINDS, WAIT_SEND_F
from .releases import NcclOptions, Runtime  # noqa: F401 - NcclOptions re-exported (its public home)

TORCH = "torch"
TORCH_NCCL = "torch-nccl"
RUNTIME_SEMANTICS = (TORCH, TORCH_NCCL)

_COMM_CODES = {KIND_CODE[k]: k for k in (SEND_F, RECV_F, SEND_B, RECV_B)}
_SENDS = frozenset({KIND_CODE[SEND_F], KIND_CODE[SEND_B]})
#: comm kind code -> stage offset of the peer stage (the receiver of a SEND, the sender of a RECV)
_PEER_OFFSET = {KIND_CODE[SEND_F]: +1, KIND_CODE[SEND_B]: -1, KIND_CODE[RECV_F]: -1, KIND_CODE[RECV_B]: +1}

# by kind code (-1, a bookkeeping or overlapped action, is the last entry)
_IS_COMM = tuple(c in _COMM_CODES for c in range(NCODES)) + (False,)
_IS_SEND = tuple(c in _SENDS for c in range(NCODES)) + (False,)

# the three events of an action, packed with its index into one wait key: 3 * i + event
END, READY, DONE = 0, 1, 2
#: hang cycles reported at most (one more says "there are more"), as the eager sweep
MAX_CYCLES = 10


# --------------------------------------------------------------------------- matching


@dataclass
class Matching(KernelColumns):
    """Which SEND each RECV receives from, per docs/spec.md 8.2.

    ``partner[i]``: the action matched with comm action ``i`` (-1: unmatched, or not a comm
    action).  ``crossed``: (send, recv, k) for matched pairs whose labels differ, k the
    position on their communicator and device pair.  ``unmatched``: (action, why, k, other)
    for comm actions without a partner: why ``"no-peer"`` (the peer stage does not exist) or
    ``"surplus"`` (the k-th on its communicator and device pair, with only ``other`` on the
    other side).
    """

    partner: Sequence[int]  # (an int32 memoryview, from the compiled run)
    if TYPE_CHECKING:
        peer_device: list[int]
    else:  # of each SEND/RECV whose peer stage exists, else -1 (the compiled run's: _PeerDevices)
        peer_device: LazyField[list] = LazyField()
    crossed: list[tuple[int, int, int]]
    unmatched: list[tuple[int, str, int, int]]


class _PeerDevices(KernelColumns, Later[list]):
    """Matching.peer_device of the compiled run, where every SEND/RECV has a partner (the
    kernel declines the rest): the device of each message's partner, -1 for the others."""

    def __init__(self, partner: Sequence[int], starts: Sequence[int]):
        self.partner, self.starts = partner, starts

    def make(self) -> list:
        starts = self.starts
        return [bisect_right(starts, p) - 1 if p >= 0 else -1 for p in self.partner]


#: comm kind code -> whether it carries forward traffic (an activation) rather than a gradient
_FORWARD = {KIND_CODE[SEND_F]: True, KIND_CODE[RECV_F]: True, KIND_CODE[SEND_B]: False, KIND_CODE[RECV_B]: False}


def _stream_label(d: int, key: tuple, by_edge: bool, by_direction: bool, lazy: bool) -> tuple[str, int]:
    """(how a report names device ``d``'s communication stream ``key``, the peer it serves
    or -1)."""
    if key == (-1,):
        return "communication stream (no peer)", -1
    if by_edge:
        a, b = key
        return f"communication stream of edge {a}->{b}", b if a == d else a
    if by_direction:
        return ("forward" if key[0] else "backward") + " communication stream", -1
    if lazy and key:  # (a batch is on its communicator's own stream, key ())
        a, b = key
        peer = b if a == d else a
        return f"communication stream with device {peer}", peer
    return "communication stream", -1


def match(g: Graph, runtime: Runtime) -> Matching:
    """Pair the SENDs and RECVs of ``g`` positionally, per communicator of ``runtime``'s
    layout and ordered device pair."""
    n, S = g.n, g.schedule.stages
    placement = g.schedule.placement
    layout = runtime.layout
    route = placement.routes[0] if placement.microbatch_route is None else None
    partner = [-1] * n
    peer_device = [-1] * n
    unmatched: list[tuple[int, str, int, int]] = []
    sends: dict[tuple, list[int]] = {}
    recvs: dict[tuple, list[int]] = {}
    dev, code, stage, mbs = g.dev, g.code, g.stage, g.mb
    for i in [i for i, c in enumerate(code) if c in _COMM_CODES]:
        c, mb = code[i], mbs[i]
        ps = stage[i] + _PEER_OFFSET[c]
        if not 0 <= ps < S or mb < 0:  # (mb: -1 when out of range)
            unmatched.append((i, "no-peer", 0, 0))
            continue
        e = route[ps] if route is not None else placement.device(ps, mb)
        peer_device[i] = e
        if c in _SENDS:
            sends.setdefault((dev[i], e, layout.communicator(dev[i], e, _FORWARD[c])), []).append(i)
        else:
            recvs.setdefault((e, dev[i], layout.communicator(e, dev[i], _FORWARD[c])), []).append(i)
    crossed = []
    for pair in sends.keys() | recvs.keys():
        ss, rs = sends.get(pair, ()), recvs.get(pair, ())
        for k, (s, r) in enumerate(zip(ss, rs)):
            partner[s], partner[r] = r, s
            # SEND_F(s,i) is meant for RECV_F(s+1,i), SEND_B(s,i) for RECV_B(s-1,i)
            if (code[r] != code[s] + 1 or stage[r] != stage[s] + _PEER_OFFSET[code[s]]
                    or mbs[r] != mbs[s]):
                crossed.append((s, r, k))
        for k, extra in enumerate(islice(ss, len(rs), None), len(rs)):
            unmatched.append((extra, "surplus", k, len(rs)))
        for k, extra in enumerate(islice(rs, len(ss), None), len(ss)):
            unmatched.append((extra, "surplus", k, len(ss)))
    crossed.sort()
    unmatched.sort()
    return Matching(partner, peer_device, crossed, unmatched)


@dataclass
class SendWaits:
    """Each WAIT_SEND_F/WAIT_SEND_B paired with the send it retires (docs/spec.md 9.2), as
    PyTorch 2.15's ``_PendingSendTracker`` pairs them: by label (stage, microbatch,
    direction) on its own device, with the pending send of that label, the one posted
    before it and not yet retired.

    ``retires``: wait -> the send it retires.  ``retired_by``: send -> its wait.
    ``unretired``: sends no wait retires, in order.  ``orphans``: (wait, the send of its
    label it came after, or -1): waits with no pending send (none posted before it, or that
    one already retired)."""

    retires: Mapping[int, int]
    retired_by: Mapping[int, int]
    if TYPE_CHECKING:
        unretired: list[int]
    else:  # made when read (only a release that retires sends by WAIT_SEND reads it)
        unretired: LazyField[list[int]] = LazyField()
    orphans: list[tuple[int, int]]


class Pairs(Mapping[int, int]):
    """A one-to-one pairing of action indices held as two int columns, ``key_column[k]`` ->
    ``value_column[k]``, and read as a mapping: a million waits and their sends are two
    arrays, and the dict a lookup needs is made on the first lookup only."""

    def __init__(self, key_column: Sequence[int], value_column: Sequence[int]):
        self.key_column, self.value_column = key_column, value_column

    @cached_property
    def _lookup(self) -> dict[int, int]:
        return dict(zip(self.key_column, self.value_column))

    def __getitem__(self, key: int) -> int:
        return self._lookup[key]

    def __iter__(self) -> Iterator[int]:
        return iter(self.key_column)

    def __len__(self) -> int:
        return len(self.key_column)


class _Sends(Later[list[int]]):
    """The sends of ``g`` that can be retired: in range, each label's first."""

    def __init__(self, g: Graph):
        self.g = g

    def make(self) -> list[int]:
        g = self.g
        codes = memoryview(g.code).cast("B").tobytes()
        if not any(codes.find(c) >= 0 for c in _SENDS):  # a compute-only schedule: no pass in Python
            return []
        repeats = {again for _, again in g.duplicates}  # SV202: only a label's first send counts
        mbs = g.mb  # -1: out of range (SV102)
        return [i for i, c in enumerate(g.code) if c in _SENDS and mbs[i] >= 0 and i not in repeats]


def send_waits(g: Graph) -> SendWaits:
    """Pair every send wait of ``g`` with its send (linear)."""
    retires: dict[int, int] = {}
    retired_by: dict[int, int] = {}
    orphans: list[tuple[int, int]] = []
    if not g.send_waits:
        unretired: Any = _Sends(g)  # a recipe for the field (lazy.py)
        return SendWaits(retires, retired_by, unretired, orphans)
    paired = _paired_columns(g)
    if paired is not None:  # every wait retires a send and every send is retired
        waits, sent = paired
        return SendWaits(Pairs(waits, sent), Pairs(sent, waits), [], orphans)
    sends = _Sends(g).make()
    acts, dev = g.acts, g.dev
    pending: dict[tuple, int] = {}
    last: dict[tuple, int] = {}
    items = sorted([*sends, *g.send_waits])  # device order: a device's actions are contiguous
    for i in items:
        a = acts[i]
        if a.kind in SEND_WAIT_KINDS:
            key = (dev[i], SEND_OF[a.kind], a.stage, a.microbatch)
            j = pending.pop(key, -1)
            if j < 0:
                orphans.append((i, last.get(key, -1)))
            else:
                retires[i], retired_by[j] = j, i
        else:
            key = (dev[i], a.kind, a.stage, a.microbatch)
            pending[key] = last[key] = i
    return SendWaits(retires, retired_by, [i for i in sends if i not in retired_by], orphans)


def _paired_columns(g: Graph) -> tuple[Any, Any] | None:
    """:func:`send_waits` from the compiled kernel (``pair_send_waits``) over the columns of a
    graph compiled from a schedule's columns, when every wait retires a send and every send is
    retired: (the waits, the sends they retire), int arrays; else None (then the pairing
    below runs, and finds the orphans and the sends left pending)."""
    kernel, cols = _accel.kernel, g.schedule.columns
    if kernel is None or cols is None or g.duplicates or g.wrong_device or g.out_of_range or g.malformed:
        return None
    got: tuple[Any, Any] | None = kernel.pair_send_waits(
        g.code, g.mb, g.send_waits, cols.codes, cols.stages, cols.mbs, cols.lengths, g.schedule.stages,
        g.schedule.microbatches, KIND_CODE[SEND_F], KIND_CODE[SEND_B], COLUMN_KINDS.index(WAIT_SEND_F))
    return got


# --------------------------------------------------------------------------- the sweep


@dataclass
class Wait:
    """One stuck lane: ``device``'s lane ``lane`` is stuck at action ``head``, waiting for
    event ``event`` (END, READY or DONE) of action ``awaited``."""

    lane: int
    device: int
    head: int
    awaited: int
    event: int


@dataclass(frozen=True)
class Hang:
    """One cycle of stuck lanes as a report gives it: its waits in wait order (``cycle``) and
    each explained in words, then each of its devices' stuck part in PyTorch's notation
    (``steps``)."""

    cycle: tuple[Wait, ...]
    steps: tuple[str, ...]

    @property
    def devices(self) -> tuple[int, ...]:
        return tuple(w.device for w in self.cycle)


@dataclass
class RuntimeResult(KernelColumns):
    """Times of every action (``start``/``end``: for a SEND or RECV its ready and done
    times), and the hangs: ``cycles`` (each a list of Waits in wait order) and ``stuck``
    (every stuck lane).  ``bind[3 * i + event]`` is the event (packed the same way) that set
    event ``event`` of action ``i`` (-1: time 0), from which the critical path follows."""

    if TYPE_CHECKING:  # to mypy plain fields; at run time the lazy descriptors (no default)
        start: list[float]
        end: list[float]
    else:  # the compiled run gives them as graph.Times columns, made into lists when read
        start: LazyField[list[float]] = LazyField()
        end: LazyField[list[float]] = LazyField()
    bind: Sequence[int]  # (read off two int32 entries per action, from the compiled run)
    cycles: list[list[Wait]]
    stuck: list[Wait]
    matching: Matching
    if TYPE_CHECKING:
        ready: list
    else:  # per SEND/RECV its ready time, None if it never became ready (and for compute)
        ready: LazyField[list] = LazyField()
    is_comm: list[bool]  # (bytes of 0 and 1, from the compiled run)
    #: the lane of each action, and each lane's device and stream: "host" (torch), "compute"
    #: or "comm" (torch-nccl; with ``peer``: the device whose messages it carries, or -1)
    lane_of: Sequence[int] = field(default_factory=list)
    lanes: list[tuple[int, str, int]] = field(default_factory=list)
    #: each lane in words: "host", "compute stream", "communication stream of edge 0->1", ...
    labels: list[str] = field(default_factory=list)
    #: each operation waited for right after it is posted -> the operations waited for with it
    batch_of: dict[int, tuple[int, ...]] = field(default_factory=dict)
    #: the run was over NCCL (streams), else gloo (a host per rank)
    on_nccl: bool = False
    #: the first MAX_CYCLES cycles explained (:class:`Hang`), and whether there are more
    hangs: tuple[Hang, ...] = ()
    more_hangs: bool = False
    #: max(end, default=0), and the first action that ends then, when the run that made the
    #: times knew them (the compiled one): then neither needs the list of end times
    makespan: float | None = field(default=None, compare=False)
    last: int | None = field(default=None, compare=False)

    @property
    def completed(self) -> bool:
        return not self.stuck

    def ready_of(self, i: int):
        """``ready[i]``, read off the compiled run's column when the list is not made (an
        explanation names a few actions of a million)."""
        got = given(self, "ready")
        return got.at(i) if isinstance(got, _Ready) else self.ready[i]

    def critical_path(self) -> list[int]:
        """The actions whose events set one another's times, from time 0 to the last event."""
        if self.last is None and not self.end:
            return []
        last = self.last if self.last is not None else max(range(len(self.end)), key=self.end.__getitem__)
        if last < 0:
            return []
        kernel = _accel.kernel
        b = self.bind
        if kernel is not None and isinstance(b, _Binders):  # the compiled run's columns
            walked = kernel.bind_path(b.packed, b.done_by, b.partner, self.is_comm, last)
            if walked is not None:
                return walked
        key = 3 * last + (DONE if self.is_comm[last] else END)
        path: list[int] = []
        seen: set[int] = set()
        # each binder was known before what it bound, so a run that ends has no cycle; a hung
        # run's released waits (set at time 0) can close one, where the path stops
        while key >= 0 and key not in seen:
            seen.add(key)
            i = key // 3
            if not path or path[-1] != i:
                path.append(i)
            key = self.bind[key]
        path.reverse()
        return path


def simulate(g: Graph, durations: Sequence[float], comm: float, runtime: Runtime,
             matching: Matching | None = None, waits: SendWaits | None = None) -> RuntimeResult:
    """Run ``g`` on ``runtime`` (a :class:`~schedverify.releases.Runtime`: PyTorch's runtime
    of one release over gloo or NCCL), docs/spec.md 8.4 and 9."""
    if not isinstance(runtime, Runtime):
        raise UsageError(f"runtime must be a schedverify.releases.Runtime, got {type(runtime).__name__}")
    native = _native(g, durations, comm, runtime, matching, waits)
    if native is not None:
        return native
    m = matching if matching is not None else match(g, runtime)
    w = waits if waits is not None else send_waits(g)
    return _Sweep(g, durations, comm, runtime, m, w).run()


#: per kind code, for the kernel: (stage offset of the producer, RECV code) of an input that
#: comes through a RECV from another rank (deps.RECEIVED), and (peer stage offset, is a send,
#: carries an activation, the code it is meant for) of each SEND/RECV (deps.MATCH)
_RECEIVED_BY_CODE = tuple((RECEIVED[k][0], KIND_CODE[RECEIVED[k][1]]) if k in RECEIVED else None
                          for k in CODED_KINDS)
_COMM_BY_CODE = tuple((_PEER_OFFSET[c], _IS_SEND[c], _FORWARD[c], KIND_CODE[MATCH[k][0]]) if c in _COMM_CODES
                      else None for c, k in enumerate(CODED_KINDS))


def _native(g: Graph, durations, comm, runtime: Runtime, matching: Matching | None,
            waits: SendWaits | None) -> RuntimeResult | None:
    """The compiled kernel's run (``runtime_plain``), for a PyTorch runtime on a graph of
    single actions with one route, no BATCH and every message matched by its label (2.15's
    WAIT_SENDs run after the sends they retire), whether it ends or hangs: the RuntimeResult
    the sweep below gives, field for field, its hangs explained here.  None otherwise (then
    the sweep runs, and finds what the kernel declined)."""
    kernel = _accel.kernel
    rel = runtime.release
    if (kernel is None or type(durations) not in (list, CodeDurations) or not g.explicit_comm or g.more_waits
            or g.batches or rel.blocking_p2p or g.schedule.placement.microbatch_route is not None
            or g.uncoded_leaves or g.duplicates or g.wrong_device or g.inversions or g.missing_recv
            or g.unmatched_comm):
        return None
    retires: Mapping[int, int] = (waits if waits is not None else send_waits(g)).retires if g.send_waits else {}
    retired = (retires.key_column, retires.value_column) if isinstance(retires, Pairs) else \
        (list(retires), list(retires.values()))
    nccl = runtime.on_nccl
    layout = runtime.layout
    table = durations.table if isinstance(durations, CodeDurations) else durations
    # a graph compiled without its wait column (compile_graph's wait_when_read): only its
    # SEND/RECVs wait on another device, and the run reads none
    wait = None if isinstance(given(g, "wait"), Later) else g.wait
    got = kernel.runtime_plain(g.starts, g.code, g.stage, g.mb, wait, table, comm,
                               tuple(g.schedule.placement.routes[0]), _RECEIVED_BY_CODE, _COMM_BY_CODE,
                               nccl, nccl and runtime.nccl.buffered_sends, layout.by_edge, layout.by_direction,
                               runtime.lazy, *retired, MAX_CYCLES)
    if got is None:
        return None
    # the columns come as bytes of native doubles, int32 and uint16 (the kernel's own
    # allocations, on huge pages where the system has them): read through typed views, not copied
    fv, ff, rv, rf, bind, done_by, partner, lane_of, lanes, makespan, last, is_comm, hang = got
    bind, partner = (memoryview(c).cast("i") for c in (bind, partner))
    n = len(g.code)
    # a lane index in one byte (at most 256 lanes) or two (the kernel's lane_t)
    lane_of = memoryview(lane_of).cast("B" if len(lane_of) == n else "H")
    # the end times as int32 when every duration is an int and their sum fits (4 bytes an
    # action), else doubles; no float flags when none is a float
    fin = memoryview(fv).cast("i" if n and len(fv) == 4 * n else "d")
    finish_times = Times(fin, ff) if ff is not None else _IntTimes(fin)
    # a run that ends gives no ready column: each ready time is its binder's end (_BoundReady)
    ready_times = Times(memoryview(rv).cast("d"), rf) if rv is not None else _BoundReady(finish_times, bind, is_comm)
    kinds, labels = [], []
    for d, stream, key in lanes:
        if stream == "comm":
            label, peer = _stream_label(d, key, layout.by_edge, layout.by_direction, runtime.lazy)
        else:
            label, peer = ("host" if stream == "host" else "compute stream"), -1
        kinds.append((d, stream, peer))
        labels.append(label)
    peers: Any = _PeerDevices(partner, g.starts)  # a recipe for the field (lazy.py)
    m = matching if matching is not None else Matching(partner, peers, [], [])
    cycles: list[list[Wait]] = []
    stuck: list[Wait] = []
    never = None
    if hang is not None:  # the sweep's rounds, as _Sweep.run finds them
        found, seen, unsent, never = hang
        cycles = [[Wait(*w) for w in c] for c in found]
        stuck = [Wait(*w) for w in seen]
        if not runtime.waits_for_sends:  # over gloo: the step waits for every send it posted
            stuck += [Wait(lane_of[i], g.device_of(i), i, i, DONE) for i in unsent]
        stuck.sort(key=lambda w: (w.device, g.position_of(w.head)))
    start: Any = _Start(finish_times, ready_times, is_comm, durations, never)  # recipes for the lists (lazy.py)
    finish: Any = finish_times
    ready: Any = _Ready(ready_times, is_comm, never)
    result = RuntimeResult(start, finish, _Binders(bind, done_by, partner, is_comm), cycles, stuck, m, ready, is_comm,
                           lane_of, kinds, labels, {}, nccl, makespan=makespan, last=last)
    if cycles:
        result.hangs = tuple(_hang(g, result, c) for c in cycles[:MAX_CYCLES])
        result.more_hangs = len(cycles) > MAX_CYCLES
    return result


class _Binders(KernelColumns, Sequence[int]):
    """RuntimeResult.bind of the compiled run, ``bind[3 * i + event]`` as the reference's list
    holds it, read off the kernel's two columns: ``packed``, one entry per action (what set a
    compute action's END, or a SEND/RECV's READY), and ``done_by``, one byte (what set a
    SEND/RECV's DONE, which is always the READY of the message or of its ``partner``: 1 its
    own, 2 its partner's, 0 none).  An event of the other kind has no binder, -1 in the
    reference's list too."""

    def __init__(self, packed: Sequence[int], done_by: bytes, partner: Sequence[int], is_comm: bytes):
        self.packed, self.done_by, self.partner, self.is_comm = packed, done_by, partner, is_comm

    def __len__(self) -> int:
        return 3 * len(self.is_comm)

    def __getitem__(self, key):  # an int key: one event's binder
        if key < 0:
            key += len(self)
        if not 0 <= key < len(self):
            raise IndexError("binder key out of range")
        i, event = divmod(key, 3)
        if not ((event != END) if self.is_comm[i] else (event == END)):
            return -1
        if event != DONE:
            return self.packed[i]
        by = self.done_by[i]
        return -1 if by == 0 else 3 * (i if by == 1 else self.partner[i]) + READY


class _Start(Later[list]):
    """The start times of the compiled run (RuntimeResult.start), which it hands back as no
    column of their own: a SEND/RECV's ready time, a compute action's end minus its duration,
    as the sweep below computes them (the same Python operation on the same numbers)."""

    def __init__(self, finish: Times, ready: Times, is_comm: bytes, durations: Sequence, never: bytes | None):
        self.finish, self.ready, self.is_comm, self.durations = finish, ready, is_comm, durations
        self.never = never  # a hang's: 1 where a compute action never ended (its start is 0)

    def make(self) -> list:
        kernel = _accel.kernel
        durations = self.durations.tolist() if isinstance(self.durations, CodeDurations) else self.durations
        made = (kernel.start_list(self.finish.values, self.finish.floats, self.ready.values, self.ready.floats,
                                  self.is_comm, durations, self.never) if kernel is not None else None)
        if made is not None:
            return made
        never = self.never or bytes(len(self.is_comm))
        return [r if c else (0 if x else f - t) for c, r, f, t, x in
                zip(self.is_comm, self.ready.make(), self.finish.make(), self.durations, never)]


class _IntTimes(Times):
    """The end times of a compiled run none of which is a float, which the kernel hands back
    without their float flags (``runtime_plain``: n bytes the run need not hold), as int32
    when they fit (4 bytes an action) or doubles: ``floats``, all 0, is made on its first read."""

    def __init__(self, values: memoryview[float] | memoryview[int]):
        object.__setattr__(self, "values", values)

    @property
    def floats(self) -> bytes:
        made = self.__dict__.get("_floats")
        if made is None:
            made = bytes(len(self.values))
            object.__setattr__(self, "_floats", made)
        return made

    def at(self, i: int):
        return int(self.values[i])


class _BoundReady(Times):
    """The ready times of a compiled run that ended, which the kernel hands back as no column
    (``runtime_plain``): a SEND/RECV becomes ready at its lane's clock, which is the end (or
    done) of the event that binds it, or the int 0 before any; every other action's entry is
    0.  The columns are made on the first read of ``values`` or ``floats``; :meth:`at` reads
    one entry alone."""

    finish: Times
    bind: Sequence[int]
    is_comm: bytes

    def __init__(self, finish: Times, bind: Sequence[int], is_comm: bytes):
        object.__setattr__(self, "finish", finish)
        object.__setattr__(self, "bind", bind)
        object.__setattr__(self, "is_comm", is_comm)

    def _columns(self) -> tuple:
        made = self.__dict__.get("_made")
        if made is None:
            kernel = _accel.kernel
            if kernel is not None:
                v, f = kernel.bound_ready(self.bind, self.finish.values, self.finish.floats, self.is_comm)
                made = (memoryview(v).cast("d"), f)
            else:  # a pickled run read back without the kernel: the same, in Python
                entries = [self._entry(i) for i in range(len(self.is_comm))]
                made = (array("d", (v for v, _ in entries)), bytes(f for _, f in entries))
            object.__setattr__(self, "_made", made)
        return made

    def _entry(self, i: int) -> tuple[float, int]:
        b = self.bind[i] if self.is_comm[i] else -1
        return (self.finish.values[b // 3], self.finish.floats[b // 3]) if b >= 0 else (0.0, 0)

    @property
    def values(self):
        return self._columns()[0]

    @property
    def floats(self) -> bytes:
        return self._columns()[1]

    def at(self, i: int):
        v, f = self._entry(i)
        return v if f else int(v)

    def __getstate__(self):
        state = super().__getstate__()
        state.pop("_made", None)  # made again from the binders when read
        return state


class _Ready(Later[list]):
    """The ready times of the compiled run (RuntimeResult.ready): the column's value for a
    SEND/RECV that became ready, None for the rest."""

    def __init__(self, times: Times, is_comm: bytes, never: bytes | None):
        self.times, self.is_comm, self.never = times, is_comm, never

    def at(self, i: int):
        """The list's entry ``i``, made alone."""
        if not self.is_comm[i] or (self.never is not None and self.never[i]):
            return None
        return self.times.at(i)

    def make(self) -> list:
        if self.never is None:
            return [t if c else None for t, c in zip(self.times.make(), self.is_comm)]
        return [t if c and not x else None for t, c, x in zip(self.times.make(), self.is_comm, self.never)]


class _Sweep:
    """One run of the lanes.  Times are None until known."""

    def __init__(self, g: Graph, durations, comm, runtime: Runtime, m: Matching, w: SendWaits):
        self.g, self.dur, self.comm, self.m = g, durations, comm, m
        self.runtime = runtime
        self.nccl_mode = runtime.on_nccl
        self.buffered = self.nccl_mode and runtime.nccl.buffered_sends
        n = g.n
        self.end: list = [None] * n  # compute: end time
        self.ready: list = [None] * n  # comm: ready time
        self.done: list = [None] * n  # comm: done time
        self.bind = [-1] * (3 * n)
        self.is_comm = list(map(_IS_COMM.__getitem__, g.code))
        self.is_send = list(map(_IS_SEND.__getitem__, g.code))
        self.lanes: list[list[int]] = []
        self.lane_device: list[int] = []
        self.lane_kind: list[tuple[int, str, int]] = []  # (device, stream, peer)
        self.lane_label: list[str] = []
        self.lane_of: list[int] = [0] * n  # lane of each action
        self.lastc = [-1] * n  # NCCL: the last compute action before each comm action
        self.data = data_deps(g, self.is_comm, w)
        # operations waited for together right after they are posted (docs/spec.md 10): each
        # BATCH, and under a framework whose sends and receives block, each one alone
        self.batch_of: dict[int, tuple[int, ...]] = {i: b for b in g.batches for i in b}
        if runtime.release.blocking_p2p:
            for i in range(n):
                if self.is_comm[i] and i not in self.batch_of:
                    self.batch_of[i] = (i,)
        self.prewait: dict[int, tuple[int, ...]] = {}  # NCCL: a batch an operation's stream waits for
        self._build_lanes()

    def _build_lanes(self) -> None:
        g, is_comm, rt = self.g, self.is_comm, self.runtime
        layout, lazy = rt.layout, rt.lazy
        code, peer_device = g.code, self.m.peer_device
        for d in range(len(g.starts) - 1):
            lo, hi = g.starts[d], g.starts[d + 1]
            if not self.nccl_mode:
                self._add_lane(d, list(range(lo, hi)), "host", -1, "host")
                continue
            # the compute stream: computes, bookkeeping and waits (a wait() makes it wait)
            self._add_lane(d, [i for i in range(lo, hi) if not is_comm[i]], "compute", -1, "compute stream")
            streams: dict[tuple, list[int]] = {}
            last = -1
            pending: tuple[int, ...] = ()  # the batch waited for since the last compute action
            for i in range(lo, hi):
                if not is_comm[i]:
                    last = i
                    if pending:  # the compute stream waits for the batch (req.wait())
                        self.data[i] += pending
                        pending = ()
                    continue
                self.lastc[i] = last
                b = self.batch_of.get(i)
                if pending and (b is None or i == b[0]):
                    self.prewait[i] = pending  # its stream waits for the compute stream's wait
                e = peer_device[i]
                # a batch is one group on its communicator's own stream (batched P2P uses the
                # group's communicator, not a per-pair one)
                key = (layout.stream(d, e, self.is_send[i], _FORWARD[code[i]], lazy and b is None)
                       if e >= 0 else (-1,))
                streams.setdefault(key, []).append(i)
                if b is not None and i == b[-1]:
                    pending = b
            for key in sorted(streams):
                label, peer = _stream_label(d, key, layout.by_edge, layout.by_direction, lazy)
                self._add_lane(d, streams[key], "comm", peer, label)

    def _add_lane(self, device: int, items: list[int], stream: str, peer: int, label: str) -> None:
        k = len(self.lanes)
        self.lanes.append(items)
        self.lane_device.append(device)
        self.lane_kind.append((device, stream, peer))
        self.lane_label.append(label)
        for i in items:
            self.lane_of[i] = k

    # ------------------------------------------------------------------ events

    def _set_ready(self, x: int, t, woken: list) -> None:
        """``x`` may begin to transfer at ``t``: its completion, and its partner's, follow
        once both sides are ready (a buffered send's at once).  Nothing waits for READY."""
        ready, done, dur = self.ready, self.done, self.dur
        ready[x] = t
        p = self.m.partner[x]
        if p < 0:
            return  # a message that never comes: done never happens
        sending = self.is_send[x]
        if self.buffered and sending:
            self._finish(x, t + (dur[x] if dur[x] > dur[p] else dur[p]), x, woken)
        rp = ready[p]
        if rp is None:
            return
        s, r = (x, p) if sending else (p, x)
        rs, rr = ready[s], ready[r]
        delta = dur[s] if dur[s] > dur[r] else dur[r]
        if done[s] is None:  # a send completes with its receive (unless buffered: done above)
            self._finish(s, (rs if rs >= rr else rr) + delta, s if rs >= rr else r, woken)
        arrive = rs + self.comm
        self._finish(r, (arrive if arrive > rr else rr) + delta, s if arrive > rr else r, woken)

    def _finish(self, x: int, t, via: int, woken: list) -> None:
        """``x`` is done at ``t``, when ``via`` (itself or its partner) became ready."""
        self.done[x] = t
        self.bind[3 * x + DONE] = 3 * via + READY
        lanes = self.waiting.pop(3 * x + DONE, None)
        if lanes is not None:
            woken.extend(lanes)

    def _wake(self, key: int, woken: list) -> None:
        lanes = self.waiting.pop(key, None)
        if lanes is not None:
            woken.extend(lanes)

    # ------------------------------------------------------------------ the lanes

    def run(self) -> RuntimeResult:
        g = self.g
        n = g.n
        lanes = self.lanes
        L = len(lanes)
        ptr = [0] * L
        clock: list = [0] * L
        source = [-1] * L
        self.waiting: dict[int, list[int]] = {}
        blocked: dict[int, tuple[int, int, int]] = {}  # lane -> (head, awaited, event)
        stack = list(range(L - 1, -1, -1))
        end, ready, done, bind, dur = self.end, self.ready, self.done, self.bind, self.dur
        is_comm, data = self.is_comm, self.data
        lastc, comm, nccl_mode = self.lastc, self.comm, self.nccl_mode
        batch_of, prewait = self.batch_of, self.prewait
        # Run until nothing moves.  Then, to report every independent hang at once (as the
        # eager sweep does), release each wait for a message that never comes and the first
        # wait of each cycle found, and go on: what runs after that is never timed.
        seen: dict[tuple[int, int], Wait] = {}
        cycles: list[list[Wait]] = []
        while True:
            while stack:
                k = stack.pop()
                items = lanes[k]
                p, now, src = ptr[k], clock[k], source[k]  # src: the event that set ``now``
                last = len(items)
                stuck: tuple[int, int] | None = None  # (the action awaited, its event)
                while p < last:
                    i = items[p]
                    if is_comm[i]:
                        group = batch_of.get(i)
                        if nccl_mode:
                            c = lastc[i]
                            if c >= 0:  # the stream waits for the compute posted before it
                                ec = end[c]
                                if ec is None:
                                    stuck = (c, END)
                                    break
                                if ec > now:
                                    now, src = ec, 3 * c + END
                            for j in prewait.get(i, ()):  # ... which waits for an earlier batch
                                t = done[j]
                                if t is None:
                                    stuck = (j, DONE)
                                    break
                                if t > now:
                                    now, src = t, 3 * j + DONE
                            if stuck is not None:
                                break
                            # a batch: one group on the stream, all its operations ready at once
                            ops = (i,) if group is None else tuple(x for x in group if self.lane_of[x] == k)
                            for x in ops:
                                if ready[x] is None:
                                    bind[3 * x + READY] = src
                                    self._set_ready(x, now, stack)
                            for x in ops:
                                if done[x] is None:
                                    stuck = (x, DONE)
                                    break
                                if done[x] >= now:
                                    now, src = done[x], 3 * x + DONE
                            if stuck is not None:
                                break
                            p += len(ops)
                            continue
                        if ready[i] is None:  # gloo: posting takes no host time
                            bind[3 * i + READY] = src
                            self._set_ready(i, now, stack)
                        if group is not None and i == group[-1]:  # gloo: the host waits for the batch
                            for x in group:
                                if done[x] is None:
                                    stuck = (x, DONE)
                                    break
                                if done[x] > now:
                                    now, src = done[x], 3 * x + DONE
                            if stuck is not None:
                                break
                        p += 1
                        continue
                    # a compute action: its data, then its duration
                    st = now
                    for j in data[i]:
                        if is_comm[j]:
                            t = done[j]
                            if t is None:
                                stuck = (j, DONE)
                                break
                            key = 3 * j + DONE
                        else:
                            t = end[j]
                            if t is None:
                                stuck = (j, END)
                                break
                            t = t + comm
                            key = 3 * j + END
                        if t > st:
                            st, src = t, key
                    if stuck is not None:
                        break
                    bind[3 * i + END] = src
                    now = st + dur[i]
                    src = 3 * i + END
                    end[i] = now
                    if self.waiting:
                        self._wake(src, stack)
                    p += 1
                ptr[k], clock[k], source[k] = p, now, src
                if stuck is not None:
                    j, ev = stuck
                    blocked[k] = (items[p], j, ev)
                    self.waiting.setdefault(3 * j + ev, []).append(k)
                else:
                    blocked.pop(k, None)
            if not blocked:
                break
            waits = {k: Wait(k, self.lane_device[k], *b) for k, b in blocked.items()}
            for w in waits.values():
                seen.setdefault((w.lane, w.head), w)
            found = self._cycles(waits)
            cycles += found
            release = [w for w in waits.values() if self.waited_lane(w) is None] + [c[0] for c in found]
            if len(cycles) > MAX_CYCLES or not release:
                break
            for w in release:
                self._release(w, stack)
        lanes_stuck = list(seen.values())
        # before 2.15 the step ends by waiting for every send it posted (a stream never gets
        # past one); from 2.15 each send's own WAIT_SEND retires it
        if not nccl_mode and not self.runtime.waits_for_sends:
            sends = _SENDS
            code = g.code
            lanes_stuck += [Wait(self.lane_of[i], g.dev[i], i, i, DONE) for i in range(n)
                      if done[i] is None and code[i] in sends and ptr[self.lane_of[i]] == len(lanes[self.lane_of[i]])]
        lanes_stuck.sort(key=lambda w: (w.device, g.pos[w.head]))
        # a compute action's times are (end - duration, end); a SEND/RECV's (ready, done); what
        # never happened is 0 (a hang's times are not reported)
        finish = [e if e is not None else (dn if dn is not None else 0) for e, dn in zip(end, done)]
        start = [(r if r is not None else 0) if c else (f - t if e is not None else 0)
                 for c, r, f, t, e in zip(is_comm, ready, finish, dur, end)]
        result = RuntimeResult(start, finish, bind, cycles, lanes_stuck, self.m, ready, is_comm, self.lane_of,
                               self.lane_kind, self.lane_label, batch_of, nccl_mode)
        if cycles:
            result.hangs = tuple(_hang(g, result, c) for c in cycles[:MAX_CYCLES])
            result.more_hangs = len(cycles) > MAX_CYCLES
        return result

    def _release(self, w: Wait, woken: list) -> None:
        """Let ``w``'s lane go on as if what it waits for had happened (at time 0: the run is
        already a hang, and its times are not reported)."""
        j = w.awaited
        if w.event == END:
            self.end[j] = 0
            lanes = self.waiting.pop(3 * j + END, None)
            if lanes is not None:
                woken.extend(lanes)
        else:
            self._finish(j, self.ready[j] or 0, j, woken)

    def _cycles(self, blocked: dict[int, Wait]) -> list[list[Wait]]:
        """The cycles of "lane k waits for lane l" among the stuck lanes."""
        target: dict[int, int] = {}
        for k, w in blocked.items():
            lane = self.waited_lane(w)
            if lane is not None and lane in blocked:
                target[k] = lane
        cycles = []
        colour: dict[int, int] = {}
        for k0 in sorted(target):
            if k0 in colour:
                continue
            path = []
            k = k0
            while k in target and k not in colour:
                colour[k] = k0
                path.append(k)
                k = target[k]
            if k in colour and colour[k] == k0 and k in path:
                cycles.append([blocked[x] for x in path[path.index(k):]])
        return cycles

    def waited_lane(self, w: Wait) -> int | None:
        """The lane that must move for ``w`` to be released (None: a message never comes)."""
        j = _blocker(w, self.ready.__getitem__, self.m.partner)
        return None if j < 0 else self.lane_of[j]


def data_deps(g: Graph, is_comm: list[bool], waits: SendWaits | None = None) -> list[tuple[int, ...]]:
    """Per compute action, what its data waits for (docs/spec.md 8.4): the RECV of its own
    label for an input from another device, else (compute-only, or a missing RECV) the
    cross-device producer the graph stores; per WAIT_SEND, the send it retires (9.2).  The
    graph keeps only cross-device waits, and a consumer's RECV sits on its own device, so the
    RECVs are looked up here."""
    n, S, M = g.n, g.schedule.stages, g.schedule.microbatches
    placement = g.schedule.placement
    wait, more, dev = g.wait, g.more_waits, g.dev
    out: list[tuple[int, ...]] = [()] * n
    for i in [i for i in range(n) if wait[i] != n and not is_comm[i]]:
        out[i] = (wait[i],)
    for i, extra in more.items():
        if not is_comm[i]:
            out[i] += tuple(j for j, _ in extra)
    for w, sent in (waits.retires.items() if waits is not None else ()):
        out[w] = (sent,)
    if not g.explicit_comm:
        return out
    route = placement.routes[0] if placement.microbatch_route is None else None
    producer, code, stage, mbs = g.producer, g.code, g.stage, g.mb
    received = {KIND_CODE[k]: (offset, KIND_CODE[recv]) for k, (offset, recv) in RECEIVED.items()}
    overlapped = g.overlapped
    acts = g.acts if overlapped else ()
    consumers = sorted([i for i, c in enumerate(code) if c in received] + overlapped)
    for i in consumers:
        c = code[i]
        leaves: tuple[tuple[int | None, int, int | None], ...]
        if c >= 0:
            leaves = ((stage[i], c, mbs[i]),)
        else:  # OVERLAP_F_B
            sub = acts[i].sub
            assert sub is not None  # an overlapped entry has its sub-actions
            leaves = tuple((x.stage, KIND_CODE.get(x.kind, -1), x.microbatch) for x in sub)
        for s, k, mb in leaves:
            if type(s) is not int or type(mb) is not int or not (0 <= s < S and 0 <= mb < M):
                continue
            if k not in received:
                continue
            offset, recv = received[k]
            ps = s + offset
            if 0 <= ps < S and (route[ps] if route is not None else placement.device(ps, mb)) != dev[i]:
                r = producer.get((s * M + mb) * NCODES + recv)
                if r is not None and r < i and dev[r] == dev[i]:
                    out[i] += (r,)
    return out


# --------------------------------------------------------------------------- explanations


def blocker(r: RuntimeResult, w: Wait) -> int:
    """The action whose progress ``w`` waits for: the awaited action itself, or, when that one
    is ready and waits for its message, the other end of the message (-1: none comes)."""
    return _blocker(w, r.ready_of, r.matching.partner)


def _blocker(w: Wait, ready_of, partner: Sequence[int]) -> int:
    """:func:`blocker`, with ``ready_of(j)`` the awaited action's ready time (None: not yet)."""
    j = w.awaited
    if w.event == END or ready_of(j) is None:
        return j
    return partner[j]


def explain(g: Graph, r: RuntimeResult, w: Wait, nccl_mode: bool) -> str:
    """Why ``w.head`` waits, in words, naming where the awaited thing is stuck."""
    acts, pos, dev = _At(g.action), _At(g.position_of), _At(g.device_of)
    head, j = acts[w.head], w.awaited
    here = f"device {w.device} is stuck at {head} (position {pos[w.head]})"

    def stream_of(x: int) -> str:
        """The lane of action ``x``, as its device names it."""
        label = r.labels[r.lane_of[x]] if r.labels else "communication stream"
        return f"device {dev[x]}'s {label}"

    lane = (r.labels[r.lane_of[w.head]] if r.labels else "communication stream") \
        if nccl_mode and head.kind in _KINDS_COMM else ("compute stream" if nccl_mode else "host")
    if w.event == END:
        if head.kind in _KINDS_COMM:
            return (f"{here} on its {lane}: NCCL makes the stream wait for the compute posted "
                    f"before it, {acts[j]} (position {pos[j]}), which has not run")
        return (f"{here}: it needs what {acts[j]} produces on device {dev[j]} "
                f"(position {pos[j]}), which has not run")
    if w.head in r.batch_of and j in r.batch_of[w.head]:  # waited for right after it was posted
        group = r.batch_of[w.head]
        what = (f"the batch {'; '.join(str(acts[x]) for x in group)} is waited for as a whole" if len(group) > 1
                else f"{head} blocks until it completes")
        start = f"{here} on its {lane}: {what}, and {acts[j]} (position {pos[j]}) has not completed"
        if r.ready_of(j) is None:
            return f"{start}: it has not reached the head of {stream_of(j)}"
        p = r.matching.partner[j]
        if p < 0:
            return f"{start}: its message never comes"
        posted = f"at the head of {stream_of(p)}" if nccl_mode else "posted"
        return f"{start}: it needs {acts[p]} (device {dev[p]}, position {pos[p]}), not {posted} yet"
    if head.kind in SEND_WAIT_KINDS:  # PyTorch 2.15: a wait() on the send it retires
        holds = "the compute stream (NCCL's wait() makes it wait)" if nccl_mode else "the host (gloo's wait() blocks)"
        start = f"{here}: it holds {holds} until {acts[j]} (position {pos[j]}) completes"
        if r.ready_of(j) is None:
            return f"{start}, which has not reached the head of {stream_of(j)}"
        p = r.matching.partner[j]
        if p < 0:
            return f"{start}, which is never received"
        posted = f"at the head of {stream_of(p)}" if nccl_mode else "posted"
        return (f"{start}: a send completes only with its receive, {acts[p]} (device {dev[p]}, "
                f"position {pos[p]}), which is not {posted} yet")
    if r.ready_of(j) is None:
        return (f"{here}: it waits for {acts[j]} (position {pos[j]}), which has not reached "
                f"the head of {stream_of(j)}")
    p = r.matching.partner[j]
    if p < 0:
        return f"{here}: it waits for {acts[j]} (position {pos[j]}), whose message never comes"
    posted = f"at the head of {stream_of(p)}" if nccl_mode else "posted"
    if j == w.head:
        what = "a send completes only with its receive" if head.kind.startswith("SEND") else \
            "a receive completes only with its send"
        return (f"{here} on its {lane}: {what}, {acts[p]} (device {dev[p]}, position {pos[p]}), "
                f"which is not {posted} yet")
    return (f"{here}: it waits for the data of {acts[j]} (position {pos[j]}), which device "
            f"{dev[p]} sends with {acts[p]} (position {pos[p]}), not {posted} yet")


_KINDS_COMM = frozenset(_COMM_CODES.values())


class _At:
    """``column[i]`` through a function of ``i``, for the few actions an explanation names
    (Graph.action, position_of, device_of: a graph of a schedule's columns makes no list of
    every Action, position or device for them)."""

    def __init__(self, at):
        self.at = at

    def __getitem__(self, i: int):
        return self.at(i)


def _hang(g: Graph, r: RuntimeResult, cycle: list[Wait]) -> Hang:
    steps = [explain(g, r, w, r.on_nccl) for w in cycle]
    devices = {w.device for w in cycle}
    steps += pytorch_notation(g, [w for w in r.stuck if w.device in devices])
    return Hang(tuple(cycle), tuple(steps))


def pytorch_notation(g: Graph, waits: list[Wait], limit: int = 6) -> list[str]:
    """Each device's stuck part, as PyTorch logs it: ``rank 0: [... 0SEND_F1, 2RECV_F0, 2F0]``."""
    by_device: dict[int, list[int]] = {}
    for w in waits:
        by_device.setdefault(w.device, []).append(w.head)
    out = []
    for d in sorted(by_device):
        heads = by_device[d]
        lo, hi = min(heads), max(heads)
        if lo == hi and lo > g.starts[d]:
            lo -= 1  # the action before a single stuck head, for context
        if hi - lo + 1 > limit:
            names = g.names(list(range(lo, lo + limit // 2))) + ["..."] + \
                g.names(list(range(hi + 1 - limit // 2, hi + 1)))
        else:
            names = g.names(list(range(lo, hi + 1)))
        first = "" if lo == g.starts[d] else "... "
        out.append(f"rank {d}: [{first}{', '.join(names)}]")
    return out


__all__ = ["MAX_CYCLES", "RUNTIME_SEMANTICS", "TORCH", "TORCH_NCCL", "Hang", "Matching", "NcclOptions",
           "RuntimeResult", "SendWaits", "Wait", "blocker", "data_deps", "explain", "intended_receive", "match",
           "pytorch_notation", "send_waits", "simulate"]
