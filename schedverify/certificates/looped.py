"""Certificates of looped breadth-first pipelining (generators/interleaved.py looped_bfs),
one per chunk count v, on the slice c == 0 (t_F, t_B free).

Device d holds stages c*p + d (c = 0..v-1) and runs every forward of chunk 0, then of chunk
1, ..., then the backwards chunk by chunk in reverse, each chunk's microbatches last-first.
The index of an action is its place among the device's forwards (q = c*m + i) or backwards
(q = (v-1-c)*m + (m-1-i)); with v fixed, the chunk of an index is a sum of case splits
[q >= k*m], so everything stays linear.  With M = max(m, p):

    start F(d, c, i) = (d + c*M + i) t_F
    start B(d, c, i) = (p + m - 1 + (v-1)*M) t_F + (p - 1 - d + (v-1-c)*M + m - 1 - i) t_B
    makespan         = (m + p - 1 + (v-1)*M) (t_F + t_B)
"""

from __future__ import annotations

from types import MappingProxyType

from ..formulas.tropical import C_ZERO
from ..model import B, F
from .base import DEVICE_0_TOPS, KINDS_FULL, Certificate


def _make(v: int) -> Certificate:
    def N(o, m):
        return v * m

    def M(o, p, m):
        return o.Max(m, p)

    def chunks_below(o, m, q, scale):
        """sum over k = 1..v-1 of [q >= k m] * scale: (chunk of index q) * scale."""
        out = 0
        for k in range(1, v):
            out = out + o.If(q >= k * m, scale, 0)
        return out

    def pos(o, k, p, m, d, q):
        return q if k == F else N(o, m) + q

    def pred(o, k, p, m, d, q):
        if k == F:
            return [(q > 0, (F, q - 1))]
        return [(q > 0, (B, q - 1)), (q == 0, (F, N(o, m) - 1))]

    def deps(o, k, p, m, d, q):
        """docs/spec.md 3.4 for stage c*p + d on device d (deps.NEEDS)."""
        if k == F:
            # F(c*p+d, i) needs F(c*p+d-1, i): device d-1, or device p-1 of chunk c-1
            return [(d >= 1, (F, d - 1, q), True),
                    (o.And(d == 0, q >= m), (F, p - 1, q - m), p > 1)]
        rev = chunks_below(o, m, q, 1)          # v-1-c
        i = m - 1 - (q - chunks_below(o, m, q, m))
        c_m = (v - 1) * m - chunks_below(o, m, q, m)  # c*m
        # B(c*p+d, i) needs F(c*p+d, i), and B(c*p+d+1, i): device d+1, or device 0 of
        # chunk c+1 (none for the last stage, whose first backward needs its own forward)
        return [(True, (F, d, c_m + i), False),
                (d + 1 < p, (B, d + 1, q), True),
                (o.And(d == p - 1, rev >= 1), (B, 0, q - m), p > 1)]

    def start(o, k, p, m, d, q):
        MM = M(o, p, m)
        if k == F:
            return {"t_F": d + chunks_below(o, m, q, MM) + q - chunks_below(o, m, q, m), "t_B": 0}
        return {"t_F": p + m - 1 + (v - 1) * MM,
                "t_B": p - 1 - d + chunks_below(o, m, q, MM) + q - chunks_below(o, m, q, m)}

    def times(o, c, m):
        """c * m for a chunk c of 0..v-1, as a sum of case splits (linear for symbolic m)."""
        out = 0
        for k in range(1, v):
            out = out + o.If(c >= k, m, 0)
        return out

    def action(o, k, p, m, d, q):
        """(chunk, microbatch) of the q-th forward (chunk q div m) or backward (chunks in
        reverse, microbatches last-first)."""
        rev = chunks_below(o, m, q, 1)
        within = q - chunks_below(o, m, q, m)
        if k == F:
            return rev, within
        return v - 1 - rev, m - 1 - within

    def index_of(o, k, p, m, d, c, i):
        if k == F:
            return times(o, c, m) + i
        return times(o, v - 1 - c, m) + m - 1 - i

    return Certificate(
        family="looped-bfs", kinds=KINDS_FULL, costs=("t_F", "t_B"), fixed=(("c", "0"),),
        duration={F: {"t_F": 1}, B: {"t_B": 1}},
        domain=f"p >= 1, m >= 1, v == {v}", chunks=v, count=N,
        in_domain=lambda o, p, m: o.And(p >= 1, m >= 1), merge=C_ZERO,
        pos=pos, pred=pred, start=start, deps=deps,
        last=lambda o, p, m, d: (B, N(o, m) - 1),
        critical=lambda o, p, m: 0,
        freed=lambda o, k, p, m, d, q: 0,
        peak_inflight=lambda o, p, m, d: (N(o, m), N(o, m) - 1),
        peak_memory2=lambda o, p, m, d: (2 * N(o, m), N(o, m) - 1),
        warmup=lambda o, p, m, d: N(o, m),
        top=DEVICE_0_TOPS,
        action=action, index_of=index_of,
        summary=f"v = {v}: each chunk's forwards in turn, then the backwards in reverse",
        order_argument=(
            "generators/interleaved.py looped_bfs(): row d is [F(c*p+d, i) for c in 0..v-1 for i "
            "in 0..m-1] + [B(c*p+d, i) for c in v-1..0 for i in m-1..0]."),
    )


#: read-only: chunk count -> certificate
LOOPED = MappingProxyType({v: _make(v) for v in (1, 2, 3, 4)})
