"""Certificates of DualPipeV and DualPipe (generators/bidirectional.py ``dualpipe_v``,
``dualpipe``) for m >= 2p: their order and peaks (no timing).

V placement (``placement = "v"``, two chunks): device d holds stage d (chunk 0, the
repository's phase 0) and stage 2p-1-d (chunk 1).  DualPipeV runs DeepSeek's eight steps
(github.com/deepseek-ai/DualPipe ``dualpipev.py``, ``step``) with ``num_ranks = p``,
``rank = d``; with a = p-1-d and K4 = m-2p+d+1 (>= 1 for m >= 2p):

1. 2a chunk-0 forwards;  2. d+1 pairs f0 f1;  3. a triples (split i1) w1 f1;
4. K4 rounds (f0;B1) (f1;B0), each pair one ``OVERLAP_F_B`` (on the last device the first
   f0 and B1 of round 0 run apart);  5. a rounds B1 (f1;B0);
6. d+1 pairs b1 b0, full up to the (d+1)-th, split after;  7. a pairs w, i0;  8. d+1 w.

**Composite actions as leaves.**  The certificate's kinds are F, I, W, each 2m per device,
and a position is a *leaf*: a full backward B is its two leaves I then W at consecutive
positions, an ``OVERLAP_F_B`` its three leaves F, I, W.  ``fused(o, K, p, m, d, q)`` says
which leaf runs in one action with the leaf at the next position (docs/proofs.md section
2, "composite actions"); :func:`.order.rows` builds the actions from it.  Peaks read the
order only: a forward's activation is allocated when it starts, a full B frees it at its
end, which is its W leaf's, and within an overlap the forward starts first; so the counts
before each F leaf are the real ones (Z3 checks the counts, ``fused`` and that the
backward index of the I and W of one action is the same, with ``action`` equal for both).
The backward index q of I and W is the rank of the backward on the device: the
repository's ``WeightGradStore`` is FIFO and no full backward runs while a W is queued, so
the W leaves run in the order of their I leaves.

Every device holds at most 2p+1 chunk activations (the report's "PP + 1" in half-size
chunks), reached at step 4's first forward; the last device's warm-up is one forward
longer (its first B1 runs alone, after f0).

**DualPipe** (``dualpipe.py``) runs the same eight steps with ``num_half_ranks = p/2``,
``half_rank = min(d, p-1-d)`` and ``half_num_chunks = m/2`` on the ``"mirror"`` placement
(:mod:`.needs`): route 0 (microbatches 0..m/2-1) runs stage s on device s, route 1 the
mirror, and device d's local phase c is route ``c xor [d >= p/2]``.  So its positions,
counts and peaks are DualPipeV's at those sizes, and ``action`` adds m/2 to the microbatch
of route 1: at most p + 1 microbatches in flight on every device (the report's "PP + 1").

Not here: the start times.  A full B costs t_B and an overlap t_F + t_B, while the leaf
order would charge I and W; timing needs start times per action, not per leaf.
"""

from __future__ import annotations

from ..model import F, I, W
from .base import KINDS_SPLIT, Certificate
from .needs import mirror_route


def _sizes(p, d):
    """(n, h, a): the repository's num_ranks, rank, and n - h - 1.  The step functions
    below read their ``p, m, d`` as DualPipeV's ``num_ranks, num_chunks, rank``; DualPipe
    calls them with ``num_half_ranks = p/2, half_num_chunks = m/2, half_rank`` (:func:`_dp`)."""
    return p, d, p - d - 1


