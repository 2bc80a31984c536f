"""``plan --framework``: rank only what one framework can run, each candidate checked on that
framework's own loop, and say what the framework needs to run the winner.

- **megatron** (megatron-core 0.19.2, :mod:`schedverify.frameworks.megatron`): the order of
  ``forward_backward_pipelining_without_interleaving`` (1F1B) and, for each ``V >= 2`` of
  ``--chunks``, of ``forward_backward_pipelining_with_interleaving`` with ``V`` model chunks,
  with ``overlap_p2p_comm`` on (Megatron-LM's default: ``megatron/training/arguments.py``
  declares only ``--no-overlap-p2p-communication``) and off (``batch_p2p_comm``).  Besides
  megatron-core's own refusals (``frameworks.megatron.validate``), Megatron-LM's
  ``validate_args`` refuses interleaving without the overlap at PP <= 2 ("pipeline-model-
  parallel size should be greater than 2 to avoid having multiple p2p sends and recvs between
  same 2 ranks per communication batch").
- **deepspeed** (DeepSpeed 0.19.8, :mod:`schedverify.frameworks.deepspeed`): ``TrainSchedule``,
  the one schedule ``PipelineEngine.train_batch`` runs, one stage per rank.
- **torchtitan** (torchtitan 0.3.0): the planner's own candidates (:mod:`.planner`: PyTorch's
  lowering under ``torch-nccl``), without those torchtitan cannot run; the winner is the CSV
  of ``--parallelism.pipeline_parallel_schedule_csv``, with the options torchtitan 0.3.0
  needs (:data:`schedverify.lint.TORCHTITAN_RELEASES`: ``--training.disable_cuda_graphs``,
  and PyTorch 2.14 or later).

A Megatron or DeepSpeed candidate is checked once, as imported (its metadata names its
framework, so :func:`schedverify.check` runs it on that framework's loop, docs/spec.md
section 10), with the profile's costs and the memory limit: its makespan is the predicted
step time, its peaks the memory, a hang (SV4xx, SV5xx) or an out-of-memory (SV601) its
status.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from ..errors import SchedverifyError, UsageError
from ..model import Schedule
from .planner import Candidate, Plan, _common_reason, _profile_for, plan, torchtitan_refusal
from .sources import StageSource
from .stages import TIME_QUANTUM, quantized

__all__ = ["FRAMEWORKS", "arguments", "framework_plan"]

#: The frameworks ``plan --framework`` plans for.
FRAMEWORKS = ("megatron", "deepspeed", "torchtitan")
#: The torchtitan release the torchtitan plan is for.
TORCHTITAN = "0.3.0"

_MEGATRON_1F1B = "megatron-1f1b"
_MEGATRON_INTERLEAVED = "megatron-interleaved"
_DEEPSPEED = "deepspeed-train-schedule"


def _megatron_variants(devices: int, microbatches: int, chunks: Sequence[int],
                       layers: int | None) -> list[tuple[str, dict[str, Any], Schedule | str]]:
    from ..frameworks import megatron

    out: list[tuple[str, dict[str, Any], Schedule | str]] = []
    shapes = [(1, False)] + [(v, overlap) for v in sorted(set(chunks)) if v >= 2 for overlap in (True, False)]
    for vpp, overlap in shapes:
        name = _MEGATRON_1F1B if vpp == 1 else _MEGATRON_INTERLEAVED
        options: dict[str, Any] = {} if vpp == 1 else {"vpp": vpp, "overlap_p2p_comm": overlap}
        if vpp > 1 and not overlap and devices <= 2:
            out.append((name, options, f"Megatron-LM's validate_args (megatron/training/arguments.py) asserts "
                                       f"'When interleaved schedule is used and p2p communication overlap is "
                                       f"disabled, pipeline-model-parallel size should be greater than 2' "
                                       f"(PP = {devices})"))
            continue
        try:
            s = megatron.schedule(devices, vpp, microbatches, overlap_p2p_comm=overlap, num_layers=layers)
        except UsageError as e:
            out.append((name, options, str(e)))
            continue
        out.append((name, options, s))
    return out


def _deepspeed_variants(devices: int, microbatches: int) -> list[tuple[str, dict[str, Any], Schedule | str]]:
    from ..frameworks import deepspeed

    try:
        return [(_DEEPSPEED, {}, deepspeed.schedule(devices, microbatches))]
    except UsageError as e:
        return [(_DEEPSPEED, {}, str(e))]


def _own_buffers(profile, framework: str):
    """``profile`` without PyTorch's receive buffers (``torch.distributed.pipelining``'s, one per
    microbatch and direction): Megatron's and DeepSpeed's loops receive into the tensors that
    become the stage's input, which the activations already count."""
    if not profile.recv_buffers:
        return profile
    notes = tuple(n for n in profile.notes if not n.startswith("receive buffers"))
    return replace(profile, recv_buffers=(), notes=notes + (
        f"receive buffers: {framework} receives into the stage's inputs, counted with the activations "
        "(PyTorch's preallocated receive buffers are not counted)",))


