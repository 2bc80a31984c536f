"""The fast graph checker: every rule of docs/spec.md section 3, linear in the number of actions.

``check`` returns a :class:`~schedverify.diagnostics.Report` (verdict, violations, metrics);
``iter_violations`` yields the violations lazily; ``is_valid`` answers yes or no.  They
raise only for arguments they cannot use, never because a schedule is invalid.
"""

from __future__ import annotations

import math
from functools import cached_property
from itertools import islice
from collections.abc import Iterator, Mapping, Sequence

from ..cost.memory import memory_sweep
from ..cost.timeline import Timeline, order_only_metrics, run_timeline
from .. import diagnostics as dx
from ..diagnostics import Report, Verdict, Violation
from ..errors import DeadlockError, InvalidSchedule, UsageError
from ..graph import KIND_CODE, CodeDurations, code_durations, compile_graph, durations_for
from ..model import COMM_KINDS, Schedule, as_schedule, resolve_costs, resolve_memory
from ..releases import GLOO, Runtime, runtime_of
from ..runtime import RuntimeResult, send_waits, simulate
from . import rules

DEFAULT_MAX_VIOLATIONS = 1000
#: Violations beyond the kept ones are counted up to this many (``Report.truncated_exact``).
MAX_COUNTED = 100_000


class _Run:
    """One check's state, so that the rules and the metrics share a single graph and sweep.

    The arguments are checked and the graph built at once; the memory sweep and the timeline
    only when a rule or the metrics need them, so that ``is_valid`` on a schedule with a
    structural violation stops before timing it."""

    def __init__(self, schedule: Schedule, costs, memory, memory_limit, comm_semantics, nccl=None,
                 torch=None, p2p=None, runtime_options=None, framework=None):
        as_schedule(schedule, "check")
        self.semantics, self.rt = runtime_of(schedule, comm_semantics, nccl, torch, p2p, runtime_options, framework)
        self.costs = resolve_costs(schedule, costs)
        self.memory_model = resolve_memory(schedule, memory, memory_limit)
        self.warnings: list[str] = []
        self.refusal: str | None = None
        if self.rt is not None and not self.rt.on_nccl and self.rt.layout.name in self.rt.release.switches:
            needs = self.rt.release.switches[self.rt.layout.name].needs
            if needs:
                self.warnings.append(f"{self.rt.release.name}'s {self.rt.layout.name} layout needs {needs}")
        if self.rt is not None and self.rt.options.max_outstanding_sends is not None:
            schedule = self._budget(schedule, self.rt)
        # PyTorch's runtime (docs/spec.md 8, 9): the structure as under eager, the execution
        # by the runtime model when the schedule lists its communication
        self.schedule = schedule
        self.graph = compile_graph(schedule, comm_semantics="eager" if self.rt is not None else self.semantics,
                                   wait_when_read=self.rt is not None)
        self.waits = send_waits(self.graph) if self.rt is not None else None
        self.runtime: RuntimeResult | None = None
        self._timed = False
        self.tally = rules.Tally()  # check sets it counting past the violations it keeps

    def _budget(self, schedule: Schedule, rt: Runtime) -> Schedule:
        """What the runtime runs with max_outstanding_sends (docs/spec.md 9.2)."""
        from ..sendwaits import as_loaded

        loaded = as_loaded(schedule, rt)
        self.refusal = loaded.refusal
        if loaded.moved:
            self.warnings.append(
                f"{rt.release.name} moves {loaded.moved} wait{'s' * (loaded.moved != 1)} earlier to keep at most "
                f"{rt.options.max_outstanding_sends} send(s) pending per rank (max_outstanding_sends): the "
                "positions are those of the order it runs")
        return loaded.schedule

    @cached_property
    def memory(self):
        return memory_sweep(self.graph, self.memory_model, retired_by=self._retired_by())

    def _retired_by(self) -> Mapping[int, int] | None:
        """Under a runtime, each send's retiring wait (docs/spec.md 9.2): its WAIT_SEND; a send
        without one is held to the step's end.  None under an abstract semantics."""
        if self.rt is None:
            return None
        assert self.waits is not None  # made with rt
        return self.waits.retired_by

    def _time(self) -> None:
        """Run the timeline (or PyTorch's runtime model) once."""
        if self._timed:
            return
        self._timed = True
        schedule = self.schedule
        if self.rt is not None and self.graph.explicit_comm:
            self._run_runtime(self.rt)
            return
        self.timeline, self.sweep = run_timeline(self.graph, self.costs, self.memory_model)
        # SV403 means "hangs only because sends wait for their receives".  When a rendezvous
        # run stalls, run eager too: if the schedule hangs under eager as well (a data
        # deadlock, SV402, or a device waiting for itself, SV401), that is what to report and
        # fix first; the rendezvous cycles may vanish with it.
        self.deadlock_graph, self.cycles = self.graph, self.sweep.cycles
        if self.graph.rendezvous and not self.sweep.completed:
            eager = compile_graph(schedule, comm_semantics="eager")
            _, eager_sweep = run_timeline(eager, self.costs, self.memory_model)
            if not eager_sweep.completed or eager.inversions:
                self.deadlock_graph, self.cycles = eager, eager_sweep.cycles

    def _run_runtime(self, rt: Runtime) -> None:
        g = self.graph
        by_code = code_durations(g, self.costs)
        durations: Sequence = by_code if by_code is not None else durations_for(g, self.costs)
        result = simulate(g, durations, self.costs.comm, rt, waits=self.waits)
        costs = self.costs
        # busy = compute only (the durations themselves when SEND/RECV cost the int 0)
        if all(type(v) is int and v == 0 for v in (getattr(costs, k) for k in COMM_KINDS)):
            compute = durations
        elif isinstance(durations, CodeDurations):
            compute = durations.with_zero({KIND_CODE[k] for k in COMM_KINDS})
        else:
            compute = [0 if c else d for c, d in zip(result.is_comm, durations)]
        self.timeline = Timeline(g, self.costs, self.memory_model, compute, result, result.critical_path,
                                 retired_by=self._retired_by())
        self.runtime, self.hangs = result, result
        # SV405 means "hangs only on NCCL".  When the NCCL run stalls, run the gloo model too:
        # a schedule that hangs on gloo as well has a plain deadlock (SV402) to fix first.
        if rt.on_nccl and result.cycles:
            gloo = simulate(g, durations, self.costs.comm, rt.with_(backend=GLOO), matching=result.matching,
                            waits=self.waits)
            if gloo.cycles:
                self.hangs = gloo
        if not g.reduce_grads and rt.release.reduce_grad_action:
            self.warnings.append(
                "the schedule lists its communication but no REDUCE_GRAD: PyTorch's runtime runs "
                "it without scaling the gradients by the number of microbatches (its compute-only "
                "lowering adds one REDUCE_GRAD per stage)")

    def violations(self) -> Iterator[Violation]:
        g = self.graph
        yield from rules.well_formed(g)
        yield from rules.complete(g, self.tally)
        yield from rules.placed(g)
        yield from rules.ordered(g)
        rt = self.rt
        if rt is not None:
            yield from rules.release_grammar(g, rt)
            yield from rules.loss_order(g, rt)
            yield from rules.reduce_pairing(g, rt)
            assert self.waits is not None  # made with rt
            yield from rules.send_retirement(g, rt, self.waits)
            if self.refusal is not None:
                yield Violation(dx.SEND_BUDGET, f"{rt.release.name} refuses the schedule when it loads it: "
                                f"{self.refusal}")
        self._time()
        if self.runtime is not None:
            assert rt is not None  # the runtime ran
            yield from rules.runtime_communication(g, self.runtime.matching, rt)
            yield from rules.runtime_hangs(g, self.hangs)
        else:
            yield from rules.communication(g)
            yield from rules.deadlocks(self.deadlock_graph, self.cycles)
        if self.memory_model.limit is not None:
            yield from rules.memory(g, self.memory, self.memory_model.limit)

    def metrics(self):
        self._time()
        if self.timeline.completed:
            return self.timeline.metrics(self.memory)
        return order_only_metrics(self.timeline, self.memory)


