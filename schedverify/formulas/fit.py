"""Generalising exact values over sizes: polynomials in the size symbols, fitted exactly.

A value known exactly at many sizes (a coefficient of a makespan term, a peak) is fitted by
the lowest-degree polynomial in the size symbols that reproduces *every* point exactly
(pivots found modulo a prime, the square block inverted over the rationals once per point
set and basis, every point then checked in integers).  Nothing is
approximate: a fit either reproduces all points or is rejected.  Pure Python, no sympy.
"""

from __future__ import annotations

from fractions import Fraction
from functools import lru_cache
from math import gcd
from itertools import combinations_with_replacement
from collections.abc import Mapping, Sequence

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


def _pivots(matrix: list[list[int]], candidates, k: int) -> tuple[list[int], list[int]]:
    """Independent rows (indices into ``matrix``, from ``candidates``) and their pivot
    columns, by elimination modulo a prime (independent there means independent over Q)."""
    P = 2**61 - 1
    order = list(candidates)
    work = [[a % P for a in matrix[i]] for i in order]
    rows, cols, r = [], [], 0
    for col in range(k):
        piv = next((i for i in range(r, len(work)) if work[i][col]), None)
        if piv is None:
            continue
        work[r], work[piv] = work[piv], work[r]
        order[r], order[piv] = order[piv], order[r]
        inv = pow(work[r][col], P - 2, P)
        pr = [(a * inv) % P for a in work[r]]
        work[r] = pr
        for i in range(r + 1, len(work)):
            f = work[i][col]
            if f:
                work[i] = [(a - f * b) % P for a, b in zip(work[i], pr)]
        rows.append(order[r])
        cols.append(col)
        r += 1
        if r == k:
            break
    return rows, cols


class _System:
    """The linear system of one point set and one basis, reduced once for many right-hand
    sides: ``rows`` independent points, ``cols`` pivot monomials and the exact inverse of that
    square block, so a fit is a matrix-vector product plus an integer check of every point."""

    __slots__ = ("basis", "matrix", "rows", "cols", "inverse", "den")

    def __init__(self, pts: list[Point], basis: list[tuple[int, ...]]):
        self.basis = basis
        self.matrix = [[_mono(e, x) for e in basis] for x in pts]
        k = len(basis)
        # pivot rows and columns by elimination modulo a large prime (integers, fast), on a
        # spread-out subset of the points first, on all of them if the subset lacks rank...
        n_pts = len(pts)
        step = max(1, n_pts // (3 * k))
        rows, cols = _pivots(self.matrix, range(0, n_pts, step), k)
        if len(rows) < k and step > 1:
            rows, cols = _pivots(self.matrix, range(n_pts), k)
        # ...then the exact inverse of the square block: fraction-free Gauss-Jordan in
        # integers (each row kept divided by its gcd), one common denominator at the end
        n = len(rows)
        aug = [[self.matrix[i][c] for c in cols] + [int(j == q) for j in range(n)]
               for q, i in enumerate(rows)]
        for c in range(n):
            piv = next(i for i in range(c, n) if aug[i][c])
            aug[c], aug[piv] = aug[piv], aug[c]
            pr = aug[c]
            pv = pr[c]
            for i in range(n):
                f = aug[i][c]
                if i != c and f:
                    row = [pv * x - f * y for x, y in zip(aug[i], pr)]
                    g = gcd(*row)
                    aug[i] = [x // g for x in row] if g > 1 else row
        den = 1
        for i in range(n):
            den = den * abs(aug[i][i]) // gcd(den, aug[i][i])
        self.rows, self.cols, self.den = rows, cols, den
        self.inverse = [[x * (den // aug[i][i]) for x in aug[i][n:]] for i in range(n)]

    def solve(self, ys: list[Fraction]) -> Poly | None:
        yd = 1
        for y in ys:
            if y.denominator != 1:
                yd = yd * y.denominator // gcd(yd, y.denominator)
        yint = [int(y * yd) for y in ys]
        rhs = [yint[i] for i in self.rows]
        nums = [sum(a * b for a, b in zip(row, rhs)) for row in self.inverse]
        den = self.den * yd  # solution_j = nums[j] / den
        ints = [(c, s) for c, s in zip(self.cols, nums) if s]
        for row, yi in zip(self.matrix, yint):
            tot = 0
            for c, s in ints:
                tot += row[c] * s
            if tot != yi * self.den:
                return None
        return {self.basis[c]: Fraction(s, den) for c, s in ints}


@lru_cache(maxsize=4096)
def _system(pts: tuple, basis: tuple) -> _System:
    """The reduced system of a point set and a basis (cached: fits of many values share it)."""
    return _System(list(pts), list(basis))


def fit_poly(data: Mapping[Point, Fraction], nvars: int, max_degree: int = 3,
             n_extra: int = 0, features_first: bool = True) -> Poly | None:
    """The lowest-degree polynomial reproducing every point of ``data`` exactly, or None.

    Points have ``nvars`` size coordinates and then ``n_extra`` derived features (such as
    ``floor((m-1)/p)``) that enter linearly only: after the pure polynomial of the same degree
    has failed (``features_first``), or only after pure polynomials of every degree have.
    The reduced system of a point set is cached, so fitting many values over the same sizes
    (the coefficients of every cost symbol, every probe) costs one elimination.
    """
    if not data:
        return None
    pts = tuple(sorted(data))
    ys = [Fraction(data[x]) for x in pts]
    varying = [len({x[i] for x in pts}) > 1 for i in range(nvars)]
    extra = [len({x[nvars + j] for x in pts}) > 1 for j in range(n_extra)]
    tail = len(pts[0]) - nvars
    if not features_first and n_extra:
        return fit_poly(data, nvars, max_degree) or fit_poly(data, nvars, max_degree, n_extra)
    for degree in range(max_degree + 1):
        basis = [b + (0,) * tail for b in monomials(nvars, degree, varying)]
        # at each degree the polynomial alone, then with the features: fewer parameters
        # first, so three device counts are not interpolated by a cubic in p when a
        # feature such as floor((m - 1)/p) states the rule
        for with_extra in (False, True):
            full = list(basis)
            if with_extra:
                if not any(extra):
                    continue
                for j in range(n_extra):
                    if extra[j]:
                        e = [0] * (nvars + tail)
                        e[nvars + j] = 1
                        full.append(tuple(e))
            if len(full) > len(pts) and degree > 0:
                return None
            poly = _system(pts, tuple(full)).solve(ys)
            if poly is not None:
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
