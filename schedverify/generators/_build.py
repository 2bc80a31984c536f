"""Shared plumbing of the generators: size checks, the 1F1B phase pattern, assembling a Schedule."""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import UnsupportedSize
from ..limits import limits
from ..model import B, F, I, W, Action, Placement, PlacementSpec, Schedule

#: A unit of work on one device: (stage, microbatch).
Work = tuple[int, int]


def require(condition: bool, family: str, rule: str) -> None:
    """Refuse sizes outside a family's domain with a message that states the rule."""
    if not condition:
        raise UnsupportedSize(f"{family}: {rule}")


def positive(family: str, **sizes: int) -> None:
    """Every size is a whole number >= 1 (bools are refused too: ``True`` is not a size), and
    the schedule fits the caps of :mod:`schedverify.limits`: each (stage, microbatch) pair has
    at least a forward and a backward, so ``2 * devices * microbatches * chunks`` actions at
    least; sizes that certainly pass the cap are refused before anything is built."""
    for name, value in sizes.items():
        if type(value) is not int or value < 1:
            raise UnsupportedSize(f"{family}: {name} must be a whole number >= 1, got {value!r}")
    cap = limits()
    for name, value in sizes.items():
        which = "devices" if name == "devices" else "size"
        if value > getattr(cap, which):
            raise UnsupportedSize(f"{family}: {cap.refusal(which, value, name)}")
    if "devices" in sizes and "microbatches" in sizes:
        least = 2 * sizes["devices"] * sizes["microbatches"] * sizes.get("chunks", 1)
        if least > cap.actions:
            raise UnsupportedSize(f"{family}: {sizes['devices']} devices and {sizes['microbatches']} "
                                  f"microbatches make at least {least:,} actions, {cap.over('actions')}")


def certified(family: str, devices: int, microbatches: int, *, chunks: int | None = None,
              group_size: int | None = None, max_inflight: int | None = None) -> list[list[Action]] | None:
    """Every device's order as the family's all-sizes certificate gives it (its positions and
    actions, :func:`schedverify.certificates.order.rows`, checked as a bijection while it is
    built), or None when no certificate covers these sizes and options.  The generators of
    the certified families return this, so what ``schedverify prove`` proves about the
    certificate is about the schedule the user gets (docs/proofs.md section 4)."""
    from ..certificates import covering

    source = covering(family, devices, microbatches, chunks, group_size, max_inflight)
    return None if source is None else source.rows(devices, microbatches)


def phases(
    forwards: Sequence[Work],
    backwards: Sequence[Work],
    warmup: int,
    *,
    w_lag: int | None = None,
) -> list[Action]:
    """One device's order in the warm-up / steady / cool-down pattern of 1F1B (Megatron-LM).

    ``forwards`` and ``backwards`` are the device's (stage, microbatch) pairs in the order it
    runs their forwards and backwards.  The device runs ``warmup`` forwards, then alternates
    one forward and one backward until the forwards run out, then the remaining backwards.

    With ``w_lag`` None each backward is one full ``B``.  Otherwise it is split (Zero
    Bubble): the input-gradient ``I`` runs where ``B`` would, and the weight-gradient ``W`` of
    the backward ``w_lag`` positions earlier runs right after it; the last ``w_lag`` ``W``
    run at the end.  So ``w_lag`` = 0 is 1F1B with ``B`` cut in two, and every unit of lag
    keeps one more microbatch's activations alive in exchange for filling the tail.
    """
    if len(forwards) != len(backwards):
        raise ValueError("phases: one backward per forward")
    n = len(forwards)
    warmup = min(warmup, n)
    row = [Action(s, F, i) for s, i in forwards[:warmup]]
    weights = 0

    def backward(k: int) -> None:
        nonlocal weights
        s, i = backwards[k]
        if w_lag is None:
            row.append(Action(s, B, i))
            return
        row.append(Action(s, I, i))
        if k >= w_lag:
            ws, wi = backwards[weights]
            row.append(Action(ws, W, wi))
            weights += 1

    for k in range(n - warmup):
        s, i = forwards[warmup + k]
        row.append(Action(s, F, i))
        backward(k)
    for k in range(n - warmup, n):
        backward(k)
    if w_lag is not None:
        row += [Action(s, W, i) for s, i in backwards[weights:]]
    return row


def megatron_schedule_table(microbatches: int, chunks: int, group_size: int) -> list[tuple[int, int]]:
    """Megatron-LM's ``get_schedule_table``: the (microbatch, chunk) of each virtual microbatch.

    Microbatches go in groups of ``group_size``; each group runs through chunk 0, then chunk
    1, ...; the last group holds what is left.  For ``M=5, chunks=2, group=3``:
    ``(0,0) (1,0) (2,0) (0,1) (1,1) (2,1) (3,0) (4,0) (3,1) (4,1)``.
    """
    table = []
    for first in range(0, microbatches, group_size):
        group = range(first, min(first + group_size, microbatches))
        table += [(i, c) for c in range(chunks) for i in group]
    return table


def megatron_group(family: str, devices: int, microbatches: int, group_size: int | None) -> int:
    """The microbatch group size (default ``devices``), refused as Megatron-LM refuses it:
    ``devices <= group <= microbatches`` and ``microbatches % group`` 0 or ``>= devices``."""
    group = devices if group_size is None else group_size
    positive(family, group_size=group)
    require(devices <= group <= microbatches, family,
            f"the microbatch group size must be between devices and microbatches "
            f"(Megatron: microbatch_group_size_per_vp_stage in [PP, M]); got group size {group} "
            f"with {devices} devices and {microbatches} microbatches")
    rest = microbatches % group
    require(not 0 < rest < devices, family,
            f"microbatches % group size must be 0 or at least devices (Megatron's rule against "
            f"dependency bubbles); got {microbatches} % {group} = {rest} with {devices} devices")
    return group


def looped_rows(devices: int, microbatches: int, chunks: int, group: int, warmup, w_lag=None):
    """Every device's order for a loop placement (stage ``c*D + d`` on device ``d``) in the
    phase pattern, forwards in Megatron's table order and backwards in the same order with
    the chunks reversed.  ``warmup(d)`` and ``w_lag(d)`` give each device's counts."""
    table = megatron_schedule_table(microbatches, chunks, group)
    rows = []
    for d in range(devices):
        forwards = [(c * devices + d, i) for i, c in table]
        backwards = [((chunks - 1 - c) * devices + d, i) for i, c in table]
        rows.append(phases(forwards, backwards, warmup(d), w_lag=None if w_lag is None else w_lag(d)))
    return rows


def assemble(
    name: str,
    order: Sequence[Sequence[Action | None]],
    *,
    stages: int,
    microbatches: int,
    placement: PlacementSpec | Placement = "loop",
    metadata: dict | None = None,
) -> Schedule:
    """A fresh Schedule; ``metadata`` records the family and its parameters."""
    devices = len(order)
    if not isinstance(placement, Placement):
        placement = Placement.of(placement, devices, stages)
    return Schedule(
        devices, stages, microbatches, tuple(tuple(row) for row in order), placement, name,
        metadata=dict(metadata or {}),
    )
