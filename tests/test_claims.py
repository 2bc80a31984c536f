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


def test_catalogue_loads_on_python_310(monkeypatch, tmp_path):
    """requires-python is >=3.10, where tomllib does not exist: the catalogue falls back on
    tomli (the same parser) there; a copy of the module is loaded as Python 3.10 would."""
    import importlib.util
    import sys
    import tomllib

    import schedverify.claims.catalogue as real

    monkeypatch.setattr(sys, "version_info", (3, 10, 14, "final", 0))
    monkeypatch.setitem(sys.modules, "tomllib", None)  # `import tomllib` fails, as on 3.10
    monkeypatch.setitem(sys.modules, "tomli", tomllib)  # tomli has tomllib's API
    spec = importlib.util.spec_from_file_location("schedverify.claims._catalogue_py310",
                                                  real.__file__)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.tomllib is tomllib
    f = tmp_path / "c.toml"
    f.write_text('source = "s"\nfamily = "1f1b"\n[[claim]]\ntext = "makespan(ALL) >= 0"\n')
    assert [c.text for c in mod.load_file(f)] == [c.text for c in real.load_file(f)]
    bad = tmp_path / "bad.toml"
    bad.write_text("source = \n")
    with pytest.raises(Exception, match="not valid TOML"):
        mod.load_file(bad)
