"""Laws about the optimum for every size (docs/proofs.md, "Laws about the optimum").

The optimum has no closed form, but lower bounds that hold for every schedule and
schedules certified for every size that meet them pin it: the K-in-flight law (the round
trip per K microbatches, met by ``1f1b --max-inflight K``), and at equal pass times the
split-backward bound, met by ZB-H1; which gives the exact region where ZB-H2 is not optimal
under its memory; and at F : I : W = 2 : 2 : 1 the bounds that read the memory limit, met by
ZB-H1 under 1F1B's memory.  A law that is off is refuted at its smallest size, confirmed by the
search's proven optimum there; where the bounds do not meet, the verdict is UNKNOWN."""

from __future__ import annotations

import io
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schedverify.claims import Claim, prove
from schedverify.claims.allsizes import CertificateStore
from schedverify.cli import run

LAW = "optimal_makespan(memory=k) == (t_F + t_B)*((m + p - 1) + (ceiling(m/k) - 1)*(p - k))"
EQUAL = "t_F == 1, t_I == 1, t_W == 1, c == 0"
TWO_TWO_ONE = "t_F == 2, t_I == 2, t_W == 1, c == 0"


@pytest.fixture(scope="module")
def store():
    return CertificateStore()


def _cli(argv):
    out, err = io.StringIO(), io.StringIO()
    return run(argv, out, err), out.getvalue(), err.getvalue()


@pytest.mark.parametrize("assume", ["t_F == 1, t_B == 2, c == 0, k <= p", "c == 0, k <= p"])
def test_the_k_in_flight_law_is_proved_for_every_size(assume, store):
    res = prove(Claim(LAW, "", assume, "p >= 1, m >= 1, k >= 1"), store=store)
    assert res.verdict == "PROVED", res.to_json()
    assert res.kind == "all sizes in p >= 1, m >= 1, k >= 1"
    laws = [b["law"] for b in res.laws["optimal_makespan(memory=k)"]]
    assert "round trips with K in flight" in laws and "1f1b --max-inflight K" in laws


def test_a_law_that_is_off_is_refuted_at_its_smallest_size_by_the_search(store):
    text = LAW.replace("(p - k))", "(p - k + 1))")
    res = prove(Claim(text, "", "t_F == 1, t_B == 2, c == 0, k <= p", "p >= 2, m >= 1, k >= 1"), store=store)
    assert res.verdict == "REFUTED", res.to_json()
    assert res.counterexample["sizes"] == {"p": 2, "m": 2, "v": 1, "k": 1}
    assert res.counterexample["proven"] and "none with smaller k" in res.minimal
    # past K = p the 1F1B bound is the law's upper one: its value (m + p - 1)(t_F + t_B) is not
    # the round-trip formula, whose (p - k) turns negative
    res = prove(Claim(LAW, "", "t_F == 1, t_B == 1, c == 0", "p >= 2, m >= 1, k >= 1"), store=store)
    assert res.verdict == "REFUTED" and res.counterexample["sizes"]["k"] > res.counterexample["sizes"]["p"]


def test_zb_h1_is_optimal_at_equal_pass_times_for_every_size(store):
    res = prove(Claim("makespan == optimal_makespan(memory=p, split)", "zb-h1", EQUAL, "p >= 2, m >= 1"),
                store=store)
    assert res.verdict == "PROVED" and res.kind == "all sizes in p >= 2, m >= 1, v == 1", res.to_json()


def test_the_region_where_zb_h2_is_not_optimal_is_exactly_3_to_2p_minus_3(store):
    worse = prove(Claim("makespan > optimal_makespan(memory=2*p - 1, split)", "zb-h2",
                        EQUAL + ", m >= 3, m <= 2*p - 3", "p >= 2, m >= 1"), store=store)
    assert worse.verdict == "PROVED", worse.to_json()
    for outside in ("m <= 2", "m >= 2*p - 2"):
        res = prove(Claim("makespan == optimal_makespan(memory=2*p - 1, split)", "zb-h2",
                          f"{EQUAL}, {outside}", "p >= 2, m >= 1"), store=store)
        assert res.verdict == "PROVED", (outside, res.to_json())
    res = prove(Claim("makespan == optimal_makespan(memory=2*p - 1, split)", "zb-h2", EQUAL, "p >= 2, m >= 1"),
                store=store)
    assert res.verdict == "REFUTED" and res.counterexample["sizes"] == {"p": 3, "m": 3, "v": 1}
    assert (res.counterexample["lhs"], res.counterexample["rhs"]) == ("12", "11")


def test_zb_h1_is_optimal_under_1f1bs_memory_at_2_2_1_for_every_size(store):
    """At the paper's profiled F : I : W = 2 : 2 : 1 the split-backward bound ignores memory
    and stays p - 1 below ZB-H1; what device 0 must free before its last forward under memory
    p (law (6)) meets ZB-H1 for m > p, the last device's last input-gradient (law (5)) for
    m <= p, and the optimum has a closed form."""
    res = prove(Claim("makespan == optimal_makespan(memory=p, split)", "zb-h1", TWO_TWO_ONE, "p >= 2, m >= 1"),
                store=store)
    assert res.verdict == "PROVED" and res.kind == "all sizes in p >= 2, m >= 1, v == 1", res.to_json()
    laws = [b["law"] for b in res.laws["optimal_makespan(memory=p, split)"]]
    assert "device 0's last forward under the memory limit" in laws
    assert "the last device's last input-gradient" in laws
    res = prove(Claim("optimal_makespan(memory=p, split) == (m + p - 1)*(t_F + t_I) + Max(1, m - p + 1)*t_W", "",
                      TWO_TWO_ONE, "p >= 2, m >= 1"), store=store)
    assert res.verdict == "PROVED", res.to_json()
    # one t_W off, on either side of the breakpoint m = p: refuted, at its smallest size
    for wrong, at in (("Max(1, m - p + 2)", {"p": 2, "m": 2}), ("Max(1, m - p)", {"p": 2, "m": 3})):
        res = prove(Claim(f"optimal_makespan(memory=p, split) == (m + p - 1)*(t_F + t_I) + {wrong}*t_W", "",
                          TWO_TWO_ONE, "p >= 2, m >= 1"), store=store)
        assert res.verdict == "REFUTED" and res.counterexample["sizes"] == at | {"v": 1}, (wrong, res.to_json())


