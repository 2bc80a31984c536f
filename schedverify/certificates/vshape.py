"""Certificate of ZB-V (generators/vshape.py ``zb_v``) for m >= 2p - 1.

V placement (``placement = "v"``, two chunks): device d holds stage d (chunk 0) and stage
2p-1-d (chunk 1).  With m >= 2p - 1 no microbatch is dropped and device d runs seven phases
(f0/f1, i0/i1, w0/w1: the forward, input and weight gradient of chunk 0/1), with
a = 2(p-d) - 1, k0 = m - 2p + d + 1 and K = m - p:

1. f0(0..a-1);
2. d pairs f1(j) f0(a+j);
3. p-d triples f1(d+j) i1(j) w1(j);
4. K iterations k: f0(2p-d-1+k) (only for k < k0), i0(k) w0(k) f1(p+k) i1(p-d+k) w1(p-d+k);
5. d pairs i0(m-p+j) i1(m-d+j);
6. p-d pairs i0(m-p+d+j) w0(m-p+j);
7. w1(m-d..m-1), then w0(m-d..m-1).

The index q of an action of kind K on its device is its rank among the device's actions of
that kind (0..2m-1); ``action`` maps it to (chunk, microbatch).  On the slice c == 0,
t_I == t_W == t_F no device waits after its first action: the action at position t of
device d starts at (d + t) t_F, so the makespan is (6m + p - 1) t_F.  Every device holds at
most 2p chunk activations (peak memory 2p half-stages: 1F1B's p stages), reached at its
first chunk-1 forward of phase 3.

Below m = 2p - 1 the order is this one at 2p - 1 microbatches with the actions of
microbatches >= m dropped (``truncates``; the paper's builder and PyTorch's do the same), so
the phases' lengths depend on how many of each are dropped, and no closed form is written
for positions or times there.  Its peaks are bounded by those at 2p - 1 and by two chunk
activations per microbatch (docs/proofs.md section 2, "below the certificate: truncation").
"""

from __future__ import annotations

from ..formulas.tropical import UNIT_SPLIT
from ..model import F, I, W
from .base import DEVICE_0_TOPS, KINDS_SPLIT, Certificate


def _by_chunk(o, c, f0, f1):
    """``f0()`` for chunk 0, ``f1()`` for chunk 1: only the one named when c is a plain
    number (a position is read in one chunk's formula), a case split otherwise."""
    if isinstance(c, int):
        return f0() if c == 0 else f1()
    return o.If(c == 0, f0(), f1())


def _index_of(o, k, p, m, d, c, i):
    """The rank q of (kind k, chunk c, microbatch i) among device d's actions of kind k."""
    a = 2 * (p - d) - 1
    if k == F:
        return _by_chunk(
            o, c, lambda: o.If(i < a, i, o.If(i < 2 * p - d - 1, 2 * i - a + 1, 2 * i - p + d + 1)),
            lambda: o.If(i < d, a + 2 * i, o.If(i < p, 2 * p - 1 + i - d,
                                                o.If(i < m - p + d + 1, 2 * i + p - d, m + i))))
    if k == I:
        return _by_chunk(o, c, lambda: o.If(i < m - p + d, 2 * i + p - d, m + i),
                         lambda: o.If(i < p - d, i, 2 * i - p + d + 1))
    return _by_chunk(o, c, lambda: o.If(i < m - p, 2 * i + p - d, o.If(i < m - d, m - d + i, m + i)),
                     lambda: o.If(i < p - d, i, o.If(i < m - d, 2 * i - p + d + 1, m - d + i)))


