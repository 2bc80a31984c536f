"""Shared plumbing of the generators: size checks and assembling a Schedule."""

from __future__ import annotations

from typing import Sequence

from ..errors import UnsupportedSize
from ..model import Action, Placement, PlacementSpec, Schedule


def require(condition: bool, family: str, rule: str) -> None:
    """Refuse sizes outside a family's domain with a message that states the rule."""
    if not condition:
        raise UnsupportedSize(f"{family}: {rule}")


def positive(family: str, **sizes: int) -> None:
    for name, value in sizes.items():
        if type(value) is not int or value < 1:
            raise UnsupportedSize(f"{family}: {name} must be a whole number >= 1, got {value!r}")


def assemble(
    name: str,
    order: Sequence[Sequence[Action | None]],
    *,
    stages: int,
    microbatches: int,
    placement: PlacementSpec | Placement = "loop",
    metadata: dict | None = None,
) -> Schedule:
    devices = len(order)
    if not isinstance(placement, Placement):
        placement = Placement.of(placement, devices, stages)
    return Schedule(
        devices, stages, microbatches, tuple(tuple(row) for row in order), placement, name,
        metadata=dict(metadata or {}),
    )