def iter_violations(schedule: Schedule, *, costs=None, memory=None, memory_limit=None,
                    comm_semantics=None, nccl=None, torch=None, p2p=None,
                    runtime_options=None, framework=None) -> Iterator[Violation]:
    """Every violation of ``schedule``, rule by rule (docs/spec.md section 3 order)."""
    return _Run(schedule, costs, memory, memory_limit, comm_semantics, nccl, torch, p2p,
                runtime_options, framework).violations()


def is_valid(schedule: Schedule, **options) -> bool:
    return next(iter_violations(schedule, **options), None) is None


def assert_valid(schedule: Schedule, **options) -> Report:
    """:func:`check`, raising :class:`~schedverify.errors.InvalidSchedule` (with the report)
    when the schedule is not valid; the report when it is."""
    report = check(schedule, **options)
    if not report.is_valid:
        raise InvalidSchedule(report)
    return report


def check(schedule: Schedule, *, costs=None, memory=None, memory_limit=None, comm_semantics=None,
          nccl=None, torch=None, p2p=None, runtime_options=None, framework=None,
          max_violations: int = DEFAULT_MAX_VIOLATIONS) -> Report:
    """Check ``schedule`` against every rule and compute what it costs.

    ``costs`` and ``memory`` override the file's (a :class:`Costs`/:class:`MemoryModel`, or a
    mapping of the fields to change); ``memory_limit`` sets the limit alone.  At most
    ``max_violations`` are kept; ``Report.truncated`` counts the rest.  ``comm_semantics`` is
    one of ``eager``, ``rendezvous`` (docs/spec.md 3.5), ``torch`` or ``torch-nccl`` (PyTorch's
    runtime over gloo or NCCL, sections 8 and 9).  For the last two: ``torch`` is the PyTorch
    release (``"2.13"``, ``"2.14"``, ``"2.15"``; default: the installed torch's, else the
    newest modelled), ``p2p`` its communicator layout (``shared``, ``direction``, ``edge``;
    default: the release's, or the one its environment variable turns on), ``nccl`` (a
    :class:`~schedverify.runtime.NcclOptions`) how NCCL runs point-to-point, and
    ``runtime_options`` (a :class:`~schedverify.releases.RuntimeOptions` or a mapping) the
    runtime's options; ``Report.profile`` says what was assumed.  ``framework``
    (``"megatron-core"``, ``"deepspeed"``, optionally ``==<version>``) runs the schedule on
    that framework's loop instead of PyTorch's runtime (section 10); a schedule imported from
    one (:mod:`schedverify.frameworks`) names it in its metadata, and runs on it by default.
    Giving any of them with no semantics means ``torch-nccl``.
    """
    if isinstance(max_violations, bool) or not isinstance(max_violations, int) or max_violations < 0:
        raise UsageError(f"max_violations: expected a whole number >= 0, got {max_violations!r}")
    run = _Run(schedule, costs, memory, memory_limit, comm_semantics, nccl, torch, p2p, runtime_options, framework)
    found = run.violations()
    kept = list(islice(found, max_violations))
    # Count the rest: the missing actions by arithmetic (a file that declares millions of
    # microbatches and lists a few actions has billions of them), the others one by one but
    # only so far.
    run.tally.counting = True
    counted = sum(1 for _ in islice(found, MAX_COUNTED + 1))
    truncated = min(counted, MAX_COUNTED) + run.tally.skipped
    verdict = Verdict.INVALID if kept else Verdict.VALID
    # every cost is finite (at most 1e308), but their sums may not be: then no metric means
    # anything (a float sum is inf, an int one cannot become the bubble's float)
    try:
        metrics = run.metrics()
        overflow = metrics.makespan is not None and math.isinf(float(metrics.makespan))
    except OverflowError:
        overflow = True
    if overflow:
        raise UsageError(f"costs: the schedule's times overflow a float (the makespan is beyond "
                         f"1.8e308 with costs {run.costs}); give the costs in a larger unit")
    report = Report(verdict, kept, metrics, truncated,
                    truncated_exact=counted <= MAX_COUNTED, comm_semantics=run.semantics,
                    warnings=run.warnings, profile=run.rt, schedule=run.schedule)
    if kept:
        report.warnings += _grammar_hints(schedule)
    report.timeline = run.timeline if run.timeline.completed else None
    report.runtime = run.runtime
    return report


