"""The claim prover: true claims PROVED, false ones REFUTED with a counterexample that
reproduces through the CLI, parse errors are exit 2, and the catalogue loads."""

from __future__ import annotations

import io
import json
import shlex
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schedverify import Costs, timeline
from schedverify.claims import Claim, prove
from schedverify.claims.catalogue import load
from schedverify.cli import run
from schedverify.formulas.sizes import build

PROOFS = Path(__file__).resolve().parent.parent / "proofs"


def _cli(argv):
    out, err = io.StringIO(), io.StringIO()
    return run(argv, out, err), out.getvalue(), err.getvalue()


@pytest.mark.parametrize("text,family,assume,domain", [
    ("peak_inflight(d) == Min(p - d, m)", "1f1b", "", "p=2..6,m=1..12"),
    ("bubble_ratio == (p - 1)/m", "1f1b", "c == 0", "p=2..6,m=1..12"),
    ("bubble_fraction == (p - 1)/(m + p - 1)", "gpipe", "c == 0", "p=2..6,m=1..12"),
    ("makespan == makespan@gpipe", "1f1b", "c == 0", "p=2..5,m=1..10"),
    ("makespan >= (m + p - 1)*(t_F + t_B)", "1f1b", "", "p=2..4,m=1..6"),
    ("bubble_ratio == (p - 1)/(v*m)", "interleaved-1f1b", "c == 0", "p=2..4,m=1..8,v=2..2"),
])
def test_true_claims_are_proved(text, family, assume, domain):
    res = prove(Claim(text, family, assume, domain))
    assert res.verdict == "PROVED", res.to_json()
    assert res.checked > 0 and res.counterexample is None


@pytest.mark.parametrize("text,family,assume,domain,sizes", [
    ("peak_inflight(0) == p - 1", "1f1b", "m >= p", "p=2..6,m=1..12", {"p": 2, "m": 2}),
    ("bubble_fraction == (p - 1)/m", "1f1b", "c == 0", "p=2..6,m=1..12", {"p": 2, "m": 1}),
    ("makespan <= makespan@gpipe", "1f1b", "", "p=2..4,m=1..6", {"p": 2, "m": 3}),
    ("1 - peak_inflight(0)/peak_inflight@gpipe(0) == 1/4", "1f1b", "", "p=4..4,m=4..4",
     {"p": 4, "m": 4}),
])
def test_false_claims_are_refuted_with_a_reproducing_counterexample(text, family, assume,
                                                                    domain, sizes):
    res = prove(Claim(text, family, assume, domain))
    assert res.verdict == "REFUTED"
    ce = res.counterexample
    assert {k: ce["sizes"][k] for k in sizes} == sizes
    assert ce["lhs"] != ce["rhs"]
    argv = shlex.split(ce["command"])
    assert argv[0] == "schedverify"
    code, out, _ = _cli(argv[1:] + ["--format", "json"])
    assert code == 1
    again = json.loads(out)
    assert again["verdict"] == "REFUTED"
    assert again["counterexample"]["lhs"] == ce["lhs"] and again["counterexample"]["rhs"] == ce["rhs"]


def test_counterexample_costs_reproduce_in_the_simulator():
    res = prove(Claim("makespan <= makespan@gpipe", "1f1b", "", "p=2..4,m=1..6"))
    ce = res.counterexample
    costs = {k: float(Fraction(v)) for k, v in ce["costs"].items()}
    kw = dict(F=costs["t_F"], B=costs["t_B"], comm=costs["c"])
    p, m = ce["sizes"]["p"], ce["sizes"]["m"]
    one = timeline(build("1f1b", p, m), costs=Costs(**kw)).makespan
    gp = timeline(build("gpipe", p, m), costs=Costs(**kw)).makespan
    assert Fraction(one) == Fraction(ce["lhs"]) and Fraction(gp) == Fraction(ce["rhs"])
    assert one > gp


