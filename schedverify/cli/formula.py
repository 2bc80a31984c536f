"""``schedverify formula FAMILY --metric METRIC``: the closed form derived from the schedules.

    schedverify formula 1f1b --metric makespan --format latex
    schedverify formula 1f1b --metric peak_inflight --device d
    schedverify formula 1f1b --metric bubble_fraction --at p=4,m=8 --costs t_F=1,t_B=2
    schedverify formula 1f1b --smallest-m-below 0.05 --at p=8
    schedverify formula zb-v --slice "c == 0, t_I == t_F"
    schedverify formula --rebuild [-o PATH] [--jobs 2]   # re-derive the shipped forms
"""

from __future__ import annotations

import json

from . import EXIT_INVALID, EXIT_OK

METRIC_NAMES = ("makespan", "bubble_time", "bubble_fraction", "bubble_ratio", "peak_inflight",
                "peak_memory", "busy")


def register(sub) -> None:
    p = sub.add_parser(
        "formula", help="closed-form cost of a schedule family, derived from its schedules",
        description="Print the closed form of a metric for a family: derived from the generated "
                    "schedules with symbolic costs, generalised over sizes and confirmed exactly "
                    "over a range (stated in the domain). Symbols: p devices, m microbatches, "
                    "v chunks per device, d device, t_F t_B t_I t_W costs, c latency.",
    )
    p.add_argument("family", metavar="FAMILY", nargs="?",
                   help="the family (with --rebuild: only its forms, others kept)")
    p.add_argument("--metric", choices=METRIC_NAMES, default="makespan")
    p.add_argument("--device", metavar="d", help="per-device form: 'd' (general) or an index")
    p.add_argument("--format", choices=("text", "latex", "json"), default="text")
    p.add_argument("--at", metavar="p=4,m=8[,v=2,d=0]",
                   help="also evaluate the formula at these sizes, next to the schedule's own value")
    p.add_argument("--costs", metavar="t_F=1,t_B=2,...",
                   help="costs for --at (default t_F=1, t_B=2, t_I=1, t_W=1, c=0); a timing "
                        "metric is evaluated with the form whose cost slice holds them")
    p.add_argument("--slice", metavar="'c == 0, t_I == t_F'",
                   help="the timing form derived on this cost slice ('all' for all costs) "
                        "instead of the widest one found")
    p.add_argument("--smallest-m-below", type=float, metavar="X",
                   help="the smallest m whose --metric (default bubble_fraction) is below X at --at's p")
    p.add_argument("--rebuild", action="store_true",
                   help="derive every shipped form again (all families, or FAMILY) and write "
                        "them to the package's forms file, or to -o")
    p.add_argument("--prove-shipped", action="store_true",
                   help="judge every shipped form (all families, or FAMILY) with the all-sizes "
                        "prover and record those proved in the package's proofs file, or in -o")
    p.add_argument("-o", "--output", metavar="PATH",
                   help="with --rebuild or --prove-shipped: the file to write")
    p.add_argument("--jobs", type=int, default=1, metavar="N",
                   help="with --rebuild: derive families in N processes")
    p.set_defaults(handler=run)


def _assignments(text: str | None, where: str, allowed: tuple[str, ...]) -> dict:
    from fractions import Fraction

    from ..errors import UsageError

    out: dict = {}
    for item in filter(None, (t.strip() for t in (text or "").split(","))):
        k, eq, val = item.partition("=")
        k = k.strip()
        if not eq or k not in allowed:
            raise UsageError(f"{where}: expected NAME=VALUE with NAME one of {', '.join(allowed)}, "
                             f"got {item!r}")
        try:
            out[k] = Fraction(val.strip())
        except (ValueError, ZeroDivisionError):
            raise UsageError(f"{where}: {k}: expected a number, got {val.strip()!r}") from None
        if out[k] < 0:
            raise UsageError(f"{where}: {k} must be >= 0, got {val.strip()!r}")
    return out


def _slice(text: str) -> tuple[str, ...]:
    """``--slice`` text as derive.SLICES spells a slice: 'c==0,t_I == t_F' -> ('c == 0', ...)."""
    if text.strip() == "all":
        return ()
    out = []
    for cond in filter(None, (t.strip() for t in text.split(","))):
        lhs, eq, rhs = cond.partition("==")
        out.append(f"{lhs.strip()} == {rhs.strip()}" if eq else cond)
    return tuple(out)


