"""The Z3 checker: an independent encoding of docs/spec.md section 3, verdicts from the solver.

This engine shares no code with the graph checker (:mod:`schedverify.graph`,
:mod:`schedverify.check`); it reads the same rule tables (:mod:`schedverify.deps`) and
reports with the same codes (:mod:`schedverify.diagnostics`), so the two can be run side
by side (``schedverify check --engine both``) and any disagreement is a bug in one of them.

- Structural rules that are not timing (3.1 well-formed, 3.2 complete, 3.3 placed, 3.5
  matched SEND/RECV) are checked by the small indexing code below.
- Order and deadlock (3.4, 3.5): every action gets an integer rank; device order says that
  each action's rank exceeds its predecessor's; every dependency (data, RECV, and the
  rendezvous wait of a SEND for its RECV to be posted) is a tracked constraint "rank of
  the consumer exceeds the rank of the producer".  The schedule can run iff these are
  satisfiable.  An unsat core is mapped back: a core made of one same-device dependency is
  a ``runs-before-dependency`` (the device waits for itself), a core of cross-device waits
  is a deadlock cycle (``rendezvous-deadlock`` when one of its waits exists only under
  rendezvous semantics).  Each core found is relaxed and the solver asked again, so every
  independent problem is reported (deadlock cycles up to 10, as the graph engine).
- Timing (section 4): start times are real variables with the same constraints in time
  (durations, ``comm`` across devices); the least makespan Z3 finds is the as-soon-as-
  possible makespan.
- Memory (3.6): memory after each action's allocations is a chain of real variables
  (``m_p = m_(p-1) - freed by action p-1 + allocated by action p``); each "within the limit"
  is a tracked assumption, and the first position over the limit on each device is found by
  bisecting prefixes.
- PyTorch's runtime (section 8, ``torch`` over gloo and ``torch-nccl`` over NCCL): 3.1-3.4
  and 3.6 as under eager, plus the loss order (SV406).  With listed communication, 3.5 is
  replaced: positional matching (8.2) is indexed per ordered device pair (crossed labels
  SV504, surplus SV501/SV502), and every constraint of 8.4 is a constraint between events
  (start/end of compute, ready/done of SEND/RECV): lane order (host thread, compute stream,
  communication streams) asserted, every other wait (data, a message, a send's rendezvous,
  a stream waiting for compute) tracked, on integer ranks.  An unsat core is a cycle of the
  events' "strictly after" order: a hang (8.5), SV402, or SV405 under torch-nccl when gloo's
  constraints have no cycle.  Events that wait for an unmatched message never happen; when
  one the run needs is among them there is no makespan, else it is minimised over real times.

A solver that gives up (time limit) makes the verdict UNKNOWN with the reason, never valid.
Every phase (indexing, building each encoding, each solver call) runs under one
:class:`~schedverify.budget.Budget` of ``timeout_s`` seconds, so the check answers within its limit
plus :data:`~schedverify.budget.OVERSHOOT_S`; every solver call goes through :func:`.solver.check`,
which turns Ctrl-C into :class:`KeyboardInterrupt`, never into UNKNOWN.
"""

from __future__ import annotations

from collections.abc import Iterator
from fractions import Fraction

from .. import deps as rules
from .. import diagnostics as dx
from ..diagnostics import Location, Report, Verdict, Violation
from ..errors import EngineDisagreement, UsageError  # noqa: F401 - EngineDisagreement re-exported
from ..model import (
    ALL_KINDS,
    B,
    BATCH,
    BOOKKEEPING_KINDS,
    COMM_KINDS,
    F,
    I,
    OVERLAP_F_B,
    RECV_F,
    REDUCE_GRAD,
    SEND_B,
    SEND_F,
    SEND_OF,
    SEND_WAIT_KINDS,
    WAIT_REDUCE_GRAD,
    W,
    Action,
    Schedule,
    malformation,
    per_stage,
    resolve_costs,
    resolve_memory,
)
from ..budget import Budget, TimeUp

MAX_CYCLES = 10
_LEAF_KINDS = frozenset({F, B, I, W}) | COMM_KINDS
_EPS = Fraction(1, 10**9)


class _Undecided(Exception):
    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def _paced(items, budget: Budget, every: int = 1024):
    """``items`` as they are, checking ``budget`` every ``every`` of them (raises
    :class:`~schedverify.budget.TimeUp` when it is spent): for the loops that build an encoding."""
    for n, x in enumerate(items):
        if not n % every:
            budget.check()
        yield x


