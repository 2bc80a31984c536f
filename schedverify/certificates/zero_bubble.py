"""Certificates of ZB-H1 and ZB-H2.

ZB-H1 with one stage per device (generators/zero_bubble.py, chunks = 1),
on the slice the paper draws: c == 0 and t_I == t_W == t_F (every pass costs t_F).

Device d runs w = min(p-1-d, m) warm-up forwards, then for k < m - w the iteration
F(w+k), I(k), and W(k-d) when k >= d; then I(k) (and W(k-d) when k >= d) for the
remaining k; then the W not yet run.  In units of t_F:

    start F(d, i) = d + i                                  for i <= w
                  = 2i + d + max(0, i - p + 1)             for i > w
    start I(d, k) = 2p - 1 - d + 2k + max(0, min(k - d, m - p))
    start W(d, j) = start I(d, j + d) + 1                  for j + d < m (right after it)
                  = 2p + m - 1 + j + max(0, min(m-1-d, m-p)) for j + d >= m, m > d
                  = 2p - 2 - d + 2m + j                    for j + d >= m, m <= d

ZB-H2 on the same slice: w = min(2(p-1-d), m) warm-up forwards, W lag L = 2d:

    start F(d, i) = d + i                                  for i <= w
                  = 2i - 2p + 2 + 3d + max(0, i - 2p + 2)  for i > w
    start I(d, k) = 2p - 1 - d + 2k + max(0, min(k - 2d, m - 2p + 1))
    start W(d, j) = start I(d, j + L) + 1                  for j + L < m
                  = start I(d, m-1) + 2 + j - m + L        for j + L >= m, m > L
                  = start I(d, m-1) + 1 + j                for j + L >= m, m <= L
    the device that ends last: min(p - 1, floor((m - 1)/2))
"""

from __future__ import annotations

import dataclasses
from types import MappingProxyType

from ..formulas.tropical import C_ZERO, UNIT_SPLIT
from ..model import F, I, W
from .base import DEVICE_0_TOPS, GROUP_RULE, KINDS_SPLIT, Certificate, Cone, run_facts


def _order(scale: int):
    """pos and pred of ``_build.phases(work, work, scale*(p-1-d), w_lag=scale*d)``."""

    def wl(o, p, m, d):
        return o.Min(scale * (p - 1 - d), m), scale * d

    def pos(o, k, p, m, d, i):
        w, L = wl(o, p, m, d)
        if k == F:
            return o.If(i < w, i, w + 2 * (i - w) + o.Max(0, i - w - L))
        if k == I:
            return o.Min(w + i + 1, m) + i + o.Max(0, i - L)
        return o.If(i + L < m, o.Min(w + i + L + 1, m) + 2 * i + L + 1, 2 * m + i)

    def pred(o, k, p, m, d, i):
        w, L = wl(o, p, m, d)
        if k == F:
            return [(o.And(i > 0, i <= w), (F, i - 1)),
                    (o.And(i > w, i - w - 1 >= L), (W, i - w - 1 - L)),
                    (o.And(i > w, i - w - 1 < L), (I, i - w - 1))]
        if k == I:
            return [(i < m - w, (F, w + i)),
                    (o.And(i >= m - w, i == 0), (F, m - 1)),
                    (o.And(i >= m - w, i > 0, i - 1 >= L), (W, i - 1 - L)),
                    (o.And(i >= m - w, i > 0, i - 1 < L), (I, i - 1))]
        return [(i + L < m, (I, i + L)),
                (o.And(i + L >= m, i >= 1), (W, i - 1)),
                (o.And(i + L >= m, i == 0), (I, m - 1))]

    def freed(o, k, p, m, d, i):
        w, L = wl(o, p, m, d)
        if k == I:
            return o.If(i > w, i - w, 0)
        return o.If(i > w, o.Max(0, i - w - L), 0)

    return wl, pos, pred, freed


_wl1, _pos, _pred, _freed = _order(1)
_wl2, _pos2, _pred2, _freed2 = _order(2)


def _w(o, p, m, d):
    return _wl1(o, p, m, d)[0]


def _i_start(o, p, m, d, k):
    return 2 * p - 1 - d + 2 * k + o.Max(0, o.Min(k - d, m - p))