def _pos(o, k, p, m, d, q):
    """Position of leaf k at backward/forward index q on device d: the eight steps'
    offsets (s4, s5, s6, s7, s8 the first positions of steps 4 to 8)."""
    n, h, a = _sizes(p, d)
    s4, s5 = 2 * n + 3 * a, 6 * m - 4 * n - 3 * a
    s6 = s5 + 5 * a
    s7, s8 = s6 + 3 * (h + 1), 6 * m - h - 1
    If = o.If
    if k == F:
        return If(q < 2 * n, q, If(q < 2 * n + a, 2 * n + 3 * (q - 2 * n) + 2, If(
            q < 2 * m - a, s4 + 3 * (q - 2 * n - a), s5 + 5 * (q - (2 * m - a)) + 2)))
    r5 = q - (2 * m - 2 * n - a)
    j5 = o.Div(r5, 2)

    def i_pos(q):
        return If(q < a, 2 * n + 3 * q, If(q < 2 * m - 2 * n - a, s4 + 3 * (q - a) + 1, If(
            q < 2 * m - 2 * n + a, s5 + 5 * j5 + 3 * (r5 - 2 * j5), If(
                q < 2 * m - n, s6 + 2 * (q - (2 * m - 2 * n + a)), If(
                    q < 2 * m - a, s6 + 2 * (h + 1) + q - (2 * m - n), s7 + 2 * (q - (2 * m - a)) + 1)))))
    if k == I:
        return i_pos(q)
    return If(q < 2 * m - n, i_pos(q) + 1, If(q < 2 * m - n + a, s7 + 2 * (q - (2 * m - n)),
                                               s8 + q - (2 * m - n + a)))


def _pred(o, k, p, m, d, q):
    """The leaf just before, as disjoint cases (condition, (kind, index))."""
    n, h, a = _sizes(p, d)
    And = o.And
    if k == F:
        return [(And(q >= 1, q < 2 * n), (F, q - 1)),
                (And(q >= 2 * n, q < 2 * n + a), (W, q - 2 * n)),
                (q == 2 * n + a, (F, q - 1)),
                (And(q > 2 * n + a, q < 2 * m - a), (W, q - 2 * n - 1)),
                (q >= 2 * m - a, (W, 2 * q - 2 * m - 2 * n + a))]
    if k == I:
        r5 = q - (2 * m - 2 * n - a)
        odd = r5 - 2 * o.Div(r5, 2) == 1
        in5 = And(q >= 2 * m - 2 * n - a, q < 2 * m - 2 * n + a)
        return [(q < a, (F, q + 2 * n - 1)),
                (And(q >= a, q < 2 * m - 2 * n - a), (F, q + 2 * n)),
                (And(in5, o.Not(odd)), (W, q - 1)),
                (And(in5, odd), (F, 2 * m - a + o.Div(r5, 2))),
                (And(q >= 2 * m - 2 * n + a, q <= 2 * m - n), (W, q - 1)),
                (And(q > 2 * m - n, q < 2 * m - a), (I, q - 1)),
                (q >= 2 * m - a, (W, q - h - 1))]
    return [(q < 2 * m - n, (I, q)),
            (And(q >= 2 * m - n, q <= 2 * m - n + a), (I, q + h)),
            (q > 2 * m - n + a, (W, q - 1))]


def _fused(o, k, p, m, d, q):
    """(condition, (kind, index)): leaf k(q) runs in one action with that leaf, the one at
    the next position (None: never).  F: the forward of an OVERLAP_F_B (steps 4 and 5, but
    the last device's first f0), with the I of the full B it runs with; I: a full backward
    (steps 4 to 6 up to the (d+1)-th of step 6), with its own W."""
    n, h, a = _sizes(p, d)
    if k == F:
        return (o.And(q >= 2 * n + a, o.Or(a > 0, q > 2 * n)),
                (I, o.If(q < 2 * m - a, q - 2 * n, 2 * q - 2 * m - 2 * n + a + 1)))
    if k == I:
        return (o.And(q >= a, q < 2 * m - n), (W, q))
    return None


