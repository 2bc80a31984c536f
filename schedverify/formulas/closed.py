"""Derivations as sympy expressions: the public face of :mod:`schedverify.formulas`.

``formula(family, metric, device=None)`` returns a :class:`Formula`: a sympy expression in
``p, m, v, d, t_F, t_B, t_I, t_W, c`` and its domain of validity (the conditions it was
derived under and the range of sizes over which it was confirmed exactly).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import sympy

from ..errors import UsageError
from . import fit
from .derive import (FEATURES, MAX_PIECES, METRICS, SLICES, NotDerived, Piece,
                     derive_part)
from .shipped import SYMBOL_NAMES
from .sizes import family as _family
from .tropical import COST_SYMBOLS

p, m, v, d, t_F, t_B, t_I, t_W, c = sympy.symbols(SYMBOL_NAMES)
COSTS = (t_F, t_B, t_I, t_W, c)
SYMBOLS = {s.name: s for s in (p, m, v, d, t_F, t_B, t_I, t_W, c)}
_LOCALS = dict(SYMBOLS)


@lru_cache(maxsize=1)
def _basis() -> tuple:
    """The symbols and features a fitted polynomial's coordinates stand for (parsed when a
    form is first derived: reading a shipped form needs none of them)."""
    return (p, m, v, d) + tuple(sympy.sympify(text, locals=_LOCALS) for text, _ in FEATURES)


def parse(text: str):
    """Parse an expression in the formula symbols (what ``Formula.to_json()['expression']`` is)."""
    return sympy.sympify(text, locals=_LOCALS)


def _poly(poly) -> sympy.Expr:
    return fit.to_sympy(poly, _basis())


def _pieces(pieces: Sequence[Piece], one) -> sympy.Expr:
    """A decision list as a sympy Piecewise (first matching condition wins)."""
    if len(pieces) == 1:
        return one(pieces[0].value)
    return sympy.Piecewise(*[(one(pc.value), True if pc.cond is None else parse(str(pc.cond)))
                             for pc in pieces])


def _scalar(pieces: Sequence[Piece]) -> sympy.Expr:
    return _pieces(pieces, _poly)


def _linear(comps) -> sympy.Expr:
    return sum((_scalar(pc) * s for pc, s in zip(comps, COSTS)), sympy.Integer(0))


def _tropical(pieces: Sequence[Piece]) -> sympy.Expr:
    def one(terms):
        forms = [sum((_poly(comp) * s for comp, s in zip(t, COSTS)), sympy.Integer(0))
                 for t in terms]
        forms = [sympy.factor_terms(sympy.collect(sympy.expand(f), COSTS)) for f in forms]
        return sympy.Max(*forms) if len(forms) > 1 else forms[0]

    return _pieces(pieces, one)


def _tidy(e):
    """Collect by cost symbol with factored coefficients; cancel common factors of a ratio."""
    if e.has(sympy.Piecewise) or e.has(sympy.Max):
        return e

    def lin(x):
        return sympy.collect(sympy.expand(x), COSTS, func=sympy.factor)

    num, den = sympy.fraction(sympy.together(e))
    if den == 1:
        return lin(num)
    return lin(num) / lin(den)


@dataclass(frozen=True)
class Formula:
    family: str
    metric: str
    device: str | None
    expression: Any  # sympy expression
    conditions: tuple[str, ...]
    confirmed: dict
    notes: tuple[str, ...] = field(default=())
    generator_domain: str = ""
    #: size conditions (also in ``conditions``) outside which no form was derived: the
    #: schedule is irregular there (V-Half, V-Min: small m; V-Min: one device count)
    restricted: tuple[str, ...] = field(default=())
    #: the cost slice (also in ``conditions``) the form was derived on: one of derive.SLICES
    cost_slice: tuple[str, ...] = field(default=())

    @property
    def merge(self) -> tuple:
        """The projection of the cost symbols onto that slice (see tropical.IDENTITY)."""
        return next(merge for merge, conds in SLICES if tuple(conds) == self.cost_slice)

    def text(self) -> str:
        return sympy.sstr(self.expression)

    def latex(self) -> str:
        return sympy.latex(self.expression)

    def to_json(self) -> dict:
        return {
            "family": self.family, "metric": self.metric, "device": self.device,
            "expression": sympy.sstr(self.expression), "latex": self.latex(),
            "domain": {"conditions": list(self.conditions), "confirmed": self.confirmed,
                       "generator_domain": self.generator_domain, "proved": self.proved,
                       "status": self.status},
            "notes": list(self.notes),
        }

    @property
    def proved(self) -> bool:
        """Is this very form proved for all sizes of its domain (a record in the shipped
        proofs.json whose expression is this form's, or the per-device form's it comes from)?"""
        from .shipped import proof_record

        rec = proof_record(self.family, self.metric, self.device)
        if rec is None:
            return False
        base = self
        if self.device not in (None, "d"):  # a proof of the per-device form covers each device
            base = formula(self.family, self.metric, "d")
            if base.cost_slice != self.cost_slice:
                return False
        return rec.get("expression") == base.text()

    def confirmed_range(self) -> str:
        """``p=2..8, m=1..24`` (and ``v=1..3`` for a family with a chunks option)."""
        from .shipped import range_text

        return range_text(self.confirmed, self.conditions)

    @property
    def status(self) -> str:
        """"proved for every size in its domain", or "confirmed on p=2..8, m=1..24"."""
        from .shipped import status_text

        return status_text(self.proved, self.confirmed, self.conditions)

    def extrapolated(self, sizes: dict) -> str | None:
        """None where ``sizes`` are inside what was confirmed (or the form is proved); else
        the warning that the value there is extrapolated from the confirmed range."""
        rng = self.confirmed
        chunked = any("<= v <=" in c for c in self.conditions)
        if self.proved:  # for every p and m, at the chunk counts it was confirmed on (claims/forms.py)
            if "v" in sizes and chunked and not rng["v"][0] <= sizes["v"] <= rng["v"][-1]:
                return (f"v={sizes['v']} is outside the chunk counts the form is proved for "
                        f"(v={rng['v'][0]}..{rng['v'][-1]}): the form is extrapolated")
            return None
        out = False
        for k in ("p", "m"):
            if k in sizes and not rng[k][0] <= sizes[k] <= rng[k][1]:
                out = True
        if "v" in sizes and chunked and not rng["v"][0] <= sizes["v"] <= rng["v"][-1]:
            out = True
        if not out:
            return None
        given = ", ".join(f"{k}={sizes[k]}" for k in ("p", "m", "v")
                          if k in sizes and (k != "v" or chunked))
        return (f"{given} is outside the confirmed range {self.confirmed_range()}: the form "
                "is extrapolated")

    def evaluate(self, sizes: dict, costs: dict | None = None) -> Fraction:
        """The exact value at ``sizes`` (p, m, v, d) and ``costs`` (t_F, ..., c)."""
        subs = {SYMBOLS[k]: sympy.Rational(str(x)) for k, x in {**sizes, **(costs or {})}.items()
                if k in SYMBOLS}
        cond = _outside(self.cost_slice, costs) if costs else None
        if costs and cond is not None:  # the cost slice it was derived on (cond needs costs)
            given = ", ".join(f"{k}={x}" for k, x in costs.items())
            raise UsageError(f"{self.family} {self.metric}: the form holds for {cond} "
                             f"only; the costs {given} are outside it")
        for cond in self.restricted:  # the sizes the form was derived on
            holds = parse(cond).xreplace(subs)
            if holds is not sympy.true:
                given = ", ".join(f"{k}={x}" for k, x in sizes.items())
                raise UsageError(f"{self.family} {self.metric}: the form holds for {cond} only "
                                 f"(the schedule is irregular outside it: not derived there); the "
                                 f"sizes {given} are outside it")
        val = sympy.sympify(self.expression).xreplace(subs)
        val = sympy.nsimplify(val) if not val.is_Rational else val
        if not val.is_Rational:
            raise UsageError(f"{self.family} {self.metric}: value at {sizes} {costs} is not a "
                             f"number: {val} (give every size and cost symbol)")
        return Fraction(int(val.p), int(val.q))


def _outside(conds: tuple[str, ...], costs: dict) -> str | None:
    """The first condition ``a == b`` of a cost slice that ``costs`` break (None: inside)."""
    subs = {SYMBOLS[k]: sympy.Rational(str(x)) for k, x in costs.items() if k in SYMBOLS}
    for cond in conds:
        lhs, rhs = (parse(t) for t in cond.split("=="))
        if lhs.xreplace(subs) != rhs.xreplace(subs):
            return cond
    return None


def formula_at(family: str, metric: str, device: int | str | None = None, *,
               costs: dict) -> Formula:
    """The form of ``metric`` that holds at ``costs``: the widest-slice one of :func:`formula`,
    or, when ``costs`` are outside its slice, the one derived on the first (widest) other
    cost slice that holds them (ZB-V with t_W free: on c == 0, t_I == t_F, for m >= 2p - 1).
    Raises what :func:`formula` raises, or UsageError when no slice that holds the costs
    has a form."""
    f = formula(family, metric, device)
    if _outside(f.cost_slice, costs) is None:
        return f
    tried = []
    for _, conds in SLICES:
        if conds == f.cost_slice or _outside(conds, costs) is not None:
            continue
        try:
            return formula(family, metric, device, cost_slice=conds)
        except NotDerived as e:
            tried.append(str(e))  # it names the slice
    given = ", ".join(f"{k}={x}" for k, x in costs.items())
    raise UsageError(f"{family} {metric}: no form holds at the costs {given}: the widest form "
                     f"needs {', '.join(f.cost_slice)}" + "".join("; " + t for t in tried))


#: The parts (derive.PARTS) each metric is made of, in the order they are needed.
def _parts_of(metric: str, per_device: bool) -> tuple[str, ...]:
    if metric == "busy":
        return ("busy",)
    if metric in ("peak_inflight", "peak_memory"):
        return (metric + ("(d)" if per_device else ""),)
    return {"makespan": ("makespan",), "bubble_fraction": ("makespan", "total_busy"),
            "bubble_time": ("makespan", "busy") if per_device else ("makespan", "busiest"),
            "bubble_ratio": ("makespan", "busiest")}[metric]


@dataclass(frozen=True)
class Raw:
    """What a form is assembled from (:func:`assemble`): the expression before tidying, with
    ``d`` free for a per-device metric, the size domains of its parts, where its parts were
    all confirmed, and its cost slice.  Plain data besides ``expression``: it is what the
    shipped forms store, so that a form for one device is assembled exactly as when derived."""

    family: str
    metric: str
    per_device: bool
    expression: Any
    domains: tuple[tuple[str, str], ...]  # (part key, its size condition)
    confirmed: dict  # {"p": [lo, hi], "m": [lo, hi], "v": [...], "sizes": n}
    chunks: bool
    slice: tuple[str, ...]
    slice_failures: tuple[str, ...]
    skipped: int


def _validate(family: str, metric: str, device) -> None:
    from .shipped import validate

    validate(family, metric, device)


@lru_cache(maxsize=256)
def derive_raw(family: str, metric: str, per_device: bool = False,
               cost_slice: tuple[str, ...] | None = None) -> Raw:
    """Derive the parts ``metric`` is made of (and no other) and combine them; NotDerived
    when one of them has no form (the first one needed, in order)."""
    if metric == "busy":
        per_device = True
    parts = []
    got: dict[str, tuple[Piece, ...]] = {}  # part key -> its pieces
    for key in _parts_of(metric, per_device):
        pt = derive_part(family, key, cost_slice=cost_slice if key == "makespan" else None)
        if pt.pieces is None:
            raise NotDerived(pt.failure or f"{family}: {key}: not derived")
        parts.append(pt)
        got[pt.key] = pt.pieces
    if metric == "busy":
        expr = _linear(got["busy"][0].value)
    elif metric in ("peak_inflight", "peak_memory"):
        expr = _scalar(got[parts[0].key])
    else:
        T = _tropical(got["makespan"])
        if metric == "makespan":
            expr = T
        elif metric == "bubble_fraction":
            expr = 1 - _linear(got["total_busy"][0].value) / (p * T)
        elif metric == "bubble_time" and per_device:
            expr = T - _linear(got["busy"][0].value)
        else:
            busiest = _tropical(got["busiest"])
            expr = T - busiest if metric == "bubble_time" else (T - busiest) / busiest
    # confirmed where every part was: the narrowest of their ranges (the grids are nested)
    narrow = min(parts, key=lambda pt: (pt.confirm_range["p"][1], pt.confirmed))
    rng = narrow.confirm_range
    confirmed = {"p": list(rng["p"]), "m": list(rng["m"]), "v": list(rng["v"]),
                 "sizes": narrow.confirmed}
    mk = next((pt for pt in parts if pt.key == "makespan"), None)
    return Raw(family, metric, per_device, expr,
               tuple((pt.key, pt.domain) for pt in parts if pt.domain is not None),
               confirmed, parts[0].chunks, mk.slice if mk else (),
               mk.slice_failures if mk else (), len(parts[0].skipped))


def _device_index(device: int | str | None) -> int:
    """The index of one device, for a per-device form (only those have d to substitute)."""
    # derive_formula and the shipped forms make a raw form per device only when asked for a
    # device (or busy, which assemble turns into d)
    assert device is not None, "a per-device form is assembled for a device or d"
    return int(device)


def assemble(raw: Raw, device: int | str | None = None) -> Formula:
    """The :class:`Formula` of ``raw`` (for one device when ``device`` is a number): tidied,
    with its domain's conditions and notes."""
    family, metric, per_device = raw.family, raw.metric, raw.per_device
    if metric == "busy" and device is None:
        device = "d"
    expr = raw.expression
    if per_device and device != "d":
        expr = expr.subs(d, _device_index(device))
    expr = _tidy(expr)
    # the restricted size domains of the parts the expression is made of
    restricted = []
    for key, cond in raw.domains:
        e = parse(cond)
        if not key.endswith("(d)"):
            e = e.subs(d, 0)  # a whole-schedule metric was fitted at d = 0
        elif device != "d":
            e = e.subs(d, _device_index(device))
        for part in (e.args if isinstance(e, sympy.And) else (e,)):
            text = sympy.sstr(part)
            if text not in restricted:
                restricted.append(text)
    rng = raw.confirmed
    conds = ["p >= 2", "m >= 1"]
    if raw.chunks:
        conds.append(f"{rng['v'][0]} <= v <= {rng['v'][1]}")
    else:
        conds.append(f"v == {rng['v'][0]}" if len(rng["v"]) == 1 else f"v in {rng['v']}")
    if per_device:
        conds.append("0 <= d <= p - 1")
    conds += restricted
    timing = metric in ("makespan", "bubble_time", "bubble_ratio", "bubble_fraction", "busy")
    notes = []
    slice_: tuple[str, ...] = ()
    if timing:
        conds += ["t_F > 0", "t_B > 0", "t_I > 0", "t_W > 0"]
        slice_ = () if metric == "busy" else raw.slice
        conds += list(slice_)
        if "c == 0" not in slice_:
            conds.append("c >= 0")
        notes.append("uniform costs per action kind; an OVERLAP_F_B action costs its two parts' sum")
        for why in (() if metric == "busy" else raw.slice_failures):
            notes.append("not derived on a cost domain tried before this one: " + why)
    if restricted:
        notes.append("derived on " + " and ".join(restricted) + " only: no form of up to "
                     f"{MAX_PIECES} pieces holds for every size (the schedule is irregular "
                     "outside it: at small m, or at one device count)")
    if metric == "peak_memory":
        notes.append("memory model: activation 1 per stage, w = 1/2, no static memory")
    if raw.skipped:
        notes.append(f"{raw.skipped} sizes in the ranges are not accepted by the generator "
                     "and were skipped")
    confirmed = {"p": list(rng["p"]), "m": list(rng["m"]), "v": list(rng["v"]),
                 "sizes": rng["sizes"]}
    return Formula(family, metric, None if device is None else str(device), expr, tuple(conds),
                   confirmed, tuple(notes), getattr(_family(family), "domain", ""),
                   tuple(restricted), tuple(slice_))


