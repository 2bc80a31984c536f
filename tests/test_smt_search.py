"""Search: valid results, never worse than a generator, equal to exhaustive enumeration on
small sizes, FIFO symmetry breaking loses nothing, and the CLI's exit codes."""

from __future__ import annotations

import io
import functools
import itertools
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schedverify import Costs, check, load
from schedverify.cli import run
from schedverify.generators import FAMILIES
from schedverify.model import B, F, I, W, Action, MemoryModel, Schedule

smt_search = pytest.importorskip("schedverify.smt.search")
search = smt_search.search
from schedverify.search import bounds, heuristics, problem  # noqa: E402  (after z3 is known to be there)


def local_orders(actions):
    """Every order of one device's actions that keeps F before its backward(s) and I before
    W for each (stage, microbatch) on the device (other orders deadlock on the device)."""
    rank = {F: 0, B: 1, I: 1, W: 2}
    for perm in itertools.permutations(actions):
        seen = {}
        ok = True
        for a in perm:
            key = (a.stage, a.microbatch)
            if seen.get(key, -1) >= rank[a.kind]:
                ok = False
                break
            if rank[a.kind] > 0 and seen.get(key, -1) < rank[a.kind] - 1:
                ok = False
                break
            seen[key] = rank[a.kind]
        if ok:
            yield perm


@functools.lru_cache(maxsize=None)
def exhaustive(D, M, *, split=False, costs=None, memory_limit=None, w=0.5):
    """(least makespan, least peak memory among the schedules with that makespan) over every
    device order, judged by the graph checker; None when no order is valid."""
    kinds = (F, I, W) if split else (F, B)
    per_dev = [sorted(set(local_orders([Action(d, k, i) for i in range(M) for k in kinds])))
               for d in range(D)]
    best = None
    mem = MemoryModel(w=w)
    for rows in itertools.product(*per_dev):
        s = Schedule.build([list(r) for r in rows])
        rep = check(s, costs=costs, memory=mem, memory_limit=memory_limit, max_violations=1)
        if rep.is_valid:
            key = (rep.metrics.makespan, rep.metrics.peak_memory)
            best = key if best is None or key < best else best
    return best


CASES = [
    (2, 2, False, Costs(F=1, B=2), None),
    (2, 3, False, Costs(F=1, B=2), 2),
    (2, 3, False, Costs(F=2, B=3, comm=1), None),
    (3, 2, False, Costs(F=1, B=1), 1),
    (2, 2, True, Costs(F=1, I=1, W=1), None),
    (2, 2, True, Costs(F=2, I=2, W=1), 1.5),
    (2, 2, True, Costs(F=1, I=2, W=1, comm=1), 1),
]


@pytest.mark.parametrize("D,M,split,costs,limit", CASES)
def test_search_matches_exhaustive_enumeration(D, M, split, costs, limit):
    truth = exhaustive(D, M, split=split, costs=costs, memory_limit=limit)
    for fifo in (True, False):
        # the unrestricted class starts cold: Z3 alone finds and proves the optimum
        r = search(D, M, split_backward=split, costs=costs, memory_limit=limit, time_limit=60,
                   fifo=fifo, warm_start=fifo)
        assert r.optimal, r.reason
        assert r.makespan == truth[0], (fifo, r.makespan, truth)
        assert r.lower_bound == r.makespan
        assert check(r.schedule).is_valid  # costs and limit travel in the file


def test_fifo_loses_nothing_against_unrestricted_search():
    # sizes exhaustive enumeration cannot reach: compare the two classes directly
    for D, M, split, costs, limit in [(3, 3, False, Costs(F=1, B=2), 2),
                                      (2, 4, True, Costs(F=2, I=2, W=1), 2),
                                      (3, 2, True, Costs(F=1, I=1, W=1, comm=1), 1.5)]:
        a = search(D, M, split_backward=split, costs=costs, memory_limit=limit, time_limit=60)
        b = search(D, M, split_backward=split, costs=costs, memory_limit=limit, time_limit=60,
                   fifo=False, warm_start=False)
        assert a.optimal and b.optimal
        assert a.makespan == b.makespan
        assert a.search_class == "fifo" and b.search_class == "unrestricted"


