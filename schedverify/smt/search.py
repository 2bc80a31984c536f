"""Makespan-optimal (and memory-optimal) schedule search with Z3, with a certificate.

The problem: ``D`` devices, ``V`` chunks per device (``S = D*V`` stages, placed ``loop`` or
``v``), ``M`` microbatches, full (``B``) or split (``I`` + ``W``) backward, costs per kind
(optionally per stage), a latency ``comm`` on every cross-device dependency, and optionally
a limit on weighted activation memory (docs/spec.md section 5).  Find device orders whose
as-soon-as-possible execution (docs/spec.md section 4) has the least makespan, or, the dual, the
least peak memory among orders that finish by a makespan bound.

The encoding (one Z3 solver, used incrementally):

- one integer start time per action (costs are scaled to whole numbers);
- the dependencies of :mod:`schedverify.deps` as difference constraints (plus ``comm``
  across devices);
- device order as Booleans ``before(x, y)`` between actions of the same device, with
  implications to the start times;
- memory as pseudo-Boolean constraints at every forward's start: the activations of the
  forwards that came before it on its device minus what the backwards before it freed;
- optionally (``cuts=True``) redundant "energy" cuts: an action starts no earlier than its
  device's earliest possible start plus the work ordered before it, and the work ordered
  after it still has to fit before the makespan.  Both hold in every schedule: each action
  of a device needs a forward of the device first, and whatever the device runs last still
  has at least the least tail of its kinds to wait for.  The one-device relaxations use
  them (they count the idle time of a device whose forwards memory blocks); the whole
  problem does not (next paragraph).

Without the cuts every arithmetic atom is a difference constraint ``t_x >= t_y + c`` (or a
bound on one variable), so the solver uses Z3's difference-logic theory (``arith.solver=1``,
Bellman-Ford) instead of the general simplex.  Measured on the memory-tight split 4x16
instances (cold solver, CPU seconds), the proof "no order finishes by T-1" takes 1.4-10.4 s
that way; on the hardest (mem 2) it took 20 s with the cuts added (their sums are not
difference constraints), 67 s with the simplex and the cuts, and had not finished after 78 s
with the simplex alone, so the cuts are off by default.

Under each bound ``T <= t`` (and memory limit) the start times are also kept inside the
windows of :class:`schedverify.search.bounds.TimeWindows` (bounds on single variables, so still difference
logic); when propagation empties a window, ``t`` is refuted without Z3.  :mod:`schedverify.search.bounds` holds
every lower bound and says which instances each closes.

The makespan is bounded through assumption literals (``T <= t``), so the solver keeps what it
learned between checks.  The search starts from the best generator in
:data:`schedverify.generators.FAMILIES` that fits (and randomised list schedules), raises the
arithmetic lower bound with the windows (:func:`propagation_bound`), the device-order search
(:meth:`_Search.order_bound`) and device relaxations (:meth:`_Search.relaxation_bound`), then
alternates a proof attempt at ``best - 1`` (budget doubling after each unknown) with a pass of
large-neighbourhood search that re-orders the actions inside one time window.

Symmetry breaking (the default class ``"fifo"``): within each (stage, kind) the microbatches
run in increasing order.  This loses no optimum, so "optimal" in class ``fifo`` is optimal over
every order:

    Take any feasible timed schedule.  On one device, the actions of one (stage, kind) all
    have the same duration and do not overlap, so ordering them by start also orders them by
    end.  Relabel: the k-th action (by start) of every (stage, kind) becomes microbatch k.
    Every dependency links two such sets, a producer set P and a consumer set C, "consumer
    of microbatch i starts at least ``lat`` after producer of microbatch i ends".  If some
    bijection satisfies that, the sorted one does: among the first k consumers (by start),
    one was matched to a producer of rank >= k, so ``e_k <= e_match <= t_j - lat <= t_k -
    lat`` (e sorted ends, t sorted starts).  The relabelled schedule keeps every start time,
    so every device still runs one action at a time and the makespan is unchanged; memory
    on a device depends only on how many actions of each (stage, kind) came before, which
    relabelling does not change.  Hence a FIFO schedule at least as good exists.

``fifo=False`` searches every order (no symmetry breaking); the tests compare the two, and
both with exhaustive enumeration, on small sizes.

Time: the whole search runs under one :class:`~.budget.Budget` of ``time_limit`` seconds.
The warm start, the bounds, the encoding (built and handed to Z3 in pieces, the budget
checked between them) and each solver call take their time from it; when it is spent, the
phase that is running stops (:class:`~.budget.TimeUp`) and the search answers with the best
schedule found so far, its lower bound and gap (or "nothing found" when there is none), so
it returns within ``time_limit`` plus :data:`~.budget.OVERSHOOT_S`.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

from .. import deps as rules
from ..errors import UsageError
from ..model import B, F, I, W, Action, Schedule
from ..search.bounds import (TimeWindows, action_key, device_lags, earliest_starts, least_tails, lower_bound,
                     memory_precedences, min_peak_memory, order_search, propagation_bound)
from ..budget import Budget, TimeUp
from ..search.heuristics import best_generator, evaluate, randomised_greedy, sequential
from ..search.problem import Problem, Units, frac, make_problem

CLASS_FIFO = "fifo"
CLASS_ALL = "unrestricted"


# --------------------------------------------------------------------------- the encoding


class _Encoding:
    """The Z3 model of the problem; ``check`` answers "is there an order with T <= t (and
    memory <= L)?" incrementally.  The constraints are written as SMT-LIB text and parsed by
    Z3 in one go (building them through the Python API costs seconds)."""

    #: SMT-LIB lines handed to Z3 in one piece (parsing is not interruptible; a piece of this
    #: size takes well under 0.1 s, and the budget is checked between pieces)
    PIECE = 20000

    def __init__(self, p: Problem, u: Units, *, fifo: bool, timeout_s: float | None,
                 cuts: bool = False, device: int | None = None, windows: dict | None = None,
                 budget: Budget | None = None):
        import z3

        from .solver import make_solver

        self.z3 = z3
        self.budget = budget if budget is not None else Budget(None)
        self.p, self.u, self.fifo, self.cuts, self.device = p, u, fifo, cuts, device
        # without the cuts every arithmetic atom is a difference constraint (t_x >= t_y + c):
        # Z3's Bellman-Ford difference-logic theory proves memory-tight instances several
        # times faster than the general simplex (4x16 split mem 2: 10 s against 67 s)
        self.solver = make_solver(timeout_s=timeout_s, simple=True,
                                  arith_solver=None if cuts else 1)
        place = p.placement_obj().routes[0]
        M, S = p.microbatches, p.stages
        # groups: FIFO chains (one per stage and kind), or one action each
        self.groups: list[tuple[int, str, tuple[int, ...]]] = []
        for s in range(S):
            if device is not None and place[s] not in (
                    {device} if isinstance(device, int) else set(device)):
                continue  # the relaxation keeps its devices; the others become time lags
            for k in p.kinds:
                if fifo:
                    self.groups.append((s, k, tuple(range(M))))
                else:
                    self.groups.extend((s, k, (i,)) for i in range(M))
        self.where: dict[tuple[int, str, int], tuple[int, int]] = {}
        for g, (s, k, mbs) in enumerate(self.groups):
            for j, i in enumerate(mbs):
                self.where[(s, k, i)] = (g, j)
        self.gdev = [place[s] for s, _, _ in self.groups]
        self.gdur = [u.idur[(s, k)] for s, k, _ in self.groups]
        self.by_dev: dict[int, list[int]] = {}
        for g, d in enumerate(self.gdev):
            self.by_dev.setdefault(d, []).append(g)
        self._bounds: dict[int, Any] = {}
        self._mem: dict[int, Any] = {}
        self._win: dict[tuple, Any] = {}
        # TimeWindows per memory limit, shared with the search (``windows``) when given
        self._tw: dict[int | None, TimeWindows] = {} if windows is None else windows
        self._pair_sizes = {(a, b): (len(self.groups[a][2]), len(self.groups[b][2]))
                            for gs in self.by_dev.values() for ai, a in enumerate(gs)
                            for b in gs[ai + 1:]}
        self._lines: list[str] = []
        self._build(place)
        self._declare(self._lines)
        self._lines = []

    # -- names and literals (SMT-LIB text)
    @staticmethod
    def t(x: tuple[int, int]) -> str:
        return f"t_{x[0]}_{x[1]}"

    def before(self, x: tuple[int, int], y: tuple[int, int]) -> str:
        """Literal for "action x runs before action y" on their device (``true``/``false``
        within one FIFO chain)."""
        (ga, ja), (gb, jb) = x, y
        if ga == gb:
            return "true" if ja < jb else "false"
        if ga < gb:
            return f"o_{ga}_{ja}_{gb}_{jb}"
        return f"(not o_{gb}_{jb}_{ga}_{ja})"

    def _build(self, place) -> None:
        p, u = self.p, self.u
        out = self._lines.append
        dur = self.gdur
        est = earliest_starts(p, u)
        tails = least_tails(p, u)
        check = self.budget.check
        out("(declare-const makespan Int)")
        for g, (s, k, mbs) in enumerate(self.groups):
            check()
            for j in range(len(mbs)):
                tj = self.t((g, j))
                out(f"(declare-const {tj} Int)")
                out(f"(assert (>= {tj} {est[(s, k)] + (j * dur[g] if self.fifo else 0)}))")
                out(f"(assert (>= makespan (+ {tj} {dur[g] + tails[(s, k)]})))")
            if self.fifo:
                for j in range(len(mbs) - 1):
                    out(f"(assert (>= {self.t((g, j + 1))} (+ {self.t((g, j))} {dur[g]})))")
        # device order between groups
        for gs in self.by_dev.values():
            for ai, a in enumerate(gs):
                for b in gs[ai + 1:]:
                    check()
                    for j in range(len(self.groups[a][2])):
                        for m in range(len(self.groups[b][2])):
                            out(f"(declare-const o_{a}_{j}_{b}_{m} Bool)")
        for gs in self.by_dev.values():
            for ai, a in enumerate(gs):
                for b in gs[ai + 1:]:
                    na, nb = len(self.groups[a][2]), len(self.groups[b][2])
                    for j in range(na):
                        check()
                        for m in range(nb):
                            o = f"o_{a}_{j}_{b}_{m}"
                            ta, tb = self.t((a, j)), self.t((b, m))
                            out(f"(assert (or (not {o}) (>= {tb} (+ {ta} {dur[a]}))))")
                            out(f"(assert (or {o} (>= {ta} (+ {tb} {dur[b]}))))")
                            if self.fifo:
                                if m + 1 < nb:
                                    out(f"(assert (or (not {o}) o_{a}_{j}_{b}_{m + 1}))")
                                if j > 0:
                                    out(f"(assert (or (not {o}) o_{a}_{j - 1}_{b}_{m}))")
        if self.device is not None:
            # one device alone: every path between two of its actions through other devices
            # (same microbatch) is a lag of the path's length, the rest runs infinitely fast
            lags = device_lags(p, u, self.device)
            for n, ((s, k, i), x) in enumerate(self.where.items()):
                if not n % 256:
                    check()
                for (ps, pk), lag in lags.get((s, k), {}).items():
                    y = self.where[(ps, pk, i)]
                    out(f"(assert (>= {self.t(x)} (+ {self.t(y)} {dur[y[0]] + lag})))")
                    if self.gdev[y[0]] == self.gdev[x[0]]:
                        out(f"(assert {self.before(y, x)})")
        # dependencies (deps.NEEDS), per microbatch
        for n, ((s, k, i), x) in enumerate(self.where.items() if self.device is None else ()):
            if not n % 256:
                check()
            for need, ps in rules.needs(Action(s, k, i), p.stages):
                pk = next(c for c in need.kinds if c in p.kinds)
                y = self.where[(ps, pk, i)]
                lat = u.icomm if place[ps] != place[s] else 0
                out(f"(assert (>= {self.t(x)} (+ {self.t(y)} {dur[y[0]] + lat})))")
                if place[ps] == place[s]:
                    out(f"(assert {self.before(y, x)})")
        # energy cuts: an action starts no earlier than its device's head plus the work ordered
        # before it; the work ordered after it (and the device's tail) still fits before T
        for gs in self.by_dev.values() if self.cuts else ():
            head = min(est[(self.groups[g][0], F)] for g in gs)
            tail = min(tails[(self.groups[g][0], self.groups[g][1])] for g in gs)
            total = sum(dur[g] * len(self.groups[g][2]) for g in gs)
            for g in gs:
                for j in range(len(self.groups[g][2])):
                    check()
                    x = (g, j)
                    terms = [f"(ite {self.before((h, m), x)} {dur[h]} 0)"
                             for h in gs if h != g and dur[h]
                             for m in range(len(self.groups[h][2]))]
                    own = j * dur[g] if self.fifo else 0
                    before = f"(+ {own} {' '.join(terms)})" if terms else str(own)
                    out(f"(assert (>= {self.t(x)} (+ {head} {before})))")
                    out(f"(assert (>= makespan (- (+ {self.t(x)} {total + tail}) {before})))")

    # -- memory
    def memory_literal(self, limit: int):
        """A literal that, when assumed, keeps every device's memory within ``limit``."""
        if limit in self._mem:
            return self._mem[limit]
        u = self.u
        name = f"mem_le_{limit}"
        lines = [f"(declare-const {name} Bool)"]
        for d, gs in self.by_dev.items():
            for g in gs:
                s, k, mbs = self.groups[g]
                if k != F:
                    continue
                for j in range(len(mbs)):
                    self.budget.check()
                    x = (g, j)
                    const = u.static[d] + u.alloc[s] * ((j + 1) if self.fifo else 1)
                    lits, coefs = [], []
                    for h in gs:
                        if h == g:
                            continue
                        hs, hk, hm = self.groups[h]
                        for m in range(len(hm)):
                            b = self.before((h, m), x)
                            if hk == F:
                                c = u.alloc[hs]
                            else:
                                c = u.free[(hs, hk)]
                                const -= c
                                b = b[5:-1] if b.startswith("(not ") else f"(not {b})"
                            if c:
                                lits.append(b)
                                coefs.append(str(c))
                    bound = limit - const
                    if lits:
                        body = f"((_ pble {bound} {' '.join(coefs)}) {' '.join(lits)})"
                    else:
                        body = "true" if bound >= 0 else "false"
                    lines.append(f"(assert (=> {name} {body}))")
        # the orders the limit forces (memory_precedences): implied by the constraints above,
        # but as order literals they propagate without pseudo-Boolean reasoning
        for earlier, later in memory_precedences(self.p, u, limit) if self.fifo else ():
            kx = action_key(later)
            ky = None if earlier is None else action_key(earlier)
            if kx not in self.where or (ky is not None and ky not in self.where):
                continue  # not on the devices of this relaxation
            lit = "false" if ky is None else self.before(self.where[ky], self.where[kx])
            lines.append(f"(assert (=> {name} {lit}))")
        self._declare(lines)
        self._mem[limit] = self.z3.Bool(name)
        return self._mem[limit]

    def _declare(self, lines: list[str]) -> None:
        # the solver's parser remembers the symbols declared by earlier text, so the text can
        # go in pieces, each short enough that the budget is checked often
        for i in range(0, len(lines), self.PIECE):
            self.budget.check()
            self.solver.from_string("\n".join(lines[i:i + self.PIECE]))

    def bound_literal(self, t: int):
        if t not in self._bounds:
            z3 = self.z3
            lit = z3.Bool(f"T_le_{t}")
            self.solver.add(z3.Implies(lit, z3.Int("makespan") <= t))
            self._bounds[t] = lit
        return self._bounds[t]

    def window_literal(self, t: int, limit: int | None):
        """A literal that, assumed together with ``T <= t`` (and memory within ``limit``),
        keeps every start time inside its :class:`TimeWindows` window for that bound; None
        when the windows refute ``t``.  Sound: the windows keep every FIFO schedule that
        finishes by ``t`` within ``limit`` (and so its restriction to a relaxation's
        devices); as bounds on single variables they stay difference constraints."""
        key = (t, limit)
        if key not in self._win:
            tw = self._tw.get(limit)
            if tw is None:
                tw = self._tw[limit] = TimeWindows(self.p, self.u, limit, budget=self.budget)
            win = tw.windows(t, budget=self.budget)
            if win is None:
                self._win[key] = None
            else:
                est, lct = win
                name = f"win_{t}_{'none' if limit is None else limit}"
                lines = [f"(declare-const {name} Bool)"]
                for n, action in enumerate(tw.keys):
                    if not n % 1024:
                        self.budget.check()
                    x = self.where.get(action)
                    if x is not None:
                        v = self.t(x)
                        lines.append(f"(assert (=> {name} (and (>= {v} {est[n]}) "
                                     f"(<= {v} {lct[n] - tw.dur[n]}))))")
                self._declare(lines)
                self._win[key] = self.z3.Bool(name)
        return self._win[key]

    def fixed_outside(self, report, lo: float, hi: float, devices=None) -> list:
        """Assumptions that keep ``report``'s device order for every pair of actions except
        pairs that both start within [lo, hi) (scaled time): a neighbourhood to re-optimise."""
        z3 = self.z3
        tl = report.timeline
        pos, start = {}, {}
        for d in range(self.p.devices):
            for n, (a, st, _) in enumerate(tl.entries(d)):
                x = self.where[(a.stage, a.kind, a.microbatch)]
                pos[x] = n
                start[x] = st * self.u.tscale
        inside = {x for x, st in start.items() if lo <= st < hi
                  and (devices is None or self.gdev[x[0]] in devices)}
        out = []
        for (a, b), (na, nb) in self._pair_sizes.items():
            self.budget.check()
            for j in range(na):
                xa = (a, j)
                for k in range(nb):
                    xb = (b, k)
                    if xa in inside and xb in inside:
                        continue
                    lit = z3.Bool(f"o_{a}_{j}_{b}_{k}")
                    out.append(lit if pos[xa] < pos[xb] else z3.Not(lit))
        return out

    def check(self, t: int, memory_limit: int | None, timeout_s: float | None, extra=()):
        """"sat" and the device orders, "unsat" (no order in the class finishes by ``t``
        within ``memory_limit``; with the reason "time windows" when propagation alone
        refutes it) or "unknown" and Z3's reason.  Runs within the encoding's budget (and
        ``timeout_s`` seconds); raises :class:`~.budget.TimeUp` when the budget is spent
        while the assumptions are built."""
        from .solver import check

        assumptions = [self.bound_literal(t), *extra]
        if memory_limit is not None:
            assumptions.append(self.memory_literal(memory_limit))
        if self.fifo:
            win = self.window_literal(t, memory_limit)
            if win is None:
                return "unsat", "time windows"
            assumptions.append(win)
        r, why = check(self.solver, *assumptions, budget=self.budget, at_most=timeout_s)
        z3 = self.z3
        if r == z3.sat:
            model = self.solver.model()
            self.last_makespan = model.eval(z3.Int("makespan"), model_completion=True).as_long()
            return "sat", self.decode(model)
        if r == z3.unsat:
            return "unsat", None
        return "unknown", why

    def decode(self, model) -> tuple[tuple[Action, ...], ...]:
        """Device orders from a model: actions by start time, ties broken by dependency rank."""
        z3, p = self.z3, self.p
        S = p.stages
        rows: list[list[tuple]] = [[] for _ in range(p.devices)]
        rank = {F: lambda s: s, B: lambda s: 2 * S - s, I: lambda s: 2 * S - s,
                W: lambda s: 3 * S - s}
        for g, (s, k, mbs) in enumerate(self.groups):
            for j, i in enumerate(mbs):
                t = model.eval(z3.Int(self.t((g, j))), model_completion=True).as_long()
                rows[self.gdev[g]].append((t, t + self.gdur[g], i, rank[k](s), Action(s, k, i)))
        return tuple(tuple(r[-1] for r in sorted(row, key=lambda r: r[:4])) for row in rows)


