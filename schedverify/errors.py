"""Exceptions: raised when schedverify cannot do what was asked.

A schedule that is *invalid* is not an exception: the checker returns a Report of
Violations.  These are for unreadable input and bad arguments.
"""

from __future__ import annotations


class SchedverifyError(Exception):
    """Base class of every error schedverify raises on purpose (CLI exit code 2)."""


class InputError(SchedverifyError, ValueError):
    """A file or text could not be read as a schedule.

    ``source`` names the file (or ``<string>``) and ``where`` the field or cell, so the
    message reads ``sched.json: order[2][7]: unknown action type 'X' in '3X1'``.
    """

    def __init__(self, message: str, *, source: str | None = None, where: str | None = None):
        self.source = source
        self.where = where
        self.detail = message
        prefix = ": ".join(p for p in (source, where) if p)
        super().__init__(f"{prefix}: {message}" if prefix else message)


class ActionSyntaxError(InputError):
    """An action string does not parse; the message says why, naming the text."""


class UsageError(SchedverifyError, ValueError):
    """An argument or option has a value schedverify cannot use."""


class UnsupportedSize(UsageError):
    """A generator or formula was asked for sizes outside its domain; the message says the rule."""


class DeadlockError(SchedverifyError):
    """A timeline was asked of a schedule that deadlocks; ``check`` shows the cycle."""


class LoweringError(SchedverifyError):
    """PyTorch's lowering cannot handle this schedule (it raises where this does)."""


class InvalidSchedule(SchedverifyError):
    """Raised only by :func:`schedverify.assert_valid` (for tests and pipelines that want an
    exception): ``report`` is the full :class:`~schedverify.diagnostics.Report`."""

    def __init__(self, report, shown: int = 5):
        self.report = report
        lines = [f"{v.code} {v.message}" for v in report.violations[:shown]]
        more = len(report.violations) + report.truncated - len(lines)
        super().__init__("invalid schedule: " + "; ".join(lines) + (f"; and {more} more" if more > 0 else ""))


class NotDerived(SchedverifyError):
    """No closed form survived confirmation (not the user's mistake: the fitter's search space
    holds none); the message says what was tried.

    ``refuted``: forms fitted the training sizes but each failed at a size of the
    confirmation range (a wider training grid may still find one)."""

    def __init__(self, message: str, refuted: bool = False):
        super().__init__(message)
        self.refuted = refuted


class TooComplex(SchedverifyError):
    """An exact max-of-linear-forms grew past its term budget (the caller may take a slice)."""


class InternalError(SchedverifyError):
    """A check of schedverify's own work failed: a bug in schedverify, never the user's
    input (for instance a generated schedule that is not its family's certificate).  The CLI
    says so and exits with 70 (``EX_SOFTWARE``)."""


class EngineDisagreement(SchedverifyError):
    """``--engine both``: the graph and Z3 engines reached different findings (a bug in one)."""
