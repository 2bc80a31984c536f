"""The order DeepSpeed's pipeline engines run, every stage's, with their communication:
``deepspeed/runtime/pipe/schedule.py``'s ``TrainSchedule(micro_batches, stages,
stage_id).steps()``, release 0.19.8, as ``PipelineEngine._exec_schedule`` (``engine.py``)
runs it: each step's instructions in order, each send and receive blocking; and its
``DualPipeVSchedule`` as ``DualPipeVEngine`` (``dualpipev.py``) runs it, each send and receive
queued and the queue posted as one ``batch_isend_irecv`` at the next ``CommitP2P`` (a BATCH).

An instruction names a pipe buffer (``buffer_id``), not a microbatch: the buffer of
microbatch ``m`` is ``m % num_pipe_buffers``, ``num_pipe_buffers = max(2, min(stages -
stage_id, micro_batches))``.  ``SendActivation`` and ``SendGrad`` act on the previous step's
microbatch, the others on the step's own (``TrainSchedule.steps``: ``prev_buffer`` /
``curr_buffer``).  ``LoadMicroBatch``, ``ReduceTiedGrads``, ``ReduceGrads`` and
``OptimizerStep`` are no action of the order (docs/spec.md 10.5).

:func:`framework_steps` is the door to DeepSpeed: its own ``TrainSchedule`` when installed,
else :func:`train_steps`, the re-implementation a test tier holds equal to it;
:func:`framework_dualpipev_steps` and :func:`dualpipev_steps` the same for ``DualPipeVSchedule``.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable

from ..errors import UsageError
from ..grammar import RECV_B, RECV_F, SEND_B, SEND_F, Action, B, F, batch
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


def _schedule_module(version: str | None):
    """``deepspeed.runtime.pipe.schedule`` of the installed DeepSpeed, or None when it is not
    installed (or, given ``version``, is another release).  Its accelerator is CPU unless
    ``DS_ACCELERATOR`` says otherwise: the schedules need none."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        if version is not None and installed(FRAMEWORK) != version:
            return None
    except PackageNotFoundError:
        return None
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    try:
        return importlib.import_module("deepspeed.runtime.pipe.schedule")
    except Exception:  # noqa: BLE001 - DeepSpeed missing, or an optional dependency of it
        return None


def framework_steps(version: str | None = None) -> Callable[[int, int, int], Steps] | None:
    """The door to DeepSpeed: a function giving ``TrainSchedule(...).steps()`` from the
    installed DeepSpeed (each instruction's microbatch from its own ``_step_to_micro_batch``),
    or None when it is not installed (or, given ``version``, is another release)."""
    module = _schedule_module(version)
    if module is None:
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

# ------------------------------------------------------------------ DualPipeV

#: The instruction that posts the queued sends and receives (``CommitP2P``).
COMMIT = "CommitP2P"


def dualpipev_refusal(micro_batches: int, stages: int) -> str | None:
    """Why ``DualPipeVSchedule(micro_batches, stages, ...)`` refuses the sizes (its
    ``__init__``'s ValueError, and ``DualPipeVEngine.__init__``'s assertion on
    ``gradient_accumulation_steps``), or None."""
    if micro_batches < 2 * stages:
        return (f"DualPipeV needs at least 2 * stages = {2 * stages} micro-batches "
                f"(gradient_accumulation_steps), got {micro_batches}")
    return None


def dualpipev_stage(stages: int, stage_id: int, phase: int) -> int:
    """The schedverify stage of ``phase`` on pipeline rank ``stage_id``: ``stage_id`` (phase 0)
    and ``2 * stages - 1 - stage_id`` (phase 1), as ``DualPipeVModule`` builds them
    (placement ``v``)."""
    return stage_id if phase == 0 else 2 * stages - 1 - stage_id


