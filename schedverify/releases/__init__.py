"""The runtimes schedverify models, as data: one :class:`Release` per framework release,
one :class:`Layout` per way of carrying point-to-point traffic, and :class:`Runtime`, the
one resolved choice (release, backend, layout, options) that every engine reads.

A release is a table, not a branch in the engines: what its grammar has, how its runtime
retires sends, whether a gradient reduction is paired with a wait, which lowering passes
``_prepare_schedule_with_comms`` runs, which communicator layouts it offers and how each is
turned on, which runtime options it takes.  The graph engine (:mod:`schedverify.runtime`,
:mod:`schedverify.check`), the Z3 engine (:mod:`schedverify.smt.check`), the lowering
(:mod:`schedverify.lowering`) and the lint read these fields; none of them tests a version
number.  Adding a release is adding its table to :mod:`.pytorch` (docs/spec.md section 9
says what each field means and where in the framework's source each value comes from).

Nothing here imports a framework: the installed PyTorch's version is read from package
metadata (:func:`installed_torch`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import fields
from types import MappingProxyType

from ..errors import UsageError

# the types live in .base, which the release tables import (they cannot import this package,
# which looks them up); these are the package's names
from .base import (BACKENDS, BY_WAIT, DIRECTION, EDGE, GLOO, HANDLE, LAYOUTS, NCCL,  # noqa: F401
                   PYTORCH, SHARED, STEP_END, Layout, NcclOptions, Release, Runtime, RuntimeOptions,
                   Switch)


def releases() -> Mapping[str, Release]:
    """Every modelled PyTorch release by version (``"2.13"`` ...), oldest first."""
    from .pytorch import RELEASES

    return RELEASES


def frameworks() -> Mapping[str, Mapping[str, Release]]:
    """Every modelled runtime by framework (``PyTorch``, ``megatron-core``, ``deepspeed``),
    each framework's releases by version, oldest first."""
    from . import deepspeed, megatron

    return MappingProxyType({PYTORCH: releases(), megatron.FRAMEWORK: megatron.RELEASES,
                             deepspeed.FRAMEWORK: deepspeed.RELEASES})


def framework_engines() -> Mapping[str, Mapping[str, Mapping[str, Release]]]:
    """The frameworks with more than one engine, each engine's releases by version, the
    default engine (the one :func:`frameworks` gives) first: DeepSpeed's ``PipelineEngine``
    and ``DualPipeVEngine``."""
    from . import deepspeed

    return MappingProxyType({deepspeed.FRAMEWORK: deepspeed.ENGINES})


def framework_release(spec: str | Release, version: str | None = None, *,
                      asked: bool = True, engine: str | None = None) -> tuple[Release, str]:
    """(the release, how it was chosen) of a framework's loop: ``spec`` is ``megatron-core``
    or ``deepspeed``, optionally with ``==<version>`` (or ``version`` given apart; default:
    the newest modelled), or a :class:`Release` of one's own.  ``asked``: the user named
    it (an unmodelled version is then a :class:`UsageError`); else it comes from a schedule's
    metadata, and an unmodelled version gets the nearest modelled release, said so.
    ``engine``: the engine a schedule's metadata names (``"DualPipeVEngine"``); one the
    framework does not have, or None, is its default engine."""
    if isinstance(spec, Release):
        return spec, "as given"
    if not isinstance(spec, str):
        raise UsageError(f"framework: expected a name such as 'megatron-core' or 'deepspeed', got {spec!r}")
    head, _, tail = spec.partition("==")
    name, pinned = head.strip(), tail.strip() or None
    if pinned is not None and version is not None and pinned != version:
        raise UsageError(f"framework {spec!r} and version {version!r} disagree")
    version = pinned or version
    table = frameworks()
    known = {k.lower(): k for k in table if k != PYTORCH}
    if name.lower() not in known:
        raise UsageError(f"--framework {spec!r}: not a modelled framework; modelled: {', '.join(known.values())} "
                         "(PyTorch's own runtime is chosen with --torch)")
    name = known[name.lower()]
    versions = framework_engines().get(name, {}).get(engine or "", table[name])
    newest = list(versions.values())[-1]
    how = "as asked" if asked else "named in the schedule's metadata"
    if version is None:
        return newest, f"{how}; its newest modelled release"
    if version in versions:
        return versions[version], how
    if asked:
        raise UsageError(f"--framework {spec!r}: {name} {version} is not modelled; modelled: "
                         f"{', '.join(versions)}")
    return newest, (f"the schedule's metadata names {name} {version}, which is not modelled: its newest "
                    f"modelled release, {newest.version}, assumed")


_VERSION = re.compile(r"(\d+)\.(\d+)")
#: what --torch takes: 2.15, 2.15.0, 2.15.0+cu130, 2.15.0rc1
_ASKED = re.compile(r"(\d+)\.(\d+)(?:\.\d+)?(?:(?:a|b|rc|\.dev|\.post)\d+)?(?:\+[0-9A-Za-z.]+)?")


