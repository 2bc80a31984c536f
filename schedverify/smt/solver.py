"""The door to Z3: the one place that builds solvers and the one place that runs them.

Fixed seeds make a verdict reproduce on any machine; ``rlimit`` bounds work independently of
the machine's speed, next to the wall-clock ``timeout``.  A solver's ``unknown`` is never
read as sat or unsat: callers turn it into verdict UNKNOWN with the reason :func:`check`
gives.

Every solver call goes through :func:`check`, which keeps two promises:

- time: Z3's ``timeout`` is set to what the caller's :class:`~schedverify.budget.Budget` has left (or
  less), and should Z3 not stop by then (some of its phases do not look at the clock), the
  call is cancelled (``Z3_interrupt``) shortly after;
- interrupts: Ctrl-C raises :class:`KeyboardInterrupt`, never an ``unknown`` verdict.  Z3's
  own SIGINT handler (which turns Ctrl-C into ``unknown``, reason "canceled" or "interrupted
  from keyboard") is switched off on every solver made here (``ctrl_c=false``); the check
  runs in a helper thread with SIGINT blocked, so the signal reaches Python's handler in the
  main thread at once, which cancels the solver, waits for the thread and raises.  The CLI
  (:func:`schedverify.cli.run`) turns that into "interrupted" and exit code 130.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time

import z3

from ..budget import Budget

DEFAULT_TIMEOUT_S = 60.0
DEFAULT_RLIMIT = 0  # 0: no resource limit, only the time limit
SEED = 0


def _configure() -> None:
    z3.set_param("smt.random_seed", SEED)
    z3.set_param("sat.random_seed", SEED)
    z3.set_param("nlsat.seed", SEED)


def fresh_context() -> None:
    """Let the next Z3 terms live in a new context (terms made before keep theirs alive).
    How fast Z3 decides a query, and so whether it does within a resource limit, depends on
    the terms its context has seen (their creation order steers its heuristics): a prover
    that starts each judgement here gives the same verdict whatever was solved before in
    the process, so a catalogue's verdicts do not depend on the order of its claims."""
    z3.z3._main_ctx = None


def make_solver(*, timeout_s: float | None = DEFAULT_TIMEOUT_S, rlimit: int = DEFAULT_RLIMIT,
                logic: str | None = None, unsat_core: bool = False, simple: bool = False,
                core_minimize: bool = False, arith_solver: int | None = None) -> z3.Solver:
    """A Z3 solver with fixed seeds, ``timeout_s`` seconds and ``rlimit`` resource units.

    ``simple`` gives the SMT core itself (``z3.SimpleSolver``), which accepts initial values
    (``set_initial_value``) for warm starts; ``core_minimize`` asks for minimal unsat cores;
    ``arith_solver`` picks Z3's arithmetic theory (``arith.solver``: 1 is difference logic,
    for problems whose every arithmetic atom is ``x - y <= c``; None keeps Z3's default).
    """
    _configure()
    s = z3.SimpleSolver() if simple else z3.SolverFor(logic) if logic else z3.Solver()
    s.set("random_seed", SEED)
    s.set("ctrl_c", False)  # Ctrl-C is Python's (see check), not Z3's
    if timeout_s is not None:
        s.set("timeout", max(1, int(timeout_s * 1000)))
    if rlimit:
        s.set("rlimit", int(rlimit))
    if unsat_core:
        s.set("unsat_core", True)
    if core_minimize:
        s.set("core.minimize", True)
    if arith_solver is not None:
        s.set("arith.solver", int(arith_solver))
    return s


def make_optimizer(*, timeout_s: float | None = DEFAULT_TIMEOUT_S, rlimit: int = DEFAULT_RLIMIT) -> z3.Optimize:
    """A Z3 optimizer configured like :func:`make_solver`."""
    _configure()
    o = z3.Optimize()
    o.set("ctrl_c", False)
    if timeout_s is not None:
        o.set("timeout", max(1, int(timeout_s * 1000)))
    if rlimit:
        o.set("rlimit", int(rlimit))
    return o


#: How long past its own timeout a check may run before it is cancelled (Z3 usually stops
#: on time; this catches the phases that do not look at the clock).
GRACE_S = 0.2
#: How long an interrupted check may take to stop before the interrupt is raised anyway.
STOP_WAIT_S = 2.0
#: Reasons Z3 gives for a check its own Ctrl-C handler stopped (when a solver made outside
#: this module keeps that handler): a user's interrupt, not a verdict.
KEYBOARD_REASONS = frozenset({"interrupted from keyboard"})


def check(solver, *assumptions, budget: Budget | None = None,
          at_most: float | None = None) -> tuple[z3.CheckSatResult, str | None]:
    """Run ``solver.check(*assumptions)`` (a Solver or an Optimize) within ``budget`` (and
    ``at_most`` seconds): ``(result, None)`` for sat or unsat, ``(unknown, reason)``
    otherwise ("time limit reached" when the budget was spent before the call or the call
    had to be cancelled).  Raises :class:`KeyboardInterrupt` on Ctrl-C (see the module
    docstring)."""
    budget = budget if budget is not None else Budget(None)
    if budget.expired():
        return z3.unknown, "time limit reached"
    ms = budget.timeout_ms(at_most)
    solver.set("timeout", ms)
    box: dict = {}

    def work():
        with contextlib.suppress(AttributeError, OSError, ValueError):  # no pthreads: Python still gets it
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            box["result"] = solver.check(*assumptions)
        except BaseException as e:  # noqa: BLE001  (handed to the calling thread as it is)
            box["error"] = e

    th = threading.Thread(target=work, name="schedverify-z3-check", daemon=True)
    stop_at = time.monotonic() + ms / 1000 + GRACE_S
    cancelled = False
    th.start()
    try:
        while th.is_alive():
            th.join(min(0.05, max(0.001, stop_at - time.monotonic())) if not cancelled else 0.05)
            if not cancelled and th.is_alive() and time.monotonic() >= stop_at:
                solver.ctx.interrupt()
                cancelled = True
    except KeyboardInterrupt:
        solver.ctx.interrupt()
        _wait(th)
        raise
    if "error" in box:
        raise box["error"]
    r = box["result"]
    if r == z3.unknown:
        reason = solver.reason_unknown() or "solver gave up"
        if reason in KEYBOARD_REASONS:
            raise KeyboardInterrupt
        if cancelled or (reason in ("canceled", "interrupted", "timeout")
                         and budget.expired()):
            reason = "time limit reached"
        return r, reason
    return r, None


def _wait(th: threading.Thread) -> None:
    """Wait for a cancelled check to stop (a second Ctrl-C does not cut this short: the
    solver must not run on in the background of what the caller does next), at most
    :data:`STOP_WAIT_S`."""
    end = time.monotonic() + STOP_WAIT_S
    while th.is_alive() and time.monotonic() < end:
        try:
            th.join(0.05)
        except KeyboardInterrupt:
            continue