def timeline(schedule: Schedule, *, costs=None, memory=None, comm_semantics: str | None = None) -> Timeline:
    """The timeline of ``schedule``.  Raises :class:`DeadlockError` when it cannot run.

    It lives here, above the cost model (:mod:`schedverify.cost.timeline`), because under
    ``torch`` and ``torch-nccl`` the timeline is the checker's run of PyTorch's runtime."""
    as_schedule(schedule, "timeline")
    sem = comm_semantics or schedule.comm_semantics or "eager"
    if sem in ("torch", "torch-nccl"):  # PyTorch's runtime (docs/spec.md 8): the checker runs it
        report = check(schedule, costs=costs, memory=memory, comm_semantics=sem)
        if report.timeline is None:
            raise DeadlockError(f"{schedule.name or 'the schedule'} cannot run to the end under {sem}; "
                                "run check to see why")
        return report.timeline
    g = compile_graph(schedule, comm_semantics=sem)
    tl, result = run_timeline(g, resolve_costs(schedule, costs), resolve_memory(schedule, memory))
    if not tl.completed:
        raise DeadlockError(f"{schedule.name or 'the schedule'} deadlocks; run check to see the cycle")
    return tl


def _grammar_hints(schedule: Schedule) -> list[str]:
    """Why an invalid schedule may only be misread: a pair with B and W but no I is what a file
    in PyTorch's grammar before 2.6 (B = input gradient) reads as today."""
    from ..io.actions import LEGACY_HINT
    from ..lint import looks_legacy

    pair = looks_legacy(schedule)
    if pair is None:
        return []
    s, mb = pair
    return [f"stage {s}, microbatch {mb} has {s}B{mb} and {s}W{mb} but no {s}I{mb}: {LEGACY_HINT}"]


__all__ = ["assert_valid", "check", "is_valid", "iter_violations"]