def dualpipev_steps(micro_batches: int, stages: int, stage_id: int) -> Steps:
    """``DualPipeVSchedule(micro_batches, stages, stage_id).steps()`` (training, not
    ``forward_only``), re-implemented: per step, its instructions as (name, phase, buffer
    id), ``phase`` None where the instruction has none (``LoadMicroBatch``, ``CommitP2P`` and
    the three after the last step).  The buffer of the n-th instruction of a kind in a phase
    is ``phase * micro_batches + n`` (its ``buffer``).  Sizes it refuses raise
    :class:`UsageError` with its rule."""
    why = dualpipev_refusal(micro_batches, stages)
    if why is not None:
        raise UsageError(why)
    first, last = stage_id == 0, stage_id == stages - 1
    counters: dict[tuple[str, int], int] = {}
    commit: list[Step] = [(COMMIT, None, None)]

    def buffer(phase: int, counter: str) -> int:
        mb = counters.get((counter, phase), 0)
        counters[(counter, phase)] = mb + 1
        return phase * micro_batches + mb

    def recv_forward(p: int) -> list[Step]:
        return [] if (first and p == 0) or (last and p == 1) else [("RecvActivation", p, buffer(p, "recv_fwd"))]

    def send_forward(p: int) -> list[Step]:
        return [] if (first and p == 1) or (last and p == 0) else [("SendActivation", p, buffer(p, "send_fwd"))]

    def recv_backward(p: int) -> list[Step]:
        return [] if (first and p == 1) or (last and p == 0) else [("RecvGrad", p, buffer(p, "recv_bwd"))]

    def send_backward(p: int) -> list[Step]:
        return [] if (first and p == 0) or (last and p == 1) else [("SendGrad", p, buffer(p, "send_bwd"))]

    def forward(p: int) -> list[Step]:
        b = buffer(p, "fwd")
        return ([("LoadMicroBatch", None, b)] if first and p == 0 else []) + [("ForwardPass", p, b)]

    def backward(p: int) -> list[Step]:
        return [("BackwardPass", p, buffer(p, "bwd"))]

    def forward_chunk(p: int, recv: bool = True, send: bool = True) -> list[Step]:
        cmds = recv_forward(p) if recv else []
        cmds += commit + forward(p)
        return cmds + (send_forward(p) if send else [])

    def backward_chunk(p: int, send: bool = True) -> list[Step]:
        cmds = recv_backward(p) + commit + backward(p)
        return cmds + (send_backward(p) if send else [])

    def forward_backward_chunk(p0: int, p1: int, recv0: bool = True) -> list[Step]:
        cmds = recv_forward(p0) if recv0 else []
        cmds += recv_backward(p1) + commit + forward(p0) + backward(p1)
        return cmds + send_forward(p0) + send_backward(p1)

    ahead = stages - stage_id - 1
    out: Steps = [forward_chunk(0) for _ in range(2 * ahead)]  # step 1: nF0
    out.append(recv_forward(0))  # step 2: nF0F1
    for i in range(stage_id + 1):
        cmds = forward_chunk(0, recv=False, send=False) + recv_forward(0)
        cmds += forward_chunk(1, send=(not last) or (i < stage_id))
        out.append(cmds + send_forward(0))
    for _ in range(ahead):  # step 3: nB1W1F1 (the weight pass is a CommitP2P: W stays in B)
        out.append(backward_chunk(1) + recv_forward(1) + commit + forward_chunk(1, recv=False))
    for i in range(micro_batches - 2 * stages + stage_id + 1):  # step 4: nF0B1F1B0
        if i == 0 and last:
            cmds = forward_chunk(0, recv=False, send=False) + send_forward(1)
            cmds += backward_chunk(1, send=False) + send_forward(0) + send_backward(1)
        else:
            cmds = forward_backward_chunk(0, 1, recv0=i > 0)
        out.append(cmds + forward_backward_chunk(1, 0))
    out.extend(backward_chunk(1) + forward_backward_chunk(1, 0) for _ in range(ahead))  # step 5: nB1F1B0
    out.extend(backward_chunk(1) + backward_chunk(0) for _ in range(stage_id + 1))  # step 6: nB1B0
    out.extend(commit + backward_chunk(0) for _ in range(ahead))  # step 7: nWB0
    out.extend(list(commit) for _ in range(stage_id + 1))  # step 8: nW
    out.append(commit + [("ReduceTiedGrads", None, None), ("ReduceGrads", None, None), ("OptimizerStep", None, None)])
    return out


def framework_dualpipev_steps(version: str | None = None) -> Callable[[int, int, int], Steps] | None:
    """The door to DeepSpeed's ``DualPipeVSchedule``: a function giving its ``steps()`` from
    the installed DeepSpeed as (name, phase, buffer id), or None when it is not installed,
    is another release than ``version``, or has no ``DualPipeVSchedule``."""
    module = _schedule_module(version)
    if module is None or not hasattr(module, "DualPipeVSchedule"):
        return None

    def steps(micro_batches: int, stages: int, stage_id: int) -> Steps:
        why = dualpipev_refusal(micro_batches, stages)
        if why is not None:  # before DeepSpeed's own ValueError, in the same words
            raise UsageError(why)
        sched = module.DualPipeVSchedule(micro_batches=micro_batches, stages=stages, stage_id=stage_id)
        return [[(type(cmd).__name__, cmd.kwargs.get("phase"), cmd.kwargs.get("buffer_id")) for cmd in cmds]
                for cmds in sched.steps()]

    return steps