def test_minimise_memory_matches_exhaustive_enumeration():
    costs = Costs(F=1, B=2)
    best_t = exhaustive(2, 3, costs=costs)[0]
    r = search(2, 3, costs=costs, minimize="memory", makespan_bound=best_t, time_limit=60)
    assert r.optimal and r.makespan <= best_t
    assert r.peak_memory == exhaustive(2, 3, costs=costs)[1]
    # a looser makespan allows one microbatch at a time: the least possible peak
    r = search(2, 3, costs=costs, minimize="memory", makespan_bound=100, time_limit=60)
    assert r.optimal and r.peak_memory == 1


GENERATORS = [n for n in ("gpipe", "1f1b", "zb-h1", "zb-h2") if n in FAMILIES]


@settings(max_examples=8)
@given(st.integers(2, 4), st.integers(2, 6), st.booleans(),
       st.sampled_from([Costs(F=1, B=2, I=1, W=1), Costs(F=2, B=3, I=2, W=1), Costs(F=1, B=2, I=1, W=1, comm=1)]),
       st.sampled_from([None, 2, 3]))
def test_search_is_valid_and_never_worse_than_a_generator(D, M, split, costs, limit):
    r = search(D, M, split_backward=split, costs=costs, memory_limit=limit, time_limit=20)
    assert r.status in ("optimal", "feasible")
    rep = check(r.schedule, costs=costs, memory_limit=limit)
    assert rep.is_valid and rep.metrics.makespan == r.makespan
    assert r.lower_bound <= r.makespan
    for name in GENERATORS:
        try:
            g = FAMILIES[name](D, M)
        except Exception:  # noqa: BLE001
            continue
        g = heuristics._convert_split(g, split)
        grep = check(g, costs=costs, memory_limit=limit)
        if grep.is_valid:
            assert r.makespan <= grep.metrics.makespan, name


def test_lower_bound_is_the_pipeline_bound_without_memory_limit():
    # 1F1B reaches (M + D - 1)(F + B): the bound is tight and search proves it without Z3
    r = search(4, 8, costs=Costs(F=1, B=2), time_limit=30)
    assert r.optimal and r.makespan == 33 and r.lower_bound == 33


def test_infeasible_memory_limit():
    r = search(2, 2, chunks=2, costs=Costs(F=1, B=2), memory_limit=1.5, time_limit=10)
    assert r.status == "infeasible" and r.schedule is None
    assert "no schedule exists under these limits" in r.reason


def test_makespan_bound_below_the_lower_bound_is_infeasible():
    r = search(2, 2, costs=Costs(F=1, B=2), minimize="memory", makespan_bound=3, time_limit=10)
    assert r.status == "infeasible"


def _cli(*argv):
    out, err = io.StringIO(), io.StringIO()
    code = run(list(argv), out, err)
    return code, out.getvalue(), err.getvalue()


def test_cli_writes_a_valid_schedule_with_certificate(tmp_path):
    path = tmp_path / "best.json"
    code, out, _ = _cli("search", "--devices", "3", "--microbatches", "4", "--split-backward",
                        "--costs", "F=1,I=1,W=1", "--memory-limit", "2", "-o", str(path),
                        "--format", "json")
    assert code == 0
    doc = json.loads(out)
    assert doc["optimal"] is True and doc["schedule"] == str(path)
    assert doc["makespan"] == doc["lower_bound"] and doc["search_class"] == "fifo"
    s = load(path)
    rep = check(s)
    assert rep.is_valid and rep.metrics.makespan == doc["makespan"]
    assert s.metadata["search"]["status"] == "optimal"