def _start(o, k, p, m, d, i):
    w = _w(o, p, m, d)
    if k == F:
        return {"t_F": o.If(i <= w, d + i, 2 * i + d + o.Max(0, i - p + 1))}
    if k == I:
        return {"t_F": _i_start(o, p, m, d, i)}
    tail = o.If(m > d, 2 * p + m - 1 + i + o.Max(0, o.Min(m - 1 - d, m - p)), 2 * p - 2 - d + 2 * m + i)
    return {"t_F": o.If(i + d < m, _i_start(o, p, m, d, i + d) + 1, tail)}


def _peak_memory2(o, p, m, d):
    big = m > p - d
    return o.If(big, o.Min(m, p) + p - d, 2 * m), o.If(big, o.Min(m, p) - 1, m - 1)


ZB_H1 = Certificate(
    family="zb-h1", kinds=KINDS_SPLIT, costs=("t_F",),
    fixed=(("c", "0"), ("t_I", "t_F"), ("t_W", "t_F")),
    duration={F: {"t_F": 1}, I: {"t_F": 1}, W: {"t_F": 1}},
    domain="p >= 1, m >= 1, v == 1", in_domain=lambda o, p, m: o.And(p >= 1, m >= 1),
    merge=UNIT_SPLIT, pos=_pos, pred=_pred, start=_start,
    last=lambda o, p, m, d: (W, m - 1),
    critical=lambda o, p, m: 0,
    freed=_freed,
    peak_inflight=lambda o, p, m, d: (o.Min(p, m), o.Min(p, m) - 1),
    peak_memory2=_peak_memory2,
    warmup=lambda o, p, m, d: o.Min(p - d, m),
    top=DEVICE_0_TOPS,
    summary="1F1B's warm-up, F I pairs with W(k-d) after I(k), the last W at the end",
    order_argument=(
        "generators/zero_bubble.py zb_h1() with chunks = 1 calls _zb_handcrafted(k=1), i.e. "
        "_build.phases(work, work, p-1-d, w_lag=d): w = min(p-1-d, m) forwards; then for "
        "k < m-w: F(d,w+k), I(d,k) and, when k >= d, W(d,k-d); then for k >= m-w: I(d,k) "
        "and, when k >= d, W(d,k-d); then W(d,max(0,m-d)..m-1).  Before iteration k there "
        "are max(0, k-d) W, so F(d,w+k) is at w + 2k + max(0,k-d), I(d,k) at "
        "min(w+k+1, m) + k + max(0,k-d), W(d,j) right after I(d,j+d) when j+d < m, and at "
        "2m + j in the tail."),
)


# --------------------------------------------------------------------------- ZB-H1, free costs
#
# At c == 0 with t_F, t_I, t_W free the makespan is the largest of three linear forms, one
# per cost that is smallest (docs/proofs.md section 2, "cones").  On the cone where t_s is
# the smallest, in the coordinates t_s and t_K - t_s (K the two other kinds), every
# action's start is bounded, coordinate by coordinate, by the most actions (of any kind, for
# t_s) and the most actions of kind K (for t_K - t_s) on a chain of waits before it; one
# chain per cone is as long as that bound's end of W(0, N-1).  The same text serves v = 1
# (microbatch i, N = m) and v >= 2 chunks (table index q, N = vm, m a multiple of p).

_COST = {F: "t_F", I: "t_I", W: "t_W"}


