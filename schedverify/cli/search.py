"""``schedverify search``: the makespan-optimal (or memory-optimal) schedule, with a certificate.

Exit codes: 0 proven optimal, 1 no schedule exists under the limits, 2 usage error,
3 time limit (best found, lower bound and gap reported) or nothing decided.
"""

from __future__ import annotations

import argparse
import json

from ..errors import UsageError
from . import EXIT_INVALID, EXIT_OK, EXIT_UNKNOWN
from .common import non_negative_float, parse_costs, positive_int, write_output


def _costs(text: str) -> dict:
    try:
        return parse_costs(text)
    except UsageError as e:
        raise argparse.ArgumentTypeError(str(e).replace("--costs: ", "")) from None


def _share(text: str) -> float:
    v = non_negative_float(text)
    if v > 1:
        raise argparse.ArgumentTypeError(f"must be within 0..1, got {text!r}")
    return v


def _positive_float(text: str) -> float:
    v = non_negative_float(text)
    if v <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text!r}")
    return v


def register(sub) -> None:
    p = sub.add_parser(
        "search", help="find the makespan-optimal schedule (Z3), with a certificate",
        description="Search device orders for the least makespan under the given costs and memory "
                    "limit (or, with --minimize memory, the least peak memory under a makespan "
                    "bound), re-validate the result with the graph checker and write it as "
                    "schedverify/1 JSON. Exit code: 0 proven optimal, 1 no schedule exists under "
                    "these limits, 2 usage error, 3 time limit (best found, lower bound, gap).",
    )
    p.add_argument("--devices", type=positive_int, required=True, metavar="D")
    p.add_argument("--microbatches", type=positive_int, required=True, metavar="M")
    p.add_argument("--chunks", type=positive_int, default=1, metavar="V",
                   help="stages per device (S = D*V; default 1)")
    p.add_argument("--placement", choices=("loop", "v"), default="loop",
                   help="stage placement when V > 1 (default loop)")
    p.add_argument("--split-backward", action="store_true",
                   help="split each backward into I (input gradient) and W (weight gradient)")
    p.add_argument("--costs", type=_costs, metavar="F=1,B=2,I=1,W=1",
                   help="cost per action kind (a per-stage value is a:b:c); comm works too")
    p.add_argument("--memory-limit", type=non_negative_float, metavar="L",
                   help="peak weighted activation memory per device (docs/spec.md 5)")
    p.add_argument("--w-share", type=_share, default=0.5, metavar="W",
                   help="share of a stage's activation that W still holds after I (default 0.5)")
    p.add_argument("--comm-latency", type=non_negative_float, metavar="C",
                   help="latency of every cross-device dependency (default 0)")
    p.add_argument("--minimize", choices=("makespan", "memory"), default="makespan",
                   help="objective (memory needs --makespan-bound)")
    p.add_argument("--makespan-bound", type=non_negative_float, metavar="T",
                   help="with --minimize memory: the makespan the schedule must not exceed")
    p.add_argument("--class", dest="search_class", choices=("fifo", "unrestricted"), default="fifo",
                   help="fifo: microbatches in order per stage and kind (loses no optimum, see "
                        "the docs; default); unrestricted: every order (slow, for cross-checks)")
    p.add_argument("--time-limit", type=_positive_float, default=60.0, metavar="S",
                   help="seconds for the whole search, warm start included (default 60); it "
                        "answers within S + 1 s; when hit: best found, lower bound, gap, exit 3")
    p.add_argument("--no-warm-start", action="store_true",
                   help="do not start from the generators (FAMILIES) and the greedy heuristic")
    p.add_argument("-o", "--output", metavar="FILE", help="write the schedule here (schedverify/1 JSON)")
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.set_defaults(handler=run)


def run(args, out, err) -> int:
    from ..smt.search import search

    if args.minimize == "memory" and args.makespan_bound is None:
        raise UsageError("--minimize memory needs --makespan-bound T")
    costs = dict(args.costs or {})
    comm = costs.pop("comm", None)
    if args.comm_latency is not None:
        comm = args.comm_latency
    result = search(
        args.devices, args.microbatches, chunks=args.chunks, placement=args.placement,
        split_backward=args.split_backward, costs=costs, memory={"w": args.w_share},
        memory_limit=args.memory_limit, comm_latency=comm, time_limit=args.time_limit,
        minimize=args.minimize, makespan_bound=args.makespan_bound,
        fifo=args.search_class == "fifo", warm_start=not args.no_warm_start,
    )
    written = None
    if result.schedule is not None and args.output:
        from ..io import dumps_for

        text = dumps_for(result.schedule, args.output)
        write_output(args.output, text)
        written = args.output
    code = {"optimal": EXIT_OK, "infeasible": EXIT_INVALID}.get(result.status, EXIT_UNKNOWN)
    if args.format == "json":
        doc = {"makespan": result.makespan, "optimal": result.optimal, "lower_bound": result.lower_bound,
               **result.to_json(), "schedule": written,
               "order": ([[str(a) for a in row] for row in result.schedule.order]
                         if result.schedule is not None else None)}
        doc["warm_start"] = ({k: v for k, v in result.warm_start.items() if k != "candidates"}
                             if result.warm_start else None)
        print(json.dumps(doc), file=out)
    else:
        print(_text(args, result, written), file=out)
    if result.status == "infeasible":
        print(f"schedverify search: {result.reason}", file=err)
    return code


def _text(args, r, written) -> str:
    what = f"{args.devices} devices x {args.microbatches} microbatches"
    if args.chunks > 1:
        what += f", {args.chunks} chunks ({args.placement})"
    if args.split_backward:
        what += ", split backward"
    if args.memory_limit is not None:
        what += f", memory limit {args.memory_limit:g}"
    lines = [f"search ({r.objective}, class {r.search_class}): {what}"]
    if r.status == "infeasible":
        lines.append(f"  {r.reason}")
        return "\n".join(lines)
    if r.schedule is None:
        lines.append(f"  nothing found: {r.reason}")
        return "\n".join(lines)
    value = r.makespan if r.objective == "makespan" else r.peak_memory
    if r.optimal:
        lines.append(f"  {r.objective} {value:g}: optimal (proven) in {r.seconds:.1f} s")
    else:
        lines.append(f"  {r.objective} {value:g}: best found, not proven ({r.reason}); lower bound "
                     f"{r.lower_bound:g}, gap {r.gap:g}; {r.seconds:.1f} s")
    lines.append(f"  makespan {r.makespan:g}, peak memory {r.peak_memory:g}")
    if r.certificate.get("proof"):
        lines.append(f"  proof: {r.certificate['proof']}")
    if r.warm_start and r.warm_start.get("name"):
        ws = r.warm_start
        val = ws.get("makespan", ws.get("peak_memory"))
        lines.append(f"  warm start: {ws['name']} ({val:g})")
    lines.append(f"  wrote {written}" if written else "  (give -o FILE to write the schedule)")
    return "\n".join(lines)
