"""The accelerators a plan runs on: memory, dense peak FLOP/s with an efficiency factor, and the
link that carries the activations between pipeline stages.

A plan needs four numbers per device: how many bytes fit, how fast the matrix units are (a
model's FLOPs divided by ``peak_flops * efficiency`` give seconds), and the bandwidth and
latency of one point-to-point send (one microbatch's activation, or its gradient, between
adjacent stages).  :data:`DEVICES` holds the published numbers of common devices;
:func:`hardware` looks one up by name (with a did-you-mean on a typo) and overrides any field;
:func:`hardware_from_table` reads a TOML ``[hardware]`` table::

    [hardware]
    device = "H100-SXM"        # a name from DEVICES; every other key overrides its field
    efficiency = 0.45          # share of the dense peak a training step reaches (default 0.4)
    link_bandwidth = 50e9      # bytes/s one way, e.g. a 400 Gb/s InfiniBand NIC across nodes

or, without ``device``, gives every field (``name``, ``memory``, ``peak_flops``,
``link_bandwidth``, ``link_latency``; ``efficiency`` optional).  ``memory`` is a whole number
of bytes or a string with a unit (``"80GiB"``, ``"96GB"``).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, fields, replace
from typing import Any

from ..errors import InputError, UsageError
from ..units import parse_bytes

GiB = 2**30


@dataclass(frozen=True)
class Hardware:
    """One accelerator as a plan sees it.

    ``memory``: bytes on the device.  ``peak_flops``: dense (not 2:4-sparse) bf16 tensor-core
    FLOP/s.  ``efficiency``: the share of that peak a training step sustains (model FLOPs
    utilisation; 0.4 is typical of large dense transformers, measure yours).
    ``link_bandwidth``: bytes/s of one point-to-point send in one direction, ``link_latency``:
    seconds of a send's fixed cost.
    """

    name: str
    memory: int
    peak_flops: float
    link_bandwidth: float
    link_latency: float = 10e-6
    efficiency: float = 0.4

    def __post_init__(self):
        for f in ("memory", "peak_flops", "link_bandwidth"):
            value = getattr(self, f)
            if not (isinstance(value, (int, float)) and not isinstance(value, bool)
                    and math.isfinite(value) and value > 0):
                raise UsageError(f"hardware {f}: expected a positive number, got {value!r}")
        if not (isinstance(self.link_latency, (int, float)) and math.isfinite(self.link_latency)
                and self.link_latency >= 0):
            raise UsageError(f"hardware link_latency: expected seconds >= 0, got {self.link_latency!r}")
        if not (isinstance(self.efficiency, (int, float)) and 0 < self.efficiency <= 1):
            raise UsageError(f"hardware efficiency: expected a share in (0, 1], got {self.efficiency!r}")

    @property
    def flops(self) -> float:
        """The FLOP/s a step is assumed to sustain: ``peak_flops * efficiency``."""
        return self.peak_flops * self.efficiency

    def seconds(self, flops: float) -> float:
        """Seconds to run ``flops`` on one device at the sustained rate."""
        return flops / self.flops

    def send_seconds(self, nbytes: float) -> float:
        """Seconds of one point-to-point send of ``nbytes``: latency plus bytes over bandwidth."""
        return self.link_latency + nbytes / self.link_bandwidth

    def describe(self) -> str:
        return (f"{self.name}: {self.memory / GiB:.0f} GiB, {self.peak_flops / 1e12:.0f} TFLOP/s dense bf16 "
                f"x {self.efficiency:g} efficiency, link {self.link_bandwidth / 1e9:g} GB/s + "
                f"{self.link_latency * 1e6:g} us")


# Published numbers (vendor datasheets), dense bf16 tensor-core FLOP/s, i.e. half of the
# "with sparsity" figure the datasheets print first.  Memory: the datasheets' "80GB" are
# binary (HBM stacks come in GiB; nvidia-smi reports 81559 MiB on an H100 80GB, of which the
# runtime reserves some), so GB here are taken as GiB: the usable memory is a little less
# (say so with ``memory`` or ``--memory-limit``).  Link: one direction of one GPU's
# NVLink / Infinity Fabric / PCIe, which is what a send between two GPUs of one node gets;
# stages on different nodes go over the NIC instead (e.g. 50e9 for 400 Gb/s InfiniBand):
# override link_bandwidth.  Latency: 10 us, the order of an NCCL send/recv; override it.
#
#   H100 SXM5 80GB   NVIDIA H100 Tensor Core GPU datasheet: BF16 1,979 TFLOPS with sparsity
#                    -> 989.4 dense; 80 GB HBM3; NVLink 900 GB/s (both directions) -> 450.
#   H100 PCIe 80GB   same datasheet: BF16 1,513 sparse -> 756 dense (H100 whitepaper); 80 GB HBM2e;
#                    PCIe Gen5 128 GB/s (both directions) -> 64 (the NVLink bridge gives 300).
#   H200 SXM 141GB   NVIDIA H200 datasheet: BF16 1,979 sparse -> 989.4 dense; 141 GB HBM3e;
#                    NVLink 900 GB/s -> 450.
#   B200 (HGX) 180GB NVIDIA HGX B200 datasheet: FP16/BF16 4.5 PFLOPS sparse per GPU -> 2,250
#                    dense; 180 GB HBM3e; NVLink 5 1.8 TB/s -> 900.
#   A100 SXM 40/80GB NVIDIA A100 datasheet: BF16 312 TFLOPS dense (624 sparse); 40 GB HBM2 /
#                    80 GB HBM2e; NVLink 600 GB/s -> 300.
#   MI300X 192GB     AMD Instinct MI300X datasheet: BF16 1,307.4 TFLOPS dense (2,614.9 sparse);
#                    192 GB HBM3; Infinity Fabric 128 GB/s per peer link (both directions) -> 64.
#   L40S 48GB        NVIDIA L40S datasheet: BF16 362.05 TFLOPS dense (733 sparse); 48 GB GDDR6;
#                    no NVLink, PCIe Gen4 x16 64 GB/s (both directions) -> 32.
DEVICES: dict[str, Hardware] = {
    h.name: h for h in (
        Hardware("H100-SXM", 80 * GiB, 989.4e12, 450e9),
        Hardware("H100-PCIe", 80 * GiB, 756e12, 64e9),
        Hardware("H200", 141 * GiB, 989.4e12, 450e9),
        Hardware("B200", 180 * GiB, 2250e12, 900e9),
        Hardware("A100-40GB", 40 * GiB, 312e12, 300e9),
        Hardware("A100-80GB", 80 * GiB, 312e12, 300e9),
        Hardware("MI300X", 192 * GiB, 1307.4e12, 64e9),
        Hardware("L40S", 48 * GiB, 362.05e12, 32e9),
    )
}

#: Other spellings people use for the same devices.
ALIASES = {"H100": "H100-SXM", "H100-SXM5": "H100-SXM", "H100-80GB": "H100-SXM", "H200-SXM": "H200",
           "A100": "A100-80GB", "A100-SXM-80GB": "A100-80GB", "A100-SXM-40GB": "A100-40GB"}


def _key(name: str) -> str:
    return re.sub(r"[\s_\-]+", "", name).lower()


def device(name: str) -> Hardware:
    """The published numbers of a named device; a typo gets a did-you-mean.

    Names are matched ignoring case, spaces, hyphens and underscores (``h100_sxm`` is
    ``H100-SXM``).
    """
    if not isinstance(name, str):
        raise UsageError(f"device: expected a name, got {name!r}")
    table = {_key(n): h for n, h in DEVICES.items()}
    table.update({_key(a): DEVICES[n] for a, n in ALIASES.items()})
    found = table.get(_key(name))
    if found is not None:
        return found
    import difflib

    known = list(DEVICES) + list(ALIASES)
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.5)
    if not close:
        close = difflib.get_close_matches(_key(name), [_key(k) for k in known], n=1, cutoff=0.5)
        close = [k for k in known if close and _key(k) == close[0]][:1]
    hint = f"; did you mean {close[0]!r}?" if close else ""
    raise UsageError(f"unknown device {name!r}{hint} (known: {', '.join(DEVICES)})")


def hardware(name: str, **overrides: Any) -> Hardware:
    """A named device with some fields replaced, e.g. ``hardware("H100-SXM", efficiency=0.5)``."""
    base = device(name)
    unknown = set(overrides) - {f.name for f in fields(Hardware)}
    if unknown:
        raise UsageError(f"hardware: unknown field(s) {', '.join(sorted(unknown))}")
    return replace(base, **overrides)


_FIELDS = ("name", "memory", "peak_flops", "link_bandwidth", "link_latency", "efficiency")


def hardware_from_table(table: Any, *, source: str = "<string>", where: str = "hardware") -> Hardware:
    """A :class:`Hardware` from a TOML ``[hardware]`` table (see the module docstring).

    Errors are :class:`InputError` naming the key: ``model.toml: hardware.efficiency: ...``.
    """
    if not isinstance(table, dict):
        raise InputError(f"expected a table, got {table!r}", source=source, where=where)
    allowed = ("device", *_FIELDS)
    for key in table:
        if key not in allowed:
            import difflib

            close = difflib.get_close_matches(key, allowed, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise InputError(f"unknown key {key!r}{hint} (known: {', '.join(allowed)})",
                             source=source, where=where)
    values: dict[str, Any] = {}
    for key in _FIELDS:
        if key not in table:
            continue
        raw = table[key]
        at = f"{where}.{key}"
        if key == "name":
            if not isinstance(raw, str) or not raw:
                raise InputError(f"expected a name, got {raw!r}", source=source, where=at)
            values[key] = raw
        elif key == "memory":
            values[key] = parse_bytes(raw, at, source=source)  # units.py: the one reader of "80GiB"
            if values[key] <= 0:
                raise InputError(f"expected a positive memory size, got {raw!r}", source=source, where=at)
        else:
            if isinstance(raw, bool) or not isinstance(raw, (int, float)) or not math.isfinite(raw):
                raise InputError(f"expected a number, got {raw!r}", source=source, where=at)
            if key == "efficiency" and not 0 < raw <= 1:
                raise InputError(f"expected a share in (0, 1], got {raw!r}", source=source, where=at)
            if key == "link_latency" and raw < 0:
                raise InputError(f"expected seconds >= 0, got {raw!r}", source=source, where=at)
            if key in ("peak_flops", "link_bandwidth") and raw <= 0:
                raise InputError(f"expected a positive number, got {raw!r}", source=source, where=at)
            values[key] = float(raw)
    if "device" in table:
        try:
            base = device(table["device"])
        except UsageError as e:
            raise InputError(str(e), source=source, where=f"{where}.device") from None
        if "name" not in values:
            changed = sorted(k for k in values if getattr(base, k) != values[k])
            values["name"] = base.name + (f" ({', '.join(changed)} overridden)" if changed else "")
        return replace(base, **values)
    missing = [k for k in ("name", "memory", "peak_flops", "link_bandwidth") if k not in values]
    if missing:
        raise InputError(f"name a device (device = \"H100-SXM\"; known: {', '.join(DEVICES)}) "
                         f"or give every field: missing {', '.join(missing)}", source=source, where=where)
    return Hardware(**values)


__all__ = ["ALIASES", "DEVICES", "GiB", "Hardware", "device", "hardware", "hardware_from_table"]
