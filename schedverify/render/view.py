"""What every picture of a schedule shows, computed once: the check's Report, the timeline
(when the schedule can run), the actions a violation names and the deadlock cycles.

The text, image and trace renderers all draw a :class:`View`, so the three pictures agree
with each other and with ``schedverify check``.  A schedule that deadlocks has no timing;
its view is *untimed* and the renderers lay it out by position in each device's order
instead, and say so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..cost.timeline import Timeline, run_timeline
from ..diagnostics import (COMM_STREAM_DEADLOCK, DEADLOCK, RENDEZVOUS_DEADLOCK,
                           RUNS_BEFORE_DEPENDENCY, Report)
from ..graph import Graph, compile_graph
from ..runtime import RUNTIME_SEMANTICS
from ..model import (
    B,
    BOOKKEEPING_KINDS,
    COMM_KINDS,
    OVERLAP_F_B,
    F,
    I,
    W,
    Action,
    Schedule,
    resolve_costs,
    resolve_memory,
)

#: Codes after which the ASAP sweep's times mean nothing: some device waits forever.
NO_TIMING_CODES = frozenset({DEADLOCK.code, RENDEZVOUS_DEADLOCK.code, COMM_STREAM_DEADLOCK.code,
                             RUNS_BEFORE_DEPENDENCY.code})

#: Category of each action kind for pictures and traces.  ``I`` is computation: PyTorch's
#: ``_dump_chrometrace`` tests ``computation_type in (F, B, W)`` and so files the
#: input-gradient backward (and overlapped F+B) under "communication"; they compute.
COMPUTATION = "computation"
COMMUNICATION = "communication"
BOOKKEEPING = "bookkeeping"


def category(action: Action) -> str:
    if action.kind in COMM_KINDS:
        return COMMUNICATION
    if action.kind in BOOKKEEPING_KINDS:
        return BOOKKEEPING
    return COMPUTATION


def kind_key(action: Action) -> str:
    """The drawing class of an action: F, B, I, W, OVERLAP_F_B, SEND, RECV or bookkeeping."""
    k = action.kind
    if k in (F, B, I, W, OVERLAP_F_B):
        return k
    if k in COMM_KINDS:
        return "SEND" if k.startswith("SEND") else "RECV"
    return "BOOKKEEPING"


def microbatch_of(action: Action) -> int | None:
    """The microbatch an action works on (an overlap's forward microbatch)."""
    if action.sub is not None:
        return action.sub[0].microbatch
    return action.microbatch


def stage_of(action: Action) -> int | None:
    if action.sub is not None:
        return action.sub[0].stage
    return action.stage


@dataclass
class View:
    """A schedule ready to draw.

    ``timed`` says whether ``start``/``end`` are the simulated times (docs/spec.md section 4);
    when False they are positions in the device's order (each action one unit wide) and
    ``untimed_reason`` says why.  ``marked`` holds the indices (into ``graph.acts``) of the
    actions some violation names; ``cycles`` the deadlock cycles as (stuck action, awaited
    action) index pairs; ``missing`` the names of actions a violation says are absent.

    Under PyTorch's runtime semantics (docs/spec.md 8) ``runtime`` is the runtime model's run:
    a SEND/RECV's times are then its ready and done times, on a stream of its own beside the
    compute, so pictures draw it as an instant at its ready time (``end`` gives it no width)
    and the trace draws it on its stream with its real span.
    """

    schedule: Schedule
    report: Report
    graph: Graph
    timeline: Timeline
    timed: bool
    untimed_reason: str = ""
    marked: dict[int, list[str]] = field(default_factory=dict)  # index -> violation codes
    cycles: list[list[tuple[int, int]]] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    critical: list[int] = field(default_factory=list)
    runtime: Any = None
    _held: list[int] = field(default_factory=list, repr=False)  # stages per device, made on first use

    @property
    def start(self) -> list[float]:
        return self.timeline.start if self.timed else [float(p) for p in self.graph.pos]

    @property
    def end(self) -> list[float]:
        if self.timed:
            if self.runtime is not None:  # a SEND/RECV is an instant of the compute lane
                return [s if c else e for s, e, c in zip(self.timeline.start, self.timeline.end,
                                                          self.runtime.is_comm)]
            return self.timeline.end
        return [p + 1.0 for p in self.graph.pos]

    @property
    def span(self) -> float:
        """The makespan (timed) or the longest device order (untimed)."""
        if self.timed:
            return self.timeline.makespan
        return float(max((len(r) for r in self.schedule.order), default=0))

    def stages_on(self, d: int) -> frozenset[int]:
        """The stages that the placement (any route) puts on device ``d``."""
        return frozenset(s for route in self.schedule.placement.routes
                         for s, dev in enumerate(route) if dev == d)

    def needs_stage_label(self, i: int) -> bool:
        """Whether action ``i``'s label must name its stage: its device holds several
        stages, or the action is not one of its device's stages (misplaced).  Asked of the
        placement, in time that does not grow with its number of stages (a few actions can
        name stage 9,999,999)."""
        d = self.graph.dev[i]
        placement, S = self.schedule.placement, self.schedule.stages
        if not self._held:
            self._held.extend(placement.stages_held(self.schedule.devices))
        if self._held[d] > 1:
            return True
        return not all(type(x.stage) is int and 0 <= x.stage < S and d in placement.devices_of_stage(x.stage)
                       for x in self.graph.acts[i].leaves())

    def device_range(self, d: int) -> range:
        return range(self.graph.starts[d], self.graph.starts[d + 1])

    def idle(self, d: int) -> list[tuple[float, float]]:
        """The bubbles of device ``d``: (start, end) of each idle gap up to the makespan."""
        if not self.timed:
            return []
        out = []
        t = 0.0
        start, end = self.start, self.end
        tol = 1e-9 * max(1.0, self.span)
        for i in self.device_range(d):
            if start[i] > t + tol:
                out.append((t, start[i]))
            t = max(t, end[i])
        if self.span > t + tol:
            out.append((t, self.span))
        return out


def build_view(schedule: Schedule, *, costs=None, memory=None, memory_limit=None,
               comm_semantics=None, nccl=None, torch=None, p2p=None, runtime_options=None,
               framework=None, report: Report | None = None) -> View:
    """Check ``schedule`` and lay it out (``torch``, ``framework``, ``p2p``, ``runtime_options``: the
    runtime, as for :func:`schedverify.check`).  Never raises because the schedule is
    invalid."""
    from ..check import check

    if report is None:
        report = check(schedule, costs=costs, memory=memory, memory_limit=memory_limit,
                       comm_semantics=comm_semantics, nccl=nccl, torch=torch, p2p=p2p,
                       runtime_options=runtime_options, framework=framework)
    sem = report.comm_semantics or "eager"
    if sem in RUNTIME_SEMANTICS:
        sem = "eager"  # the layout's order-only timeline; the report holds the runtime's hangs
    if report.timeline is not None:
        tl = report.timeline
        graph = tl.graph
        cycles: list[list[tuple[int, int]]] = []
    else:
        graph = compile_graph(schedule, comm_semantics=sem)
        tl, result = run_timeline(graph, resolve_costs(schedule, costs),
                                  resolve_memory(schedule, memory, memory_limit))
        cycles = [c for c in result.cycles if c]
    codes = {v.code.code for v in report.violations}
    stopping = sorted(codes & NO_TIMING_CODES)
    timed = report.timeline is not None and not stopping
    reason = ""
    if not timed:
        if RUNS_BEFORE_DEPENDENCY.code in codes and not cycles:
            reason = (f"{RUNS_BEFORE_DEPENDENCY.code} {RUNS_BEFORE_DEPENDENCY.slug}: a device "
                      "waits for an action later in its own order, so the schedule never ends")
        else:
            code = next((c for c in (RENDEZVOUS_DEADLOCK, COMM_STREAM_DEADLOCK) if c.code in codes), DEADLOCK)
            reason = f"{code.code} {code.slug}: the schedule deadlocks, so it has no timing"
    index = {(graph.dev[i], graph.pos[i]): i for i in range(graph.n)}
    marked: dict[int, list[str]] = {}
    missing: list[str] = []
    for v in report.violations:
        for loc in v.locations:
            if loc.position is None:
                missing.append(loc.action)
                continue
            i = index.get((loc.device, loc.position))
            if i is not None and v.code.code not in marked.setdefault(i, []):
                marked[i].append(v.code.code)
    critical = tl.critical_path() if timed else []
    return View(schedule, report, graph, tl, timed, reason, marked, cycles, missing, critical,
                report.runtime)
