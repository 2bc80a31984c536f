"""Proofs over real-valued costs: is a claim true for *every* cost the assumptions allow?

Callers hand over expressions as plain trees (no sympy here, no z3 outside this package):

- ``("num", Fraction)``, ``("sym", name)``,
- ``("add", a, b, ...)``, ``("mul", a, b, ...)``, ``("pow", base, int)``,
- ``("max", a, ...)``, ``("min", a, ...)``, and relations ``(op, lhs, rhs)`` with ``op`` one
  of ``==``, ``!=``, ``<=``, ``<``, ``>=``, ``>``.

:func:`find_counterexample` asks Z3 for costs that satisfy the assumptions and violate the
goal: ``unsat`` means the goal holds for all of them (a proof), ``sat`` comes with the
costs, and ``unknown`` (timeout, resource limit, incomplete theory) is never read as either.
"""

from __future__ import annotations

from fractions import Fraction
from collections.abc import Iterable, Sequence

import z3

from .solver import check, make_solver

DEFAULT_TIMEOUT_S = 20.0


class _Builder:
    def __init__(self):
        self.vars: dict[str, z3.ArithRef] = {}

    def var(self, name: str) -> z3.ArithRef:
        if name not in self.vars:
            self.vars[name] = z3.Real(name)
        return self.vars[name]

    def expr(self, t) -> z3.ArithRef:
        op = t[0]
        if op == "num":
            q = Fraction(t[1])
            return z3.RealVal(f"{q.numerator}/{q.denominator}")
        if op == "sym":
            return self.var(t[1])
        args = [self.expr(a) for a in t[1:]] if op not in ("pow",) else None
        if op == "add":
            return z3.Sum(*args) if len(args) > 1 else args[0]
        if op == "mul":
            out = args[0]
            for a in args[1:]:
                out = out * a
            return out
        if op == "pow":
            base, k = self.expr(t[1]), int(t[2])
            if k == 0:
                return z3.RealVal(1)
            out = base
            for _ in range(abs(k) - 1):
                out = out * base
            return out if k > 0 else 1 / out
        if op in ("max", "min"):
            out = args[0]
            for a in args[1:]:
                out = z3.If(a > out, a, out) if op == "max" else z3.If(a < out, a, out)
            return out
        raise ValueError(f"unknown expression node {op!r}")

    def rel(self, t) -> z3.BoolRef:
        op, a, b = t
        x, y = self.expr(a), self.expr(b)
        return {"==": x == y, "!=": x != y, "<=": x <= y, "<": x < y, ">=": x >= y,
                ">": x > y}[op]


def _value(v) -> Fraction:
    if z3.is_rational_value(v):
        return Fraction(v.numerator_as_long(), v.denominator_as_long())
    if z3.is_algebraic_value(v):
        return Fraction(v.approx(20).as_decimal(20).rstrip("?"))
    return Fraction(str(v))


def find_counterexample(goal, assumptions: Sequence = (), *, positive: Iterable[str] = (),
                        nonnegative: Iterable[str] = (), timeout_s: float = DEFAULT_TIMEOUT_S):
    """("unsat", None): the goal holds for every allowed cost; ("sat", {name: Fraction}): a
    counterexample; ("unknown", reason)."""
    b = _Builder()
    s = make_solver(timeout_s=timeout_s)
    for name in positive:
        s.add(b.var(name) > 0)
    for name in nonnegative:
        s.add(b.var(name) >= 0)
    for a in assumptions:
        s.add(b.rel(a))
    s.add(z3.Not(b.rel(goal)))
    r, why = check(s, at_most=timeout_s)  # Ctrl-C raises KeyboardInterrupt, never "unknown"
    if r == z3.unsat:
        return "unsat", None
    if r == z3.sat:
        model = s.model()
        return "sat", {n: _value(model.eval(v, model_completion=True)) for n, v in b.vars.items()}
    return "unknown", why


def tropical_leq(a: Iterable[Sequence[int]], b: Iterable[Sequence[int]], n: int,
                 timeout_s: float = DEFAULT_TIMEOUT_S) -> bool:
    """max over a of (t . x) <= max over b of (t . x) for every x >= 0 (exact, by Z3)."""
    b = [tuple(t) for t in b]
    xs = [z3.Real(f"x{i}") for i in range(n)]
    for t in a:
        s = make_solver(timeout_s=timeout_s)
        for x in xs:
            s.add(x >= 0)
        lhs = z3.Sum(*[int(k) * x for k, x in zip(t, xs)])
        for u in b:
            s.add(lhs > z3.Sum(*[int(k) * x for k, x in zip(u, xs)]))
        r, _ = check(s, at_most=timeout_s)
        if r != z3.unsat:
            return False
    return True


def tropical_equal(a, b, n: int) -> bool:
    """Two maxima of linear forms are the same function on the non-negative orthant."""
    a, b = list(a), list(b)
    return tropical_leq(a, b, n) and tropical_leq(b, a, n)
