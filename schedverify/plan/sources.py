"""Where a plan's numbers come from: a model description, a measured profile, or profiler
traces, each turned into a :class:`Source` (what gives the stage profile of any cut, the memory
limit in bytes, and what to print about it), so that the planner and the CLI never care which.
"""

from __future__ import annotations

import os
from pathlib import Path
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Union

from ..errors import UsageError
from ..units import format_bytes, parse_bytes
from .stages import StageProfile

if TYPE_CHECKING:
    from .calibration import Calibration

#: A fixed measured profile, or a function of (stages, split backward) for a model.
StageSource = Union[StageProfile, Callable[[int, bool], StageProfile]]  # noqa: UP007 - evaluated at import


@dataclass(frozen=True)
class Source:
    """``stages``: the stage profile (or how to make one for any number of stages);
    ``memory_limit``: bytes per device, or None; ``microbatches``: what the source says a step
    has, or None; ``title``: one line naming it; ``notes``: what its numbers assume;
    ``layers``: the model's transformer layers, when a model is given."""

    stages: StageSource
    memory_limit: int | None
    title: str
    microbatches: int | None = None
    notes: tuple[str, ...] = ()
    layers: int | None = None


def _limit(text: str | int | None, device_memory: int | None) -> int | None:
    """``--memory-limit``: bytes with a unit, or a share of ``device_memory``; default: all of
    it (or no limit when no device is known)."""
    if text is None:
        return device_memory
    return parse_bytes(text, "--memory-limit", device_memory)


def from_model(path: str | os.PathLike, *, memory_limit: str | int | None = None,
               microbatches: int | None = None, backend: str | None = None,
               calibration: Calibration | str | os.PathLike | None = None, torch: str | None = None) -> Source:
    """A transformer and its hardware from a TOML model file (:mod:`.transformer`): any cut.

    ``backend`` (``cuda``, ``cpu``, ``paper``) replaces the file's choice of what autograd
    keeps (:mod:`.activations`); ``calibration`` (a :class:`~.calibration.Calibration` or
    its file) replaces those formulas with the model's measured bytes (and times)."""
    from dataclasses import replace

    from .calibration import Calibration, load_calibration
    from .transformer import load_model, stage_profile

    model, hw = load_model(Path(path))
    if backend is not None:
        from .activations import backend as known

        model = replace(model, backend=known(backend).name)
    cal = calibration if calibration is None or isinstance(calibration, Calibration) else load_calibration(calibration)
    if cal is not None:
        cal.check_model(model)
    m = microbatches if microbatches is not None else model.microbatches

    def cut(stages: int, split_backward: bool) -> StageProfile:
        return stage_profile(model, hw, stages, microbatches=m, split_backward=split_backward, calibration=cal,
                             torch=torch)

    limit = _limit(memory_limit, hw.memory)
    memory = f"activations calibrated on {cal.device}" if cal is not None else f"activations: backend {model.backend}"
    title = (f"{model.name or os.path.basename(str(path))} on {hw.name} "
             f"({format_bytes(hw.memory)}, {hw.efficiency:.0%} of peak; {memory})")
    return Source(cut, limit, title, m, layers=model.layers)


def from_profile(path: str | os.PathLike, *, device: str | None = None,
                 memory_limit: str | int | None = None) -> Source:
    """A measured per-stage profile (JSON or CSV, :mod:`.profile`): one cut only."""
    from .profile import load_profile

    profile = load_profile(path)
    return _measured(profile, str(path), device, memory_limit)


def from_trace(paths: Sequence[str | os.PathLike], *, device: str | None = None,
               memory_limit: str | int | None = None) -> Source:
    """PyTorch profiler Chrome traces of one step, one per rank (:mod:`.profile`)."""
    from .profile import load_chrome_trace

    profile = load_chrome_trace(list(paths))
    return _measured(profile, ", ".join(map(str, paths)), device, memory_limit)


def _measured(profile: StageProfile, what: str, device: str | None, memory_limit) -> Source:
    memory = None
    name = "no device named"
    if device is not None:
        from .hardware import device as named

        hw = named(device)
        memory, name = hw.memory, hw.name
    limit = _limit(memory_limit, memory)
    return Source(profile, limit, f"{profile.source or what} ({profile.stages} stages; {name})",
                  None, tuple(profile.notes))


def from_args(*, model=None, profile=None, trace=None, device: str | None = None,
              memory_limit: str | None = None, microbatches: int | None = None, backend: str | None = None,
              calibration=None, torch: str | None = None) -> Source:
    """The one source the command line names (exactly one of ``model``, ``profile``, ``trace``)."""
    given = [k for k, v in (("--model", model), ("--profile", profile), ("--trace", trace)) if v]
    if len(given) != 1:
        raise UsageError("plan: give exactly one of --model, --profile and --trace"
                         + (f" (got {', '.join(given)})" if given else ""))
    if model is None and (backend is not None or calibration is not None):
        raise UsageError("plan: --backend, --measure and --calibration are a model's: give --model FILE.toml "
                         "(a measured profile or trace already has its memory)")
    if model is not None:
        if device is not None:
            raise UsageError("plan: --device applies to --profile and --trace; a model file names its "
                             "hardware in its [hardware] table")
        return from_model(model, memory_limit=memory_limit, microbatches=microbatches, backend=backend,
                          calibration=calibration, torch=torch)
    if profile is not None:
        return from_profile(profile, device=device, memory_limit=memory_limit)
    return from_trace(trace, device=device, memory_limit=memory_limit)
