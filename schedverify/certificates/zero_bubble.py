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

from ..formulas.tropical import UNIT_SPLIT
from ..model import F, I, W
from .base import DEVICE_0_TOPS, KINDS_SPLIT, Certificate


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
