"""Order certificates of interleaved 1F1B (generators/interleaved.py, default group size p),
one per chunk count v: the peaks and the warm-up for every p and m, no timing yet.

``_build.looped_rows`` gives device d the forwards of Megatron's schedule table in order
(virtual index q = 0..mv-1: group G = q div vp, chunk (q mod vp) div p, microbatch
Gp + q mod p) and the backwards of the same table with the chunks reversed, in the 1F1B
pattern of ``_build.phases`` with w = min(2(p-d-1) + (v-1)p, mv) warm-up forwards.  So,
with q in place of the microbatch and mv in place of m, the positions are 1F1B's: F_q at
q (q < w) or 2q - w, B_q at w + 2q + 1 (q < mv - w) or mv + q.  In-flight counts pairs
(stage, microbatch): F_q starts one, B_q ends one, whichever pair it is.
"""

from __future__ import annotations

from types import MappingProxyType

from ..model import B, F
from .base import DEVICE_0_TOPS, KINDS_FULL, Certificate


def _make(v: int) -> Certificate:
    def N(o, m):
        return v * m

    def w(o, p, m, d):
        return o.Min(2 * (p - d - 1) + (v - 1) * p, N(o, m))

    def pos(o, k, p, m, d, q):
        ww, n = w(o, p, m, d), N(o, m)
        if k == F:
            return o.If(q < ww, q, 2 * q - ww)
        return o.If(q < n - ww, ww + 2 * q + 1, n + q)

    def pred(o, k, p, m, d, q):
        ww, n = w(o, p, m, d), N(o, m)
        if k == F:
            return [(o.And(q > 0, q <= ww), (F, q - 1)), (q > ww, (B, q - ww - 1))]
        return [(q < n - ww, (F, ww + q)),
                (o.And(q >= n - ww, q > 0), (B, q - 1)),
                (o.And(q >= n - ww, q == 0), (F, n - 1))]

    def peak(o, p, m, d):
        ww, n = w(o, p, m, d), N(o, m)
        return o.Min(ww + 1, n), o.Min(ww, n - 1)

    def index(p, m):
        from ..generators._build import megatron_schedule_table

        table = megatron_schedule_table(m, v, p)
        fwd = {(i, c): q for q, (i, c) in enumerate(table)}
        bwd = {(i, v - 1 - c): q for q, (i, c) in enumerate(table)}
        return lambda a: (fwd if a.kind == F else bwd)[(a.microbatch, a.stage // p)]

    return Certificate(
        family="interleaved-1f1b", kinds=KINDS_FULL, costs=(), fixed=(), duration={},
        domain=f"p >= 1, m >= p, v == {v} (order only)", chunks=v, count=N,
        in_domain=lambda o, p, m: o.And(p >= 1, m >= p),
        family_domain=lambda o, p, m: m % p == 0,
        pos=pos, pred=pred, start=None, last=None, critical=None,
        freed=lambda o, k, p, m, d, q: o.If(q > w(o, p, m, d), q - w(o, p, m, d), 0),
        peak_inflight=peak,
        peak_memory2=lambda o, p, m, d: (2 * peak(o, p, m, d)[0], peak(o, p, m, d)[1]),
        warmup=lambda o, p, m, d: o.Min(w(o, p, m, d) + 1, N(o, m)),
        top=DEVICE_0_TOPS,
        index=index,
        summary=f"v = {v}: 1F1B's pattern over the virtual index, w = min(2(p-d-1) + {v - 1}p, {v}m)",
        order_argument=(
            "generators/interleaved.py interleaved_1f1b() calls _build.looped_rows(p, m, v, p, "
            "warmup=2(p-d-1) + (v-1)p), which hands phases() the forwards in table order and the "
            "backwards in the same order with the chunks reversed; phases() is 1F1B's pattern "
            "over those lists."),
    )


#: read-only: chunk count -> certificate
INTERLEAVED = MappingProxyType({v: _make(v) for v in (2, 3, 4)})
