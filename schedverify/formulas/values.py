"""The exact value of a metric at one size, from a schedule's exact symbolic metrics: the one
reading of makespan, bubbles, busy time and peaks that the claim prover and ``formula --at``
share."""

from __future__ import annotations

from fractions import Fraction

import sympy

from ..errors import TooComplex, UsageError
from .tropical import COST_SYMBOLS as TERM_ORDER
from .tropical import OrderMetrics, SizeMetrics

#: Metrics that depend only on the order (no timeline, no costs).
ORDER_ONLY = frozenset({"peak_inflight", "peak_memory", "fwd_before_bwd"})
_COST = {n: sympy.Symbol(n) for n in TERM_ORDER}


def _lin(term) -> sympy.Expr:
    return sum((int(k) * _COST[n] for k, n in zip(term, TERM_ORDER) if k), sympy.Integer(0))


def _max(terms) -> sympy.Expr:
    """max of the linear forms of a pruned tropical polynomial (no term is below another
    for every cost, so sympy's own pairwise simplification, quadratic in the terms, would
    find nothing to drop: it is skipped)."""
    forms = [_lin(t) for t in sorted(terms)]
    return sympy.Max(*forms, evaluate=False) if len(forms) > 1 else forms[0]


def metric_value(sm: SizeMetrics | OrderMetrics, metric: str, device) -> sympy.Expr:
    """The exact value of ``metric`` at one size (``device`` an int, or None = whole pipeline).

    The peaks and busy times need only the order (:class:`OrderMetrics`); the rest need the
    timeline (:class:`SizeMetrics`)."""
    if device is not None and not 0 <= device < sm.devices:
        raise UsageError(f"device index {device} is out of range 0..{sm.devices - 1}")
    if metric in ORDER_ONLY:
        tables: dict[str, tuple[int | Fraction, ...]] = {
            "peak_inflight": sm.peak_inflight, "peak_memory": sm.peak_memory,
            "fwd_before_bwd": sm.warmup}
        table = tables[metric]
        val = table[device] if device is not None else max(table)
        return sympy.Rational(Fraction(val).numerator, Fraction(val).denominator)
    if metric == "busy":
        return _lin(sm.busy[device]) if device is not None else _max(sm.busiest)
    # only the order-only metrics and busy are asked of an OrderMetrics (see the docstring)
    assert isinstance(sm, SizeMetrics), f"{metric} needs the timeline (SizeMetrics)"
    T = _max(sm.makespan)
    if metric == "makespan":
        return T
    if metric == "bubble_time":
        return T - (_lin(sm.busy[device]) if device is not None else _max(sm.busiest))
    if metric == "bubble_ratio":
        ideal = _lin(sm.busy[device]) if device is not None else _max(sm.busiest)
        return (T - ideal) / ideal
    if metric == "bubble_fraction":
        if device is not None:
            return (T - _lin(sm.busy[device])) / T
        return 1 - _lin(sm.total_busy) / (sm.devices * T)
    raise UsageError(f"unknown metric {metric!r}")


def evaluate_at(f, family: str, metric: str, device, sizes: dict, costs: dict) -> dict:
    """The form ``f``'s value and the schedule's own (its exact symbolic timeline) at one
    point: ``sizes`` (p, m, and v, d where they apply) and ``costs`` (t_F, ..., c), as
    ``schedverify formula --at`` prints them: ``{"sizes", "costs", "formula", "schedule"}``.
    Raises :class:`UsageError` for sizes or costs outside the form's domain, or a schedule
    too complex to time symbolically there."""
    from .derive import MAX_TERMS
    from .sizes import has_chunks, metrics_at
    from .tropical import NO_COSTS

    p, m = int(sizes["p"]), int(sizes["m"])
    v = int(sizes["v"]) if "v" in sizes else None
    # a family without a chunks option has the v its generator builds (ZB-V, V-Min: 2)
    full = {"p": p, "m": m, "v": v if v is not None else (2 if has_chunks(family)
                                                            else f.confirmed["v"][0])}
    dev = None
    if device is not None:
        dev = int(sizes["d"]) if device == "d" and "d" in sizes else (None if device == "d" else int(device))
        if dev is None:
            raise UsageError("--device d with --at needs d=INDEX in --at")
        full["d"] = dev
    val = f.evaluate(full, costs)  # refuses sizes and costs outside the form's domain
    # The schedule's own value, computed on the form's cost slice: with every cost a free
    # symbol some schedules (V-Half, V-Min) have far too many linear pieces to enumerate.
    # A peak needs no timeline at all.
    merge = NO_COSTS if metric in ORDER_ONLY else f.merge
    try:
        sm = metrics_at(family, p, m, v if has_chunks(family) else None, merge, MAX_TERMS)
    except TooComplex as e:
        raise UsageError(f"the schedule's own value at these sizes is too complex to compute "
                         f"symbolically ({e}); the formula gives {val}") from None
    full["v"] = sm.v
    own = metric_value(sm, metric, dev).xreplace({sympy.Symbol(k): sympy.Rational(str(x))
                                                  for k, x in costs.items()})
    return {"sizes": full, "costs": {k: str(x) for k, x in costs.items()},
            "formula": str(val), "schedule": sympy.sstr(own)}
