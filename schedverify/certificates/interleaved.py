"""Certificates of interleaved 1F1B (generators/interleaved.py, default group size p), one
per chunk count v = 2..8: the order, the peaks and the warm-up for every p and m (m a multiple of
p, the generator's domain), and on the slice c == 0 (t_F, t_B free) the makespan.

The order.  ``_build.looped_rows`` gives device d the forwards of Megatron's schedule table
in order (virtual index q = 0..mv-1: group G = q div vp, chunk (q mod vp) div p, microbatch
Gp + q mod p) and the backwards of the same table with the chunks reversed, in the 1F1B
pattern of ``_build.phases`` with w = min(2(p-d-1) + (v-1)p, mv) warm-up forwards.  So,
with q in place of the microbatch and mv in place of m, the positions are 1F1B's: F_q at
q (q < w) or 2q - w, B_q at w + 2q + 1 (q < mv - w) or mv + q.  In-flight counts pairs
(stage, microbatch): F_q starts one, B_q ends one, whichever pair it is.

The timing.  The start times are a maximum of two or three linear forms in t_F, t_B whose
breakpoints move with p (docs/proofs.md section 7), so no single linear form is exact.  This
certificate is a *bound* (``Certificate.lower``): its ``start`` counts, coordinate by
coordinate, at least the forwards and at least the backwards on any chain of waits before
the action (N = mv, K = N + p - 1, P(d) = (v+1)p - d - 1):

    start F(d, q) <= (d + q) t_F + [q > w] (q - w + p - 1 - d) t_B
    start B(d, q) <= min(K, P(d) + q) t_F + (p - 1 - d + q) t_B

which satisfies every ASAP inequality (so it bounds the real start from above at every
cost), and the chain F(0,0) -> ... -> F(p-1,0), device p-1's whole order, B(p-2,N-1) ->
... -> B(0,N-1) is K (t_F + t_B) long, which is the bound's end of B(0, N-1): the makespan
is exactly (mv + p - 1)(t_F + t_B).
"""

from __future__ import annotations

from types import MappingProxyType

from ..formulas.tropical import C_ZERO
from ..model import B, F
from .base import DEVICE_0_TOPS, GROUP_RULE, KINDS_FULL, Certificate