def dualpipev_order(stream: Steps, micro_batches: int, stages: int, stage_id: int) -> tuple[Action, ...]:
    """Rank ``stage_id``'s order from its ``DualPipeVSchedule`` stream, as ``DualPipeVEngine``
    runs it: ``ForwardPass``/``BackwardPass`` of ``phase`` as F/B of :func:`dualpipev_stage`;
    each send and receive queued (``_queue_p2p``), and every ``CommitP2P`` with a non-empty
    queue one BATCH of the queued operations in queue order (``_exec_commit_p2p``: one
    ``batch_isend_irecv``, each request waited); an empty one posts nothing."""
    order: list[Action] = []
    queue: list[Action] = []
    for k, row in enumerate(stream):
        for name, phase, buf in row:
            if name == COMMIT:
                if queue:
                    order.append(batch(*queue))
                    queue = []
                continue
            if name not in KIND:
                continue
            if phase not in (0, 1) or buf is None or buf // micro_batches != phase:
                raise UsageError(f"rank {stage_id}, DualPipeVSchedule step {k}: {name}(buffer_id={buf}, "
                                 f"phase={phase}) is not buffer phase * micro_batches + microbatch")
            a = Action(dualpipev_stage(stages, stage_id, phase), KIND[name], buf - phase * micro_batches)
            (order if name in ("ForwardPass", "BackwardPass") else queue).append(a)
    if queue:
        raise UsageError(f"rank {stage_id}: {', '.join(map(str, queue))} queued after the last CommitP2P: "
                         "DualPipeVEngine never posts them")
    return tuple(order)


def schedule(stages: int, microbatches: int, version: str = "0.19.8", *, dualpipev: bool = False,
             steps: Callable[[int, int, int], Steps] | None = None):
    """The schedule DeepSpeed ``version``'s pipeline engine runs for ``stages`` pipeline
    stages (one per rank) and ``microbatches`` microbatches (``gradient_accumulation_steps``):
    every stage's order with its communication, on that framework's engine (its metadata says
    which).  ``PipelineEngine`` running ``TrainSchedule``, each send and receive blocking; with
    ``dualpipev``, ``DualPipeVEngine`` running ``DualPipeVSchedule``: ``2 * stages`` stages on
    the V placement, every ``CommitP2P`` one BATCH.  ``steps``: where the instruction stream
    comes from (default: DeepSpeed's own schedule when installed, else :func:`train_steps` or
    :func:`dualpipev_steps`)."""
    modelled_version(FRAMEWORK, version, RELEASES)
    positive("stages (num_stages)", stages)
    positive("microbatches (micro_batches)", microbatches)
    if dualpipev:
        return _dualpipev_schedule(stages, microbatches, version, steps)
    from ..model import Placement, Schedule

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


def _dualpipev_schedule(stages: int, microbatches: int, version: str, steps):
    from ..model import Placement, Schedule

    why = dualpipev_refusal(microbatches, stages)
    if why is not None:
        raise UsageError(why)
    own = framework_dualpipev_steps(version) if steps is None else None
    source = (f"deepspeed {version}'s own DualPipeVSchedule" if own is not None else
              "the given steps" if steps is not None else
              "schedverify's re-implementation of deepspeed 0.19.8's DualPipeVSchedule")
    get = steps or own or dualpipev_steps
    order = tuple(dualpipev_order(get(microbatches, stages, r), microbatches, stages, r) for r in range(stages))
    metadata = {"framework": FRAMEWORK, "version": version, "p2p": "shared", "engine": "DualPipeVEngine",
                "schedule": "DualPipeVSchedule", "order_from": source,
                "num_pipe_buffers": [2 * microbatches] * stages,
                # dualpipev.py: blocking exchanges the order does not show (docs/spec.md 10.5)
                "outside_order": ["_send_tensor_meta when the first SendActivation of each phase is queued "
                                  "(_first_send), _recv_tensor_meta when the first RecvActivation of each phase is "
                                  "(_recv_specs is None): blocking p2p.send/recv at that instruction, before "
                                  "the CommitP2P that posts the activation",
                                  "ReduceTiedGrads, ReduceGrads, OptimizerStep after the last CommitP2P"]}
    return Schedule(devices=stages, stages=2 * stages, microbatches=microbatches, order=order,
                    placement=Placement.of("v", stages, 2 * stages),
                    name=f"deepspeed {version} DualPipeVSchedule stages={stages} M={microbatches}",
                    comm_semantics="torch-nccl", metadata=metadata)


