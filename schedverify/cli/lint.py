"""``schedverify lint FILE``: what torchtitan, Megatron-LM or PyTorch will refuse or mishandle.

Exit code: 0 nothing found, 1 findings, 2 usage or input error.
"""

from __future__ import annotations

import json

from ..io.files import source_name
from . import EXIT_INVALID, EXIT_OK, EXIT_USAGE
from .common import add_input_options, input_options, positive_int


def register(sub) -> None:
    from ..lint import TARGETS, TORCH_SCHEDULES, TORCHTITAN_RELEASES

    p = sub.add_parser(
        "lint", help="say what torchtitan, Megatron-LM or PyTorch will refuse or mishandle",
        description="Lint a schedule (schedverify/1 .json or PyTorch .csv) for the framework that "
                    "will run it: sizes it refuses, placements it builds differently, a CSV in "
                    "PyTorch's grammar before 2.6. Each finding names its rule and the fix. Exit "
                    "code: 0 nothing found, 1 findings, 2 usage or input error.",
    )
    p.add_argument("file", nargs="?", metavar="FILE", help="schedule file ('-' reads standard input)")
    p.add_argument("--target", choices=TARGETS, default="torchtitan",
                   help="the framework that will run it (default torchtitan)")
    p.add_argument("--pipeline-schedule", metavar="NAME", choices=TORCH_SCHEDULES, type=_schedule_name,
                   help="the schedule class (torchtitan's --parallelism.pipeline_parallel_schedule, "
                        "default 1F1B, decides where torchtitan builds the stages; for pytorch, the "
                        "class that runs it): " + ", ".join(TORCH_SCHEDULES))
    p.add_argument("--group-size", type=positive_int, metavar="N",
                   help="megatron: microbatch_group_size_per_vp_stage (default: the schedule's, else PP)")
    p.add_argument("--num-layers", type=positive_int, metavar="L",
                   help="megatron: the model's layers, to check their split over PP x VP")
    p.add_argument("--torch", metavar="RELEASE",
                   help="pytorch, torchtitan: the PyTorch release that will run it (2.13, 2.14 or 2.15; "
                        "default: the installed torch's, else the newest modelled)")
    p.add_argument("--torchtitan", metavar="VERSION",
                   help="torchtitan: the release that will run it (" + ", ".join(TORCHTITAN_RELEASES)
                        + "; default: the installed torchtitan's, else none, and SV720/SV721 are not checked)")
    p.add_argument("--disable-cuda-graphs", action="store_true",
                   help="torchtitan: training.disable_cuda_graphs is set (torchtitan's "
                        "--training.disable_cuda_graphs), which torchtitan 0.3.0 needs for pipeline parallelism")
    add_input_options(p)
    p.add_argument("--format", choices=("text", "json"), default="text",
                   help="text for people; json prints one object")
    p.add_argument("--list-codes", action="store_true", help="list every lint code and exit")
    p.set_defaults(handler=run)


def _schedule_name(text: str) -> str:
    from ..lint import TORCH_SCHEDULES

    return {k.lower(): k for k in TORCH_SCHEDULES}.get(text.lower(), text)  # any case, as PyTorch


def _count(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "es" if word.endswith("h") else "s")


def run(args, out, err) -> int:
    from ..lint import LINT_CODES, lint_file

    if args.list_codes:
        for c in LINT_CODES.values():
            print(f"{c.code} {c.slug} [{c.rule}]: {c.description}", file=out)
        return EXIT_OK
    if args.file is None:
        print("schedverify lint: error: give a schedule file (or --list-codes)", file=err)
        return EXIT_USAGE
    source = source_name(args.file)
    options = input_options(args)
    schedule, findings = lint_file(args.file, args.target, pipeline_schedule=args.pipeline_schedule,
                                   group_size=args.group_size, num_layers=args.num_layers, torch=args.torch,
                                   torchtitan=args.torchtitan, disable_cuda_graphs=args.disable_cuda_graphs,
                                   **options)
    if args.format == "json":
        print(json.dumps({"file": source, "target": args.target,
                          "schedule": {"devices": schedule.devices, "stages": schedule.stages,
                                       "microbatches": schedule.microbatches},
                          "findings": [f.to_json() for f in findings]}), file=out)
    else:
        sizes = ", ".join(_count(n, w) for n, w in ((schedule.devices, "rank"), (schedule.stages, "stage"),
                                                     (schedule.microbatches, "microbatch")))
        if not findings:
            print(f"{source}: {args.target}: nothing found ({sizes})", file=out)
        else:
            print(f"{source}: {args.target}: {_count(len(findings), 'finding')} ({sizes})", file=out)
            for f in findings:
                print(str(f), file=out)
    return EXIT_INVALID if findings else EXIT_OK
