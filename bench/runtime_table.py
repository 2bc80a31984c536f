"""What PyTorch's own lowerings and ours do on gloo and on NCCL: the findings table of docs/howto/lower.md.

For each schedule, its compute-only makespan, then PyTorch 2.13's lowering (plain, and with
``defer_pp_recv=True``), re-implemented in ``schedverify.lowering`` and held equal to
PyTorch's output by the torch test tier, and ours (``schedverify.lowering.lower`` for each
semantics, docs/spec.md 8.6), checked under ``torch`` (gloo) and ``torch-nccl``
(one communication stream per rank, or one per peer as with lazily created 2-rank
communicators; rendezvous sends, and sends small enough for NCCL's buffers).  Each cell
is ``ok T`` (runs, makespan T), ``hang`` (a cycle: SV402/SV405), ``corrupt`` (crossed
messages, SV504: wrong numbers) or both.  Costs F=1, B=2, I=W=1, no latency.

With PyTorch installed (``pip install torch==2.13.0``) the rows are PyTorch's own schedule
classes, built on mock stages as its ``_schedule_visualizer`` does; without it, schedverify's
generators of the same families.

    python bench/runtime_table.py
    python bench/runtime_table.py --sizes 4x8 8x16
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import schedverify as sv  # noqa: E402
from schedverify.lowering import LoweringError, lower, torch_lowering  # noqa: E402
from schedverify.runtime import NcclOptions  # noqa: E402

#: PyTorch's multi-stage classes (the single-stage ones cannot be lowered by PyTorch 2.13),
#: with their placement and stages per rank
TORCH_CLASSES = [("Interleaved1F1B", "loop", 2), ("LoopedBFS", "loop", 2),
                 ("InterleavedZeroBubble", "loop", 2), ("ZBVZeroBubble", "v", 2), ("DualPipeV", "v", 2)]
OUR_FAMILIES = ["1f1b", "interleaved-1f1b", "zb-h1", "zb-v", "dualpipe-v"]

COLUMNS = [("torch", None), ("torch-nccl", NcclOptions()), ("torch-nccl", NcclOptions(streams="pair")),
           ("torch-nccl", NcclOptions(buffered_sends=True))]


def torch_schedules(pp: int, m: int):
    from unittest import mock

    from torch.distributed.pipelining import schedules as ts
    from torch.distributed.pipelining.stage import PipelineStage

    for name, placement, per_rank in TORCH_CLASSES:
        if name == "DualPipeV" and m < pp * per_rank:
            continue
        stage = mock.create_autospec(PipelineStage, instance=True)
        stage.group_rank, stage.group_size, stage.submod, stage.num_stages = 0, pp, None, pp * per_rank
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            order = ts.get_schedule_class(name)([stage] * per_rank, m).pipeline_order
        text = "\n".join(",".join(str(a) if a is not None else "" for a in order[r]) for r in range(pp))
        yield f"{name} (PyTorch)", sv.loads_csv(text, stages=pp * per_rank, placement=placement)


def our_schedules(pp: int, m: int):
    from schedverify.generators import FAMILIES

    for name in OUR_FAMILIES:
        try:
            yield name, FAMILIES[name](pp, m)
        except sv.SchedverifyError:
            continue


def cell(schedule, semantics: str, nccl) -> str:
    r = sv.check(schedule, comm_semantics=semantics, nccl=nccl)
    codes = set(r.codes())
    parts = []
    if codes & {"SV402", "SV405"} or (r.metrics.makespan is None and not codes & {"SV504"}):
        parts.append("hang")
    if "SV504" in codes:
        parts.append("corrupt")
    if codes - {"SV402", "SV405", "SV504"}:
        parts.append("invalid " + " ".join(sorted(codes - {"SV402", "SV405", "SV504"})))
    if not parts:
        return f"ok {r.metrics.makespan:g}"
    return " + ".join(parts) + (f" {r.metrics.makespan:g}" if r.metrics.makespan is not None else "")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", nargs="+", default=["2x4", "4x8", "8x16"], metavar="PPxM")
    args = ap.parse_args()
    import importlib.util

    source = torch_schedules if importlib.util.find_spec("torch") is not None else our_schedules
    heads = ["gloo", "NCCL", "NCCL, stream per peer", "NCCL, buffered"]
    print("Each cell: PyTorch's plain lowering / PyTorch's defer_pp_recv=True / ours (schedverify lower)\n")
    print("| schedule | ranks x microbatches | compute-only | " + " | ".join(heads) + " |")
    print("|---|---|---:|" + "---|" * len(heads))
    for size in args.sizes:
        pp, m = map(int, size.split("x"))
        for name, s in source(pp, m):
            row = [name, f"{pp}x{m}", f"{sv.check(s, comm_semantics='torch').metrics.makespan:g}"]
            lowerings = []
            for defer in (False, True):
                try:
                    lowerings.append(torch_lowering(s, defer_recv=defer))
                except LoweringError:
                    lowerings.append(None)
            for sem, nccl in COLUMNS:
                cells = [cell(low, sem, nccl) if low is not None else "lowering fails" for low in lowerings]
                try:
                    cells.append(cell(lower(s, comm_semantics=sem, nccl=nccl), sem, nccl))
                except LoweringError as e:
                    cells.append(f"none: {e}")
                row.append(" / ".join(cells))
            print("| " + " | ".join(row) + " |", flush=True)


if __name__ == "__main__":
    main()
