"""schedverify: a formal verifier and cost model for pipeline-parallel training schedules.

The public API is re-exported here; the engines that need z3 or sympy (``schedverify.smt``,
``schedverify.formulas``) are imported only when used.
"""

from __future__ import annotations

from .check import assert_valid, check, is_valid, iter_violations, timeline
from .cost import DeadlockError, Metrics, Timeline
from .diagnostics import CODES, Code, Location, Report, Verdict, Violation
from .errors import InputError, InvalidSchedule, SchedverifyError, UnsupportedSize, UsageError
from .io import dump, dumps, dumps_csv, load, loads, loads_csv, parse_action
from .model import Action, Costs, MemoryModel, Placement, Schedule, overlap
from .render import notebook as _notebook  # noqa: F401 - gives Schedule and Report their Jupyter view

__version__ = "0.1.0"

__all__ = [
    "CODES", "Action", "Code", "Costs", "DeadlockError", "InputError", "InvalidSchedule", "Location",
    "MemoryModel",
    "Metrics", "Placement", "Report", "Schedule", "SchedverifyError", "Timeline", "UnsupportedSize",
    "UsageError", "Verdict", "Violation", "__version__", "assert_valid", "check", "dump", "dumps", "dumps_csv",
    "is_valid", "iter_violations", "load", "loads", "loads_csv", "overlap", "parse_action",
    "timeline",
]
