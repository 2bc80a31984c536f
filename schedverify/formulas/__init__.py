"""Closed forms derived from the schedules: the only package (with claims/) that imports sympy.

Import it explicitly (``import schedverify.formulas``); ``import schedverify`` never loads
sympy.  :func:`formula` returns the derived sympy expression of a metric and its domain;
:mod:`.tropical` is the exact symbolic timeline at one size that everything rests on;
:mod:`.shipped` holds the forms derived ahead of time, which :func:`formula` reads first.
"""

from .derive import METRICS, NotDerived, derive, derive_part
from .tropical import COST_SYMBOLS

#: What :mod:`.closed` provides, imported (and sympy with it) when first asked for: reading a
#: shipped form's text (:func:`.shipped.json_doc`) needs no sympy.
_CLOSED = ("SYMBOLS", "Formula", "derive_formula", "formula", "formula_at", "parse",
           "proof_status", "smallest_m")


def __getattr__(name: str):
    if name in _CLOSED:
        from . import closed

        return getattr(closed, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["COST_SYMBOLS", "METRICS", "SYMBOLS", "Formula", "NotDerived", "derive", "derive_formula",
           "derive_part", "formula", "formula_at", "parse", "proof_status", "smallest_m"]
