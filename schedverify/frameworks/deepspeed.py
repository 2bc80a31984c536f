"""The order DeepSpeed's pipeline engine runs, every stage's, with its blocking sends and
receives: ``deepspeed/runtime/pipe/schedule.py``'s ``TrainSchedule(micro_batches, stages,
stage_id).steps()``, release 0.19.8, as ``PipelineEngine._exec_schedule`` (``engine.py``)
runs it: each step's instructions in order.

An instruction names a pipe buffer (``buffer_id``), not a microbatch: the buffer of
microbatch ``m`` is ``m % num_pipe_buffers``, ``num_pipe_buffers = max(2, min(stages -
stage_id, micro_batches))``.  ``SendActivation`` and ``SendGrad`` act on the previous step's
microbatch, the others on the step's own (``TrainSchedule.steps``: ``prev_buffer`` /
``curr_buffer``).  ``LoadMicroBatch``, ``ReduceTiedGrads``, ``ReduceGrads`` and
``OptimizerStep`` are no action of the order (docs/spec.md 10.5).

:func:`framework_steps` is the door to DeepSpeed: its own ``TrainSchedule`` when installed,
else :func:`train_steps`, the re-implementation a test tier holds equal to it.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable

from ..errors import UsageError
from ..grammar import RECV_B, RECV_F, SEND_B, SEND_F, Action, B, F
from ..releases.deepspeed import FRAMEWORK, RELEASES
from .common import modelled_version, positive

#: An instruction: (its DeepSpeed class name, the microbatch it acts on or None, its buffer id or None).
Step = tuple[str, "int | None", "int | None"]
Steps = list[list[Step]]

#: What each point-to-point or compute instruction is as an action.
KIND = {"ForwardPass": F, "BackwardPass": B, "SendActivation": SEND_F, "RecvActivation": RECV_F,
        "SendGrad": SEND_B, "RecvGrad": RECV_B}
#: The instructions that act on the previous step's microbatch (``prev_buffer``).
_PREV = frozenset({"SendActivation", "SendGrad"})


def num_pipe_buffers(micro_batches: int, stages: int, stage_id: int) -> int:
    """``TrainSchedule.num_pipe_buffers``."""
    return max(2, min(stages - stage_id, micro_batches))


def _step_to_micro_batch(step_id: int, stages: int, stage_id: int) -> tuple[int, bool]:
    """``TrainSchedule._step_to_micro_batch``: (microbatch, is_forward) of a step."""
    even_step, even_stage = step_id % 2 == 0, stage_id % 2 == 0
    if even_step and even_stage:
        return step_id // 2 - stage_id // 2, True
    if not even_step and not even_stage:
        return (step_id - 1) // 2 - stage_id // 2, True
    if even_step:
        return step_id // 2 - stages + (stage_id + 1) // 2, False
    return ((step_id - 1) // 2) - stages + 1 + stage_id // 2, False


def train_steps(micro_batches: int, stages: int, stage_id: int) -> Steps:
    """``TrainSchedule(micro_batches, stages, stage_id).steps()``, re-implemented: per step,
    its instructions as (name, microbatch, buffer id)."""
    buffers = num_pipe_buffers(micro_batches, stages, stage_id)

    def valid(mb: int) -> bool:
        return 0 <= mb < micro_batches

    has_prev, has_next = stage_id > 0, stage_id < stages - 1
    out: Steps = []
    prev = -1
    total = 2 * (micro_batches + stages - 1)
    for step_id in range(total):
        mb, forward = _step_to_micro_batch(step_id, stages, stage_id)
        cmds: list[Step] = []
        if forward:
            if valid(prev) and has_prev:
                cmds.append(("SendGrad", prev, prev % buffers))
            if valid(mb) and has_prev:
                cmds.append(("RecvActivation", mb, mb % buffers))
        else:
            if valid(mb) and has_next:
                cmds.append(("RecvGrad", mb, mb % buffers))
            if valid(prev) and has_next:
                cmds.append(("SendActivation", prev, prev % buffers))
        if (stage_id == 0 or stage_id == stages - 1) and forward and valid(mb):
            cmds.append(("LoadMicroBatch", mb, mb % buffers))
        if valid(mb):
            cmds.append(("ForwardPass" if forward else "BackwardPass", mb, mb % buffers))
        if step_id == total - 1:
            cmds.extend([("ReduceTiedGrads", None, None), ("ReduceGrads", None, None), ("OptimizerStep", None, None)])
        prev = mb
        out.append(cmds)
    return out


def framework_steps(version: str | None = None) -> Callable[[int, int, int], Steps] | None:
    """The door to DeepSpeed: a function giving ``TrainSchedule(...).steps()`` from the
    installed DeepSpeed (each instruction's microbatch from its own ``_step_to_micro_batch``),
    or None when it is not installed (or, given ``version``, is another release).  Its
    accelerator is CPU unless ``DS_ACCELERATOR`` says otherwise: the schedule needs none."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        if version is not None and installed(FRAMEWORK) != version:
            return None
    except PackageNotFoundError:
        return None
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    try:
        module = importlib.import_module("deepspeed.runtime.pipe.schedule")
    except Exception:  # noqa: BLE001 - DeepSpeed missing, or an optional dependency of it
        return None

    def steps(micro_batches: int, stages: int, stage_id: int) -> Steps:
        sched = module.TrainSchedule(micro_batches=micro_batches, stages=stages, stage_id=stage_id)
        out: Steps = []
        prev = -1
        for step_id, cmds in enumerate(sched.steps()):
            mb, _ = sched._step_to_micro_batch(step_id)
            row: list[Step] = []
            for cmd in cmds:
                name = type(cmd).__name__
                buffer = cmd.kwargs.get("buffer_id")
                row.append((name, None if buffer is None else (prev if name in _PREV else mb), buffer))
            prev = mb
            out.append(row)
        return out

    return steps


def schedule(stages: int, microbatches: int, version: str = "0.19.8", *,
             steps: Callable[[int, int, int], Steps] | None = None):
    """The schedule DeepSpeed ``version``'s ``PipelineEngine`` runs for ``stages`` pipeline
    stages (one per rank) and ``microbatches`` microbatches (``gradient_accumulation_steps``):
    every stage's order with its blocking sends and receives, on that framework's engine
    (its metadata says which).  ``steps``: where the instruction stream comes from (default:
    DeepSpeed's own ``TrainSchedule`` when installed, else :func:`train_steps`)."""
    from ..model import Placement, Schedule

    modelled_version(FRAMEWORK, version, RELEASES)
    positive("stages (num_stages)", stages)
    positive("microbatches (micro_batches)", microbatches)
    own = framework_steps(version) if steps is None else None
    source = (f"deepspeed {version}'s own TrainSchedule" if own is not None else
              "the given steps" if steps is not None else
              "schedverify's re-implementation of deepspeed 0.19.8's TrainSchedule")
    get = steps or own or train_steps
    order = []
    for stage in range(stages):
        stream = get(microbatches, stages, stage)
        for row in stream:
            for name, mb, buffer in row:
                if buffer is not None and mb is not None \
                        and buffer != mb % num_pipe_buffers(microbatches, stages, stage):
                    raise UsageError(f"stage {stage}: {name}(buffer_id={buffer}) for microbatch {mb} is not buffer "
                                     f"{mb} % num_pipe_buffers")
        order.append(tuple(Action(stage, KIND[name], mb) for row in stream for name, mb, _ in row if name in KIND))
    metadata = {"framework": FRAMEWORK, "version": version, "p2p": "shared", "engine": "PipelineEngine",
                "schedule": "TrainSchedule", "order_from": source,
                "num_pipe_buffers": [num_pipe_buffers(microbatches, stages, s) for s in range(stages)],
                # engine.py: blocking exchanges the order does not show (docs/spec.md 10.5)
                "outside_order": ["_send_tensor_meta before the first SendActivation of a train_batch "
                                  "(first_output_send; every one with dynamic_shape), _recv_tensor_meta before "
                                  "the first RecvActivation (pipe_recv_buf is None): blocking p2p.send/recv, "
                                  "in the same order on both sides",
                                  "ReduceTiedGrads, ReduceGrads, OptimizerStep after the last step"]}
    return Schedule(devices=stages, stages=stages, microbatches=microbatches, order=tuple(order),
                    placement=Placement.of("loop", stages, stages),
                    name=f"deepspeed {version} TrainSchedule stages={stages} M={microbatches}",
                    comm_semantics="torch-nccl", metadata=metadata)


def namer(schedule) -> Callable[[Action], str | None]:
    """What an action of ``schedule`` (a DeepSpeed import, or a file edited from one) is in
    DeepSpeed's terms: its ``TrainSchedule`` instruction, buffer and step, as in
    ``stage 0: SendActivation(buffer_id=1), TrainSchedule step 3``.  The step is the one at
    which ``TrainSchedule`` posts that instruction for that microbatch, wherever the file has
    moved it; None for an action ``TrainSchedule`` never posts."""
    stages, m = schedule.stages, schedule.microbatches
    names = {kind: name for name, kind in KIND.items()}
    steps: dict[int, dict[tuple[str, int], int]] = {}

    def step_of(stage: int, name: str, mb: int) -> int | None:
        if stage not in steps:
            steps[stage] = {(n, b): i for i, row in enumerate(train_steps(m, stages, stage))
                            for n, b, _ in row if b is not None}
        return steps[stage].get((name, mb))

    def name(a: Action) -> str | None:
        if a.sub is not None or a.kind not in names or a.stage is None or a.microbatch is None:
            return None
        if not (0 <= a.stage < stages and 0 <= a.microbatch < m):
            return None
        instruction = names[a.kind]
        step = step_of(a.stage, instruction, a.microbatch)
        if step is None:
            return None
        buffer = a.microbatch % num_pipe_buffers(m, stages, a.stage)
        return f"stage {a.stage}: {instruction}(buffer_id={buffer}), TrainSchedule step {step}"

    return name


__all__ = ["KIND", "framework_steps", "namer", "num_pipe_buffers", "schedule", "train_steps"]
