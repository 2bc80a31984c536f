"""Closed forms derived from the schedules: the only package (with claims/) that imports sympy.

Import it explicitly (``import schedverify.formulas``); ``import schedverify`` never loads
sympy.  :func:`formula` returns the derived sympy expression of a metric and its domain;
:mod:`.tropical` is the exact symbolic timeline at one size that everything rests on;
:mod:`.shipped` holds the forms derived ahead of time, which :func:`formula` reads first.
"""

from .closed import (COST_SYMBOLS, METRICS, SYMBOLS, Formula, derive_formula, formula, formula_at,
                     parse, proof_status, smallest_m)
from .derive import NotDerived, derive, derive_part

__all__ = ["COST_SYMBOLS", "METRICS", "SYMBOLS", "Formula", "NotDerived", "derive", "derive_formula",
           "derive_part", "formula", "formula_at", "parse", "proof_status", "smallest_m"]
