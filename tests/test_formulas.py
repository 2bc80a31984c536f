"""Derived closed forms agree exactly with the timeline simulation (schedverify.timeline)."""

from __future__ import annotations

from fractions import Fraction
from functools import cache

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schedverify import Costs, timeline
from schedverify.errors import UsageError
from schedverify.cli import run
from schedverify.formulas import formula, parse, smallest_m
from schedverify.formulas.sizes import build, metrics_at
from schedverify.formulas.derive import SLICES
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


# --------------------------------------------------------------------------- every family

PEAKS = ("peak_inflight", "peak_inflight(d)", "peak_memory", "peak_memory(d)")
SLICE_CONDITIONS = {c for _, conds in SLICES for c in conds}
#: What is derived for each family (and on which cost slice the makespan holds): a regression
#: in the fitter shows up here, and the property below checks every form that is derived.
DERIVED = {
    "gpipe": ((), {"peak_inflight", "peak_inflight(d)", "peak_memory", "peak_memory(d)"}),
    "1f1b": ((), {"peak_inflight", "peak_inflight(d)", "peak_memory", "peak_memory(d)"}),
    "zb-h2": (("c == 0",), {"peak_inflight", "peak_inflight(d)", "peak_memory", "peak_memory(d)"}),
    "zb-v": (("c == 0", "t_I == t_F", "t_W == t_F"),
             {"peak_inflight", "peak_inflight(d)", "peak_memory", "peak_memory(d)"}),
    "v-half": (("c == 0", "t_I == t_F", "t_W == t_F"),
               {"peak_inflight", "peak_inflight(d)", "peak_memory", "peak_memory(d)"}),
    "v-min": (("c == 0", "t_I == t_F", "t_W == t_F"), set(PEAKS)),
    "dualpipe": (("c == 0", "t_I == t_F"), set(PEAKS)),
    "dualpipe-v": (("c == 0", "t_I == t_F"), set(PEAKS)),
    "chimera": ((), {"peak_inflight", "peak_inflight(d)", "peak_memory", "peak_memory(d)"}),
}
#: Forms derived on a restricted size domain only (the schedule is irregular at small m, or
#: at one device count): family -> {metric key: the domain's conditions}.  Every other form
#: holds for every size.
DOMAINS = {
    "v-half": {"makespan": ("m >= 2*p - 1",), "peak_inflight(d)": ("m >= p + 1",),
               "peak_memory(d)": ("m >= p + 1",)},
    "v-min": {"makespan": ("m >= p + 1",), "peak_memory": ("m >= floor(p/2) + 1",),
              "peak_inflight(d)": ("m >= p",), "peak_memory(d)": ("m >= p", "Ne(p, 5)")},
}
_TIMING = ("bubble_fraction", "bubble_ratio", "bubble_time(d)")


def _domain(family: str, key: str) -> tuple:
    dom = DOMAINS.get(family, {})
    return dom["makespan"] if key in _TIMING and "makespan" in dom else dom.get(key, ())


def _inside(family: str, key: str, sizes: dict) -> bool:
    return all(bool(parse(c).subs({parse(k): x for k, x in sizes.items()}))
               for c in _domain(family, key))