def _longest(v: int):
    """Per kind K: the most actions of kind K on a chain of waits that ends just before
    action k(d, q) (its start time at t_K = 1 and every other cost 0), and under "u" the
    most actions of any kind (its start at unit costs).  N = vm, w = min(vp - 1 - d, N)."""

    def f(o, k, p, m, d, q):
        n, K = v * m, v * m + p - 1
        w = o.Min(v * p - 1 - d, n)

        def u_i(j):
            # at j = N-1 the Min is N - vp (d < p); the If hands the claims that plain end,
            # which Z3 decides about three times faster in a claim (bubble_fraction)
            extra = o.If(j == n - 1, o.Max(0, n - v * p), o.Max(0, o.Min(j - d, n - v * p)))
            return (v + 1) * p - 1 - d + 2 * j + extra

        if k == F:
            return {"u": o.If(q <= w, d + q, 2 * q + d - (v - 1) * p + o.Max(0, q - v * p + 1)),
                    F: d + q, I: o.If(q > w, q - (v - 1) * p, 0), W: o.Max(0, q - v * p + 1)}
        if k == I:
            return {"u": u_i(q), F: o.Min(K, v * p + q), I: p - 1 - d + q, W: o.Max(0, q - d)}
        tail = o.If(n > d, u_i(n - 1) + 2 + q - n + d, u_i(n - 1) + 1 + q)
        last = q == n - 1  # the Mins at the last W, plainly (as above)
        return {"u": o.If(q + d < n, u_i(q + d) + 1, tail),
                F: o.If(last, K, o.Min(K, v * p + d + q)), I: o.If(last, K - d, o.Min(p + q, K - d)),
                W: q}

    return f


def _cone_names(low: str) -> dict:
    """The coordinates of the cone where t_low is the smallest cost: t_low itself and
    t_K - t_low for the two other kinds K."""
    s = _COST[low]
    return {k: (s if k == low else f"{_COST[k]}-{s}") for k in KINDS_SPLIT}


def _chain(v: int, low: str, cert_of):
    """The chain of waits as long as the makespan on the cone where t_low is the smallest
    cost: Z3 facts (each a wait of docs/spec.md 3.4 read from the certificate's deps, or a
    run along one device's order) and the number of actions of each kind on it.
    ``cert_of()``: the certificate whose order and deps the chain uses."""

    def lower(o, p, m, d, i):
        from .needs import deps as _deps

        cert = cert_of()
        n, last, f0 = v * m, 3 * v * m - 1, (v - 1) * p

        def pos(k, dev, j):
            return cert.pos(o, k, p, m, dev, j)

        def waits(kind, dd, ii, target):
            return o.Or(*[o.And(c, t[1] == target[1], t[2] == target[2])
                          for c, t, _ in _deps(cert, o, kind, p, m, dd, ii) if t[0] == target[0]])

        if low == F:
            # device 0's F(0,0..f0), F(d-1,f0) -> F(d,f0) up to p-1, I(p-1,0) (stage chunk v-1,
            # whose forward is at f0), I(d+1,0) -> I(d,0) down to 0, device 0 to its end
            warm = o.Min(v * p, n)
            facts = [
                ("chain: device 0 starts with F(0,0..(v-1)p)",
                 run_facts(o, pos, n, 0, 0, pos(F, 0, f0), {F: (0, f0 + 1), I: (0, 0), W: (0, 0)})),
                ("chain: F(d,(v-1)p) waits for F(d-1,(v-1)p), d >= 1",
                 o.Or(d < 1, waits(F, d, f0, (F, d - 1, f0)))),
                ("chain: I(p-1,0) waits for F(p-1,(v-1)p)", waits(I, p - 1, 0, (F, p - 1, f0))),
                ("chain: I(d,0) waits for I(d+1,0), d < p-1",
                 o.Or(d >= p - 1, waits(I, d, 0, (I, d + 1, 0)))),
                ("chain: device 0 from I(0,0) to its end: N - min(vp,N) F, every I and W",
                 run_facts(o, pos, n, 0, pos(I, 0, 0), last, {F: (warm, n - warm), I: (0, n), W: (0, n)})),
            ]
            return facts, {F: f0 + p + n - warm, I: p - 1 + n, W: n}
        # F(d-1,0) -> F(d,0) up to p-1, device p-1 from F(p-1,0) to I(p-1,N-1), I(d+1,N-1) ->
        # I(d,N-1) down to device e, then (cone of t_W, e = 0) W(0,N-1), or (cone of t_I)
        # device e = min(N,p)-1 to its end
        head = [
            ("chain: F(d,0) waits for F(d-1,0), d >= 1", o.Or(d < 1, waits(F, d, 0, (F, d - 1, 0)))),
            ("chain: device p-1 from F(p-1,0) to I(p-1,N-1): every F and I, max(0,N-p) W",
             run_facts(o, pos, n, p - 1, 0, pos(I, p - 1, n - 1),
                  {F: (0, n), I: (0, n), W: (0, o.Max(0, n - p))})),
            ("chain: I(d,N-1) waits for I(d+1,N-1), d < p-1",
             o.Or(d >= p - 1, waits(I, d, n - 1, (I, d + 1, n - 1)))),
        ]
        if low == W:
            facts = head + [("chain: W(0,N-1) waits for I(0,N-1)", waits(W, 0, n - 1, (I, 0, n - 1)))]
            return facts, {F: p - 1 + n, I: n + p - 1, W: o.Max(0, n - p) + 1}
        e = o.Min(n - 1, p - 1)
        j0 = o.Max(0, n - 1 - e)
        facts = head + [("chain: device min(N,p)-1 after I(e,N-1): the W from max(0, N-1-e) on",
                         run_facts(o, pos, n, e, pos(I, e, n - 1) + 1, last,
                              {F: (n, 0), I: (n, 0), W: (j0, n - j0)}))]
        return facts, {F: p - 1 + n, I: n + p - 1 - e, W: o.Max(0, n - p) + n - j0}

    return lower