def test_cli_infeasible_exits_1():
    code, out, err = _cli("search", "--devices", "2", "--microbatches", "4", "--chunks", "2",
                          "--memory-limit", "1")
    assert code == 1 and "no schedule exists under these limits" in err


def test_cli_time_limit_exits_3_with_gap():
    # 4 x 8, two chunks in v placement, memory for one microbatch: open after a minute of
    # search (best 101, lower bound 95), so surely after 3 s
    code, out, _ = _cli("search", "--devices", "4", "--microbatches", "8", "--chunks", "2",
                        "--placement", "v", "--split-backward", "--costs", "F=1,I=1,W=1",
                        "--memory-limit", "2", "--time-limit", "3", "--format", "json")
    doc = json.loads(out)
    assert code == 3, doc
    assert doc["optimal"] is False and doc["gap"] > 0 and doc["lower_bound"] < doc["makespan"]


def test_time_windows_prove_zb_h1_optimal_at_8x16_under_1f1b_memory():
    # 8 x 16 split, F=2 I=2 W=1, memory 8: ZB-H1 reaches 101 and propagation refutes every
    # makespan below it (the arithmetic bound is 94; Z3 alone left a gap after 300 s)
    code, out, _ = _cli("search", "--devices", "8", "--microbatches", "16", "--split-backward",
                        "--costs", "F=2,I=2,W=1", "--memory-limit", "8", "--time-limit", "30",
                        "--format", "json")
    doc = json.loads(out)
    assert code == 0 and doc["optimal"] is True and doc["makespan"] == 101, doc
    assert "time_windows" in doc["certificate"]["lower_bound_argument"]


def test_order_search_refutes_below_the_optimum_of_a_v_shape_instance():
    # 4 x 8, two chunks in v placement, memory 4: V-Min reaches 59; every order of device 3
    # is refuted at 58 (Z3's device relaxation needs a minute, CP-SAT found no schedule in
    # 60 s), while V-Min's own device order survives 59 down the tree
    p = problem.make_problem(4, 8, chunks=2, placement="v", split_backward=True,
                                costs=Costs(F=1, I=1, W=1), memory_limit=4)
    u = problem.Units(p)
    tw = bounds.TimeWindows(p, u, u.limit)
    assert tw.windows(58) is not None  # the windows alone do not refute 58
    assert bounds.order_search(tw, p, u, 58, 3, deadline=float("inf")) is True
    vmin = FAMILIES["v-min"](4, 8)
    assert check(vmin, costs=Costs(F=1, I=1, W=1), memory_limit=4).metrics.makespan == 59
    rows = heuristics._convert_split(vmin, True).order
    for d in range(4):
        assert bounds.order_search(tw, p, u, 59, d, deadline=float("inf"),
                                       follow=rows[d]) is False


def test_time_windows_close_the_memory_tight_4x16_instance():
    # 4 x 16 split, F=1 I=1 W=2, memory 3: device 0 holds three microbatches, then idles
    # until microbatch 0's round trip returns; the device-pair relaxations reach 68 and
    # stop there, the windows refute 68 in a fraction of a second (CP-SAT: optimum 69)
    p = problem.make_problem(4, 16, split_backward=True, costs=Costs(F=1, I=1, W=2),
                                memory_limit=3)
    u = problem.Units(p)
    arithmetic = bounds.lower_bound(p, u)[0]
    assert arithmetic == 67
    assert bounds.propagation_bound(p, u, arithmetic, 10**6) == 69
    # without the memory limit the windows give exactly the arithmetic bound
    q = problem.make_problem(4, 16, split_backward=True, costs=Costs(F=1, I=1, W=2))
    assert bounds.propagation_bound(q, problem.Units(q), 67, 10**6) == 67


def test_cli_usage_errors():
    assert _cli("search", "--devices", "0", "--microbatches", "2")[0] == 2
    assert _cli("search", "--devices", "2", "--microbatches", "2", "--minimize", "memory")[0] == 2
    assert _cli("search", "--devices", "2", "--microbatches", "2", "--costs", "F=x")[0] == 2


