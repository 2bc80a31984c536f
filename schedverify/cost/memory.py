"""Activation memory and in-flight microbatches per device (docs/spec.md section 5).

Memory on a device changes only through that device's own actions, which run one at a
time, so peaks follow from the order alone.  Each action allocates at its start (a forward:
``a_s``) and frees at its end (``B``: ``a_s``; ``I``: ``(1-w) a_s``; ``W``: ``w a_s``; an
overlapped F&B does both).  So the memory while action ``i`` runs is
``before(i) + alloc(i)``, and after it ``before(i) + alloc(i) - free(i)``: a running sum,
computed with ``itertools.accumulate`` rather than a Python loop.  The in-flight count is
the same sum with ``F`` counting 1 and the pair's last backward (``B``, or ``W`` when
split) counting -1.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from itertools import accumulate, compress, repeat
from operator import add, gt, sub

from .. import _accel
from ..graph import KIND_CODE, Graph
from ..model import SEND_B, SEND_F, B, F, I, W, MemoryModel, RuleMap, per_stage


@dataclass
class MemoryResult:
    static: list[float]
    peak_inflight: list[int]
    peak_memory: list[float]  # static + peak activation
    peak_at: list[int | None]  # action index where the peak is first reached
    over_limit: list[tuple[int, float] | None]  # first (action index, memory) above the limit
    series: list[list[tuple[float, float]]] | None = None  # (time, memory) steps, when timed


def static_memory(g: Graph, model: MemoryModel) -> list[float]:
    """Per device, the static memory of every stage it holds (docs/spec.md 5), added stage by
    stage; one amount for every stage over a placement of more than ``model.DENSE_MAX``
    stages (a few actions can name a huge stage) is that amount times the stages held."""
    schedule = g.schedule
    out = [0.0] * schedule.devices
    if not model.static:
        return out
    placement = schedule.placement
    if not isinstance(model.static, tuple) and any(isinstance(r, RuleMap) for r in placement.routes):
        return [0.0 + model.static * held for held in placement.stages_held(schedule.devices)]
    for s in range(schedule.stages):
        for d in placement.devices_of_stage(s):
            out[d] += per_stage(model.static, s)
    return out


def _effects(model: MemoryModel, kind: str, activation: float) -> tuple[float, float, int, int]:
    """(allocated at start, freed at end, in-flight +1 at start, in-flight -1 at end)."""
    if kind == F:
        return activation, 0, 1, 0
    if kind == B:
        return 0, activation, 0, 1
    if kind == I:
        return 0, (1 - model.w) * activation, 0, 0
    if kind == W:
        return 0, model.w * activation, 0, 1
    return 0, 0, 0, 0


def _effect_tables(model: MemoryModel) -> tuple[list, list, list, list]:
    """For the kernel: alloc and free as flat tables [code * S + stage] over the kind codes
    (one column, S = 1, unless the activation is given per stage), and the in-flight changes
    per code."""
    per = model.activation if isinstance(model.activation, tuple) else (model.activation,)
    kinds = sorted(KIND_CODE, key=KIND_CODE.__getitem__)
    rows = [[_effects(model, k, a) for a in per] for k in kinds]
    alloc = [e[0] for row in rows for e in row]
    free = [e[1] for row in rows for e in row]
    return alloc, free, [row[0][2] for row in rows], [row[0][3] for row in rows]


def per_action_effects(g: Graph, model: MemoryModel) -> list[list]:
    """Four columns over the actions: alloc, free, in-flight start, in-flight end."""
    S = g.schedule.stages
    alloc, free, n_in, n_out = _effect_tables(model)
    width = len(alloc) // len(n_in)  # 1, or S when the activation is per stage
    # index -1 (code -1: an overlap, bookkeeping, a malformed action) reads the 0 appended
    # to each table, and is patched below
    at = g.code if width == 1 else [c * width + s if c >= 0 else -1 for c, s in zip(g.code, g.stage)]
    cols = [list(map((alloc + [0]).__getitem__, at)), list(map((free + [0]).__getitem__, at)),
            list(map((n_in + [0]).__getitem__, g.code)), list(map((n_out + [0]).__getitem__, g.code))]
    uncoded = g.uncoded_leaves
    acts = g.acts if uncoded else ()  # read once, and only when needed: a lazy field
    for i in uncoded:
        total: list[float] = [0, 0, 0, 0]
        for x in acts[i].leaves():
            if x.kind in (F, B, I, W) and type(x.stage) is int and 0 <= x.stage < S:
                for k, v in enumerate(_effects(model, x.kind, per_stage(model.activation, x.stage))):
                    total[k] += v
        for k in range(4):
            cols[k][i] = total[k]
    return cols


def message_effects(g: Graph, model: MemoryModel, alloc: list, free: list, retired_by: Mapping[int, int]) -> None:
    """Add what pending sends hold (docs/spec.md 9.2) to the ``alloc`` and ``free`` columns:
    each SEND allocates its stage's ``message`` at its start, and the WAIT_SEND that retires
    it (``retired_by``: send -> wait) frees it at its end; a send no wait retires holds it to
    the end of the step."""
    sends = (KIND_CODE[SEND_F], KIND_CODE[SEND_B])
    for i, (c, s) in enumerate(zip(g.code, g.stage)):
        if c in sends:
            m = per_stage(model.message, s)
            alloc[i] += m
            w = retired_by.get(i)
            if w is not None:
                free[w] += m


def memory_sweep(g: Graph, model: MemoryModel, start=None, end=None, *,
                 retired_by: Mapping[int, int] | None = None) -> MemoryResult:
    """Peaks per device; with ``start``/``end`` (a timeline) also the memory-over-time steps.
    ``retired_by`` (send -> its wait; under PyTorch's runtime only): count what pending sends
    hold (``model.message``)."""
    static = static_memory(g, model)
    limit = model.limit
    kernel = _accel.kernel
    messages = retired_by is not None and bool(model.message)
    if kernel is not None and start is None and not messages:
        peaks = kernel.memory_plain(g.starts, g.code, g.stage, *_effect_tables(model),
                                    static, limit, not g.uncoded_leaves)
        if peaks is not None:  # one kind code each, or bookkeeping (no effect) where told
            return MemoryResult(static, *peaks)
    alloc, free, n_in, n_out = per_action_effects(g, model)
    if messages:
        assert retired_by is not None  # messages: given
        message_effects(g, model, alloc, free, retired_by)
    peaks_n, peaks_m, peak_at, over = [], [], [], []
    series: list[list[tuple[float, float]]] | None = [] if start is not None else None
    for d in range(g.schedule.devices):
        lo, hi = g.starts[d], g.starts[d + 1]
        a, f = alloc[lo:hi], free[lo:hi]
        before = list(accumulate(map(sub, a, f), initial=static[d]))  # memory before each action
        during = list(map(add, before, a))
        peak = max(during, default=static[d])
        peak_m = max(peak, static[d])
        peaks_m.append(peak_m)
        peak_at.append(lo + during.index(peak) if during and peak > static[d] else None)
        n_before = accumulate(map(sub, n_in[lo:hi], n_out[lo:hi]), initial=0)
        peaks_n.append(max(map(add, n_before, n_in[lo:hi]), default=0))
        first = None
        if limit is not None:
            k = next(compress(range(len(during)), map(gt, during, repeat(limit + 1e-9))), None)
            if k is not None:
                first = (lo + k, during[k])
        over.append(first)
        if series is not None:
            steps = [(0.0, static[d])]
            for k in range(hi - lo):
                steps.append((start[lo + k], during[k]))
                steps.append((end[lo + k], before[k + 1]))
            series.append(steps)
    return MemoryResult(static, peaks_n, peaks_m, peak_at, over, series)
