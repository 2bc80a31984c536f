"""PyTorch's schedule CSV, as ``_dump_csv`` writes it (compute-only or compute+comms).

One row per rank, one action per cell, an empty cell is an idle slot.  Rows may differ in
length (PyTorch writes each rank's list as it is).  The CSV holds only the order, so sizes
and placement are inferred, and any of them can be given instead.
"""

from __future__ import annotations

import csv
import io
from collections import Counter
from operator import attrgetter

from ..errors import InputError
from ..model import Placement, PlacementSpec, Schedule, stage_devices
from .actions import ActionSyntaxError, infer_sizes, leaf_rows, parse_action, parse_row
from .jsonfmt import MAX_REPORTED, MAX_SIZE, refuse_huge_index


def loads(
    text: str,
    source: str = "<string>",
    *,
    devices: int | None = None,
    stages: int | None = None,
    microbatches: int | None = None,
    placement: PlacementSpec | None = None,
) -> Schedule:
    if "\x00" in text:
        raise InputError("not a text file (it contains NUL bytes)", source=source)
    if not text.strip():
        raise InputError("the file is empty", source=source)
    try:
        rows = list(csv.reader(io.StringIO(text, newline=""), strict=True))
    except csv.Error as e:
        raise InputError(f"not valid CSV: {e}", source=source) from None
    order, errors = [], []
    for d, row in enumerate(rows):
        cells = list(map(str.strip, row))
        out = _parse_plain(cells)
        if out is None:
            out = []
            for p, cell in enumerate(cells):
                if not cell:
                    out.append(None)
                    continue
                try:
                    out.append(parse_action(cell))
                except ActionSyntaxError as e:
                    errors.append(f"row {d + 1}, column {p + 1}: {e}")
                    out.append(None)
        order.append(tuple(out))
    if errors:
        if len(errors) == 1:
            where, _, msg = errors[0].partition(": ")
            raise InputError(msg, source=source, where=where)
        more = len(errors) - MAX_REPORTED
        lines = errors[:MAX_REPORTED] + ([f"... and {more} more"] if more > 0 else [])
        raise InputError(f"{len(errors)} cells do not parse:\n  " + "\n  ".join(lines), source=source)
    for key, value in (("devices", devices), ("stages", stages), ("microbatches", microbatches)):
        if value is not None and not (type(value) is int and 1 <= value <= MAX_SIZE):
            raise InputError(f"must be a whole number in 1..{MAX_SIZE}, got {value!r}", source=source,
                             where=key)
    if devices is None:
        devices = len(order)
    elif devices < len(order):
        raise InputError(f"the file has {len(order)} rows (one per device) but devices is {devices}",
                         source=source)
    order += [()] * (devices - len(order))
    stages, microbatches = infer_sizes(order, devices, stages, microbatches)
    if max(stages, microbatches, devices) > MAX_SIZE:
        refuse_huge_index(order, source, lambda d, p: f"row {d + 1}, column {p + 1}")
        raise InputError(f"{len(order)} rows is absurdly many devices (at most {MAX_SIZE})", source=source)
    if placement is not None:
        try:
            pl = Placement.of(placement, devices, stages)
        except ValueError as e:
            raise InputError(str(e), source=source, where="placement") from None
    else:
        pl = infer_placement(order, devices, stages, microbatches)
    # a PyTorch CSV is what PyTorch's runtime executes: by default, as it does over NCCL
    return Schedule(devices, stages, microbatches, tuple(order), pl, comm_semantics="torch-nccl",
                    metadata={"source_format": "pytorch-csv"})


def _parse_plain(cells: list[str]) -> list | None:
    """A row of plain actions and empty cells (idle slots) in bulk, or None."""
    if "" not in cells:
        return parse_row(cells)
    keep = [k for k, c in enumerate(cells) if c]
    fast = parse_row([cells[k] for k in keep])
    if fast is None:
        return None
    out = [None] * len(cells)
    for k, a in zip(keep, fast):
        out[k] = a
    return out


def _uniform_placement(order, devices: int, stages: int) -> PlacementSpec | None:
    """``"loop"`` or ``"v"`` when every action (with every stage appearing, for ``"v"``)
    sits where that placement puts it: what :func:`infer_placement` would conclude, found
    with one set of stages per row instead of a vote per action."""
    per_row = [set(map(_STAGE, acts)) for acts in leaf_rows(order)]
    everything = set().union(*per_row)
    if not everything <= set(range(stages)):
        return None  # None stages (malformed) or out of range: let the vote handle them
    for spec in ("loop", "v"):
        where = stage_devices(spec, devices, stages)
        if all(where[s] == d for d, row in enumerate(per_row) for s in row):
            if spec == "loop" or len(everything) == stages:
                return spec
    return None


_STAGE = attrgetter("stage")


def infer_placement(order, devices: int, stages: int, microbatches: int) -> Placement:
    """Guess the placement from where the actions sit.

    Each microbatch's stages -> devices map is read off its actions.  When all agree, the
    placement is that map (named ``loop`` or ``v`` when it is one of those); when the
    microbatches fall into two consistent groups (DualPipe, Chimera), those are the routes.
    Otherwise every stage goes to the device most of its actions use, and the checker
    reports the actions elsewhere.
    """
    uniform = _uniform_placement(order, devices, stages)
    if uniform is not None:
        return Placement.of(uniform, devices, stages)
    return _vote_placement(order, devices, stages, microbatches)


def _vote_placement(order, devices: int, stages: int, microbatches: int) -> Placement:
    # Only microbatches that have actions get a map (a dict, not a list of M dicts: M can be
    # large while the file is small); the others follow route 0.
    seen: dict[int, dict[int, int]] = {}
    votes: dict[int, Counter] = {}  # only the stages that appear: S can be large, the file small
    for d, row in enumerate(order):
        for a in row:
            if a is None:
                continue
            for x in a.leaves():
                if x.stage is None or not 0 <= x.stage < stages:
                    continue
                votes.setdefault(x.stage, Counter())[d] += 1
                if x.microbatch is not None and 0 <= x.microbatch < microbatches:
                    seen.setdefault(x.microbatch, {}).setdefault(x.stage, d)
    majority_list = [s % devices for s in range(stages)]
    for s, v in votes.items():
        majority_list[s] = v.most_common(1)[0][0]
    majority = tuple(majority_list)

    groups: list[dict[int, int]] = []
    route_of: dict[int, int] = {}
    for mb in sorted(seen):
        mapping = seen[mb]
        for k, g in enumerate(groups):
            if all(g.get(s, d) == d for s, d in mapping.items()):
                g.update(mapping)
                route_of[mb] = k
                break
        else:
            groups.append(dict(mapping))
            route_of[mb] = len(groups) - 1
    if len(groups) == 2:
        routes = [tuple(g.get(s, majority[s]) for s in range(stages)) for g in groups]
        route_of = [route_of.get(mb, 0) for mb in range(microbatches)]
        return Placement.bidirectional([_name(r, devices, stages) for r in routes], route_of, devices, stages)
    return Placement.of(_name(majority, devices, stages), devices, stages)


def _name(mapping: tuple[int, ...], devices: int, stages: int) -> PlacementSpec:
    for spec in ("loop", "v"):
        if stage_devices(spec, devices, stages) == mapping:
            return spec
    return list(mapping)


def dumps(schedule: Schedule) -> str:
    """PyTorch's CSV: one row per device, '' for idle slots."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    for row in schedule.order:
        writer.writerow(["" if a is None else str(a) for a in row])
    return buf.getvalue()
