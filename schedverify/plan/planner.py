"""The planner: every family that fits the sizes, and the search engine's optimum, under one
run's real costs and memory limit, ranked by predicted step time.

A candidate is judged in three steps, each by an engine the rest of schedverify already
trusts:

1. **generated** by its family's generator at the run's sizes (a family whose domain excludes
   them is refused with the generator's own rule), and the stage profile asked for the number
   of stages it needs (a model that cannot be cut that way, or a measurement of another
   number of stages, refuses it);
2. **timed and sized** by the checker under eager semantics with the profile's costs (time in
   whole microseconds, see :data:`TIME_QUANTUM`), memory in bytes and the memory limit: its
   makespan is the predicted step time of the pipeline (forward and backward passes only: the
   optimizer step and data-parallel gradient reduction come on top), its per-device peak the
   memory it needs;
3. **run as torchtitan runs it**: lowered to SEND/RECV by the chosen PyTorch release's own
   lowering (:func:`schedverify.lowering.torch_lowering`, what ``_load_csv`` does to a
   compute-only CSV; default the installed release) and checked under ``torch-nccl``
   semantics (docs/spec.md 8, 9), with what its pending sends hold (the profile's
   ``message``): its peak there is the memory it needs.  A schedule that would hang on NCCL,
   that PyTorch cannot lower, or that the lowering's sends take over the limit, is never
   the winner.

The winner is the fastest candidate that fits and runs; :func:`schedverify.plan.torchtitan.export`
writes it as the CSV torchtitan reads.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..errors import LoweringError, SchedverifyError, UsageError
from ..model import Schedule
from .sources import StageSource
from .stages import TIME_QUANTUM, StageProfile, quantized  # noqa: F401 - quantized re-exported



#: The search engine's shapes a plan tries: (placement, chunks per device).
SEARCH_SHAPES: tuple[tuple[str, int], ...] = (("loop", 1), ("v", 2))


@dataclass(frozen=True)
class Candidate:
    """One schedule the plan considered, and what became of it.

    ``status``: ``fits`` (within the memory limit and runs under torchtitan's lowering on
    NCCL), ``over memory``, ``hangs`` (PyTorch's lowering of it deadlocks on NCCL), ``cannot
    run`` (torchtitan or PyTorch's lowering refuses it: a stage on two ranks, a placement
    torchtitan does not build, ...),
    ``invalid`` (the checker found a violation other than memory) or ``refused`` (not
    generated at these sizes, or no stage profile for its stage count); ``reason`` says why in
    words.  Times are seconds and memory bytes.
    """

    name: str
    options: dict[str, Any]
    status: str
    reason: str = ""
    stages: int | None = None
    placement: str | None = None
    step_time: float | None = None
    bubble_fraction: float | None = None
    peak_memory: tuple[int, ...] = ()
    search: dict[str, Any] | None = None
    schedule: Schedule | None = field(default=None, repr=False, compare=False)
    profile: StageProfile | None = field(default=None, repr=False, compare=False)

    @property
    def label(self) -> str:
        """The family and its options (one chunk, the plain shape, left out)."""
        shown = ", ".join(f"{k}={v}" for k, v in self.options.items() if (k, v) != ("chunks", 1))
        return f"{self.name} ({shown})" if shown else self.name

    @property
    def fits(self) -> bool:
        return self.status == "fits"

    @property
    def peak(self) -> int | None:
        return max(self.peak_memory) if self.peak_memory else None

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "options": dict(self.options), "status": self.status,
                "reason": self.reason, "stages": self.stages, "placement": self.placement,
                "step_time_s": self.step_time, "bubble_fraction": self.bubble_fraction,
                "peak_memory_bytes": list(self.peak_memory), "search": self.search}


@dataclass(frozen=True)
class Plan:
    """A ranked list of candidates (fastest fitting first, then the rest) for one run."""

    devices: int
    microbatches: int
    memory_limit: int | None
    candidates: tuple[Candidate, ...]
    notes: tuple[str, ...] = ()

    @property
    def winner(self) -> Candidate | None:
        return next((c for c in self.candidates if c.fits), None)

    def to_json(self) -> dict[str, Any]:
        win = self.winner
        return {"devices": self.devices, "microbatches": self.microbatches,
                "memory_limit_bytes": self.memory_limit,
                "winner": None if win is None else win.label,
                "candidates": [c.to_json() for c in self.candidates], "notes": list(self.notes)}

    def _repr_html_(self) -> str:
        """Jupyter's view: the ranked table (:func:`schedverify.plan.table.plan_html`)."""
        from .table import plan_html

        return plan_html(self)


def family_variants(chunks: Sequence[int] = (2,),
                    families: Sequence[str] | None = None) -> list[tuple[str, dict[str, Any]]]:
    """(family, options) pairs a plan tries: each family once, and a family that takes
    ``chunks`` once per number of chunks given, and with one chunk too when it takes one."""
    from ..generators import FAMILIES, family

    names = list(FAMILIES) if families is None else [family(n).name for n in families]
    out: list[tuple[str, dict[str, Any]]] = []
    for name in names:
        fam = FAMILIES[name]
        if fam.chunks:
            wanted = sorted(v for v in {*chunks, 1} if v >= fam.min_chunks)
            out += [(name, {"chunks": v}) for v in wanted]
        else:
            out.append((name, {}))
    return out


def _profile_for(source: StageSource, stages: int, split_backward: bool) -> StageProfile:
    """The stage profile of a schedule of ``stages`` stages (``split_backward``: it runs I and
    W apart, which changes what PyTorch keeps on its receive buffers)."""
    if isinstance(source, StageProfile):
        if source.stages != stages:
            raise UsageError(f"the measured profile has {source.stages} stages; this schedule needs "
                             f"{stages}")
        return source
    return source(stages, split_backward)


def _splits(schedule: Schedule) -> bool:
    from ..model import I

    return any(x.kind == I for row in schedule.order for a in row if a is not None for x in a.leaves())


def evaluate(schedule: Schedule, profile: StageProfile, memory_limit: int | None, *, name: str,
             options: dict[str, Any], search: dict[str, Any] | None = None, torch: str | None = None) -> Candidate:
    """Steps 2 and 3 of the module docstring for one generated or searched schedule, on the
    PyTorch release ``torch`` (default: the installed one)."""
    from ..check import check
    from ..lowering import torch_lowering

    costs, memory = quantized(profile, memory_limit)
    report = check(schedule, costs=costs, memory=memory, comm_semantics="eager", max_violations=5)
    m = report.metrics
    placement = _placement_name(schedule)
    base = Candidate(name, options, "fits", stages=schedule.stages, placement=placement,
                     step_time=None if m.makespan is None else m.makespan * TIME_QUANTUM,
                     bubble_fraction=m.bubble_fraction,
                     peak_memory=tuple(math.ceil(d.peak_memory) for d in m.devices),  # whole bytes, never under
                     search=search, schedule=schedule, profile=profile)
    codes = set(report.codes())
    if codes - {"SV601"}:
        first = report.violations[0]
        return replace(base, status="invalid", reason=f"{first.code.code} {first.message}")
    if codes:
        worst = max(range(len(base.peak_memory)), key=base.peak_memory.__getitem__)
        return replace(base, status="over memory", reason=f"device {worst} needs more than the limit")
    refusal = torchtitan_refusal(schedule, placement)
    if refusal is not None:
        return replace(base, status="cannot run", reason=refusal)
    try:
        lowered = torch_lowering(schedule, torch=torch)
    except LoweringError as e:
        return replace(base, status="cannot run", reason=f"PyTorch's lowering refuses it: {e}")
    ran = check(lowered, costs=costs, memory=memory, comm_semantics="torch-nccl", torch=torch, max_violations=1)
    # what the lowered run holds: the activations, and what its pending sends hold (9.2)
    peaks = tuple(max(a, math.ceil(d.peak_memory)) for a, d in zip(base.peak_memory, ran.metrics.devices))
    if not ran.is_valid:
        v = ran.violations[0]
        if v.code.code == "SV601":
            worst = max(range(len(peaks)), key=peaks.__getitem__)
            return replace(base, status="over memory", peak_memory=peaks,
                           reason=f"device {worst} needs more than the limit once lowered: its pending sends hold "
                                  f"their tensors ({ran.profile.release.name})")
        return replace(base, status="hangs", reason=f"as torchtitan lowers it, on NCCL: {v.code.code} {v.message}")
    return replace(base, peak_memory=peaks)


def torchtitan_refusal(schedule: Schedule, placement: str | None) -> str | None:
    """Why torchtitan cannot run ``schedule`` from a CSV (the first error :func:`schedverify.lint.lint`
    finds with the schedule class that gives its placement), or None."""
    from ..lint import lint, torchtitan_schedule

    if schedule.placement.is_bidirectional:
        return "two routes put each stage on two ranks; torchtitan (like PyTorch's runtime) places a stage on one"
    cls = torchtitan_schedule(placement, schedule.stages // schedule.devices)
    if cls is None:
        return (f"torchtitan builds the 'loop' placement, or 'v' with 2 stages per rank; this schedule "
                f"has {placement or 'another'} placement with {schedule.stages // schedule.devices} per rank")
    from ..lint import TITAN_CUDA_GRAPHS, TITAN_TORCH_RELEASE

    release_rules = (TITAN_CUDA_GRAPHS, TITAN_TORCH_RELEASE)  # the release's, not the schedule's: the options say them
    errors = [f for f in lint(schedule, "torchtitan", pipeline_schedule=cls)
              if f.severity == "error" and f.code not in release_rules]
    return None if not errors else f"{errors[0].code.code} {errors[0].message}"


def _placement_name(schedule: Schedule) -> str | None:
    """'loop' or 'v' when the schedule's one route is that placement, else None."""
    from ..model import stage_devices

    if schedule.placement.is_bidirectional:
        return None
    route = schedule.placement.routes[0]
    for spec in ("loop", "v"):
        if route == stage_devices(spec, schedule.devices, schedule.stages):
            return spec
    return None


def plan(source: StageSource, devices: int, microbatches: int, *, memory_limit: int | None = None,
         families: Sequence[str] | None = None, chunks: Sequence[int] = (2,),
         search_time: float | None = 10.0, notes: Sequence[str] = (), torch: str | None = None) -> Plan:
    """Rank every family (and, unless ``search_time`` is None or 0, as ``--search-time 0``, the
    search engine's best schedule of each shape in :data:`SEARCH_SHAPES`, within ``search_time``
    seconds each) by predicted step time under ``source``'s costs and ``memory_limit`` bytes per
    device, as PyTorch release ``torch`` runs them (default: the installed one).

    A :class:`UsageError` when no schedule at all can be built for the sizes (more devices than
    the model has layers, say): that is the question, not the memory limit."""
    from ..limits import limits
    from ..releases import installed_torch, release

    release(torch, installed=installed_torch() if torch is None else None)  # an unknown release: refused first
    from ..generators import generate

    for key, value in (("devices", devices), ("microbatches", microbatches)):
        if type(value) is not int or value < 1:
            raise UsageError(f"plan: {key} must be a whole number >= 1, got {value!r}")
    if search_time is not None and (isinstance(search_time, bool) or not isinstance(search_time, (int, float))
                                    or not search_time >= 0):
        raise UsageError(f"plan: search_time must be a number of seconds >= 0 (0 or None skips the search), "
                         f"got {search_time!r}")
    if devices > limits().devices:
        raise UsageError(f"plan: {limits().refusal('devices', devices, 'devices')}")
    search_time = search_time or None
    found: list[Candidate] = []
    for name, options in family_variants(chunks, families):
        try:
            schedule = generate(name, devices, microbatches, **options)
            profile = _profile_for(source, schedule.stages, _splits(schedule))
        except SchedverifyError as e:
            found.append(Candidate(name, options, "refused", str(e)))
            continue
        found.append(evaluate(schedule, profile, memory_limit, name=name, options=options, torch=torch))
    if search_time is not None:
        found += [_searched(source, devices, microbatches, memory_limit, placement, v, search_time, torch)
                  for placement, v in SEARCH_SHAPES]
    if found and all(c.status == "refused" for c in found):
        raise UsageError(f"plan: no schedule can be built for {devices} devices and {microbatches} "
                         f"microbatches: {_common_reason(found)}")
    order = {"fits": 0, "hangs": 1, "cannot run": 2, "over memory": 3, "invalid": 4, "refused": 5}
    ranked = sorted(found, key=lambda c: (order[c.status], c.step_time if c.step_time is not None
                                          else float("inf"), c.peak or 0))
    plan = Plan(devices, microbatches, memory_limit, tuple(ranked), tuple(notes))
    win = plan.winner
    if win is not None and win.profile is not None:  # what the winner's numbers assume
        plan = replace(plan, notes=plan.notes + tuple(n for n in win.profile.notes if n not in notes))
    return plan


def _common_reason(refused: Sequence[Candidate]) -> str:
    """The reason most refusals give (without the family's name), and whose it is."""
    from collections import Counter

    def bare(c: Candidate) -> str:
        return c.reason.removeprefix(f"{c.name}: ")

    counts = Counter(bare(c) for c in refused)
    reason, _ = counts.most_common(1)[0]
    names = [c.label for c in refused if bare(c) == reason]
    return f"{reason} ({', '.join(names)})"


def _searched(source: StageSource, devices: int, microbatches: int, memory_limit: int | None,
              placement: str, chunks: int, seconds: float, torch: str | None = None) -> Candidate:
    """The search engine's best split-backward schedule of one shape, as a candidate."""
    from ..smt.search import search

    name, options = "search", {"placement": placement, "chunks": chunks}
    try:
        profile = _profile_for(source, devices * chunks, True)
    except SchedverifyError as e:
        return Candidate(name, options, "refused", str(e))
    costs, memory = quantized(profile, memory_limit)
    result = search(devices, microbatches, chunks=chunks, placement=placement, split_backward=True,
                    costs=costs, memory=memory, time_limit=seconds)
    info = {"status": result.status, "seconds": round(result.seconds, 2),
            "lower_bound_s": None if result.lower_bound is None else result.lower_bound * TIME_QUANTUM,
            "gap_s": None if result.gap is None else result.gap * TIME_QUANTUM}
    if result.schedule is None:
        reason = result.reason or f"nothing found in {seconds:g} s"
        return Candidate(name, options, "over memory" if result.status == "infeasible" else "refused",
                         reason, stages=devices * chunks, placement=placement, search=info)
    return evaluate(result.schedule, profile, memory_limit, name=name, options=options, search=info, torch=torch)

