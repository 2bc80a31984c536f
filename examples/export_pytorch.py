"""Export PyTorch's Interleaved 1F1B schedule as the CSVs PyTorch itself writes.

Needs PyTorch (``pip install torch==2.13.0``, the CPU build is enough).  No process group and
no model: the schedule is built on mock stages, as PyTorch's own
``torch/distributed/pipelining/_schedule_visualizer.get_schedule_ops`` does, and written
with PyTorch's ``_dump_csv``:

- ``pytorch_interleaved_1f1b.csv``: the compute-only order (``pipeline_order``);
- ``pytorch_interleaved_1f1b_comms.csv``: after PyTorch's lowering, with the SEND/RECV
  actions its runtime executes (``pipeline_order_with_comms``), as 2.13 and 2.14 write it;
  with a release that retires each send by its own wait installed,
  ``pytorch_interleaved_1f1b_comms_<release>.csv`` (``..._comms_2.15.csv``: with 2.15's
  WAIT_SEND and WAIT_REDUCE_GRAD actions).

Run it from anywhere: ``python examples/export_pytorch.py`` rewrites both files next to it;
``python examples/export_pytorch.py OUTDIR`` writes them to OUTDIR instead.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path
from unittest import mock

PP = 4  # pipeline ranks (devices)
STAGES_PER_RANK = 2  # virtual stages per rank: 8 stages, placed stage % 4
MICROBATCHES = 8


def _stages(pp: int, per_rank: int):
    from torch.distributed.pipelining.stage import PipelineStage

    stage = mock.create_autospec(PipelineStage, instance=True)
    stage.group_rank = 0
    stage.group_size = pp
    stage.submod = None
    stage.num_stages = pp * per_rank
    return [stage] * per_rank


def export(directory: Path, pp: int = PP, per_rank: int = STAGES_PER_RANK,
           microbatches: int = MICROBATCHES) -> list[Path]:
    """Write both CSVs into ``directory``; return their paths."""
    from torch.distributed.pipelining import schedules

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        schedule = schedules.ScheduleInterleaved1F1B(_stages(pp, per_rank), microbatches)
        runtime = schedules._PipelineScheduleRuntime(_stages(pp, per_rank), microbatches)
        runtime._prepare_schedule_with_comms(schedule.pipeline_order)
    import torch

    from schedverify.releases import STEP_END, release

    rel, _ = release(torch.__version__)
    compute = directory / "pytorch_interleaved_1f1b.csv"
    comms = directory / ("pytorch_interleaved_1f1b_comms.csv" if rel.send_retirement == STEP_END
                         else f"pytorch_interleaved_1f1b_comms_{rel.version}.csv")
    schedule._dump_csv(str(compute), format="compute_only")
    runtime._dump_csv(str(comms), format="compute_comms")
    return [compute, comms]


if __name__ == "__main__":
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent
    for path in export(out):
        print(path)