def _cases(o, k, p, m, d, q):
    """The q-th action of kind k on device d as cases ``(condition, chunk, microbatch)``,
    the first that holds applies (the last always does); the chunk is a plain number in
    each, so that a position is read in one chunk's formula (:func:`_pos`).  Where the two
    chunks alternate, the parity of q picks the chunk."""
    k0 = m - 2 * p + d + 1
    a = 2 * (p - d) - 1

    def alt(below, lo, even, odd):
        """From index lo up to ``below``: even offsets r are (even[0], even[1] + r/2), odd
        ones (odd[0], odd[1] + (r-1)/2)."""
        r = q - lo
        h = o.Div(r, 2)
        return [(o.And(below, r - 2 * h == 0), even[0], even[1] + h), (below, odd[0], odd[1] + h)]

    if k == F:
        return ([(q < a, 0, q)] + alt(q < 2 * p - 1, a, (1, 0), (0, a))
                + [(q < 3 * p - d - 1, 1, d + q - (2 * p - 1))]
                + alt(q < 3 * p - d - 1 + 2 * k0, 3 * p - d - 1, (0, 2 * p - d - 1), (1, p))
                + [(True, 1, q - m)])
    if k == I:
        return [(q < p - d, 1, q)] + alt(q < 2 * m - p + d, p - d, (0, 0), (1, p - d)) + [(True, 0, q - m)]
    return ([(q < p - d, 1, q)] + alt(q < 2 * m - p - d, p - d, (0, 0), (1, p - d))
            + [(q < 2 * m - 2 * d, 0, q - m + d), (q < 2 * m - d, 1, q - m + d), (True, 0, q - m)])


def _fold(o, cases):
    """The value of the first case that holds (the last holds always)."""
    out = cases[-1][1]
    for cond, val in reversed(cases[:-1]):
        out = o.If(cond, val, out)
    return out


def _action(o, k, p, m, d, q):
    """(chunk, microbatch) of the q-th action of kind k on device d: the inverse of
    :func:`_index_of`."""
    cases = _cases(o, k, p, m, d, q)
    return (_fold(o, [(cond, c) for cond, c, _ in cases]),
            _fold(o, [(cond, i) for cond, _, i in cases]))


def _pos(o, k, p, m, d, q):
    """The position of the q-th action of kind k on device d: the phases' offsets,
    piecewise affine in q (with q's parity where phase 4's iterations have lost their f0,
    five actions each).  Z3 checks it against ``pred`` (pos(pred) = pos - 1) and that it
    is a bijection onto the device's positions."""
    k0 = m - 2 * p + d + 1
    s3, s4 = 2 * p - 1, 5 * p - 3 * d - 1
    s5 = 6 * m - 2 * p - 2 * d

    def tail(r, off):
        """Phase 4 from iteration k0 on, r = 2k + (0: chunk 0, 1: chunk 1) from 2k0: the
        chunk-0 action at slot ``off`` of its 5, the chunk-1 one 3 later."""
        h = o.Div(r, 2)
        return s4 + 6 * k0 + 5 * (h - k0) + off + 3 * (r - 2 * h)

    if k == F:
        b4 = 3 * p - d - 1
        return o.If(q < s3, q, o.If(q < b4, s3 + 3 * (q - s3), o.If(
            q < b4 + 2 * k0, s4 + 3 * (q - b4), s4 + 6 * k0 + 5 * (q - b4 - 2 * k0) + 2)))
    lo = p - d
    if k == I:
        return o.If(q < lo, s3 + 3 * q + 1, o.If(q < lo + 2 * k0, s4 + 1 + 3 * (q - lo), o.If(
            q < 2 * m - p - d, tail(q - lo, 0), o.If(
                q < 2 * m - p + d, s5 + q - (2 * m - p - d), s5 + 2 * d + 2 * (q - (2 * m - p + d))))))
    return o.If(q < lo, s3 + 3 * q + 2, o.If(q < lo + 2 * k0, s4 + 2 + 3 * (q - lo), o.If(
        q < 2 * m - p - d, tail(q - lo, 1), o.If(
            q < 2 * m - 2 * d, s5 + 2 * d + 1 + 2 * (q - (2 * m - p - d)), 6 * m - 2 * d + q - (2 * m - 2 * d)))))


