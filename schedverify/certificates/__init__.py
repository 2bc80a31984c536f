"""All-sizes certificates of the regular families (docs/proofs.md).

``certificate(family)`` gives the family's :class:`~.base.Certificate` or None;
:func:`.check.prove_certificate` proves one for every size in its domain with Z3, and
:func:`.check.crosscheck` compares it with the generator at concrete sizes.
"""

from __future__ import annotations

from .base import Certificate


def certificate(family: str) -> Certificate | None:
    """The family's certificate, or None when it has none (its claims stay finite-range)."""
    from .classic import GPIPE, ONE_F_ONE_B
    from .zero_bubble import ZB_H1, ZB_H2

    return {"gpipe": GPIPE, "1f1b": ONE_F_ONE_B, "zb-h1": ZB_H1, "zb-h2": ZB_H2}.get(family)


def families() -> tuple[str, ...]:
    return ("gpipe", "1f1b", "zb-h1", "zb-h2")


__all__ = ["Certificate", "certificate", "families"]
