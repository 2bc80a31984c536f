"""``schedverify check FILE [FILE ...]``: is each schedule valid, and what does it cost."""

from __future__ import annotations

import json

from ..diagnostics import CODES, Verdict
from ..errors import SchedverifyError, UsageError
from ..engines import ENGINES, run_engine
from ..io.files import source_name
from . import EXIT_INVALID, EXIT_OK, EXIT_UNKNOWN, EXIT_USAGE
from .common import (add_cost_options, add_input_options, in_schedule_units, load_input, non_negative_float,
                     positive_int, runtime_args)

#: Worst first: what a run over several files exits with.
_SEVERITY = (EXIT_USAGE, EXIT_INVALID, EXIT_UNKNOWN, EXIT_OK)
_EXIT = {Verdict.VALID: EXIT_OK, Verdict.INVALID: EXIT_INVALID, Verdict.UNKNOWN: EXIT_UNKNOWN}


def register(sub) -> None:
    p = sub.add_parser(
        "check", help="check schedules and compute their cost",
        description="Check each schedule (schedverify/1 .json or PyTorch .csv) against every rule "
                    "of docs/spec.md sections 3 and 8 and compute its makespan, bubbles and memory. Exit code: "
                    "0 all valid, 1 some invalid, 2 usage or input error, 3 unknown.",
    )
    p.add_argument("files", nargs="*", metavar="FILE", help="schedule files ('-' reads standard input)")
    add_cost_options(p)
    add_input_options(p)
    p.add_argument("--lowering", choices=("auto", "none", "torch", "torch-defer"), default="auto",
                   help="check a compute-only schedule as PyTorch runs it: lowered to SEND/RECV by "
                        "the --torch release's _prepare_schedule_with_comms (torch), with "
                        "defer_pp_recv=True (torch-defer), or as it is (none); positions then "
                        "refer to the lowered schedule, which --format json includes. Default "
                        "auto: torch for a compute-only PyTorch CSV under torch or torch-nccl "
                        "(checked as it is, with a warning, when PyTorch's lowering refuses it), "
                        "else none")
    p.add_argument("--format", choices=("text", "json"), default="text",
                   help="text for people; json prints one object per file, one per line")
    p.add_argument("--grid", action="store_true", help="also print the device x step grid, "
                   "marking the actions involved in violations")
    p.add_argument("--max-violations", type=positive_int, default=1000, metavar="N",
                   help="report at most N violations per file (default 1000)")
    p.add_argument("--model", metavar="FILE.toml",
                   help="for a schedule imported from Megatron-LM or DeepSpeed: also each device's activation "
                        "peak in bytes, from this transformer model (plan's model file, docs/memory.md), in the "
                        "framework's memory lines (docs/frameworks.md)")
    p.add_argument("--list-codes", action="store_true", help="list every violation code and exit")
    p.add_argument("--engine", choices=tuple(ENGINES), default="graph",
                   help="graph (fast, default); z3 (an independent SMT encoding); both (run both, "
                        "exit 2 if they disagree)")
    p.add_argument("--timeout", type=non_negative_float, default=60.0, metavar="S",
                   help="time limit of the z3 engine in seconds (default 60; verdict unknown when hit)")
    p.set_defaults(handler=run)


def run(args, out, err) -> int:
    if args.list_codes:
        for c in CODES.values():
            print(f"{c.code} {c.slug} [{c.rule}]: {c.description}", file=out)
        return EXIT_OK
    if not args.files:
        print("schedverify check: error: give at least one schedule file (or --list-codes)", file=err)
        return EXIT_USAGE
    if args.files.count("-") > 1:
        print("schedverify check: error: '-' (standard input) is given more than once; it can be "
              "read only once", file=err)
        return EXIT_USAGE
    codes = [check_one(path, args, out, err) for path in args.files]
    return next(c for c in _SEVERITY if c in codes)