def namer(schedule) -> Callable[[Action], str | None]:
    """What an action of ``schedule`` (a DeepSpeed import, or a file edited from one) is in
    DeepSpeed's terms: its ``TrainSchedule`` instruction, buffer and step, as in
    ``stage 0: SendActivation(buffer_id=1), TrainSchedule step 3``.  The step is the one at
    which ``TrainSchedule`` posts that instruction for that microbatch, wherever the file has
    moved it; None for an action ``TrainSchedule`` never posts.  A ``DualPipeVSchedule``
    import (its metadata's ``"schedule"``) is named by :func:`dualpipev_namer`."""
    if (schedule.metadata or {}).get("schedule") == "DualPipeVSchedule":
        return dualpipev_namer(schedule)
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


def dualpipev_namer(schedule) -> Callable[[Action], str | None]:
    """What an action of a ``DualPipeVSchedule`` import (or a file edited from one) is in
    DeepSpeed's terms: the rank, its instruction with buffer and phase, and the
    ``DualPipeVSchedule`` step that yields it, as in ``rank 1: SendGrad(buffer_id=0, phase=0),
    queued at DualPipeVSchedule step 3``; a BATCH is the ``CommitP2P`` that posts its first
    operation, naming every operation.  None for what the schedule never yields."""
    ranks, m = schedule.devices, schedule.microbatches
    where: dict[int, dict[tuple[str, int, int], tuple[int, int | None]]] = {}

    def steps_of(rank: int) -> dict[tuple[str, int, int], tuple[int, int | None]]:
        # (instruction, phase, microbatch) -> (the step that yields it, the step of the
        # CommitP2P that posts it: None for a compute)
        if rank not in where:
            found: dict[tuple[str, int, int], tuple[int, int | None]] = {}
            queued: list[tuple[str, int, int]] = []
            try:
                stream = dualpipev_steps(m, ranks, rank)
            except UsageError:
                stream = []
            for k, row in enumerate(stream):
                for name, phase, buf in row:
                    if name == COMMIT:
                        for q in queued:
                            found[q] = (found[q][0], k)
                        queued = []
                    elif name in KIND and phase is not None and buf is not None:
                        key = (name, phase, buf - phase * m)
                        found[key] = (k, None)
                        if name not in ("ForwardPass", "BackwardPass"):
                            queued.append(key)
            where[rank] = found
        return where[rank]

    names = {kind: name for name, kind in KIND.items()}

    def locate(a: Action) -> tuple[int, str, int, int, int | None] | None:
        if a.sub is not None or a.kind not in names or a.stage is None or a.microbatch is None:
            return None
        if not (0 <= a.stage < 2 * ranks and 0 <= a.microbatch < m):
            return None
        phase = 0 if a.stage < ranks else 1
        rank = a.stage if phase == 0 else 2 * ranks - 1 - a.stage
        at = steps_of(rank).get((names[a.kind], phase, a.microbatch))
        if at is None:
            return None
        return rank, names[a.kind], phase, at[0], at[1]

    def instruction(name: str, phase: int, mb: int) -> str:
        return f"{name}(buffer_id={phase * m + mb}, phase={phase})"

    def name(a: Action) -> str | None:
        if a.kind == "BATCH" and a.sub:
            ops: list[str] = []
            commit: int | None = None
            for x in a.sub:
                at = locate(x)
                if at is None or x.microbatch is None:
                    return None
                rank, n, phase, k, posted = at
                commit = posted if commit is None else commit
                ops.append(f"{instruction(n, phase, x.microbatch)} (queued at step {k})")
            return (f"rank {rank}: CommitP2P at DualPipeVSchedule step {commit}, one batch_isend_irecv waited "
                    f"at once: {'; '.join(ops)}")
        at = locate(a)
        if at is None or a.microbatch is None:
            return None
        rank, n, phase, k, posted = at
        if posted is None:
            return f"rank {rank}: {instruction(n, phase, a.microbatch)}, DualPipeVSchedule step {k}"
        return (f"rank {rank}: {instruction(n, phase, a.microbatch)}, queued at DualPipeVSchedule step {k}, "
                f"posted by the CommitP2P of step {posted}")

    return name


__all__ = ["COMMIT", "KIND", "dualpipev_namer", "dualpipev_order", "dualpipev_refusal", "dualpipev_stage",
           "dualpipev_steps", "framework_dualpipev_steps", "framework_steps", "namer", "num_pipe_buffers", "schedule",
           "train_steps"]
