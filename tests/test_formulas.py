"""Derived closed forms agree exactly with the timeline simulation (schedverify.timeline)."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schedverify import Costs, timeline
from schedverify.cli import run
from schedverify.formulas import formula, parse, smallest_m
from schedverify.formulas.sizes import build, metrics_at
from schedverify.formulas.tropical import C_ZERO, evaluate, prune

FAMILIES = ("gpipe", "1f1b")
COST_KEYS = ("t_F", "t_B", "t_I", "t_W", "c")


def _simulated(family: str, p: int, m: int, costs: dict, v: int | None = None):
    sched = build(family, p, m, v)
    return timeline(sched, costs=Costs(F=costs["t_F"], B=costs["t_B"], I=costs["t_I"],
                                       W=costs["t_W"], comm=costs["c"]))


costs_st = st.fixed_dictionaries({
    "t_F": st.integers(1, 7), "t_B": st.integers(1, 7), "t_I": st.integers(1, 7),
    "t_W": st.integers(1, 7), "c": st.integers(0, 3),
})


@settings(max_examples=20)
@given(family=st.sampled_from(FAMILIES), p=st.integers(2, 8), m=st.integers(1, 24), costs=costs_st)
def test_makespan_and_bubbles_match_the_timeline(family, p, m, costs):
    tl = _simulated(family, p, m, costs)
    met = tl.metrics()
    sizes = {"p": p, "m": m, "v": 1}
    assert formula(family, "makespan").evaluate(sizes, costs) == Fraction(met.makespan)
    busy = tl.busy()
    assert formula(family, "bubble_time").evaluate(sizes, costs) == Fraction(met.makespan - max(busy))
    assert formula(family, "bubble_fraction").evaluate(sizes, costs) == \
        1 - Fraction(sum(busy)) / (p * Fraction(met.makespan))
    ratio = formula(family, "bubble_ratio").evaluate(sizes, costs)
    assert ratio == Fraction(met.makespan - max(busy)) / Fraction(max(busy))
    d = m % p
    assert formula(family, "bubble_time", "d").evaluate({**sizes, "d": d}, costs) == \
        Fraction(met.makespan - busy[d])


@settings(max_examples=20)
@given(family=st.sampled_from(FAMILIES), p=st.integers(2, 8), m=st.integers(1, 24),
       d=st.integers(0, 7))
def test_peaks_match_the_timeline(family, p, m, d):
    d = d % p
    met = _simulated(family, p, m, dict.fromkeys(COST_KEYS, 1)).metrics()
    sizes = {"p": p, "m": m, "v": 1, "d": d}
    assert formula(family, "peak_inflight", "d").evaluate(sizes) == met.devices[d].peak_inflight
    assert formula(family, "peak_memory", "d").evaluate(sizes) == Fraction(met.devices[d].peak_memory)
    assert formula(family, "peak_inflight").evaluate(sizes) == met.peak_inflight


def test_interleaved_on_its_cost_slice_matches_the_timeline():
    f = formula("interleaved-1f1b", "makespan")
    assert "c == 0" in f.conditions
    for p, m, v in ((2, 4, 2), (4, 8, 2), (3, 6, 3), (4, 12, 3)):
        costs = {"t_F": 2, "t_B": 5, "t_I": 1, "t_W": 1, "c": 0}
        tl = _simulated("interleaved-1f1b", p, m, costs, v)
        assert f.evaluate({"p": p, "m": m, "v": v}, costs) == Fraction(tl.makespan)


@settings(max_examples=15)
@given(family=st.sampled_from(FAMILIES), p=st.integers(2, 6), m=st.integers(1, 12), costs=costs_st)
def test_symbolic_timeline_is_exact_for_every_cost(family, p, m, costs):
    """The max-of-linear-forms makespan at one size evaluates to the simulated makespan."""
    sm = metrics_at(family, p, m)
    vec = [costs[k] for k in COST_KEYS]
    assert evaluate(sm.makespan, vec) == Fraction(_simulated(family, p, m, costs).makespan)
    sm0 = metrics_at(family, p, m, None, C_ZERO)
    assert evaluate(sm0.makespan, vec[:-1] + [0]) == \
        Fraction(_simulated(family, p, m, {**costs, "c": 0}).makespan)


def test_prune_drops_dominated_and_between_terms_only():
    terms = [(2, 0, 0, 0, 0), (0, 2, 0, 0, 0), (1, 1, 0, 0, 0), (1, 0, 0, 0, 0), (0, 3, 0, 0, 0)]
    assert prune(terms) == frozenset({(2, 0, 0, 0, 0), (0, 3, 0, 0, 0)})


def test_known_closed_forms():
    p, m, t_F, t_B, c = (parse(x) for x in ("p", "m", "t_F", "t_B", "c"))
    gp = formula("gpipe", "makespan").expression
    assert (gp - ((m + p - 1) * (t_F + t_B) + 2 * (p - 1) * c)).expand() == 0
    one = formula("1f1b", "bubble_ratio").expression.subs(c, 0)
    assert (one - (p - 1) / m).simplify() == 0


def test_json_expression_parses_back():
    import json
    import io

    out = io.StringIO()
    assert run(["formula", "1f1b", "--metric", "peak_inflight", "--device", "d", "--format",
                "json"], out, io.StringIO()) == 0
    doc = json.loads(out.getvalue())
    expr = parse(doc["expression"])
    assert expr.subs({parse("p"): 4, parse("m"): 8, parse("d"): 1}) == 3
    assert "0 <= d <= p - 1" in doc["domain"]["conditions"]


def test_cli_evaluates_formula_next_to_schedule():
    import io

    out = io.StringIO()
    assert run(["formula", "gpipe", "--metric", "bubble_fraction", "--at", "p=4,m=8"], out,
               io.StringIO()) == 0
    assert "formula 3/11, schedule 3/11" in out.getvalue()


def test_smallest_m_helper():
    # 1F1B at c = 0: bubble fraction (p-1)/(m+p-1) < 5%  <=>  m > 19(p-1)
    assert smallest_m("1f1b", 4, 0.05) == 58
    assert smallest_m("gpipe", 2, 0.5) == 2


@pytest.mark.parametrize("argv", [
    ["formula", "nope"],
    ["formula", "1f1b", "--metric", "makespan", "--device", "0"],
    ["formula", "1f1b", "--at", "p=x"],
])
def test_bad_formula_input_is_exit_2(argv):
    import io

    err = io.StringIO()
    assert run(argv, io.StringIO(), err) == 2
    assert "error" in err.getvalue()
