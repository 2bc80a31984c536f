"""Closed forms derived from the schedules themselves, then confirmed exactly over a range.

For a family, at every size of a training grid, :mod:`.tropical` gives the exact symbolic
metrics (makespan as a max of linear forms in the costs, busy time per device, peaks).
:mod:`.fit` generalises them over the sizes:

- a number (a peak, a coefficient) becomes the lowest-degree polynomial in ``p, m, v, d``
  that reproduces every point, or two polynomials split at ``m >= threshold`` for a
  threshold from a short list (``p``, ``p - d``, ``p*v``...);
- a max of linear forms is fitted term by term: for each of a few generic cost directions,
  the term that is maximal there is followed across sizes and each of its coefficients
  fitted; the formula is the max of the fitted terms.

Every candidate is then *confirmed*: evaluated at every supported size of a larger range and
compared exactly with the schedule (equal term sets, or equal functions of the costs by a
Z3 query when the sets differ only by redundant terms).  A candidate that fails anywhere is
rejected; if nothing survives the metric is reported as not derived, never guessed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from functools import lru_cache
from typing import Callable

from ..errors import UsageError
from . import fit
from .sizes import family, has_chunks, supported
from .tropical import C_ZERO, COST_SYMBOLS, IDENTITY, NDIM, UNIT_SPLIT, TooComplex, Tropical, prune

METRICS = ("makespan", "bubble_time", "bubble_fraction", "bubble_ratio", "peak_inflight",
           "peak_memory")
DEVICE_METRICS = ("bubble_time", "peak_inflight", "peak_memory", "busy")

#: Where a derivation is fitted and where it is confirmed (sizes the family refuses are skipped).
TRAIN_P = range(2, 6)
TRAIN_M_MAX = 16
CONFIRM_P = range(2, 9)
CONFIRM_M = range(1, 25)
CHUNKS = (1, 2, 3)

#: Thresholds m >= T at which a piecewise form may split: (text, T(p, v, d)).
THRESHOLDS: tuple[tuple[str, Callable[[int, int, int], int]], ...] = (
    ("p", lambda p, v, d: p),
    ("p - d", lambda p, v, d: p - d),
    ("p - 1", lambda p, v, d: p - 1),
    ("p - d - 1", lambda p, v, d: p - d - 1),
    ("2*p", lambda p, v, d: 2 * p),
    ("2*p - 1", lambda p, v, d: 2 * p - 1),
    ("2*(p - d)", lambda p, v, d: 2 * (p - d)),
    ("2*(p - d) - 1", lambda p, v, d: 2 * (p - d) - 1),
    ("p*v", lambda p, v, d: p * v),
    ("p + 1", lambda p, v, d: p + 1),
    ("2*p + 1", lambda p, v, d: 2 * p + 1),
)

#: Generic cost directions (t_F, t_B, t_I, t_W, c) used to follow makespan terms across sizes.
PROBES = (
    (1009, 1013, 1019, 1021, 1), (1009, 1013, 1019, 1021, 997), (3, 5, 7, 11, 10007),
    (3001, 1013, 1019, 1021, 1), (1009, 3011, 1019, 1021, 2), (1009, 1013, 3019, 1021, 3),
    (1009, 1013, 1019, 3023, 5), (1009, 1013, 1019, 101, 7), (1009, 1013, 101, 1021, 11),
    (101, 1013, 1019, 1021, 13), (1009, 1013, 1019, 1021, 4999),
)

VARS = ("p", "m", "v", "d")
#: Features that may enter a fit linearly when no polynomial does (quasi-periodic in m mod p).
EXTRAS: tuple[tuple[str, Callable[[int, int, int, int], int]], ...] = (
    ("floor((m - 1)/p)", lambda p, m, v, d: (m - 1) // p),
    ("ceiling((m - 1)/p)", lambda p, m, v, d: -((1 - m) // p)),
)


def _key(p: int, m: int, v: int, d: int = 0) -> tuple:
    return (p, m, v, d) + tuple(f(p, m, v, d) for _, f in EXTRAS)


def _fit(data: dict):
    poly = fit.fit_poly(data, 4)
    if poly is None:
        poly = fit.fit_poly(data, 4, n_extra=len(EXTRAS))
    return poly


class NotDerived(UsageError):
    """No candidate form survived confirmation; the message says what was tried."""


@dataclass(frozen=True)
class Piece:
    """One region of a piecewise form: ``cond`` (text, None = otherwise) and its value:
    a polynomial (scalar) or a list of term polynomials, one per cost symbol (tropical)."""

    cond: str | None
    value: object


@dataclass
class Derivation:
    """Everything derived for one family, plus the ranges it was fitted and confirmed on."""

    family: str
    chunks: bool
    makespan: list[Piece]
    busiest: list[Piece]
    total_busy: list[Piece]
    busy: list[Piece]
    peak_inflight: list[Piece]
    peak_inflight_d: list[Piece]
    peak_memory: list[Piece]
    peak_memory_d: list[Piece]
    trained: int
    confirmed: int
    skipped: list[tuple[int, int, int]] = field(default_factory=list)
    confirm_range: dict = field(default_factory=dict)
    failures: dict = field(default_factory=dict)  # metric -> why no form was found
    slice: tuple[str, ...] = ()  # cost conditions the forms hold under (empty: all costs >= 0)
    slice_failures: list = field(default_factory=list)  # why wider slices failed


# --------------------------------------------------------------------------- grids


#: Cost slices tried in turn: all costs; latency 0; latency 0 and t_I = t_W = t_F.
SLICES = ((IDENTITY, ()), (C_ZERO, ("c == 0",)),
          (UNIT_SPLIT, ("c == 0", "t_I == t_F", "t_W == t_F")))
MAX_TERMS = 40


def _grid(name: str, ps, ms_of, vs, merge=IDENTITY) -> tuple[dict, list]:
    out, skipped = {}, []
    for p in ps:
        for v in vs:
            for m in ms_of(p):
                sm = supported(name, p, m, v if has_chunks(name) else None, merge, MAX_TERMS)
                if sm is None:
                    skipped.append((p, m, v))
                    continue
                out[(p, m, sm.v)] = sm
    return out, skipped


def _cond_ok(cond: tuple[str, Callable] | None, x) -> bool:
    if cond is None:
        return True
    p, m, v, d = (tuple(x) + (0,))[:4]
    return m >= cond[1](p, v, d)


# --------------------------------------------------------------------------- scalars


def _scalar_pieces(data: dict) -> list[Piece] | None:
    poly = _fit(data)
    if poly is not None:
        return [Piece(None, poly)]
    for text, th in THRESHOLDS:
        hi = {x: y for x, y in data.items() if x[1] >= th(x[0], x[2], x[3])}
        lo = {x: y for x, y in data.items() if x[1] < th(x[0], x[2], x[3])}
        if not hi or not lo:
            continue
        ph, pl = _fit(hi), _fit(lo)
        if ph is not None and pl is not None:
            return [Piece(f"m >= {text}", ph), Piece(None, pl)]
    return None


def _scalar_value(pieces: list[Piece], x) -> Fraction:
    for pc in pieces:
        if pc.cond is None or _holds(pc.cond, x):
            return fit.evaluate(pc.value, x)
    raise AssertionError("no piece applies")


def _holds(cond: str, x) -> bool:
    text = cond.split(">=", 1)[1].strip()
    th = dict(THRESHOLDS)[text]
    return x[1] >= th(x[0], x[2], x[3])


# --------------------------------------------------------------------------- tropical


def _argmax(terms: Tropical, u) -> tuple:
    return max(terms, key=lambda t: (sum(a * b for a, b in zip(t, u)), t))


def _fit_terms(data: dict) -> list | None:
    """Term polynomials (one per cost symbol per term) following each probe, or None."""
    found = []
    for u in PROBES:
        comps = []
        for k in range(NDIM):
            poly = _fit({x: Fraction(_argmax(t, u)[k]) for x, t in data.items()})
            if poly is None:
                return None
            comps.append(poly)
        key = tuple(tuple(sorted(c.items())) for c in comps)
        if key not in [f[0] for f in found]:
            found.append((key, comps))
    return [c for _, c in found]


def _terms_at(terms: list, x) -> Tropical:
    vals = []
    for comps in terms:
        t = tuple(fit.evaluate(c, x) for c in comps)
        vals.append(tuple(int(a) if a.denominator == 1 else a for a in t))
    return prune(vals)


def _tropical_equal(a: Tropical, b: Tropical) -> bool:
    if a == b:
        return True
    if any(not all(isinstance(k, int) or k.denominator == 1 for k in t) for t in a | b):
        return False
    from ..smt.costproofs import tropical_equal

    return tropical_equal(a, b, len(COST_SYMBOLS))


def _tropical_pieces(data: dict) -> list[Piece] | None:
    def attempt(sub):
        terms = _fit_terms(sub)
        if terms is None:
            return None
        if all(_tropical_equal(_terms_at(terms, x), t) for x, t in sub.items()):
            return terms
        return None

    whole = attempt(data)
    if whole is not None:
        return [Piece(None, whole)]
    for text, th in THRESHOLDS:
        hi = {x: y for x, y in data.items() if x[1] >= th(x[0], x[2], x[3])}
        lo = {x: y for x, y in data.items() if x[1] < th(x[0], x[2], x[3])}
        if not hi or not lo:
            continue
        th_terms = attempt(hi)
        if th_terms is None:
            continue
        tl_terms = attempt(lo)
        if tl_terms is not None:
            return [Piece(f"m >= {text}", th_terms), Piece(None, tl_terms)]
    return None


def _tropical_at(pieces: list[Piece], x) -> Tropical:
    for pc in pieces:
        if pc.cond is None or _holds(pc.cond, x):
            return _terms_at(pc.value, x)
    raise AssertionError("no piece applies")


# --------------------------------------------------------------------------- derivation


def _train_ms(p: int):
    return range(1, min(TRAIN_M_MAX, 4 * p) + 1)


@lru_cache(maxsize=64)
def derive(name: str, *, confirm_p: tuple[int, int] = (CONFIRM_P.start, CONFIRM_P.stop - 1),
           confirm_m: tuple[int, int] = (CONFIRM_M.start, CONFIRM_M.stop - 1)) -> Derivation:
    """Derive and confirm every metric of family ``name`` on the widest cost slice where a
    form survives (all costs, then c == 0, then c == 0 with t_I = t_W = t_F); NotDerived
    with every slice's reason otherwise."""
    family(name)
    reasons = []
    for merge, conds in SLICES:
        try:
            der = _derive(name, merge, confirm_p, confirm_m)
        except (NotDerived, TooComplex) as e:
            reasons.append(f"[{', '.join(conds) or 'all costs'}] {e}")
            continue
        der.slice = conds
        der.slice_failures = reasons
        return der
    raise NotDerived("; ".join(reasons))


