"""PyTorch's schedule CSV, as ``_dump_csv`` writes it (compute-only or compute+comms).

One row per rank, one action per cell, an empty cell is an idle slot.  Rows may differ in
length (PyTorch writes each rank's list as it is).  The CSV holds only the order, so sizes
and placement are inferred, and any of them can be given instead.

``grammar="torch-legacy"`` reads a file written in PyTorch's action grammar before 2.6
(:func:`schedverify.io.actions.legacy_rows` says exactly what changed).
"""

from __future__ import annotations

import csv
import io
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from operator import attrgetter
from typing import Any

from ..errors import InputError
from ..limits import limits
from ..model import (Action, Placement, PlacementSpec, RuleMap, Schedule, as_schedule, infer_sizes, leaf_rows,
                     rule_map, stage_devices)
from .. import _accel
from ..grammar import COLUMN_KINDS, INDEX_TYPECODE, PlainRows
from .actions import CellErrors, check_grammar, legacy_rows, parse_row, scan_csv
from .files import as_text
from .jsonfmt import refuse_huge_index


def loads(
    text: str,
    source: str = "<string>",
    *,
    devices: int | None = None,
    stages: int | None = None,
    microbatches: int | None = None,
    placement: PlacementSpec | None = None,
    grammar: str = "torch",
) -> Schedule:
    check_grammar(grammar)
    cap = limits()
    for key, value in (("devices", devices), ("stages", stages), ("microbatches", microbatches)):
        if value is None:
            continue
        if type(value) is not int or value < 1:
            raise InputError(f"must be a whole number of at least 1, got {value!r}", source=source,
                             where=key)
        cap.refuse("devices" if key == "devices" else "size", value, key, source=source, where=key)
    text = as_text(text, source)
    if not text or text.isspace():  # (text.strip() would copy a large file to say so)
        raise InputError("the file is empty", source=source)
    # every cell plain: the kernel reads the text into columns in one pass, as csv.reader
    # and parse_row would read it; over a cap, the reader below refuses it in its words
    columns = scan_csv(text) if grammar == "torch" else None
    if columns is not None and (len(columns.lengths) > cap.devices or columns.n > cap.actions):
        columns = None
    order: Any
    if columns is not None:
        order, rows_read = columns, len(columns.lengths)
    else:
        order = _read_order(text, source, cap, grammar)
        rows_read = len(order)
    if devices is None:
        devices = rows_read
    elif devices < rows_read:
        raise InputError(f"the file has {rows_read} rows (one per device) but devices is {devices}",
                         source=source)
    if columns is not None:
        order = replace(columns, lengths=columns.lengths + (0,) * (devices - rows_read))
    else:
        order += [()] * (devices - rows_read)
    stages, microbatches = infer_sizes(order, devices, stages, microbatches)
    if max(stages, microbatches) > cap.size:
        refuse_huge_index(order.make() if columns is not None else order, source,
                          lambda d, p: f"row {d + 1}, column {p + 1}")
    if placement is not None:
        try:
            pl = Placement.of(placement, devices, stages)
        except ValueError as e:
            raise InputError(str(e), source=source, where="placement") from None
    else:
        pl = infer_placement(order, devices, stages, microbatches)
    if columns is None:
        order = tuple(order)
    # a PyTorch CSV is what PyTorch's runtime executes: by default, as it does over NCCL
    return Schedule(devices, stages, microbatches, order, pl, comm_semantics="torch-nccl",
                    metadata={"source_format": "pytorch-csv"})


def _read_order(text: str, source: str, cap, grammar: str) -> list[tuple[Action | None, ...]]:
    """The rows of Actions (None: an idle slot) as ``csv.reader`` reads the text, every bad
    cell named (row, column and text) in one :class:`InputError`."""
    rows = [list(map(str.strip, row)) for row in _read_rows(text, source, cap)]
    if grammar == "torch-legacy":
        rows = legacy_rows(rows, source)
    order = []
    errors = CellErrors(source, "cells")
    for d, cells in enumerate(rows):
        out = _parse_plain(cells)
        if out is None:
            out = errors.parse(cells, lambda p, d=d: f"row {d + 1}, column {p + 1}")
        order.append(tuple(out))
    errors.raise_any()
    return order


