"""The optimum as a claim's metric: ``optimal_makespan(memory=EXPR, split, ...)`` at one size.

A claim about a family compares closed forms; a claim about the optimum compares with the
least makespan over *every* schedule of the size under the stated limits.  That number has
no closed form here: at each size it is the search engine's answer
(:func:`schedverify.smt.search.search`), taken only when the search *proves* it:

- status ``optimal``: the makespan of a schedule the search found equals a proven lower
  bound (or Z3 showed that nothing finishes one unit earlier).  The proof is over the
  search class FIFO (microbatches in order within each stage and pass), which loses no
  optimum (the argument is in :mod:`schedverify.smt.search`), so it is the optimum over
  every schedule;
- the schedule is re-checked here by the graph checker under the same costs and memory
  limit, and its makespan recomputed, before the number is used;
- status ``infeasible``: no schedule fits the limits; the optimum (a minimum over the empty
  set) is +oo;
- otherwise (the per-size time limit ran out) only an interval is known: the lower bound
  the search proved and the best schedule it found.  An interval still decides some claims
  (``optimal_makespan < X`` holds once a schedule beats X; ``optimal_makespan == X`` fails
  once a schedule beats X or the lower bound exceeds it), and leaves the rest UNKNOWN.

The search needs numbers: the costs come from the claim's assumptions (``t_F == 1, t_B == 2,
c == 0``), the memory limit from its expression at the size.  z3 is imported only when a
search runs (through :mod:`schedverify.smt`).
"""

from __future__ import annotations

import shlex
import time
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import sympy

from ..errors import UsageError
from .statement import OptimumRef

#: the costs a search problem reads, by backward: claim symbol -> Costs field
FULL_COSTS = {"t_F": "F", "t_B": "B"}
SPLIT_COSTS = {"t_F": "F", "t_I": "I", "t_W": "W"}

OPTIMAL, BOUNDED, INFEASIBLE = "optimal", "bounded", "infeasible"


@dataclass
class Optimum:
    """What the search established about the optimum at one size.

    ``lower <= optimum <= upper`` (``upper`` None: no schedule found; both ``sympy.oo``: no
    schedule exists).  ``status`` is ``optimal`` when ``lower == upper``."""

    status: str
    lower: Any  # sympy number (Rational or oo)
    upper: Any | None
    search_status: str
    search_class: str = ""
    seconds: float = 0.0
    proof: str = ""
    schedule: Any = None  # the schedule of makespan ``upper``, re-checked
    problem: dict = field(default_factory=dict)

    @property
    def proven(self) -> bool:
        return self.status in (OPTIMAL, INFEASIBLE)

    def to_json(self, *, schedule: bool = True) -> dict:
        out: dict[str, Any] = {
            "status": self.status, "search_status": self.search_status,
            "lower_bound": _show(self.lower),
            "makespan": None if self.upper is None else _show(self.upper),
            "search_class": self.search_class, "seconds": round(self.seconds, 3),
            "proof": self.proof, "problem": self.problem,
        }
        if schedule and self.schedule is not None:
            from ..io.actions import format_action

            out["schedule"] = [[format_action(a) for a in row] for row in self.schedule.order]
        return out


def _show(x) -> str:
    if x is sympy.oo:
        return "oo"
    q = Fraction(int(sympy.numer(x)), int(sympy.denom(x)))
    return str(q.numerator) if q.denominator == 1 else f"{q.numerator}/{q.denominator}"


def _number(x) -> Any:
    """A search result's float or int as an exact sympy Rational (its units are whole
    numbers over a scale; see :class:`schedverify.smt.problem.Units`)."""
    q = Fraction(x).limit_denominator(10**6)
    return sympy.Rational(q.numerator, q.denominator)


class UnpinnedCosts(UsageError):
    """A claim about the optimum whose assumptions leave a cost free: the search, which
    solves one size at given costs, cannot judge it (the laws of the all-sizes prover can)."""


def problem_of(ref: OptimumRef, sizes: dict, costs: dict) -> dict:
    """The search arguments of ``ref`` at ``sizes`` (p, m, v, k, ...) and pinned ``costs``
    (claim symbol -> sympy number); UsageError names what is missing or not a number."""
    subs = {sympy.Symbol(k): sympy.Integer(v) for k, v in sizes.items()}
    names = SPLIT_COSTS if ref.split else FULL_COSTS
    missing = [n for n in list(names) + ["c"] if n not in costs]
    if missing:
        raise UnpinnedCosts(f"optimal_makespan needs numbers for its costs: the assumptions do not pin "
                            f"{', '.join(missing)} (e.g. assume = \"t_F == 1, "
                            f"{'t_I == 1, t_W == 1' if ref.split else 't_B == 2'}, c == 0\")")
    vals = {}
    for n in list(names) + ["c"]:
        x = sympy.sympify(costs[n]).xreplace(subs)
        if not x.is_Rational or x < 0 or (n != "c" and x <= 0):
            raise UsageError(f"optimal_makespan: cost {n} must be a number > 0 (c >= 0) at "
                             f"{_sizes_text(sizes)}, the assumptions give {sympy.sstr(x)}")
        vals[n] = int(x) if x.is_Integer else float(x)
    out: dict[str, Any] = {
        "devices": sizes["p"], "microbatches": sizes["m"],
        "costs": {names[n]: vals[n] for n in names}, "comm_latency": vals["c"],
        "split_backward": ref.split, "placement": ref.placement,
    }
    chunks = _whole(ref.chunks, subs, "chunks", sizes) if ref.chunks is not None else 1
    if chunks < 1:
        raise UsageError(f"optimal_makespan: chunks must be >= 1, got {chunks} at {_sizes_text(sizes)}")
    out["chunks"] = chunks
    if ref.memory is not None:
        lim = sympy.sympify(ref.memory).xreplace(subs)
        if not lim.is_Rational or lim < 0:
            raise UsageError(f"optimal_makespan: memory limit {sympy.sstr(ref.memory)} is "
                             f"{sympy.sstr(lim)} at {_sizes_text(sizes)}, not a number >= 0")
        out["memory_limit"] = int(lim) if lim.is_Integer else float(lim)
    return out


