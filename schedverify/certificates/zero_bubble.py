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
from .base import DEVICE_0_TOPS, KINDS_SPLIT, Certificate, Cone


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


def _longest(o, k, p, m, d, i):
    """Per kind K of F, I, W: the most actions of kind K on a chain of waits that ends just
    before action k(d, i) (the start time at t_K = 1 and every other cost 0), and the most
    actions of any kind (the start at unit costs: ``_start``)."""
    w = _w(o, p, m, d)
    if k == F:
        return {F: d + i, I: o.If(i > w, i, 0), W: o.Max(0, i - p + 1)}
    if k == I:
        return {F: p + i, I: p - 1 - d + i, W: o.Max(0, i - d)}
    return {F: o.Min(p + d + i, m + p - 1), I: o.Min(p + i, m + p - 1 - d), W: i}


_COST = {F: "t_F", I: "t_I", W: "t_W"}


def _cone_names(low: str) -> dict:
    """The coordinates of the cone where t_low is the smallest cost: t_low itself and
    t_K - t_low for the two other kinds K."""
    s = _COST[low]
    return {k: (s if k == low else f"{_COST[k]}-{s}") for k in KINDS_SPLIT}


def _run(o, p, m, dev, lo, hi, kinds):
    """Z3 facts: device ``dev``'s positions lo..hi hold exactly, of each kind K, the
    actions K(dev, j0..j0+n-1) for ``kinds[K] = (j0, n)`` (positions increase with the
    index, order obligation), and nothing else (the counts fill the range)."""
    facts = []
    for k, (j0, n) in kinds.items():
        pos = lambda j, k=k: _pos(o, k, p, m, dev, j)  # noqa: E731
        facts.append(o.And(j0 >= 0, n >= 0, j0 + n <= m,
                           o.Or(j0 == 0, pos(j0 - 1) < lo),
                           o.Or(n == 0, o.And(pos(j0) >= lo, pos(j0 + n - 1) <= hi)),
                           o.Or(j0 + n == m, pos(j0 + n) > hi)))
    facts.append(sum(n for _, n in kinds.values()) == hi - lo + 1)
    return o.And(*facts)


def _chain(low: str):
    """The chain of waits as long as the makespan on the cone where t_low is the smallest
    cost: Z3 facts (each a wait of docs/spec.md 3.4 or a run along one device's order) and
    its length, per kind (the number of actions of each kind on it)."""

    def lower(o, p, m, d, i):
        from .check import _deps

        def waits(kind, dd, ii, target):
            return o.Or(*[o.And(c, t[1] == target[1], t[2] == target[2])
                          for c, t, _ in _deps(ZB_H1_FREE, o, kind, p, m, dd, ii) if t[0] == target[0]])

        last = 3 * m - 1
        hops_f = ("chain: F(d,0) waits for F(d-1,0), d >= 1", o.Or(d < 1, waits(F, d, 0, (F, d - 1, 0))))
        if low == F:
            # F(0,0) -> ... -> F(p-1,0) -> I(p-1,0) -> ... -> I(0,0), then device 0 to its end
            warm = o.Min(p, m)
            facts = [
                hops_f,
                ("chain: I(p-1,0) waits for F(p-1,0)", waits(I, p - 1, 0, (F, p - 1, 0))),
                ("chain: I(d,0) waits for I(d+1,0), d < p-1", o.Or(d >= p - 1, waits(I, d, 0, (I, d + 1, 0)))),
                ("chain: device 0 from I(0,0) to its end: m - min(p,m) F, every I and W",
                 _run(o, p, m, 0, _pos(o, I, p, m, 0, 0), last, {F: (warm, m - warm), I: (0, m), W: (0, m)})),
            ]
            return facts, {F: p + m - warm, I: p - 1 + m, W: m}
        # F(0,0) -> ... -> F(p-1,0), device p-1 from F(p-1,0) to I(p-1,m-1), I(d+1,m-1) -> I(d,m-1)
        # down to device e, then (cone of t_W) W(0,m-1), or (cone of t_I) device e to its end
        head = [
            hops_f,
            ("chain: F(p-1,0) is device p-1's first action", _pos(o, F, p, m, p - 1, 0) == 0),
            ("chain: device p-1 up to I(p-1,m-1): every F and I, max(0,m-p) W",
             _run(o, p, m, p - 1, 0, _pos(o, I, p, m, p - 1, m - 1),
                  {F: (0, m), I: (0, m), W: (0, o.Max(0, m - p))})),
            ("chain: I(d,m-1) waits for I(d+1,m-1), d < p-1",
             o.Or(d >= p - 1, waits(I, d, m - 1, (I, d + 1, m - 1)))),
        ]
        if low == W:
            facts = head + [("chain: W(0,m-1) waits for I(0,m-1)", waits(W, 0, m - 1, (I, 0, m - 1)))]
            return facts, {F: p - 1 + m, I: m + p - 1, W: o.Max(0, m - p) + 1}
        e = o.Min(m - 1, p - 1)
        j0 = o.Max(0, m - 1 - e)
        facts = head + [("chain: device min(m,p)-1 after I(e,m-1): the W from max(0, m-1-e) on",
                         _run(o, p, m, e, _pos(o, I, p, m, e, m - 1) + 1, last,
                              {F: (m, 0), I: (m, 0), W: (j0, m - j0)}))]
        return facts, {F: p - 1 + m, I: m + p - 1 - e, W: o.Max(0, m - p) + m - j0}

    return lower