@cache
def _supported(family: str) -> tuple:
    """The (p, m, v) the family accepts in the confirmation range p=2..8, m=1..24."""
    from schedverify.errors import UnsupportedSize

    out = []
    for p in range(2, 9):
        for m in range(1, 25):
            try:
                sched = build(family, p, m)
            except UnsupportedSize:
                continue
            out.append((p, m, sched.stages // sched.devices))
    return tuple(out)


def _costs_in_slice(costs: dict, slice_: tuple) -> dict:
    """``costs`` moved onto the slice: each condition ``a == b`` (in order) sets a to b."""
    costs = dict(costs)
    for cond in slice_:
        a, b = (x.strip() for x in cond.split("=="))
        costs[a] = costs[b] if b in costs else int(b)
    return costs


@pytest.mark.parametrize("family", sorted(DERIVED))
def test_what_is_derived(family):
    from schedverify.formulas import NotDerived

    slice_, peaks = DERIVED[family]
    if slice_ is None:
        with pytest.raises(NotDerived):
            formula(family, "makespan")
    else:
        f = formula(family, "makespan")
        assert tuple(c for c in f.conditions if c in SLICE_CONDITIONS) == slice_
        assert f.restricted == _domain(family, "makespan")
        for key in _TIMING:
            metric, dev = (key[:-3], "d") if key.endswith("(d)") else (key, None)
            assert formula(family, metric, dev).restricted == _domain(family, key)
    for key in PEAKS:
        metric, dev = (key[:-3], "d") if key.endswith("(d)") else (key, None)
        if key in peaks:
            f = formula(family, metric, dev)
            assert f.restricted == _domain(family, key), key
            assert all(c in f.conditions for c in f.restricted)
        else:
            with pytest.raises(NotDerived):
                formula(family, metric, dev)


@settings(max_examples=40)
@given(family=st.sampled_from(sorted(DERIVED)), data=st.data(), costs=costs_st)
def test_every_derived_form_matches_the_timeline(family, data, costs):
    """For a random supported size and random costs on the form's cost slice, every derived
    metric of every family equals the timeline simulation exactly."""
    p, m, v = data.draw(st.sampled_from(_supported(family)), label="p, m, v")
    d = data.draw(st.integers(0, p - 1), label="d")
    slice_, peaks = DERIVED[family]
    sizes = {"p": p, "m": m, "v": v, "d": d}
    if slice_ is not None and not _inside(family, "makespan", sizes):
        # outside its stated domain a form refuses to answer rather than guess
        with pytest.raises(UsageError, match="holds for (m >= |Ne)"):
            formula(family, "makespan").evaluate(sizes, _costs_in_slice(costs, slice_))
    elif slice_ is not None:
        costs = _costs_in_slice(costs, slice_)
        tl = _simulated(family, p, m, costs)
        met, busy = tl.metrics(), tl.busy()
        mk = Fraction(met.makespan)
        assert formula(family, "makespan").evaluate(sizes, costs) == mk
        assert formula(family, "bubble_fraction").evaluate(sizes, costs) == \
            1 - Fraction(sum(busy)) / (p * mk)
        assert formula(family, "bubble_ratio").evaluate(sizes, costs) == \
            (mk - Fraction(max(busy))) / Fraction(max(busy))
        assert formula(family, "bubble_time", "d").evaluate(sizes, costs) == mk - Fraction(busy[d])
    met = _simulated(family, p, m, dict.fromkeys(COST_KEYS, 1)).metrics()
    want = {"peak_inflight": met.peak_inflight, "peak_memory": max(Fraction(x.peak_memory)
                                                                   for x in met.devices),
            "peak_inflight(d)": met.devices[d].peak_inflight,
            "peak_memory(d)": Fraction(met.devices[d].peak_memory)}
    for key in peaks:
        metric, dev = (key[:-3], "d") if key.endswith("(d)") else (key, None)
        if not _inside(family, key, sizes):
            with pytest.raises(UsageError, match="holds for (m >= |Ne)"):
                formula(family, metric, dev).evaluate(sizes)
            continue
        assert formula(family, metric, dev).evaluate(sizes) == want[key], key


def test_zb_h2_form_uses_the_parity_of_m():
    """ZB-H2's makespan below m = 2p - 1 depends on the parity of m: the derived form says so,
    and a form without it could not match both m = 4 and m = 5 at p = 4."""
    f = formula("zb-h2", "makespan")
    assert f.expression.has(parse("Mod(m, 2)"))
    costs = {"t_F": 3, "t_B": 1, "t_I": 4, "t_W": 2, "c": 0}
    for m in (4, 5):
        assert f.evaluate({"p": 4, "m": m, "v": 1}, costs) == \
            Fraction(_simulated("zb-h2", 4, m, costs).makespan)


def test_learned_threshold_parses_and_round_trips():
    """ZB-V's makespan splits at a threshold fitted from the schedules (not from a fixed list);
    the JSON expression parses back to the same function."""
    import io
    import json

    out = io.StringIO()
    assert run(["formula", "zb-v", "--metric", "makespan", "--format", "json"], out,
               io.StringIO()) == 0
    doc = json.loads(out.getvalue())
    expr = parse(doc["expression"])
    assert "t_I == t_F" in doc["domain"]["conditions"]
    for p, m in ((4, 5), (4, 6), (5, 7), (5, 8), (8, 11), (8, 12)):
        costs = {"t_F": 2, "t_B": 1, "t_I": 2, "t_W": 2, "c": 0}
        val = expr.subs({parse(k): x for k, x in {**costs, "p": p, "m": m, "v": 2}.items()})
        assert val == Fraction(_simulated("zb-v", p, m, costs).makespan)


def test_not_derived_says_which_sizes_broke_it():
    """A form that fits the training sizes but not one confirmation size is rejected, and the
    error names that size; values no form fits are reported as such, never guessed."""
    from schedverify.formulas import NotDerived
    from schedverify.formulas.derive import _key, _scalar

    train = {_key(p, m, 1): Fraction(p * m + 1) for p in range(2, 6) for m in range(1, 9)}
    full = {**train, _key(7, 3, 1): Fraction(22), _key(7, 4, 1): Fraction(30)}  # 7*4 + 1 = 29
    with pytest.raises(NotDerived, match=r"each fails in the confirmation range \(the first at "
                                         r"p=7, m=4, v=1\)") as e:
        _scalar("toy: peak", train, full)
    assert e.value.refuted
    noise = {_key(p, m, 1): Fraction((p * 7919 + m * 104729) % 13) for p in range(2, 8)
             for m in range(1, 17)}
    with pytest.raises(NotDerived, match="fits the 96 training sizes") as e:
        _scalar("toy: noise", noise, noise)
    assert not e.value.refuted


def test_v_min_peak_memory_leaves_out_the_one_irregular_device_count():
    """V-Min's per-device peak memory is derived on m >= p without p = 5: the greedy squeeze
    of warm-up and cool-down (as the paper's reference implementation does it) leaves device 2
    one activation below the cap there, at every m, and at no other device count.  The form
    says so in its domain, refuses p = 5, and holds a full period of p past its training."""
    f = formula("v-min", "peak_memory", "d")
    assert f.restricted == ("m >= p", "Ne(p, 5)")
    ones = dict.fromkeys(COST_KEYS, 1)
    raw = f.expression.subs({parse("p"): 5, parse("d"): 2})
    for m in (5, 9, 17):
        assert Fraction(_simulated("v-min", 5, m, ones).metrics().devices[2].peak_memory) == raw - 1
        with pytest.raises(UsageError, match=r"holds for Ne\(p, 5\) only"):
            f.evaluate({"p": 5, "m": m, "v": 2, "d": 2})
    for p in (8, 11, 12, 13):
        met = _simulated("v-min", p, p + 3, ones).metrics()
        for d in range(p):
            assert f.evaluate({"p": p, "m": p + 3, "v": 2, "d": d}) == \
                Fraction(met.devices[d].peak_memory), (p, d)


def test_v_min_peak_is_periodic_in_p_beyond_the_confirmation_range():
    """V-Min's peak is fitted with a feature of period 3 in p (its cap grows by 2 every third
    device count); the derived form holds well past the sizes it was fitted and confirmed on."""
    f = formula("v-min", "peak_inflight")
    assert f.expression.has(parse("floor((p + 1)/3)"))
    for p in (10, 11, 12, 13):
        for m in (1, 2, 4, 5, 30):
            met = _simulated("v-min", p, m, dict.fromkeys(COST_KEYS, 1)).metrics()
            assert f.evaluate({"p": p, "m": m, "v": 2}) == met.peak_inflight, (p, m)


def test_restricted_domain_is_needed_and_enforced():
    """V-Half's makespan is derived on m >= 2p - 1 only.  Below it the schedule is irregular
    (at p = 7 the makespan falls from m = 7 to m = 8): the form without its domain would be
    wrong there, so evaluating it there is refused (exit 2), while inside it is exact."""
    import io

    f = formula("v-half", "makespan")
    assert f.restricted == ("m >= 2*p - 1",)
    costs = {"t_F": 1, "t_B": 1, "t_I": 1, "t_W": 1, "c": 0}
    mk7 = _simulated("v-half", 7, 7, costs).makespan
    assert _simulated("v-half", 7, 8, costs).makespan < mk7  # not monotone in m
    raw = f.expression.subs({parse(k): x for k, x in {**costs, "p": 7, "m": 7, "v": 2}.items()})
    assert raw != mk7  # the domain is honest: the large-m form does not hold there
    with pytest.raises(UsageError, match="m >= 2\\*p - 1"):
        f.evaluate({"p": 7, "m": 7, "v": 2}, costs)
    assert f.evaluate({"p": 7, "m": 13, "v": 2}, costs) == \
        Fraction(_simulated("v-half", 7, 13, costs).makespan)
    err = io.StringIO()
    assert run(["formula", "v-half", "--metric", "makespan", "--at", "p=7,m=7"],
               io.StringIO(), err) == 2
    assert "m >= 2*p - 1" in err.getvalue()
    # inside the domain, --at shows the schedule's own value next to the form's: computed on
    # the form's cost slice (with every cost free it once ran for over ten minutes)
    out = io.StringIO()
    assert run(["formula", "v-half", "--metric", "makespan", "--at", "p=7,m=13",
                "--costs", "t_F=1,t_B=1,t_I=1,t_W=1,c=0"], out, io.StringIO()) == 0
    assert "formula 95, schedule 95" in out.getvalue()


def test_a_piece_no_confirmation_size_tests_is_not_accepted():
    """A piece fitted on a few training sizes and met nowhere else is an unconfirmed guess."""
    from schedverify.formulas.derive import Piece, _every_piece_tested

    pieces = [Piece("m >= p", {}), Piece(None, {})]
    train = {(p, m, 1, 0): 0 for p in (2, 3) for m in range(1, 7)}
    beyond_hi = {**train, (4, 9, 1, 0): 0}
    assert not _every_piece_tested(pieces, train, beyond_hi)  # the m < p piece is never tested
    assert _every_piece_tested(pieces, train, {**beyond_hi, (4, 2, 1, 0): 0})


def test_fit_offers_the_polynomial_and_the_feature_form():
    """Where m < p on few sizes, 2*m and 2 + 2*ceiling((m - 1)/p) agree; both are offered,
    polynomial first, and only the polynomial survives m = 3 at p = 8."""
    from schedverify.formulas.derive import _fits, _key, fit

    data = {_key(p, m, 2): Fraction(2 * m) for p in range(2, 6) for m in (1, 2) if m < p // 2 + 1}
    alts = _fits(data)
    assert len(alts) == 2
    assert fit.evaluate(alts[0], _key(8, 3, 2)) == 6 and fit.evaluate(alts[1], _key(8, 3, 2)) == 4


def test_costs_outside_the_forms_slice_are_refused():
    """ZB-V's makespan is derived for c = 0 and t_I = t_W = t_F only: evaluating it elsewhere
    is an error (exit 2), not a wrong number."""
    import io

    err = io.StringIO()
    assert run(["formula", "zb-v", "--at", "p=4,m=8", "--costs", "t_F=1,t_I=2"], io.StringIO(),
               err) == 2
    assert "t_I == t_F" in err.getvalue()


def test_at_evaluates_a_peak_from_the_order_with_the_familys_own_v():
    """``--at`` on a peak needs no timeline (V-Min's symbolic timeline at p = 8 has more pieces
    than the budget), and a family without a chunks option is evaluated at the v it builds."""
    import io
    import json

    out = io.StringIO()
    assert run(["formula", "v-min", "--metric", "peak_memory", "--device", "d",
                "--at", "p=8,m=9,d=1", "--format", "json"], out, io.StringIO()) == 0
    at = json.loads(out.getvalue())["at"]
    assert at["sizes"] == {"p": 8, "m": 9, "v": 2, "d": 1}
    want = _simulated("v-min", 8, 9, dict.fromkeys(COST_KEYS, 1)).metrics().devices[1].peak_memory
    assert at["formula"] == at["schedule"] == str(Fraction(want))


@settings(max_examples=15)
@given(data=st.data(), t_F=st.integers(1, 9), t_W=st.integers(1, 9))
def test_costs_outside_the_widest_forms_slice_get_the_form_of_a_slice_that_holds_them(
        data, t_F, t_W):
    """ZB-V's widest form needs t_I = t_W = t_F (it covers every m).  With t_W free (t_I = t_F,
    c = 0) a form holds for m >= 2p - 1; formula_at picks it, and it equals the timeline."""
    from schedverify.formulas import formula_at

    p = data.draw(st.integers(2, 9), label="p")
    m = data.draw(st.integers(1, 24), label="m")
    costs = {"t_F": t_F, "t_B": 1, "t_I": t_F, "t_W": t_W, "c": 0}
    f = formula_at("zb-v", "makespan", costs=costs)
    if t_W == t_F:
        assert f == formula("zb-v", "makespan")
    else:
        assert f.cost_slice == ("c == 0", "t_I == t_F") and f.restricted == ("m >= 2*p - 1",)
    sizes = {"p": p, "m": m, "v": 2}
    if m < 2 * p - 1 and t_W != t_F:
        with pytest.raises(UsageError, match=r"holds for m >= 2\*p - 1"):
            f.evaluate(sizes, costs)
        return
    assert f.evaluate(sizes, costs) == Fraction(_simulated("zb-v", p, m, costs).makespan)


def test_no_form_for_costs_outside_every_derived_slice():
    """Three different split costs: no slice of ZB-V's derived forms holds them, so the answer
    is an error naming the costs (exit 2 from the CLI), not the wrong form's number."""
    import io

    from schedverify.formulas import formula_at

    with pytest.raises(UsageError, match="no form holds at the costs t_F=1, t_B=1, t_I=2, t_W=3"):
        formula_at("zb-v", "makespan", costs={"t_F": 1, "t_B": 1, "t_I": 2, "t_W": 3, "c": 0})
    err = io.StringIO()
    assert run(["formula", "zb-v", "--slice", "c == 1"], io.StringIO(), err) == 2
    assert "is not one of" in err.getvalue()
    out = io.StringIO()
    assert run(["formula", "zb-v", "--slice", "c==0,t_I==t_F", "--format", "json"], out,
               io.StringIO()) == 0
    assert "t_I == t_F" in out.getvalue() and "t_W == t_F" not in out.getvalue()


# --------------------------------------------------------------------------- shipped forms


@pytest.mark.parametrize("family", ["gpipe", "1f1b"])
def test_shipped_forms_equal_a_fresh_derivation(family):
    """The forms file is what the derivation gives today (.ci/formulas checks every family)."""
    import json

    from schedverify.formulas import rebuild, shipped

    fresh = json.loads(json.dumps(rebuild.family_entries(family)))
    assert fresh == shipped.load()["families"][family]
    assert set(fresh) == {shipped.key_of(metric, dev) for metric, dev in shipped.shipped_keys()}


def test_formula_reads_the_shipped_form_without_deriving(monkeypatch):
    """A shipped form (any family, per device, for one device number, or a form the
    derivation did not find) is read, not derived: the deriver is made to fail."""
    import sys

    from schedverify.formulas import NotDerived, closed, shipped

    derive_mod = sys.modules["schedverify.formulas.derive"]

    def no(*args, **kwargs):
        raise AssertionError("derived although shipped")

    expected = {family: formula(family, *key) for family, key in (
        ("v-min", ("makespan",)), ("zb-v", ("peak_inflight", "d")), ("1f1b", ("busy",)))}
    formula.cache_clear()
    monkeypatch.setattr(closed, "derive_raw", no)
    monkeypatch.setattr(closed, "derive_part", no)
    monkeypatch.setattr(derive_mod, "derive_part", no)
    try:
        for family in ("gpipe", "v-min", "v-half", "zb-v", "chimera"):
            for metric, dev in shipped.shipped_keys():
                try:
                    f = formula(family, metric, dev)
                except NotDerived as e:
                    assert e.args[0] == shipped.entry(family, metric, dev)["not_derived"]
                    continue
                assert f.expression == shipped.parse_srepr(shipped.entry(family, metric, dev)["srepr"])
        for family, key in (("v-min", ("makespan",)), ("zb-v", ("peak_inflight", "d")),
                            ("1f1b", ("busy",))):
            assert formula(family, *key) == expected[family]
        assert formula("1f1b", "peak_inflight", 1).text() == "Piecewise((p - 1, m >= p - 1), (m, True))"
        with pytest.raises(AssertionError, match="derived although shipped"):
            formula("zb-v", "makespan", None, ("c == 0", "t_I == t_F"))  # not shipped: derived
    finally:
        formula.cache_clear()


@pytest.mark.parametrize("family, metric, device", [
    ("1f1b", "peak_inflight", 0), ("1f1b", "peak_memory", 1), ("gpipe", "bubble_time", 2),
    ("1f1b", "busy", 1)])
def test_a_shipped_form_for_one_device_equals_the_derived_one(family, metric, device):
    from schedverify.formulas import derive_formula

    assert formula(family, metric, device) == derive_formula(family, metric, device)


def test_srepr_reader_builds_only_formula_expressions():
    from schedverify.formulas.shipped import parse_srepr

    p, m = parse("p"), parse("m")
    assert parse_srepr("Add(Symbol('p'), Mul(Integer(-2), Symbol('m')))") == p - 2 * m
    for bad in ("__import__('os').system('true')", "Symbol('x')", "Symbol('p', integer=True)",
                "eval('1')", "Integer(1).__class__"):
        with pytest.raises(ValueError, match="not a derived form"):
            parse_srepr(bad)


def test_text_output_labels_the_domain_with_what_was_confirmed():
    import io

    out = io.StringIO()
    assert run(["formula", "zb-v", "--metric", "bubble_fraction"], out, io.StringIO()) == 0
    domain = next(line for line in out.getvalue().splitlines() if line.startswith("  domain:"))
    assert domain.endswith("t_W == t_F; confirmed on p=2..8, m=1..24"), domain
    out = io.StringIO()
    assert run(["formula", "1f1b", "--metric", "makespan"], out, io.StringIO()) == 0  # proofs.json
    assert "c >= 0; proved for every size in its domain\n" in out.getvalue()
    out = io.StringIO()  # proved at each v it holds for (v = 2, 3), by the bound certificate
    assert run(["formula", "interleaved-1f1b", "--metric", "peak_memory"], out, io.StringIO()) == 0
    assert "2 <= v <= 3; proved for every size in its domain\n" in out.getvalue()
    out = io.StringIO()  # looped-bfs's timing certificate is on c == 0: its form for c >= 0 stays confirmed
    assert run(["formula", "looped-bfs", "--metric", "makespan"], out, io.StringIO()) == 0
    assert "c >= 0; confirmed on p=2..8, m=1..24, v=1..3\n" in out.getvalue()


def test_at_outside_the_confirmed_range_warns_and_says_so_in_json():
    import io
    import json

    # zb-v has no all-sizes certificate: its form is confirmed on a range, not proved
    err = io.StringIO()
    out = io.StringIO()
    assert run(["formula", "zb-v", "--metric", "bubble_fraction", "--at", "p=32,m=128"], out,
               err) == 0
    assert err.getvalue() == ("warning: p=32, m=128 is outside the confirmed range p=2..8, "
                              "m=1..24: the form is extrapolated\n")
    assert "formula 31/799, schedule 31/799" in out.getvalue()
    out, err = io.StringIO(), io.StringIO()
    assert run(["formula", "zb-v", "--metric", "bubble_fraction", "--at", "p=32,m=128",
                "--format", "json"], out, err) == 0
    at = json.loads(out.getvalue())["at"]
    assert at["extrapolated"] is True and "extrapolated" in at["warning"]
    assert at["status"] == "confirmed on p=2..8, m=1..24" and err.getvalue() == ""
    out, err = io.StringIO(), io.StringIO()
    assert run(["formula", "zb-v", "--metric", "bubble_fraction", "--at", "p=8,m=24",
                "--format", "json"], out, err) == 0
    doc = json.loads(out.getvalue())
    assert doc["at"]["extrapolated"] is False and doc["at"]["warning"] is None
    assert doc["domain"]["proved"] is False
    # a form proved for every size is not extrapolated anywhere
    out, err = io.StringIO(), io.StringIO()
    assert run(["formula", "1f1b", "--metric", "bubble_fraction", "--at", "p=32,m=128"], out, err) == 0
    assert err.getvalue() == "" and "formula 31/159, schedule 31/159" in out.getvalue()
    err = io.StringIO()
    assert run(["formula", "1f1b", "--metric", "makespan", "--at", "p=4,m=8"], io.StringIO(),
               err) == 0
    assert err.getvalue() == ""
    # a chunked family: v outside the confirmed chunks is extrapolated too
    f = formula("looped-bfs", "makespan")
    assert f.extrapolated({"p": 4, "m": 8, "v": 2}) is None
    assert f.extrapolated({"p": 4, "m": 8, "v": 4}) == (
        "p=4, m=8, v=4 is outside the confirmed range p=2..8, m=1..24, v=1..3: the form is "
        "extrapolated")
    # and a form proved for every p and m at v = 2, 3 is still extrapolated at v = 4
    f = formula("interleaved-1f1b", "peak_inflight")
    assert f.proved and f.extrapolated({"p": 40, "m": 800, "v": 3}) is None
    assert f.extrapolated({"p": 4, "m": 8, "v": 4}) == (
        "v=4 is outside the chunk counts the form is proved for (v=2..3): the form is extrapolated")


def test_smallest_m_beyond_the_confirmed_range_warns():
    import io

    err, out = io.StringIO(), io.StringIO()
    assert run(["formula", "zb-v", "--smallest-m-below", "0.01", "--at", "p=4"], out, err) == 0
    assert "smallest m with bubble_fraction < 0.01 at p=4: 50" in out.getvalue()
    assert "p=4, m=50 is outside the confirmed range p=2..8, m=1..24" in err.getvalue()


def test_proof_status_is_confirmed_until_a_proof_of_that_very_form_is_recorded(monkeypatch):
    from schedverify.formulas import proof_status, shipped

    assert proof_status("zb-v", "bubble_fraction") == "confirmed on p=2..8, m=1..24"
    assert proof_status("1f1b", "makespan") == "proved for every size in its domain"  # proofs.json
    assert proof_status("v-min", "peak_memory", "d") == "confirmed on p=2..11, m=1..24"
    text = formula("1f1b", "peak_inflight", "d").text()
    records = {"1f1b/peak_inflight(d)": {"expression": text, "by": "test"},
               "1f1b/makespan": {"expression": "a form that is not the shipped one", "by": "test"}}
    monkeypatch.setattr(shipped, "_proofs", lambda path=None: records)
    assert proof_status("1f1b", "peak_inflight", "d") == "proved for every size in its domain"
    assert proof_status("1f1b", "peak_inflight", 3) == "proved for every size in its domain"
    assert formula("1f1b", "peak_inflight", "d").extrapolated({"p": 64, "m": 512}) is None
    assert proof_status("1f1b", "makespan") == "confirmed on p=2..8, m=1..24"


def test_rebuild_writes_the_forms_file_for_one_family(tmp_path):
    """``formula FAMILY --rebuild -o PATH`` derives that family's forms and writes them (the
    other families of an existing file are kept); the text is the shipped one's."""
    import io
    import json

    from schedverify.formulas import shipped

    path = tmp_path / "forms.json"
    path.write_text(shipped.dumps({"chimera": {"makespan": {"not_derived": "kept"}}}))
    err = io.StringIO()
    assert run(["formula", "gpipe", "--rebuild", "-o", str(path)], io.StringIO(), err) == 0
    assert f"wrote {path}" in err.getvalue()
    doc = json.loads(path.read_text())
    assert doc["families"]["chimera"] == {"makespan": {"not_derived": "kept"}}
    assert doc["families"]["gpipe"] == shipped.load()["families"]["gpipe"]
    assert path.read_text() == shipped.dumps(doc["families"])
    assert [p.name for p in tmp_path.iterdir()] == ["forms.json"]  # no temporary left
    err = io.StringIO()
    assert run(["formula"], io.StringIO(), err) == 2 and "give a FAMILY" in err.getvalue()


def test_the_json_read_from_the_file_is_the_forms_own():
    """``formula`` prints a shipped form from the file without building it in sympy: what it
    reads is exactly ``Formula.to_json()`` of the form, for every family and shipped key."""
    from schedverify.formulas import NotDerived, shipped
    from schedverify.generators import FAMILIES

    for family in FAMILIES:
        for metric, dev in shipped.shipped_keys():
            try:
                want = formula(family, metric, dev).to_json()
            except NotDerived as e:
                with pytest.raises(NotDerived) as got:
                    shipped.json_doc(family, metric, dev)
                assert str(got.value) == str(e)
                continue
            assert shipped.json_doc(family, metric, dev) == want, (family, metric, dev)
    assert shipped.json_doc("1f1b", "peak_inflight", 2) is None  # one device: assembled


def test_a_cold_formula_command_imports_no_sympy_and_derives_nothing():
    """In a fresh process, ``formula FAMILY --metric M`` answers from the shipped file: sympy
    is never imported, nothing is derived (the part deriver is never called)."""
    import os
    import subprocess
    import sys

    code = ("import sys, io\n"
            "import schedverify.formulas.derive as d\n"
            "d.derive_part = None\n"
            "from schedverify.cli import run\n"
            "out = io.StringIO()\n"
            "assert run(['formula', 'v-min', '--metric', 'makespan'], out, sys.stderr) == 0\n"
            "assert run(['formula', 'zb-v', '--metric', 'peak_memory', '--device', 'd',\n"
            "            '--format', 'json'], out, sys.stderr) == 0\n"
            "print(out.getvalue())\n"
            "print('sympy loaded:', 'sympy' in sys.modules)\n")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          check=True)
    assert "v-min makespan = t_F*(6*m + 6*p - 4*floor(p/3) - 2*floor(p/3 + 1/3) - 7)" in done.stdout
    assert "; confirmed on p=2..9, m=1..24\n" in done.stdout
    assert '"metric": "peak_memory", "device": "d"' in done.stdout
    assert done.stdout.rstrip().endswith("sympy loaded: False")