# --------------------------------------------------------------------------- results


@dataclass
class SearchResult:
    """What a search found.  ``status``: ``optimal`` (proven over ``search_class``),
    ``feasible`` (time limit: best found, with ``lower_bound`` and ``gap``), ``infeasible``
    (no schedule exists under the limits; ``reason`` says why) or ``unknown`` (nothing found
    in time)."""

    status: str
    objective: str
    schedule: Schedule | None
    makespan: float | None
    peak_memory: float | None
    lower_bound: float | None
    search_class: str
    seconds: float
    reason: str | None = None
    warm_start: dict | None = None
    certificate: dict = field(default_factory=dict)
    log: list = field(default_factory=list)

    @property
    def optimal(self) -> bool:
        return self.status == "optimal"

    @property
    def gap(self) -> float | None:
        value = self.makespan if self.objective == "makespan" else self.peak_memory
        if value is None or self.lower_bound is None:
            return None
        return value - self.lower_bound

    def to_json(self) -> dict:
        return {
            "status": self.status, "optimal": self.optimal, "objective": self.objective,
            "makespan": self.makespan, "peak_memory": self.peak_memory,
            "lower_bound": self.lower_bound, "gap": self.gap, "search_class": self.search_class,
            "seconds": round(self.seconds, 3), "reason": self.reason, "warm_start": self.warm_start,
            "certificate": self.certificate,
        }


