"""All-sizes certificates of the regular families (docs/proofs.md).

``certificate(family)`` gives the family's :class:`~.base.Certificate` or None;
:func:`.check.prove_certificate` proves one for every size in its domain with Z3, and
:func:`.check.crosscheck` compares it with the generator at concrete sizes.
"""

from __future__ import annotations

from .base import Certificate


def certificate(family: str, chunks: int | None = None) -> Certificate | None:
    """The family's certificate (for ``chunks`` stages per device, when the family has
    chunks), or None when it has none (its claims stay finite-range)."""
    opts = certificate_options(family, chunks)
    return opts[0] if opts else None


def certificate_options(family: str, chunks: int | None = None) -> tuple[Certificate, ...]:
    """Every certificate of the family, narrowest cost slice first: a claim uses the first
    whose slice its assumptions fix (1F1B: c == 0, linear; then every cost, with a ceiling
    by p in the latency's coefficient; ZB-H1: equal pass times, exact; then t_F, t_I, t_W
    free, by cones)."""
    from .classic import ONE_F_ONE_B_LATENCY
    from .zero_bubble import ZB_H1_FREE

    first = _first(family, chunks)
    if first is None:
        return ()
    if family == "1f1b":
        return (first, ONE_F_ONE_B_LATENCY)
    if family == "zb-h1" and chunks in (None, 1):
        return (first, ZB_H1_FREE)
    return (first,)


def _first(family: str, chunks: int | None) -> Certificate | None:
    from .classic import GPIPE, ONE_F_ONE_B
    from .interleaved import INTERLEAVED
    from .zero_bubble import ZB_H1, ZB_H2

    from .bidirectional import DUALPIPE, DUALPIPE_V
    from .looped import LOOPED
    from .vshape import ZB_V

    if family == "interleaved-1f1b":
        return None if chunks is None else INTERLEAVED.get(chunks)
    if family == "looped-bfs":
        return LOOPED.get(1 if chunks is None else chunks)
    if family == "zb-h1" and chunks not in (None, 1):
        from .zero_bubble import ZB_H1_V

        return ZB_H1_V.get(chunks)
    return {"gpipe": GPIPE, "1f1b": ONE_F_ONE_B, "zb-h1": ZB_H1, "zb-h2": ZB_H2, "zb-v": ZB_V,
            "dualpipe": DUALPIPE, "dualpipe-v": DUALPIPE_V}.get(family)


def covering(family: str, devices: int, microbatches: int, chunks: int | None = None,
             group_size: int | None = None, max_inflight: int | None = None):
    """What the family's schedule at these sizes and options is built from
    (:class:`.order.Source`: its all-sizes certificate, read by :func:`.order.rows`, or
    truncated below its domain: Certificate.truncates), or None: a group size other than the
    devices, a chunk count without a certificate, sizes outside the certificate's domain
    (and not below it by truncation), or a family without one (its generator's own code
    then).  ``chunks`` as :func:`families` gives it: None for a family without chunks
    option (ZB-V's two chunks are its certificate's own) and for ZB-H1's one-chunk form;
    the generators pass the chunk count they build (this package reads nothing of theirs:
    they are built from it)."""
    from .base import PyOps
    from .order import Source

    v = chunks
    if family == "interleaved-1f1b" or (family == "zb-h1" and v not in (None, 1)):
        if group_size not in (None, devices) or microbatches % devices or microbatches < devices:
            return None
    elif group_size is not None:
        return None
    cert = _first(family, v)
    if cert is None or (v is not None and cert.chunks_per_device != v):
        return None
    if not cert.in_domain(PyOps, devices, microbatches):
        if cert.truncates is None or devices < 1 or microbatches < 1:
            return None
        m0 = cert.truncates(PyOps, devices)  # ZB-V below m = 2p - 1: its order at 2p - 1, truncated
        return Source(cert, truncated=m0) if microbatches < m0 and cert.in_domain(PyOps, devices, m0) else None
    if max_inflight is not None and max_inflight < devices:
        return Source(cert, gap=max_inflight) if family == "1f1b" else None
    return Source(cert)


def families() -> tuple[tuple[str, int | None], ...]:
    """(family, chunks) of every certificate."""
    return (("gpipe", None), ("1f1b", None), ("zb-h1", None), ("zb-h1", 2), ("zb-h1", 3),
            ("zb-h1", 4), ("zb-h2", None), ("zb-v", None), ("dualpipe", None), ("dualpipe-v", None),
            ("interleaved-1f1b", 2), ("interleaved-1f1b", 3), ("interleaved-1f1b", 4),
            ("looped-bfs", 1), ("looped-bfs", 2), ("looped-bfs", 3), ("looped-bfs", 4))


__all__ = ["Certificate", "certificate", "certificate_options", "covering", "families"]
