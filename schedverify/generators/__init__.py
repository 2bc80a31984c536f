"""Generators for the well-known schedule families: pure functions, sizes first.

``FAMILIES`` maps each CLI name to its generator; each generator's docstring cites its
paper and states its domain.
"""

from __future__ import annotations

from .classic import gpipe, one_f_one_b

FAMILIES = {
    "gpipe": gpipe,
    "1f1b": one_f_one_b,
}

__all__ = ["FAMILIES", "gpipe", "one_f_one_b"]
