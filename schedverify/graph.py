"""The compiled dependency graph and the as-soon-as-possible sweep.

``compile_graph`` flattens a schedule into columns indexed by action (device, position,
kind, stage, the cross-device action each one waits for), reading the rules from
:mod:`schedverify.deps`.  Plain compute-only schedules are compiled in bulk, column by
column with C-level builtins; anything else action by action; both give the same Graph
(tests/test_graph.py).  It records raw facts (duplicates, misplaced actions, same-device
inversions, ...) as indices; :mod:`schedverify.check` turns them into Violations.

``sweep`` runs every device's list in order, each action as soon as its device is free and
its dependencies have ended (docs/spec.md section 4).  It is both the timeline and the deadlock
detector: when no device can move, the devices' waits form a cycle, which is the witness.
Everything is linear in the number of actions; only cross-device dependencies are stored,
since a same-device dependency that comes earlier is implied by device order.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from itertools import chain, compress, repeat
from operator import add, and_, eq, gt, itemgetter, lt, mul, ne
from typing import cast

from . import _accel
from . import deps as rules
from .model import (
    B,
    BOOKKEEPING_KINDS,
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
    Schedule,
    malformation,
    per_stage,
)

#: Integer codes of the kinds that produce something another action can need.
KIND_CODE = {F: 0, B: 1, I: 2, W: 3, SEND_F: 4, RECV_F: 5, SEND_B: 6, RECV_B: 7}
NCODES = 8


def _compiled_needs():
    """deps.NEEDS as integer codes: kind -> ((offset, producer codes, recv code | -1, need))."""
    out = {}
    for kind, needs in rules.NEEDS.items():
        out[kind] = tuple(
            (n.offset, tuple(KIND_CODE[k] for k in n.kinds),
             KIND_CODE[n.recv] if n.recv else -1, n)
            for n in needs
        )
    return out


_NEEDS = _compiled_needs()
_MATCH = {KIND_CODE[k]: (KIND_CODE[v[0]], v[1]) for k, v in rules.MATCH.items()}
# the same rules as plain tuples indexed by kind code, for the compiled kernel
_KINDS_BY_CODE = tuple(sorted(KIND_CODE, key=KIND_CODE.__getitem__))
_KERNEL_NEEDS = tuple(tuple((off, codes, recv) for off, codes, recv, _ in _NEEDS.get(k, ()))
                      for k in _KINDS_BY_CODE)
_KERNEL_MATCH = tuple(_MATCH.get(c) for c in range(NCODES))


@dataclass
class Graph:
    """A schedule flattened for the engines.  ``i`` indexes actions in device order."""

    schedule: Schedule
    explicit_comm: bool
    rendezvous: bool
    acts: list[Action] = field(default_factory=list)
    dev: list[int] = field(default_factory=list)
    pos: list[int] = field(default_factory=list)
    starts: list[int] = field(default_factory=list)  # device d's actions are starts[d]:starts[d+1]
    #: wait[i]: the first action on another device that action i needs, or n (none).  A
    #: need on the same device that comes earlier is implied by device order and not kept.
    wait: list[int] = field(default_factory=list)
    #: further waits of the few actions that have more: i -> ((j, rendezvous?), ...).  A
    #: rendezvous wait (a SEND until its RECV is posted: until j ends on the peer) has no latency.
    more_waits: dict[int, tuple[tuple[int, bool], ...]] = field(default_factory=dict)
    _producer: dict[int, int] | None = field(default=None, repr=False)  # see producer
    # raw facts for the checker
    malformed: list[tuple[int, str]] = field(default_factory=list)
    out_of_range: list[tuple[int, Action]] = field(default_factory=list)
    duplicates: list[tuple[int, int]] = field(default_factory=list)  # (first i, repeat i)
    wrong_device: list[tuple[int, Action, int]] = field(default_factory=list)  # (i, leaf, expected)
    inversions: list[tuple[int, int]] = field(default_factory=list)  # i needs j, later on its device
    missing_recv: list[tuple[int, int, Action]] = field(default_factory=list)  # (i, producer j, recv)
    reduce_grads: list[int] = field(default_factory=list)
    counts: list[int] = field(default_factory=lambda: [0] * NCODES)
    vectorised: bool = False  # built in bulk (_compile_fast or the kernel), not action by action
    comm_matched: bool = False  # every SEND/RECV is known to have its peer (the kernel checked)
    code: list[int] = field(default_factory=list)  # kind code of each plain action, else -1
    stage: list[int] = field(default_factory=list)  # stage of each plain action, else -1
    mixed: list[int] = field(default_factory=list)  # i of an I/B that meets its pair's B/I

    _waits: list | None = field(default=None, repr=False, compare=False)

    @property
    def producer(self) -> dict[int, int]:
        """key(stage, microbatch, kind) -> action index, for every action with a kind code.
        The compiled kernel does not build it (its own table is dense); then it is built from
        the columns on first use."""
        if self._producer is None:
            M = self.schedule.microbatches
            mbs = map(_MB, self.acts)
            self._producer = {(s * M + mb) * NCODES + c: i
                              for i, (s, mb, c) in enumerate(zip(self.stage, mbs, self.code))}
        return self._producer

    @property
    def waits(self) -> list[tuple[int, ...]]:
        """Per action, all its cross-device waits: ``j`` a data edge, ``~j`` a rendezvous
        edge (wait until ``j`` has ended on the peer device).  Built once, on first use."""
        if self._waits is None:
            n, more = len(self.acts), self.more_waits
            out: list[tuple[int, ...]] = [() if j == n else (j,) for j in self.wait]
            for i, extra in more.items():
                out[i] += tuple(~j if sync else j for j, sync in extra)
            self._waits = out
        return self._waits

    def key(self, stage: int, microbatch: int, kind: str) -> int:
        return (stage * self.schedule.microbatches + microbatch) * NCODES + KIND_CODE[kind]

    def find(self, stage: int, microbatch: int, kind: str) -> int | None:
        return self.producer.get(self.key(stage, microbatch, kind))

    @property
    def n(self) -> int:
        return len(self.acts)

    def where(self, i: int) -> tuple[int, int, str]:
        return self.dev[i], self.pos[i], str(self.acts[i])


def compile_graph(schedule: Schedule, *, comm_semantics: str = "eager", fast: bool = True) -> Graph:
    """Compile ``schedule``.  The common case (well-formed, placed, no duplicates, no
    overlaps or bookkeeping; SEND/RECV only under eager semantics, all matched) goes to the
    compiled kernel when it is built; compute-only schedules otherwise take a vectorised path
    (:func:`_compile_fast`); anything else, or ``fast=False``, the general per-action one.
    All build the same Graph (tests/test_graph.py and tests/test_kernel.py hold them to it)."""
    S, M = schedule.stages, schedule.microbatches
    kernel = _accel.kernel
    if fast and kernel is not None and type(schedule.order) is tuple:
        pl = schedule.placement
        columns = kernel.compile_plain(schedule.order, S, M, tuple(map(tuple, pl.routes)),
                                       None if pl.microbatch_route is None else tuple(pl.microbatch_route),
                                       _KERNEL_NEEDS, _KERNEL_MATCH, _KINDS_BY_CODE,
                                       comm_semantics == "eager")
        if columns is not None:
            g = Graph(schedule, columns[-1], False)
            (g.acts, g.dev, g.pos, g.starts, g.wait, g.counts, g.inversions, g.code,
             g.stage) = columns[:-1]
            g.vectorised = True
            g.comm_matched = g.explicit_comm  # the kernel declines unmatched SEND/RECV
            return g
    explicit = schedule.has_explicit_comm
    g = Graph(schedule, explicit, explicit and comm_semantics == "rendezvous")
    if fast and not explicit and _compile_fast(g, S, M):
        return g
    g = Graph(schedule, explicit, explicit and comm_semantics == "rendezvous")
    g._producer = {}
    _index(g, S, M)
    _link(g, S, M)
    g.code = [KIND_CODE.get(a.kind, -1) if a.sub is None and a.microbatch is not None
              and type(a.stage) is int and 0 <= a.stage < S else -1 for a in g.acts]
    # a code >= 0 means an int stage in range (the test of None is only for the type checker)
    g.stage = [a.stage if c >= 0 and a.stage is not None else -1 for a, c in zip(g.acts, g.code)]
    return g


def _compile_fast(g: Graph, S: int, M: int) -> bool:
    """The common case in bulk: only F/B/I/W actions, every index in range, no duplicate,
    every action on its placed device, no pair mixing B with I/W.  Works column by column
    with C-level builtins (map, zip, dict, list.count) instead of a Python loop per action.
    Returns False, having changed nothing that matters, when the schedule is not such a case.
    """
    sched = g.schedule
    acts = list(filter(None, chain.from_iterable(sched.order)))  # an Action is never falsy
    n = len(acts)
    if any(map(_SUB, acts)):
        return False
    found = list(map(_FAST_CODE.get, map(_KIND, acts)))
    if None in found:
        return False
    codes = cast("list[int]", found)  # every kind has a code (no None, just checked)
    stg = list(map(_STAGE, acts))
    mbs = list(map(_MB, acts))
    if n and (not set(map(type, stg)) <= _INT or not set(map(type, mbs)) <= _INT
              or min(stg) < 0 or max(stg) >= S or min(mbs) < 0 or max(mbs) >= M):
        return False
    dev: list[int] = []
    pos: list[int] = []
    starts: list[int] = []
    for d, row in enumerate(sched.order):
        starts.append(len(dev))
        if None in row:
            p = [k for k, a in enumerate(row) if a is not None]
            pos.extend(p)
            dev.extend(repeat(d, len(p)))
        else:
            pos.extend(range(len(row)))
            dev.extend(repeat(d, len(row)))
    starts.append(n)
    pl = sched.placement
    if pl.microbatch_route is None:
        expected = list(map(pl.routes[0].__getitem__, stg))
    else:
        routes, mr = pl.routes, pl.microbatch_route
        expected = [routes[mr[m]][s] for s, m in zip(stg, mbs)]
    if expected != dev:
        return False
    counts = [codes.count(c) for c in range(4)]
    if counts[1] and (counts[2] or counts[3]):
        return False  # a pair might mix B with I/W: the general path says which
    keys = list(map(add, map(add, map(mul, stg, repeat(NCODES * M)), map(mul, mbs, repeat(NCODES))), codes))
    producer = dict(zip(keys, range(n)))
    if len(producer) != n:
        return False  # duplicates
    # Each need slot, as a key delta per kind code.  Out-of-range producer stages give keys
    # that no action has, so the lookup itself says "no such need".  Without mixing, "the
    # first backward" is B everywhere or I everywhere, so the alternative kind is known.
    first_backward = 1 if counts[1] else 2
    missing = n  # "no producer": an index one past the end, which the sweep treats as done
    devx = dev + [-1]
    wait = [missing] * n
    inversions: list = []
    for offset, codediff, alt in _FAST_SLOTS:
        delta = [_NO_KEY if o is None else o * NCODES * M + cd + (first_backward - 1 if a else 0)
                 for o, cd, a in zip(offset, codediff, alt)]
        if all(delta[c] == _NO_KEY for c in set(codes)):
            continue
        js = list(map(producer.get, map(add, keys, map(delta.__getitem__, codes)), repeat(missing)))
        devj = list(map(devx.__getitem__, js))
        inversions += compress(zip(range(n), js), map(and_, map(eq, devj, dev), map(gt, js, range(n))))
        # Placement is right here, so an action has at most one need on another device.
        cross = list(map(and_, map(ne, devj, dev), map(ne, js, repeat(missing))))
        deque(map(wait.__setitem__, compress(range(n), cross), compress(js, cross)), maxlen=0)
    inversions.sort(key=_FIRST)
    g.acts, g.dev, g.pos, g.starts = acts, dev, pos, starts
    g.wait, g._producer, g.counts = wait, producer, counts + [0] * (NCODES - 4)
    g.inversions = inversions
    g.code = codes
    g.stage = stg
    g.vectorised = True
    return True


_SUB = itemgetter(3)
_KIND = itemgetter(1)
_STAGE = itemgetter(0)
_MB = itemgetter(2)
_FIRST = itemgetter(0)
_INT = {int}
_FAST_CODE = {F: 0, B: 1, I: 2, W: 3}
_NO_KEY = -(1 << 62)  # added to any key, gives a key no action has


def _fast_slots():
    """deps.NEEDS for F/B/I/W as per-slot tables indexed by kind code: the producer's stage
    offset (None: no such need), the code difference from this kind to the producer's first
    kind (B for "B or I"), and whether the need accepts an alternative kind."""
    width = max(len(rules.NEEDS[k]) for k in _FAST_CODE)
    slots = []
    for k in range(width):
        offset: list[int | None] = [None] * 4
        codediff, alt = [0] * 4, [0] * 4
        for kind, c in _FAST_CODE.items():
            needs = rules.NEEDS[kind]
            if k < len(needs):
                first = KIND_CODE[needs[k].kinds[0]]
                offset[c] = needs[k].offset
                codediff[c] = first - c
                if len(needs[k].kinds) > 1:
                    alt[c] = 1
        slots.append((offset, codediff, alt))
    return slots


_FAST_SLOTS = _fast_slots()


def _index(g: Graph, S: int, M: int) -> None:
    routes = g.schedule.placement.routes
    route0 = routes[0]
    mroute = g.schedule.placement.microbatch_route
    acts, dev, pos = g.acts, g.dev, g.pos
    producer, counts = g.producer, g.counts
    code_of = KIND_CODE.get
    starts = g.starts

    def leaf(i: int, a: Action, d: int) -> None:
        code = code_of(a.kind)
        s, mb = a.stage, a.microbatch
        if code is None or type(s) is not int or type(mb) is not int or s < 0 or mb < 0:
            g.malformed.append((i, malformation(a)))
            return
        if s >= S or mb >= M:
            g.out_of_range.append((i, a))
            return
        key = (s * M + mb) * NCODES + code
        if key in producer:
            g.duplicates.append((producer[key], i))
            return
        producer[key] = i
        counts[code] += 1
        if code == 1:  # a full backward meets a split one (I or W) of the same pair
            if key + 1 in producer or key + 2 in producer:
                g.mixed.append(i)
        elif (code == 2 or code == 3) and key - code + 1 in producer:
            g.mixed.append(i)
        expected = (routes[mroute[mb]] if mroute is not None else route0)[s]
        if expected != d:
            g.wrong_device.append((i, a, expected))

    for d, row in enumerate(g.schedule.order):
        starts.append(len(acts))
        for p, a in enumerate(row):
            if a is None:
                continue
            i = len(acts)
            acts.append(a)
            dev.append(d)
            pos.append(p)
            sub = a.sub
            if sub is None:
                if a.kind in BOOKKEEPING_KINDS:
                    if type(a.stage) is not int or a.stage < 0 or a.microbatch is not None:
                        g.malformed.append((i, malformation(a)))
                    elif a.stage >= S:
                        g.out_of_range.append((i, a))
                    else:
                        holders = g.schedule.placement.devices_of_stage(a.stage)
                        if d not in holders:  # bookkeeping belongs on a device holding the stage
                            g.wrong_device.append((i, a, min(holders)))
                        if a.kind == REDUCE_GRAD:
                            g.reduce_grads.append(i)
                    continue
                leaf(i, a, d)
            elif (a.kind != OVERLAP_F_B or len(sub) != 2 or sub[0].kind != F
                  or sub[1].kind not in (B, I) or any(x.sub is not None for x in sub)):
                g.malformed.append((i, malformation(a)))
            else:
                leaf(i, sub[0], d)
                leaf(i, sub[1], d)
    starts.append(len(acts))


def _link(g: Graph, S: int, M: int) -> None:
    """Resolve each action's needs to action indices, one action at a time."""
    acts, dev, producer = g.acts, g.dev, g.producer
    explicit, rendezvous = g.explicit_comm, g.rendezvous
    needs_of = _NEEDS.get
    inversions, missing_recv = g.inversions, g.missing_recv
    n = len(acts)
    wait = [n] * n
    more_waits = g.more_waits
    for i, a in enumerate(acts):
        d = dev[i]
        found: list[tuple[int, bool]] = []
        for x in (a.sub if a.sub is not None else (a,)):
            needs = needs_of(x.kind)
            if not needs:
                continue
            s, mb = x.stage, x.microbatch
            if type(s) is not int or type(mb) is not int or not (0 <= s < S and 0 <= mb < M):
                continue
            for offset, codes, recv, _need in needs:
                ps = s + offset
                if ps < 0 or ps >= S:
                    continue
                base = (ps * M + mb) * NCODES
                j = producer.get(base + codes[0])
                if j is None and len(codes) > 1:
                    j = producer.get(base + codes[1])
                if j is None:
                    continue  # missing: the completeness rule reports it
                if j == i:  # an overlap's backward needs its own forward half: impossible
                    inversions.append((i, i))
                    continue
                if explicit and recv >= 0 and dev[j] != d:
                    r = producer.get((s * M + mb) * NCODES + recv)
                    if r is None:
                        missing_recv.append((i, j, Action(s, _RECV_KIND[recv], mb)))
                    else:
                        j = r
                if dev[j] == d:
                    if j > i:
                        inversions.append((i, j))
                    continue
                found.append((j, False))
            if rendezvous and x.kind in (SEND_F, SEND_B):
                peer_code, off = _MATCH[KIND_CODE[x.kind]]
                if 0 <= s + off < S:
                    r = producer.get(((s + off) * M + mb) * NCODES + peer_code)
                    if r is not None and dev[r] != d and r > g.starts[dev[r]]:
                        found.append((r - 1, True))
        if found:
            if not found[0][1]:
                wait[i] = found.pop(0)[0]
            if found:
                more_waits[i] = tuple(found)
    g.wait = wait