def evaluate(schedule: Schedule, profile, memory_limit: int | None, *, name: str,
             options: dict[str, Any]) -> Candidate:
    """One imported schedule, checked on its framework's own loop with ``profile``'s costs."""
    from ..check import check

    costs, memory = quantized(profile, memory_limit)
    report = check(schedule, costs=costs, memory=memory, max_violations=3)
    m = report.metrics
    base = Candidate(name, options, "fits", stages=schedule.stages, placement="loop",
                     step_time=None if m.makespan is None else m.makespan * TIME_QUANTUM,
                     bubble_fraction=m.bubble_fraction,
                     peak_memory=tuple(math.ceil(d.peak_memory) for d in m.devices),
                     schedule=schedule, profile=profile)
    framework = f"{schedule.metadata.get('framework')} {schedule.metadata.get('version')}"
    if report.is_valid:
        return base
    if report.verdict.name != "INVALID":
        return replace(base, status="invalid", reason=f"the check on {framework}'s loop is not conclusive: "
                                                      f"{report.verdict.name.lower()}")
    codes = set(report.codes())
    if codes == {"SV601"}:
        worst = max(range(len(base.peak_memory)), key=base.peak_memory.__getitem__)
        return replace(base, status="over memory", reason=f"device {worst} needs more than the limit")
    first = next(v for v in report.violations if v.code.code != "SV601")
    status = "hangs" if first.code.code[:3] in ("SV4", "SV5") else "invalid"
    return replace(base, status=status, reason=f"on {framework}'s loop: {first.code.code} {first.message}")


def framework_plan(framework: str, source: StageSource, devices: int, microbatches: int, *,
                   memory_limit: int | None = None, chunks: Sequence[int] = (2,), layers: int | None = None,
                   families: Sequence[str] | None = None, search_time: float | None = 10.0,
                   notes: Sequence[str] = (), torch: str | None = None) -> Plan:
    """The plan of ``framework`` (one of :data:`FRAMEWORKS`): only what it can run, each checked
    with its own semantics.  ``layers``: the model's layers (Megatron needs them to divide over
    PP x V).  A :class:`UsageError` names the framework's rule when it can run nothing at these
    sizes (or, for torchtitan 0.3.0, on this PyTorch release)."""
    if framework not in FRAMEWORKS:
        raise UsageError(f"plan --framework {framework!r}: expected one of {', '.join(FRAMEWORKS)}")
    for key, value in (("devices", devices), ("microbatches", microbatches)):
        if type(value) is not int or value < 1:
            raise UsageError(f"plan: {key} must be a whole number >= 1, got {value!r}")
    if framework == "torchtitan":
        return _torchtitan_plan(source, devices, microbatches, memory_limit=memory_limit, chunks=chunks,
                                families=families, search_time=search_time, notes=notes, torch=torch)
    if families is not None:
        raise UsageError(f"plan --framework {framework}: --families chooses among schedverify's families; "
                         f"{framework} runs only its own schedules")
    variants = (_megatron_variants(devices, microbatches, chunks, layers) if framework == "megatron"
                else _deepspeed_variants(devices, microbatches))
    found: list[Candidate] = []
    for name, options, built in variants:
        if isinstance(built, str):
            found.append(Candidate(name, options, "refused", built))
            continue
        try:
            profile = _own_buffers(_profile_for(source, built.stages, False), framework)  # both run B whole
        except SchedverifyError as e:
            found.append(Candidate(name, options, "refused", str(e), stages=built.stages))
            continue
        found.append(evaluate(built, profile, memory_limit, name=name, options=options))
    if all(c.status == "refused" for c in found):
        raise UsageError(f"plan --framework {framework}: it can run nothing at {devices} devices and "
                         f"{microbatches} microbatches: {_common_reason(found)}")
    order = {"fits": 0, "hangs": 1, "over memory": 2, "invalid": 3, "refused": 4}
    ranked = sorted(found, key=lambda c: (order[c.status], c.step_time if c.step_time is not None
                                          else float("inf"), c.peak or 0))
    result = Plan(devices, microbatches, memory_limit, tuple(ranked), tuple(notes))
    win = result.winner
    if win is not None and win.profile is not None:
        result = replace(result, notes=result.notes + tuple(n for n in win.profile.notes if n not in notes))
    return result


