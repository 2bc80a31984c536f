"""Generate a family's schedule at concrete sizes and take its exact symbolic metrics (cached).

Size symbols: ``p`` devices, ``m`` microbatches, ``v`` chunks (stages per device).  For a
family without a ``chunks`` option ``v`` is whatever its generator builds (ZB-V: 2).
"""

from __future__ import annotations

from functools import lru_cache

from ..errors import UnsupportedSize, UsageError
from .tropical import IDENTITY, OrderMetrics, SizeMetrics, order_metrics, size_metrics


def family(name: str):
    from ..generators import FAMILIES

    try:
        return FAMILIES[name]
    except KeyError:
        raise UsageError(f"unknown family {name!r}; known: {', '.join(sorted(FAMILIES))}") from None


def has_chunks(name: str) -> bool:
    return bool(getattr(family(name), "chunks", False))


def default_chunks(name: str) -> int | None:
    """The chunk count ``schedverify generate`` builds for the family when none is given."""
    return family(name).default_chunks


@lru_cache(maxsize=1024)
def build(name: str, p: int, m: int, v: int | None = None):
    """The family's schedule at (p, m[, v]); UnsupportedSize when the family refuses them.

    Cached like the metrics below (a Schedule is immutable): the metrics of one size under
    several cost slices, and the claims of one family, share one generation (the V-shaped
    families' generators are the slow part of ``prove proofs/``)."""
    fam = family(name)
    if has_chunks(name):
        return fam(p, m, chunks=1 if v is None else v)
    sched = fam(p, m)
    if v is not None and sched.stages != v * sched.devices:
        raise UnsupportedSize(f"{name}: builds {sched.stages // max(sched.devices, 1)} chunk(s) per "
                              f"device, not v={v}")
    return sched


@lru_cache(maxsize=8192)
def metrics_at(name: str, p: int, m: int, v: int | None = None, merge: tuple = IDENTITY,
               max_terms: int | None = None) -> SizeMetrics:
    """Exact symbolic metrics of ``name`` at (p, m, v); raises UnsupportedSize.

    ``merge`` (see :func:`.tropical.project`) makes them exact on a slice of the costs only.
    """
    return size_metrics(build(name, p, m, v), merge=merge, max_terms=max_terms)


def supported(name: str, p: int, m: int, v: int | None = None, merge: tuple = IDENTITY,
              max_terms: int | None = None) -> SizeMetrics | None:
    try:
        return metrics_at(name, p, m, v, merge, max_terms)
    except UnsupportedSize:
        return None


@lru_cache(maxsize=8192)
def order_at(name: str, p: int, m: int, v: int | None = None) -> OrderMetrics:
    """Busy terms and peaks of ``name`` at (p, m, v), without the timeline; UnsupportedSize."""
    return order_metrics(build(name, p, m, v))


def order_supported(name: str, p: int, m: int, v: int | None = None) -> OrderMetrics | None:
    try:
        return order_at(name, p, m, v)
    except UnsupportedSize:
        return None
