"""Closed forms derived from the schedules themselves, then confirmed exactly over a range.

For a family, at every size of a training grid, :mod:`.tropical` gives the exact symbolic
metrics (makespan as a max of linear forms in the costs, busy time per device, peaks).
:mod:`.fit` generalises them over the sizes:

- a number (a peak, a coefficient) becomes the lowest-degree polynomial in ``p, m, v, d``
  (and, when no polynomial fits, a few quasi-periodic features entering linearly:
  ``floor((m - 1)/p)``, ``ceiling((m - 1)/p)``, ``Mod(m, 2)``) that reproduces every point;
- a max of linear forms is fitted term by term: for each of a few generic cost directions,
  the term that is maximal there is followed across sizes and each of its coefficients
  fitted; the formula is the max of the fitted terms;
- where no single form fits, the sizes are split into regions by a *decision list* of up to
  three pieces: conditions ``m >= T`` / ``m < T`` for thresholds ``T`` from a short list
  (``p``, ``2*p - 1``, ``p - d``, ``p*v``...), ``2*d < p``, ``v < 2``, ``p < 3`` and the parity of
  ``m``, tried in turn, each region fitted on its own (a sympy ``Piecewise``, first matching
  condition wins); or two pieces split at a threshold that is itself fitted from where a
  form fitted on the largest m stops holding (ZB-V: ``m >= (3*p - Mod(p, 2))/2``).
- terms of a max are matched across sizes by following probe directions and, where every
  size has the same number of terms, by rank in lexicographic orders.

Only where every such form has failed (on the narrow and the wider training grid), two last
attempts on the wider grid, so every family derived without them keeps its form and its time:

- features of period 3 in ``p`` (``floor(p/3)``, ``floor((p + 1)/3)``: with ``p`` and 1 they
  span every period-3 function of ``p``), fitted before the cubics that would otherwise
  interpolate a few device counts (V-Min's peak ``2*floor((p + 1)/3) + 2``), and fitted
  thresholds that may use them (``m >= floor((p + 1)/3) + 1``);
- a *restricted domain* ``m >= T`` for a listed threshold ``T``: where the schedule is
  irregular at small m (V-Half's makespan is not even monotone in m there), the form that
  holds at large m is followed down in m, ``T`` is the smallest listed threshold covering
  where it holds at every training (p, v, d), and the sizes of that domain are fitted
  (decision lists of two pieces, which may also split on ``d < 1``, ``d < 2`` and ``p``
  modulo 3) and confirmed.  The domain is part of the result (``Derivation.domains``), stated
  in the formula's conditions and enforced when it is evaluated;
- for a peak, last of all, such a domain without one device count ``q`` (``Ne(p, q)``) where
  the schedule is irregular at every m (V-Min at p = 5): fitted on a grid with one more
  device count, confirmed a whole period of ``p`` past it, and kept only where the form
  really fails at ``q``.

Every candidate is then *confirmed*: evaluated at every supported size of a larger range and
compared exactly with the schedule (equal term sets, or equal functions of the costs by a
Z3 query when the sets differ only by redundant terms, after a cheap numeric pre-check).  A
candidate that fails anywhere is rejected and the next one tried; if nothing survives the
metric is reported as not derived, with the sizes that broke the last candidate, never guessed.

Each part of a family (PARTS: makespan, busiest, total and per-device busy time, peaks) is
derived on its own by :func:`derive_part`, so a metric costs only its parts; :func:`derive`
gathers them all.  What an attempt may use (the late features, a restricted domain's extra
conditions) is an explicit :class:`Fitting` passed down, and a fitted threshold is a
:class:`Threshold` that evaluates itself; the only stores are lru caches of pure functions,
so a result depends on its arguments alone, never on what the process derived before (the
order of the attempts within one derivation is part of its definition: the first confirmed
candidate wins).  Results are read only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from functools import lru_cache
from itertools import chain, islice, product
from types import MappingProxyType
from typing import Any
from collections.abc import Callable, Iterator, Mapping

from ..errors import NotDerived, UsageError
from . import fit
from .sizes import family, has_chunks, order_supported, supported
from .tropical import (C_ZERO, COST_SYMBOLS, I_IS_F, IDENTITY, NDIM, UNIT_SPLIT, W_IS_I, TooComplex,
                       Tropical, prune)

METRICS = ("makespan", "bubble_time", "bubble_fraction", "bubble_ratio", "peak_inflight",
           "peak_memory")
DEVICE_METRICS = ("bubble_time", "peak_inflight", "peak_memory", "busy")

#: Where a derivation is fitted and where it is confirmed (sizes the family refuses are skipped).
#: Training takes p = 2, 3, ... until TRAIN_DISTINCT_P supported device counts (at most
#: TRAIN_P_MAX: families such as DualPipe accept even p only), first 4 of them and, for a metric
#: that no form fits there, 6; the confirmation range always reaches 2 past the training.
TRAIN_P_MIN, TRAIN_P_MAX, TRAIN_DISTINCT_P = 2, 10, (4, 6)
#: The grid of a domain with an exceptional device count (the very last attempt, for peaks):
#: one more device count, and confirmed a whole period of the period-3 features past the
#: training, so every residue of p modulo 3 is confirmed at a size it was not fitted on.
EXCEPTION_DISTINCT_P, EXCEPTION_PAST = 7, 3
TRAIN_M_MAX = 16
CONFIRM_P = range(2, 9)
CONFIRM_M = range(1, 25)
CHUNKS = (1, 2, 3)

#: Thresholds m >= T at which a piecewise form may split: (text, T(p, v, d)).
THRESHOLDS: tuple[tuple[str, Callable[[int, int, int], int]], ...] = (
    ("p", lambda p, v, d: p),
    ("2*p - 1", lambda p, v, d: 2 * p - 1),
    ("2", lambda p, v, d: 2),
    ("p - d", lambda p, v, d: p - d),
    ("p - 1", lambda p, v, d: p - 1),
    ("p - d - 1", lambda p, v, d: p - d - 1),
    ("2*p", lambda p, v, d: 2 * p),
    ("2*(p - d)", lambda p, v, d: 2 * (p - d)),
    ("2*(p - d) - 1", lambda p, v, d: 2 * (p - d) - 1),
    ("p*v", lambda p, v, d: p * v),
    ("p + 1", lambda p, v, d: p + 1),
    ("2*p + 1", lambda p, v, d: 2 * p + 1),
    ("2*p - 2", lambda p, v, d: 2 * p - 2),
    ("d + 1", lambda p, v, d: d + 1),
    ("2*p - d - 1", lambda p, v, d: 2 * p - d - 1),
    ("floor(p/2) + 1", lambda p, v, d: p // 2 + 1),
)


Predicate = Callable[[int, int, int, int], bool]  # (p, m, v, d) -> holds


def _m_at_least(th: Callable[[int, int, int], int]) -> Predicate:
    return lambda p, m, v, d: m >= th(p, v, d)


def _m_below(th: Callable[[int, int, int], int]) -> Predicate:
    return lambda p, m, v, d: m < th(p, v, d)


def _p_mod_3(k: int) -> Predicate:
    return lambda p, m, v, d: p % 3 == k


def _atoms() -> tuple[tuple[str, Predicate], ...]:
    out: list[tuple[str, Predicate]] = []
    for text, th in THRESHOLDS:
        out.append((f"m >= {text}", _m_at_least(th)))
        out.append((f"m < {text}", _m_below(th)))
    out.append(("2*d < p", lambda p, m, v, d: 2 * d < p))
    out.append(("v < 2", lambda p, m, v, d: v < 2))
    out.append(("p < 3", lambda p, m, v, d: p < 3))
    out.append(("Eq(Mod(m, 2), 0)", lambda p, m, v, d: m % 2 == 0))
    out.append(("Eq(Mod(m, 2), 1)", lambda p, m, v, d: m % 2 == 1))
    return tuple(out)


#: Conditions a piece of a decision list may carry (sympy-parseable text, predicate).
ATOMS: tuple[tuple[str, Predicate], ...] = _atoms()
#: Conditions offered only on a restricted domain (the last attempt), so the search of every
#: family derived without it is unchanged (and a failing search stays affordable): the first
#: device, and p modulo 3.
LATE_ATOMS: tuple[tuple[str, Predicate], ...] = (
    ("d < 1", lambda p, m, v, d: d < 1),
    ("d >= 1", lambda p, m, v, d: d >= 1),
    ("d < 2", lambda p, m, v, d: d < 2),
    ("d >= 2", lambda p, m, v, d: d >= 2),
) + tuple((f"Eq(Mod(p, 3), {k})", _p_mod_3(k)) for k in range(3))
_ATOM = dict(ATOMS + LATE_ATOMS)
MAX_PIECES = 3
#: How many fitted candidates (per metric) are confirmed before giving up.
MAX_CANDIDATES = 80


def _probes() -> tuple:
    """Cost directions (t_F, t_B, t_I, t_W, c) whose maximal term is followed across sizes:
    hand-picked generic ones, near-lexicographic ones (one symbol dominating the next, which
    single out the stable vertices) and seeded pseudo-random ones for the cones in between."""
    import random
    from itertools import permutations

    hand = ((1009, 1013, 1019, 1021, 1), (1009, 1013, 1019, 1021, 997), (3, 5, 7, 11, 10007),
            (3001, 1013, 1019, 1021, 1), (1009, 3011, 1019, 1021, 2), (1009, 1013, 3019, 1021, 3),
            (1009, 1013, 1019, 3023, 5), (1009, 1013, 1019, 101, 7), (1009, 1013, 101, 1021, 11),
            (101, 1013, 1019, 1021, 13), (1009, 1013, 1019, 1021, 4999))
    lex = tuple(tuple(w) + (1,) for w in permutations((10**6, 10**4, 10**2, 1)))
    lex += tuple(tuple(w) + (10**8,) for w in permutations((10**6, 10**4, 10**2, 1)))
    rng = random.Random(20240)
    rand = tuple(tuple(rng.randint(100, 3000) for _ in range(4)) + (rng.randint(0, 5000),)
                 for _ in range(30))
    return hand + lex + rand


#: Generic cost directions used to follow makespan terms across sizes.
PROBES = _probes()
#: Cost vectors for the numeric pre-check of two maxima (a difference there is a proof).
CHECKS = PROBES[:11] + PROBES[-12:] + PROBES[40:44] + (
    (1, 1, 1, 1, 0), (2, 3, 5, 7, 1), (7, 5, 3, 2, 0), (1, 9, 2, 8, 3), (13, 1, 11, 2, 5),
    (5, 5, 1, 1, 9))

VARS = ("p", "m", "v", "d")
#: Features that may enter a fit linearly when no polynomial does (quasi-periodic in m).
EXTRAS: tuple[tuple[str, Callable[[int, int, int, int], int]], ...] = (
    ("floor((m - 1)/p)", lambda p, m, v, d: (m - 1) // p),
    ("ceiling((m - 1)/p)", lambda p, m, v, d: -((1 - m) // p)),
    ("Mod(m, 2)", lambda p, m, v, d: m % 2),
    ("Mod(p, 2)", lambda p, m, v, d: p % 2),
)
#: Features of period 3 in p (with p and 1 they span every period-3 function of p), offered
#: only on the wider training grid after every form with EXTRAS alone has failed: on a few
#: device counts they would interpolate anything in p (V-Min: peak 2*floor((p + 1)/3) + 2).
LATE_EXTRAS: tuple[tuple[str, Callable[[int, int, int, int], int]], ...] = (
    ("floor(p/3)", lambda p, m, v, d: p // 3),
    ("floor((p + 1)/3)", lambda p, m, v, d: (p + 1) // 3),
)
#: Every feature, in the order of a point's coordinates after (p, m, v, d).
FEATURES = EXTRAS + LATE_EXTRAS


@dataclass(frozen=True)
class Fitting:
    """How one attempt fits, passed down explicitly: ``late``, the fits may use LATE_EXTRAS
    (the wider grid's last attempts); ``restricted``, on a restricted domain, where decision
    lists may also use LATE_ATOMS (and the fits use LATE_EXTRAS)."""

    late: bool = False
    restricted: bool = False


PLAIN = Fitting()
LATE = Fitting(late=True)
RESTRICTED = Fitting(late=True, restricted=True)


def _key(p: int, m: int, v: int, d: int = 0) -> tuple:
    return (p, m, v, d) + tuple(f(p, m, v, d) for _, f in FEATURES)


#: Two ways to rank the fits of one set of values: polynomials of every degree before the
#: features, or the features at each degree (fewer parameters).  Each can be right where the
#: other over-fits; both are offered to confirmation.
MODES = (False, True)


def _fit(data: dict, features_first: bool = False, ctx: Fitting = PLAIN):
    return _fit_items(tuple(sorted(data.items())), features_first, ctx.late)


@lru_cache(maxsize=20000)
def _fit_items(items: tuple, features_first: bool, late: bool):
    """:func:`_fit` of the points ``items`` (cached: the same values recur in many regions)."""
    data = dict(items)
    if late and features_first:
        # every feature at each degree: on a few device counts a cubic in p would otherwise
        # interpolate what floor((p + 1)/3) states
        poly = fit.fit_poly(data, 4, n_extra=len(FEATURES), features_first=True)
    else:
        poly = fit.fit_poly(data, 4, n_extra=len(EXTRAS), features_first=features_first)
        if poly is None and late:
            poly = fit.fit_poly(data, 4, n_extra=len(FEATURES), features_first=features_first)
    return poly


def _fits(data: dict, ctx: Fitting = PLAIN) -> list:
    """The distinct fits of ``data`` (see MODES)."""
    out = []
    for mode in MODES:
        poly = _fit(data, mode, ctx)
        if poly is not None and poly not in out:
            out.append(poly)
    return out




@dataclass(frozen=True)
class Piece:
    """One region of a piecewise form: ``cond`` (sympy-parseable text or a fitted
    :class:`Threshold`, None = otherwise) and its value: a polynomial (scalar) or a list of
    term polynomials, one per cost symbol."""

    cond: str | Threshold | None
    # which of the two (and whether frozen: a mapping, tuples) is the part's kind, not the
    # piece's, so the readers (scalar or tropical) know it
    value: Any


@dataclass(frozen=True)
class Part:
    """One part of a family's derivation (see PARTS), as :func:`derive_part` returns it (read
    only: pieces are tuples, polynomials read-only mappings).

    ``pieces`` None: no form fits, ``failure`` says why (which sizes broke it).  ``domain``:
    the size condition (``m >= T``, possibly ``& Ne(p, q)``) the form was derived on, where no
    form holds for every size.  ``confirm_range`` (p, m, v) and ``confirmed`` (how many sizes):
    where this part was confirmed exactly.  ``slice``: the cost conditions the makespan holds
    under (empty: all costs >= 0), ``slice_failures``: why the slices tried before failed."""

    family: str
    key: str
    chunks: bool
    pieces: tuple[Piece, ...] | None
    failure: str | None
    domain: str | None
    trained: int
    confirmed: int
    confirm_range: dict
    skipped: tuple[tuple[int, int, int], ...] = ()
    slice: tuple[str, ...] = ()
    slice_failures: tuple[str, ...] = ()
    seconds: float = 0.0  # process CPU time of the derivation


@dataclass(frozen=True)
class Derivation:
    """Every part of one family (:func:`derive`), plus the widest range a part was fitted
    and confirmed on (read only).

    A metric that no form fits is None, and ``failures`` says why (which sizes broke it)."""

    family: str
    chunks: bool
    makespan: tuple[Piece, ...] | None
    busiest: tuple[Piece, ...] | None
    total_busy: tuple[Piece, ...] | None
    busy: tuple[Piece, ...] | None
    peak_inflight: tuple[Piece, ...] | None
    peak_inflight_d: tuple[Piece, ...] | None
    peak_memory: tuple[Piece, ...] | None
    peak_memory_d: tuple[Piece, ...] | None
    trained: int
    confirmed: int
    skipped: tuple[tuple[int, int, int], ...] = ()
    confirm_range: Mapping = field(default_factory=lambda: MappingProxyType({}))
    failures: Mapping = field(default_factory=lambda: MappingProxyType({}))
    slice: tuple[str, ...] = ()  # cost conditions the makespan holds under (empty: all costs >= 0)
    slice_failures: tuple[str, ...] = ()  # why the slices tried before failed
    seconds: float = 0.0  # process CPU time of the derivation
    #: metric key -> size condition (``m >= T``, possibly ``& Ne(p, q)``) a form was derived
    #: on, where no form holds for every size (keys: makespan, busiest, peak_inflight(d), ...)
    domains: Mapping = field(default_factory=lambda: MappingProxyType({}))
    #: part key (PARTS) -> its :class:`Part`, with the range that part was confirmed on
    parts: Mapping = field(default_factory=lambda: MappingProxyType({}))


# --------------------------------------------------------------------------- decision lists


def holds(cond: str | Threshold | None, x) -> bool:
    if cond is None:
        return True
    p, m, v, d = (tuple(x) + (0,))[:4]
    pred = cond if isinstance(cond, Threshold) else _ATOM[cond]
    return pred(p, m, v, d)


@dataclass(frozen=True, repr=False)
class Threshold:
    """A condition ``m >= T(p, v, d)`` whose threshold was itself fitted (a piece's ``cond``):
    ``text`` as sympy parses it (``str()`` gives it), ``poly`` T over (p, v, d, Mod(p, 2)) and,
    when ``late``, the period-3 features (sorted items)."""

    text: str
    poly: tuple
    late: bool

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return repr(self.text)

    def __call__(self, p: int, m: int, v: int, d: int) -> bool:
        feats = (p, v, d, p % 2) + ((p // 3, (p + 1) // 3) if self.late else ())
        return m >= fit.evaluate(dict(self.poly), feats)


def _candidates(data: dict, fit_one: Callable[[dict], list],
                depth: int = MAX_PIECES, ctx: Fitting = PLAIN) -> Iterator[list[Piece]]:
    """Decision lists of up to ``depth`` pieces, each fitting its region of ``data`` exactly,
    fewest pieces first."""
    for n in range(1, depth + 1):
        yield from _lists(data, fit_one, n, ctx)


def _lists(data: dict, fit_one, n: int, ctx: Fitting = PLAIN) -> Iterator[list[Piece]]:
    """Decision lists of exactly ``n`` pieces: a region by one condition, then the rest."""
    if n == 1:
        for whole in fit_one(data):
            yield [Piece(None, whole)]
        return
    for text, pred in (ATOMS + LATE_ATOMS if ctx.restricted else ATOMS):
        sel = {x: y for x, y in data.items() if pred(*x[:4])}
        if not sel or len(sel) == len(data):
            continue
        firsts = fit_one(sel)
        if not firsts:
            continue
        rest = {x: y for x, y in data.items() if not pred(*x[:4])}
        for tail in _lists(rest, fit_one, n - 1, ctx):
            for first in firsts:
                yield [Piece(text, first)] + tail


def _learned_split(data: dict, fit_one, agrees, ctx: Fitting = PLAIN) -> Iterator[list[Piece]]:
    """Two pieces split at a threshold fitted from the data: a form fitted on the largest m of
    every (p, v, d) is followed down in m while it agrees; the first m where it does, per
    (p, v, d), is fitted as a polynomial T(p, v, d) (with the Mod features), and the sizes
    below it are fitted on their own.  Finds splits such as m >= (3*p - Mod(p, 2))/2 that no
    fixed list of thresholds holds."""
    groups = _by_size_but_m(data)
    top = {x: data[x] for g in groups.values() for x in g[-3:]}
    if len(top) == len(data):
        return
    for tail in fit_one(top)[:2]:
        yield from _split_below(data, fit_one, agrees, groups, tail, ctx)


def _by_size_but_m(data: dict) -> dict:
    """The points of ``data`` grouped by (p, v, d), each group in increasing m."""
    groups: dict = {}
    for x in data:
        groups.setdefault((x[0], x[2], x[3]), []).append(x)
    for g in groups.values():
        g.sort(key=lambda x: x[1])
    return groups


def _first_agreeing(data: dict, groups: dict, tail, agrees) -> dict | None:
    """Per (p, v, d): the least m from which ``tail`` agrees with ``data`` at every larger m
    of the group; None when it does not agree even at the largest m of some group."""
    first = {}
    for key, g in groups.items():
        low = None
        for x in reversed(g):
            if not agrees(tail, x, data[x]):
                break
            low = x[1]
        if low is None:
            return None
        first[key] = low
    return first


def _split_below(data: dict, fit_one, agrees, groups: dict, tail,
                 ctx: Fitting = PLAIN) -> Iterator[list[Piece]]:
    first = _first_agreeing(data, groups, tail, agrees)
    if first is None:
        return

    def feats(p, v, d):  # Mod(p, 2), and the period-3 features where they are allowed
        return (p % 2,) + ((p // 3, (p + 1) // 3) if ctx.late else ())

    pts = {(p, v, d) + feats(p, v, d): Fraction(m0) for (p, v, d), m0 in first.items()}
    if ctx.late:  # every feature at each degree (a cubic in p interpolates few device counts)
        poly = fit.fit_poly(pts, 3, n_extra=3, features_first=True)
    else:
        poly = fit.fit_poly(pts, 3) or fit.fit_poly(pts, 3, n_extra=1)
    if poly is None:
        return
    head = {x: y for x, y in data.items()
            if x[1] < fit.evaluate(poly, (x[0], x[2], x[3]) + feats(x[0], x[2], x[3]))}
    if not head:
        return
    names = ("p", "v", "d", "Mod(p, 2)") + tuple(t for t, _ in LATE_EXTRAS)
    cond = Threshold("m >= " + _poly_text(poly, names), tuple(sorted(poly.items())), ctx.late)
    for lo in fit_one(head):
        yield [Piece(cond, tail), Piece(None, lo)]


def _poly_text(poly: dict, names) -> str:
    """A polynomial as sympy-parseable text (no sympy here)."""
    parts = []
    for e, c in sorted(poly.items(), reverse=True):
        mono = "*".join(n if k == 1 else f"{n}**{k}" for n, k in zip(names, e) if k)
        coef = f"({c.numerator}/{c.denominator})" if c.denominator != 1 else f"({c.numerator})"
        parts.append(coef + ("*" + mono if mono else ""))
    return " + ".join(parts) or "0"


def _confirmed(label: str, train: dict, full, fit_one, agrees,
               three: bool | None = None, ctx: Fitting = PLAIN) -> list[Piece]:
    """The first candidate fitted on ``train`` that ``agrees`` with every point of ``full``
    (a dict, or a function returning it, called only once a candidate exists).

    ``three``: whether to search three-piece lists (default: except with the period-3
    features over every m, where the listed three-piece lists already failed without them
    and the exhaustive search over many more fits would cost most of the derivation)."""
    seen, bad, tried = set(), None, 0
    one = lambda val, x, y: agrees([Piece(None, val)], x, y)  # noqa: E731
    if three is None:
        three = not ctx.late
    # the whole and the two-piece lists first, then a learned split, then three pieces
    cands = chain(islice(_candidates(train, fit_one, 2, ctx), 4 * MAX_CANDIDATES),
                  _learned_split(train, fit_one, one, ctx),
                  _lists(train, fit_one, 3, ctx) if three else ())
    if ctx.late:  # the last attempts: the fitted split first, the listed ones had their turn
        cands = chain(_learned_split(train, fit_one, one, ctx), cands)
    for pieces in cands:
        key = repr(pieces)
        if key in seen:
            continue
        seen.add(key)
        tried += 1
        if callable(full):  # the confirmation sizes, computed only once there is a candidate
            full = full()
        if not _every_piece_tested(pieces, train, full):
            continue
        miss = next((x for x, y in full.items() if not agrees(pieces, x, y)), None)
        if miss is None:
            return pieces
        bad = bad or miss
        if tried >= MAX_CANDIDATES:
            break
    if bad is None:
        feats = EXTRAS + (LATE_EXTRAS if ctx.late else ())
        raise NotDerived(f"{label}: no form of up to {MAX_PIECES if three else 2} pieces "
                         f"(polynomials in p, m, v, d and {', '.join(t for t, _ in feats)}; "
                         f"split at listed or fitted thresholds of m, 2*d < p, v < 2, p < 3 or "
                         f"the parity of m) fits the {len(train)} training sizes")
    raise NotDerived(f"{label}: {tried} fitted forms, each fails in the confirmation range "
                     f"(the first at {_where(bad)})", refuted=True)


#: How many listed thresholds a restricted domain tries (fewest excluded sizes first).
MAX_DOMAINS = 3


def _restricted(label: str, train: dict, full, fit_one, agrees,
                exceptions: bool = False) -> tuple[str, list[Piece]]:
    """(domain condition, pieces) on a restricted domain: ``m >= T`` (:func:`_restricted_in`);
    with ``exceptions``, where that fails, ``m >= T`` without one device count
    (:func:`_without_one_p`).  ``fit_one`` fits in the RESTRICTED context."""
    try:
        return _restricted_in(label, train, full, fit_one, agrees)
    except NotDerived as e:
        if not exceptions:
            raise
        first = e
    return _without_one_p(label, train, full, fit_one, agrees, first)


#: Device counts a domain with an exception must still be fitted on (beside the one left out).
MIN_P_LEFT = 4


def _without_one_p(label: str, train: dict, full, fit_one, agrees,
                   first: NotDerived) -> tuple[str, list[Piece]]:
    """A restricted domain that also leaves out one device count ``q`` (``Ne(p, q)``), where
    the schedule is irregular at every m (V-Min's greedy squeeze, as the paper's reference
    implementation does it, gives device 2 one activation less at p = 5 only).

    Each training device count is left out in turn, of training and confirmation alike; the
    first form confirmed on the rest is returned, and only if it really fails at ``q`` (else
    the domain states no exception).  At least MIN_P_LEFT other device counts are fitted."""
    ps = sorted({x[0] for x in train})
    if len(ps) <= MIN_P_LEFT:
        raise first
    errs = [str(first)]
    everywhere = full() if callable(full) else full
    for q in ps:
        sub = {x: y for x, y in train.items() if x[0] != q}
        rest = {x: y for x, y in everywhere.items() if x[0] != q}
        try:
            cond, pieces = _restricted_in(f"{label} without p = {q}", sub, rest, fit_one, agrees)
        except NotDerived as e:
            errs.append(str(e))
            continue
        pred = _ATOM[cond]
        if all(agrees(pieces, x, y) for x, y in everywhere.items() if pred(*x[:4])):
            return cond, pieces  # q was not the exception after all
        return f"({cond}) & Ne(p, {q})", pieces
    raise NotDerived(f"{label}: nor without any one device count: " + "; ".join(errs),
                     refuted=first.refuted)


def _restricted_in(label: str, train: dict, full, fit_one, agrees) -> tuple[str, list[Piece]]:
    """A form on a restricted domain ``m >= T(p, v, d)`` where no form holds for every m.

    A form fitted on the largest m of every (p, v, d) is followed down in m while it agrees;
    ``T`` is a listed threshold at or above the first agreeing m of every training (p, v, d)
    (the ones excluding fewest training sizes first).  The sizes of that domain are fitted
    and confirmed like a whole family (decision lists included), and the confirmed form is
    returned with the domain's condition.  Small m where the schedule is irregular are left
    out, stated, rather than the metric being not derived at all."""
    groups = _by_size_but_m(train)
    top = {x: train[x] for g in groups.values() for x in g[-3:]}
    tried, errs = set(), []
    # the form at the largest m: whole first, else a list of two pieces (such as d < 1)
    for tail in islice(_candidates(top, fit_one, 2, RESTRICTED), 2):
        first = _first_agreeing(train, groups, tail, agrees)
        if first is None:
            continue
        ranked = []
        for text, th in THRESHOLDS:
            if all(th(p, v, d) >= m0 for (p, v, d), m0 in first.items()):
                cut = sum(1 for x in train if x[1] < th(x[0], x[2], x[3]))
                if cut < len(train) - len(top):
                    ranked.append((cut, text))
        for _, text in sorted(ranked)[:MAX_DOMAINS]:
            cond = f"m >= {text}"
            if cond in tried:
                continue
            tried.add(cond)
            pred = _ATOM[cond]
            sub = {x: y for x, y in train.items() if pred(*x[:4])}
            if callable(full):
                full = full()
            within = {x: y for x, y in full.items() if pred(*x[:4])}
            try:
                # two pieces (and a fitted split): with the extra conditions and
                # features an exhaustive three-piece search costs minutes per metric
                return cond, _confirmed(f"{label} on {cond}", sub, within, fit_one, agrees,
                                        three=False, ctx=RESTRICTED)
            except NotDerived as e:
                errs.append(str(e))
    raise NotDerived(f"{label}: no restricted domain m >= T (listed T) either"
                     + (": " + "; ".join(errs) if errs else ""), refuted=bool(errs))


def _every_piece_tested(pieces: list[Piece], train: dict, full: dict) -> bool:
    """Does every piece apply at some size it was not fitted on?  A piece fitted on a few
    sizes and never met again in the confirmation range is an unconfirmed guess."""
    untested = set(range(len(pieces)))
    for x in full:
        if x in train:
            continue
        i = next(i for i, pc in enumerate(pieces) if holds(pc.cond, x))
        untested.discard(i)
        if not untested:
            return True
    return False


def _where(x) -> str:
    return f"p={x[0]}, m={x[1]}, v={x[2]}" + (f", d={x[3]}" if x[3] else "")


# --------------------------------------------------------------------------- scalars


def _scalar_value(pieces: list[Piece], x) -> Fraction:
    for pc in pieces:
        if holds(pc.cond, x):
            return fit.evaluate(pc.value, x)
    raise AssertionError("no piece applies")


def _scalar(label: str, train: dict, full: dict, restrict: int = 0, ctx: Fitting = PLAIN):
    """Confirmed pieces; with ``restrict`` (a level of :func:`_attempts`), (domain
    condition, pieces) on a restricted domain."""
    agrees = lambda pieces, x, y: _scalar_value(pieces, x) == y  # noqa: E731
    if restrict:
        return _restricted(label, train, full, lambda data: _fits(data, RESTRICTED), agrees,
                           exceptions=restrict == EXCEPTED)
    return _confirmed(label, train, full, lambda data: _fits(data, ctx), agrees, ctx=ctx)


# --------------------------------------------------------------------------- tropical


def _argmax(terms: Tropical, u) -> tuple:
    return max(terms, key=lambda t: (sum(a * b for a, b in zip(t, u)), t))


@lru_cache(maxsize=65536)
def _argmaxes(terms: Tropical) -> tuple:
    """The maximal term of ``terms`` in each probe direction (cached: the same sizes recur
    in many regions and both fitting modes)."""
    return tuple(_argmax(terms, u) for u in PROBES)


def _fit_terms(data: dict, mode: bool = False, ranked: bool = False,
               ctx: Fitting = PLAIN) -> list | None:
    """Term polynomials (one per cost symbol per term) matched across the sizes; None if
    none fits.

    By probes (``ranked`` False): the term maximal in a probe direction is followed across
    the sizes, for every probe where its coefficients are polynomials.  By rank (``ranked``
    True, where every size has the same number of terms): the i-th term in a lexicographic
    order, each cost symbol leading once; this finds terms that are maximal only in a cone
    whose position moves with the sizes, which no single probe follows.  Each fitted term is
    a real term at every training size; confirmation checks the rest."""
    found: list[tuple[tuple, list]] = []  # (key, term polynomials)

    def add(comps_of):
        comps = []
        for k in range(NDIM):
            poly = _fit(comps_of(k), mode, ctx)
            if poly is None:
                return
            comps.append(poly)
        key = tuple(tuple(sorted(c.items())) for c in comps)
        if key not in [f[0] for f in found]:
            found.append((key, comps))

    pts = sorted(data)
    if not ranked:
        done = set()
        tops = [_argmaxes(data[x]) for x in pts]
        for i in range(len(PROBES)):
            track = tuple(top[i] for top in tops)
            if track not in done:
                done.add(track)
                add(lambda k, track=track: {x: Fraction(t[k]) for x, t in zip(pts, track)})
        return [c for _, c in found] or None
    counts = {len(data[x]) for x in pts}
    if len(counts) != 1:
        return None
    n = counts.pop()
    for lead in range(NDIM):
        order = (lead,) + tuple(k for k in range(NDIM) if k != lead)
        rank = {x: sorted(data[x], key=lambda t: tuple(t[k] for k in order)) for x in pts}
        for i in range(n):
            add(lambda k, i=i, rank=rank: {x: Fraction(rank[x][i][k]) for x in pts})
    return [c for _, c in found] or None


def _terms_at(terms: list, x) -> Tropical:
    vals = []
    for comps in terms:
        t = tuple(fit.evaluate(c, x) for c in comps)
        vals.append(tuple(int(a) if a.denominator == 1 else a for a in t))
    return prune(vals)


def _value(terms, u):
    return max(sum(k * c for k, c in zip(t, u)) for t in terms)


def _tropical_equal(a: Tropical, b: Tropical) -> bool:
    if a == b:
        return True
    if any(_value(a, u) != _value(b, u) for u in CHECKS):
        return False
    if any(not all(isinstance(k, int) or k.denominator == 1 for k in t) for t in a | b):
        return False
    # only the terms one side lacks need a proof; most are dominated by a term of the other
    # side or by a point between two of its terms (exact certificates), the rest go to Z3
    only_a = [t for t in a if t not in b and not _covered(t, b)]
    only_b = [t for t in b if t not in a and not _covered(t, a)]
    if not only_a and not only_b:
        return True
    from ..smt.costproofs import tropical_leq

    n = len(COST_SYMBOLS)
    return tropical_leq(only_a, b, n) and tropical_leq(only_b, a, n)


def _covered(t, terms) -> bool:
    from .tropical import _between, dominates

    terms = list(terms)
    return any(dominates(k, t) for k in terms) or _between(t, terms, -1)


def _tropical_at(pieces: list[Piece], x) -> Tropical:
    for pc in pieces:
        if holds(pc.cond, x):
            return _terms_at(pc.value, x)
    raise AssertionError("no piece applies")


def _tropical(label: str, train: dict, full: dict | Callable[[], dict], restrict: int = 0,
              ctx: Fitting = PLAIN) -> list[Piece] | tuple[str, list[Piece]]:
    cache: dict = {}
    if restrict:
        ctx = RESTRICTED

    def fit_one(sub):
        key = tuple(sorted(sub))
        if key not in cache:
            alts = []
            for mode, ranked in product(MODES, (False, True)):
                terms = _fit_terms(sub, mode, ranked, ctx)
                if terms is not None and terms not in alts and all(
                        _tropical_equal(_terms_at(terms, x), t) for x, t in sub.items()):
                    alts.append(terms)
            cache[key] = alts
        return cache[key]

    agrees = lambda pieces, x, y: _tropical_equal(_tropical_at(pieces, x), y)  # noqa: E731
    if restrict:
        return _restricted(label, train, full, fit_one, agrees)
    return _confirmed(label, train, full, fit_one, agrees, ctx=ctx)


# --------------------------------------------------------------------------- derivation

#: Cost slices tried in turn for the makespan: all costs; latency 0; latency 0 and one
#: equality of the split costs (t_I = t_F, then t_W = t_I); latency 0 and t_I = t_W = t_F.
#: Where three split costs are free the V-shaped and bidirectional schedules have a number
#: of linear pieces that grows with p (ZB-V, c = 0, m = 2p: 6, 8, 17, 21, 81, 119, 159 for
#: p = 2..8); with one equality most stay at 2-4.
SLICES = ((IDENTITY, ()), (C_ZERO, ("c == 0",)), (I_IS_F, ("c == 0", "t_I == t_F")),
          (W_IS_I, ("c == 0", "t_W == t_I")),
          (UNIT_SPLIT, ("c == 0", "t_I == t_F", "t_W == t_F")))
MAX_TERMS = 40


def _train_ms(p: int):
    return range(1, min(TRAIN_M_MAX, 4 * p) + 1)


def _sizes(name: str, vs, confirm_p, confirm_m, distinct: int, past: int = 2):
    """(training sizes, confirmation sizes, skipped, confirmation p range): {(p, m, v):
    OrderMetrics}, keyed by the v the schedule has (ZB-V: 2); the confirmation range reaches
    ``past`` device counts beyond the training."""
    chunks = has_chunks(name)
    skipped = []

    def grid(ps, ms_of):
        out = {}
        for p in ps:
            for v in vs:
                for m in ms_of(p):
                    om = order_supported(name, p, m, v if chunks else None)
                    if om is None:
                        skipped.append((p, m, v))
                        continue
                    out[(p, m, om.v)] = (om, v if chunks else None)
        return out

    train, count, sparse = {}, 0, False
    for p in range(TRAIN_P_MIN, TRAIN_P_MAX + 1):
        got = grid((p,), _train_ms)
        if 0 < len(got) < 3 * len(vs):  # a sparse family (Chimera: m a multiple of p)
            sparse = True
            got = grid((p,), lambda p: range(1, 6 * p + 1))
        train.update(got)
        count += bool(got)
        if count >= distinct:
            break
    top = max((x[0] for x in train), default=confirm_p[1])
    cp = range(confirm_p[0], max(confirm_p[1], top + past) + 1)
    # a sparse family is trained up to m = 6p, so it is confirmed that far too
    confirm = grid(cp, lambda p: range(confirm_m[0], max(confirm_m[1], 6 * p if sparse else 0) + 1))
    return train, confirm, sorted(set(skipped)), cp


#: The parts a derivation is made of, each derived on its own (:func:`derive_part`): the
#: makespan (a max of linear forms in the costs), the busiest device's busy time, the total
#: and per-device busy time (linear in the costs), and the peaks (whole schedule and per device).
PARTS = ("total_busy", "busy", "busiest", "peak_inflight", "peak_inflight(d)", "peak_memory",
         "peak_memory(d)", "makespan")


def _check_slice(cost_slice: tuple[str, ...] | None) -> list:
    slices = list(enumerate(SLICES))
    if cost_slice is not None:
        slices = [(i, sl) for i, sl in slices if sl[1] == tuple(cost_slice)]
        if not slices:
            raise UsageError(f"cost slice {', '.join(cost_slice) or 'all costs'!s} is not one of "
                             + "; ".join(", ".join(c) or "all costs" for _, c in SLICES))
    return slices


@lru_cache(maxsize=256)
def derive_part(name: str, key: str, *,
                confirm_p: tuple[int, int] = (CONFIRM_P.start, CONFIRM_P.stop - 1),
                confirm_m: tuple[int, int] = (CONFIRM_M.start, CONFIRM_M.stop - 1),
                cost_slice: tuple[str, ...] | None = None) -> Part:
    """Derive and confirm one part (one of PARTS) of family ``name``, and nothing else.  The
    makespan is taken on the first cost slice of SLICES where a form survives (all costs,
    then c == 0, ...), or on ``cost_slice`` only (one of SLICES' conditions; the makespan
    only).  A part that no form fits has ``pieces`` None, with the reason in ``failure``."""
    import time

    family(name)
    if key not in PARTS:
        raise UsageError(f"unknown part {key!r}; known: {', '.join(PARTS)}")
    if cost_slice is not None and key != "makespan":
        raise UsageError(f"a cost slice applies to the makespan only, not to {key}")
    slices = _check_slice(cost_slice)
    t0 = time.process_time()
    chunks = has_chunks(name)
    vs = CHUNKS if chunks else (1,)
    grids = [_sizes(name, vs, confirm_p, confirm_m, n) for n in TRAIN_DISTINCT_P]
    grids.append(lru_cache(maxsize=1)(lambda: _sizes(
        name, vs, confirm_p, confirm_m, EXCEPTION_DISTINCT_P, EXCEPTION_PAST)))
    train, confirm, skipped, cp = grids[0]
    if len(train) < 8:
        raise NotDerived(f"{name}: only {len(train)} supported sizes in the training grid "
                         f"p={TRAIN_P_MIN}..{TRAIN_P_MAX}, m=1..{TRAIN_M_MAX}")
    domains: dict[str, str] = {}
    used = {"cp": cp, "sizes": {**confirm, **train}}

    def per_size(fn, pts):
        return {_key(*x): fn(v) for x, v in pts.items()}

    def per_device(fn, pts: dict[tuple[int, int, int], Any]):  # (p, m, v) -> metrics
        return {_key(*x, d): fn(v, d) for x, v in pts.items() for d in range(x[0])}

    def widening(fit_fn, domain_key: str | None = None, exceptions: bool = False):
        """Fit on the narrow training grid; if no form survives, on the wider one (which
        also widens the confirmation range beyond it); then on the wider one with the
        period-3 features; then (for ``domain_key``) on a restricted domain of m; then (with
        ``exceptions``) on one that also leaves out one device count."""
        def run(fn, device=False):
            f = per_device if device else per_size
            errs: list[tuple[str, bool]] = []  # (message, refuted)
            for tr, co, cp_, late, restrict in chain(_attempts(grids, errs, 0),
                                                      _attempts(grids, errs, 1, exceptions)):
                if restrict and domain_key is None:
                    continue
                allpts = {**co, **tr}
                try:
                    out = fit_fn(f(fn, tr), f(fn, allpts), restrict, LATE if late else PLAIN)
                except NotDerived as e:
                    errs.append((str(e), e.refuted))
                    continue
                if restrict:
                    assert domain_key is not None, "a restricted attempt was skipped without one"
                    domains[domain_key], out = out
                if cp_.stop > used["cp"].stop:
                    used["cp"], used["sizes"] = cp_, allpts
                return out
            raise NotDerived("; then: ".join(e for e, _ in errs))
        return run

    def components(label, fn, device):
        return [widening(lambda tr, full, restrict, ctx, k=k: _scalar(
            f"{name}: {label}[{COST_SYMBOLS[k]}]" + ("(d)" if device else ""),
            {x: Fraction(t[k]) for x, t in tr.items()},
            {x: Fraction(t[k]) for x, t in full.items()}, ctx=ctx))(fn, device)
            for k in range(NDIM)]

    def scalar(label):
        return widening(lambda tr, full, restrict, ctx: _scalar(
            f"{name}: {label}", tr, full, restrict, ctx), label, exceptions=True)

    om = lambda val: val[0]  # noqa: E731  (the order metrics of a grid entry)
    conds, reasons, failure, pieces = (), [], None, None
    try:
        if key == "total_busy":
            pieces = [Piece(None, components("total busy", lambda val: _total(om(val).busy),
                                             False))]
        elif key == "busy":
            pieces = [Piece(None, components("busy", lambda val, d: om(val).busy[d], True))]
        elif key == "busiest":
            pieces = widening(lambda tr, full, restrict, ctx: _tropical(
                f"{name}: busiest device's busy time", tr, full, restrict, ctx), "busiest")(
                    lambda val: prune(om(val).busy))
        elif key in ("peak_inflight", "peak_memory"):
            pieces = scalar(key)(lambda val: Fraction(max(getattr(om(val), key))))
        elif key in ("peak_inflight(d)", "peak_memory(d)"):
            attr = key[:-3]
            pieces = scalar(key)(lambda val, d: Fraction(getattr(om(val), attr)[d]), True)
        else:
            pieces, conds, reasons = _derive_makespan(name, grids, slices, domains, used)
    except NotDerived as e:
        failure = str(e)
    cp, allpts = used["cp"], used["sizes"]
    rng = {"p": (cp.start, cp.stop - 1), "m": (confirm_m[0], max(x[1] for x in allpts)),
           "v": ((min(x[2] for x in allpts), max(x[2] for x in allpts)) if chunks
                 else tuple(sorted({x[2] for x in allpts})))}
    return Part(name, key, chunks, _freeze(pieces), failure, domains.get(key), len(train),
                len(allpts), rng, tuple(skipped), tuple(conds) if pieces is not None else (),
                tuple(reasons) if pieces is not None else (), time.process_time() - t0)


def _derive_makespan(name: str, grids, slices, domains: dict, used: dict):
    """(pieces, cost slice, why the slices before it failed) of the makespan; NotDerived
    (naming every slice tried) when no slice has a form."""
    # every slice with the plain fits first, then every slice with the period-3 features
    # and a restricted domain of m: a family derived before keeps its form and its time
    mk, conds, chosen = None, (), len(slices)
    why: dict = {i: [] for i, _ in slices}
    complex_ = set()
    for phase in (0, 1):
        for k, (i, (merge, slice_conds)) in enumerate(slices):
            if i in complex_:
                continue
            for tr, co, cp_, late, restrict in _attempts(grids, why[i], phase):
                try:
                    got = _makespan(name, merge, tr, {**co, **tr}, restrict,
                                    LATE if late else PLAIN)
                except TooComplex as e:
                    why[i].append((str(e), False))
                    complex_.add(i)
                    break  # the schedule's own timeline is too complex on this slice
                except NotDerived as e:
                    why[i].append((str(e), e.refuted))
                    continue
                if isinstance(got, tuple):  # restricted: (domain condition, pieces)
                    domains["makespan"], mk = got
                else:
                    mk = got
                if cp_.stop > used["cp"].stop:
                    used["cp"], used["sizes"] = cp_, {**co, **tr}
                break
            if mk is not None:
                conds, chosen = slice_conds, k
                break
        if mk is not None:
            break
    reasons = [f"[{', '.join(SLICES[i][1]) or 'all costs'}] " + "; then: ".join(w for w, _ in why[i])
               for i, _ in slices[:chosen]]
    if mk is None:
        raise NotDerived("; ".join(reasons))
    return mk, conds, reasons


def _freeze(value):
    """A read-only copy: lists become tuples, dicts (polynomials) read-only mappings."""
    if isinstance(value, Piece):
        return Piece(value.cond, _freeze(value.value))
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(x) for x in value)
    if isinstance(value, dict):
        return MappingProxyType(dict(value))
    return value


@lru_cache(maxsize=64)
def derive(name: str, *, confirm_p: tuple[int, int] = (CONFIRM_P.start, CONFIRM_P.stop - 1),
           confirm_m: tuple[int, int] = (CONFIRM_M.start, CONFIRM_M.stop - 1),
           cost_slice: tuple[str, ...] | None = None) -> Derivation:
    """Derive and confirm every part (PARTS) of family ``name`` (each by :func:`derive_part`);
    the makespan on ``cost_slice`` when given.  A part that no form fits is None, with the
    reason in ``failures``; ``confirm_range`` is the widest range a part was confirmed on."""
    _check_slice(cost_slice)
    parts = {k: derive_part(name, k, confirm_p=confirm_p, confirm_m=confirm_m,
                            cost_slice=cost_slice if k == "makespan" else None) for k in PARTS}
    widest = parts[PARTS[0]]
    for pt in parts.values():
        if pt.confirm_range["p"][1] > widest.confirm_range["p"][1]:
            widest = pt
    mk = parts["makespan"]
    return Derivation(
        name, widest.chunks, mk.pieces, parts["busiest"].pieces, parts["total_busy"].pieces,
        parts["busy"].pieces, parts["peak_inflight"].pieces, parts["peak_inflight(d)"].pieces,
        parts["peak_memory"].pieces, parts["peak_memory(d)"].pieces, widest.trained,
        widest.confirmed, widest.skipped, MappingProxyType(dict(widest.confirm_range)),
        MappingProxyType({k: pt.failure for k, pt in parts.items() if pt.failure is not None}),
        mk.slice, mk.slice_failures, sum(pt.seconds for pt in parts.values()),
        MappingProxyType({k: pt.domain for k, pt in parts.items() if pt.domain is not None}),
        MappingProxyType(parts))


def _total(busy) -> tuple:
    return tuple(sum(b[k] for b in busy) for k in range(NDIM))


#: The restricted-domain levels of an attempt: none, ``m >= T``, and ``m >= T`` without one
#: device count (on the exception grid).
RESTRICTED_M, EXCEPTED = 1, 2


def _attempts(grids, errs: list, phase: int, exceptions: bool = False) -> Iterator[tuple]:
    """(training sizes, confirmation sizes, confirmation p range, late features, restricted
    domain level) to try in turn; ``errs`` collects (message, refuted) of the failed ones.
    Phase 0: the narrow grid, and the wider one after a refuted narrow fit; phase 1 (after
    phase 0 failed): the wider grid with the period-3 features, then on a restricted domain,
    then (with ``exceptions``; built only now) the exception grid on a domain with an
    exceptional device count.
    ``grids``: the narrow and the wider grid, then a function building the exception grid."""
    if phase == 0:
        tr, co, _, cp = grids[0]
        yield tr, co, cp, False, 0
        tr, co, _, cp = grids[1]
        if errs and errs[-1][1]:
            yield tr, co, cp, False, 0
        return
    tr, co, _, cp = grids[1]
    yield tr, co, cp, True, 0
    yield tr, co, cp, True, RESTRICTED_M
    if exceptions:
        tr, co, _, cp = grids[2]()
        yield tr, co, cp, True, EXCEPTED


def _makespan(name: str, merge: tuple, train: dict, allpts: dict,
              restrict: int = 0, ctx: Fitting = PLAIN) -> list[Piece] | tuple[str, list[Piece]]:
    def sym(pts):
        out = {}
        for (p, m, v), (_, varg) in pts.items():
            sm = supported(name, p, m, varg, merge, MAX_TERMS)
            if sm is None:
                raise NotDerived(f"{name}: p={p}, m={m}, v={v} not supported")
            out[_key(p, m, v)] = sm.makespan
        return out

    return _tropical(f"{name}: makespan", sym(train), lambda: sym(allpts), restrict, ctx)