def _lowered(schedule, args, source: str):
    """(the schedule to check, whether it was lowered, a warning or None) for --lowering."""
    from ..errors import LoweringError
    from ..lowering import torch_lowering
    from ..releases import runtime_of

    how = args.lowering
    if how == "none":
        return schedule, False, None
    rt_args = runtime_args(args)
    sem, rt = runtime_of(schedule, args.comm_semantics, rt_args.get("nccl"), rt_args.get("torch"),
                         rt_args.get("p2p"), rt_args.get("runtime_options"), rt_args.get("framework"))
    if how == "auto":
        pytorch_csv = schedule.metadata.get("source_format") == "pytorch-csv"
        if rt is None or not pytorch_csv or schedule.has_explicit_comm:
            return schedule, False, None
        try:
            return torch_lowering(schedule, torch=rt), True, None
        except LoweringError as e:
            return schedule, False, (f"PyTorch {rt.release.version}'s lowering refuses this schedule ({e}): "
                                     "it is checked as it is, compute-only")
    try:
        return torch_lowering(schedule, defer_recv=how == "torch-defer", torch=rt if rt is not None else
                              rt_args.get("torch")), True, None
    except LoweringError as e:
        raise UsageError(f"{source}: --lowering {how}: {e}") from None


def check_one(path: str, args, out, err) -> int:
    source = source_name(path)
    try:
        schedule = load_input(path, args)
        costs, memory_limit = in_schedule_units(args, schedule, source)
        schedule, lowered, note = _lowered(schedule, args, source)
        opts = dict(costs=costs, memory_limit=memory_limit, comm_semantics=args.comm_semantics,
                    max_violations=args.max_violations, **runtime_args(args))
        report = run_engine(args.engine, schedule, timeout_s=args.timeout, **opts)  # z3 loads when used
        if note:
            report.warnings.append(note)
        memory = _framework_memory(schedule, args, report)
    except SchedverifyError as e:
        if args.format == "json":
            print(json.dumps({"file": source, "verdict": "error", "error": str(e),
                              "violations": [], "metrics": None}), file=out)
        print(f"schedverify check: error: {e}", file=err)
        return EXIT_USAGE
    if args.format == "json":
        doc = {"file": source, **report.to_json(),
               "schedule": {"name": schedule.name, "devices": schedule.devices, "stages": schedule.stages,
                            "microbatches": schedule.microbatches, "actions": schedule.num_actions,
                            "units": schedule.units.to_json() if schedule.units is not None else None}}
        _add_framework_terms(doc, schedule)
        if memory is not None:
            doc["framework_memory"] = memory.to_json()
        if lowered:  # what the positions refer to
            doc["schedule"]["order"] = [[str(x) if x is not None else None for x in row] for row in schedule.order]
        print(json.dumps(doc), file=out)
    else:
        from ..render.text import report_text

        print(report_text(source, schedule, report, show_grid=args.grid, framework_memory=memory), file=out)
    return _EXIT[report.verdict]


def _add_framework_terms(doc: dict, schedule) -> None:
    """Each offending action's name in the terms of the framework the schedule's metadata
    names (``framework_term``; :func:`schedverify.frameworks.terms`), where it has one."""
    from ..frameworks import terms

    term = terms(schedule)
    if term is None:
        return
    for v in doc["violations"]:
        for loc in v["actions"]:
            t = term(loc["action"])
            if t is not None:
                loc["framework_term"] = t


def _framework_memory(schedule, args, report):
    """The schedule's memory in the terms of the framework its metadata names
    (:func:`schedverify.frameworks.memory.memory`), in bytes with ``--model``; None (and, with
    ``--model``, a warning) when it names none."""
    from ..frameworks.memory import memory

    model = None
    if getattr(args, "model", None):
        from ..plan.transformer import load_model

        model = load_model(args.model)[0]
    found = memory(schedule, model)
    if found is None and model is not None:
        report.warnings.append("--model: the schedule's metadata names no framework whose memory is modelled "
                               "(megatron-core, deepspeed); the device table's peak memory follows --costs")
    return found
