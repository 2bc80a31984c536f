"""The timeline: start and end of every action, makespan, bubbles, critical path (docs/spec.md 4)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from itertools import islice
from typing import TYPE_CHECKING, Any, Protocol

from .. import _accel
from ..graph import CodeDurations, Graph, SweepResult, Times, durations_for, sweep
from ..lazy import LazyField, Later, given
from ..model import Costs, MemoryModel, Schedule
from .memory import MemoryResult, memory_sweep


def _num(x: float) -> float | int:
    return int(x) if isinstance(x, float) and x.is_integer() else x


@dataclass(frozen=True)
class DeviceMetrics:
    device: int
    busy: float
    idle: float | None  # None when the schedule cannot run to the end
    peak_inflight: int
    peak_memory: float
    static_memory: float

    def to_json(self) -> dict[str, Any]:
        return {"device": self.device, "busy": _num(self.busy),
                "idle": None if self.idle is None else _num(self.idle),
                "peak_inflight": self.peak_inflight, "peak_memory": _num(self.peak_memory),
                "static_memory": _num(self.static_memory)}


@dataclass(frozen=True)
class Metrics:
    """What a schedule costs.  ``bubble_fraction`` = 1 - sum(busy) / (D*T): the share of device
    time spent idle.  ``bubble_ratio`` = (T - T_ideal) / T_ideal with T_ideal the busiest
    device's busy time: Narayanan et al.'s "(p-1)/m" quantity.  Timing fields are None when
    the schedule deadlocks (memory peaks depend only on the order and are always there)."""

    makespan: float | None
    bubble_fraction: float | None
    bubble_ratio: float | None
    devices: tuple[DeviceMetrics, ...]
    if TYPE_CHECKING:  # to mypy a plain field; at run time the lazy descriptor
        critical_path: tuple[str, ...] = ()
    else:  # the names are made on the first read (PathNames)
        critical_path: LazyField[tuple[str, ...]] = LazyField(())
    costs: Costs | None = field(default=None, compare=False)

    @property
    def peak_inflight(self) -> int:
        return max((d.peak_inflight for d in self.devices), default=0)

    def critical_path_shown(self, most: int) -> tuple[int, list[str]]:
        """The critical path's length and its names as a report shows them: every one when
        there are at most ``most``, else the first ``most // 2`` and the last, around "...".
        Names not made yet are made for those alone (the whole path of a million-action run
        is a hundred thousand strings)."""
        names = given(self, "critical_path")
        if isinstance(names, PathNames) and len(names.path) > most:
            path = names.path
            return len(path), names.namer.names(path[:most // 2]) + ["..."] + names.namer.names(path[-most // 2:])
        made = list(self.critical_path)
        return len(made), made if len(made) <= most else made[:most // 2] + ["..."] + made[-most // 2:]

    @property
    def peak_memory(self) -> float:
        return max((d.peak_memory for d in self.devices), default=0)

    def to_json(self) -> dict[str, Any]:
        return {
            "makespan": None if self.makespan is None else _num(self.makespan),
            "bubble_fraction": self.bubble_fraction,
            "bubble_ratio": self.bubble_ratio,
            "peak_inflight": self.peak_inflight,
            "peak_memory": _num(self.peak_memory),
            "critical_path": list(self.critical_path),
            "devices": [d.to_json() for d in self.devices],
        }


@dataclass(frozen=True, eq=False)
class PathNames(Later[tuple[str, ...]]):
    """The names of a critical path's actions, made when they are first read: naming the
    125,000 actions on the path of a million-action schedule costs as much as finding it."""

    #: what names the graph's actions (Graph.namer: not the graph itself where it need not be)
    namer: Any
    path: list[int]

    def make(self) -> tuple[str, ...]:
        return tuple(self.namer.names(self.path))


class TimedRun(Protocol):
    """What a :class:`Timeline` reads from a run: a :class:`~schedverify.graph.SweepResult` or
    the runtime model's :class:`~schedverify.runtime.RuntimeResult`."""

    @property
    def start(self) -> list[float]: ...

    @property
    def end(self) -> list[float]: ...

    @property
    def completed(self) -> bool: ...

    @property
    def makespan(self) -> float | None: ...  # max(end, default=0) when the run knew it, else None