def _pred(o, k, p, m, d, q):
    """The action just before the q-th action of kind k on device d, as disjoint cases
    (condition, (kind, index)); none for F(0), the device's first action.  Forwards: one
    after another up to phase 3; then the W just before (phase 3's triples end in w1, phase
    4's rounds in w1 and, after f0 i0 w0, the f1).  I: its own forward (phases 3, 4 while
    chunk 0 has forwards), else the W before it or, in phases 5-6, the I or W before it.  W:
    its own I (phases 3-4 right after it, phase 6 two places after I(q + 2d)), then the W
    before it."""
    k0 = m - 2 * p + d + 1
    b4 = 3 * p - d - 1  # the first forward of phase 4
    And = o.And
    if k == F:
        return [(And(q > 0, q <= 2 * p - 1), (F, q - 1)),
                (And(q > 2 * p - 1, q < b4 + 2 * k0), (W, q - 2 * p)),
                (q >= b4 + 2 * k0, (W, p - d + 2 * (q - b4 - k0)))]
    if k == I:
        lo = p - d + 2 * k0  # phase 4 from iteration k0 on
        r = q - (p - d)
        odd = r - 2 * o.Div(r, 2) == 1
        return [(q < lo, (F, q + 2 * p - 1)),
                (And(q >= lo, q < 2 * m - p - d, o.Not(odd)), (W, q - 1)),
                (And(q >= lo, q < 2 * m - p - d, odd), (F, b4 + k0 + o.Div(r, 2))),
                (q == 2 * m - p - d, (W, q - 1)),
                (And(q > 2 * m - p - d, q <= 2 * m - p + d), (I, q - 1)),
                (q > 2 * m - p + d, (W, q - 2 * d - 1))]
    return [(q < 2 * m - p - d, (I, q)),
            (And(q >= 2 * m - p - d, q < 2 * m - 2 * d), (I, q + 2 * d)),
            (q >= 2 * m - 2 * d, (W, q - 1))]


def _freed(o, k, p, m, d, q):
    """I (and W: as many) before the q-th forward: none in phases 1-2, one each per forward
    after the first of phase 3 up to phase 4's last chunk-0 forward, then two."""
    k0 = m - 2 * p + d + 1
    return o.If(q < 2 * p - 1, 0, o.If(q < 3 * p - d - 1 + 2 * k0, q - 2 * p + 1,
                                       2 * q - 5 * p + d + 3 - 2 * k0))


def _start(o, k, p, m, d, q):
    return {"t_F": d + _pos(o, k, p, m, d, q)}


ZB_V = Certificate(
    family="zb-v", kinds=KINDS_SPLIT, costs=("t_F",),
    fixed=(("c", "0"), ("t_I", "t_F"), ("t_W", "t_F")),
    duration={F: {"t_F": 1}, I: {"t_F": 1}, W: {"t_F": 1}},
    domain="p >= 1, m >= 2*p - 1", in_domain=lambda o, p, m: o.And(p >= 1, m >= 2 * p - 1),
    merge=UNIT_SPLIT, pos=_pos, pred=_pred, start=_start,
    last=lambda o, p, m, d: (W, 2 * m - 1),
    critical=lambda o, p, m: p - 1,
    freed=_freed,
    peak_inflight=lambda o, p, m, d: (2 * p, 2 * p - 1),
    peak_memory2=lambda o, p, m, d: (4 * p, 2 * p - 1),
    warmup=lambda o, p, m, d: 2 * p,
    top=DEVICE_0_TOPS,
    count=lambda o, m: 2 * m, chunks=2, placement="v", truncates=lambda o, p: 2 * p - 1,
    truncated_below="2*p - 1",
    action=_action, index_of=_index_of, compile_once=True,
    summary="m >= 2p - 1: seven phases per device (warm-up, f1 i1 w1, f0 i0 w0 f1 i1 w1, cool-down), "
            "no wait after the first action at unit costs",
    order_argument=(
        "generators/vshape.py zb_v() with m >= 2p - 1 builds the order for m microbatches and drops "
        "none: 2(p-d)-1 chunk-0 forwards, d pairs f1 f0, p-d triples f1 i1 w1, then m-p iterations "
        "f0 i0 w0 f1 i1 w1 (the last p-d-1 without f0, as the forwards run out), d pairs i0 i1, "
        "p-d pairs i0 w0, then the deferred w1 and w0; positions are those phases' offsets."),
)
