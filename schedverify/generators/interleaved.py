"""Schedules with several stages (chunks) per device, placed in a loop: stage ``s`` on
device ``s % D``, ``S = D * chunks`` stages.

- ``interleaved-1f1b``: Megatron-LM's interleaved schedule (depth first).
- ``looped-bfs``: breadth-first pipeline parallelism (looping, GPipe-like).
"""

from __future__ import annotations

from ..model import B, F, Action, Schedule
from ._build import assemble, certified, looped_rows, megatron_group, positive, require


def interleaved_1f1b(devices: int, microbatches: int, *, chunks: int = 2,
                     group_size: int | None = None) -> Schedule:
    """Interleaved 1F1B (Narayanan et al., "Efficient Large-Scale Language Model Training on
    GPU Clusters Using Megatron-LM", SC 2021), as Megatron-LM's
    ``forward_backward_pipelining_with_interleaving`` runs it.

    Device ``d`` holds stages ``d, d+D, ..., d+(chunks-1)D``.  Forwards follow Megatron's
    schedule table (groups of ``group_size`` microbatches, each group through every chunk in
    turn); backwards follow the same table with the chunks reversed.  Device ``d`` runs
    ``min(2(D-d-1) + (chunks-1)*group_size, M*chunks)`` warm-up forwards, then one forward
    and one backward, then the remaining backwards.

    ``group_size`` is Megatron's ``microbatch_group_size_per_vp_stage`` (default ``D``).
    Domain, with Megatron's refusal rules: ``chunks >= 2`` (one chunk is plain 1F1B),
    ``D <= group_size <= M``, and ``M % group_size`` is 0 or at least ``D``.  (Megatron
    also asks for ``D > 2`` unless p2p communication overlap is on; that rule is about
    batching NCCL sends between the same two ranks, not about the schedule, so it is not
    enforced here.)  The paper gives the bubble ``(D-1)(t_F + t_B)`` in chunk costs for ``M``
    a multiple of ``D``; with these rules it holds on the whole domain, any group size.
    """
    name = "interleaved-1f1b"
    positive(name, devices=devices, microbatches=microbatches, chunks=chunks)
    require(chunks >= 2, name, f"needs chunks >= 2 (got {chunks}); with one chunk use 1f1b")
    group = megatron_group(name, devices, microbatches, group_size)
    order = certified(name, devices, microbatches, chunks=chunks, group_size=group)
    if order is None:  # a group size other than D, or a chunk count without a certificate
        order = looped_rows(devices, microbatches, chunks, group,
                            warmup=lambda d: 2 * (devices - d - 1) + (chunks - 1) * group)
    return assemble(name, order, stages=devices * chunks, microbatches=microbatches,
                    metadata={"family": name, "chunks": chunks, "group_size": group})


def looped_bfs(devices: int, microbatches: int, *, chunks: int = 2) -> Schedule:
    """Looped breadth-first pipeline (Lamy-Poirier, "Breadth-First Pipeline Parallelism",
    MLSys 2023), as PyTorch's ``ScheduleLoopedBFS`` orders it.

    Device ``d`` holds stages ``d, d+D, ...``; it runs the forwards of every microbatch on
    its first stage, then on its next stage, and so on; then the backwards stage by stage in
    reverse, each stage's microbatches last-first (the last forward is the first one whose
    gradient comes back).  Every device holds all ``M * chunks`` activations at its peak, as
    GPipe does.  Any ``D >= 1``, ``M >= 1``, ``chunks >= 1`` (one chunk is GPipe with the
    backwards reversed).
    """
    name = "looped-bfs"
    positive(name, devices=devices, microbatches=microbatches, chunks=chunks)
    order = certified(name, devices, microbatches, chunks=chunks)
    if order is None:  # a chunk count without a certificate (certificates/looped.py: 1..4)
        order = []
        for d in range(devices):
            stages = [c * devices + d for c in range(chunks)]
            row = [Action(s, F, i) for s in stages for i in range(microbatches)]
            row += [Action(s, B, i) for s in reversed(stages) for i in reversed(range(microbatches))]
            order.append(row)
    return assemble(name, order, stages=devices * chunks, microbatches=microbatches,
                    metadata={"family": name, "chunks": chunks})