def test_relaxation_lower_bound_never_exceeds_the_optimum():
    raised = 0
    for D, M, split, costs, limit in CASES:
        truth = exhaustive(D, M, split=split, costs=costs, memory_limit=limit)[0]
        p = problem.make_problem(D, M, split_backward=split, costs=costs, memory_limit=limit)
        s = smt_search._Search(p, fifo=True, time_limit=30, warm_start=False)
        arithmetic = bounds.lower_bound(p, s.u)[0]
        lb = s.relaxation_bound(round((truth + 5) * s.u.tscale), arithmetic, {}, share=1.0)
        assert arithmetic <= lb <= round(truth * s.u.tscale), (D, M, split, costs, limit)
        raised += lb > arithmetic
    assert raised  # the memory-limited cases need the relaxation to prove their optimum


#: sizes exhaustive enumeration covers in well under a second each: (D, M, split)
SMALL = [(2, 2, True), (2, 2, False), (3, 2, False), (4, 2, False)]


@settings(max_examples=25, deadline=None)
@given(st.sampled_from(SMALL), st.integers(1, 3), st.integers(1, 3), st.integers(1, 3),
       st.sampled_from([0, 0, 1]), st.sampled_from([None, 1, 1.5, 2, 2.5, 3]),
       st.sampled_from([0.5, 0.25]))
def test_bounds_and_optimum_agree_with_exhaustive_enumeration(size, f, b, w_cost, comm, limit, w):
    # the lower bounds (arithmetic and the Z3 device relaxations, which run on the
    # difference-logic theory) never exceed the true optimum, and search proves exactly it
    D, M, split = size
    costs = Costs(F=f, B=b + w_cost, I=b, W=w_cost, comm=comm)
    truth = exhaustive(D, M, split=split, costs=costs, memory_limit=limit, w=w)
    # cold start: Z3 alone finds and proves the optimum
    r = search(D, M, split_backward=split, costs=costs, memory=MemoryModel(w=w),
               memory_limit=limit, time_limit=60, warm_start=False)
    if truth is None:
        assert r.status == "infeasible", r
        return
    assert r.optimal and r.makespan == truth[0], (r.status, r.makespan, truth)
    p = problem.make_problem(D, M, split_backward=split, costs=costs,
                                memory=MemoryModel(w=w), memory_limit=limit)
    s = smt_search._Search(p, fifo=True, time_limit=30, warm_start=False)
    opt = round(truth[0] * s.u.tscale)
    arithmetic = bounds.lower_bound(p, s.u)[0]
    assert arithmetic <= opt
    assert s.relaxation_bound(opt + 3 * s.u.tscale, arithmetic, {}, share=1.0) <= opt


def test_memory_tight_split_pipeline_is_proven_optimal():
    # 4 x 8, split backward, memory 2 (half of 1F1B's): a memory-bound pipeline whose
    # optimum lies above every arithmetic bound; the difference-logic encoding proves it
    # in a few seconds (the simplex one needed most of a minute at 4 x 16)
    r = search(4, 8, split_backward=True, costs=Costs(F=1, I=1, W=1), memory_limit=2,
               time_limit=60)
    assert r.optimal, (r.makespan, r.lower_bound, r.reason)
    rep = check(r.schedule)
    assert rep.is_valid and rep.metrics.makespan == r.makespan and rep.metrics.peak_memory <= 2
    assert r.makespan > bounds.lower_bound(problem.make_problem(
        4, 8, split_backward=True, costs=Costs(F=1, I=1, W=1), memory_limit=2))[0]