def derive_formula(family: str, metric: str, device: int | str | None = None,
                   cost_slice: tuple[str, ...] | None = None) -> Formula:
    """:func:`formula`, derived now from the schedules (never the shipped forms): only the
    parts the metric is made of are derived."""
    _validate(family, metric, device)
    per_device = device is not None or metric == "busy"
    return assemble(derive_raw(family, metric, per_device, cost_slice), device)


@lru_cache(maxsize=1024)
def formula(family: str, metric: str, device: int | str | None = None,
            cost_slice: tuple[str, ...] | None = None) -> Formula:
    """The derived closed form of ``metric`` for ``family`` (per device when ``device`` is
    given: ``"d"`` for the general form, or a number).  Timing metrics hold on the widest
    cost slice where a form was found, or on ``cost_slice`` (one of derive.SLICES).

    The widest-slice forms ship with the package (:mod:`.shipped`, made by the same
    derivation: ``schedverify formula --rebuild``); a form not shipped (another cost slice)
    is derived now, only the parts it is made of."""
    _validate(family, metric, device)
    if cost_slice is None:
        f = _shipped_formula(family, metric, device)
        if f is not None:
            return f
    return derive_formula(family, metric, device, cost_slice)


def _shipped_formula(family: str, metric: str, device=None) -> Formula | None:
    """The shipped form (a Formula), or None when none is shipped; raises NotDerived when the
    derivation that made the file found no form."""
    from .shipped import _copy, entry, parse_srepr

    doc = entry(family, metric, device)
    if doc is None:
        return None
    if "not_derived" in doc:
        raise NotDerived(doc["not_derived"])
    if device is not None and device != "d":  # one device: assembled from the raw form
        return assemble(_raw_of(family, metric, doc["raw"]), device)
    return Formula(family, metric, doc["device"], parse_srepr(doc["srepr"]),
                   tuple(doc["conditions"]), _copy(doc["confirmed"]), tuple(doc["notes"]),
                   getattr(_family(family), "domain", ""), tuple(doc["restricted"]),
                   tuple(doc["cost_slice"]))


