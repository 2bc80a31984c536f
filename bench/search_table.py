"""Benchmark: schedverify's Z3 search against OR-Tools CP-SAT on the same model, same run.

    python3 bench/search_table.py [--time-limit 60] [--long-time-limit 300] [--only NAME] [--no-cpsat]

For each instance of a fixed table it prints the Z3 search's makespan, proof status,
lower bound, wall-clock and process CPU seconds, then the same for CP-SAT (``pip install ortools``; optional, the
column says "not installed" without it).  CP-SAT gets the same model: one interval per
action, microbatches in order per (stage, kind) (the FIFO class, which loses no optimum:
see schedverify/smt/search.py), the dependencies of schedverify.deps, one no-overlap per
device and a reservoir per device for weighted activation memory (frees at an action's end
count before an allocation at the same moment, as docs/spec.md section 5's order-based memory).

Instances marked long (8 devices) get ``--long-time-limit`` (the target there is a
result within 5 minutes), the others ``--time-limit``.  The header prints the machine's load
(``os.getloadavg``): on a shared machine wall-clock seconds inflate, CPU seconds much less
(CP-SAT runs 2 workers, so its CPU seconds can be twice its wall-clock).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from schedverify import deps as rules  # noqa: E402
from schedverify.model import F, Action  # noqa: E402

#: name, devices, microbatches, options for search(); names starting "8x" are long
INSTANCES = [
    ("4x8 1f1b-costs", 4, 8, dict(costs=dict(F=1, B=2))),
    ("4x8 mem2", 4, 8, dict(costs=dict(F=1, B=2), memory_limit=2)),
    ("4x16 mem2", 4, 16, dict(costs=dict(F=1, B=2), memory_limit=2)),
    ("4x8 split", 4, 8, dict(split_backward=True, costs=dict(F=1, I=1, W=1))),
    ("4x16 split", 4, 16, dict(split_backward=True, costs=dict(F=1, I=1, W=1))),
    ("4x16 split mem2", 4, 16, dict(split_backward=True, costs=dict(F=1, I=1, W=1), memory_limit=2)),
    ("4x16 split 2-2-1 mem3", 4, 16, dict(split_backward=True, costs=dict(F=2, I=2, W=1), memory_limit=3)),
    ("4x16 split 2-2-1 mem4", 4, 16, dict(split_backward=True, costs=dict(F=2, I=2, W=1), memory_limit=4)),
    ("4x16 split 1-2-1 mem4", 4, 16, dict(split_backward=True, costs=dict(F=1, I=2, W=1), memory_limit=4)),
    ("4x16 split 1-1-2 mem3", 4, 16, dict(split_backward=True, costs=dict(F=1, I=1, W=2), memory_limit=3)),
    ("4x8 v2 split", 4, 8, dict(chunks=2, placement="v", split_backward=True, costs=dict(F=1, I=1, W=1))),
    ("4x8 v2 split mem2", 4, 8, dict(chunks=2, placement="v", split_backward=True,
                                     costs=dict(F=1, I=1, W=1), memory_limit=2)),
    ("4x8 v2 split mem4", 4, 8, dict(chunks=2, placement="v", split_backward=True,
                                     costs=dict(F=1, I=1, W=1), memory_limit=4)),
    ("4x16 v2 split mem4", 4, 16, dict(chunks=2, placement="v", split_backward=True,
                                       costs=dict(F=1, I=1, W=1), memory_limit=4)),
    ("8x16 split 2-2-1 mem8", 8, 16, dict(split_backward=True, costs=dict(F=2, I=2, W=1), memory_limit=8)),
]


def cpsat(p, time_limit: float):
    """Solve problem ``p`` (a schedverify.search.problem.Problem) with CP-SAT.
    Returns (makespan or None, status name, seconds, CPU seconds)."""
    try:
        from ortools.sat.python import cp_model
    except ImportError:
        return None, "not installed", 0.0, 0.0
    from schedverify.search.problem import Units

    t0, c0 = time.monotonic(), time.process_time()
    u = Units(p)
    place = p.placement_obj().routes[0]
    M = p.microbatches
    m = cp_model.CpModel()
    horizon = sum(u.idur.values()) * M + u.icomm * 2 * p.stages * M
    start, end, iv = {}, {}, {}
    by_dev: dict[int, list] = {}
    for s in range(p.stages):
        for k in p.kinds:
            for i in range(M):
                key = (s, k, i)
                st = m.NewIntVar(0, horizon, f"s{key}")
                en = m.NewIntVar(0, horizon, f"e{key}")
                iv[key] = m.NewIntervalVar(st, u.idur[(s, k)], en, f"i{key}")
                start[key], end[key] = st, en
                by_dev.setdefault(place[s], []).append(key)
                if i:
                    m.Add(st >= end[(s, k, i - 1)])  # FIFO per (stage, kind)
    for (s, k, i) in list(start):
        for need, ps in rules.needs(Action(s, k, i), p.stages):
            pk = next(x for x in need.kinds if x in p.kinds)
            lat = u.icomm if place[ps] != place[s] else 0
            m.Add(start[(s, k, i)] >= end[(ps, pk, i)] + lat)
    T = m.NewIntVar(0, horizon, "T")
    for d, keys in by_dev.items():
        m.AddNoOverlap([iv[k] for k in keys])
        if u.limit is not None:
            times, deltas = [], []
            for (s, k, i) in keys:
                if k == F:
                    times.append(start[(s, k, i)])
                    deltas.append(u.alloc[s])
                else:
                    times.append(end[(s, k, i)])
                    deltas.append(-u.free[(s, k)])
            m.AddReservoirConstraint(times, deltas, 0, u.limit - u.static[d])
    for key in end:
        m.Add(T >= end[key])
    m.Minimize(T)
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = time_limit
    solver.parameters.num_workers = 2
    solver.parameters.random_seed = 0
    status = solver.Solve(m)
    secs, cpu = time.monotonic() - t0, time.process_time() - c0
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        ms = u.time(int(solver.ObjectiveValue()))
        bound = u.time(int(solver.BestObjectiveBound()))
        return (ms, "optimal" if status == cp_model.OPTIMAL else f"feasible (bound {bound})",
                secs, cpu)
    return None, solver.StatusName(status).lower(), secs, cpu


def findings(time_limit: float) -> None:
    """The questions of docs/howto/search.md, answered by search (D=4, M=8 and 16, split backward).

    1. Under 1F1B's memory (its peak, D activations), how close is ZB-H1 to optimal?
    2. Under 2p-1 (2D-1 activations), ZB-H2?
    3. For which costs does the optimum beat every hand-designed family (best of FAMILIES
       that fits, under the same memory limit)?
    """
    from schedverify import check
    from schedverify.generators import FAMILIES
    from schedverify.search.problem import make_problem
    from schedverify.search.heuristics import best_generator
    from schedverify.smt.search import search

    def fam_makespan(name, D, M, costs, limit):
        if name not in FAMILIES:
            return None
        s = FAMILIES[name](D, M)
        rep = check(s, costs=costs, memory_limit=limit)
        return rep.metrics.makespan if rep.is_valid else f"invalid ({' '.join(rep.codes())})"

    cost_grid = [dict(F=1, I=1, W=1), dict(F=2, I=2, W=1), dict(F=1, I=2, W=1), dict(F=2, I=1, W=1),
                 dict(F=1, I=1, W=2), dict(F=1, I=1, W=1, comm=1), dict(F=1, I=1, W=1, comm=2),
                 dict(F=(1, 1, 1, 2), I=(1, 1, 1, 2), W=(1, 1, 1, 2))]

    def fmt(costs):
        return ",".join(f"{k}={':'.join(map(str, v)) if isinstance(v, tuple) else v}"
                        for k, v in costs.items())
    print("\n## ZB-H1 under 1F1B's memory (limit D), ZB-H2 under 2D-1, against the optimum")
    print(f"{'D x M':7} {'costs':22} {'limit':>5} {'family':6} {'family T':>9} {'optimum':>8} "
          f"{'status':>9} {'LB':>6} {'gap %':>6} {'s':>6}")
    for D, M in ((4, 8), (4, 16)):
        for costs in cost_grid:
            for fam, limit in (("zb-h1", D), ("zb-h2", 2 * D - 1)):
                fT = fam_makespan(fam, D, M, costs, limit)
                r = search(D, M, split_backward=True, costs=costs, memory_limit=limit,
                           time_limit=time_limit)
                gap = (100 * (fT - r.makespan) / r.makespan) if isinstance(fT, (int, float)) else None
                cs = fmt(costs)
                print(f"{D}x{M:<5} {cs:22} {limit:>5} {fam:6} {fT!s:>9} {r.makespan!s:>8} "
                      f"{r.status:>9} {r.lower_bound!s:>6} {'-' if gap is None else f'{gap:.1f}':>6} "
                      f"{r.seconds:6.1f}",
                      flush=True)
    print("\n## Optimum against the best hand-designed family (same memory limit)")
    print(f"{'D x M':7} {'costs':22} {'limit':>5} {'best family':>22} {'optimum':>8} {'status':>9} {'LB':>6}")
    for D, M in ((4, 8),):
        for costs in cost_grid:
            for limit in (None, D, 2 * D - 1):
                p = make_problem(D, M, split_backward=True, costs=costs, memory_limit=limit)
                # every family that fits (full-backward ones with B split into I then W)
                _, _, _, table = best_generator(p)
                best = None
                for n, row in table.items():
                    if n.startswith(("greedy", "sequential")) or not row["valid"]:
                        continue
                    if best is None or row["makespan"] < best[1]:
                        best = (n, row["makespan"])
                r = search(D, M, split_backward=True, costs=costs, memory_limit=limit,
                           time_limit=time_limit)
                cs = fmt(costs)
                bf = f"{best[0]}={best[1]}" if best else "none fits"
                print(f"{D}x{M:<5} {cs:22} {limit!s:>5} {bf:>22} {r.makespan!s:>8} {r.status:>9} "
                      f"{r.lower_bound!s:>6}",
                      flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--long-time-limit", type=float, default=300.0,
                    help="time limit of the 8-device instances (default 300)")
    ap.add_argument("--only", help="run only instances whose name contains this")
    ap.add_argument("--no-cpsat", action="store_true")
    ap.add_argument("--findings", action="store_true",
                    help="answer docs/howto/search.md's questions (ZB-H1/ZB-H2 against the optimum) instead")
    args = ap.parse_args(argv)
    if args.findings:
        findings(args.time_limit)
        return 0
    from schedverify.search.problem import make_problem
    from schedverify.smt.search import search

    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"load average at start: {load} ({os.cpu_count()} CPUs)")
    print(f"{'instance':24} {'limit':>5} {'warm':>15} {'z3 T':>6} {'z3 status':>10} {'LB':>6} "
          f"{'z3 s':>6} {'z3 cpu':>6} {'cpsat T':>8} {'cpsat status':>22} {'cpsat s':>7} "
          f"{'cp cpu':>6}")
    for name, D, M, opts in INSTANCES:
        if args.only and args.only not in name:
            continue
        limit = args.long_time_limit if name.startswith("8x") else args.time_limit
        c0 = time.process_time()
        r = search(D, M, time_limit=limit, **opts)
        cpu = time.process_time() - c0
        warm = f"{r.warm_start['name']}={r.warm_start['makespan']}" if r.warm_start else "-"
        if args.no_cpsat:
            cms, cst, csec, ccpu = None, "skipped", 0.0, 0.0
        else:
            cms, cst, csec, ccpu = cpsat(make_problem(D, M, **opts), limit)
        print(f"{name:24} {limit:5.0f} {warm:>15} {r.makespan!s:>6} {r.status:>10} "
              f"{r.lower_bound!s:>6} {r.seconds:6.1f} {cpu:6.1f} {cms!s:>8} {cst:>22} "
              f"{csec:7.1f} {ccpu:6.1f}", flush=True)
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"load average at end: {load}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
