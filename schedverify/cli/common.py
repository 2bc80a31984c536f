"""Options shared by several sub-commands, parsed into model objects with exact messages."""

from __future__ import annotations

import argparse
import math
import re
from dataclasses import dataclass

from ..errors import UsageError
from ..io.actions import GRAMMARS
from ..model import COMM_SEMANTICS, COSTED_KINDS, Schedule
from ..units import parse_bytes, parse_time

COST_KEYS = COSTED_KINDS + ("comm",)


def parse_costs(text: str, *, with_units: bool = False) -> dict:
    """``F=1,B=2,I=1,W=1,comm=0``; a per-stage value is ``F=1:1:2:2`` (one per stage).
    ``with_units``: a value may also carry a time unit (``F=1.2ms``), a :class:`WithUnit` that
    :func:`in_schedule_units` converts to the schedule's own."""
    out: dict = {}
    for item in filter(None, (t.strip() for t in text.split(","))):
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq:
            raise UsageError(f"--costs: expected KEY=VALUE, got {item!r} (for example F=1,B=2,I=1,W=1,comm=0)")
        if key not in COST_KEYS:
            raise UsageError(f"--costs: unknown cost {key!r} in {item!r}; known: {', '.join(COST_KEYS)}")
        parts = value.split(":")
        nums = tuple(_with_unit(f"--costs {key}", p, "time") if with_units else _non_negative(f"--costs {key}", p)
                     for p in parts)
        if key == "comm" and len(nums) > 1:
            raise UsageError(f"--costs: comm is one latency, not per stage: {item!r}")
        out[key] = nums[0] if len(nums) == 1 else nums
    return out


