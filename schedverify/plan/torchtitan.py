"""The winner as torchtitan runs it: the compute-only CSV of
``--parallelism.pipeline_parallel_schedule_csv``, checked before it is written, and the flags
that give torchtitan the stage placement the CSV assumes."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import SchedverifyError, UsageError
from ..model import Schedule
from .stages import quantized

if TYPE_CHECKING:  # the planner calls this module
    from .planner import Candidate


def checked_csv(candidate: Candidate, where: str = "<csv>") -> tuple[str, Schedule]:
    """(the compute-only CSV torchtitan reads for ``candidate``, the schedule it reads back as),
    after checking that the text, read back as PyTorch reads it and lowered as PyTorch lowers
    it, is the planned schedule and runs under ``torch-nccl``."""
    from ..check import check
    from ..io import dumps_csv, loads_csv
    from ..lowering import torch_lowering

    s, profile = candidate.schedule, candidate.profile
    if s is None or profile is None or candidate.placement is None:
        raise UsageError(f"{candidate.label} has no schedule torchtitan can run ({candidate.status})")
    text = dumps_csv(s)
    back = loads_csv(text, where, devices=s.devices, stages=s.stages, microbatches=s.microbatches,
                     placement=candidate.placement)
    costs, memory = quantized(profile, None)
    report = check(torch_lowering(back), costs=costs, memory=memory, comm_semantics="torch-nccl")

    def actions(order):
        return tuple(tuple(a for a in row if a is not None) for row in order)  # idle slots aside

    if not report.is_valid or actions(back.order) != actions(s.order):
        raise SchedverifyError(f"{where}: the CSV of {candidate.label} does not read back as the schedule "
                               "that was planned; nothing was written (a bug: please report it)")
    return text, back


def export(candidate: Candidate, path: str) -> Schedule:
    """Write :func:`checked_csv` to ``path``, whole or not at all; returns the schedule read back."""
    from ..io import write_atomic

    text, back = checked_csv(candidate, path)
    write_atomic(path, text)
    return back


def flags(c: Candidate, csv: str) -> str:
    """The torchtitan options that run ``c`` from ``csv``: the CSV, and a schedule class whose
    stage placement (loop or v) and stages per rank are the ones the CSV assumes."""
    from ..lint import torchtitan_schedule

    per_rank = (c.stages or 0) // max(1, len(c.peak_memory))
    cls = torchtitan_schedule(c.placement, per_rank)
    text = (f"torchtitan: --parallelism.pipeline_parallel_schedule_csv {csv} "
             f"--parallelism.pipeline_parallel_schedule {cls} (placement {c.placement}, "
             f"{per_rank} stage{'s' if per_rank != 1 else ''} per rank)")
    if c.placement == "loop" and per_rank > 2:
        text += f"; and pipeline_parallel_layers_per_stage so that the model splits into {c.stages} stages"
    return text