def _whole(expr, subs, what, sizes) -> int:
    x = sympy.sympify(expr).xreplace(subs)
    if not x.is_Integer:
        raise UsageError(f"optimal_makespan: {what} {sympy.sstr(expr)} is {sympy.sstr(x)} at "
                         f"{_sizes_text(sizes)}, not a whole number")
    return int(x)


def _sizes_text(sizes: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in sizes.items())


def solve(problem: dict, time_limit: float) -> Optimum:
    """Run the search on ``problem`` (from :func:`problem_of`) and say what it proved."""
    from ..check import check
    from ..smt.search import search

    t0 = time.perf_counter()
    res = search(problem["devices"], problem["microbatches"], chunks=problem["chunks"],
                 placement=problem["placement"], split_backward=problem["split_backward"],
                 costs=problem["costs"], memory_limit=problem.get("memory_limit"),
                 comm_latency=problem["comm_latency"], time_limit=time_limit)
    secs = time.perf_counter() - t0
    proof = str(res.certificate.get("proof", "")) if res.certificate else ""
    if res.status == "infeasible":
        return Optimum(INFEASIBLE, sympy.oo, sympy.oo, res.status, res.search_class, secs,
                       res.reason or "", None, problem)
    lower = _number(res.lower_bound) if res.lower_bound is not None else sympy.Integer(0)
    upper = None
    sched = res.schedule
    if sched is not None and res.makespan is not None:
        # the number is used only after the graph checker has re-checked the schedule under
        # the problem's own costs and memory limit (the search did too: this is the claim's
        # own check, independent of the search's bookkeeping)
        rep = check(sched, costs=problem["costs"] | {"comm": problem["comm_latency"]},
                    memory_limit=problem.get("memory_limit"))
        if not rep.is_valid or _number(rep.metrics.makespan) != _number(res.makespan):
            return Optimum(BOUNDED, lower, None, res.status, res.search_class, secs,
                           "the graph checker rejects the search's schedule: "
                           + "; ".join(map(str, rep.violations[:2])), None, problem)
        upper = _number(res.makespan)
    status = OPTIMAL if res.status == "optimal" and upper is not None and upper == lower else BOUNDED
    if status == BOUNDED and not proof:
        proof = res.reason or res.status
    return Optimum(status, lower, upper, res.status, res.search_class, secs, proof, sched, problem)


_FLIP = {"==": "==", "!=": "!=", "<=": ">=", ">=": "<=", "<": ">", ">": "<"}


def judge_interval(op: str, opt: Optimum, value) -> bool | None:
    """``optimum op value`` from what the search established: True, False, or None (the
    interval [lower, upper] does not decide it).  Exact when the optimum is proven."""
    lo, hi = opt.lower, opt.upper
    top = sympy.oo if hi is None else hi
    if op == "==":
        if hi is not None and hi < value or lo > value:
            return False
        return True if lo == top == value else None
    if op == "!=":
        r = judge_interval("==", opt, value)
        return None if r is None else not r
    if op == "<=":
        return True if top <= value else False if lo > value else None
    if op == "<":
        return True if top < value else False if lo >= value else None
    if op == ">=":
        return True if lo >= value else False if hi is not None and hi < value else None
    if op == ">":
        return True if lo > value else False if hi is not None and hi <= value else None
    raise UsageError(f"unknown relation {op!r}")


def flip(op: str) -> str:
    """``a op b`` as ``b flip(op) a``."""
    return _FLIP[op]


def search_command(problem: dict, time_limit: float) -> str:
    """The ``schedverify search`` command that reproduces one optimum."""
    cmd = ["schedverify", "search", "--devices", str(problem["devices"]), "--microbatches",
           str(problem["microbatches"])]
    if problem["chunks"] != 1:
        cmd += ["--chunks", str(problem["chunks"]), "--placement", problem["placement"]]
    if problem["split_backward"]:
        cmd.append("--split-backward")
    cmd += ["--costs", ",".join(f"{k}={v:g}" for k, v in problem["costs"].items())]
    if "memory_limit" in problem:
        cmd += ["--memory-limit", f"{problem['memory_limit']:g}"]
    cmd += ["--comm-latency", f"{problem['comm_latency']:g}", "--time-limit", f"{time_limit:g}"]
    return " ".join(shlex.quote(x) for x in cmd)