def _non_negative(where: str, text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise UsageError(f"{where}: expected a number, got {text!r}") from None
    if not math.isfinite(v) or v < 0:
        raise UsageError(f"{where}: expected a finite number >= 0, got {text!r}")
    return int(v) if v.is_integer() else v


def non_negative_float(text: str) -> float:
    try:
        return _non_negative("value", text)
    except UsageError as e:
        raise argparse.ArgumentTypeError(str(e).replace("value: ", "")) from None


def whole_number(minimum: int = 1, maximum: int | None = None, unit: str = ""):
    """An argparse type: a whole number in ``minimum..maximum``; errors name the value."""
    what = f"a whole number{' of ' + unit if unit else ''}"

    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if v < minimum or (maximum is not None and v > maximum):
            bounds = f"between {minimum} and {maximum}" if maximum is not None else f"at least {minimum}"
            raise argparse.ArgumentTypeError(f"must be {bounds}{' ' + unit if unit else ''}, got {v}")
        return v

    parse.__name__ = "whole number"  # what argparse names in "invalid ... value"
    return parse


positive_int = whole_number(1)


def check_costs_fit(costs: dict | None, schedule: Schedule, source: str) -> None:
    """A per-stage --costs list must have one value per stage of this schedule."""
    for key, value in (costs or {}).items():
        if isinstance(value, tuple) and len(value) != schedule.stages:
            raise UsageError(f"--costs {key}: {len(value)} per-stage values given, but {source} "
                             f"has {schedule.stages} stages")


@dataclass(frozen=True)
class WithUnit:
    """An option value written with a unit (``1.5ms``, ``80GiB``): kept in seconds or bytes
    until the schedule it applies to says what its own numbers are in."""

    base: float  # seconds, or bytes (0 for a share, resolved against --device)
    text: str
    dimension: str  # "time", "memory", or "share" (``75%`` of the named device's memory)


def _with_unit(where: str, text: str, dimension: str) -> float | WithUnit:
    """A plain number (the schedule's own units), or a :class:`WithUnit`; a memory share
    (``75%``) is checked here and resolved against ``--device`` (:func:`in_schedule_units`)."""
    try:
        return _non_negative(where, text)
    except UsageError:
        if not re.fullmatch(r"\s*[+-]?[\d.]+(?:[eE][+-]?\d+)?\s*[A-Za-zµμ%]+\s*", text):
            raise
    if dimension == "time":
        return WithUnit(parse_time(text, where), text, dimension)
    if text.strip().endswith("%"):
        parse_bytes(text, where, device_memory=100)  # a share: between 0% and 100%
        return WithUnit(0.0, text.strip(), "share")
    return WithUnit(parse_bytes(text, where), text, dimension)


def in_schedule_units(args, schedule: Schedule, source: str) -> tuple[dict | None, float | None]:
    """(--costs, --memory-limit) in the numbers of ``schedule``'s own units: a value written
    with a unit is converted to the file's (``"units"``), and refused when the file's numbers
    are abstract; a per-stage --costs list must have one value per stage."""
    units = schedule.units

    def convert(where: str, v):
        if not isinstance(v, WithUnit):
            return v
        if v.dimension == "share":
            v = _share_of_device(where, v, getattr(args, "device", None))
        factor = None if units is None else (units.time_factor if v.dimension == "time"
                                             else units.memory_factor)
        if factor is None:
            kind = "times" if v.dimension == "time" else "memory amounts"
            raise UsageError(f"{where} {v.text}: {source}'s {kind} are in abstract units (the file has no "
                             f'"units": {{"{v.dimension}": ...}}); give a plain number in those units')
        value = v.base / factor
        return int(value) if float(value).is_integer() else value

    check_costs_fit(args.costs, schedule, source)
    costs = None
    if args.costs is not None:
        costs = {key: tuple(convert(f"--costs {key}", x) for x in value) if isinstance(value, tuple)
                 else convert(f"--costs {key}", value) for key, value in args.costs.items()}
    limit = getattr(args, "memory_limit", None)
    return costs, (None if limit is None else convert("--memory-limit", limit))


def _share_of_device(where: str, v: WithUnit, name: str | None) -> WithUnit:
    """``75%`` of the named device's memory, in bytes."""
    if name is None:
        raise UsageError(f"{where} {v.text} is a share of a device's memory: name the device "
                         f"(--device H100-SXM, A100-80GB, ...) or give the size itself (80GiB)")
    from ..plan.hardware import device

    hw = device(name)
    return WithUnit(parse_bytes(v.text, where, device_memory=hw.memory), f"{v.text} of {hw.name}",
                    "memory")


def add_cost_options(p: argparse.ArgumentParser, *, runtime_only: bool = False) -> None:
    """--costs, --memory-limit, --comm-semantics and the --nccl-* options; ``runtime_only``:
    only PyTorch's runtime semantics, torch-nccl by default (for ``lower``)."""
    p.add_argument("--costs", type=_costs_arg, metavar="F=1,B=2,I=1,W=1,comm=0",
                   help="costs per action type (overrides the file's); a per-stage value is "
                        "written a:b:c; comm is the latency of every cross-device dependency")
    p.add_argument("--memory-limit", type=_memory_limit_arg, metavar="L",
                   help="peak memory allowed on every device (docs/spec.md 5): a number in the "
                        "file's memory units (activation units when it has none), or, for a file "
                        "whose memory has units, bytes with a unit (80GiB, 75GB) or a share of "
                        "--device's memory (90%%)")
    p.add_argument("--device", metavar="NAME",
                   help="the accelerator (H100-SXM, A100-80GB, MI300X, ...) whose memory a "
                        "--memory-limit N%% is a share of")
    if runtime_only:
        p.add_argument("--comm-semantics", choices=("torch", "torch-nccl"), default="torch-nccl",
                       help="the runtime the lowering must run on (docs/spec.md 8): torch (PyTorch "
                            "over gloo) or torch-nccl (over NCCL; default)")
    else:
        p.add_argument("--comm-semantics", choices=COMM_SEMANTICS,
                       help="how explicit SEND/RECV run (docs/spec.md 3.5, 8): eager or rendezvous "
                            "(abstract), torch (PyTorch's runtime over gloo), torch-nccl (over NCCL); "
                            "default: the file's, torch-nccl for a PyTorch CSV, else eager")
    add_runtime_options(p)


def add_runtime_options(p: argparse.ArgumentParser) -> None:
    """The runtime's release, layout and options (docs/spec.md 8, 9): what torch and
    torch-nccl mean."""
    g = p.add_argument_group("PyTorch's runtime (torch and torch-nccl semantics, docs/spec.md 8 and 9)")
    g.add_argument("--torch", metavar="RELEASE",
                   help="the PyTorch release whose runtime runs the schedule: 2.13, 2.14 or 2.15 "
                        "(default: the installed torch's, read from its package metadata; without "
                        "torch, the newest modelled release)")
    g.add_argument("--framework", metavar="NAME[==VERSION]",
                   help="run the schedule on a framework's own pipeline loop instead of PyTorch's "
                        "runtime: megatron-core or deepspeed (docs/spec.md 10; default: the one the "
                        "schedule's metadata names, as schedverify import writes it)")
    g.add_argument("--p2p", choices=("shared", "direction", "edge"),
                   help="how the release carries point-to-point traffic: one shared communicator "
                        "(every release's default), one per direction (2.14: "
                        "TORCH_DISTRIBUTED_PIPELINE_PER_DIRECTION_P2P=1) or one per directed rank "
                        "edge (2.15: TORCH_DISTRIBUTED_PIPELINE_PER_EDGE_P2P=1); default: the one "
                        "those variables turn on in this environment, else shared")
    g.add_argument("--nccl-streams", choices=("device", "pair"), default="device",
                   help="torch-nccl, shared layout: one communication stream per device (default: one "
                        "communicator for all P2P, as with eager init or torchtitan) or per "
                        "device pair (lazily created 2-rank communicators, 2.15's backend='nccl-lazy')")
    g.add_argument("--nccl-buffered-sends", action="store_true",
                   help="torch-nccl: sends complete without their receive (messages small "
                        "enough for NCCL's buffers); default: a send completes with its receive")
    g.add_argument("--max-outstanding-sends", type=whole_number(0), metavar="N",
                   help="2.15's max_outstanding_sends: the runtime moves waits earlier to keep at "
                        "most N sends pending per rank, and refuses the schedule when it cannot")
    g.add_argument("--defer-reduce-grad-wait", action="store_true",
                   help="2.15's defer_reduce_grad_wait: lowering puts each WAIT_REDUCE_GRAD just "
                        "before the next REDUCE_GRAD")
    g.add_argument("--max-active-stages", type=positive_int, metavar="N",
                   help="2.15's max_active_stages: stages whose FSDP parameters stay unsharded "
                        "(default 3)")
    g.add_argument("--unshard-lookahead", type=_lookahead, metavar="full|auto|A:B:...",
                   help="2.15's unshard_lookahead: how many stages ahead lowering issues UNSHARD "
                        "(full: max_active_stages; auto: min(rank + 2, max_active_stages); or one "
                        "value per rank)")


def _lookahead(text: str):
    if text in ("full", "auto"):
        return text
    try:
        return tuple(whole_number(1)(x) for x in text.split(":"))
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"expected full, auto or one whole number >= 1 per rank "
                                         f"(A:B:...), got {text!r}") from None