class _Index:
    """The schedule as entries (one per non-idle slot) plus the structural findings."""

    def __init__(self, schedule: Schedule):
        self.s = schedule
        S, M = schedule.stages, schedule.microbatches
        self.entries: list[tuple[int, int, Action]] = []  # (device, position, action)
        self.first: dict[tuple[int, int, str], int] = {}  # (stage, mb, kind) -> first entry
        self.found: list[Violation] = []  # structural, in rule order
        malformed: list[tuple[int, str]] = []
        out_of_range: list[tuple[int, Action]] = []  # their stage is an int (their index is out of range)
        duplicate: list[tuple[int, int, Action]] = []
        mixed: list[int] = []
        wrong: list[tuple[int, Action, int]] = []  # well-formed, with an int stage in range
        self.reduce_grads: list[int] = []
        self.reductions: list[int] = []  # placed REDUCE_GRAD and WAIT_REDUCE_GRAD entries, in order
        self.send_waits: list[int] = []  # placed WAIT_SEND_F/WAIT_SEND_B entries, in order
        self.batches: list[tuple[int, ...]] = []  # the entries of each BATCH (docs/spec.md 10)
        self.batch_at: list[tuple[int, int, Action]] = []  # (device, position, BATCH) of each
        routes = schedule.placement.routes
        mroute = schedule.placement.microbatch_route
        for d, row in enumerate(schedule.order):
            # a well-formed BATCH is its operations, each an entry at the BATCH's position
            laid: list[tuple[int, Action]] = []
            for p, a in enumerate(row):
                if a is None:
                    continue
                if a.kind == BATCH and a.sub and all(x.sub is None and x.kind in COMM_KINDS for x in a.sub):
                    first = len(self.entries) + len(laid)
                    self.batches.append(tuple(range(first, first + len(a.sub))))
                    self.batch_at.append((d, p, a))
                    laid += [(p, x) for x in a.sub]
                else:
                    laid.append((p, a))
            for p, a in laid:
                e = len(self.entries)
                self.entries.append((d, p, a))
                leaves: tuple[Action, ...]
                if a.sub is not None or a.kind == OVERLAP_F_B:
                    subs = a.sub or ()
                    if (a.kind != OVERLAP_F_B or len(subs) != 2 or subs[0].kind != F
                            or subs[1].kind not in (B, I) or any(x.sub is not None for x in subs)):
                        malformed.append((e, malformation(a)))
                        continue
                    leaves = subs
                elif a.kind in BOOKKEEPING_KINDS:
                    if type(a.stage) is not int or a.stage < 0 or a.microbatch is not None:
                        malformed.append((e, malformation(a)))
                    elif a.stage >= S:
                        out_of_range.append((e, a))
                    else:
                        if d not in schedule.placement.devices_of_stage(a.stage):
                            wrong.append((e, a, min(schedule.placement.devices_of_stage(a.stage))))
                        elif a.kind in (REDUCE_GRAD, WAIT_REDUCE_GRAD):
                            self.reductions.append(e)
                        if a.kind == REDUCE_GRAD:
                            self.reduce_grads.append(e)
                    continue
                elif a.kind in SEND_WAIT_KINDS:  # 9.2: a stage and a microbatch, on the send's device
                    s_, mb_ = a.stage, a.microbatch
                    if type(s_) is not int or type(mb_) is not int or s_ < 0 or mb_ < 0:
                        malformed.append((e, malformation(a)))
                    elif s_ >= S or mb_ >= M:
                        out_of_range.append((e, a))
                    elif (home := schedule.placement.device(s_, mb_)) != d:
                        wrong.append((e, a, home))
                    else:
                        self.send_waits.append(e)
                    continue
                else:
                    leaves = (a,)
                for x in leaves:
                    s, mb = x.stage, x.microbatch
                    if (x.kind not in _LEAF_KINDS or type(s) is not int or type(mb) is not int
                            or s < 0 or mb < 0):
                        malformed.append((e, malformation(x)))
                        continue
                    if s >= S or mb >= M:
                        out_of_range.append((e, x))
                        continue
                    key = (s, mb, x.kind)
                    if key in self.first:
                        duplicate.append((e, self.first[key], x))
                        continue
                    self.first[key] = e
                    split = (s, mb, I) in self.first or (s, mb, W) in self.first
                    if x.kind == B and split or x.kind in (I, W) and (s, mb, B) in self.first:
                        mixed.append(e)
                    expected = (routes[mroute[mb]] if mroute is not None else routes[0])[s]
                    if expected != d:
                        wrong.append((e, x, expected))
        #: some action sits off its stage's device (SV201): the rules that read one device's
        #: order (8.3) read every device's then, as the graph engine does
        self.off_device = bool(wrong)
        V = self.found.append
        for e, why in malformed:
            V(Violation(dx.MALFORMED_ACTION, why, (self.loc(e),)))
        for e, x in out_of_range:
            assert x.stage is not None
            if x.stage >= S:
                msg = f"stage {x.stage} is out of range: the schedule has {S} stages (0..{S - 1})"
            else:
                msg = (f"microbatch {x.microbatch} is out of range: the schedule has {M} "
                       f"microbatches (0..{M - 1})")
            V(Violation(dx.INDEX_OUT_OF_RANGE, msg, (self.loc(e),)))
        for e, f, x in duplicate:
            d, p, _ = self.entries[f]
            V(Violation(dx.DUPLICATE_ACTION, f"{x} appears again; it first appears at device {d}, "
                        f"position {p}", (self.loc(e), self.loc(f))))
        for e in mixed:
            V(Violation(dx.MIXED_BACKWARD, f"{self.entries[e][2]} mixes a full backward B with a "
                        "split backward (I/W) of the same stage and microbatch", (self.loc(e),)))
        for s in range(S):
            for mb in range(M):
                have = {k for k in (F, B, I, W) if (s, mb, k) in self.first}
                if F not in have:
                    V(self._missing(Action(s, F, mb), f"stage {s} never runs the forward of microbatch {mb}"))
                if B in have:
                    continue
                if I not in have and W not in have:
                    V(self._missing(Action(s, B, mb), f"stage {s} never runs the backward of "
                                    f"microbatch {mb} (no {s}B{mb}, no {s}I{mb} with {s}W{mb})"))
                elif W not in have:
                    V(self._missing(Action(s, W, mb), f"{s}I{mb} has no weight-gradient pass {s}W{mb}"))
                elif I not in have:
                    V(self._missing(Action(s, I, mb), f"{s}W{mb} has no input-gradient pass {s}I{mb}"))
        for e, x, expected in wrong:
            assert x.stage is not None
            if x.microbatch is None:
                held = sorted(schedule.placement.devices_of_stage(x.stage))
                V(Violation(dx.WRONG_DEVICE, f"stage {x.stage} is held by device(s) "
                            f"{', '.join(map(str, held))}, but {x} sits on device {self.entries[e][0]}",
                            (self.loc(e),)))
                continue
            V(Violation(dx.WRONG_DEVICE, f"stage {x.stage} runs on device {expected}, but {x} sits on "
                        f"device {self.entries[e][0]}", (self.loc(e),)))

    def loc(self, e: int) -> Location:
        d, p, a = self.entries[e]
        return Location(d, p, str(a))

    def _missing(self, a: Action, msg: str) -> Violation:
        assert a.stage is not None  # built above from an in-range (stage, microbatch)
        return Violation(dx.MISSING_ACTION, msg,
                         (Location(self.s.placement.device(a.stage, a.microbatch), None, str(a)),))

    def memory_leaves(self, e: int) -> Iterator[tuple[str, int]]:
        """(kind, stage) of the compute leaves that move memory: any F/B/I/W whose stage is in
        range (memory is counted by stage, even for an action reported for its microbatch index)."""
        a = self.entries[e][2]
        for x in (a.sub if a.sub is not None else (a,)):
            stage = x.stage
            if x.kind in (F, B, I, W) and type(stage) is int and 0 <= stage < self.s.stages:
                yield x.kind, stage

    def leaves(self, e: int):
        a = self.entries[e][2]
        out = a.sub if a.sub is not None else (a,)
        S, M = self.s.stages, self.s.microbatches
        for x in out:
            if (x.kind in _LEAF_KINDS and type(x.stage) is int and type(x.microbatch) is int
                    and 0 <= x.stage < S and 0 <= x.microbatch < M):
                yield x


class _Edges:
    """Every wait of docs/spec.md 3.4-3.5, read from deps: (consumer, producer, latency, why, kind)
    with kind "same" (same device), "data" or "rendezvous"; plus unmatched SEND/RECV and
    missing RECV findings."""

    def __init__(self, ix: _Index, semantics: str, comm: Fraction, budget: Budget | None = None):
        budget = budget if budget is not None else Budget(None)
        sched = ix.s
        S, M = sched.stages, sched.microbatches
        explicit = sched.has_explicit_comm
        rendezvous = explicit and semantics == "rendezvous"
        dev = [d for d, _, _ in ix.entries]
        self.edges: list[tuple[int, int, Fraction, str, str]] = []
        self.comm_found: list[Violation] = []
        missing_recv: list[tuple[int, int, Action]] = []
        first = ix.first
        # position of each entry among its device's entries, and the entry before it
        prev: dict[int, int | None] = {}
        last: dict[int, int] = {}
        for e, d in enumerate(dev):
            prev[e] = last.get(d)
            last[d] = e
        for e in _paced(range(len(ix.entries)), budget):
            d = dev[e]
            for x in ix.leaves(e):
                s, mb = x.stage, x.microbatch
                assert s is not None and mb is not None  # leaves() yields in-range leaves only
                for need, ps in rules.needs(x, S):
                    j = next((first[(ps, mb, k)] for k in need.kinds if (ps, mb, k) in first), None)
                    if j is None:
                        continue
                    if j == e:  # an overlap whose backward needs its own forward half
                        self.edges.append((e, e, Fraction(0), need.why.format(dep=str(x)), "same"))
                        continue
                    why = need.why.format(dep=str(ix.entries[j][2]))
                    if explicit and need.recv and dev[j] != d:
                        r = first.get((s, mb, need.recv))
                        if r is None:
                            missing_recv.append((e, j, Action(s, need.recv, mb)))
                        else:
                            j, why = r, f"needs the input that {ix.entries[r][2]} receives"
                    if dev[j] == d:
                        self.edges.append((e, j, Fraction(0), why, "same"))
                    else:
                        self.edges.append((e, j, comm, why, "data"))
                if rendezvous and x.kind in rules.RENDEZVOUS:
                    peer, off = rules.MATCH[x.kind]
                    if 0 <= s + off < S:
                        r = first.get((s + off, mb, peer))
                        if r is not None and dev[r] != d and (k := prev[r]) is not None:
                            why = rules.RENDEZVOUS_WHY.format(
                                dep=f"{ix.entries[r][2]} (after {ix.entries[k][2]})")
                            self.edges.append((e, k, Fraction(0), why, "rendezvous"))
        self.unmatched_found: list[Violation] = []  # 3.5: by label (eager, rendezvous)
        self.missing_found: list[Violation] = []  # SV503 (3.5 and 8.3 alike)
        if not explicit:
            return
        for e, (_d, _p, a) in enumerate(ix.entries):
            if a.kind not in COMM_KINDS or type(a.stage) is not int or type(a.microbatch) is not int:
                continue
            if not (0 <= a.stage < S and 0 <= a.microbatch < M):
                continue
            peer, off = rules.MATCH[a.kind]
            ps = a.stage + off
            if 0 <= ps < S and (ps, a.microbatch, peer) in first:
                continue
            sending = a.kind.startswith("SEND")
            code = dx.UNMATCHED_SEND if sending else dx.UNMATCHED_RECV
            self.unmatched_found.append(Violation(
                code, f"{a} has no matching {Action(ps, peer, a.microbatch)}", (ix.loc(e),)))
        for e, j, recv in missing_recv:
            assert recv.stage is not None  # built from a leaf's stage
            self.missing_found.append(Violation(
                dx.MISSING_RECV,
                f"{ix.entries[e][2]} needs what {ix.entries[j][2]} produces on device {dev[j]}, but "
                f"device {dev[e]} has no {recv} to receive it",
                (ix.loc(e), Location(sched.placement.device(recv.stage, recv.microbatch), None, str(recv)))))
        self.comm_found = self.unmatched_found + self.missing_found