def test_zb_h1_is_optimal_under_1f1bs_memory_wherever_w_is_the_cheapest_pass(store, tmp_path):
    """On the cone where t_W is the smallest cost (the paper's profiled ratio inside it) ZB-H1's
    certified makespan meets laws (5) and (6) at every size and every such cost.  Outside it
    the laws leave a gap, and the search, which needs costs pinned, cannot look: UNKNOWN,
    saying so, never a usage error; a catalogue run on finite ranges says the same."""
    claim = "makespan == optimal_makespan(memory=p, split)"
    res = prove(Claim(claim, "zb-h1", "c == 0, t_W <= t_F, t_W <= t_I", "p >= 2, m >= 1"), store=store)
    assert res.verdict == "PROVED" and res.kind == "all sizes in p >= 2, m >= 1, v == 1", res.to_json()
    res = prove(Claim(claim, "zb-h1", "c == 0, t_W <= t_I", "p >= 2, m >= 1"), store=store)
    assert res.verdict == "UNKNOWN" and "bounds that do not meet" in res.reason, res.to_json()
    assert "did not look for a counterexample: it needs every cost pinned" in res.reason
    cat = tmp_path / "free.toml"
    cat.write_text(f'source = "a test"\n[[claim]]\nid = "free"\nfamily = "zb-h1"\ntext = "{claim}"\n'
                   f'assume = "c == 0, t_W <= t_F, t_W <= t_I"\ndomain = "p=2..3,m=1..3,v=1..1"\n'
                   f'verdict = "PROVED"\n')
    assert _cli(["prove", str(cat)])[0] == 0
    code, out, _ = _cli(["prove", str(cat), "--finite-only"])
    assert code == 3 and "UNKNOWN" in out and "judged for all sizes only" in out, out


@settings(max_examples=4)
@given(t=st.tuples(*[st.integers(1, 3)] * 3), c=st.sampled_from([0, 1]), half=st.booleans())
def test_the_split_backward_laws_never_exceed_the_searchs_proven_optimum(t, c, half):
    """Laws (5) and (6) are lower bounds on every schedule: at every size of a small grid, for
    costs and a memory limit drawn at random (a half-integer one too), the search's proven
    optimum is at least each of them (judged on the finite range: the laws take no part)."""
    tF, tI, tW = t
    E = "k + 1/2" if half else "k"
    assume = f"t_F == {tF}, t_I == {tI}, t_W == {tW}, c == {c}"
    law6 = (f"Max(0, (p - k)*t_F + (p - 1)*t_I) + (m - 1)*t_F + (m - ({E}))*Min(t_I + t_W, 2*t_I)"
            " + p*(t_F + t_I) + t_W")
    for claim, extra, grid in (("optimal_makespan(split) >= (m + p - 1)*(t_F + t_I) + t_W", "", "p=2..3,m=1..4"),
                               (f"optimal_makespan(memory={E}, split) >= {law6}", ", m >= k + 1",
                                "p=2..3,m=1..4,k=1..2")):
        res = prove(Claim(claim, "", assume + extra, grid), timeout_s=20)
        assert res.verdict == "PROVED" and res.kind.startswith("finite range"), (claim, assume, res.to_json())


def test_where_the_bounds_do_not_meet_the_verdict_is_unknown_and_says_why(store):
    """Under memory p - 1 no certified schedule fits (ZB-H1 holds p): only lower bounds, so a
    claim that bounds the optimum from above is decided by no law; the search finds no
    counterexample within its budget, and the verdict is UNKNOWN with that reason."""
    res = prove(Claim("optimal_makespan(memory=p - 1, split) <= 100*m*p", "", TWO_TWO_ONE, "p >= 2, m >= 1"),
                timeout_s=2, store=store)
    assert res.verdict == "UNKNOWN" and "bounds that do not meet" in res.reason, res.to_json()


def test_a_refuted_claim_about_the_optimum_says_the_search_confirmed_it():
    """The smallest counterexample of a claim about the optimum is the search's proven optimum
    at that size, not a simulated schedule."""
    code, out, _ = _cli(["prove", "optimal_makespan(memory=p - 1, split) >= 5*m + 3*p + 3", "--assume",
                         TWO_TWO_ONE + ", m >= p", "--domain", "p >= 2, m >= 1", "--timeout", "5"])
    assert code == 1 and "counterexample: p=2, m=2" in out, out
    assert "confirmed by the search's proven optimum there" in out and "simulating" not in out, out


def test_the_cli_names_the_laws():
    code, out, _ = _cli(["prove", LAW, "--assume", "c == 0, k <= p", "--domain", "p >= 1, m >= 1, k >= 1"])
    assert code == 0 and "kind: all sizes in p >= 1, m >= 1, k >= 1" in out
    assert "by the laws about the optimum below" in out and "upper bound 1f1b --max-inflight K" in out
    code, out, _ = _cli(["prove", LAW, "--assume", "c == 0, k <= p", "--domain", "p >= 1, m >= 1, k >= 1",
                         "--format", "json"])
    assert json.loads(out)["laws"]["optimal_makespan(memory=k)"][0]["bound"] == "lower"
