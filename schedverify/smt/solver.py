"""The one place that builds Z3 solvers: deterministic, with a time limit and a resource limit.

Fixed seeds make a verdict reproduce on any machine; ``rlimit`` bounds work independently of
the machine's speed, next to the wall-clock ``timeout``.  A solver's ``unknown`` is never
read as sat or unsat: callers turn it into verdict UNKNOWN with ``reason_unknown()``.
"""

from __future__ import annotations

import z3

DEFAULT_TIMEOUT_S = 60.0
DEFAULT_RLIMIT = 0  # 0: no resource limit, only the time limit
SEED = 0


def _configure() -> None:
    z3.set_param("smt.random_seed", SEED)
    z3.set_param("sat.random_seed", SEED)
    z3.set_param("nlsat.seed", SEED)


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
    if simple:
        s = z3.SimpleSolver()
    else:
        s = z3.SolverFor(logic) if logic else z3.Solver()
    s.set("random_seed", SEED)
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
    if timeout_s is not None:
        o.set("timeout", max(1, int(timeout_s * 1000)))
    if rlimit:
        o.set("rlimit", int(rlimit))
    return o
