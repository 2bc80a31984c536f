"""What torchtitan, Megatron-LM and PyTorch's runtime will refuse or mishandle, said before launch.

``check`` answers "is this schedule correct"; ``lint`` answers "will this framework run it as
written".  Each rule is one small function that yields :class:`Finding` values naming the
rule, what the framework does (quoting its own check) and the fix.  The rules read the
frameworks' source, cited where each rule is written:

- PyTorch 2.13, ``torch/distributed/pipelining/schedules.py``: the schedule classes'
  constructors (``Schedule1F1B``, ``ScheduleInterleaved1F1B``, ...), ``_validate_schedule``
  (what ``_load_csv`` runs) and ``_Action.from_str``.
- torchtitan, ``torchtitan/distributed/pipeline_parallel.py``: ``build_pipeline_schedule``
  (a CSV runs on ``_PipelineScheduleRuntime``, loaded with ``_load_csv(path)``, so as a
  compute-only schedule) and ``pipeline_module_split`` (which builds the stages on each
  rank from ``pipeline_parallel_schedule``, not from the CSV).
- torchtitan 0.3.0, ``torchtitan/trainer.py``: ``Trainer.Config._validate_cuda_graphs``
  (pipeline parallelism is refused unless ``training.disable_cuda_graphs``) and
  ``Trainer.pp_forward_backward_step`` (which calls ``step(arg_mbs=..., kwarg_mbs=...,
  target_mbs=...)``, parameters PyTorch's ``schedules.py`` has from 2.14); the releases
  modelled are in :data:`TORCHTITAN_RELEASES`.
- Megatron-LM, ``megatron/core/pipeline_parallel/schedules.py``
  (``forward_backward_pipelining_with_interleaving``) and ``megatron/training/arguments.py``
  (``validate_args``).

The codes (SV7xx) are registered once in :data:`LINT_CODES`, apart from
:data:`schedverify.diagnostics.CODES`: those are the violations ``check`` reports (each with
its crafted-schedule test); these are properties of a framework, not of the schedule.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from .diagnostics import Code, register
from .errors import InputError, UsageError
from .io.actions import LEGACY_HINT, check_grammar
from .model import B, COMPUTE_KINDS, I, KIND_CODE, OVERLAP_F_B, W, Schedule, as_schedule, leaf_rows, stage_devices

__all__ = ["LINT_CODES", "TARGETS", "TORCHTITAN_RELEASES", "Finding", "TorchtitanRelease", "lint", "lint_file",
           "looks_legacy", "torchtitan_release", "torchtitan_schedule"]

#: The frameworks a schedule can be linted for.
TARGETS = ("torchtitan", "megatron", "pytorch")

LINT_CODES: dict[str, Code] = {}


def _register(code: str, slug: str, targets: str, description: str) -> Code:
    return register(LINT_CODES, code, slug, f"lint: {targets}", description)


TOO_FEW_MICROBATCHES = _register(
    "SV701", "too-few-microbatches", "pytorch, torchtitan",
    "Fewer microbatches than stages: PyTorch's Schedule1F1B and ScheduleDualPipeV raise "
    "ValueError; torchtitan warns that the pipeline will have a bubble.")
INTERLEAVED_ROUNDS = _register(
    "SV702", "interleaved-rounds", "pytorch",
    "PyTorch's ScheduleInterleaved1F1B and ScheduleInterleavedZeroBubble raise ValueError "
    "unless M is a multiple of its number of rounds, max(1, M // D).")
STAGES_PER_RANK = _register(
    "SV703", "stages-per-rank", "pytorch",
    "The number of stages per rank is not what the schedule class takes: ZBVZeroBubble and "
    "DualPipeV take exactly 2, the single-stage classes (1F1B, GPipe) 1.")
STAGE_ON_SEVERAL_RANKS = _register(
    "SV704", "stage-on-several-ranks", "pytorch, torchtitan",
    "A stage's actions sit on more than one rank (a bidirectional schedule): PyTorch's "
    "_validate_schedule raises 'Stage s is assigned to both rank ...'.")
PLACEMENT_MISMATCH = _register(
    "SV705", "placement-mismatch", "torchtitan",
    "The CSV puts a stage on a rank where torchtitan does not build it, or has another number "
    "of stages per rank: torchtitan builds the stages by pipeline_parallel_schedule (v for "
    "ZBVZeroBubble and DualPipeV, else loop; 1 per rank for 1F1B and GPipe, else 2), whatever "
    "the CSV says.")
LEGACY_GRAMMAR = _register(
    "SV706", "legacy-grammar", "pytorch, torchtitan",
    "The CSV is in PyTorch's action grammar before 2.6 (B = input gradient, BW = full "
    "backward): PyTorch 2.13 reads B as the full backward and BW as a B without microbatch.")
NOT_COMPUTE_ONLY = _register(
    "SV707", "not-compute-only", "torchtitan",
    "The CSV lists communication or bookkeeping actions: torchtitan loads a CSV as "
    "compute-only and PyTorch raises 'Expected compute-only schedule but found "
    "communication action'.")
RELEASE_DIALECT = _register(
    "SV708", "release-dialect", "pytorch, torchtitan",
    "A compute+comms CSV written for another PyTorch release than the one that will run it: a "
    "2.15 CSV (WAIT_SEND_F, WAIT_SEND_B, WAIT_REDUCE_GRAD) on 2.13 or 2.14, whose _Action.from_str "
    "reads 0WAIT_SEND_F1 as 0W; or a 2.13/2.14 CSV (sends waited at the end of the step) on 2.15, "
    "which refuses a send without its WAIT_SEND and a REDUCE_GRAD without its WAIT_REDUCE_GRAD.")
TITAN_CUDA_GRAPHS = _register(
    "SV720", "torchtitan-cuda-graphs", "torchtitan",
    "torchtitan 0.3.0 captures the forward+backward step in a CUDA graph unless "
    "training.disable_cuda_graphs is set, and its Trainer.Config._validate_cuda_graphs raises "
    "ValueError for pipeline_parallel_degree > 1 ('CUDA graphs do not support pipeline "
    "parallelism yet. Set --training.disable_cuda_graphs.').")
TITAN_TORCH_RELEASE = _register(
    "SV721", "torchtitan-torch-release", "torchtitan",
    "torchtitan 0.3.0's Trainer.pp_forward_backward_step calls schedule.step(arg_mbs=..., "
    "kwarg_mbs=..., target_mbs=...); PyTorch's step() takes those parameters from 2.14 on, and "
    "2.13's gives them to the model's forward as keyword arguments (its **kwargs), with no target.")
MEGATRON_PLACEMENT = _register(
    "SV710", "megatron-placement", "megatron",
    "Megatron-LM's interleaved schedule holds model chunk c of pipeline rank d as stage "
    "c*PP + d (a loop placement); it cannot run a V-shaped or bidirectional placement.")
MEGATRON_GROUP_SIZE = _register(
    "SV711", "megatron-group-size", "megatron",
    "microbatch_group_size_per_vp_stage must lie in [PP, M]: Megatron-LM's interleaved "
    "schedule raises ValueError otherwise (so it needs M >= PP).")
MEGATRON_GROUP_REMAINDER = _register(
    "SV712", "megatron-group-remainder", "megatron",
    "M % microbatch_group_size_per_vp_stage must be 0 or at least PP: Megatron-LM's "
    "interleaved schedule raises RuntimeError otherwise (dependency bubbles).")
MEGATRON_LAYERS = _register(
    "SV713", "megatron-layers", "megatron",
    "The layers do not split evenly over PP ranks and VP virtual stages: Megatron-LM's "
    "validate_args asserts num_layers % PP == 0 and that each rank's layers divide by VP.")


@dataclass(frozen=True)
class Finding:
    """One thing a framework will refuse (``severity`` "error") or mishandle ("warning").

    ``code`` is the registered :class:`~schedverify.diagnostics.Code` (``code.code`` is
    ``"SV701"``); ``rule`` its slug; ``message`` what the framework does with this schedule,
    naming the values; ``fix`` what to change."""

    code: Code
    rule: str
    message: str
    fix: str
    severity: str = "error"

    def __str__(self) -> str:
        return f"{self.code.code} {self.rule} ({self.severity}): {self.message}\n  fix: {self.fix}"

    def to_json(self) -> dict[str, Any]:
        return {"code": self.code.code, "rule": self.rule, "severity": self.severity,
                "message": self.message, "fix": self.fix}


def _n(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "es" if word.endswith("h") else "s")


def _finding(code: Code, message: str, fix: str, severity: str = "error") -> Finding:
    return Finding(code, code.slug, message, fix, severity)


# ------------------------------------------------------------------ torchtitan's releases

@dataclass(frozen=True)
class TorchtitanRelease:
    """What one torchtitan release does with pipeline parallelism that the rules read.

    - ``cuda_graphs_refuse_pp``: ``Trainer.Config._validate_cuda_graphs`` (torchtitan/trainer.py,
      run by ``Trainer.Config.__post_init__`` and again in ``Trainer.__init__``) raises when
      ``training.disable_cuda_graphs`` is False (its default, torchtitan/config/configs.py
      ``Training``) and ``parallelism.pipeline_parallel_degree > 1``.
    - ``step_needs_torch``: the oldest PyTorch release whose ``step()`` takes the parameters
      ``Trainer.pp_forward_backward_step`` passes (``arg_mbs``, ``kwarg_mbs``, ``target_mbs``),
      or None when the release passes whole-batch inputs."""

    version: str
    cuda_graphs_refuse_pp: bool
    step_needs_torch: str | None


#: The torchtitan releases modelled, oldest first.  0.2.2's ``train.py`` calls
#: ``pp_schedule.step(inputs, target=labels, losses=...)`` and has no CUDA-graph capture;
#: 0.3.0's ``trainer.py`` has both rules (read from the wheels on PyPI).
TORCHTITAN_RELEASES: dict[str, TorchtitanRelease] = {
    r.version: r for r in (TorchtitanRelease("0.2.2", cuda_graphs_refuse_pp=False, step_needs_torch=None),
                           TorchtitanRelease("0.3.0", cuda_graphs_refuse_pp=True, step_needs_torch="2.14"))}


def torchtitan_release(version: str | None = None, *, installed: str | None = None) -> TorchtitanRelease | None:
    """The modelled torchtitan release ``version`` names (``"0.3.0"``; an unmodelled one is a
    :class:`UsageError`), or, when None, the installed torchtitan's (``installed``: its
    version, as package metadata gives it): None when torchtitan is not installed or its
    release is not modelled, and then no release-specific rule applies."""
    if version is not None:
        if not isinstance(version, str) or version.strip() not in TORCHTITAN_RELEASES:
            raise UsageError(f"--torchtitan {version!r}: not a modelled torchtitan release; modelled: "
                             f"{', '.join(TORCHTITAN_RELEASES)}")
        return TORCHTITAN_RELEASES[version.strip()]
    if installed is None:
        return None
    return TORCHTITAN_RELEASES.get(installed.split("+")[0])


def _release_tuple(text: str) -> tuple[int, ...]:
    m = re.match(r"(\d+)\.(\d+)", text)
    return (int(m.group(1)), int(m.group(2))) if m else ()


def _torchtitan_release_rules(s: Schedule, titan: TorchtitanRelease | None, disable_cuda_graphs: bool,
                              torch: str | None) -> Iterator[Finding]:
    """SV720 and SV721: what ``titan`` refuses whatever the schedule, once it pipelines
    (``pipeline_parallel_degree`` is the schedule's number of ranks)."""
    if titan is None or s.devices < 2:
        return
    if titan.cuda_graphs_refuse_pp and not disable_cuda_graphs:
        yield _finding(TITAN_CUDA_GRAPHS,
                       f"torchtitan {titan.version} with pipeline_parallel_degree = {s.devices} and "
                       "training.disable_cuda_graphs False (its default): Trainer.Config._validate_cuda_graphs "
                       "raises ValueError('CUDA graphs do not support pipeline parallelism yet. Set "
                       "--training.disable_cuda_graphs.') before training starts",
                       "pass --training.disable_cuda_graphs to torchtitan (or set "
                       "config.training.disable_cuda_graphs = True in the --config function); then lint "
                       "with --disable-cuda-graphs")
    if titan.step_needs_torch is not None:
        if torch is not None:
            from .releases import release

            have, why = release(torch)[0].version, f"--torch {torch}"
        else:
            from .releases import installed_torch

            installed = installed_torch()
            if installed is None:
                return
            have, why = installed, "the installed torch"
        if _release_tuple(have) < _release_tuple(titan.step_needs_torch):
            yield _finding(TITAN_TORCH_RELEASE,
                           f"torchtitan {titan.version}'s Trainer.pp_forward_backward_step calls "
                           "pp_schedule.step(arg_mbs=..., kwarg_mbs=..., target_mbs=...), and PyTorch "
                           f"{have} ({why}) has no such parameters: its step(*args, target=None, ..., "
                           "**kwargs) gives them, whole, to every microbatch's forward as keyword arguments, with no "
                           "target for the loss",
                           f"run torchtitan {titan.version} on PyTorch {titan.step_needs_torch} or later"
                           + "".join(f", or torchtitan {r.version} (whole-batch step())"
                                     for r in TORCHTITAN_RELEASES.values() if r.step_needs_torch is None))


# ------------------------------------------------------------------ the schedule, as the rules see it

#: PyTorch's class for each generated family (``schedule.metadata["family"]``); a schedule
#: of another family, or read from a file, runs as a CSV on ``_PipelineScheduleRuntime``.
_TORCH_CLASS = {"gpipe": "GPipe", "1f1b": "1F1B", "interleaved-1f1b": "Interleaved1F1B",
                "looped-bfs": "LoopedBFS", "zb-v": "ZBVZeroBubble", "dualpipe-v": "DualPipeV"}
#: ``get_schedule_class``'s names (PyTorch 2.13, matched case-insensitively), the ones that
#: take one stage per rank, and the ones torchtitan builds with the V placement.
TORCH_SCHEDULES = ("1F1B", "Interleaved1F1B", "GPipe", "LoopedBFS", "InterleavedZeroBubble",
                   "PipelineScheduleSingle", "PipelineScheduleMulti", "ZBVZeroBubble", "DualPipeV")
_SINGLE_STAGE = frozenset({"1F1B", "GPipe", "PipelineScheduleSingle"})
_V_STYLE = frozenset({"ZBVZeroBubble", "DualPipeV"})
_RUNTIME = "_PipelineScheduleRuntime"


def _schedule_name(name: str | None, where: str) -> str | None:
    if name is None:
        return None
    found = {k.lower(): k for k in TORCH_SCHEDULES}.get(name.lower()) if isinstance(name, str) else None
    if found is None:
        raise UsageError(f"{where}: unknown schedule {name!r}; PyTorch 2.13's get_schedule_class "
                         f"knows {', '.join(TORCH_SCHEDULES)}")
    return found


def _torch_class(schedule: Schedule) -> str:
    family = schedule.metadata.get("family")
    if family == "zb-h1" and schedule.stages > schedule.devices:
        return "InterleavedZeroBubble"
    return _TORCH_CLASS.get(family, _RUNTIME) if isinstance(family, str) else _RUNTIME


def _stage_ranks(schedule: Schedule) -> dict[int, set[int]]:
    """Each stage's ranks, from where its actions sit (what PyTorch's ``_validate_schedule``
    reads the mapping from)."""
    out: dict[int, set[int]] = {}
    for d, acts in enumerate(leaf_rows(schedule.order)):
        for a in acts:
            if a.stage is not None:
                out.setdefault(a.stage, set()).add(d)
    return out


def looks_legacy(schedule: Schedule) -> tuple[int, int] | None:
    """The first (stage, microbatch) that has a ``B`` and a ``W`` but no ``I``, or None.

    Today that pair is a mixed backward (SV203) and a ``W`` without its ``I`` (SV201); in
    PyTorch's grammar before 2.6 it was simply the input gradient then the weight gradient."""
    cols = schedule.columns
    if cols is not None and any(cols.codes.find(bytes((KIND_CODE[k],))) < 0 for k in (B, W)):
        return None  # plain actions as columns, and no B or no W at all: no Action made to see it
    kinds: dict[tuple[int, int], set[str]] = {}
    for acts in leaf_rows(schedule.order):
        for a in acts:
            if a.kind in (B, I, W) and a.stage is not None and a.microbatch is not None:
                kinds.setdefault((a.stage, a.microbatch), set()).add(a.kind)
    for pair in sorted(kinds):
        if {B, W} <= kinds[pair] and I not in kinds[pair]:
            return pair
    return None


# ------------------------------------------------------------------ the rules

def _too_few_microbatches(s: Schedule, target: str, cls: str) -> Iterator[Finding]:
    M, S = s.microbatches, s.stages
    if M >= S:
        return
    if target == "pytorch" and cls in ("1F1B", "DualPipeV"):
        yield _finding(TOO_FEW_MICROBATCHES,
                       f"{_n(M, 'microbatch')} for {S} stages: PyTorch's Schedule{cls} raises ValueError "
                       f"(it needs at least as many microbatches as stages)",
                       f"use at least {S} microbatches (a larger batch or a smaller microbatch)")
    elif target == "torchtitan":
        yield _finding(TOO_FEW_MICROBATCHES,
                       f"{_n(M, 'microbatch')} for {S} stages: torchtitan's build_pipeline_schedule warns "
                       f"'Number of microbatches ({M}) is less than the total number of stages ({S}) "
                       "which may result in a bubble'; every stage idles while the pipeline fills",
                       f"use at least {S} microbatches: training.local_batch_size / "
                       f"parallelism.pipeline_parallel_microbatch_size >= {S}", severity="warning")


def _interleaved_rounds(s: Schedule, cls: str) -> Iterator[Finding]:
    if cls not in ("Interleaved1F1B", "InterleavedZeroBubble"):
        return
    M, D = s.microbatches, s.devices
    rounds = max(1, M // D)
    if M % rounds:
        ok = [m for m in range(max(1, M - D), M + D + 1) if m % max(1, m // D) == 0]
        near = min(ok, key=lambda m: (abs(m - M), m))
        yield _finding(INTERLEAVED_ROUNDS,
                       f"PyTorch's Schedule{cls} raises ValueError: {M} microbatches on {D} ranks make "
                       f"max(1, {M} // {D}) = {rounds} rounds, and {M} is not a multiple of {rounds}",
                       f"use a number of microbatches that is a multiple of its rounds, such as {near} "
                       f"(any multiple of {D} works)")


def _stages_per_rank(s: Schedule, cls: str) -> Iterator[Finding]:
    V, rest = divmod(s.stages, s.devices)
    if cls in _V_STYLE and (V != 2 or rest):
        yield _finding(STAGES_PER_RANK,
                       f"PyTorch's Schedule{cls} takes exactly 2 stages per rank; this schedule has "
                       f"{s.stages} stages on {s.devices} ranks",
                       f"use {2 * s.devices} stages ({s.devices} ranks x 2), or a loop schedule")
    elif cls in _SINGLE_STAGE and s.stages != s.devices:
        yield _finding(STAGES_PER_RANK,
                       f"{cls} is a single-stage schedule (PipelineScheduleSingle: one stage per rank); "
                       f"this schedule has {s.stages} stages on {s.devices} ranks",
                       "use a multi-stage schedule class (Interleaved1F1B, LoopedBFS, "
                       "InterleavedZeroBubble, ZBVZeroBubble, DualPipeV)")


def _several_ranks(ranks: dict[int, set[int]]) -> Iterator[Finding]:
    shared = {st: sorted(r) for st, r in sorted(ranks.items()) if len(r) > 1}
    if shared:
        st, r = next(iter(shared.items()))
        more = f" (and {len(shared) - 1} more stages)" if len(shared) > 1 else ""
        yield _finding(STAGE_ON_SEVERAL_RANKS,
                       f"stage {st} has actions on ranks {', '.join(map(str, r))}{more}: PyTorch's "
                       f"_validate_schedule raises 'Stage {st} is assigned to both rank {r[1]} and "
                       f"rank {r[0]}' (each stage lives on one rank)",
                       "a bidirectional schedule (DualPipe, Chimera) needs two copies of each stage; "
                       "on PyTorch use a single-route one such as dualpipe-v (ScheduleDualPipeV)")


def _torchtitan_placement(s: Schedule, ranks: dict[int, set[int]], titan_schedule: str) -> Iterator[Finding]:
    """torchtitan's ``pipeline_module_split`` builds stage ``s`` on the rank that the style of
    ``pipeline_parallel_schedule`` gives (v for ZBVZeroBubble and DualPipeV, else loop), with
    one stage per rank for a single-stage class and two otherwise (unless
    ``pipeline_parallel_layers_per_stage`` sets another count); ``_load_csv`` then takes the
    stage -> rank map from the CSV, so a stage the CSV puts elsewhere is on no rank."""
    if any(len(r) > 1 for r in ranks.values()):
        return  # SV704 says it
    D, S = s.devices, s.stages
    actual = {st: next(iter(r)) for st, r in ranks.items() if 0 <= st < S}
    suggestion = _titan_suggestion(actual, D, S)
    if S % D:
        yield _finding(PLACEMENT_MISMATCH,
                       f"{S} stages on {D} ranks: torchtitan asserts 'num_stages {S} must be evenly "
                       f"divisible by pp_degree {D}'",
                       f"use a multiple of {D} stages")
        return
    per_rank = S // D
    style = "v" if titan_schedule in _V_STYLE else "loop"
    expected_v = 1 if titan_schedule in _SINGLE_STAGE else 2
    more_loop = style == "loop" and expected_v == 2 and per_rank > 2  # with layers_per_stage: a warning below
    if per_rank != expected_v and not more_loop:
        yield _finding(PLACEMENT_MISMATCH,
                       f"the CSV has {per_rank} stage{'s' if per_rank > 1 else ''} per rank, but with "
                       f"pipeline_parallel_schedule={titan_schedule} torchtitan builds {expected_v}",
                       suggestion)
        return
    where = stage_devices(style, D, S)
    wrong = [st for st in sorted(actual) if actual[st] != where[st]]
    if wrong:
        st = wrong[0]
        yield _finding(PLACEMENT_MISMATCH,
                       f"the CSV runs stage {st} on rank {actual[st]}, but with "
                       f"pipeline_parallel_schedule={titan_schedule} torchtitan builds it on rank "
                       f"{where[st]} (placement {style!r}; {len(wrong)} of {S} stages differ): the "
                       f"rank that runs its actions does not hold it",
                       suggestion)
    elif more_loop:
        yield _finding(PLACEMENT_MISMATCH,
                       f"the CSV has {per_rank} stages per rank; torchtitan builds 2 unless "
                       "parallelism.pipeline_parallel_layers_per_stage gives more",
                       f"set parallelism.pipeline_parallel_layers_per_stage so that the model splits "
                       f"into {S} stages", severity="warning")


def _titan_suggestion(actual: dict[int, int], D: int, S: int) -> str:
    V = S // D if S % D == 0 else 0
    for style in ("loop", "v"):
        if V and all(stage_devices(style, D, S)[st] == d for st, d in actual.items()):
            if style == "v":
                if V == 2:
                    return ("set --parallelism.pipeline_parallel_schedule ZBVZeroBubble (or DualPipeV) "
                            "next to the CSV: torchtitan builds the 'v' placement only for those")
                return "torchtitan builds the 'v' placement with exactly 2 stages per rank: regenerate it so"
            if V == 1:
                return ("set --parallelism.pipeline_parallel_schedule 1F1B (or GPipe) next to the CSV: "
                        "one stage per rank, placement 'loop'")
            return ("set --parallelism.pipeline_parallel_schedule Interleaved1F1B (or LoopedBFS, "
                    "InterleavedZeroBubble) next to the CSV: placement 'loop'"
                    + (f", and pipeline_parallel_layers_per_stage for {V} stages per rank" if V > 2 else ""))
    return ("torchtitan builds only the 'loop' and 'v' placements (stage s on rank s % D, or ZB-V's "
            "V shape with 2 stages per rank): use a schedule whose stages sit that way")


def _legacy(s: Schedule, grammar: str, target: str) -> Iterator[Finding]:
    where = "torchtitan (PyTorch 2.13)" if target == "torchtitan" else "PyTorch 2.13"
    fix = ("write the file in today's grammar (I = input gradient, B = full backward): "
           "schedverify.io.dump(schedverify.io.load(path, grammar='torch-legacy'), 'new.csv')")
    if grammar == "torch-legacy":
        yield _finding(LEGACY_GRAMMAR,
                       f"the file is in PyTorch's grammar before 2.6, which {where} misreads: a B "
                       "that has a W (the input gradient then) is read as the full backward, so the W "
                       "has no I (_validate_schedule raises 'Running Backward Weight ... without "
                       "first running Backward Input'), and a BW is read as 'sB' with no microbatch "
                       "(_Action.from_str matches a prefix of the cell)", fix)
        return
    pair = looks_legacy(s)
    if pair is not None:
        st, mb = pair
        yield _finding(LEGACY_GRAMMAR,
                       f"stage {st}, microbatch {mb} has {st}B{mb} and {st}W{mb} but no {st}I{mb}: "
                       f"{LEGACY_HINT}; as written, {where} raises 'Running Backward Weight for stage "
                       f"{st}, microbatch {mb} without first running Backward Input'", fix)


def _release_dialect(s: Schedule, torch: str | None) -> Iterator[Finding]:
    """SV708: a compute+comms schedule in another release's dialect (docs/spec.md 9.7)."""
    from .model import REDUCE_GRAD, SEND_WAIT_KINDS, WAIT_REDUCE_GRAD
    from .releases import BY_WAIT, installed_torch, release, releases

    rel, why = release(torch, installed=installed_torch() if torch is None else None)  # --torch checked first
    if not s.has_explicit_comm:
        return
    kinds = {a.kind for row in s.order for a in row if a is not None}
    waits = kinds & (SEND_WAIT_KINDS | {WAIT_REDUCE_GRAD})
    written_for = [r for r in releases().values() if waits <= r.kinds and (r.send_retirement == BY_WAIT) == bool(waits)]
    if rel in written_for or not written_for:
        return
    names = " and ".join(r.version for r in written_for)
    fix = (f"rewrite it for {rel.version}: schedverify lower --torch {rel.version} FILE -o out.csv (or lower "
           f"the compute-only schedule for {rel.version})")
    if waits - rel.kinds:
        what = (f"it lists {', '.join(sorted(waits - rel.kinds))}, which {rel.name}'s _Action.from_str reads as a "
                f"bare W with no microbatch (its runtime then raises 'missing mb_index')")
    else:
        what = (f"it has no WAIT_SEND after its sends, and {rel.name} refuses a send without its wait "
                f"('Pipeline sends at rank r have no matching wait')"
                + (" and a REDUCE_GRAD without its WAIT_REDUCE_GRAD" if rel.reduce_grad_wait and REDUCE_GRAD in kinds
                   else ""))
    yield _finding(RELEASE_DIALECT, f"the CSV is written for PyTorch {names}, and PyTorch {rel.version} ({why}) "
                   f"will run it: {what}", fix)


def _compute_only(s: Schedule) -> Iterator[Finding]:
    for d, acts in enumerate(leaf_rows(s.order)):
        for a in acts:
            if a.kind not in COMPUTE_KINDS and a.kind != OVERLAP_F_B:
                yield _finding(NOT_COMPUTE_ONLY,
                               f"rank {d} lists {a}: torchtitan loads the CSV with _load_csv(path), as "
                               "a compute-only schedule, and PyTorch raises 'Expected compute-only "
                               f"schedule but found communication action in rank {d}'",
                               "give torchtitan the compute-only schedule (F, I, W, B); PyTorch adds "
                               "the sends, receives and REDUCE_GRAD itself")
                return


def _megatron(s: Schedule, ranks: dict[int, set[int]], group_size: int | None,
              num_layers: int | None) -> Iterator[Finding]:
    D, S, M = s.devices, s.stages, s.microbatches
    V = S // D if S % D == 0 else None
    loop = stage_devices("loop", D, S)
    off = [st for st, r in sorted(ranks.items()) if 0 <= st < S and r != {loop[st]}]
    if off or V is None:
        st = off[0] if off else None
        what = (f"stage {st} runs on rank(s) {', '.join(map(str, sorted(ranks[st])))}, not {loop[st]}"
                if st is not None else f"{S} stages do not divide over {D} ranks")
        yield _finding(MEGATRON_PLACEMENT,
                       f"{what}: Megatron-LM's interleaved schedule holds model chunk c of pipeline rank "
                       "d as stage c*PP + d (loop placement) and has no other",
                       "use a loop placement (interleaved-1f1b, or 1f1b with one stage per rank)")
    if V is not None and V >= 2:
        N = group_size if group_size is not None else s.metadata.get("group_size", D)
        if not isinstance(N, int) or N < 1:
            N = D
        if not D <= N <= M:
            yield _finding(MEGATRON_GROUP_SIZE,
                           f"microbatch_group_size_per_vp_stage = {N} with PP = {D} and M = {M}: "
                           f"forward_backward_pipelining_with_interleaving raises ValueError ('The number "
                           f"of contiguous micro-batches in a virtual pipeline stage should range in "
                           f"[PP={D} , M={M}]')",
                           f"use at least {D} microbatches" if M < D else
                           f"set --microbatch-group-size-per-virtual-pipeline-stage between {D} and {M}")
        elif 0 < M % N < D:
            yield _finding(MEGATRON_GROUP_REMAINDER,
                           f"M % microbatch_group_size_per_vp_stage = {M} % {N} = {M % N}, between 0 and "
                           f"PP = {D}: forward_backward_pipelining_with_interleaving raises RuntimeError "
                           "('The remainder of M ... should be 0, or larger than or equal to the "
                           "pipeline-parallel size')",
                           f"use a number of microbatches that is a multiple of {N} (such as "
                           f"{M - M % N or N}), or a group size that divides {M}")
    if num_layers is not None:
        if num_layers % D:
            yield _finding(MEGATRON_LAYERS,
                           f"{num_layers} layers over PP = {D} ranks: Megatron-LM's validate_args asserts "
                           "'number of layers of the model must be divisible pipeline model parallel size'",
                           f"use a multiple of {D} layers (with --account-for-embedding-in-pipeline-split "
                           "and --account-for-loss-in-pipeline-split each counting as one layer)")
        elif V is not None and V >= 2 and (num_layers // D) % V:
            yield _finding(MEGATRON_LAYERS,
                           f"{num_layers} layers give {num_layers // D} per pipeline rank, which do not "
                           f"split into VP = {V} virtual stages: Megatron-LM's validate_args asserts "
                           "'number of layers per pipeline stage must be divisible number of layers "
                           "per virtual pipeline stage'",
                           f"use a multiple of PP*VP = {D * V} layers, or another VP")


# ------------------------------------------------------------------ the API

def torchtitan_schedule(placement: str | None, stages_per_rank: int) -> str | None:
    """The ``--parallelism.pipeline_parallel_schedule`` that makes torchtitan build its stages
    where a CSV with this placement and this many stages per rank runs them (see
    :func:`_torchtitan_placement`), or None when torchtitan builds no such placement."""
    if placement == "v":
        return "ZBVZeroBubble" if stages_per_rank == 2 else None
    if placement == "loop":
        return "1F1B" if stages_per_rank == 1 else "Interleaved1F1B"
    return None


def lint(schedule: Schedule, target: str = "torchtitan", *, pipeline_schedule: str | None = None,
         group_size: int | None = None, num_layers: int | None = None,
         grammar: str = "torch", torch: str | None = None, torchtitan: str | None = None,
         disable_cuda_graphs: bool = False) -> list[Finding]:
    """Everything ``target`` ("torchtitan", "megatron" or "pytorch") will refuse or mishandle
    in ``schedule``, as :class:`Finding` values (empty when it runs as written).

    - ``pipeline_schedule``: the schedule class name (``get_schedule_class``'s, any case).
      For torchtitan it is ``--parallelism.pipeline_parallel_schedule``, which decides where
      torchtitan builds the stages even when a CSV is given (default torchtitan's own,
      ``"1F1B"``).  For pytorch, the class the schedule runs on (default: the class PyTorch
      has for its generated family, else ``_PipelineScheduleRuntime`` reading a CSV).
    - ``group_size``: Megatron's ``microbatch_group_size_per_vp_stage`` (default: the
      schedule's own, else PP); ``num_layers``: the model's layers, for Megatron's split.
    - ``grammar``: the grammar the file was read in (``"torch-legacy"`` is itself a finding).
    - ``torch``: the PyTorch release that will run it (default: the installed torch's, else
      the newest modelled, as for :func:`schedverify.check`).
    - ``torchtitan``: the torchtitan release that will run it (:data:`TORCHTITAN_RELEASES`;
      default: the installed torchtitan's when modelled, else none, and the release rules
      SV720 and SV721 are not applied); ``disable_cuda_graphs``: its
      ``training.disable_cuda_graphs`` is set (``--training.disable_cuda_graphs``).
    """
    as_schedule(schedule, "lint")
    if target not in TARGETS:
        raise UsageError(f"target must be one of {', '.join(map(repr, TARGETS))}, got {target!r}")
    check_grammar(grammar)
    for key, value in (("group_size", group_size), ("num_layers", num_layers)):
        if value is not None and (type(value) is not int or value < 1):
            raise UsageError(f"{key} must be a whole number of at least 1, got {value!r}")
    name = _schedule_name(pipeline_schedule, "pipeline_schedule")
    from .releases import installed_version

    titan = torchtitan_release(torchtitan, installed=installed_version("torchtitan") if torchtitan is None else None)
    if type(disable_cuda_graphs) is not bool:
        raise UsageError(f"disable_cuda_graphs must be True or False, got {disable_cuda_graphs!r}")
    ranks = _stage_ranks(schedule)
    out: list[Finding] = []
    if target == "megatron":
        out += _megatron(schedule, ranks, group_size, num_layers)
        return out
    cls = (name or _torch_class(schedule)) if target == "pytorch" else _RUNTIME
    out += _legacy(schedule, grammar, target)
    out += _release_dialect(schedule, torch)
    out += _too_few_microbatches(schedule, target, cls)
    if target == "pytorch":
        out += _interleaved_rounds(schedule, cls)
        out += _stages_per_rank(schedule, cls)
    out += _several_ranks(ranks)
    if target == "torchtitan":
        out += _torchtitan_release_rules(schedule, titan, disable_cuda_graphs, torch)
        out += _compute_only(schedule)
        out += _torchtitan_placement(schedule, ranks, name or "1F1B")
    return out


def lint_file(path: str | os.PathLike, target: str = "torchtitan", *, grammar: str = "torch",
              **options) -> tuple[Schedule, list[Finding]]:
    """Read ``path`` (``grammar`` as :func:`schedverify.io.load` takes it, ``devices`` and the
    other CSV options in ``options`` too) and :func:`lint` it.

    A file the default grammar cannot read because it holds ``BW`` is read again in
    ``torch-legacy``: when that succeeds, the file is linted as what it is, and the first
    finding (SV706) says so; otherwise the first error is raised.  A file given as
    ``torch-legacy`` that reads the same in today's grammar (F and B only, as PyTorch 2.4
    wrote 1F1B) has nothing to rewrite: no SV706."""
    from .io import loads
    from .io.files import read_text, source_name

    check_grammar(grammar)
    csv_options = {k: options.pop(k) for k in ("devices", "stages", "microbatches", "placement")
                   if k in options}
    csv_options = {k: v for k, v in csv_options.items() if v is not None}
    text, name = read_text(path), source_name(path)  # once: standard input cannot be read again

    def read(g: str) -> Schedule:
        return loads(text, name, **csv_options, **({"grammar": g} if g != "torch" else {}))

    if grammar == "torch-legacy":
        schedule = read(grammar)
        try:  # a file that means the same in both grammars (F and B only) is not legacy-only
            if read("torch") == schedule:
                grammar = "torch"
        except InputError:
            pass
    else:
        try:
            schedule = read("torch")
        except InputError as e:
            if LEGACY_HINT not in str(e):
                raise
            try:
                schedule = read("torch-legacy")
            except InputError:
                raise e from None
            grammar = "torch-legacy"
    return schedule, lint(schedule, target, grammar=grammar, **options)