def _cone(v: int, low: str, base: Certificate, cert_of) -> Cone:
    """The bound certificate on the cone where t_low is the smallest cost, in its
    coordinates (t_low, t_K - t_low)."""
    names = _cone_names(low)
    s = names[low]
    coords = {names[k]: ({_COST[k]: 1} if k == low else {_COST[k]: 1, _COST[low]: -1})
              for k in KINDS_SPLIT}
    costs = {_COST[k]: ({s: 1} if k == low else {s: 1, names[k]: 1}) for k in KINDS_SPLIT}
    chain = _chain(v, low, cert_of)
    longest = _longest(v)

    def start(o, k, p, m, d, i):
        n = longest(o, k, p, m, d, i)
        return {s: n["u"]} | {names[kk]: n[kk] for kk in KINDS_SPLIT if kk != low}

    def lower(o, p, m, d, i):
        facts, count = chain(o, p, m, d, i)
        length = {s: sum(count.values())} | {names[kk]: count[kk] for kk in KINDS_SPLIT if kk != low}
        return facts, length

    sub = dataclasses.replace(
        base, costs=tuple(names[k] for k in KINDS_SPLIT),
        duration={k: ({s: 1} if k == low else {s: 1, names[k]: 1}) for k in KINDS_SPLIT},
        start=start, lower=lower)
    return Cone(f"{_COST[low]} smallest", coords, costs, sub)


def _by_cones(v: int, order: Certificate) -> Certificate:
    """``order`` (a certificate of ZB-H1's order at v chunks) with the timing at c == 0, t_F,
    t_I, t_W free, by three cones; the makespan at W(0, N-1)."""
    base = dataclasses.replace(
        order, costs=("t_F", "t_I", "t_W"), fixed=(("c", "0"),),
        duration={F: {"t_F": 1}, I: {"t_I": 1}, W: {"t_W": 1}}, merge=C_ZERO, start=None,
        last=lambda o, p, m, d: (W, v * m - 1), critical=lambda o, p, m: 0,
        summary=order.summary + "; at c == 0, t_F, t_I, t_W free: three cones (the smallest "
                                "cost), a bound and a chain on each")
    made: list = []
    cones = tuple(_cone(v, k, base, lambda: made[0]) for k in (W, F, I))
    made.append(dataclasses.replace(base, cones=cones))
    return made[0]


#: ZB-H1 (v = 1) at c == 0 with t_F, t_I, t_W free: a certificate by cones (docs/proofs.md)
ZB_H1_FREE = _by_cones(1, dataclasses.replace(ZB_H1, domain="p >= 1, m >= 1, v == 1"))


# --------------------------------------------------------------------------- ZB-H1, v chunks