def run(args, out, err) -> int:
    from ..errors import UsageError

    if args.rebuild:
        return _rebuild(args, out, err)
    if args.prove_shipped:
        return _prove_shipped(args, out, err)
    if args.family is None:
        raise UsageError("formula: give a FAMILY (or --rebuild)")
    if args.output is not None:
        raise UsageError("-o/--output applies to --rebuild and --prove-shipped only")
    sizes = _assignments(args.at, "--at", ("p", "m", "v", "d"))
    costs = {"t_F": 1, "t_B": 2, "t_I": 1, "t_W": 1, "c": 0}
    costs.update(_assignments(args.costs, "--costs", ("t_F", "t_B", "t_I", "t_W", "c")))
    at = "p" in sizes and "m" in sizes
    if args.slice is None and args.smallest_m_below is None and not at:
        # a shipped form is printed from the file as it is: no sympy, no derivation
        from ..formulas.shipped import json_doc

        doc = json_doc(args.family, args.metric, args.device)
        if doc is not None:
            return _print(doc, args, out)
    from ..formulas import formula, formula_at, smallest_m

    if args.smallest_m_below is not None:
        if "p" not in sizes:
            raise UsageError("--smallest-m-below needs the devices: --at p=N")
        metric = args.metric if args.metric != "makespan" else "bubble_fraction"
        mv = smallest_m(args.family, int(sizes["p"]), args.smallest_m_below, metric=metric,
                        costs=costs, v_value=int(sizes["v"]) if "v" in sizes else None)
        f = formula_at(args.family, metric, costs=costs)
        where = {"p": int(sizes["p"]), "m": mv if mv is not None else 4096}
        warning = f.extrapolated(where)
        if args.format == "json":
            print(json.dumps({"family": args.family, "metric": metric, "p": int(sizes["p"]),
                              "below": args.smallest_m_below, "smallest_m": mv,
                              "status": f.status, "extrapolated": warning is not None,
                              "warning": warning}), file=out)
        else:
            if warning:
                print(f"warning: {warning}", file=err)
            print(f"{args.family}: smallest m with {metric} < {args.smallest_m_below:g} at "
                  f"p={int(sizes['p'])}: {mv if mv is not None else 'none up to 4096'}", file=out)
        return EXIT_OK if mv is not None else EXIT_INVALID
    if args.slice is not None:
        f = formula(args.family, args.metric, args.device, _slice(args.slice))
    elif at:
        f = formula_at(args.family, args.metric, args.device, costs=costs)
    else:
        f = formula(args.family, args.metric, args.device)
    doc = f.to_json()
    if at:
        from ..formulas.values import evaluate_at

        doc["at"] = evaluate_at(f, args.family, args.metric, args.device, sizes, costs)
        warning = f.extrapolated(doc["at"]["sizes"])
        doc["at"]["status"] = f.status
        doc["at"]["extrapolated"] = warning is not None
        doc["at"]["warning"] = warning
        if warning and args.format != "json":
            print(f"warning: {warning}", file=err)
    return _print(doc, args, out)


def _print(doc: dict, args, out) -> int:
    """Print a form's JSON (``Formula.to_json()``, with ``at`` after --at) as --format asks."""
    if args.format == "json":
        print(json.dumps(doc, ensure_ascii=False), file=out)
        return EXIT_OK
    expr = doc["latex"] if args.format == "latex" else doc["expression"]
    who = f"{args.metric}" + (f"({args.device})" if args.device is not None else "")
    print(f"{args.family} {who} = {expr}", file=out)
    if args.format == "text":
        dom = doc["domain"]
        print("  domain: " + ", ".join(dom["conditions"]) + f"; {dom['status']}", file=out)
        rng = dom["confirmed"]
        print(f"  confirmed exactly against the schedules at {rng['sizes']} sizes: "
              f"p={rng['p'][0]}..{rng['p'][1]}, m={rng['m'][0]}..{rng['m'][1]}, v={rng['v']}",
              file=out)
        for note in doc["notes"]:
            print(f"  note: {note}", file=out)
        if "at" in doc:
            a = doc["at"]
            print(f"  at {a['sizes']} with {a['costs']}: formula {a['formula']}, "
                  f"schedule {a['schedule']}", file=out)
    return EXIT_OK


def _prove_shipped(args, out, err) -> int:
    import time

    from ..claims.forms import prove_forms, write_proofs
    from ..formulas import shipped
    from ..formulas.sizes import family

    names = None
    if args.family is not None:
        family(args.family)
        names = [args.family]
    t0 = time.time()
    records = prove_forms(names, log=lambda msg: print(f"formula --prove-shipped: {msg}", file=err))
    if names:  # the other families' records are kept
        records = {**{k: v for k, v in shipped.proof_records(args.output).items()
                      if k.split("/")[0] not in names}, **records}
    write_proofs(records, args.output)
    print(f"formula --prove-shipped: {len(records)} forms proved for all sizes, wrote "
          f"{args.output or shipped.PROOFS} in {time.time() - t0:.0f} s", file=err)
    return EXIT_OK


def _rebuild(args, out, err) -> int:
    import time

    from ..errors import UsageError
    from ..formulas import rebuild, shipped
    from ..formulas.sizes import family

    if args.jobs < 1:
        raise UsageError(f"--jobs must be >= 1, got {args.jobs}")
    names = None
    if args.family is not None:
        family(args.family)
        names = [args.family]
    t0 = time.time()
    rebuild.rebuild(names, args.output, jobs=args.jobs,
                    log=lambda msg: print(f"formula --rebuild: {msg}", file=err))
    print(f"formula --rebuild: wrote {args.output or shipped.FORMS} in {time.time() - t0:.0f} s",
          file=err)
    return EXIT_OK
