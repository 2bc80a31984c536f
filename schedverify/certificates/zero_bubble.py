"""Certificate of ZB-H1 with one stage per device (generators/zero_bubble.py, chunks = 1),
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
"""

from __future__ import annotations

from ..formulas.tropical import UNIT_SPLIT
from ..model import F, I, W
from .base import KINDS_SPLIT, Certificate


def _w(o, p, m, d):
    return o.Min(p - 1 - d, m)


def _pos(o, k, p, m, d, i):
    w = _w(o, p, m, d)
    if k == F:
        return o.If(i < w, i, w + 2 * (i - w) + o.Max(0, i - w - d))
    if k == I:
        return o.Min(w + i + 1, m) + i + o.Max(0, i - d)
    return o.If(i + d < m, o.Min(w + i + d + 1, m) + 2 * i + d + 1, 2 * m + i)


def _pred(o, k, p, m, d, i):
    w = _w(o, p, m, d)
    if k == F:
        return [(o.And(i > 0, i <= w), (F, i - 1)),
                (o.And(i > w, i - w - 1 >= d), (W, i - w - 1 - d)),
                (o.And(i > w, i - w - 1 < d), (I, i - w - 1))]
    if k == I:
        return [(i < m - w, (F, w + i)),
                (o.And(i >= m - w, i == 0), (F, m - 1)),
                (o.And(i >= m - w, i > 0, i - 1 >= d), (W, i - 1 - d)),
                (o.And(i >= m - w, i > 0, i - 1 < d), (I, i - 1))]
    return [(i + d < m, (I, i + d)),
            (o.And(i + d >= m, i >= 1), (W, i - 1)),
            (o.And(i + d >= m, i == 0), (I, m - 1))]


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


def _freed(o, k, p, m, d, i):
    w = _w(o, p, m, d)
    if k == I:
        return o.If(i > w, i - w, 0)
    return o.If(i > w, o.Max(0, i - w - d), 0)


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
    top={"peak_inflight": lambda o, p, m: 0, "peak_memory": lambda o, p, m: 0,
         "fwd_before_bwd": lambda o, p, m: 0},
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
