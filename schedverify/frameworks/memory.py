"""Memory in the terms of the framework a schedule's metadata names: what its engine or loop
holds per stage, counted along the schedule's own order, and the activation peak in bytes
when a model is given (:func:`schedverify.plan.transformer.stage_activations`).

- **DeepSpeed, TrainSchedule** (``deepspeed/runtime/pipe/engine.py``, 0.19.8):
  ``_exec_schedule`` calls ``_reserve_pipe_buffers(num_pipe_buffers())``, which reserves that
  many empty slots in each of ``pipe_buffers['inputs']``, ``['labels']``, ``['outputs']`` and
  ``['output_tensors']`` and allocates no tensor.  Microbatch ``m`` uses slot ``m %
  num_pipe_buffers``.  ``inputs`` holds the received activation from ``RecvActivation`` to
  ``SendGrad``, which frees it; on the first stage the loaded batch, which nothing frees (the
  next ``LoadMicroBatch`` into the slot replaces it).  ``outputs`` holds the forward's output
  from ``ForwardPass`` to ``BackwardPass``, which frees it, except on the last stage, whose
  ``_exec_backward_pass`` returns after ``backward(self.loss)``: its outputs stay until the
  slot is reused.  In flight: a microbatch from its ``ForwardPass`` to the end of its
  ``BackwardPass``, while autograd keeps its activations.
- **DeepSpeed, DualPipeVSchedule** (``dualpipev.py``): ``num_pipe_buffers() = 2 *
  micro_batches``, one slot per (phase, microbatch), never reused in a step; in flight per
  phase as above.
- **Megatron** (``megatron/core/pipeline_parallel/schedules.py``, 0.19.2): per model chunk,
  the loop's ``output_tensors[chunk]`` holds the microbatches in flight (appended after each
  ``forward_step``, popped before each ``backward_step``): the activation peak.
  ``input_tensors[chunk]`` of the interleaved loop also holds the inputs received ahead of
  their forward (appended when the receive is posted; the first rank's first chunk appends
  ``None`` before its forward); the loop without interleaving appends each input with its
  output, so its list is as long as ``output_tensors``.

Peaks are counted with the popped entry still held: a list's peak is its length just before
the pop (the real loop's ``len()``; the test tier holds them equal).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..grammar import RECV_F, SEND_B, Action, B, F

__all__ = ["DeviceMemory", "FrameworkMemory", "StageMemory", "memory"]


@dataclass(frozen=True)
class StageMemory:
    """One stage of a device (a DeepSpeed stage or DualPipeV phase, a Megatron model chunk):
    its peak in flight and the peak of each framework-named holder (``held``)."""

    stage: int
    in_flight: int
    held: tuple[tuple[str, int], ...]

    def to_json(self) -> dict[str, Any]:
        return {"stage": self.stage, "in_flight": self.in_flight, **dict(self.held)}


@dataclass(frozen=True)
class DeviceMemory:
    """One device (rank): its slots per holder (DeepSpeed's ``num_pipe_buffers``, None for
    Megatron's lists), its stages, the peak over the order of its stages' sum in flight and
    held, and the activation peak in bytes (None without a model)."""

    device: int
    buffers: int | None
    stages: tuple[StageMemory, ...]
    in_flight: int
    held: tuple[tuple[str, int], ...]
    activation_bytes: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {"device": self.device, "num_pipe_buffers": self.buffers, "in_flight": self.in_flight,
                **dict(self.held), "activation_bytes": self.activation_bytes,
                "stages": [s.to_json() for s in self.stages]}


@dataclass(frozen=True)
class FrameworkMemory:
    """What :func:`memory` gives: the framework, release and engine or loop, per device."""

    framework: str
    version: str
    runs: str
    devices: tuple[DeviceMemory, ...]

    def to_json(self) -> dict[str, Any]:
        return {"framework": self.framework, "version": self.version, "runs": self.runs,
                "devices": [d.to_json() for d in self.devices]}

    def lines(self) -> list[str]:
        """The report's lines: one head, one per device."""
        from ..units import format_bytes

        deepspeed = self.devices and self.devices[0].buffers is not None
        who = "stage" if self.runs == "TrainSchedule" else "rank"
        out = [f"{self.framework} {self.version} {self.runs} memory, peaks: "
               + ("num_pipe_buffers (slots reserved), microbatches in flight (ForwardPass to BackwardPass), "
                  "slots holding inputs and outputs" if self.runs == "TrainSchedule" else
                  "num_pipe_buffers (slots reserved), microbatches in flight per phase" if deepspeed else
                  "len() of the loop's lists per rank (per model chunk)")]
        for d in self.devices:
            parts = [f"{d.buffers} num_pipe_buffers" if d.buffers is not None else "",
                     f"{d.in_flight} in flight" if deepspeed else ""]
            parts += [f"{name} {n}" for name, n in d.held]
            text = ", ".join(p for p in parts if p)
            if len(d.stages) > 1:
                text += " (" + "; ".join(f"{'phase' if deepspeed else 'chunk'} {k}: " + ", ".join(
                    ([f"{s.in_flight} in flight"] if deepspeed else []) + [f"{name} {n}" for name, n in s.held])
                    for k, s in enumerate(d.stages)) + ")"
            if d.activation_bytes is not None:
                text += f"; activations {format_bytes(d.activation_bytes)}"
            out.append(f"  {who} {d.device}: {text}")
        return out


def _flat(order) -> list[Action]:
    """The order's actions one by one: a BATCH's operations and an OVERLAP's F then B."""
    out: list[Action] = []
    for a in order:
        if a is None:
            continue
        if a.sub:
            out.extend(_flat(a.sub))
        else:
            out.append(a)
    return out


class _Peaks:
    """Peaks of per-stage counts and of their sums (weighted: bytes) over one device's order."""

    def __init__(self, names, weights=None):
        self.names, self.weights = names, weights
        self.now: dict[str, dict[int, set]] = {n: {} for n in names}
        self.stage_peak: dict[tuple[str, int], int] = {}
        self.sum_peak = dict.fromkeys(names, 0)
        self.bytes_peak = 0

    def add(self, name: str, stage: int, key) -> None:
        self.now[name].setdefault(stage, set()).add(key)
        held = len(self.now[name][stage])
        self.stage_peak[(name, stage)] = max(self.stage_peak.get((name, stage), 0), held)
        self.sum_peak[name] = max(self.sum_peak[name], sum(len(s) for s in self.now[name].values()))
        if self.weights is not None and name == self.names[0]:
            total = sum(len(s) * self.weights[st] for st, s in self.now[name].items())
            self.bytes_peak = max(self.bytes_peak, total)

    def drop(self, name: str, stage: int, key) -> None:
        self.now[name].get(stage, set()).discard(key)

    def stage(self, name: str, stage: int) -> int:
        return self.stage_peak.get((name, stage), 0)


def _deepspeed_train(schedule, device: int, weights) -> DeviceMemory:
    from .deepspeed import num_pipe_buffers

    stages, m = schedule.stages, schedule.microbatches
    nbuf = num_pipe_buffers(m, stages, device)
    first, last = device == 0, device == stages - 1
    p = _Peaks(("in_flight", "inputs", "outputs"), weights)
    for a in _flat(schedule.order[device]):
        if a.stage != device or a.microbatch is None:
            continue
        slot = a.microbatch % nbuf

        def put(name: str, slot: int = slot) -> None:  # the slot's tensor replaced: one per slot
            p.drop(name, device, slot)
            p.add(name, device, slot)

        if a.kind == RECV_F and not first:
            put("inputs")
        elif a.kind == F:
            if first:  # LoadMicroBatch, in the same step before ForwardPass
                put("inputs")
            p.add("in_flight", device, a.microbatch)
            put("outputs")
        elif a.kind == B:
            p.drop("in_flight", device, a.microbatch)
            if not last:
                p.drop("outputs", device, slot)
        elif a.kind == SEND_B and not first:
            p.drop("inputs", device, slot)
    held = (("inputs", p.stage("inputs", device)), ("outputs", p.stage("outputs", device)))
    return DeviceMemory(device, nbuf, (StageMemory(device, p.stage("in_flight", device), held),),
                        p.sum_peak["in_flight"], held, None if weights is None else p.bytes_peak)


def _in_flight_only(schedule, device: int, weights, buffers: int | None, lists: bool) -> DeviceMemory:
    """In flight per stage (DualPipeV's phases; Megatron's ``output_tensors``), and for the
    interleaved Megatron loop ``input_tensors``: from the receive (or the forward) to the
    backward."""
    names = ("output_tensors", "input_tensors") if lists else ("in_flight",)
    interleaved = lists and schedule.stages > schedule.devices
    p = _Peaks(names, weights)
    own: set[int] = set()
    for a in _flat(schedule.order[device]):
        if a.stage is None or a.microbatch is None:
            continue
        key = a.microbatch
        if a.kind == F:
            own.add(a.stage)
            if interleaved:
                p.add("input_tensors", a.stage, key)
            p.add(names[0], a.stage, key)
            if lists and not interleaved:
                p.add("input_tensors", a.stage, key)
        elif a.kind == B:
            for n in names:
                p.drop(n, a.stage, key)
        elif a.kind == RECV_F and interleaved:
            own.add(a.stage)
            p.add("input_tensors", a.stage, key)
    if lists:
        parts = tuple(StageMemory(s, p.stage(names[0], s), tuple((n, p.stage(n, s)) for n in names))
                      for s in sorted(own))
        held = tuple((n, p.sum_peak[n]) for n in names)
    else:
        parts = tuple(StageMemory(s, p.stage(names[0], s), ()) for s in sorted(own))
        held = ()
    return DeviceMemory(device, buffers, parts, p.sum_peak[names[0]], held,
                        None if weights is None else p.bytes_peak)


def memory(schedule, model=None, *, calibration=None) -> FrameworkMemory | None:
    """Memory of ``schedule`` in the terms of the framework its metadata names (see the
    module docstring), or None when it names none that this models.  ``model``
    (:class:`schedverify.plan.transformer.TransformerModel`) adds each device's activation
    peak in bytes: the peak over its order of the sum, over its stages in flight, of that
    stage's activation per microbatch (:func:`~schedverify.plan.transformer.stage_activations`
    cut into the schedule's stages).  Raises :class:`UsageError` when the model cannot be cut
    so."""
    from ..releases import deepspeed as ds_release
    from ..releases import megatron as mg_release

    meta = schedule.metadata or {}
    framework = meta.get("framework")
    if framework not in (ds_release.FRAMEWORK, mg_release.FRAMEWORK):
        return None
    weights = None
    if model is not None:
        from ..plan.transformer import stage_activations

        weights = stage_activations(model, schedule.stages, calibration=calibration)
    version = str(meta.get("version", ""))
    devices = range(min(schedule.devices, len(schedule.order)))
    if framework == ds_release.FRAMEWORK:
        runs = str(meta.get("schedule", "TrainSchedule"))
        if runs == "DualPipeVSchedule":
            rows = tuple(_in_flight_only(schedule, d, weights, 2 * schedule.microbatches, False) for d in devices)
        else:
            if schedule.stages != schedule.devices:
                return None
            rows = tuple(_deepspeed_train(schedule, d, weights) for d in devices)
        return FrameworkMemory(framework, version, runs, rows)
    runs = str(meta.get("loop", "forward_backward_pipelining"))
    rows = tuple(_in_flight_only(schedule, d, weights, None, True) for d in devices)
    return FrameworkMemory(framework, version, runs, rows)