def _action(o, k, p, m, d, q):
    """(chunk, microbatch) of the q-th leaf of kind k: forwards in the eight steps' order,
    backwards (I and W alike) b1 for the first a, then b1 b0 alternating, then b0."""
    n, h, a = _sizes(p, d)
    If = o.If
    if k == F:
        r2, r4 = q - 2 * a, q - 2 * n - a
        h2, h4 = o.Div(r2, 2), o.Div(r4, 2)
        c = If(q < 2 * a, 0, If(q < 2 * n, r2 - 2 * h2, If(q < 2 * n + a, 1, If(q < 2 * m - a, r4 - 2 * h4, 1))))
        i = If(q < 2 * a, q, If(q < 2 * n, If(r2 - 2 * h2 == 0, 2 * a + h2, h2), If(
            q < 2 * n + a, h + 1 + q - 2 * n, If(q < 2 * m - a, If(r4 - 2 * h4 == 0, 2 * n - h - 1 + h4, n + h4),
                                                 q - m))))
        return c, i
    r = q - a
    hr = o.Div(r, 2)
    even = r - 2 * hr == 0
    c = If(q < a, 1, If(q < 2 * m - a, If(even, 1, 0), 0))
    i = If(q < a, q, If(q < 2 * m - a, If(even, a + hr, hr), q - m))
    return c, i


def _index_of(o, k, p, m, d, c, i):
    """The inverse of :func:`_action`."""
    n, h, a = _sizes(p, d)
    If = o.If

    def by_chunk(f0, f1):
        if isinstance(c, int):
            return f0() if c == 0 else f1()
        return If(c == 0, f0(), f1())

    if k == F:
        return by_chunk(lambda: If(i < 2 * a, i, If(i < n + a, 2 * i - 2 * a, 2 * i - a)),
                        lambda: If(i < h + 1, 2 * a + 2 * i + 1, If(i < n, 2 * n + i - h - 1,
                                                                    If(i < m - a, 2 * i + a + 1, m + i))))
    return by_chunk(lambda: If(i < m - a, a + 2 * i + 1, m + i),
                    lambda: If(i < a, i, 2 * i - a))


def _freed(o, k, p, m, d, q):
    """I and W leaves (as many of each) before the q-th forward leaf."""
    n, h, a = _sizes(p, d)
    return o.If(q < 2 * n, 0, o.If(q < 2 * n + a, q - 2 * n + 1, o.If(
        q < 2 * m - a, q - 2 * n, 2 * q - 2 * m - 2 * n + a + 1)))


#: DualPipeV's domain (the repository's assertion), added to a claim's domain
V_RULE = ("m >= 2*p", "the family is generated for m >= 2p only (DualPipeV's assertion "
          "num_chunks >= num_ranks * 2; PyTorch: at least as many microbatches as stages)")

DUALPIPE_V = Certificate(
    family="dualpipe-v", kinds=KINDS_SPLIT, costs=(), fixed=(), duration={},
    domain="p >= 1, m >= 2*p", in_domain=lambda o, p, m: o.And(p >= 1, m >= 2 * p),
    family_domain=lambda o, p, m: m >= 2 * p, family_domain_text=V_RULE,
    pos=_pos, pred=_pred, start=None, last=None, critical=None,
    freed=_freed,
    peak_inflight=lambda o, p, m, d: (2 * p + 1, 3 * p - d - 1),
    peak_memory2=lambda o, p, m, d: (4 * p + 2, 3 * p - d - 1),
    warmup=lambda o, p, m, d: o.If(d == p - 1, 2 * p + 1, 2 * p),
    top={"peak_inflight": lambda o, p, m: 0, "peak_memory": lambda o, p, m: 0,
         "fwd_before_bwd": lambda o, p, m: p - 1},
    count=lambda o, m: 2 * m, chunks=2, placement="v",
    action=_action, index_of=_index_of, fused=_fused, compile_once=True,
    summary="m >= 2p: DeepSeek's eight steps per device as leaves (a full B = I W, an OVERLAP_F_B = "
            "F I W); order and peaks, no timing",
    order_argument=(
        "generators/bidirectional.py dualpipe_v() with m >= 2p builds from this certificate; its loop "
        "_dualpipe_row (the repository's step() read as actions) is the reference compared with it: "
        "2(p-1-d) f0, d+1 pairs f0 f1, p-1-d triples i1 w1 f1, m-2p+d+1 rounds (f0;B1) (f1;B0), "
        "p-1-d rounds B1 (f1;B0), d+1 pairs b1 b0 (full, then split), p-1-d pairs w i0, d+1 w."),
)


