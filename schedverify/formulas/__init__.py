"""Closed forms derived from the schedules: the only package (with claims/) that imports sympy.

Import it explicitly (``import schedverify.formulas``); ``import schedverify`` never loads
sympy.  :func:`formula` returns the derived sympy expression of a metric and its domain;
:mod:`.tropical` is the exact symbolic timeline at one size that everything rests on.
"""

from .closed import COST_SYMBOLS, METRICS, SYMBOLS, Formula, formula, formula_at, parse, smallest_m
from .derive import NotDerived, derive

__all__ = ["COST_SYMBOLS", "METRICS", "SYMBOLS", "Formula", "NotDerived", "derive", "formula",
           "formula_at", "parse", "smallest_m"]