def _derive(name, merge, confirm_p, confirm_m) -> Derivation:
    chunks = has_chunks(name)
    vs = CHUNKS if chunks else (1,)
    train, skipped = _grid(name, TRAIN_P, _train_ms, vs, merge)
    if len(train) < 8:
        raise NotDerived(f"{name}: only {len(train)} supported sizes in the training grid "
                         f"p={TRAIN_P.start}..{TRAIN_P.stop - 1}, m=1..{TRAIN_M_MAX}")
    cp = range(confirm_p[0], confirm_p[1] + 1)
    cm = range(confirm_m[0], confirm_m[1] + 1)
    confirm, skipped_c = _grid(name, cp, lambda p: cm, vs, merge)
    allpts = {**confirm, **train}

    def per_size(fn):
        return ({_key(*x): fn(sm) for x, sm in allpts.items()},
                {_key(*x): fn(sm) for x, sm in train.items()})

    def per_device(fn):
        full = {_key(*x, d): fn(sm, d) for x, sm in allpts.items() for d in range(x[0])}
        tr = {_key(*x, d): fn(sm, d) for x, sm in train.items() for d in range(x[0])}
        return full, tr

    def scalar(label, full, tr):
        tr4, full4 = tr, full
        pieces = _scalar_pieces(tr4)
        if pieces is None:
            raise NotDerived(f"{name}: {label}: no polynomial or split-polynomial form fits the "
                             f"{len(tr4)} training sizes")
        bad = next((x for x, y in full4.items() if _scalar_value(pieces, x) != y), None)
        if bad is not None:
            raise NotDerived(f"{name}: {label}: the fitted form fails at p={bad[0]}, m={bad[1]}, "
                             f"v={bad[2]}" + (f", d={bad[3]}" if label.endswith("(d)") else ""))
        return pieces

    def tropical(label, full, tr):
        tr4, full4 = tr, full
        pieces = _tropical_pieces(tr4)
        if pieces is None:
            raise NotDerived(f"{name}: {label}: no max-of-linear-forms fits the training sizes")
        bad = next((x for x, y in full4.items() if not _tropical_equal(_tropical_at(pieces, x), y)),
                   None)
        if bad is not None:
            raise NotDerived(f"{name}: {label}: the fitted form fails at p={bad[0]}, m={bad[1]}, "
                             f"v={bad[2]}")
        return pieces

    def term_components(label, full, tr, device: bool):
        comps = []
        for k in range(NDIM):
            f = {x: Fraction(t[k]) for x, t in full.items()}
            t_ = {x: Fraction(t[k]) for x, t in tr.items()}
            comps.append(scalar(f"{label}[{COST_SYMBOLS[k]}]" + ("(d)" if device else ""), f, t_))
        return comps

    mk = tropical("makespan", *per_size(lambda sm: sm.makespan))
    busiest = tropical("busiest device's busy time", *per_size(lambda sm: sm.busiest))
    total = term_components("total busy", *per_size(lambda sm: sm.total_busy), False)
    busy = term_components("busy", *per_device(lambda sm, d: sm.busy[d]), True)
    failures: dict[str, str] = {}

    def optional(label, fn):
        # the peaks do not depend on costs: one that fits no form is reported, not fatal
        try:
            return fn()
        except NotDerived as e:
            failures[label] = str(e)
            return None

    pin = optional("peak_inflight", lambda: scalar(
        "peak_inflight", *per_size(lambda sm: Fraction(max(sm.peak_inflight)))))
    pin_d = optional("peak_inflight(d)", lambda: scalar(
        "peak_inflight(d)", *per_device(lambda sm, d: Fraction(sm.peak_inflight[d]))))
    pmem = optional("peak_memory", lambda: scalar(
        "peak_memory", *per_size(lambda sm: Fraction(max(sm.peak_memory)))))
    pmem_d = optional("peak_memory(d)", lambda: scalar(
        "peak_memory(d)", *per_device(lambda sm, d: Fraction(sm.peak_memory[d]))))
    return Derivation(name, chunks, mk, busiest, [Piece(None, total)], [Piece(None, busy)], pin,
                      pin_d, pmem, pmem_d, len(train), len(allpts), sorted(set(skipped + skipped_c)),
                      {"p": [cp.start, cp.stop - 1], "m": [cm.start, cm.stop - 1],
                       "v": [min(vs), max(vs)] if chunks else sorted({x[2] for x in allpts})},
                      failures=failures)
