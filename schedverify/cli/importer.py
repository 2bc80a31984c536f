"""``schedverify import megatron|deepspeed ...``: write the schedule a framework's own
pipeline loop runs for a configuration, every rank's order with its communication
(:mod:`schedverify.frameworks`), and optionally check it at once on that framework's loop.
"""

from __future__ import annotations

from . import EXIT_INVALID, EXIT_OK, EXIT_UNKNOWN
from .common import positive_int, write_output

_BACKENDS = {"nccl": "torch-nccl", "gloo": "torch"}


def register(sub) -> None:
    p = sub.add_parser(
        "import", help="write the schedule Megatron-LM's or DeepSpeed's own loop runs for a configuration",
        description="Write the schedule a framework's own pipeline loop runs (every rank's order, with the "
                    "point-to-point operations it posts, its framework and release in the metadata) as "
                    "schedverify/1 JSON (PyTorch CSV when FILE ends in .csv), to standard output unless -o "
                    "or --check is given. --check checks it on that framework's loop (docs/spec.md "
                    "section 10) and exits as 'check' does. A configuration the framework refuses is "
                    "refused with exit code 2 and the framework's rule.")
    fw = p.add_subparsers(dest="framework", metavar="FRAMEWORK")
    m = fw.add_parser("megatron", help="megatron-core's forward_backward_pipelining_with(out)_interleaving",
                      description="megatron-core's pipeline loop (pipeline_parallel/schedules.py).")
    m.add_argument("--pp", type=positive_int, required=True, metavar="P", help="pipeline_model_parallel_size")
    m.add_argument("--vpp", type=positive_int, default=1, metavar="V",
                   help="virtual_pipeline_model_parallel_size: model chunks per rank (default 1: no interleaving)")
    m.add_argument("-M", "--microbatches", type=positive_int, required=True, metavar="M", help="num_microbatches")
    m.add_argument("--microbatch-group-size", type=positive_int, metavar="G",
                   help="microbatch_group_size_per_vp_stage (default: P)")
    m.add_argument("--num-layers", type=positive_int, metavar="L",
                   help="num_layers, to check that P and V divide them as megatron-core requires")
    m.add_argument("--overlap-p2p-comm", action="store_true",
                   help="overlap_p2p_comm (and batch_p2p_comm off): single isend/irecv, waited later")
    m.add_argument("--no-batch-p2p-comm", action="store_true",
                   help="batch_p2p_comm off without overlap: single isend/irecv, each call waited")
    m.add_argument("--combined-1f1b", action="store_true",
                   help="overlap_moe_expert_parallel_comm: each steady forward and backward as one OVERLAP_F_B")
    m.add_argument("--version", default="0.19.2", help="the megatron-core release (default 0.19.2)")
    d = fw.add_parser("deepspeed", help="DeepSpeed's PipelineEngine running TrainSchedule (or DualPipeVSchedule)",
                      description="DeepSpeed's pipeline engine (runtime/pipe/schedule.py: TrainSchedule), or with "
                                  "--dualpipev its DualPipeVEngine (runtime/pipe/dualpipev.py) running "
                                  "DualPipeVSchedule.")
    d.add_argument("--stages", type=positive_int, required=True, metavar="S", help="num_stages (one per rank)")
    d.add_argument("-M", "--microbatches", type=positive_int, required=True, metavar="M",
                   help="micro_batches (gradient_accumulation_steps)")
    d.add_argument("--dualpipev", action="store_true",
                   help="DualPipeVEngine running DualPipeVSchedule: two stages per rank (placement v), each "
                        "CommitP2P one BATCH; needs M >= 2 * S")
    d.add_argument("--version", default="0.19.8", help="the DeepSpeed release (default 0.19.8)")
    for q in (m, d):
        q.add_argument("-o", "--output", metavar="FILE", help="write here (overwrites FILE; '-' is standard output)")
        q.add_argument("--check", action="store_true", help="check it on the framework's loop and print the report")
        q.add_argument("--backend", choices=tuple(_BACKENDS), default="nccl",
                       help="the process group's backend the check assumes (default nccl)")
        q.set_defaults(handler=run)
    p.set_defaults(handler=_no_framework)


def _no_framework(args, out, err) -> int:
    from ..errors import UsageError

    raise UsageError("import: name a framework: 'schedverify import megatron ...' or "
                     "'schedverify import deepspeed ...'")


def build(args):
    """The schedule the arguments name."""
    if args.framework == "megatron":
        from ..frameworks import megatron

        s = megatron.schedule(args.pp, args.vpp, args.microbatches, args.microbatch_group_size,
                              overlap_p2p_comm=args.overlap_p2p_comm, combined_1f1b=args.combined_1f1b,
                              batch_p2p_comm=not (args.no_batch_p2p_comm or args.overlap_p2p_comm),
                              version=args.version, num_layers=args.num_layers)
    else:
        from ..frameworks import deepspeed

        s = deepspeed.schedule(args.stages, args.microbatches, version=args.version, dualpipev=args.dualpipev)
    return s.with_(comm_semantics=_BACKENDS[args.backend])


def run(args, out, err) -> int:
    from ..diagnostics import Verdict

    schedule = build(args)
    if args.output is not None and args.output != "-":
        from ..io import dumps_for

        write_output(args.output, dumps_for(schedule, args.output))
    elif not args.check or args.output == "-":
        from ..io import dumps

        out.write(dumps(schedule))
    if not args.check:
        return EXIT_OK
    from .. import check
    from ..render.text import report_text

    report = check(schedule)
    print(report_text(args.output or f"{args.framework} import", schedule, report), file=out)
    return {Verdict.VALID: EXIT_OK, Verdict.INVALID: EXIT_INVALID}.get(report.verdict, EXIT_UNKNOWN)
