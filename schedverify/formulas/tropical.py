"""The timeline with symbolic costs, exactly, at one concrete size (no sympy here).

With uniform costs per action kind, every start and end time of the as-soon-as-possible
execution (docs/spec.md section 4) is a *max over dependency paths of sums of costs*: a tropical
polynomial in the cost symbols ``t_F, t_B, t_I, t_W, c``.  A term is the vector of how many
times each symbol occurs on one path; a time is the set of its terms, and since every cost
is >= 0 a term that is componentwise <= another can never be the maximum, so it is dropped.
What remains is exact for every non-negative cost vector: ``time(x) = max(term . x)``.

The sweep reads the compiled graph of :mod:`schedverify.graph` (the dependency rules of
:mod:`schedverify.deps`, never restated here) and visits actions in a topological order
taken from a unit-cost numeric sweep (with positive durations, a dependency always starts
strictly earlier than its dependant).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from fractions import Fraction
from collections.abc import Iterable, Sequence

from ..errors import TooComplex, UsageError
from ..graph import compile_graph, sweep
from ..model import B, F, I, OVERLAP_F_B, W, Action, MemoryModel, Schedule
from ..cost.memory import memory_sweep

#: The cost symbols, in the order of a term's components.
COST_SYMBOLS = ("t_F", "t_B", "t_I", "t_W", "c")
_KIND_INDEX = {F: 0, B: 1, I: 2, W: 3}
NDIM = len(COST_SYMBOLS)
ZERO = (0,) * NDIM
COMM = tuple(1 if k == "c" else 0 for k in COST_SYMBOLS)

PAIR_PRUNE_MAX = 12
Term = tuple  # tuple[int, ...] of length NDIM
Tropical = frozenset  # frozenset[Term]: max over the terms, each a linear form in the costs


def add(a: Term, b: Term) -> Term:
    return tuple(x + y for x, y in zip(a, b))


def dominates(a: Term, b: Term) -> bool:
    """a >= b componentwise: b can never exceed a when every cost is >= 0."""
    return all(x >= y for x, y in zip(a, b))


def prune(terms: Iterable[Term]) -> Tropical:
    """Drop every term that can never be the strict maximum for costs >= 0: terms another
    dominates, and terms dominated by a point on the segment between two others (then
    ``t.x <= lam*a.x + (1-lam)*b.x <= max(a.x, b.x)``).  Both are exact certificates; a
    redundant term that neither catches is kept, which is always sound."""
    ts = sorted(set(terms), key=lambda t: (-sum(t), t))
    kept: list[Term] = []
    for t in ts:
        if not any(dominates(k, t) for k in kept):
            kept.append(t)
    if 2 < len(kept) <= PAIR_PRUNE_MAX:
        kept = [t for i, t in enumerate(kept) if not _between(t, kept, i)]
    return frozenset(kept)


def _between(t: Term, terms: list[Term], skip: int) -> bool:
    """Is t <= lam*a + (1-lam)*b componentwise for some a, b (not t) and lam in [0, 1]?

    The interval of lam is kept as two fractions num/den (den > 0) compared by
    cross-multiplication: integers only, this runs at every action of the timeline."""
    n = len(terms)
    for i in range(n):
        if i == skip:
            continue
        a = terms[i]
        for j in range(i + 1, n):
            if j == skip:
                continue
            b = terms[j]
            ln, ld, hn, hd = 0, 1, 1, 1  # lo = ln/ld <= lam <= hn/hd = hi
            ok = True
            for tk, ak, bk in zip(t, a, b):
                # tk <= bk + lam*(ak - bk)
                diff = ak - bk
                need = tk - bk
                if diff == 0:
                    if need > 0:
                        ok = False
                        break
                    continue
                if diff > 0:
                    if need * ld > ln * diff:
                        ln, ld = need, diff
                elif -need * hd < hn * -diff:
                    hn, hd = -need, -diff
                if ln * hd > hn * ld:
                    ok = False
                    break
            if ok:
                return True
    return False


def shift(p: Tropical, t: Term) -> Tropical:
    return frozenset(add(x, t) for x in p)


def evaluate(p: Iterable[Term], costs: Sequence) -> Fraction:
    """max(term . costs) for a cost vector in COST_SYMBOLS order."""
    return max(sum((Fraction(k) * Fraction(x) for k, x in zip(t, costs)), Fraction(0)) for t in p)


def duration(action: Action) -> Term:
    """The term of one action's duration: its compute leaves (an overlap costs their sum, as
    :class:`~schedverify.model.Costs` does by default); communication and bookkeeping cost 0."""
    v = [0] * NDIM
    kinds = [x.kind for x in action.leaves()] if action.kind == OVERLAP_F_B else [action.kind]
    for k in kinds:
        if k in _KIND_INDEX:
            v[_KIND_INDEX[k]] += 1
    return tuple(v)


@dataclass(frozen=True)
class OrderMetrics:
    """What does not need the timeline: busy time per device (a term, every cost kept) and
    the peaks and warm-up counts per device, which depend on the order only."""

    devices: int
    stages: int
    busy: tuple[Term, ...]
    peak_inflight: tuple[int, ...]
    peak_memory: tuple[Fraction, ...]
    warmup: tuple[int, ...]

    @property
    def v(self) -> int:
        return self.stages // self.devices

    @property
    def busiest(self) -> Tropical:
        """max_d busy_d, as a tropical polynomial."""
        return prune(self.busy)

    @property
    def total_busy(self) -> Term:
        out = ZERO
        for b in self.busy:
            out = add(out, b)
        return out


@dataclass(frozen=True)
class SizeMetrics(OrderMetrics):
    """Everything the formulas and the prover need about one generated schedule: the order
    metrics, and the makespan as a tropical polynomial.

    ``busy[d]`` is the (linear) busy time of device ``d`` as a term; ``peak_inflight`` and
    ``peak_memory`` (default memory model: activation 1 per stage, ``w`` = 1/2, no static
    memory) and ``warmup`` (forwards before the first backward) per device depend on the
    order only.
    """

    microbatches: int = 0
    makespan: Tropical = frozenset()


#: A projection of the cost symbols: ``merge[k]`` is where symbol k's count goes (None: the
#: symbol costs 0).  IDENTITY keeps every symbol; others are exact on a slice of the costs.
IDENTITY = tuple(range(NDIM))
C_ZERO = (0, 1, 2, 3, None)
#: c == 0, t_I == t_F (t_B, t_W stay): the input gradient costs a forward, W is free.
I_IS_F = (0, 1, 0, 3, None)
#: c == 0, t_W == t_I (t_F, t_B stay): the two halves of a backward cost the same.
W_IS_I = (0, 1, 2, 2, None)
#: c == 0, t_I == t_F, t_W == t_F (and t_B stays): the slice papers usually draw.
UNIT_SPLIT = (0, 1, 0, 0, None)
#: Every symbol costs 0: no timeline to speak of, for the metrics of the order only (peaks).
NO_COSTS = (None,) * NDIM


def project(t: Term, merge: tuple) -> Term:
    if merge == IDENTITY:
        return t
    out = [0] * NDIM
    for k, x in enumerate(t):
        if x and merge[k] is not None:
            out[merge[k]] += x
    return tuple(out)


def symbolic_timeline(schedule: Schedule, *, merge: tuple = IDENTITY,
                      max_terms: int | None = None) -> tuple[list[Tropical], list[Term]]:
    """End time (tropical polynomial) and duration term of every action of the compiled graph.

    ``merge`` projects the costs onto a slice (``C_ZERO``: latency 0): exact on that slice and
    much cheaper, since it is latency and unequal costs that make paths trade one cost for
    another.  ``max_terms`` bounds the size of any intermediate max (TooComplex beyond it).
    """
    hop = project(COMM, merge)
    g = compile_graph(schedule)
    n = len(g.acts)
    res = sweep(g, [1.0] * n, 0.0, max_cycles=1)
    if not res.completed:
        raise UsageError(f"{schedule.name or 'the schedule'} deadlocks; its timeline has no makespan "
                         "(run `schedverify check` to see the cycle)")
    dur = [project(duration(a), merge) for a in g.acts]
    order = sorted(range(n), key=lambda i: (res.start[i], g.dev[i], i))
    end: list[Tropical | None] = [None] * n
    zero = frozenset([ZERO])
    starts = g.starts
    def done(j: int) -> Tropical:
        # the order is topological (unit durations: a dependency starts strictly earlier),
        # so every action this one waits on has its end already
        e = end[j]
        assert e is not None, "a dependency is visited before its dependant"
        return e

    for i in order:
        parts: list[Term] = []
        d = g.dev[i]
        if i > starts[d]:
            parts.extend(done(i - 1))
        for j in g.waits[i]:
            if j >= 0:
                parts.extend(add(t, hop) for t in done(j))
            else:
                parts.extend(done(~j))
        begin = prune(parts) if parts else zero
        if max_terms is not None and len(begin) > max_terms:
            raise TooComplex(f"{schedule.name}: more than {max_terms} linear pieces in one start time")
        end[i] = shift(begin, dur[i])
    return end, dur  # type: ignore[return-value]


def order_metrics(schedule: Schedule) -> OrderMetrics:
    g = compile_graph(schedule)
    D = schedule.devices
    busy = _busy(g, D, list(map(duration, g.acts)))
    return OrderMetrics(D, schedule.stages, busy, *_order_parts(g, D))


def _busy(g, D: int, dur: list) -> tuple[Term, ...]:
    """Each device's busy time: the sum of its actions' duration terms (counted by term:
    a device's actions have only a few distinct ones)."""
    busy = []
    for d in range(D):
        b = [0] * NDIM
        for t, n in Counter(dur[g.starts[d]:g.starts[d + 1]]).items():
            for k, x in enumerate(t):
                b[k] += n * x
        busy.append(tuple(b))
    return tuple(busy)


def _order_parts(g, D: int) -> tuple[tuple[int, ...], tuple[Fraction, ...], tuple[int, ...]]:
    mem = memory_sweep(g, MemoryModel())
    warm = []
    acts = g.acts  # read once: a lazy field (lazy.py)
    for d in range(D):
        count = 0
        for i in range(g.starts[d], g.starts[d + 1]):
            leaves = acts[i].leaves()
            if any(x.kind in (B, I) for x in leaves):
                break
            count += sum(1 for x in leaves if x.kind == F)
        warm.append(count)
    return (tuple(mem.peak_inflight),
            tuple(Fraction(x).limit_denominator(10**6) for x in mem.peak_memory), tuple(warm))


def size_metrics(schedule: Schedule, *, merge: tuple = IDENTITY,
                 max_terms: int | None = None) -> SizeMetrics:
    end, dur = symbolic_timeline(schedule, merge=merge, max_terms=max_terms)
    g = compile_graph(schedule)
    D = schedule.devices
    lasts = [end[g.starts[d + 1] - 1] for d in range(D) if g.starts[d + 1] > g.starts[d]]
    makespan = prune(t for p in lasts for t in p) if lasts else frozenset([ZERO])
    return SizeMetrics(D, schedule.stages, _busy(g, D, dur), *_order_parts(g, D),
                       microbatches=schedule.microbatches, makespan=makespan)