def _make_v(v: int) -> Certificate:
    """ZB-H1 with v >= 2 chunks per device (PyTorch's ScheduleInterleavedZeroBubble), group
    size p, for every p and every m a multiple of p: the order and the peaks, and the
    timing at c == 0 by cones.

    ``looped_rows(p, m, v, p, warmup=(v-1)p + p-1-d, w_lag=d)`` hands ``phases`` the
    forwards in Megatron's table order (index q = 0..vm-1) and the backwards in the same
    order with the chunks reversed, so with q for the microbatch and N = vm for m the
    positions are those of ``_order`` with the warm-up w = min(vp - 1 - d, N) and the lag d.
    """

    def N(o, m):
        return v * m

    def wl(o, p, m, d):
        return o.Min(v * p - 1 - d, N(o, m)), d

    def pos(o, k, p, m, d, i):
        (w, L), n = wl(o, p, m, d), N(o, m)
        if k == F:
            return o.If(i < w, i, w + 2 * (i - w) + o.Max(0, i - w - L))
        if k == I:
            return o.Min(w + i + 1, n) + i + o.Max(0, i - L)
        return o.If(i + L < n, o.Min(w + i + L + 1, n) + 2 * i + L + 1, 2 * n + i)

    def pred(o, k, p, m, d, i):
        (w, L), n = wl(o, p, m, d), N(o, m)
        if k == F:
            return [(o.And(i > 0, i <= w), (F, i - 1)),
                    (o.And(i > w, i - w - 1 >= L), (W, i - w - 1 - L)),
                    (o.And(i > w, i - w - 1 < L), (I, i - w - 1))]
        if k == I:
            return [(i < n - w, (F, w + i)),
                    (o.And(i >= n - w, i == 0), (F, n - 1)),
                    (o.And(i >= n - w, i > 0, i - 1 >= L), (W, i - 1 - L)),
                    (o.And(i >= n - w, i > 0, i - 1 < L), (I, i - 1))]
        return [(i + L < n, (I, i + L)),
                (o.And(i + L >= n, i >= 1), (W, i - 1)),
                (o.And(i + L >= n, i == 0), (I, n - 1))]

    def freed(o, k, p, m, d, i):
        w, L = wl(o, p, m, d)
        if k == I:
            return o.If(i > w, i - w, 0)
        return o.If(i > w, o.Max(0, i - w - L), 0)

    def chunk(o, p, q):
        """The table chunk of index q, (q mod vp) div p, as a sum of case splits (v fixed)."""
        r = q - v * p * o.DivV(q, v * p)
        out = 0
        for k in range(1, v):
            out = out + o.If(r >= k * p, 1, 0)
        return out

    def deps(o, k, p, m, d, q):
        """docs/spec.md 3.4 in table indices, as interleaved 1F1B's (certificates/interleaved.py)
        with I for B, and W(d, q) after I(d, q) (same stage and microbatch)."""
        if k == W:
            return [(True, (I, d, q), False)]
        c = chunk(o, p, q)
        if k == F:
            return [(d >= 1, (F, d - 1, q), True),
                    (o.And(d == 0, c >= 1), (F, p - 1, q - p), p > 1)]
        return [(True, (F, d, q + (v - 1) * p - 2 * p * c), False),
                (d + 1 < p, (I, d + 1, q), True),
                (o.And(d == p - 1, c >= 1), (I, 0, q - p), p > 1)]

    def below(o, p, ct):
        """ct * p for a table chunk ct of 0..v-1, as a sum of case splits."""
        out = 0
        for k in range(1, v):
            out = out + o.If(ct >= k, p, 0)
        return out

    def action(o, k, p, m, d, q):
        """(chunk, microbatch) at table index q, as interleaved 1F1B's (I and W: chunks
        reversed, as a backward's)."""
        g = o.DivV(q, v * p)
        ct = chunk(o, p, q)
        i = g * p + q - v * p * g - below(o, p, ct)
        return (ct if k == F else v - 1 - ct), i

    def index_of(o, k, p, m, d, c, i):
        ct = c if k == F else v - 1 - c
        g = o.DivV(i, p)
        return g * v * p + below(o, p, ct) + i - g * p

    order = Certificate(
        family="zb-h1", kinds=KINDS_SPLIT, costs=(), fixed=(), duration={},
        domain=f"p >= 1, m >= p, m % p == 0, v == {v}", chunks=v, count=N,
        in_domain=lambda o, p, m: o.And(p >= 1, m >= p, m - p * o.DivV(m, p) == 0),
        family_domain=lambda o, p, m: m % p == 0,
        family_domain_text=GROUP_RULE, nia_tactic=True,
        merge=C_ZERO, pos=pos, pred=pred, deps=deps, start=None, last=None, critical=None,
        freed=freed,
        # w + L + 1 = vp in flight at F(w + L), the last forward before the first W
        peak_inflight=lambda o, p, m, d: (v * p, v * p - 1),
        peak_memory2=lambda o, p, m, d: (2 * v * p - d, v * p - 1),
        warmup=lambda o, p, m, d: v * p - d,
        top=DEVICE_0_TOPS, action=action, index_of=index_of,
        summary=f"v = {v}: ZB-H1's pattern over the table index, w = {v}p - 1 - d forwards, W lag d",
        order_argument=(
            "generators/zero_bubble.py zb_h1() with chunks = v >= 2 calls "
            "_build.looped_rows(p, m, v, p, warmup=(v-1)p + p-1-d, w_lag=d): phases() over the "
            "forwards in table order and the backwards in the same order, chunks reversed, "
            "so ZB-H1's positions with the table index for the microbatch and vm for m."),
    )
    return _by_cones(v, order)