def _torchtitan_plan(source: StageSource, devices: int, microbatches: int, *, memory_limit, chunks, families,
                     search_time, notes, torch) -> Plan:
    from ..lint import TORCHTITAN_RELEASES, _release_tuple
    from ..releases import installed_torch, release

    titan = TORCHTITAN_RELEASES[TORCHTITAN]
    rel, why = release(torch, installed=installed_torch() if torch is None else None)
    if titan.step_needs_torch and _release_tuple(rel.version) < _release_tuple(titan.step_needs_torch):
        raise UsageError(f"plan --framework torchtitan: torchtitan {titan.version} calls pp_schedule.step(arg_mbs=..., "
                         f"kwarg_mbs=..., target_mbs=...), which PyTorch {rel.version} ({why}) does not take "
                         f"(lint SV721); plan with --torch {titan.step_needs_torch} or later")
    result = plan(source, devices, microbatches, memory_limit=memory_limit, families=families, chunks=chunks,
                  search_time=search_time, notes=notes, torch=torch)
    runs = tuple(c for c in result.candidates if c.status != "cannot run"  # whatever its memory or hang:
                 and (c.schedule is None or torchtitan_refusal(c.schedule, c.placement) is None))
    left = len(result.candidates) - len(runs)
    if not runs:
        raise UsageError(f"plan --framework torchtitan: torchtitan {titan.version} can run none of the schedules "
                         f"at {devices} devices and {microbatches} microbatches: {_common_reason(result.candidates)}")
    extra = (f"{left} schedule{'s' if left != 1 else ''} torchtitan {titan.version} cannot run left out "
             "(plan without --framework lists them)",) if left else ()
    return replace(result, candidates=runs, notes=result.notes + extra)


def arguments(framework: str, c: Candidate, *, microbatches: int, layers: int | None = None,
              written: str | None = None) -> list[str]:
    """What ``framework`` needs to run candidate ``c``: its command-line arguments or
    configuration, one line each, in the framework's own names."""
    if framework == "torchtitan":
        from .torchtitan import flags

        csv = written or "FILE.csv (give -o FILE.csv)"
        return [flags(c, csv) + f" --parallelism.pipeline_parallel_degree {len(c.peak_memory)}",
                f"torchtitan {TORCHTITAN}: --training.disable_cuda_graphs (it refuses pipeline parallelism "
                "with CUDA graphs), on PyTorch 2.14 or later; training.local_batch_size / "
                f"parallelism.pipeline_parallel_microbatch_size = {microbatches}"]
    s = c.schedule
    if s is None:
        raise UsageError(f"{c.label} has no schedule ({c.status})")
    pp = s.devices
    if framework == "megatron":
        vpp = s.stages // pp
        args = [f"--pipeline-model-parallel-size {pp}"]
        if vpp > 1:
            config = s.metadata.get("config", {})
            args.append(f"--num-layers-per-virtual-pipeline-stage {layers // (pp * vpp)}" if layers is not None
                        else f"--num-virtual-stages-per-pipeline-rank {vpp}")
            args.append(f"--microbatch-group-size-per-vp-stage {config.get('microbatch_group_size_per_vp_stage', pp)}")
            if not config.get("overlap_p2p_comm"):
                args.append("--no-overlap-p2p-communication")
        if layers is not None:
            args.insert(0, f"--num-layers {layers}")
        return ["megatron: " + " ".join(args),
                f"  and --global-batch-size = --micro-batch-size x data-parallel size x {microbatches} "
                f"(num_microbatches = {microbatches}); "
                + ("overlap_p2p_comm is Megatron-LM's default" if vpp > 1 and s.metadata.get("config", {})
                   .get("overlap_p2p_comm") else "batch_p2p_comm, megatron-core's default")]
    return [f"deepspeed: PipelineModule(layers=..., num_stages={pp}) and, in the DeepSpeed config, "
            f"gradient_accumulation_steps = {microbatches} (train_batch_size = train_micro_batch_size_per_gpu "
            f"x {microbatches} x data-parallel size); engine.train_batch() runs TrainSchedule"]