def _raw_of(family: str, metric: str, doc: dict):
    from .shipped import _copy, parse_srepr

    return Raw(family, metric, doc["per_device"], parse_srepr(doc["srepr"]),
               tuple((k, c) for k, c in doc["domains"]), _copy(doc["confirmed"]), doc["chunks"],
               tuple(doc["slice"]), tuple(doc["slice_failures"]), doc["skipped"])


def proof_status(family: str, metric: str, device: int | str | None = None) -> str:
    """"proved for every size in its domain" when a proof record holds for the shipped form,
    else "confirmed on p=2..8, m=1..24" (where it was confirmed exactly against the
    schedules).  Raises what :func:`formula` raises (NotDerived: no form)."""
    return formula(family, metric, device).status


def smallest_m(family: str, p_value: int, below: float, *, metric: str = "bubble_fraction",
               costs: dict | None = None, v_value: int | None = None, m_max: int = 4096) -> int | None:
    """The smallest m (the family accepts) whose ``metric`` is below ``below`` at p devices.

    Answers "how many microbatches for a bubble fraction under 5%?" from the derived form.
    """
    from ..errors import UnsupportedSize
    from .sizes import build

    base = {"t_F": 1, "t_B": 2, "t_I": 1, "t_W": 1, "c": 0, **(costs or {})}
    f = formula_at(family, metric, costs=base)
    limit = Fraction(str(below))
    for mv in range(1, m_max + 1):
        try:
            build(family, p_value, mv, v_value if _has_v(family) else None)
        except UnsupportedSize:
            continue
        sizes = {"p": p_value, "m": mv, "v": v_value if v_value is not None else f.confirmed["v"][0]}
        if f.evaluate(sizes, base) < limit:
            return mv
    return None


def _has_v(name: str) -> bool:
    from .sizes import has_chunks

    return has_chunks(name)


__all__ = ["COST_SYMBOLS", "Formula", "METRICS", "Raw", "SYMBOLS", "assemble", "derive_formula",
           "derive_raw", "formula", "formula_at", "parse", "proof_status", "smallest_m"]