def _dp(o, p, m, d):
    """DualPipe's (num_half_ranks, half_num_chunks, half_rank) at device d."""
    return o.Div(p, 2), o.Div(m, 2), o.Min(d, p - 1 - d)


def _dp_action(o, k, p, m, d, q):
    n, M, h = _dp(o, p, m, d)
    c, i = _action(o, k, n, M, h, q)
    return c, i + M * mirror_route(o, p, d, c)


def _dp_index_of(o, k, p, m, d, c, i):
    n, M, h = _dp(o, p, m, d)
    return _index_of(o, k, n, M, h, c, i - M * mirror_route(o, p, d, c))




def _at_half(step):
    """A step function of DualPipeV read at DualPipe's half sizes (:func:`_dp`)."""
    def f(o, k, p, m, d, q):
        n, M, h = _dp(o, p, m, d)
        return step(o, k, n, M, h, q)
    return f


def _even(o, x):
    return x - 2 * o.Div(x, 2) == 0


#: DualPipe's domain beyond m >= 2p (the repository's assertions), added to a claim's domain
EVEN_RULE = ("p % 2 == 0, m % 2 == 0, m >= 2*p", "the family is generated for an even number of devices "
             "and of microbatches, at least twice the devices, only (DualPipe's assertions: half the "
             "microbatches enter from each end)")

DUALPIPE = Certificate(
    family="dualpipe", kinds=KINDS_SPLIT, costs=(), fixed=(), duration={},
    count=lambda o, m: m,
    domain="p >= 2, m >= 2*p, p % 2 == 0, m % 2 == 0",
    in_domain=lambda o, p, m: o.And(p >= 2, m >= 2 * p, _even(o, p), _even(o, m)),
    family_domain=lambda o, p, m: o.And(_even(o, p), _even(o, m), m >= 2 * p), family_domain_text=EVEN_RULE,
    pos=_at_half(_pos), pred=_at_half(_pred),
    start=None, last=None, critical=None,
    freed=_at_half(_freed),
    peak_inflight=lambda o, p, m, d: (p + 1, 3 * o.Div(p, 2) - o.Min(d, p - 1 - d) - 1),
    peak_memory2=lambda o, p, m, d: (2 * p + 2, 3 * o.Div(p, 2) - o.Min(d, p - 1 - d) - 1),
    warmup=lambda o, p, m, d: o.If(o.Min(d, p - 1 - d) == o.Div(p, 2) - 1, p + 1, p),
    top={"peak_inflight": lambda o, p, m: 0, "peak_memory": lambda o, p, m: 0,
         "fwd_before_bwd": lambda o, p, m: o.Div(p, 2) - 1},
    placement="mirror",
    action=_dp_action, index_of=_dp_index_of, fused=_at_half(_fused), compile_once=True,
    summary="p, m even, m >= 2p: DualPipeV's eight steps at p/2 half ranks and m/2 microbatches per route, "
            "on the mirror placement; order and peaks, no timing",
    order_argument=(
        "generators/bidirectional.py dualpipe() with m >= 2p builds from this certificate; its loop "
        "_dualpipe_row (the repository's step()) with num_half_ranks = p/2, half_rank = min(d, p-1-d), "
        "half_num_chunks = m/2 is dualpipe_v's at those sizes, and the phase's route picks the stage "
        "(d or p-1-d) and the microbatch (k or m/2 + k)."),
)