def _cone(low: str, base: Certificate) -> Cone:
    """The bound certificate on the cone where t_low is the smallest cost: in its
    coordinates (t_low, t_K - t_low), the start bound is, per coordinate, the most actions
    on a chain before the action (any kind for t_low, kind K for t_K - t_low)."""
    names = _cone_names(low)
    s = names[low]
    coords = {names[k]: ({_COST[k]: 1} if k == low else {_COST[k]: 1, _COST[low]: -1})
              for k in KINDS_SPLIT}
    costs = {_COST[k]: ({s: 1} if k == low else {s: 1, names[k]: 1}) for k in KINDS_SPLIT}
    chain = _chain(low)

    def start(o, k, p, m, d, i):
        n = _longest(o, k, p, m, d, i)
        out = {s: _start(o, k, p, m, d, i)["t_F"]}
        out.update({names[kk]: n[kk] for kk in KINDS_SPLIT if kk != low})
        return out

    def lower(o, p, m, d, i):
        facts, count = chain(o, p, m, d, i)
        length = {s: sum(count.values())}
        length.update({names[kk]: count[kk] for kk in KINDS_SPLIT if kk != low})
        return facts, length

    sub = dataclasses.replace(
        base, costs=tuple(names[k] for k in KINDS_SPLIT),
        duration={k: ({s: 1} if k == low else {s: 1, names[k]: 1}) for k in KINDS_SPLIT},
        start=start, lower=lower)
    return Cone(f"{_COST[low]} smallest", coords, costs, sub)


_FREE_BASE = Certificate(
    family="zb-h1", kinds=KINDS_SPLIT, costs=("t_F", "t_I", "t_W"), fixed=(("c", "0"),),
    duration={F: {"t_F": 1}, I: {"t_I": 1}, W: {"t_W": 1}},
    domain="p >= 1, m >= 1, v == 1", in_domain=ZB_H1.in_domain,
    merge=C_ZERO, pos=_pos, pred=_pred, start=None,
    last=ZB_H1.last, critical=ZB_H1.critical, freed=_freed,
    peak_inflight=ZB_H1.peak_inflight, peak_memory2=_peak_memory2, warmup=ZB_H1.warmup,
    top=DEVICE_0_TOPS,
    summary=("c == 0, t_F, t_I, t_W free: three cones (the smallest cost), a bound and a "
             "chain on each; makespan the largest of the three chains"),
    order_argument=ZB_H1.order_argument,
)

#: ZB-H1 (v = 1) at c == 0 with t_F, t_I, t_W free: a certificate by cones (docs/proofs.md)
ZB_H1_FREE = dataclasses.replace(_FREE_BASE, cones=tuple(_cone(k, _FREE_BASE) for k in (W, F, I)))


# --------------------------------------------------------------------------- ZB-H1, v chunks


def _make_v(v: int) -> Certificate:
    """ZB-H1 with v >= 2 chunks per device (PyTorch's ScheduleInterleavedZeroBubble), group
    size p: the order and the peaks, for every p and every m a multiple of p.

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

    def index(p, m):
        from ..generators._build import megatron_schedule_table

        table = megatron_schedule_table(m, v, p)
        fwd = {(i, c): q for q, (i, c) in enumerate(table)}
        bwd = {(i, v - 1 - c): q for q, (i, c) in enumerate(table)}
        return lambda a: (fwd if a.kind == F else bwd)[(a.microbatch, a.stage // p)]


    return Certificate(
        family="zb-h1", kinds=KINDS_SPLIT, costs=(), fixed=(), duration={},
        domain=f"p >= 1, m >= p, m % p == 0, v == {v}", chunks=v, count=N,
        in_domain=lambda o, p, m: o.And(p >= 1, m >= p, m - p * o.DivV(m, p) == 0),
        family_domain=lambda o, p, m: m % p == 0, nia_tactic=True,
        merge=C_ZERO, pos=pos, pred=pred, start=None, last=None, critical=None, freed=freed,
        # w + L + 1 = vp in flight at F(w + L), the last forward before the first W
        peak_inflight=lambda o, p, m, d: (v * p, v * p - 1),
        peak_memory2=lambda o, p, m, d: (2 * v * p - d, v * p - 1),
        warmup=lambda o, p, m, d: v * p - d,
        top=DEVICE_0_TOPS, index=index,
        summary=(f"v = {v}: ZB-H1's pattern over the table index, w = {v}p - 1 - d forwards, "
                 f"W lag d; order and peaks only"),
        order_argument=(
            "generators/zero_bubble.py zb_h1() with chunks = v >= 2 calls "
            "_build.looped_rows(p, m, v, p, warmup=(v-1)p + p-1-d, w_lag=d): phases() over the "
            "forwards in table order and the backwards in the same order, chunks reversed, "
            "so ZB-H1's positions with the table index for the microbatch and vm for m."),
    )


#: chunk count -> the order-only certificate of ZB-H1 with v chunks (PyTorch's ZB1P)
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