def _is_comm(a: Action, S: int) -> bool:
    """Whether an entry is a SEND/RECV the runtime posts (docs/spec.md 8.1): a plain
    communication action with a stage in range and a microbatch index (one out of range is
    posted, but has no peer)."""
    return (a.sub is None and a.kind in COMM_KINDS and a.microbatch is not None
            and type(a.stage) is int and 0 <= a.stage < S)


class _Positional:
    """docs/spec.md 8.2, indexed: on each communicator and ordered device pair (a, b), the k-th
    SEND posted on ``a`` to ``b`` is received by the k-th RECV posted on ``b`` from ``a``,
    whatever the labels; which communicator a message goes on is the runtime's layout's."""

    def __init__(self, ix: _Index, layout):
        sched = ix.s
        S, M = sched.stages, sched.microbatches
        self.comm = [_is_comm(a, S) for _, _, a in ix.entries]
        self.partner: dict[int, int] = {}
        self.peer_device: dict[int, int] = {}  # the device the message goes to or comes from
        self.sending = [c and a.kind in (SEND_F, SEND_B) for c, (_, _, a) in zip(self.comm, ix.entries)]
        sends: dict[tuple[int, int, tuple[int, ...]], list[int]] = {}
        recvs: dict[tuple[int, int, tuple[int, ...]], list[int]] = {}
        unmatched: list[tuple[int, str]] = []
        crossed: list[tuple[int, int, int, Action]] = []
        for e, (d, _p, a) in enumerate(ix.entries):
            if not self.comm[e]:
                continue
            _kind, off = rules.MATCH[a.kind]
            # _is_comm: an int stage in range and a microbatch index
            assert a.stage is not None and a.microbatch is not None
            ps, mb = a.stage + off, a.microbatch
            if not (0 <= ps < S and 0 <= mb < M):
                if 0 <= mb < M:  # an out-of-range microbatch is SV102 already
                    side = "next" if off > 0 else "previous"
                    what = "send to" if self.sending[e] else "receive from"
                    unmatched.append((e, f"{a} has no peer: stage {a.stage} has no {side} stage to {what}"))
                continue
            pd = sched.placement.device(ps, mb)
            self.peer_device[e] = pd
            forward = a.kind in (SEND_F, RECV_F)
            if self.sending[e]:
                sends.setdefault((d, pd, layout.communicator(d, pd, forward)), []).append(e)
            else:
                recvs.setdefault((pd, d, layout.communicator(pd, d, forward)), []).append(e)
        for pair in sorted(sends.keys() | recvs.keys()):
            a_dev, b_dev, _comm = pair
            ss, rs = sends.get(pair, []), recvs.get(pair, [])
            for k, (x, r) in enumerate(zip(ss, rs)):
                self.partner[x], self.partner[r] = r, x
                sa, ra = ix.entries[x][2], ix.entries[r][2]
                kind, off = rules.MATCH[sa.kind]
                assert sa.stage is not None  # a SEND the runtime posts (_is_comm)
                if (sa.stage + off, kind, sa.microbatch) != (ra.stage, ra.kind, ra.microbatch):
                    crossed.append((x, r, k, Action(sa.stage + off, kind, sa.microbatch)))
            for k in range(len(rs), len(ss)):
                unmatched.append((ss[k], (
                    f"{ix.entries[ss[k]][2]} is send {k} (counting from 0) from device {a_dev} to "
                    f"device {b_dev}, but device {b_dev} posts {_count(len(rs), 'receive')} from device "
                    f"{a_dev}: messages are matched by posting order, so it is never received and the "
                    "step's final wait for it never returns")))
            for k in range(len(ss), len(rs)):
                unmatched.append((rs[k], (
                    f"{ix.entries[rs[k]][2]} is receive {k} (counting from 0) on device {b_dev} from "
                    f"device {a_dev}, but device {a_dev} posts {_count(len(ss), 'send')} to device "
                    f"{b_dev}: messages are matched by posting order, so it never completes and "
                    "whatever waits for it waits forever")))
        self.found: list[Violation] = []
        for e, msg in sorted(unmatched):
            code = dx.UNMATCHED_SEND if self.sending[e] else dx.UNMATCHED_RECV
            self.found.append(Violation(code, msg, (ix.loc(e),)))
        for x, r, k, meant in sorted(crossed):
            ra = ix.entries[r][2]
            self.found.append(Violation(
                dx.CROSSED_MESSAGES,
                f"{ix.entries[x][2]} is send {k} from device {ix.entries[x][0]} to device "
                f"{ix.entries[r][0]}, so it lands in receive {k} there, {ra}, not in {meant}: {ra}'s "
                f"buffer gets the data meant for {meant} (wrong numbers when the shapes agree, an abort "
                "when they do not); post the receives in the order of the sends", (ix.loc(x), ix.loc(r))))


def _count(n: int, what: str) -> str:
    return f"no {what}" if n == 0 else f"only {n} {what}{'s' * (n != 1)}"