# --------------------------------------------------------------------------- search


def search(devices: int, microbatches: int, *, chunks: int = 1, placement: str = "loop",
           split_backward: bool = False, costs=None, memory=None, memory_limit: float | None = None,
           comm_latency: float | None = None, time_limit: float = 60.0,
           minimize: str = "makespan", makespan_bound: float | None = None,
           fifo: bool = True, warm_start: bool = True, budget: Budget | None = None) -> SearchResult:
    """Search the best schedule of the given shape.

    ``minimize="makespan"`` (within ``memory_limit``) or ``"memory"`` (peak memory, within
    ``makespan_bound``).  ``fifo`` chooses the search class (see the module docstring: FIFO
    loses no optimum).  Never raises for an infeasible or hard instance: the result's
    ``status`` says what was found.  Every schedule returned has been re-validated by the
    graph checker.  Every phase runs under one :class:`~.budget.Budget` (``budget``, or one
    of ``time_limit`` seconds from the call): the search returns within it plus
    :data:`~.budget.OVERSHOOT_S`, with the best found so far when it runs out.
    """
    if budget is None and time_limit is not None and time_limit > 0:
        budget = Budget(time_limit)
    p = make_problem(devices, microbatches, chunks=chunks, placement=placement,
                     split_backward=split_backward, costs=costs, memory=memory,
                     memory_limit=memory_limit, comm_latency=comm_latency)
    if minimize not in ("makespan", "memory"):
        raise UsageError(f"search: minimize must be 'makespan' or 'memory', got {minimize!r}")
    if minimize == "memory" and makespan_bound is None:
        raise UsageError("search: minimising memory needs a makespan bound (--makespan-bound T)")
    if time_limit is None or time_limit <= 0:
        raise UsageError(f"search: time limit must be > 0 seconds, got {time_limit!r}")
    return _Search(p, fifo=fifo, time_limit=time_limit, warm_start=warm_start,
                   budget=budget).run(minimize, makespan_bound)