_RECV_KIND = {KIND_CODE[RECV_F]: RECV_F, KIND_CODE[RECV_B]: RECV_B}


# --------------------------------------------------------------------------- the sweep


@dataclass
class SweepResult:
    start: list[float]
    end: list[float]
    cycles: list[list[tuple[int, int]]]  # each cycle: [(head i, awaited j)], in wait order

    @property
    def completed(self) -> bool:
        return not self.cycles


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
            return SweepResult(timed[0], timed[1], [])
    n = len(g.acts)
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


def _find_cycle(blocked: dict[int, tuple[int, int]], dev: list[int]) -> list[tuple[int, int]]:
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


def durations_for(g: Graph, costs) -> list[float]:
    """Each action's duration under ``costs`` (a :class:`schedverify.model.Costs`)."""
    kinds = [k for k, _ in sorted(KIND_CODE.items(), key=lambda kv: kv[1])]
    values = [getattr(costs, k) for k in kinds]
    if not any(isinstance(v, tuple) for v in values):
        table = values + [0]  # index -1: patched below
        out = list(map(table.__getitem__, g.code))
    else:
        S = g.schedule.stages
        table = [[per_stage(v, s) for s in range(S)] for v in values]
        out = [table[c][s] if c >= 0 else 0 for c, s in zip(g.code, g.stage)]
    if g.vectorised:
        return out  # built in bulk: no overlap, bookkeeping or malformed action (code -1)
    for i in compress(range(len(out)), map(lt, g.code, repeat(0))):
        try:
            out[i] = costs.of(g.acts[i])
        except (IndexError, TypeError):
            out[i] = 0  # an out-of-range stage on a per-stage cost: reported as a violation
    return out