def _make(v: int) -> Certificate:
    def N(o, m):
        return v * m

    def w(o, p, m, d):
        return o.Min(2 * (p - d - 1) + (v - 1) * p, N(o, m))

    def within(o, p, q):
        """q mod vp: the place of table index q in its group."""
        return q - v * p * o.DivV(q, v * p)

    def chunk(o, p, q):
        """The table chunk of index q, (q mod vp) div p, as a sum of case splits (v fixed)."""
        r = within(o, p, q)
        out = 0
        for k in range(1, v):
            out = out + o.If(r >= k * p, 1, 0)
        return out

    def below(o, p, ct):
        """ct * p for a table chunk ct of 0..v-1, as a sum of case splits."""
        out = 0
        for k in range(1, v):
            out = out + o.If(ct >= k, p, 0)
        return out

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

    def deps(o, k, p, m, d, q):
        """docs/spec.md 3.4 (deps.NEEDS) for stage c*p + d on device d, in table indices.
        A forward of table chunk c: its stage's previous one is device d-1 at the same
        index, or (d = 0, c >= 1) device p-1 at chunk c-1, index q - p.  The backward at
        index q is of stage chunk v-1-c: its own forward is at q + (v-1-2c)p; the next
        stage's backward is device d+1 at q, or (d = p-1, c >= 1) device 0 at q - p."""
        c = chunk(o, p, q)
        if k == F:
            return [(d >= 1, (F, d - 1, q), True),
                    (o.And(d == 0, c >= 1), (F, p - 1, q - p), p > 1)]
        return [(True, (F, d, q + (v - 1) * p - 2 * p * c), False),
                (d + 1 < p, (B, d + 1, q), True),
                (o.And(d == p - 1, c >= 1), (B, 0, q - p), p > 1)]

    def start(o, k, p, m, d, q):
        ww, n = w(o, p, m, d), N(o, m)
        if k == F:
            return {"t_F": d + q, "t_B": o.If(q > ww, q - ww + p - 1 - d, 0)}
        # min(K, P(d) + q) is K at q = N-1 (vp >= 1); the If only lets sympy see that, so
        # the makespan reads (mv + p - 1)(t_F + t_B) rather than a Min
        cap = n + p - 1
        return {"t_F": o.If(q == n - 1, cap, o.Min(cap, (v + 1) * p - d - 1 + q)),
                "t_B": p - 1 - d + q}

    def lower(o, p, m, d, q):
        """The chain F(0,0) -> ... -> F(p-1,0), device p-1's every action, then B(p-2,N-1)
        -> ... -> B(0,N-1): (p-1) t_F + N (t_F + t_B) + (p-1) t_B."""
        n = N(o, m)

        def waits(kind, dd, qq, target):
            return o.Or(*[o.And(cond, o.And(t[1] == target[1], t[2] == target[2]))
                          for cond, t, _ in deps(o, kind, p, m, dd, qq) if t[0] == target[0]])

        chain = [
            ("chain: F(d,0) waits for F(d-1,0), d >= 1",
             o.Or(d < 1, waits(F, d, 0, (F, d - 1, 0)))),
            ("chain: device p-1 runs F(p-1,0) first and B(p-1,N-1) last, 2N actions",
             o.And(pos(o, F, p, m, p - 1, 0) == 0, pos(o, B, p, m, p - 1, n - 1) == 2 * n - 1)),
            ("chain: B(d,N-1) waits for B(d+1,N-1), d < p-1",
             o.Or(d >= p - 1, waits(B, d, n - 1, (B, d + 1, n - 1)))),
        ]
        return chain, {"t_F": p - 1 + n, "t_B": n + p - 1}

    def peak(o, p, m, d):
        """min(w + 1, N) in flight, reached at F_w (F_{N-1} when every forward is warm-up)."""
        n = N(o, m)
        return o.Min(2 * (p - d - 1) + (v - 1) * p + 1, n), o.Min(w(o, p, m, d), n - 1)

    def action(o, k, p, m, d, q):
        """(chunk, microbatch) at table index q: group G = q div vp, table chunk
        (q mod vp) div p, microbatch Gp + q mod p; a backward's chunk is reversed."""
        g = o.DivV(q, v * p)
        ct = chunk(o, p, q)
        i = g * p + within(o, p, q) - below(o, p, ct)
        return (ct if k == F else v - 1 - ct), i

    def index_of(o, k, p, m, d, c, i):
        ct = c if k == F else v - 1 - c
        g = o.DivV(i, p)
        return g * v * p + below(o, p, ct) + i - g * p

    return Certificate(
        family="interleaved-1f1b", kinds=KINDS_FULL, costs=("t_F", "t_B"), fixed=(("c", "0"),),
        duration={F: {"t_F": 1}, B: {"t_B": 1}}, merge=C_ZERO,
        domain=f"p >= 1, m >= p, m % p == 0, v == {v}", chunks=v, count=N,
        in_domain=lambda o, p, m: o.And(p >= 1, m >= p, m - p * o.DivV(m, p) == 0),
        family_domain=lambda o, p, m: m % p == 0,
        family_domain_text=GROUP_RULE,
        pos=pos, pred=pred, start=start, deps=deps, lower=lower, nia_tactic=True,
        last=lambda o, p, m, d: (B, N(o, m) - 1),
        critical=lambda o, p, m: 0,
        freed=lambda o, k, p, m, d, q: o.If(q > w(o, p, m, d), q - w(o, p, m, d), 0),
        peak_inflight=peak,
        peak_memory2=lambda o, p, m, d: (2 * peak(o, p, m, d)[0], peak(o, p, m, d)[1]),
        warmup=lambda o, p, m, d: peak(o, p, m, d)[0],
        top=DEVICE_0_TOPS,
        action=action, index_of=index_of,
        summary=(f"v = {v}: 1F1B's pattern over the virtual index, w = min(2(p-d-1) + {v - 1}p, "
                 f"{v}m); starts bounded per coordinate, makespan ({v}m + p - 1)(t_F + t_B)"),
        order_argument=(
            "generators/interleaved.py interleaved_1f1b() calls _build.looped_rows(p, m, v, p, "
            "warmup=2(p-d-1) + (v-1)p), which hands phases() the forwards in table order and the "
            "backwards in the same order with the chunks reversed; phases() is 1F1B's pattern "
            "over those lists."),
    )


#: read-only: chunk count -> certificate (Megatron's virtual pipeline sizes in practice; each
#: is proved only when a claim asks for its v, in 0.2-0.4 s)
INTERLEAVED = MappingProxyType({v: _make(v) for v in range(2, 9)})