@settings(max_examples=12)
@given(p=st.integers(2, 6), m=st.integers(1, 12), k=st.integers(0, 3))
def test_prover_agrees_with_the_simulated_peak(p, m, k):
    """A claim that pins the peak to its simulated value is proved; off by k+1 refuted."""
    peak = timeline(build("1f1b", p, m)).metrics().devices[0].peak_inflight
    dom = f"p={p}..{p},m={m}..{m}"
    assert prove(Claim(f"peak_inflight(0) == {peak}", "1f1b", "", dom)).verdict == "PROVED"
    assert prove(Claim(f"peak_inflight(0) == {peak + k + 1}", "1f1b", "", dom)).verdict == "REFUTED"


def test_unsupported_sizes_are_skipped_and_listed():
    res = prove(Claim("bubble_ratio == (p - 1)/(v*m)", "interleaved-1f1b", "c == 0",
                      "p=4..4,m=1..8,v=2..2"))
    assert res.verdict == "PROVED"
    assert (4, 1, 2) in res.skipped and res.checked > 0


def test_cli_exit_codes_and_json():
    code, out, _ = _cli(["prove", "--family", "1f1b", "peak_inflight <= p", "--domain",
                         "p=2..4,m=1..8", "--format", "json"])
    assert code == 0 and json.loads(out)["verdict"] == "PROVED"
    code, out, _ = _cli(["prove", "--family", "1f1b", "peak_inflight < p", "--domain",
                         "p=2..4,m=1..8"])
    assert code == 1 and "counterexample" in out


@pytest.mark.parametrize("argv,needle", [
    (["prove", "--family", "1f1b", "peak_inflght(0) == 1"], "unknown name"),
    (["prove", "--family", "1f1b", "makespan = 1"], "no relation"),
    (["prove", "--family", "1f1b", "makespan == 1", "--domain", "p=3..2"], "empty range"),
    (["prove", "--family", "nope", "makespan == 1"], "unknown family"),
    (["prove", "no/such/dir"], "no such file"),
    (["prove", "optimal_makespan(memory=2) <= makespan"], "give the family with --family"),
    (["prove", "optimal_makespan(memory=2 <= 3"], "no relation"),
])
def test_bad_input_is_exit_2(argv, needle):
    code, _, err = _cli(argv)
    assert code == 2 and needle in err


def test_catalogue_loads_and_covers_every_source():
    claims = load([PROOFS])
    sources = {c.source for c in claims}
    assert len(sources) >= 7
    assert all(c.recorded in ("PROVED", "REFUTED") for c in claims)
    assert any(c.recorded == "REFUTED" for c in claims)
    ids = [c.id for c in claims]
    assert len(ids) == len(set(ids))


def test_the_verdicts_table_of_proofs_readme_is_what_prove_gives():
    """proofs/README.md's table and its count say what ``schedverify prove proofs/`` gives
    today: each claim's verdict and the sizes it is judged over."""
    import re

    code, out, _ = _cli(["prove", str(PROOFS), "--format", "json"])
    assert code == 0
    got = {r["id"]: r for r in json.loads(out)}
    text = (PROOFS / "README.md").read_text()
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| ") and len(cells) == 6 and cells[0] in got:
            rows[cells[0]] = cells
    assert rows.keys() == got.keys()
    for cid, cells in rows.items():
        r = got[cid]
        over = r["kind"].replace("all sizes in ", "all sizes: ", 1).replace("finite range ", "finite: ", 1)
        assert (cells[3], cells[4].split(" (bench:")[0]) == (r["verdict"], over), cid
    proved = [r for r in got.values() if r["verdict"] == "PROVED"]
    every = sum(r["kind"].startswith("all sizes") for r in proved)
    assert re.search(rf"{len(got)} claims: {len(proved)} proved \({every} for all sizes, "
                     rf"{len(proved) - every} on a finite range\)", text)


