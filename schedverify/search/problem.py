"""The search problem: sizes, placement, backward split, costs and memory model, and the
whole-number units every bound and encoding works in.

Pure Python (no Z3): :mod:`.bounds` and :mod:`.search` both build on it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction

from ..errors import UsageError
from ..model import B, F, I, W, Costs, MemoryModel, Placement, per_stage

@dataclass(frozen=True)
class Problem:
    """What is searched: sizes, placement, backward split, costs and memory model."""

    devices: int
    microbatches: int
    chunks: int = 1
    placement: str = "loop"
    split: bool = False
    costs: Costs = field(default_factory=Costs)
    memory: MemoryModel = field(default_factory=MemoryModel)

    @property
    def stages(self) -> int:
        return self.devices * self.chunks

    @property
    def kinds(self) -> tuple[str, ...]:
        return (F, I, W) if self.split else (F, B)

    def placement_obj(self) -> Placement:
        return Placement.of(self.placement, self.devices, self.stages)

    def validate(self) -> None:
        for name in ("devices", "microbatches", "chunks"):
            v = getattr(self, name)
            if type(v) is not int or v < 1:
                raise UsageError(f"search: {name} must be a whole number >= 1, got {v!r}")
        if self.placement not in ("loop", "v"):
            raise UsageError(f"search: placement must be 'loop' or 'v', got {self.placement!r}")
        for k in self.kinds + ("comm",):
            v = getattr(self.costs, k)
            if isinstance(v, tuple) and len(v) != self.stages:
                raise UsageError(f"search: cost {k} has {len(v)} per-stage values, but there are "
                                 f"{self.stages} stages")
        for name in ("activation", "static"):
            v = getattr(self.memory, name)
            if isinstance(v, tuple) and len(v) != self.stages:
                raise UsageError(f"search: memory {name} has {len(v)} per-stage values, but there "
                                 f"are {self.stages} stages")
        if not 0 <= self.memory.w <= 1:
            raise UsageError(f"search: memory share w must be within 0..1, got {self.memory.w!r}")


def frac(x) -> Fraction:
    return Fraction(x).limit_denominator(10**6)


def _lcm_den(values) -> int:
    out = 1
    for v in values:
        out = out * v.denominator // math.gcd(out, v.denominator)
    return out


class Units:
    """Whole-number time and memory units: every duration and memory amount times a scale."""

    def __init__(self, p: Problem):
        S = p.stages
        self.dur = {(s, k): frac(per_stage(getattr(p.costs, k), s)) for s in range(S) for k in p.kinds}
        self.comm = frac(p.costs.comm)
        self.tscale = _lcm_den(list(self.dur.values()) + [self.comm])
        self.idur = {key: int(v * self.tscale) for key, v in self.dur.items()}
        self.icomm = int(self.comm * self.tscale)
        m = p.memory
        w = frac(m.w)
        act = [frac(per_stage(m.activation, s)) for s in range(S)]
        alloc = {s: act[s] for s in range(S)}
        free = {}
        for s in range(S):
            if p.split:
                free[(s, I)] = (1 - w) * act[s]
                free[(s, W)] = w * act[s]
            else:
                free[(s, B)] = act[s]
        place = p.placement_obj().routes[0]
        static = [Fraction(0)] * p.devices
        for s in range(S):
            static[place[s]] += frac(per_stage(m.static, s))
        limit = None if m.limit is None else frac(m.limit)
        vals = list(alloc.values()) + list(free.values()) + static + ([limit] if limit is not None else [])
        self.mscale = _lcm_den(vals)
        self.alloc = {s: int(v * self.mscale) for s, v in alloc.items()}
        self.free = {key: int(v * self.mscale) for key, v in free.items()}
        self.static = [int(v * self.mscale) for v in static]
        self.limit = None if limit is None else math.floor(limit * self.mscale)

    def time(self, scaled: int) -> float | int:
        v = Fraction(scaled, self.tscale)
        return int(v) if v.denominator == 1 else float(v)

    def mem(self, scaled: int) -> float | int:
        v = Fraction(scaled, self.mscale)
        return int(v) if v.denominator == 1 else float(v)




def make_problem(devices: int, microbatches: int, *, chunks: int = 1, placement: str = "loop",
                 split_backward: bool = False, costs=None, memory=None,
                 memory_limit: float | None = None, comm_latency: float | None = None) -> Problem:
    c = costs if isinstance(costs, Costs) else Costs(**dict(costs or {}))
    if comm_latency is not None:
        c = c.with_values(comm=comm_latency)
    m = memory if isinstance(memory, MemoryModel) else MemoryModel(**dict(memory or {}))
    if memory_limit is not None:
        from dataclasses import replace

        m = replace(m, limit=memory_limit)
    p = Problem(devices, microbatches, chunks, placement, split_backward, c, m)
    p.validate()
    return p