@pytest.mark.parametrize("placement", ["v", "loop"])
def test_greedy_keeps_room_for_an_in_flight_microbatch_later_stage(placement):
    # two stages per device and room for exactly one microbatch's activations: a greedy
    # that starts a new microbatch on a device before the in-flight one's later forward
    # locks itself out; the lookahead keeps it going, and the result is a valid schedule
    p = problem.make_problem(4, 8, chunks=2, placement=placement, split_backward=True,
                                costs=Costs(F=1, I=1, W=1), memory_limit=2)
    for prio in heuristics.GREEDY_POLICIES:
        s = heuristics.greedy(p, prio)
        assert s is not None, prio
        rep = heuristics.evaluate(p, s)
        assert rep.is_valid and rep.metrics.peak_memory <= 2
        assert rep.metrics.makespan <= heuristics.evaluate(p, heuristics.sequential(p)).metrics.makespan


def test_device_relaxation_counts_idle_time_under_a_memory_limit():
    # 4 x 16 split, F=1 I=2 W=1, 1F1B's memory (4): device 0 runs 4 forwards, then memory
    # blocks the 5th until microbatch 0's round trip (4 forwards, 4 input gradients = 12)
    # returns, and it has nothing else to do meanwhile: 6 idle units + 64 of work = 70, which
    # ZB-H1 reaches.  The arithmetic bound says 67; the one-device relaxation (energy cuts
    # on) must find the 70, which makes ZB-H1 provably optimal here.
    costs = Costs(F=1, I=2, W=1)
    p = problem.make_problem(4, 16, split_backward=True, costs=costs, memory_limit=4)
    s = smt_search._Search(p, fifo=True, time_limit=60, warm_start=False)
    arithmetic = bounds.lower_bound(p, s.u)[0]
    zb = check(heuristics._convert_split(FAMILIES["zb-h1"](4, 16), True), costs=costs,
               memory_limit=4)
    assert zb.is_valid and zb.metrics.makespan == 70 and arithmetic == 67
    assert s.relaxation_bound(70, arithmetic, {}, share=1.0) == 70


def fifo_device_orders(p):
    """Per device, every order of its actions with microbatches in order per (stage, kind)
    that keeps each same-device dependency (the others are for the graph checker to judge)."""
    from schedverify import deps

    place = p.placement_obj().routes[0]
    out = []
    for d in range(p.devices):
        chains = [(s, k) for s in range(p.stages) if place[s] == d for k in p.kinds]
        orders = []

        def extend(done, row):
            if len(row) == len(chains) * p.microbatches:
                orders.append(tuple(row))
                return
            for s, k in chains:
                i = done[(s, k)]
                if i == p.microbatches:
                    continue
                a = Action(s, k, i)
                ok = True
                for need, ps in deps.needs(a, p.stages):
                    pk = next(c for c in need.kinds if c in p.kinds)
                    if place[ps] == d and done[(ps, pk)] <= i:
                        ok = False
                if ok:
                    done[(s, k)] += 1
                    extend(done, row + [a])
                    done[(s, k)] -= 1

        extend({c: 0 for c in chains}, [])
        out.append(orders)
    return out


@pytest.mark.parametrize("D,M,V,placement,split,limit,w", [
    (2, 3, 1, "loop", True, 1.5, 0.5),
    (2, 3, 1, "loop", True, 2, 0.25),
    (2, 3, 1, "loop", False, 2, 0.5),
    (1, 3, 2, "loop", False, 2.5, 0.5),
    (1, 2, 2, "loop", True, 2.5, 0.25),
    (2, 2, 2, "v", False, 2, 0.5),
])
def test_memory_precedences_hold_in_every_valid_fifo_schedule(D, M, V, placement, split, limit, w):
    # the orders a memory limit forces (added to every memory-limited encoding, so also to
    # the device relaxations the bound property above exercises) are kept by every FIFO
    # schedule the graph checker accepts under the limit, and some pairs are forced at all
    p = problem.make_problem(D, M, chunks=V, placement=placement, split_backward=split,
                                costs=Costs(F=1, I=1, W=1), memory=MemoryModel(w=w),
                                memory_limit=limit)
    u = problem.Units(p)
    pairs = bounds.memory_precedences(p, u, u.limit)
    assert any(y is not None for y, _ in pairs)
    valid = 0
    for rows in itertools.product(*fifo_device_orders(p)):
        rep = heuristics.evaluate(p, Schedule(D, D * V, M, rows, p.placement_obj(), "x",
                                              costs=p.costs, memory=p.memory))
        if not rep.is_valid:
            continue
        valid += 1
        pos = {a[:3]: n for row in rows for n, a in enumerate(row)}
        for y, x in pairs:
            assert y is not None, (x, rows)
            assert pos[y[:3]] < pos[x[:3]], (y, x, rows)
    assert valid