def nccl_options(args):
    """The NcclOptions the --nccl-* flags ask for."""
    from ..runtime import NcclOptions

    return NcclOptions(streams=args.nccl_streams, buffered_sends=args.nccl_buffered_sends)


def runtime_args(args) -> dict:
    """The keyword arguments of :func:`schedverify.check` for the runtime flags: ``torch``,
    ``framework``, ``p2p``, ``nccl`` and ``runtime_options`` (those given)."""
    options = {}
    if getattr(args, "max_outstanding_sends", None) is not None:
        options["max_outstanding_sends"] = args.max_outstanding_sends
    if getattr(args, "defer_reduce_grad_wait", False):
        options["defer_reduce_grad_wait"] = True
    if getattr(args, "max_active_stages", None) is not None:
        options["max_active_stages"] = args.max_active_stages
    if getattr(args, "unshard_lookahead", None) is not None:
        options["unshard_lookahead"] = args.unshard_lookahead
    out: dict = {"nccl": nccl_options(args)}
    if getattr(args, "torch", None) is not None:
        out["torch"] = args.torch
    if getattr(args, "framework", None) is not None:
        out["framework"] = args.framework
    if getattr(args, "p2p", None) is not None:
        out["p2p"] = args.p2p
    if options:
        out["runtime_options"] = options
    return out


def _memory_limit_arg(text: str) -> float | WithUnit:
    try:
        return _with_unit("--memory-limit", text, "memory")
    except UsageError as e:
        raise argparse.ArgumentTypeError(str(e).replace("--memory-limit: ", "")) from None


def _costs_arg(text: str) -> dict:
    try:
        return parse_costs(text, with_units=True)
    except UsageError as e:
        raise argparse.ArgumentTypeError(str(e).replace("--costs: ", "")) from None


def add_input_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("for PyTorch CSV input (what the CSV cannot say)")
    g.add_argument("--devices", type=positive_int, help="number of devices (default: rows)")
    g.add_argument("--stages", type=positive_int, help="number of stages (default: inferred)")
    g.add_argument("--microbatches", type=positive_int, help="number of microbatches (default: inferred)")
    g.add_argument("--placement", choices=("loop", "v"), help="stage placement (default: inferred)")
    g.add_argument("--grammar", choices=GRAMMARS, default="torch",
                   help="the CSV's action grammar: torch (PyTorch 2.6 and later; default) or "
                        "torch-legacy (before 2.6: B = input gradient, BW = full backward)")


def input_options(args) -> dict:
    out = {k: getattr(args, k) for k in ("devices", "stages", "microbatches", "placement")
           if getattr(args, k, None) is not None}
    if getattr(args, "grammar", "torch") != "torch":  # the default is every reader's own
        out["grammar"] = args.grammar
    return out


def load_input(path: str, args):
    """Load a schedule file, applying the CSV options when given."""
    from ..io import load

    return load(path, **input_options(args))


def write_output(path: str, data: str | bytes, *, inputs: tuple[str, ...] = (), option: str = "-o") -> None:
    """Write ``data`` (text, or bytes) to ``path`` whole or not at all: into a temporary file in
    the same directory, then renamed over ``path`` (through a symlink, onto its target).  A
    path that is one of ``inputs`` (the files the command reads) is refused: nothing given is
    lost.  ``option`` names the flag in messages."""
    from pathlib import Path

    from ..io.files import write_atomic

    p = Path(path)
    if p.is_dir():
        raise UsageError(f"{option} {path}: is a directory; give a file name")
    target = p.resolve()
    for source in inputs:
        if source != "-" and Path(source).exists() and Path(source).resolve() == target:
            raise UsageError(f"{option} {path}: is the input file {source}; write the result elsewhere")
    if not target.parent.is_dir():
        raise UsageError(f"{option} {path}: directory {str(target.parent)!r} does not exist")
    try:
        write_atomic(target, data)
    except OSError as e:
        raise UsageError(f"{option} {path}: cannot write: {e.strerror or e}") from None
