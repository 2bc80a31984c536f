"""Activation memory and in-flight microbatches per device (SPEC.md section 5).

Memory on a device changes only through that device's own actions, which run one at a
time, so peaks follow from the order alone: an ``F`` allocates at its start (the moment a
peak is measured), ``B``/``I``/``W`` free at their end.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..graph import Graph
from ..model import B, F, I, W, MemoryModel, per_stage


@dataclass
class MemoryResult:
    static: list[float]
    peak_inflight: list[int]
    peak_memory: list[float]  # static + peak activation
    peak_at: list[int | None]  # action index where the peak is first reached
    over_limit: list[tuple[int, float] | None]  # first (action index, memory) above the limit
    series: list[list[tuple[float, float]]] | None = None  # (time, memory) steps, when timed


def static_memory(g: Graph, model: MemoryModel) -> list[float]:
    D = g.schedule.devices
    out = [0.0] * D
    if model.static:
        for s in range(g.schedule.stages):
            for d in g.schedule.placement.devices_of_stage(s):
                out[d] += per_stage(model.static, s)
    return out


def memory_sweep(g: Graph, model: MemoryModel, start=None, end=None) -> MemoryResult:
    """Peaks per device; with ``start``/``end`` (a timeline) also the memory-over-time steps."""
    S = g.schedule.stages
    act = [per_stage(model.activation, s) for s in range(S)]
    w = model.w
    limit = model.limit
    static = static_memory(g, model)
    peaks_n, peaks_m, peak_at, over = [], [], [], []
    series = [] if start is not None else None
    acts, starts = g.acts, g.starts
    eps = 1e-9
    for d in range(len(starts) - 1):
        cur = static[d]
        n = peak_n = 0
        peak = cur
        at = None
        first_over = None
        steps = [(0.0, cur)] if series is not None else None
        for i in range(starts[d], starts[d + 1]):
            a = acts[i]
            for x in (a.sub if a.sub is not None else (a,)):
                k = x.kind
                s = x.stage
                if k == F and type(s) is int and 0 <= s < S:
                    cur += act[s]
                    n += 1
            if cur > peak:
                peak, at = cur, i
            if n > peak_n:
                peak_n = n
            if limit is not None and first_over is None and cur > limit + eps:
                first_over = (i, cur)
            if steps is not None:
                steps.append((start[i], cur))
            for x in (a.sub if a.sub is not None else (a,)):
                k = x.kind
                s = x.stage
                if type(s) is not int or not 0 <= s < S:
                    continue
                if k == B:
                    cur -= act[s]
                    n -= 1
                elif k == I:
                    cur -= (1 - w) * act[s]
                elif k == W:
                    cur -= w * act[s]
                    n -= 1
            if steps is not None:
                steps.append((end[i], cur))
        peaks_n.append(peak_n)
        peaks_m.append(peak)
        peak_at.append(at)
        over.append(first_over)
        if series is not None:
            series.append(steps)
    return MemoryResult(static, peaks_n, peaks_m, peak_at, over, series)
