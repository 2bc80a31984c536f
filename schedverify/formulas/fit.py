"""Generalising exact values over sizes: polynomials in the size symbols, fitted exactly.

A value known exactly at many sizes (a coefficient of a makespan term, a peak) is fitted by
the lowest-degree polynomial in the size symbols that reproduces *every* point exactly
(rational Gaussian elimination on a subset, then checked on all points).  Nothing is
approximate: a fit either reproduces all points or is rejected.  Pure Python, no sympy.
"""

from __future__ import annotations

from fractions import Fraction
from itertools import combinations_with_replacement
from typing import Mapping, Sequence

Point = tuple  # tuple[int, ...] of size values, in the order of the variables
Poly = dict  # exponent tuple -> Fraction


def monomials(nvars: int, degree: int, varying: Sequence[bool]) -> list[tuple[int, ...]]:
    """Exponent tuples of total degree <= ``degree`` over the variables that vary."""
    idx = [i for i in range(nvars) if varying[i]]
    out = []
    for deg in range(degree + 1):
        for combo in combinations_with_replacement(idx, deg):
            e = [0] * nvars
            for i in combo:
                e[i] += 1
            out.append(tuple(e))
    return out


def _mono(e: tuple[int, ...], x: Point) -> int:
    r = 1
    for k, xi in zip(e, x):
        if k:
            r *= xi ** k
    return r


def evaluate(poly: Poly, x: Point) -> Fraction:
    return sum((c * _mono(e, x) for e, c in poly.items()), Fraction(0))


def _solve(rows: list[list[Fraction]], rhs: list[Fraction], k: int) -> list[Fraction] | None:
    """Exact solution of an overdetermined system (free variables 0); None if inconsistent."""
    a = [r[:] + [b] for r, b in zip(rows, rhs)]
    pivots = []
    r = 0
    for col in range(k):
        piv = next((i for i in range(r, len(a)) if a[i][col] != 0), None)
        if piv is None:
            continue
        a[r], a[piv] = a[piv], a[r]
        pv = a[r][col]
        a[r] = [x / pv for x in a[r]]
        for i in range(len(a)):
            if i != r and a[i][col] != 0:
                f = a[i][col]
                a[i] = [x - f * y for x, y in zip(a[i], a[r])]
        pivots.append(col)
        r += 1
        if r == len(a):
            break
    for i in range(r, len(a)):
        if a[i][k] != 0:
            return None
    sol = [Fraction(0)] * k
    for i, col in enumerate(pivots):
        sol[col] = a[i][k]
    return sol


def fit_poly(data: Mapping[Point, Fraction], nvars: int, max_degree: int = 3,
             n_extra: int = 0) -> Poly | None:
    """The lowest-degree polynomial reproducing every point of ``data`` exactly, or None.

    Points have ``nvars`` size coordinates and then ``n_extra`` derived features (such as
    ``floor((m-1)/p)``) that enter linearly only, after the pure polynomials have failed.
    """
    if not data:
        return None
    pts = sorted(data)
    varying = [len({x[i] for x in pts}) > 1 for i in range(nvars)]
    for degree in range(max_degree + 1):
        basis = monomials(nvars, degree, varying)
        if n_extra:
            basis = [b + (0,) * n_extra for b in basis]
            for j in range(n_extra):
                e = [0] * (nvars + n_extra)
                e[nvars + j] = 1
                basis.append(tuple(e))
        k = len(basis)
        if k > len(pts):
            break
        # solve on a spread-out subset, then check on every point
        step = max(1, len(pts) // (4 * k))
        subset = pts[::step]
        rows = [[Fraction(_mono(e, x)) for e in basis] for x in subset]
        sol = _solve(rows, [Fraction(data[x]) for x in subset], k)
        if sol is None:
            continue
        poly = {e: c for e, c in zip(basis, sol) if c != 0}
        if all(evaluate(poly, x) == data[x] for x in pts):
            return poly
    return None


def to_sympy(poly: Poly, symbols: Sequence):
    import sympy

    expr = sympy.Integer(0)
    for e, c in poly.items():
        term = sympy.Rational(c.numerator, c.denominator)
        for s, k in zip(symbols, e):
            if k:
                term *= s ** k
        expr += term
    return sympy.factor(expr) if expr.free_symbols else expr