def installed_version(package: str) -> str | None:
    """The installed ``package``'s version, from its metadata (nothing is imported), or None
    when it is not installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return None


def installed_torch(metadata_version=None) -> str | None:
    """The installed ``torch`` package's version, from its metadata (torch is not imported),
    or None when it is not installed.  ``metadata_version``: ``importlib.metadata.version``
    or a stand-in (for tests)."""
    if metadata_version is None:
        return installed_version("torch")
    return metadata_version("torch")


def release(version: str | Release | None = None, *, installed: str | None = None) -> tuple[Release, str]:
    """(the release, how it was chosen) for ``version`` (``"2.15"``, also ``"2.15.0"`` or
    ``"2.15.0+cu130"``; or a :class:`Release` of one's own, used as it is), or, when None, for
    the installed torch's version ``installed``: the release itself when modelled, else the
    nearest modelled one, said so; without torch, the newest modelled release.  An unknown
    ``version`` is a :class:`UsageError`."""
    if isinstance(version, Release):
        return version, "as given"
    table = releases()
    known = ", ".join(table)
    if version is not None:
        m = _ASKED.fullmatch(version) if isinstance(version, str) else None
        key = f"{m.group(1)}.{m.group(2)}" if m else None
        if key is None or key not in table:
            raise UsageError(f"--torch {version!r}: not a modelled PyTorch release; modelled: {known}")
        return table[key], "as asked"
    if installed is None:
        newest = list(table.values())[-1]
        return newest, f"torch is not installed here: the newest modelled release, {newest.version}"
    m = _VERSION.match(installed)
    if m is None:
        newest = list(table.values())[-1]
        return newest, (f"the installed torch's version {installed!r} does not read as a release: "
                        f"{newest.version} assumed")
    key = f"{m.group(1)}.{m.group(2)}"
    if key in table:
        return table[key], f"the installed torch {installed}"
    ordered = list(table.values())
    wanted = (int(m.group(1)), int(m.group(2)))
    nearest = ordered[0] if wanted < ordered[0].key() else ordered[-1]
    return nearest, (f"the installed torch {installed} is not modelled: the nearest modelled release, "
                     f"{nearest.version}, assumed (pass --torch to choose)")


def resolve(semantics: str, *, torch: str | Release | None = None, p2p: str | None = None,
            nccl: NcclOptions | None = None, options: RuntimeOptions | Mapping | None = None,
            environ: Mapping[str, str] | None = None, installed: str | None = None,
            framework: str | Release | None = None, layout_hint: tuple[str, str] | None = None,
            engine: str | None = None) -> Runtime:
    """The :class:`Runtime` that ``semantics`` (``torch`` or ``torch-nccl``) means with these
    choices: ``torch`` the release (default: the installed torch's, :func:`release`), or
    ``framework`` a framework's loop instead (:func:`framework_release`), ``p2p`` the layout
    (default: ``layout_hint``, (layout, why), the one a framework's configuration uses; else
    the one the release's switch turns on in ``environ``, the process's environment by
    default; else the release's default), ``options`` the runtime options (a
    :class:`RuntimeOptions` or a mapping of its fields), ``engine`` the framework's engine a
    schedule's metadata names (:func:`framework_release`).  Raises :class:`UsageError` for a
    choice the release does not offer, naming the release that does."""
    if semantics not in BACKENDS:
        raise UsageError(f"a runtime is PyTorch's over gloo ('torch') or NCCL ('torch-nccl'), got {semantics!r}")
    if framework is not None:
        if torch is not None:
            raise UsageError(f"--torch {torch!r} chooses PyTorch's _PipelineScheduleRuntime, but --framework "
                             f"{framework!r} runs the framework's own loop: give one of them")
        rel, why_release = framework_release(framework, engine=engine)
    else:
        if torch is None and installed is None:
            installed = installed_torch()
        rel, why_release = release(torch, installed=installed)
    env = os.environ if environ is None else environ
    if p2p is not None:
        if p2p not in LAYOUTS:
            raise UsageError(f"--p2p {p2p!r}: expected one of {', '.join(LAYOUTS)}")
        if p2p not in rel.layouts:
            offered = [r.name for r in releases().values() if p2p in r.layouts]
            raise UsageError(f"--p2p {p2p}: {rel.name} has no {LAYOUTS[p2p].summary} (its layouts: "
                             f"{', '.join(rel.layouts)}); {' and '.join(offered) or 'no modelled release'} "
                             f"{'has' if len(offered) == 1 else 'have'} it")
        layout, why_layout = LAYOUTS[p2p], "as asked"
    elif layout_hint is not None and layout_hint[0] in rel.layouts:
        layout, why_layout = LAYOUTS[layout_hint[0]], layout_hint[1]
    else:
        on = [name for name in rel.layouts[1:] if rel.switches[name].on_in(env)]
        if len(on) > 1:
            raise UsageError(f"{' and '.join(rel.switches[x].env for x in on)} are both set: "
                             f"{rel.name} takes one layout; pass --p2p")
        if on:
            layout = LAYOUTS[on[0]]
            why_layout = f"{rel.switches[on[0]].env}={env[rel.switches[on[0]].env]} in the environment"
        else:
            layout, why_layout = rel.default_layout, ""
    if nccl is not None and not isinstance(nccl, NcclOptions):
        raise UsageError(f"nccl must be a schedverify.runtime.NcclOptions, got {type(nccl).__name__}")
    opts = _options(options)
    for name in opts.changed():
        if name not in rel.options:
            added = [r.name for r in releases().values() if name in r.options]
            where = (f" (added in {added[0]})" if rel.is_pytorch else
                     f" ({' and '.join(added)}: PyTorch's _PipelineScheduleRuntime's)")
            raise UsageError(f"runtime option {name}: {rel.name}'s runtime has no such option"
                             + (where if added else ""))
    return Runtime(rel, BACKENDS[semantics], layout, nccl or NcclOptions(), opts, (why_release, why_layout))


def runtime_of(schedule, comm_semantics: str | None, nccl=None, torch: str | None = None, p2p: str | None = None,
               options=None, framework: str | Release | None = None) -> tuple[str, Runtime | None]:
    """(the communication semantics a check of ``schedule`` runs under, and the
    :class:`Runtime` when it is PyTorch's or a framework's): ``comm_semantics``, else the
    schedule's, else ``torch-nccl`` when a runtime choice is given (``torch``, ``framework``,
    ``p2p``, ``options``), else ``eager``.  Without ``torch`` and ``framework``, a schedule
    whose metadata names a modelled framework (``{"framework": "megatron-core", "version":
    "0.19.2", "p2p": "edge"}``, as :mod:`schedverify.frameworks` writes it) runs on that
    framework's loop.  The one resolution both check engines use.  A runtime choice under an
    abstract semantics is a :class:`UsageError`."""
    from ..model import COMM_SEMANTICS

    chosen = [name for name, v in (("torch", torch), ("framework", framework), ("p2p", p2p),
                                   ("runtime_options", options)) if v is not None]
    sem = comm_semantics or schedule.comm_semantics or ("torch-nccl" if chosen else "eager")
    if sem not in COMM_SEMANTICS:
        raise UsageError(f"comm_semantics must be one of {', '.join(map(repr, COMM_SEMANTICS))}, got {sem!r}")
    if sem not in BACKENDS:
        if chosen:
            raise UsageError(f"{', '.join(chosen)} choose{'s' * (len(chosen) == 1)} PyTorch's runtime, but the "
                             f"communication semantics is {sem!r}: use 'torch' or 'torch-nccl'")
        if nccl is not None and not isinstance(nccl, NcclOptions):
            raise UsageError(f"nccl must be a schedverify.runtime.NcclOptions, got {type(nccl).__name__}")
        return sem, None
    hint, why = None, None
    meta = schedule.metadata if isinstance(schedule.metadata, Mapping) else {}
    # the framework's engine the schedule names: DeepSpeed's DualPipeVEngine runs a
    # DualPipeVSchedule import, its PipelineEngine anything else
    engine = meta.get("engine") if isinstance(meta.get("engine"), str) else None
    if framework is None and torch is None:
        named = meta.get("framework")
        if isinstance(named, str) and named.lower() in {k.lower() for k in frameworks() if k != PYTORCH}:
            version = meta.get("version")
            framework, why = framework_release(named, version if isinstance(version, str) else None, asked=False,
                                               engine=engine)
    if framework is not None and isinstance(meta.get("p2p"), str):
        hint = (meta["p2p"], "as the framework's configuration runs it (the schedule's metadata)")
    rt = resolve(sem, torch=torch, p2p=p2p, nccl=nccl, options=options, framework=framework, layout_hint=hint,
                 engine=engine)
    return sem, rt if why is None else rt.with_(why=(why, *rt.why[1:]))


def _options(options) -> RuntimeOptions:
    if options is None:
        return RuntimeOptions()
    if isinstance(options, RuntimeOptions):
        return options
    if not hasattr(options, "items"):
        raise UsageError(f"runtime options: expected a RuntimeOptions or a mapping, got {type(options).__name__}")
    known = {f.name for f in fields(RuntimeOptions)}
    for key in options:
        if key not in known:
            raise UsageError(f"runtime options: unknown option {key!r}; known: {', '.join(sorted(known))}")
    return RuntimeOptions(**dict(options))


__all__ = ["BACKENDS", "BY_WAIT", "DIRECTION", "EDGE", "GLOO", "HANDLE", "LAYOUTS", "NCCL", "PYTORCH", "SHARED",
           "STEP_END", "Layout", "NcclOptions", "Release", "Runtime", "RuntimeOptions", "Switch", "framework_engines",
           "framework_release",
           "frameworks", "installed_torch", "installed_version", "release", "releases", "resolve", "runtime_of"]
