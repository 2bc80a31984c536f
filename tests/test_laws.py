"""Laws about the optimum for every size (docs/proofs.md, "Laws about the optimum").

The optimum has no closed form, but lower bounds that hold for every schedule and
schedules certified for every size that meet them pin it: the K-in-flight law (the round
trip per K microbatches, met by ``1f1b --max-inflight K``), and at equal pass times the
split-backward bound, met by ZB-H1; which gives the exact region where ZB-H2 is not optimal
under its memory.  A law that is off is refuted at its smallest size, confirmed by the
search's proven optimum there; where the bounds do not meet, the verdict is UNKNOWN."""

from __future__ import annotations

import io
import json

import pytest

from schedverify.claims import Claim, prove
from schedverify.claims.allsizes import CertificateStore
from schedverify.cli import run

LAW = "optimal_makespan(memory=k) == (t_F + t_B)*((m + p - 1) + (ceiling(m/k) - 1)*(p - k))"
EQUAL = "t_F == 1, t_I == 1, t_W == 1, c == 0"


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


def test_where_the_bounds_do_not_meet_the_verdict_is_unknown_and_says_why(store):
    """At F : I : W = 2 : 2 : 1 the split-backward lower bound ignores memory and stays p - 1
    below ZB-H1: no all-sizes verdict (the catalogue judges it on its finite range)."""
    res = prove(Claim("makespan == optimal_makespan(memory=p, split)", "zb-h1", "t_F == 2, t_I == 2, t_W == 1, c == 0",
                      "p >= 2, m >= 1"), store=store)
    assert res.verdict == "UNKNOWN" and "bounds that do not meet" in res.reason


def test_the_cli_names_the_laws():
    code, out, _ = _cli(["prove", LAW, "--assume", "c == 0, k <= p", "--domain", "p >= 1, m >= 1, k >= 1"])
    assert code == 0 and "kind: all sizes in p >= 1, m >= 1, k >= 1" in out
    assert "by the laws about the optimum below" in out and "upper bound 1f1b --max-inflight K" in out
    code, out, _ = _cli(["prove", LAW, "--assume", "c == 0, k <= p", "--domain", "p >= 1, m >= 1, k >= 1",
                         "--format", "json"])
    assert json.loads(out)["laws"]["optimal_makespan(memory=k)"][0]["bound"] == "lower"