class _Events:
    """docs/spec.md 8.4 as constraints on events.  Entry ``e`` has two events: ``2e`` is
    start(e) (a compute action) or ready(e) (a SEND/RECV), ``2e+1`` end(e) or done(e).

    ``hard``: (event, after, delay) constraints that follow one lane's own order (an
    action's second event after its first; the host thread, the compute stream or a
    communication stream in posting order); they never form a cycle.  ``waits``: every
    other constraint, (event, after, delay, kind) with kind ``data`` (a compute action waits
    for its input), ``message`` (a receive completes after its send is posted), ``rendezvous``
    (a send completes with its receive) or ``stream`` (NCCL: a stream waits for the compute
    posted before it).  ``never``: the done of a SEND/RECV without a partner: it never happens.
    ``lane``: the lane of each event (hosts under gloo; compute and comm streams under NCCL).
    """

    def __init__(self, chk: _Z3Check, nccl_mode: bool, data: dict[int, list[tuple[int, Fraction]]]):
        ix, pm, rt = chk.ix, chk._pm, chk._rt
        n = len(ix.entries)
        dur = chk.durations()
        self.nccl_mode = nccl_mode
        buffered = nccl_mode and rt.nccl.buffered_sends
        self.hard: list[tuple[int, int, Fraction]] = []
        self.waits: list[tuple[int, int, Fraction, str]] = []
        self.never: set[int] = set()
        self.lane = [0] * (2 * n)
        self.lane_name: list[str] = []
        comm = pm.comm
        for e in range(n):
            if not comm[e]:
                self.hard.append((2 * e + 1, 2 * e, dur[e]))
                continue
            p = pm.partner.get(e)
            if p is None:
                self.never.add(2 * e + 1)
                self.hard.append((2 * e + 1, 2 * e, Fraction(0)))
                continue
            delta = max(dur[e], dur[p])
            self.hard.append((2 * e + 1, 2 * e, delta))
            if not pm.sending[e]:
                self.waits.append((2 * e + 1, 2 * p, chk.comm + delta, "message"))
            elif not buffered:
                self.waits.append((2 * e + 1, 2 * p, delta, "rendezvous"))
        by_dev: dict[int, list[int]] = {}
        for e, (d, _, _) in enumerate(ix.entries):
            by_dev.setdefault(d, []).append(e)
        # docs/spec.md 10: operations waited for together right after they are posted (each
        # BATCH; each SEND and RECV alone under a framework whose point-to-point blocks)
        group: dict[int, tuple[int, ...]] = {e: b for b in ix.batches for e in b}
        if rt.release.blocking_p2p:
            group.update({e: (e,) for e in range(n) if comm[e] and e not in group})
        self.waited = set(group)  # their completion is part of the run

        def lane(name: str, items: list[int]) -> None:
            k = len(self.lane_name)
            self.lane_name.append(name)
            for e in items:
                self.lane[2 * e] = self.lane[2 * e + 1] = k

        for d in sorted(by_dev):
            ents = by_dev[d]
            if not nccl_mode:  # gloo: one host thread; posting takes no time
                lane(f"device {d}'s host", ents)
                h = None
                after: tuple[int, ...] = ()  # the batch the host waits for before its next action
                for e in ents:
                    if h is not None:
                        self.hard.append((2 * e, h, Fraction(0)))
                    for x in after:
                        self.waits.append((2 * e, 2 * x + 1, Fraction(0), "batch"))
                    after = group[e] if e in group and e == group[e][-1] else ()
                    h = 2 * e if comm[e] else 2 * e + 1
                continue
            computes = [e for e in ents if not comm[e]]
            lane(f"device {d}'s compute stream", computes)
            for a, b in zip(computes, computes[1:]):
                self.hard.append((2 * b, 2 * a + 1, Fraction(0)))
            streams: dict[tuple, list[int]] = {}
            lastc = None
            pending: tuple[int, ...] = ()  # a batch waited for since the last compute action
            for e in ents:
                if not comm[e]:
                    lastc = e
                    for x in pending:  # req.wait(): the compute stream waits for the batch
                        self.waits.append((2 * e, 2 * x + 1, Fraction(0), "batch"))
                    pending = ()
                    continue
                if lastc is not None:
                    self.waits.append((2 * e, 2 * lastc + 1, Fraction(0), "stream"))
                grp = group.get(e)
                for x in pending:  # ... and every stream waits for the compute stream
                    self.waits.append((2 * e, 2 * x + 1, Fraction(0), "batch"))
                # one stream per communicator (9.4); a lazily made shared group: one per peer,
                # but a batch is one group on its communicator's own stream
                peer = pm.peer_device.get(e)
                kind = ix.entries[e][2].kind
                key = (("no peer",) if peer is None else
                       rt.layout.stream(d, peer, pm.sending[e], kind in (SEND_F, RECV_F), rt.lazy and grp is None))
                streams.setdefault(key, []).append(e)
                if grp is not None and e == grp[-1]:
                    pending = grp
            for key in sorted(streams, key=repr):
                items = streams[key]
                named = "" if key in ((), ("no peer",)) else f" {key}"
                lane(f"device {d}'s communication stream{named}", items)
                # in stream order, a batch's operations as one unit: all after the unit
                # before, the unit after them after all of them
                units: list[list[int]] = []
                for e in items:
                    if units and e in group and units[-1][0] in group and group[units[-1][0]] == group[e]:
                        units[-1].append(e)
                    else:
                        units.append([e])
                for u, v in zip(units, units[1:]):
                    for a in u:
                        for b2 in v:
                            self.hard.append((2 * b2, 2 * a + 1, Fraction(0)))
        for e, deps in data.items():
            for j, lat in deps:
                self.waits.append((2 * e, 2 * j + 1, lat, "data"))
        for w, sent in chk.retired.items():  # 9.2: a wait() for the send it retires
            self.waits.append((2 * w, 2 * sent + 1, Fraction(0), "retire"))

    def never_closure(self) -> set[int]:
        """Every event that waits, directly or not, for one that never happens."""
        out = set(self.never)
        succ: dict[int, list[int]] = {}
        for tgt, src, *_ in self.hard + self.waits:
            succ.setdefault(src, []).append(tgt)
        todo = list(out)
        while todo:
            x = todo.pop()
            for y in succ.get(x, ()):
                if y not in out:
                    out.add(y)
                    todo.append(y)
        return out

    def cycle(self, core: list[int]) -> list[int]:
        """The waits of ``core`` (a minimal unsat core: a cycle together with lane order) in
        wait order: from an event, to what it waits for, along its lane to the next wait."""
        after: dict[int, list[tuple[int, int | None]]] = {}
        for tgt, src, _ in self.hard:
            after.setdefault(tgt, []).append((src, None))
        for k in core:
            tgt, src, *_ = self.waits[k]
            after.setdefault(tgt, []).append((src, k))
        for k0 in core:
            t0, s0, *_ = self.waits[k0]
            prev: dict[int, tuple[int, int | None]] = {s0: (t0, k0)}
            todo = [s0]
            while todo and t0 not in prev:
                x = todo.pop()
                for y, via in after.get(x, ()):
                    if y not in prev:
                        prev[y] = (x, via)
                        todo.append(y)
            if t0 not in prev:
                continue
            path: list[int] = []
            x = t0
            while True:  # walk back from t0 to s0, then the wait k0 itself
                x, via = prev[x]
                if via is not None:
                    path.append(via)
                if via == k0:
                    break
            path.reverse()
            return path
        raise AssertionError("unsat core without a cycle")