@functools.lru_cache(maxsize=None)
def _fifo_orders(D, M, V, placement, split):
    p = problem.make_problem(D, M, chunks=V, placement=placement, split_backward=split)
    return list(itertools.product(*fifo_device_orders(p)))


#: (D, M, V, placement, split) whose FIFO device orders number a few hundred to a few thousand
WINDOW_SIZES = [(2, 3, 1, "loop", True), (3, 2, 1, "loop", True), (2, 4, 1, "loop", False),
                (3, 3, 1, "loop", False), (4, 2, 1, "loop", False), (2, 2, 2, "v", False),
                (1, 3, 2, "loop", False), (1, 2, 2, "loop", True)]


@settings(max_examples=30, deadline=None)
@given(st.sampled_from(WINDOW_SIZES), st.integers(1, 3), st.integers(1, 3), st.integers(0, 2),
       st.sampled_from([0, 0, 1]), st.sampled_from([None, 1, 1.5, 2, 2.5, 3, 4]),
       st.sampled_from([0.5, 0.25, 1.0]))
def test_time_windows_keep_every_valid_fifo_schedule(size, f, b, w_cost, comm, limit, w):
    # the propagation behind propagation_bound (precedences, edge finding per device, the
    # memory rule) must never cut a schedule away: every valid FIFO schedule with makespan T
    # starts each action inside the windows of T, so no makespan a schedule reaches is refuted
    D, M, V, placement, split = size
    costs = Costs(F=f, B=b + w_cost, I=b, W=w_cost, comm=comm)
    p = problem.make_problem(D, M, chunks=V, placement=placement, split_backward=split,
                                costs=costs, memory=MemoryModel(w=w), memory_limit=limit)
    u = problem.Units(p)
    tw = bounds.TimeWindows(p, u, u.limit)
    cache: dict = {}
    best = None
    valid = []
    for rows in _fifo_orders(D, M, V, placement, split):
        rep = heuristics.evaluate(p, Schedule(D, D * V, M, rows, p.placement_obj(), "x",
                                              costs=p.costs, memory=p.memory))
        if not rep.is_valid:
            continue
        T = round(rep.metrics.makespan * u.tscale)
        best = T if best is None else min(best, T)
        valid.append((T, rows))
        if T not in cache:
            cache[T] = tw.windows(T)
        assert cache[T] is not None, ("refuted a reached makespan", T, rows)
        est, lct = cache[T]
        for d in range(D):
            for a, start, _ in rep.timeline.entries(d):
                x = tw.index[a[:3]]
                t0 = round(start * u.tscale)
                assert est[x] <= t0 and t0 + tw.dur[x] <= lct[x], (a, t0, est[x], lct[x], rows)
    if best is not None:
        arithmetic = bounds.lower_bound(p, u)[0]
        assert bounds.propagation_bound(p, u, arithmetic, 10**6) <= best
    # the branching over one device's order never closes the path of a valid schedule:
    # replay the tightest schedules (and a few others) down the tree of every device
    valid.sort(key=lambda v: v[0])
    for T, rows in valid[:12] + valid[12::max(1, len(valid) // 6)]:
        for d in range(D):
            r = bounds.order_search(tw, p, u, T, d, deadline=float("inf"), follow=rows[d])
            assert r is False, ("closed the path of a valid schedule", d, T, rows)