class Timeline:
    """The as-soon-as-possible execution of a schedule under given costs."""

    def __init__(self, graph: Graph, costs: Costs, memory: MemoryModel, durations: Sequence[float],
                 result: TimedRun, critical_path: Callable[[], list[int]] | None = None, *,
                 retired_by: Mapping[int, int] | None = None):
        """``result`` holds the times (a :class:`SweepResult`, or the runtime model's result,
        which then gives ``critical_path`` too: docs/spec.md 8 has other waits than
        ``graph``'s).  ``retired_by``: under PyTorch's runtime, each send's wait, so that the
        memory counts what pending sends hold (docs/spec.md 9.2)."""
        self.retired_by = retired_by
        self.graph = graph
        self._critical_path = critical_path
        self.costs = costs
        self.memory_model = memory
        self.durations = durations
        self._run = result
        # A device that waits for a later action of its own never gets past it: the sweep
        # leaves such waits out (the checker reports them), so its times would mean nothing.
        self.completed = result.completed and not graph.inversions
        self._memory: MemoryResult | None = None

    @property
    def schedule(self) -> Schedule:
        return self.graph.schedule

    @property
    def start(self) -> list[float]:
        """Each action's start time, in action order."""
        return self._run.start

    @property
    def end(self) -> list[float]:
        """Each action's end time, in action order."""
        return self._run.end

    @property
    def end_times(self) -> Times | None:
        """The end times as the compiled sweep or run gave them (a :class:`Times` column, no
        list made), or None when they are a list."""
        given_end = vars(self._run).get("_end")
        return given_end if isinstance(given_end, Times) else None

    @cached_property
    def makespan(self) -> float:
        run = self._run  # the compiled sweep or run knows it: no list of end times made to find it
        known = run.makespan
        return known if known is not None else max(self.end, default=0)

    def busy(self) -> list[float]:
        kernel = _accel.kernel
        if isinstance(self.durations, CodeDurations):
            got = self.durations.device_sums(self.graph.starts)
        else:
            got = kernel.busy_plain(self.graph.starts, self.durations) if kernel is not None and type(
                self.durations) is list else None
        if got is not None:  # every duration an int: the sums are exact whatever adds them
            return got
        st, dur = self.graph.starts, iter(self.durations)
        # one pass over the durations, each device's run in order (a slice would copy them)
        return [sum(islice(dur, st[d + 1] - st[d])) for d in range(len(st) - 1)]

    def memory(self) -> MemoryResult:
        if self._memory is None:
            self._memory = memory_sweep(self.graph, self.memory_model, self.start, self.end,
                                        retired_by=self.retired_by)
        return self._memory

    def entries(self, device: int):
        """(action, start, end) of each action on ``device``, in order."""
        g = self.graph
        acts = g.acts  # read once: a lazy field (lazy.py)
        for i in range(g.starts[device], g.starts[device + 1]):
            yield acts[i], self.start[i], self.end[i]

    def action_names(self, indices: list[int]) -> list[str]:
        """``str`` of each of these actions."""
        return self.graph.names(indices)

    def critical_path(self) -> list[int]:
        """Action indices from the first to the last-ending action, each starting exactly
        when its predecessor on the path (on its device, or a dependency plus latency) ends."""
        g = self.graph
        if not g.n:
            return []
        if self._critical_path is not None:
            return self._critical_path()
        comm = self.costs.comm
        tol = 1e-9 * max(1.0, self.makespan)
        kernel = _accel.kernel
        times = self._run.times if isinstance(self._run, SweepResult) else None  # the sweep's columns
        if kernel is not None and times is not None and not g.more_waits:
            start_times, end_times = times
            path = kernel.critical_path_plain(g.starts, g.wait, start_times.values, start_times.floats,
                                              end_times.values, end_times.floats, comm, tol)
            if path is not None:
                return path
        start, end = self.start, self.end
        i = max(range(len(end)), key=end.__getitem__)
        path = [i]
        while True:
            st = start[i]
            nxt = None
            # a dependency on another device first: it shows how the pipeline flows
            for k, sync in ((g.wait[i], False),) + g.more_waits.get(i, ()):
                if k < len(end) and abs(end[k] + (0 if sync else comm) - st) <= tol:
                    nxt = k
                    break
            if nxt is None and i > g.starts[g.dev[i]] and abs(end[i - 1] - st) <= tol:
                nxt = i - 1
            if nxt is None:
                break
            path.append(nxt)
            i = nxt
        path.reverse()
        return path

    def metrics(self, memory: MemoryResult | None = None) -> Metrics:
        mem = memory or memory_sweep(self.graph, self.memory_model, retired_by=self.retired_by)
        busy = self.busy()
        T = self.makespan
        D = len(busy)
        total = sum(busy)
        ideal = max(busy, default=0)
        frac = (1 - total / (D * T)) if T > 0 else 0.0
        ratio = ((T - ideal) / ideal) if ideal > 0 else 0.0
        devices = tuple(
            DeviceMetrics(d, busy[d], T - busy[d], mem.peak_inflight[d], mem.peak_memory[d], mem.static[d])
            for d in range(D)
        )
        path: Any = PathNames(self.graph.namer(), self.critical_path())  # a recipe for the field (lazy.py)
        return Metrics(T, frac, ratio, devices, path, self.costs)


def run_timeline(graph: Graph, costs: Costs, memory: MemoryModel) -> tuple[Timeline, SweepResult]:
    durations = durations_for(graph, costs)
    result = sweep(graph, durations, costs.comm)
    return Timeline(graph, costs, memory, durations, result), result


def order_only_metrics(timeline: Timeline, memory: MemoryResult | None = None) -> Metrics:
    """Metrics of a schedule that cannot run to the end: each device's busy time (the sum of
    its actions' costs) and its memory peaks (they follow the order), but no makespan, idle
    time or bubble."""
    mem = memory or memory_sweep(timeline.graph, timeline.memory_model, retired_by=timeline.retired_by)
    busy = timeline.busy()
    devices = tuple(DeviceMetrics(d, busy[d], None, mem.peak_inflight[d], mem.peak_memory[d], mem.static[d])
                    for d in range(timeline.schedule.devices))
    return Metrics(None, None, None, devices, costs=timeline.costs)