class _Z3Check:
    def __init__(self, schedule, costs, memory, memory_limit, comm_semantics, timeout_s, max_violations,
                 nccl=None, budget: Budget | None = None, torch=None, p2p=None, runtime_options=None,
                 framework=None):
        if not isinstance(schedule, Schedule):
            raise UsageError(f"expected a Schedule, got {type(schedule).__name__}")
        from ..releases import runtime_of  # the runtime's data only: no graph-engine code is used

        sem, self.rt = runtime_of(schedule, comm_semantics, nccl, torch, p2p, runtime_options, framework)
        self.refusal: str | None = None
        if self.rt is not None and self.rt.options.max_outstanding_sends is not None:
            from ..sendwaits import as_loaded  # what the runtime runs of what it loads (9.2)

            loaded = as_loaded(schedule, self.rt)
            schedule, self.refusal = loaded.schedule, loaded.refusal
        if timeout_s is None or timeout_s <= 0:
            raise UsageError(f"timeout must be > 0 seconds, got {timeout_s!r}")
        import z3

        self.z3 = z3
        self.schedule = schedule
        self.semantics = sem
        self.costs = resolve_costs(schedule, costs)
        self.memory = resolve_memory(schedule, memory, memory_limit)
        self.budget = budget if budget is not None else Budget(timeout_s)
        self.max_violations = max_violations
        # the structural rules: linear in the actions (0.3 s per 100k) and never cut short, so
        # a schedule with structural violations is INVALID whatever the time limit
        self.ix = _Index(schedule)
        self.comm = Fraction(self.costs.comm).limit_denominator(10**9)
        # PyTorch's runtime (docs/spec.md 8): the rules of 3.1-3.4 as under eager; with listed
        # communication, 3.5 is replaced by positional matching and the event constraints of 8.4
        self.runtime = self.rt is not None
        self.explicit_runtime = self.runtime and schedule.has_explicit_comm
        self.retired: dict[int, int] = {}  # 9.2: WAIT_SEND entry -> the send entry it retires
        self.ed: _Edges | None = None  # the waits, in run(): they take time from the budget
        self.pm: _Positional | None = None
        self.warnings: list[str] = []
        if self.explicit_runtime and not any(
                a.kind == REDUCE_GRAD for row in schedule.order for a in row if a is not None):
            self.warnings.append(
                "the schedule lists its communication but no REDUCE_GRAD: PyTorch's runtime runs it "
                "without scaling the gradients by the number of microbatches (docs/spec.md 8.3)")

    @property
    def _ed(self) -> _Edges:
        """The waits; run() builds them before any method that reads them."""
        assert self.ed is not None
        return self.ed

    @property
    def _rt(self):
        """The runtime (a :class:`schedverify.releases.Runtime`); set under torch and torch-nccl,
        the only semantics whose methods read it."""
        assert self.rt is not None
        return self.rt

    @property
    def _pm(self) -> _Positional:
        """The positional matching; run() builds it (explicit communication under a runtime
        semantics) before any method that reads it."""
        assert self.pm is not None
        return self.pm

    def solver(self):
        from .solver import make_solver

        if self.budget.expired():
            raise _Undecided("time limit reached")
        return make_solver(timeout_s=self.budget.remaining(), unsat_core=True, core_minimize=True)

    def check(self, s, *assumptions, what: str):
        """One solver call (through :func:`.solver.check`): sat or unsat; _Undecided else."""
        from .solver import check

        r, why = check(s, *assumptions, budget=self.budget)
        if r != self.z3.sat and r != self.z3.unsat:
            raise _Undecided(why if why == "time limit reached" else f"solver gave up on {what}: {why}")
        return r

    def run(self) -> Report:
        found = list(self.ix.found)
        ordered: list[Violation] = []
        reason: str | None = None
        cycles: list[Violation] = []
        makespan: Fraction | None = None
        mem = None
        comm_found: list[Violation] = []
        try:
            self.ed = _Edges(self.ix, "eager" if self.runtime else self.semantics, self.comm,
                             self.budget)
            self.pm = _Positional(self.ix, self._rt.layout) if self.explicit_runtime else None
            comm_found = self.ed.comm_found
            ordered = self.inversions()
            ordered += self.reduce_grad()
            if self.runtime:
                ordered += self.release_kinds()
                ordered += self.loss_order()
                ordered += self.reduction_pairs()
                ordered += self.send_retirement()
                if self.refusal is not None:
                    ordered.append(Violation(dx.SEND_BUDGET, f"refused at load: {self.refusal}"))
            if self.explicit_runtime:
                comm_found = self._pm.found + self.ed.missing_found
                cycles, makespan = self.runtime_execution()
            else:
                cycles = self.deadlocks()
                if not cycles and not self.inverted:  # a device waiting for itself has no timing
                    makespan = self.makespan()
            mem = self.memory_peaks()
        except _Undecided as u:
            reason = u.reason
        except TimeUp:
            reason = "time limit reached"
        found += ordered + comm_found + cycles
        if mem is not None:
            found += mem[0]
        kept = found[: self.max_violations]
        if reason is not None and not kept:
            verdict = Verdict.UNKNOWN
        else:
            verdict = Verdict.INVALID if kept else Verdict.VALID
            if reason is not None:
                reason = f"invalid; the solver did not finish every rule: {reason}"
        report = Report(verdict, kept, self.metrics(makespan, mem), len(found) - len(kept),
                        engine="z3", reason=reason, comm_semantics=self.semantics,
                        warnings=list(self.warnings), profile=self.rt, schedule=self.schedule)
        return report

    # -- 3.4: a same-device dependency that comes later on the device
    def inversions(self) -> list[Violation]:
        z3 = self.z3
        n = len(self.ix.entries)
        rank = [z3.Int(f"r{e}") for e in _paced(range(n), self.budget)]
        s = self.solver()
        self._device_order(s, rank)
        lits = {}
        for k, (e, j, _lat, _why, kind) in enumerate(_paced(self._ed.edges, self.budget)):
            if kind == "same":
                lit = z3.Bool(f"same{k}")
                s.add(z3.Implies(lit, rank[e] > rank[j]))
                lits[lit.get_id()] = (lit, k)
        out = []
        active = dict(lits)
        while active:
            r = self.check(s, *[lit for lit, _ in active.values()], what="device order")
            if r == z3.sat:
                break
            core = s.unsat_core()
            for c in core:
                lit, k = active.pop(c.get_id())
                e, j, _lat, why, _ = self._ed.edges[k]
                d = self.ix.entries[e][0]
                out.append(Violation(
                    dx.RUNS_BEFORE_DEPENDENCY,
                    f"{self.ix.entries[e][2]} {why}, which comes later on the same device "
                    f"(position {self.ix.entries[j][1]}), so device {d} waits for itself",
                    (self.ix.loc(e), self.ix.loc(j))))
        out.sort(key=lambda v: (v.locations[0].device, v.locations[0].position))
        self.inverted = bool(out)
        return out

    def _device_order(self, s, rank) -> None:
        prev: dict[int, int] = {}  # device -> its last entry so far
        for e, (d, _, _) in enumerate(_paced(self.ix.entries, self.budget)):
            if d in prev:
                s.add(rank[e] > rank[prev[d]])
            prev[d] = e

    def reduce_grad(self) -> list[Violation]:
        out = []
        for e in self.ix.reduce_grads:
            d, p, a = self.ix.entries[e]
            later = [k for k, (dk, pk, b) in enumerate(self.ix.entries)
                     if dk == d and pk > p and any(x.stage == a.stage and x.kind in (B, I, W)
                                                   for x in (b.sub or (b,)))]
            if later:
                k = later[-1]
                out.append(Violation(
                    dx.REDUCE_GRAD_TOO_EARLY,
                    f"{a} reduces stage {a.stage}'s gradients before its backward "
                    f"{self.ix.entries[k][2]} has run", (self.ix.loc(e), self.ix.loc(k))))
        return out

    # -- 9.1: kinds the release's runtime has
    def release_kinds(self) -> list[Violation]:
        rel = self._rt.release
        out = []
        seen: set[tuple[int, str]] = set()  # one per device and kind, at its first action
        if BATCH not in rel.kinds:
            for d, p, a in self.ix.batch_at:
                if (d, BATCH) not in seen:
                    seen.add((d, BATCH))
                    out.append(Violation(dx.NOT_IN_RELEASE, f"{rel.name}'s runtime has no BATCH action: {a} is "
                                         "a framework's batch_isend_irecv", (Location(d, p, str(a)),)))
        if rel.p2p_in_batch:  # 10.2: DualPipeVEngine posts sends and receives only at a CommitP2P
            inside = {e for b in self.ix.batches for e in b}
            for e, (d, _p, a) in enumerate(self.ix.entries):
                if a.kind in COMM_KINDS and e not in inside and (d, "outside") not in seen:
                    seen.add((d, "outside"))
                    out.append(Violation(dx.NOT_IN_RELEASE, f"{a} is outside every BATCH: {rel.name}'s {rel.runs} "
                                         "posts sends and receives only at a CommitP2P (a BATCH)",
                                         (self.ix.loc(e),)))
        for e, (d, _p, a) in enumerate(self.ix.entries):
            bad = next((x for x in (a, *(a.sub or ())) if x.kind in ALL_KINDS and x.kind not in rel.kinds), None)
            if bad is not None and (d, bad.kind) not in seen:
                seen.add((d, bad.kind))
                how = (f"its _Action.from_str reads {str(bad)!r} as {rel.reads(str(bad))!r}" if rel.is_pytorch
                       else f"{rel.runs} runs {', '.join(sorted(rel.kinds))}")
                out.append(Violation(dx.NOT_IN_RELEASE, f"{rel.name}'s runtime has no {bad.kind}: {how}",
                                     (self.ix.loc(e),)))
        return out

    # -- 9.2: from 2.15, each send retired by one later wait of its label on its device
    def send_retirement(self) -> list[Violation]:
        """Pair each WAIT_SEND with its pending send (a wait waits for its send in every
        release that has waits); from 2.15, report the sends and waits that do not pair."""
        rt = self._rt
        ix = self.ix
        waits = set(ix.send_waits)
        pending: dict[tuple, int] = {}
        orphans: list[int] = []
        for e, (d, _p, a) in enumerate(ix.entries):
            if e in waits:
                key = (d, SEND_OF[a.kind], a.stage, a.microbatch)
                if key in pending:
                    self.retired[e] = pending.pop(key)
                else:
                    orphans.append(e)
            elif a.sub is None and a.kind in (SEND_F, SEND_B) and ix.first.get(
                    (a.stage, a.microbatch, a.kind)) == e:  # type: ignore[arg-type]  # None: never there
                pending[(d, a.kind, a.stage, a.microbatch)] = e  # a label's first send (SV202 else)
        if not rt.waits_for_sends:
            return []
        if not rt.refuses_unwaited_sends:  # a framework's loop may drop a send's handle (10)
            pending = {}
        out = [Violation(dx.SEND_WITHOUT_WAIT, f"{ix.entries[e][2]} is never waited for on device "
                         f"{ix.entries[e][0]}: {rt.release.name} refuses a send without its WAIT_SEND",
                         (ix.loc(e),)) for e in sorted(pending.values())]
        out += [Violation(dx.WAIT_WITHOUT_SEND, f"{ix.entries[e][2]} retires no pending send on device "
                          f"{ix.entries[e][0]}: {rt.release.name} refuses it", (ix.loc(e),)) for e in orphans]
        return out

    # -- 9.3: from 2.15, REDUCE_GRAD then its WAIT_REDUCE_GRAD, one reduction pending per rank
    def reduction_pairs(self) -> list[Violation]:
        rt = self._rt
        if not rt.release.reduce_grad_wait:
            return []
        ix = self.ix
        pending: dict[int, int] = {}  # device -> its pending REDUCE_GRAD entry
        bad: dict[int, int] = {}  # device -> the entry where the pairing first fails
        for e in ix.reductions:
            d, _p, a = ix.entries[e]
            if d in bad:
                continue
            p = pending.get(d)
            if a.kind == REDUCE_GRAD:
                if p is not None:
                    bad[d] = e
                else:
                    pending[d] = e
            elif p is None or ix.entries[p][2].stage != a.stage:
                bad[d] = e
            else:
                del pending[d]
        for d, e in pending.items():
            bad.setdefault(d, e)
        return [Violation(dx.REDUCE_GRAD_UNPAIRED, f"{ix.entries[e][2]}: REDUCE_GRAD and WAIT_REDUCE_GRAD do "
                          f"not pair on device {d} here; {rt.release.name} refuses the schedule",
                          (ix.loc(e),)) for d, e in sorted(bad.items())]

    # -- 3.4/3.5: cycles of cross-device waits
    def deadlocks(self) -> list[Violation]:
        """Deadlock cycles.  As the graph engine: when the rendezvous waits give cycles but the
        schedule also hangs without them (a data cycle, or a device waiting for itself), the
        data cycles are what to report and fix first."""
        cycles = self._cycles(("data", "rendezvous"))
        if cycles and any(kind == "rendezvous" for *_, kind in self._ed.edges):
            eager = self._cycles(("data",))
            if eager or self.inverted:
                cycles = eager
        return cycles

    def _cycles(self, kinds) -> list[Violation]:
        z3 = self.z3
        n = len(self.ix.entries)
        rank = [z3.Int(f"r{e}") for e in _paced(range(n), self.budget)]
        s = self.solver()
        self._device_order(s, rank)
        active = {}
        for k, (e, j, _lat, _why, kind) in enumerate(_paced(self._ed.edges, self.budget)):
            if kind not in kinds:
                continue
            lit = z3.Bool(f"wait{k}")
            s.add(z3.Implies(lit, rank[e] > rank[j]))
            active[lit.get_id()] = (lit, k)
        out: list[Violation] = []
        while True:
            r = self.check(s, *[lit for lit, _ in active.values()], what="deadlock detection")
            if r == z3.sat:
                return out
            if len(out) >= MAX_CYCLES:  # the marker has the code of the cycle before it
                out.append(Violation(out[-1].code, "more deadlock cycles exist; fix the ones "
                                     "above and check again"))
                return out
            core = [active[c.get_id()][1] for c in s.unsat_core()]
            cycle = self._cycle(core)
            out.append(self._deadlock_violation(cycle))
            # relax the first wait of the cycle and look for the next one
            k = cycle[0]
            del active[next(i for i, (_, kk) in active.items() if kk == k)]

    def _cycle(self, core: list[int]) -> list[int]:
        """Order the core's waits into a cycle: from a consumer, to its producer's device, to
        the wait on that device whose consumer comes no later than the producer."""
        ix, edges = self.ix, self._ed.edges
        by_dev: dict[int, list[int]] = {}
        for k in core:
            by_dev.setdefault(ix.entries[edges[k][0]][0], []).append(k)
        start = min(core, key=lambda k: (ix.entries[edges[k][0]][0], ix.entries[edges[k][0]][1]))
        cycle, k, seen = [], start, set()
        while k not in seen:
            seen.add(k)
            cycle.append(k)
            j = edges[k][1]
            dj, pj = ix.entries[j][0], ix.entries[j][1]
            nxt = [c for c in by_dev.get(dj, ()) if ix.entries[edges[c][0]][1] <= pj]
            if not nxt:
                break
            k = max(nxt, key=lambda c: ix.entries[edges[c][0]][1])
        if k in seen and k != start:
            cycle = cycle[cycle.index(k):]
        return cycle

    def _deadlock_violation(self, cycle: list[int]) -> Violation:
        ix, edges = self.ix, self._ed.edges
        steps, locs, rdv = [], [], False
        for k in cycle:
            e, j, _lat, why, kind = edges[k]
            rdv |= kind == "rendezvous"
            d, p, a = ix.entries[e]
            dj, pj, _ = ix.entries[j]
            steps.append(f"device {d} is stuck at {a} (position {p}): it {why}, which is at "
                         f"position {pj} on device {dj}")
            locs.append(ix.loc(e))
        devs = [ix.entries[edges[k][0]][0] for k in cycle]
        path = dx.device_cycle(devs)
        code = dx.RENDEZVOUS_DEADLOCK if rdv else dx.DEADLOCK
        what = ("sends wait for receives that are never posted (valid under eager semantics, "
                "hangs under rendezvous)") if rdv else "each waits for another"
        return Violation(code, f"deadlock: devices {path}: {what}", tuple(locs), tuple(steps))

    # -- section 4: the as-soon-as-possible makespan
    def durations(self) -> list[Fraction]:
        out = []
        for _, _, a in self.ix.entries:
            try:
                out.append(Fraction(self.costs.of(a)).limit_denominator(10**9))
            except (IndexError, TypeError):
                out.append(Fraction(0))
        return out

    def makespan(self) -> Fraction:
        """Least makespan of the order (the ASAP one): minimise T over the timing constraints."""
        z3 = self.z3
        from .solver import make_optimizer

        if self.budget.expired():
            raise _Undecided("time limit reached")
        o = make_optimizer(timeout_s=self.budget.remaining())
        n = len(self.ix.entries)
        dur = self.durations()
        st = [z3.Real(f"s{e}") for e in _paced(range(n), self.budget)]
        T = z3.Real("T")
        prev: dict[int, int] = {}  # device -> its last entry so far
        for e, (d, _, _) in enumerate(_paced(self.ix.entries, self.budget)):
            o.add(st[e] >= 0)
            o.add(st[e] + z3.RealVal(dur[e]) <= T)
            if d in prev:
                o.add(st[e] >= st[prev[d]] + z3.RealVal(dur[prev[d]]))
            prev[d] = e
        for _k, (e, j, lat, _why, kind) in enumerate(_paced(self._ed.edges, self.budget)):
            if kind == "same":
                continue  # same-device: implied by device order (here none is inverted)
            o.add(st[e] >= st[j] + z3.RealVal(dur[j] + lat))
        h = o.minimize(T)
        if self.check(o, what="the makespan") != z3.sat:
            raise _Undecided("solver gave up on the makespan: unsat")
        v = o.lower(h) if n else z3.RealVal(0)
        value = o.model().eval(T, model_completion=True) if n else v
        self.busy = [sum((dur[e] for e, (dd, _, _) in enumerate(self.ix.entries) if dd == d), Fraction(0))
                     for d in range(self.schedule.devices)]
        return Fraction(value.as_fraction()) if n else Fraction(0)

    # -- 3.6 memory
    def memory_peaks(self):
        """(violations, peak memory per device, peak in flight per device)."""
        z3 = self.z3
        sched, m = self.schedule, self.memory
        S = sched.stages
        w = Fraction(m.w).limit_denominator(10**9)
        act = [Fraction(per_stage(m.activation, s)).limit_denominator(10**9) for s in range(S)]
        static = [Fraction(0)] * sched.devices
        if m.static:
            for s in range(S):
                for d in sched.placement.devices_of_stage(s):
                    static[d] += Fraction(per_stage(m.static, s)).limit_denominator(10**9)
        limit = None if m.limit is None else Fraction(m.limit).limit_denominator(10**9)
        solv = self.solver() if limit is not None else None
        # 9.2: under PyTorch's runtime a pending send holds its message until its wait retires it
        held: dict[int, Fraction] = {}  # SEND entry -> its message
        released: dict[int, Fraction] = {}  # WAIT_SEND entry -> what it frees
        if self.rt is not None and m.message:
            for e, (_d, _p, a) in enumerate(self.ix.entries):
                if a.sub is None and a.kind in (SEND_F, SEND_B) and type(a.stage) is int and 0 <= a.stage < S:
                    held[e] = Fraction(per_stage(m.message, a.stage)).limit_denominator(10**9)
            for wait, sent in self.retired.items():
                if sent in held:
                    released[wait] = held[sent]
        out: list[Violation] = []
        peaks: list[Fraction] = []
        inflight: list[int] = []
        for d in range(sched.devices):
            ents = [e for e, (dd, _, _) in enumerate(self.ix.entries) if dd == d]
            cur, n, peak, peak_n = static[d], 0, static[d], 0
            values, lits = [], []
            mvars = [z3.Real(f"m{d}_{q}") for q in range(len(ents))]
            prev_free = static[d]
            last_free = Fraction(0)  # what the previous action freed (none before the first)
            for q, e in enumerate(_paced(ents, self.budget)):
                alloc = sum((act[st] for k, st in self.ix.memory_leaves(e) if k == F), held.get(e, Fraction(0)))
                n += sum(1 for k, _ in self.ix.memory_leaves(e) if k == F)
                free = released.get(e, Fraction(0))
                for k, st in self.ix.memory_leaves(e):
                    if k == B:
                        free += act[st]
                    elif k == I:
                        free += (1 - w) * act[st]
                    elif k == W:
                        free += w * act[st]
                cur = cur + alloc
                values.append(cur)
                peak, peak_n = max(peak, cur), max(peak_n, n)
                n -= sum(1 for k, _ in self.ix.memory_leaves(e) if k in (B, W))
                if solv is not None:
                    assert limit is not None  # a solver is made only under a limit
                    base = z3.RealVal(prev_free) if q == 0 else mvars[q - 1] - z3.RealVal(last_free)
                    solv.add(mvars[q] == base + z3.RealVal(alloc))
                    lit = z3.Bool(f"within{d}_{q}")
                    solv.add(z3.Implies(lit, mvars[q] <= z3.RealVal(limit + _EPS)))
                    lits.append(lit)
                last_free = free
                cur -= free
            peaks.append(peak)
            inflight.append(peak_n)
            if solv is None or not lits:
                continue
            assert limit is not None
            r = self.check(solv, *lits, what="memory")
            if r == z3.sat:
                continue
            lo, hi = 0, len(lits)  # the shortest unsat prefix ends at the first position over
            while lo + 1 < hi:
                mid = (lo + hi) // 2
                r = self.check(solv, *lits[:mid], what="memory")
                if r == z3.unsat:
                    hi = mid
                else:
                    lo = mid
            q = hi - 1
            e = ents[q]
            out.append(Violation(
                dx.MEMORY_LIMIT,
                f"memory on device {d} reaches {_num(values[q])} at {self.ix.entries[e][2]}, over the "
                f"limit {_num(limit)} (peak {_num(peak)}, {peak_n} microbatches in flight at most)",
                (self.ix.loc(e),)))
        return out, peaks, inflight, static

    # -- docs/spec.md 8.3: the loss stage's forwards in microbatch order
    def loss_order(self) -> list[Violation]:
        sched = self.schedule
        if sched.placement.is_bidirectional or not self._rt.release.loss_list:
            return []
        last, seen = sched.stages - 1, 0
        home = sched.placement.routes[0][last]
        for e, (d, _p, a) in enumerate(self.ix.entries):
            if d != home and not self.ix.off_device:
                continue  # "on its device": a copy elsewhere is SV202, not one of its forwards
            for x in a.leaves():
                if x.kind != F or x.stage != last or type(x.microbatch) is not int:
                    continue
                if x.microbatch != seen:
                    return [Violation(
                        dx.LOSS_OUT_OF_ORDER,
                        f"{x} is forward {seen} (counting from 0) of the last stage, on device {d}, but it "
                        f"is microbatch {x.microbatch}: PyTorch's runtime appends each forward's loss to a "
                        f"list and the backward of microbatch i reads entry i; run stage {last}'s forwards "
                        "in microbatch order", (self.ix.loc(e),))]
                seen += 1
        return []

    # -- docs/spec.md 8.4-8.5: the runtime's events, its hangs and its makespan
    def data_deps(self) -> dict[int, list[tuple[int, Fraction]]]:
        """What each compute action's start waits for (8.4), as (entry, latency): the done of
        the RECV of its own label on its device, before it; a cross-device producer's end
        plus ``comm`` when that RECV is missing (or a RECV's done when it sits elsewhere)."""
        ix, pm = self.ix, self._pm
        sched = self.schedule
        S, M = sched.stages, sched.microbatches
        out: dict[int, list[tuple[int, Fraction]]] = {}
        for e, j, _lat, _why, kind in self._ed.edges:
            if kind == "data" and not pm.comm[e]:
                out.setdefault(e, []).append((j, Fraction(0) if pm.comm[j] else self.comm))
        for e, (d, _p, a) in enumerate(ix.entries):
            if pm.comm[e]:
                continue
            for x in a.leaves():
                k, s, mb = x.kind, x.stage, x.microbatch
                if type(s) is not int or type(mb) is not int or not (0 <= s < S and 0 <= mb < M):
                    continue
                if k not in rules.RECEIVED:
                    continue
                offset, recv = rules.RECEIVED[k]
                ps = s + offset
                if 0 <= ps < S and sched.placement.device(ps, mb) != d:
                    r = ix.first.get((s, mb, recv))
                    if r is not None and r < e and ix.entries[r][0] == d:
                        out.setdefault(e, []).append((r, Fraction(0)))
        return out

    def runtime_execution(self) -> tuple[list[Violation], Fraction | None]:
        """(hang violations, makespan or None).  Under torch-nccl, a schedule that hangs on
        gloo too is reported with gloo's cycles (SV402, the plain deadlock to fix first);
        otherwise its NCCL cycles are SV405."""
        data = self.data_deps()
        nccl_mode = self._rt.on_nccl
        ev = _Events(self, nccl_mode, data)
        cycles = self._runtime_cycles(ev)
        shown, code = ev, dx.COMM_STREAM_DEADLOCK if nccl_mode else dx.DEADLOCK
        if cycles and nccl_mode:
            gloo = _Events(self, False, data)
            gloo_cycles = self._runtime_cycles(gloo)
            if gloo_cycles:
                shown, cycles, code = gloo, gloo_cycles, dx.DEADLOCK
        out = []
        for cycle in cycles:
            if cycle is None:
                out.append(Violation(code, "more deadlock cycles exist; fix the ones above and check again"))
            else:
                out.append(self._runtime_violation(shown, cycle, code))
        makespan = None
        if not cycles and not self.inverted:
            makespan = self.runtime_makespan(ev)
        return out, makespan

    def _runtime_cycles(self, ev: _Events) -> list[list[int] | None]:
        """Cycles of the events' "strictly after" order: every event gets an integer rank, lane
        order is asserted, each wait is a tracked "rank exceeds"; unsat cores are cycles.  After
        each, the waits of the lanes it passes through are relaxed, so the next is independent
        (None at the end: more than MAX_CYCLES)."""
        z3 = self.z3
        rank = [z3.Int(f"q{x}") for x in _paced(range(len(ev.lane)), self.budget)]
        s = self.solver()
        for tgt, src, _ in _paced(ev.hard, self.budget):
            s.add(rank[tgt] > rank[src])
        active = {}
        for k, (tgt, src, _d, _kind) in enumerate(_paced(ev.waits, self.budget)):
            lit = z3.Bool(f"after{k}")
            s.add(z3.Implies(lit, rank[tgt] > rank[src]))
            active[lit.get_id()] = (lit, k)
        out: list[list[int] | None] = []
        while True:
            r = self.check(s, *[lit for lit, _ in active.values()], what="the runtime's hangs")
            if r == z3.sat:
                return out
            if len(out) >= MAX_CYCLES:
                out.append(None)
                return out
            core = [active[c.get_id()][1] for c in s.unsat_core()]
            cycle = ev.cycle(core)
            out.append(cycle)
            lanes = {ev.lane[ev.waits[k][0]] for k in cycle}
            for key in [key for key, (_, k) in active.items() if ev.lane[ev.waits[k][0]] in lanes]:
                del active[key]

    def _runtime_violation(self, ev: _Events, cycle: list[int], code) -> Violation:
        ix = self.ix
        # start the cycle at its earliest waiting action (device, then position)
        first = min(range(len(cycle)), key=lambda q: ix.entries[ev.waits[cycle[q]][0] // 2][:2])
        cycle = cycle[first:] + cycle[:first]
        steps, locs, devs = [], [], []
        heads: dict[int, list[int]] = {}
        for k in cycle:
            tgt, src, _d, kind = ev.waits[k]
            e, j = tgt // 2, src // 2
            d, p, a = ix.entries[e]
            dj, pj, b = ix.entries[j]
            here = f"device {d} is stuck at {a} (position {p}) on {ev.lane_name[ev.lane[tgt]]}"
            if kind == "data":
                what = "the data that" if self._pm.comm[j] else "what"
                verb = "receives" if self._pm.comm[j] else "produces"
                steps.append(f"{here}: it needs {what} {b} (device {dj}, position {pj}) {verb}, which has "
                             "not happened")
            elif kind == "message":
                steps.append(f"{here}: its message is sent by {b} (device {dj}, position {pj}), which is "
                             "not posted yet")
            elif kind == "rendezvous":
                steps.append(f"{here}: a send completes only with its receive, {b} (device {dj}, position "
                             f"{pj}), which is not posted yet")
            elif kind == "batch":
                steps.append(f"{here}: it waits until {b} (device {dj}, position {pj}) has completed: the rank "
                             "waits for each operation of a batch right after posting it")
            elif kind == "retire":
                steps.append(f"{here}: it waits until {b} (position {pj}) has completed, which needs its "
                             "receive")
            else:
                steps.append(f"{here}: NCCL makes the stream wait for the compute posted before it, {b} "
                             f"(position {pj}), which has not run")
            if ix.loc(e) not in locs:
                locs.append(ix.loc(e))
            devs.append(d)
            heads.setdefault(d, []).append(e)
            heads.setdefault(dj, []).append(j)
        for d in sorted(heads):  # each device's part, in PyTorch's notation
            ents = [e for e, (dd, _, _) in enumerate(ix.entries) if dd == d]
            lo, hi = min(heads[d]), max(heads[d])
            names = [str(ix.entries[e][2]) for e in ents if lo <= e <= hi]
            if len(names) > 6:
                names = names[:3] + ["..."] + names[-3:]
            steps.append(f"rank {d}: [{'' if lo == ents[0] else '... '}{', '.join(names)}]")
        path = dx.device_cycle(devs)
        if code is dx.COMM_STREAM_DEADLOCK:
            what = ("NCCL runs each device's sends and receives in posting order and a send completes "
                    "only with its receive (this runs on gloo, hangs on NCCL)")
        else:
            what = "each waits for another"
        return Violation(code, f"deadlock: devices {path}: {what}", tuple(locs), tuple(steps))

    def runtime_makespan(self, ev: _Events) -> Fraction | None:
        """The least time at which every event has happened (8.4), or None when one that the
        run needs never happens (it waits for a message that never comes).  Under gloo the
        host need not wait for a receive nobody consumes; the step waits for every send."""
        z3 = self.z3
        from .solver import make_optimizer

        n = len(self.ix.entries)
        never = ev.never_closure()
        pm = self._pm
        for e in range(n):
            # the step waits for its sends, unless each is retired by its own WAIT_SEND (9.2),
            # and for what a batch waits for (10)
            waited = pm.sending[e] and not self._rt.waits_for_sends or e in ev.waited
            needed = (2 * e, 2 * e + 1) if ev.nccl_mode or not pm.comm[e] or waited else (2 * e,)
            if any(x in never for x in needed):
                return None
        dur = self.durations()
        self.busy = [sum((dur[e] for e, (dd, _, _) in enumerate(self.ix.entries)
                          if dd == d and not pm.comm[e]), Fraction(0)) for d in range(self.schedule.devices)]
        if n == 0:
            return Fraction(0)
        if self.budget.expired():
            raise _Undecided("time limit reached")
        o = make_optimizer(timeout_s=self.budget.remaining())
        t = [z3.Real(f"t{x}") for x in _paced(range(2 * n), self.budget)]
        T = z3.Real("T")
        for x in _paced(range(2 * n), self.budget):
            if x not in never:
                o.add(t[x] >= 0, t[x] <= T)
        for tgt, src, delay, *_ in _paced(ev.hard + ev.waits, self.budget):
            if tgt not in never:
                o.add(t[tgt] >= t[src] + z3.RealVal(delay))
        h = o.minimize(T)
        if self.check(o, what="the makespan") != z3.sat:
            raise _Undecided("solver gave up on the makespan: unsat")
        o.lower(h)
        return Fraction(o.model().eval(T, model_completion=True).as_fraction())

    def metrics(self, makespan, mem):
        from ..cost.timeline import DeviceMetrics, Metrics

        D = self.schedule.devices
        peaks = mem[1] if mem is not None else [0] * D
        inflight = mem[2] if mem is not None else [0] * D
        static = mem[3] if mem is not None else [0] * D
        if makespan is None:
            devices = tuple(DeviceMetrics(d, 0, 0, inflight[d], _num(peaks[d]), _num(static[d]))
                            for d in range(D))
            return Metrics(None, None, None, devices, (), self.costs)
        T = makespan
        busy = self.busy
        total = sum(busy, Fraction(0))
        ideal = max(busy, default=Fraction(0))
        frac = float(1 - total / (D * T)) if T > 0 else 0.0
        ratio = float((T - ideal) / ideal) if ideal > 0 else 0.0
        devices = tuple(DeviceMetrics(d, _num(busy[d]), _num(T - busy[d]), inflight[d], _num(peaks[d]),
                                      _num(static[d])) for d in range(D))
        return Metrics(_num(T), frac, ratio, devices, (), self.costs)


def _num(x: Fraction | int) -> float | int:
    x = Fraction(x)
    return int(x) if x.denominator == 1 else float(x)


def check_z3(schedule: Schedule, *, costs=None, memory=None, memory_limit=None, comm_semantics=None,
             nccl=None, torch=None, p2p=None, runtime_options=None, framework=None, timeout_s: float = 60.0,
             max_violations: int = 1000, budget: Budget | None = None) -> Report:
    """Check ``schedule`` with the Z3 engine; the same options and Report as
    :func:`schedverify.check`, with ``engine="z3"``.  ``comm_semantics`` is one of
    ``eager``, ``rendezvous``, ``torch`` or ``torch-nccl`` (docs/spec.md 3.5, 8 and 9); for the
    last two ``torch`` (or ``framework``), ``p2p``, ``nccl`` and ``runtime_options`` choose the
    release, its communicator layout, how NCCL runs point-to-point and the runtime's options,
    as for :func:`schedverify.check`.  ``timeout_s`` bounds the solver calls in total; when it runs out before
    a verdict, the verdict is UNKNOWN and ``reason`` says why.  Every phase after the
    structural rules (linear, never cut short) runs under one :class:`~schedverify.budget.Budget` (``budget``, or one of
    ``timeout_s`` seconds from now): the check returns within it plus
    :data:`~schedverify.budget.OVERSHOOT_S`."""
    if budget is None:
        if timeout_s is None or timeout_s <= 0:
            raise UsageError(f"timeout must be > 0 seconds, got {timeout_s!r}")
        budget = Budget(timeout_s)
    return _Z3Check(schedule, costs, memory, memory_limit, comm_semantics, timeout_s,
                    max_violations, nccl, budget, torch, p2p, runtime_options, framework).run()