def test_catalogue_bad_file_is_input_error(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('source = "x"\n[[claim]]\ntext = "makespan == 1"\nfamly = "1f1b"\n')
    code, _, err = _cli(["prove", str(bad)])
    assert code == 2 and "famly" in err


def test_seed_file_runs_with_recorded_verdicts():
    code, out, _ = _cli(["prove", str(PROOFS / "seed-003-teaching-gpipe-vs-1f1b.toml"),
                         "--format", "json"])
    rows = json.loads(out)
    assert code == 0, [r for r in rows if r["verdict"] != r["recorded"]]
    savings = next(r for r in rows if r["id"] == "teach-savings-n8")
    assert savings["verdict"] == "REFUTED"
    assert (savings["counterexample"]["lhs"], savings["counterexample"]["rhs"]) == ("1/2", "5/8")


def test_toml_is_read_on_python_310(monkeypatch, tmp_path):
    """requires-python is >=3.10, where tomllib does not exist: the one TOML reader (model
    files, claim catalogues) falls back on tomli (the same parser) there; a copy of its module
    is loaded as Python 3.10 would."""
    import importlib.util
    import sys
    import tomllib

    import schedverify.io.files as real

    monkeypatch.setattr(sys, "version_info", (3, 10, 14, "final", 0))
    monkeypatch.setitem(sys.modules, "tomllib", None)  # `import tomllib` fails, as on 3.10
    monkeypatch.setitem(sys.modules, "tomli", tomllib)  # tomli has tomllib's API
    spec = importlib.util.spec_from_file_location("schedverify.io._files_py310", real.__file__)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.tomllib is tomllib
    text = 'source = "s"\nfamily = "1f1b"\n[[claim]]\ntext = "makespan(ALL) >= 0"\n'
    assert mod.parse_toml(text, "c.toml") == real.parse_toml(text, "c.toml") == tomllib.loads(text)
    from schedverify.errors import InputError

    with pytest.raises(InputError, match="c.toml: not valid TOML"):
        mod.parse_toml("source = \n", "c.toml")


# --------------------------------------------------------------------------- laws about the optimum

K_LAW = "optimal_makespan(memory=k) == (t_F + t_B)*((m + p - 1) + (ceiling(m/k) - 1)*(p - k))"


def _k_law(p, m, k, tf=1, tb=2):
    return (tf + tb) * ((m + p - 1) + (-(-m // k) - 1) * (p - k))


@pytest.mark.parametrize("p,m,k", [(2, 5, 1), (3, 7, 2), (4, 9, 3), (4, 8, 4), (5, 11, 2)])
def test_k_in_flight_law_agrees_with_search_directly(p, m, k):
    """The search, called directly, proves the optimum the K law states; the prover, asked
    the law at that one size, says PROVED and reports the same optimum."""
    from schedverify.smt.search import search

    res = search(p, m, costs={"F": 1, "B": 2}, memory_limit=k, time_limit=20)
    assert res.status == "optimal" and res.makespan == res.lower_bound == _k_law(p, m, k)
    got = prove(Claim(K_LAW, "", "t_F == 1, t_B == 2, c == 0",
                      f"p={p}..{p},m={m}..{m},k={k}..{k}", time_limit=20))
    assert got.verdict == "PROVED" and got.checked == 1, got.to_json()
    assert got.to_json()["optima"]["proven"] == 1


def test_planted_false_optimum_law_is_refuted_at_the_right_size():
    """The K law made one unit too small from m = 4 on fails first at p=2, m=4, k=1 (sizes in
    the order p, m, k); the counterexample carries the proven optimum and a schedule that
    the checker confirms has that makespan under the memory limit."""
    from schedverify.check import check
    from schedverify.model import Schedule

    planted = K_LAW + " - floor(m/4)"
    res = prove(Claim(planted, "", "t_F == 1, t_B == 2, c == 0, k <= p", "p=2..3,m=1..6,k=1..3",
                      time_limit=10))
    assert res.verdict == "REFUTED"
    ce = res.counterexample
    assert ce["sizes"] == {"p": 2, "m": 4, "v": 1, "k": 1}
    want = _k_law(2, 4, 1)
    assert (ce["lhs"], ce["rhs"]) == (str(want), str(want - 1))
    assert ce["proven"] and ce["makespan"] == ce["lower_bound"] == str(want)
    (info,) = ce["optimum"].values()
    assert info["status"] == "optimal" and info["problem"]["memory_limit"] == 1
    assert "--memory-limit 1" in ce["check_command"]
    sched = Schedule.build(info["schedule"], placement="loop")
    rep = check(sched, costs={"F": 1, "B": 2, "comm": 0}, memory_limit=1)
    assert rep.is_valid and rep.metrics.makespan == want
    # every size before it was judged and held
    assert res.checked == 1 + sum(min(3, p) for p in (2,) for _ in range(1, 4))


def _bounded(lower, upper):
    """A stand-in for a search that ran out of time: proved ``lower``, found ``upper``."""
    import sympy

    from schedverify.claims import optimum as opt

    def solve(problem, time_limit):
        return opt.Optimum(opt.BOUNDED, sympy.Integer(lower),
                           None if upper is None else sympy.Integer(upper), "feasible",
                           "fifo", 0.0, "time limit reached", None, problem)
    return solve


@pytest.mark.parametrize("claim,lower,upper,verdict", [
    ("optimal_makespan(memory=2) == 20", 18, 22, "UNKNOWN"),  # 20 may or may not be it
    ("optimal_makespan(memory=2) == 20", 18, None, "UNKNOWN"),  # nothing found at all
    ("optimal_makespan(memory=2) == 20", 18, 19, "REFUTED"),  # a schedule beats the claim
    ("optimal_makespan(memory=2) == 20", 21, 25, "REFUTED"),  # the lower bound exceeds it
    ("optimal_makespan(memory=2) <= 22", 18, 22, "PROVED"),  # a schedule meets the bound
    ("optimal_makespan(memory=2) >= 18", 18, 22, "PROVED"),  # the lower bound is proven
    ("optimal_makespan(memory=2) >= 19", 18, 22, "UNKNOWN"),
    ("2*optimal_makespan(memory=2) == 40", 18, 19, "UNKNOWN"),  # not "optimum op number"
])
def test_an_unproven_optimum_decides_only_what_its_interval_decides(monkeypatch, claim, lower,
                                                                    upper, verdict):
    from schedverify.claims import optimum as opt

    monkeypatch.setattr(opt, "solve", _bounded(lower, upper))
    res = prove(Claim(claim, "", "t_F == 1, t_B == 2, c == 0", "p=3..3,m=4..4"))
    assert res.verdict == verdict, res.to_json()
    if verdict == "UNKNOWN":
        assert "proved no optimum" in res.reason
    if verdict == "REFUTED":  # the end of the interval that refutes is shown
        by_schedule = upper is not None and upper < 20
        assert res.counterexample["lhs"] == str(upper if by_schedule else lower)
        assert ("schedule" if by_schedule else "lower bound") in res.counterexample["refuted_by"]


def test_a_claim_about_the_optimum_alone_is_proved_from_the_command_line():
    """No --family: a single claim that reads only optimal_makespan is judged (it used to be
    taken for a file name), and its counterexample's command, run again, reproduces it."""
    import shlex

    argv = ["prove", "optimal_makespan(memory=2) <= 3*(m + p - 1)", "--domain", "p=2..3,m=1..4",
            "--assume", "t_F == 1, t_B == 2, c == 0"]
    code, out, err = _cli(argv)
    assert code == 1 and "[the optimum]" in out, out + err
    assert "counterexample: p=3, m=3" in out and "left side = 18, right side = 15" in out
    again = shlex.split(next(x for x in out.splitlines() if "reproduce:" in x).split("reproduce:")[1])
    assert again[:2] == ["schedverify", "prove"] and "--family" not in again
    code2, out2, _ = _cli(again[1:])
    assert code2 == 1 and "left side = 18, right side = 15" in out2
    code3, out3, _ = _cli(["prove", "optimal_makespan(memory=2) <= 3*(m + p - 1)", "--domain",
                           "p=2..3,m=1..2", "--assume", "t_F == 1, t_B == 2, c == 0", "--format", "json"])
    assert code3 == 0 and json.loads(out3)["verdict"] == "PROVED"


def test_an_unproven_size_makes_the_claim_unknown_not_proved():
    """4x8, two chunks per device in a V, split backward, memory 2, equal costs: the optimum
    (101, docs/howto/search.md's table) takes the search about 30 s to prove; with 0.5 s per size it
    is not proven, and the true claim stays UNKNOWN with the reason."""
    res = prove(Claim("optimal_makespan(memory=2, split, chunks=2, placement=v) == 101", "",
                      "t_F == 1, t_I == 1, t_W == 1, c == 0", "p=4..4,m=8..8", time_limit=0.5))
    assert res.verdict == "UNKNOWN", res.to_json()
    assert "proved no optimum in 0.5 s" in res.reason
    assert res.to_json()["optima"]["proven"] == 0


def test_zb_h1_is_optimal_under_1f1b_memory_at_small_sizes():
    res = prove(Claim("makespan == optimal_makespan(memory=p, split)", "zb-h1",
                      "t_F == 1, t_I == 1, t_W == 1, c == 0", "p=2..3,m=1..6,v=1..1", time_limit=10))
    assert res.verdict == "PROVED" and res.checked == 12, res.to_json()


@pytest.mark.parametrize("claim,assume,domain,needle", [
    ("optimal_makespan(memory=k) == 1", "t_F == 1, t_B == 2, c == 0", "p=2..2,m=1..1", "k=1..4"),
    ("optimal_makespan(memry=p) == 1", "t_F == 1, t_B == 2, c == 0", "p=2..2,m=1..1", "memry"),
    ("optimal_makespan(split=1) == 1", "t_F == 1, t_I == 1, t_W == 1, c == 0", "p=2..2,m=1..1",
     "flag"),
    ("optimal_makespan(memory=t_F) == 1", "t_F == 1, t_B == 2, c == 0", "p=2..2,m=1..1",
     "expression in the sizes"),
    ("optimal_makespan == 1", "t_F == 1, c == 0", "p=2..2,m=1..1", "t_B"),
    ("optimal_makespan(split) == 1", "t_F == 1, t_B == 2, c == 0", "p=2..2,m=1..1", "t_I, t_W"),
    ("optimal_makespan == 1", "t_F == 1, t_B <= 2, c == 0", "p=2..2,m=1..1", "pinned"),
])
def test_optimum_claims_bad_input_names_the_value(claim, assume, domain, needle):
    from schedverify.errors import UsageError

    with pytest.raises(UsageError, match=needle):
        prove(Claim(claim, "", assume, domain))


def test_optimum_catalogue_loads_without_a_family_and_with_its_time_limit(tmp_path):
    claims = load([PROOFS / "optimum.toml"])
    assert claims and all(c.time_limit == 1.5 for c in claims)
    assert any(c.family == "" for c in claims) and any(c.family == "zb-h1" for c in claims)
    bad = tmp_path / "bad.toml"
    bad.write_text('source = "x"\n[[claim]]\ntext = "makespan == 1"\n')
    code, _, err = _cli(["prove", str(bad)])
    assert code == 2 and "no family" in err
    bad.write_text('source = "x"\ntime_limit = -1\n[[claim]]\ntext = "optimal_makespan == 1"\n')
    code, _, err = _cli(["prove", str(bad)])
    assert code == 2 and "time_limit" in err