class _Search:
    def __init__(self, p: Problem, *, fifo: bool, time_limit: float | None = None, warm_start: bool,
                 budget: Budget | None = None):
        self.p, self.fifo, self.warm = p, fifo, warm_start
        self.budget = budget if budget is not None else Budget(time_limit)
        self.u = Units(p)
        self.t0 = self.budget.start
        self.cls = CLASS_FIFO if fifo else CLASS_ALL
        self.log: list = []
        self.enc: _Encoding | None = None
        self._tw: dict[int | None, TimeWindows] = {}

    def left(self) -> float:
        return self.budget.remaining()

    def encoding_windows(self, limit: int | None, budget: Budget | None = None) -> TimeWindows:
        """The :class:`TimeWindows` of ``limit``, shared with the encodings (built once,
        within ``budget``)."""
        if limit not in self._tw:
            self._tw[limit] = TimeWindows(self.p, self.u, limit, budget=budget or self.budget)
        return self._tw[limit]

    def encoding(self) -> _Encoding:
        """The whole problem's encoding, built within the budget (:class:`~.budget.TimeUp`
        when it runs out first; the next call starts again)."""
        if self.enc is None:
            self.enc = _Encoding(self.p, self.u, fifo=self.fifo, timeout_s=max(self.left(), 0.001),
                                 windows=self._tw, budget=self.budget)
            self.log.append(("encoded", round(time.monotonic() - self.t0, 3)))
        return self.enc

    def schedule_of(self, rows, name: str) -> Schedule:
        p = self.p
        return Schedule(p.devices, p.stages, p.microbatches, rows, p.placement_obj(), name,
                        costs=p.costs, memory=p.memory)

    def validated(self, rows):
        """Re-validate a solver's schedule with the graph checker; returns (schedule, report)."""
        sched = self.schedule_of(rows, "search")
        rep = evaluate(self.p, sched)
        if not rep.is_valid:
            raise AssertionError("search produced a schedule the graph checker rejects: "
                                 + "; ".join(map(str, rep.violations[:3])))
        return sched, rep

    def result(self, status, objective, sched, rep, lb, reason=None, warm=None, cert=None):
        ms = rep.metrics.makespan if rep is not None else None
        pk = rep.metrics.peak_memory if rep is not None else None
        if sched is not None:
            meta = {"search": {"status": status, "objective": objective, "class": self.cls,
                               "lower_bound": lb, "certificate": cert or {}}}
            sched = sched.with_(name=f"search-{objective}", costs=self.p.costs, memory=self.p.memory,
                                metadata=meta)
            final = evaluate(self.p, sched)  # the graph checker re-validates what is returned
            if not final.is_valid or final.metrics.makespan != ms:
                raise AssertionError("search result does not re-validate: "
                                     + "; ".join(map(str, final.violations[:3])))
        return SearchResult(status, objective, sched, ms, pk, lb, self.cls,
                            time.monotonic() - self.t0, reason, warm, cert or {}, self.log)

    # -- minimise makespan
    def run(self, objective: str, makespan_bound):
        if objective == "memory":
            return self.run_memory(makespan_bound)
        p, u = self.p, self.u
        limit = u.limit
        reason: str | None
        need, dev = min_peak_memory(p, u)
        if limit is not None and need > limit:
            reason = (f"no schedule exists under these limits: when a microbatch's last forward starts, "
                      f"device {dev} holds its activations of every stage it runs ({u.mem(need)} units "
                      f"with static memory), over the memory limit {u.mem(limit)}")
            return self.result("infeasible", "makespan", None, None, None, reason)
        lb, why = lower_bound(p, u)
        # the heuristics of the warm start get at most half the time (the families take
        # milliseconds); the sequential fallback and the checks of what they found are linear
        name, sched, rep, table = (best_generator(p, budget=self.budget.part(0.5),
                                                  lower_bound=u.time(lb))
                                   if self.warm else (None, None, None, {}))
        if sched is None:  # without warm start: the sequential fallback is always valid here
            name, sched = "sequential", sequential(p)
            rep = evaluate(p, sched)
        warm = {"name": name, "makespan": rep.metrics.makespan, "candidates": table}
        best_s, best_r = sched, rep
        best = round(rep.metrics.makespan * u.tscale)
        cert: dict[str, Any] = {"lower_bound_argument": why}
        self.log.append(("warm", name, best))
        status, reason = "feasible", None
        # quick randomised list schedules before the solver
        if self.warm and best > lb:
            for s2, r2 in randomised_greedy(p, self.budget.part(1 / 40, at_most=1.5)):
                ms = round(r2.metrics.makespan * u.tscale)
                if ms < best:
                    best, best_s, best_r = ms, s2, r2
                    self.log.append(("greedy", ms))
        # time windows by propagation (class fifo: the argument orders microbatches), then
        # per-device relaxations (the other devices become time lags) raise the lower bound
        if best > lb and self.fifo:
            part = self.budget.part(0.2)
            try:
                lb2 = propagation_bound(p, u, lb, best, budget=part,
                                        windows=self.encoding_windows(limit, part))
            except TimeUp:  # the windows were not even built in time
                lb2 = lb
            self.log.append(("windows", u.time(lb2), round(time.monotonic() - self.t0, 3)))
            if lb2 > lb:
                lb = lb2
                cert["lower_bound_argument"] = {
                    "time_windows": f"propagation (dependencies, the orders the memory limit "
                                    f"forces, one action at a time per device, memory before "
                                    f"each forward) empties a start-time window for every "
                                    f"makespan below {u.time(lb)}", "bound": u.time(lb)}
        if best > lb and self.fifo:
            lb = self.order_bound(best, lb, cert, share=0.25)
        if best > lb:
            lb = self.relaxation_bound(best, lb, cert, share=0.2)
        # The loop alternates two moves until the gap closes or time runs out:
        # - prove: "is there a schedule finishing by best - 1?" on the whole problem, with a
        #   budget that doubles after each unknown (unsat closes the gap, sat improves);
        # - improve: one pass of large-neighbourhood search (keep the best order outside a
        #   time window, let the solver re-order inside it, each try with a small budget).
        # Proving comes first: on the instances up to 4 x 16 the warm start is usually
        # optimal already, and the whole proof is cheaper than neighbourhoods that cannot
        # improve.  One bisection probe first, when the gap is wide, raises the lower bound
        # for the gap report.
        prove_s = max(5.0, 0.3 * self.left())
        width = 0.25
        probed = False
        prove = True
        try:
            while True:
                if best <= lb:
                    status = "optimal"
                    if "proof" not in cert or not cert["proof"].endswith(f"by {u.time(best - 1)} "
                                                                          "under these limits (unsat)"):
                        cert["proof"] = (f"makespan {u.time(best)} equals the lower bound (see "
                                         f"lower_bound_argument)")
                    break
                left = self.left()
                if left <= 0:
                    reason = "time limit reached"
                    break
                enc = self.encoding()
                if not probed and best - lb > 2:
                    probed = True
                    t = (lb + best - 1) // 2
                    r, value = enc.check(t, limit, max(2.0, left / 20))
                elif prove:
                    prove = False
                    t = best - 1
                    r, value = enc.check(t, limit, prove_s)
                    prove_s *= 2
                else:
                    prove = True
                    improved = False
                    span = best * width
                    # neighbourhoods: time windows over every device, then pairs of neighbouring
                    # devices over a window twice as wide
                    hoods: list[tuple[float, float, set[int] | None]] = []
                    lo = 0.0
                    while lo < best:
                        hoods.append((lo, lo + span, None))
                        lo += span / 2
                    for d in range(max(1, p.devices - 1)):
                        for lo in range(0, best, max(1, int(span))):
                            hoods.append((lo, lo + 2 * span, {d, d + 1}))
                    for lo, hi, devs in hoods:
                        if self.left() <= 0:
                            break
                        extra = enc.fixed_outside(best_r, lo, hi, devs)
                        t = best - 1
                        r, value = enc.check(t, limit, 2.0, extra)
                        self.log.append(("lns", u.time(t), round(lo), devs and sorted(devs), r,
                                         round(time.monotonic() - self.t0, 3)))
                        if r == "sat":
                            s2, r2 = self.validated(value)
                            best, best_s, best_r = round(r2.metrics.makespan * u.tscale), s2, r2
                            improved = True
                            break
                    # a wider window next time when this one found nothing (up to half the
                    # horizon; then start small again)
                    width = 0.25 if improved or width >= 0.5 else width * 2
                    if improved:
                        prove = False  # keep improving while neighbourhoods pay off
                    continue
                self.log.append(("check", u.time(t), r, round(time.monotonic() - self.t0, 3)))
                if r == "sat":
                    s2, r2 = self.validated(value)
                    ms = round(r2.metrics.makespan * u.tscale)
                    if ms > t:
                        raise AssertionError(f"solver schedule makespan {ms} exceeds the bound {t}")
                    best, best_s, best_r = ms, s2, r2
                    prove = True
                elif r == "unsat":
                    lb = t + 1
                    how = "Z3" if value is None else value
                    cert["proof"] = (f"{how}: no order in class {self.cls} finishes by {u.time(t)} "
                                     f"under these limits (unsat)")
                elif self.left() <= 0:
                    reason = value if value == "time limit reached" else f"solver gave up: {value}"
                    break
        except TimeUp:  # building the encoding or its assumptions ran out of time
            status, reason = "feasible", "time limit reached"
        return self.result(status, "makespan", best_s, best_r, u.time(lb), reason, warm, cert)

    def order_bound(self, best: int, lb: int, cert: dict, *, share: float) -> int:
        """Raise ``lb`` with :func:`order_search`: a makespan is refuted when every order of
        some device is.  The device that refuted the last makespan goes first with half the
        time left, the others take turns with smaller slices, round after round; a device
        one of whose orders survives a makespan is dropped (the windows only widen with the
        makespan, so it survives every larger one too), and after a round in which one
        survived and none refuted, the search stops.  When this fails, Z3 on the whole
        problem (with the windows) often proves quickly what the branching could not (4x16
        split F=2,I=2,W=1 mem 3: 107 unsat in 0.3 s), so the share stays small."""
        p, u = self.p, self.u
        part = self.budget.part(share)
        try:
            tw = self.encoding_windows(u.limit, part)
        except TimeUp:
            return lb
        devices = list(range(p.devices))
        prefer = None
        while lb < best and devices and not part.expired():
            refuted = survived = False
            while devices and not refuted and not survived and not part.expired():
                # another round only while no device has an order surviving this makespan:
                # once one has, the makespan is often reachable and Z3 does better
                for d in list(devices):
                    left = part.remaining()
                    piece = left / 2 if d == prefer else max(0.5, left / (2 * len(devices)))
                    r = order_search(tw, p, u, lb, d, budget=part.part(at_most=piece))
                    self.log.append(("order", d, u.time(lb), r,
                                     round(time.monotonic() - self.t0, 3)))
                    if r is True:
                        refuted, prefer = True, d
                        devices.remove(d)
                        devices.insert(0, d)
                        break
                    if r is False:
                        devices.remove(d)
                        survived = True
            if not refuted:
                break
            cert["lower_bound_argument"] = {
                "device_orders": f"every order of device {devices[0]} is refuted for makespan "
                                 f"{u.time(lb)} (branching over its order with the time windows "
                                 f"propagated at every node), and every makespan below by it or "
                                 f"by the windows alone", "bound": u.time(lb + 1)}
            lb += 1
        return lb

    def relaxation_bound(self, best: int, lb: int, cert: dict, *, share: float) -> int:
        """Raise ``lb`` with one-device relaxations: device d alone, its actions' dependencies
        through other devices replaced by the least time those paths take, memory limit kept.
        Any schedule's restriction to d satisfies the relaxation, so the relaxation's optimum
        is a lower bound.  (The same holds for a pair of neighbouring devices.)  The energy
        cuts added to one-device relaxations hold in every schedule too (module docstring),
        so they cut no schedule's restriction away.  Each device gets a share of the time; Z3
        bisects on its makespan, and only an unsat raises the bound."""
        p, u = self.p, self.u
        part = self.budget.part(share)
        cap = max(1.0, part.remaining() / 10)
        place = p.placement_obj().routes[0]
        est = earliest_starts(p, u)
        # likely bottleneck first: the device whose arithmetic bound is largest
        bk = I if p.split else B

        def weight(d):
            arith = (min(est[(s, F)] for s in range(p.stages) if place[s] == d)
                     + p.microbatches * sum(u.idur[(s, k)] for s in range(p.stages)
                                            if place[s] == d for k in p.kinds))
            if u.limit is None:
                return arith
            # under a memory limit, the device whose activations wait longest for their
            # backward (the longest round trip) stalls first
            lags = device_lags(p, u, d)
            return max(lags[(s, bk)].get((s, F), 0) for s in range(p.stages) if place[s] == d)

        order = sorted(range(p.devices), key=lambda d: (-weight(d), d))
        # single devices, then neighbouring pairs (tighter, slower) from the bottleneck on
        groups: list = list(order)
        groups += [(d, d + 1) for d in order if d + 1 < p.devices]
        for d in groups:
            if part.expired() or lb >= best:
                break
            # one device with the energy cuts (and so the simplex): a device's idle time while
            # memory blocks its forwards and no backward is ready is exactly what they count;
            # on 4x16 split F=1,I=2,W=1 mem 4 device 0's relaxation proves 69 impossible in
            # 0.8 s with them and is still open after 60 s without.  Pairs of devices are
            # solved faster without them, on difference logic, like the whole problem.
            try:
                enc = _Encoding(p, u, fifo=self.fifo, timeout_s=max(part.remaining(), 0.01),
                                device=d, cuts=isinstance(d, int), windows=self._tw, budget=part)
            except TimeUp:  # building it ran out of time: the bound proven so far
                break
            lo, hi = lb, best - 1
            t = (lo + hi) // 2
            while lo <= hi and not part.expired():
                # each probe gets a slice, so one hard probe does not starve the others
                try:
                    r, why = enc.check(t, u.limit, cap)
                except TimeUp:
                    break
                self.log.append(("relax", d, u.time(t), r, round(time.monotonic() - self.t0, 3)))
                if r == "unsat":
                    lo = t + 1
                    if lo > lb:
                        lb = lo
                        cert["lower_bound_argument"] = {
                            "relaxation": f"device(s) {d} alone (other devices as time lags, "
                                          f"memory limit kept) cannot finish by {u.time(t)}: "
                                          f"{why or 'Z3 unsat'}",
                            "bound": u.time(lb)}
                elif r == "sat":
                    hi = min(t, enc.last_makespan) - 1
                elif t > lo:
                    # unknown says nothing about t; a lower target is easier to refute, and
                    # every unsat still raises the bound (hi only steers the probes)
                    hi = t - 1
                else:
                    break
                t = (lo + hi) // 2
        return lb

    # -- minimise peak memory under a makespan bound
    def run_memory(self, makespan_bound):
        p, u = self.p, self.u
        tb = math.floor(frac(makespan_bound) * u.tscale)
        lb, _why = lower_bound(p, u)
        reason: str | None
        if tb < lb:
            reason = (f"no schedule exists under these limits: the makespan bound "
                      f"{u.time(tb)} is below the lower bound {u.time(lb)} ({_why})")
            return self.result("infeasible", "memory", None, None, None, reason)
        mlo, _ = min_peak_memory(p, u)
        if u.limit is not None and u.limit < mlo:
            return self.result("infeasible", "memory", None, None, None,
                               f"no schedule exists under these limits: memory limit {u.mem(u.limit)} "
                               f"is below the least possible peak {u.mem(mlo)}")
        name, sched, rep, table = (best_generator(p, makespan_bound=u.time(tb), objective="memory",
                                                  budget=self.budget.part(0.5))
                                   if self.warm else (None, None, None, {}))
        warm = {"name": name, "peak_memory": rep.metrics.peak_memory if rep else None,
                "candidates": table}
        best_s, best_r = sched, rep
        cap = u.limit
        if sched is None:
            try:
                r, value = self.encoding().check(tb, cap, None)
            except TimeUp:
                r, value = "unknown", "time limit reached"
            if r == "unsat":
                return self.result("infeasible", "memory", None, None, None,
                                   f"no schedule exists under these limits: {value or 'Z3'} finds "
                                   f"no order in class {self.cls} that finishes by {u.time(tb)} "
                                   f"(unsat)", warm)
            if r != "sat":
                return self.result("unknown", "memory", None, None, None,
                                   f"solver gave up before finding any schedule: {value}", warm)
            best_s, best_r = self.validated(value)
        hi = round(best_r.metrics.peak_memory * u.mscale)
        lo = mlo
        cert: dict[str, Any] = {}
        status, reason = "feasible", None
        while lo < hi:
            if self.left() <= 0:
                reason = "time limit reached"
                break
            mid = (lo + hi - 1) // 2
            try:
                r, value = self.encoding().check(tb, mid, None)
            except TimeUp:
                r, value = "unknown", "time limit reached"
            self.log.append(("check-memory", mid, r))
            if r == "sat":
                s2, r2 = self.validated(value)
                best_s, best_r = s2, r2
                hi = round(r2.metrics.peak_memory * u.mscale)
            elif r == "unsat":
                lo = mid + 1
            else:
                reason = value if value == "time limit reached" else f"solver gave up: {value}"
                break
        if lo >= hi:
            status = "optimal"
            cert["proof"] = (f"peak {u.mem(hi)} equals the least peak any schedule needs"
                             if hi == mlo else
                             f"Z3 (with the time windows): no order in class {self.cls} finishes "
                             f"by {u.time(tb)} with peak memory {u.mem(hi - 1)} or less (unsat)")
        return self.result(status, "memory", best_s, best_r, u.mem(lo), reason, warm, cert)