def _read_rows(text: str, source: str, cap) -> list[list[str]]:
    """The CSV's rows, refused as soon as they pass the caps on devices (rows) or actions."""
    rows: list[list[str]] = []
    cells = 0
    try:
        for row in csv.reader(io.StringIO(text, newline=""), strict=True):
            cells += len(row)
            if cells > cap.actions:
                raise InputError(cap.exceeded("actions", "cells (actions)"), source=source)
            if len(rows) == cap.devices:
                raise InputError(cap.exceeded("devices", "rows (devices)"), source=source)
            rows.append(row)
    except csv.Error as e:
        raise InputError(f"not valid CSV: {e}", source=source) from None
    return rows


def _parse_plain(cells: list[str]) -> list | None:
    """A row of plain actions and empty cells (idle slots) in bulk, or None."""
    if "" not in cells:
        return parse_row(cells)
    keep = [k for k, c in enumerate(cells) if c]
    fast = parse_row([cells[k] for k in keep])
    if fast is None:
        return None
    out: list[Action | None] = [None] * len(cells)
    for k, a in zip(keep, fast):
        out[k] = a
    return out


def _uniform_placement(order, devices: int, stages: int) -> PlacementSpec | None:
    """``"loop"`` or ``"v"`` when every action (with every stage appearing, for ``"v"``)
    sits where that placement puts it: what :func:`infer_placement` would conclude, found
    with one set of stages per row instead of a vote per action."""
    per_row = _stage_sets(order)
    everything = set().union(*per_row)
    if not all(type(s) is int and 0 <= s < stages for s in everything):
        return None  # None stages (malformed) or out of range: let the vote handle them
    for spec in ("loop", "v"):
        where = stage_devices(spec, devices, stages)
        if all(where[s] == d for d, row in enumerate(per_row) for s in row) and (
                spec == "loop" or len(everything) == stages):
            return spec
    return None


def _stage_sets(order) -> list[set]:
    """Each row's set of stages (of its leaves), read off the columns when given so."""
    if isinstance(order, PlainRows):  # a view of the int32 column: its slices copy nothing
        stages, out, i = memoryview(order.stages).cast(INDEX_TYPECODE), [], 0
        for length in order.lengths:
            out.append(set(stages[i:i + length]))
            i += length
        return out
    return [set(map(_STAGE, acts)) for acts in leaf_rows(order)]


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
    return _vote_placement(order.make() if isinstance(order, PlainRows) else order, devices, stages,
                           microbatches)


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
    # a stage without a vote goes where "loop" puts it: the maps are made as the rule and the
    # stages that differ from it (model.rule_map), so a few actions at stage 9,999,999 cost
    # no more than a few at stage 9
    voted = {s: v.most_common(1)[0][0] for s, v in votes.items()}
    majority = rule_map("loop", devices, stages, voted)

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
        routes = [rule_map("loop", devices, stages, {**voted, **g}) for g in groups]
        mb_route = rule_map("loop", 1, microbatches, route_of)  # route 0 unless seen on route 1
        return Placement.bidirectional([_name(r, devices, stages) for r in routes], mb_route, devices, stages)
    return Placement.of(_name(majority, devices, stages), devices, stages)


def _name(mapping: Sequence[int], devices: int, stages: int) -> PlacementSpec:
    for spec in ("loop", "v"):
        if stage_devices(spec, devices, stages) == mapping:
            return spec
    return mapping if isinstance(mapping, RuleMap) else list(mapping)


def dumps(schedule: Schedule) -> str:
    """PyTorch's CSV: one row per device, '' for idle slots."""
    as_schedule(schedule, "dumps_csv")
    kernel, cols = _accel.kernel, schedule.columns
    if kernel is not None and cols is not None:  # rows of plain actions, no idle slot: no Action made
        text: str | None = kernel.format_csv(cols.codes, cols.stages, cols.mbs, cols.lengths, COLUMN_KINDS)
        if text is not None:
            return text
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    for row in schedule.order:
        writer.writerow(["" if a is None else str(a) for a in row])
    return buf.getvalue()
