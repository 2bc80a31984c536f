"""The check engines, behind one protocol: a name maps to a callable that takes a schedule
and the check options and returns a :class:`~schedverify.diagnostics.Report`.

``graph`` is the fast checker (:func:`schedverify.check`), ``z3`` the independent SMT
encoding (:func:`schedverify.smt.check_z3`, which loads z3 when called), ``both`` runs the two
and compares them (:func:`disagreements`).  This module owns the protocol; an engine plugs in
by being a callable of that shape and knows nothing of the registry (the Z3 engine imports
nothing from here).  The CLI's ``--engine`` and :func:`run_engine` look engines up here, so an
engine registered in :data:`ENGINES` is available everywhere at once.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Protocol
from collections.abc import Mapping

from .diagnostics import Report, Verdict
from .errors import EngineDisagreement, UsageError
from .model import Schedule


class Engine(Protocol):
    """Check ``schedule``; ``timeout_s`` bounds engines that search (the graph engine ignores it)."""

    def __call__(self, schedule: Schedule, *, timeout_s: float = 60.0, **options) -> Report: ...


def _graph(schedule: Schedule, *, timeout_s: float = 60.0, **options) -> Report:
    from .check import check

    return check(schedule, **options)


def _z3(schedule: Schedule, *, timeout_s: float = 60.0, **options) -> Report:
    from .smt.check import check_z3

    return check_z3(schedule, timeout_s=timeout_s, **options)


def _both(schedule: Schedule, *, timeout_s: float = 60.0, **options) -> Report:
    """The graph report when the engines agree; :class:`EngineDisagreement` when they do not;
    the Z3 report (verdict UNKNOWN, never valid) when Z3 could not decide."""
    graph = _graph(schedule, **options)
    z3 = _z3(schedule, timeout_s=timeout_s, **options)
    if z3.verdict is Verdict.UNKNOWN:
        z3.reason = f"z3 engine undecided ({z3.reason}); the graph engine says {graph.verdict}"
        return z3
    diff = disagreements(graph, z3)
    if diff:
        raise EngineDisagreement(
            f"the graph and z3 engines disagree on {schedule.name or 'the schedule'}: " + "; ".join(diff))
    graph.engine = "graph+z3"
    return graph


def disagreements(graph: Report, z3: Report) -> list[str]:
    """How two reports on the same schedule differ in verdict, codes or makespan."""
    out = []
    if graph.verdict is not z3.verdict:
        out.append(f"verdict: graph {graph.verdict}, z3 {z3.verdict}")
    if graph.codes() != z3.codes():
        out.append(f"codes: graph {' '.join(graph.codes()) or '-'}, z3 {' '.join(z3.codes()) or '-'}")
    gm = graph.metrics.makespan if graph.metrics is not None else None
    zm = z3.metrics.makespan if z3.metrics is not None else None
    if (gm is None) != (zm is None) or (gm is not None and abs(gm - zm) > 1e-6 * max(1.0, abs(gm))):
        out.append(f"makespan: graph {gm}, z3 {zm}")
    return out


#: Every engine by name (read-only).
ENGINES: Mapping[str, Engine] = MappingProxyType({"graph": _graph, "z3": _z3, "both": _both})


def engine(name: str) -> Engine:
    """The engine registered as ``name``; an unknown name is a :class:`UsageError`."""
    found = ENGINES.get(name) if isinstance(name, str) else None
    if found is None:
        raise UsageError(f"engine must be one of {', '.join(ENGINES)}, got {name!r}")
    return found


def run_engine(name: str, schedule: Schedule, *, timeout_s: float = 60.0, **options) -> Report:
    """Check ``schedule`` with the engine registered as ``name``."""
    return engine(name)(schedule, timeout_s=timeout_s, **options)