#: chunk count -> the certificate of ZB-H1 with v chunks (PyTorch's ZB1P): order, peaks,
#: and the timing at c == 0 by cones
ZB_H1_V = MappingProxyType({v: _make_v(v) for v in range(2, 5)})


# --------------------------------------------------------------------------- ZB-H2


def _i2(o, p, m, d, k):
    return 2 * p - 1 - d + 2 * k + o.Max(0, o.Min(k - 2 * d, m - 2 * p + 1))


def _start2(o, k, p, m, d, i):
    w, L = _wl2(o, p, m, d)
    if k == F:
        return {"t_F": o.If(i <= w, d + i, 2 * i - 2 * p + 2 + 3 * d + o.Max(0, i - 2 * p + 2))}
    if k == I:
        return {"t_F": _i2(o, p, m, d, i)}
    last = _i2(o, p, m, d, m - 1)
    tail = o.If(m > L, last + 2 + i - m + L, last + 1 + i)
    return {"t_F": o.If(i + L < m, _i2(o, p, m, d, i + L) + 1, tail)}


def _peak_memory2_h2(o, p, m, d):
    big = m > 2 * p - 1 - 2 * d
    return (o.If(big, o.Min(m + 2 * p - 1 - 2 * d, 4 * p - 2 - 2 * d), 2 * m),
            o.If(big, o.Min(m - 1, 2 * p - 2), m - 1))


ZB_H2 = Certificate(
    family="zb-h2", kinds=KINDS_SPLIT, costs=("t_F",),
    fixed=(("c", "0"), ("t_I", "t_F"), ("t_W", "t_F")),
    duration={F: {"t_F": 1}, I: {"t_F": 1}, W: {"t_F": 1}},
    domain="p >= 1, m >= 1", in_domain=lambda o, p, m: o.And(p >= 1, m >= 1),
    merge=UNIT_SPLIT, pos=_pos2, pred=_pred2, start=_start2,
    last=lambda o, p, m, d: (W, m - 1),
    critical=lambda o, p, m: o.Min(p - 1, o.Div(m - 1, 2)),
    freed=_freed2,
    peak_inflight=lambda o, p, m, d: (o.Min(m, 2 * p - 1), o.Min(m, 2 * p - 1) - 1),
    peak_memory2=_peak_memory2_h2,
    warmup=lambda o, p, m, d: o.Min(2 * p - 1 - 2 * d, m),
    top=DEVICE_0_TOPS,
    summary="2(p-1-d) warm-up forwards, F I pairs with W(k-2d) after I(k), the last W at the end",
    order_argument=(
        "generators/zero_bubble.py zb_h2() calls _zb_handcrafted(k=2), i.e. "
        "_build.phases(work, work, 2(p-1-d), w_lag=2d): as ZB-H1 with the warm-up "
        "w = min(2(p-1-d), m) and the lag L = 2d.  F(d,w+k) is at w + 2k + max(0,k-L), "
        "I(d,k) at min(w+k+1, m) + k + max(0,k-L), W(d,j) right after I(d,j+L) when "
        "j+L < m, and at 2m + j in the tail."),
)
