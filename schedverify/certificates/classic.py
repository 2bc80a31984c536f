"""Certificates of GPipe and 1F1B (generators/classic.py), one stage per device.

GPipe, every cost (t_F, t_B and the latency c): device d runs F0..F(m-1), then B0..B(m-1).

    start F(d, i) = (d + i) t_F + d c
    start B(d, i) = (m + p - 1) t_F + (p - 1 - d + i) t_B + (2p - 2 - d) c

1F1B on the slice c == 0 (t_F, t_B free): device d runs w = min(p - d - 1, m) warm-up
forwards, then F(w + k), B(k) for k < m - w, then the remaining backwards.

    start F(d, i) = (d + i) t_F + (i if i > w else 0) t_B
    start B(d, i) = (p + i) t_F + (p - 1 - d + i) t_B
"""

from __future__ import annotations

from ..formulas.tropical import C_ZERO, IDENTITY
from ..model import B, F
from .base import DEVICE_0_TOPS, KINDS_FULL, Certificate


def _domain(o, p, m):
    return o.And(p >= 1, m >= 1)


# --------------------------------------------------------------------------- GPipe


def _g_pos(o, k, p, m, d, i):
    return i if k == F else m + i


def _g_pred(o, k, p, m, d, i):
    if k == F:
        return [(i > 0, (F, i - 1))]
    return [(i > 0, (B, i - 1)), (i == 0, (F, m - 1))]


def _g_start(o, k, p, m, d, i):
    if k == F:
        return {"t_F": d + i, "t_B": 0, "c": d}
    return {"t_F": m + p - 1, "t_B": p - 1 - d + i, "c": 2 * p - 2 - d}


GPIPE = Certificate(
    family="gpipe", kinds=KINDS_FULL, costs=("t_F", "t_B", "c"), fixed=(),
    duration={F: {"t_F": 1}, B: {"t_B": 1}},
    domain="p >= 1, m >= 1", in_domain=_domain, merge=IDENTITY,
    pos=_g_pos, pred=_g_pred, start=_g_start,
    last=lambda o, p, m, d: (B, m - 1),
    critical=lambda o, p, m: 0,
    freed=lambda o, k, p, m, d, i: 0,
    peak_inflight=lambda o, p, m, d: (m, m - 1),
    peak_memory2=lambda o, p, m, d: (2 * m, m - 1),
    warmup=lambda o, p, m, d: m,
    top=DEVICE_0_TOPS,
    summary="all forwards, then all backwards",
    order_argument=(
        "generators/classic.py gpipe(): row d is [F(d,0..m-1)] + [B(d,0..m-1)], so F(d,i) is at "
        "position i and B(d,i) at m + i, for every p and m."),
)


# --------------------------------------------------------------------------- 1F1B


def _w(o, p, m, d):
    return o.Min(p - d - 1, m)


def _f_pos(o, k, p, m, d, i):
    w = _w(o, p, m, d)
    if k == F:
        return o.If(i < w, i, 2 * i - w)
    return o.If(i < m - w, w + 2 * i + 1, m + i)


def _f_pred(o, k, p, m, d, i):
    w = _w(o, p, m, d)
    if k == F:
        return [(o.And(i > 0, i <= w), (F, i - 1)), (i > w, (B, i - w - 1))]
    return [(i < m - w, (F, w + i)),
            (o.And(i >= m - w, i > 0), (B, i - 1)),
            (o.And(i >= m - w, i == 0), (F, m - 1))]


def _f_start(o, k, p, m, d, i):
    w = _w(o, p, m, d)
    if k == F:
        return {"t_F": d + i, "t_B": o.If(i > w, i, 0)}
    return {"t_F": p + i, "t_B": p - 1 - d + i}


def _f_peak(o, p, m, d):
    return o.Min(p - d, m), o.Min(_w(o, p, m, d), m - 1)


ONE_F_ONE_B = Certificate(
    family="1f1b", kinds=KINDS_FULL, costs=("t_F", "t_B"), fixed=(("c", "0"),),
    duration={F: {"t_F": 1}, B: {"t_B": 1}},
    domain="p >= 1, m >= 1", in_domain=_domain, merge=C_ZERO,
    pos=_f_pos, pred=_f_pred, start=_f_start,
    last=lambda o, p, m, d: (B, m - 1),
    critical=lambda o, p, m: 0,
    freed=lambda o, k, p, m, d, i: o.If(i > _w(o, p, m, d), i - _w(o, p, m, d), 0),
    peak_inflight=_f_peak,
    peak_memory2=lambda o, p, m, d: (2 * _f_peak(o, p, m, d)[0], _f_peak(o, p, m, d)[1]),
    warmup=lambda o, p, m, d: o.Min(p - d, m),
    top=DEVICE_0_TOPS,
    summary="w = min(p-d-1, m) warm-up forwards, then F(w+k) B(k), then the last backwards",
    order_argument=(
        "generators/classic.py one_f_one_b() calls _build.phases(work, work, p-d-1) with "
        "work = [(d,0), ..., (d,m-1)]: w = min(p-d-1, m) forwards F(d,0..w-1), then for "
        "k = 0..m-w-1 the pair F(d,w+k), B(d,k), then B(d,m-w..m-1).  So F(d,i) is at "
        "position i for i < w and w + 2(i-w) for i >= w; B(d,k) at w + 2k + 1 for "
        "k < m-w and m + k after."),
)


# --------------------------------------------------------------------------- 1F1B, every cost


def _ceil(o, x, p):
    return o.DivV(x + p - 1, p)


def _fc_start(o, k, p, m, d, i):
    w = _w(o, p, m, d)
    base = _f_start(o, k, p, m, d, i)
    if k == F:
        base["c"] = o.If(i <= w, d, d + 2 * i - 2 - 2 * _ceil(o, o.Max(i - p, 0), p))
    else:
        base["c"] = 2 * p - 2 - d + 2 * (i - _ceil(o, i, p))
    return base


ONE_F_ONE_B_LATENCY = Certificate(
    family="1f1b", kinds=KINDS_FULL, costs=("t_F", "t_B", "c"), fixed=(),
    duration={F: {"t_F": 1}, B: {"t_B": 1}},
    domain="p >= 1, m >= 1", in_domain=_domain, merge=IDENTITY,
    pos=_f_pos, pred=_f_pred, start=_fc_start,
    last=lambda o, p, m, d: (B, m - 1),
    critical=lambda o, p, m: 0,
    freed=ONE_F_ONE_B.freed,
    peak_inflight=_f_peak,
    peak_memory2=ONE_F_ONE_B.peak_memory2,
    warmup=ONE_F_ONE_B.warmup,
    top=ONE_F_ONE_B.top,
    summary="1F1B with the latency c: its coefficient steps with period p (ceil(i/p))",
    linear=False,
    order_argument=ONE_F_ONE_B.order_argument,
)
