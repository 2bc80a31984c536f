"""``schedverify lower FILE -o comms.csv``: our compute-to-comms lowering, proven to run.

The output is a compute+comms CSV that the chosen release's runtime loads as it is
(``_PipelineScheduleRuntime._load_csv(path, format="compute_comms")``), re-checked under the
chosen semantics before it is written (docs/spec.md 8.6, 9.5), and never slower there than
PyTorch's own lowering.  What PyTorch's own lowerings would do is printed beside it.  A
compute+comms FILE is rewritten in the chosen release's dialect instead (its waits added or
removed, :func:`schedverify.lowering.retarget`).
"""

from __future__ import annotations

from ..errors import SchedverifyError, UsageError
from ..io.files import source_name
from . import EXIT_OK
from .common import add_cost_options, add_input_options, in_schedule_units, load_input, runtime_args, write_output


def register(sub) -> None:
    p = sub.add_parser(
        "lower", help="add SEND/RECV to a compute-only schedule so that PyTorch runs it without a hang",
        description="Lower a compute-only schedule (schedverify/1 .json or PyTorch .csv) to one with "
                    "SEND/RECV that the --torch release's runtime runs without a hang or a crossed "
                    "message under --comm-semantics (docs/spec.md 8.6, 9.5), at the compute-only makespan "
                    "where that can be had and never slower than PyTorch's own lowering; a compute+comms "
                    "schedule written for another release is rewritten in the --torch release's dialect. "
                    "Exit code: 0 written, 2 usage or input error, or no lowering runs.",
    )
    p.add_argument("file", metavar="FILE", help="compute-only schedule, or a compute+comms one to rewrite "
                                                "for --torch ('-' reads standard input)")
    p.add_argument("-o", "--output", metavar="OUT",
                   help="write the lowered schedule here (.csv: PyTorch's compute_comms CSV; .json: "
                        "schedverify/1), whole or not at all, replacing OUT; default: the CSV on "
                        "standard output and the summary on standard error")
    add_cost_options(p, runtime_only=True)
    add_input_options(p)
    p.set_defaults(handler=run)


def run(args, out, err) -> int:
    from ..check import check
    from ..io import dumps_csv, dumps_for
    from ..lowering import deferred_lowering, lower_checked

    from ..releases import PYTORCH, frameworks, resolve

    source = source_name(args.file)
    schedule = load_input(args.file, args)
    costs, memory_limit = in_schedule_units(args, schedule, source)
    sem, rt_args = args.comm_semantics, runtime_args(args)
    named = schedule.metadata.get("framework")
    framework = rt_args.get("framework") or (named if isinstance(named, str) and named in frameworks() else None)
    if framework is not None and framework != PYTORCH:
        said = "--framework" if "framework" in rt_args else "its metadata"
        raise UsageError(f"{source}: cannot lower for {framework} ({said}): lower writes what PyTorch's "
                         "_PipelineScheduleRuntime runs, and a framework's loop posts its own communication; "
                         "schedverify import reads the schedule it runs, and schedverify check checks it")
    rt = resolve(sem, torch=rt_args.get("torch"), p2p=rt_args.get("p2p"), nccl=rt_args["nccl"],
                 options=rt_args.get("runtime_options"))
    options = dict(costs=costs, memory_limit=memory_limit, comm_semantics=sem, nccl=rt.nccl,
                   torch=rt.release.version, p2p=rt.layout.name, runtime_options=rt.options)
    if schedule.has_explicit_comm:
        return _retarget(schedule, source, args, options, out, err)
    try:
        found = lower_checked(schedule, costs=costs, comm_semantics=sem, nccl=rt.nccl, torch=rt.release.version,
                              p2p=rt.layout.name, runtime_options=rt.options)
    except SchedverifyError as e:
        raise UsageError(f"{source}: cannot lower: {e}") from None
    lowered, plain = found.schedule, found.plain
    # lower_checked's reports hold unless a memory limit adds a rule: then check again with it
    again = memory_limit is not None
    report = check(lowered, **options) if again else found.report
    if not report.is_valid:  # lower() re-checks: this cannot happen, but never write a bad one
        raise UsageError(f"{source}: the lowering does not check: {report.violations[0]}")
    pytorch = check(plain, **options) if again else found.pytorch
    base = (check(schedule, **options) if again else found.compute_only).metrics.makespan
    lines = [f"{source}: lowered for {sem} on {rt.release.name} ({rt.layout.name} layout): "
             f"{lowered.num_actions} actions, re-checked: {report.verdict.value.upper()}"]
    rows = [("compute-only", f"makespan {base:g}"), ("ours", _cell(report)), ("PyTorch's lowering", _cell(pytorch))]
    del found, report, pytorch  # their runs, as large as the schedule, before the next one
    to_stdout = args.output is None or args.output == "-"
    if to_stdout:
        print(dumps_csv(lowered).rstrip("\n"), file=out)
    else:
        write_output(args.output, dumps_for(lowered, args.output, default="csv"), inputs=(args.file,))
    # the written schedule and PyTorch's plain lowering go before the last run: the row of
    # PyTorch's defer_pp_recv lowering is for comparison only
    deferred = deferred_lowering(schedule, plain, torch=rt)
    del lowered, plain
    rows.append(("PyTorch, defer_pp_recv", _cell(check(deferred, **options))))
    lines += [f"  {label:<24} {what}" for label, what in rows]
    print("\n".join(lines), file=err if to_stdout else out)
    if not to_stdout:
        print(f"wrote {args.output}", file=out)
    return EXIT_OK


def _retarget(schedule, source: str, args, options: dict, out, err) -> int:
    """A compute+comms schedule, rewritten in the chosen release's dialect and re-checked."""
    from ..check import check
    from ..io import dumps_csv, dumps_for
    from ..lowering import retarget

    try:
        again = retarget(schedule, torch=options["torch"])
    except SchedverifyError as e:
        raise UsageError(f"{source}: cannot rewrite: {e}") from None
    report = check(again, **options)
    if not report.is_valid:
        raise UsageError(f"{source}: rewritten for PyTorch {options['torch']}, it does not check: "
                         f"{report.violations[0]}")
    summary = (f"{source}: rewritten for {args.comm_semantics} on PyTorch {options['torch']}: "
               f"{again.num_actions} actions, re-checked: VALID, makespan {report.metrics.makespan:g}")
    if args.output is None or args.output == "-":
        print(dumps_csv(again).rstrip("\n"), file=out)
        print(summary, file=err)
        return EXIT_OK
    write_output(args.output, dumps_for(again, args.output, default="csv"), inputs=(args.file,))
    print(summary, file=out)
    print(f"wrote {args.output}", file=out)
    return EXIT_OK


def _cell(report) -> str:
    if report.is_valid:
        return f"makespan {report.metrics.makespan:g}"
    codes = set(report.codes())
    what = [w for c, w in (("SV402", "hangs"), ("SV405", "hangs on NCCL"), ("SV504", "crosses messages"))
            if c in codes]
    return ", ".join(what or ["invalid: " + " ".join(sorted(codes))])
