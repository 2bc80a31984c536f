"""All-sizes proofs (docs/proofs.md): each certificate is proved by Z3 for every size and
agrees with the real generator and timeline, beyond the default grid too; a broken
certificate is caught; claims false only outside the default finite range (at p = 20) are
refuted with the smallest counterexample, which the simulated schedule confirms."""

from __future__ import annotations

import dataclasses
import io
import json
import re

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import schedverify as sv
from schedverify.certificates import certificate, certificate_options, families
from schedverify.certificates.base import PyOps
from schedverify.certificates.check import crosscheck, index_of_action, prove_certificate
from schedverify.claims import Claim, prove
from schedverify.claims.allsizes import CertificateStore
from schedverify.cli import run
from schedverify.errors import UsageError
from schedverify.generators import generate
from schedverify.model import B, W

ALL = "p >= 2, m >= 1"
#: the default grid, sizes past it, and sizes with m < p (short pipelines)
SIZES = ([(p, m) for p in range(1, 7) for m in range(1, 14)]
         + [(9, 30), (13, 7), (20, 21), (24, 50), (17, 3)])


@pytest.fixture(scope="module")
def store():
    return CertificateStore()


def _family_sizes(family, domain):
    """What the kind line adds for the families on Megatron's table at v >= 2."""
    if family == "zb-h1" and "v >= 1" in domain:
        return ", m % p == 0 at v = 2, 3"
    chunked = family == "interleaved-1f1b" or (family == "zb-h1" and "v == 1" not in domain)
    return ", m % p == 0" if chunked else ""


def _cli(argv):
    out, err = io.StringIO(), io.StringIO()
    return run(argv, out, err), out.getvalue(), err.getvalue()


@pytest.mark.parametrize("family,chunks,which", [(f, c, k) for f, c in families()
                                                 for k in range(len(certificate_options(f, c)))])
def test_certificate_is_proved_for_all_sizes(family, chunks, which):
    cert = certificate_options(family, chunks)[which]
    chk = prove_certificate(cert)
    assert chk.ok, [(o.name, o.status, o.detail) for o in chk.failures()]
    names = " ".join(o.name for o in chk.obligations)
    assert "order" in names and "peak_memory" in names
    assert ("ASAP" in names) == cert.timing and ("makespan" in names) == cert.timing


@pytest.mark.parametrize("family,chunks,which", [(f, c, k) for f, c in families()
                                                 for k in range(len(certificate_options(f, c)))])
def test_certificate_matches_the_generator_and_timeline(family, chunks, which):
    # interleaved 1F1B and ZB-H1 with chunks (group size p) need m a multiple of p
    sizes = SIZES if not chunks or chunks < 2 or family == "looped-bfs" else [
        (p, n * p) for p in range(2, 7) for n in range(1, 5)] + [(9, 18), (13, 13), (20, 40)]
    if chunks and chunks > 2:
        sizes = sizes[::3]
    cert = certificate_options(family, chunks)[which]
    if family == "zb-v":  # m >= 2p - 1, where no microbatch is dropped
        sizes = [(p, 2 * p - 1 + k) for p in range(1, 8) for k in (0, 1, 2, 5)] + [(9, 30), (20, 41), (24, 50)]
    if family == "dualpipe-v":  # m >= 2p
        sizes = [(p, 2 * p + k) for p in range(1, 8) for k in (0, 1, 2, 5)] + [(9, 30), (20, 41), (24, 50)]
    if family == "dualpipe":  # p, m even, m >= 2p
        sizes = [(p, 2 * p + k) for p in (2, 4, 6, 8) for k in (0, 2, 4, 10)] + [(10, 30), (20, 42), (24, 50)]
    assert all(cert.in_domain(PyOps, p, m) for p, m in sizes)
    assert crosscheck(cert, sizes) == []


def test_a_wrong_start_time_is_caught_with_its_size():
    cert = certificate("zb-h1")
    good = cert.start

    def start(o, k, p, m, d, i):
        s = good(o, k, p, m, d, i)
        return {"t_F": o.If(p >= 20, s["t_F"] + 1, s["t_F"])} if k == W else s

    chk = prove_certificate(dataclasses.replace(cert, start=start))
    assert not chk.ok
    assert any("p=20" in o.detail for o in chk.failures())
    # the cross-check on the default grid alone would not see it
    assert crosscheck(dataclasses.replace(cert, start=start), [(p, 8) for p in range(2, 9)]) == []


def test_a_wrong_order_is_caught():
    cert = certificate("1f1b")
    pos = cert.pos
    bad = dataclasses.replace(cert, pos=lambda o, k, p, m, d, i: pos(o, k, p, m, d, i) + (k == B))
    assert not prove_certificate(bad).ok
    assert crosscheck(bad, [(3, 4)])
    # an interleaved peak one too high is caught by Z3 and by the generator
    cert = certificate("interleaved-1f1b", 2)
    peak = cert.peak_inflight
    wrong = dataclasses.replace(cert, peak_inflight=lambda o, p, m, d: (peak(o, p, m, d)[0] + 1,
                                                                        peak(o, p, m, d)[1]))
    assert not prove_certificate(wrong).ok and crosscheck(wrong, [(3, 6)])


@pytest.mark.parametrize("text,family,assume,domain", [
    ("makespan == (m + p - 1)*(t_F + t_B) + 2*(p - 1)*c", "gpipe", "", ALL),
    ("peak_inflight(d) == m", "gpipe", "", ALL),
    ("bubble_fraction == (p - 1)/(m + p - 1)", "1f1b", "c == 0", ALL),
    ("bubble_ratio == (p - 1)/m", "1f1b", "c == 0", "p >= 2, m >= p"),
    ("peak_inflight(d) == Min(p - d, m)", "1f1b", "", ALL),
    ("peak_memory(d) == Min(p - d, m)", "1f1b", "", ALL),
    ("makespan == makespan@gpipe", "1f1b", "c == 0", ALL),
    ("bubble_time == (p - 1)*(t_F + t_I - t_W)", "zb-h1", "c == 0, t_I == t_F, t_W == t_F",
     "p >= 2, m >= p, v == 1"),
    ("peak_memory <= peak_memory@1f1b", "zb-h1", "", "p >= 2, m >= 1, v == 1"),
    ("bubble_time == (p - 1)*t_F", "zb-h2", "c == 0, t_I == t_F, t_W == t_F, m >= 2*p", ALL),
    ("peak_inflight == Min(m, 2*p - 1)", "zb-h2", "", ALL),
    ("peak_inflight(d) == Min((v - 1)*p + 2*(p - d - 1) + 1, v*m)", "interleaved-1f1b", "",
     "p >= 2, m >= 1, v >= 2, v <= 4"),
    ("makespan == (m + p - 1 + (v - 1)*Max(m, p))*(t_F + t_B)", "looped-bfs", "c == 0",
     "p >= 2, m >= 1, v >= 1, v <= 4"),
    ("peak_inflight(d) == v*m", "looped-bfs", "", "p >= 2, m >= 1, v >= 1, v <= 4"),
])
def test_true_claims_are_proved_for_all_sizes(text, family, assume, domain, store):
    res = prove(Claim(text, family, assume, domain), store=store)
    assert res.verdict == "PROVED", res.to_json()
    assert res.kind == f"all sizes in {domain}" + _family_sizes(family, domain)


@pytest.mark.parametrize("text,family,assume,domain,sizes", [
    # false at p = 20 only: a finite check up to p = 16 passes
    ("peak_inflight == Min(p, m) + floor(p/20)*floor(20/p)", "1f1b", "", ALL,
     {"p": 20, "m": 1}),
    ("makespan == (m + p - 1)*(t_F + t_B) + Max(0, p - 19)*t_F", "1f1b", "c == 0", ALL,
     {"p": 20, "m": 1}),
    # false for p >= 20 and m >= 40 on device 19 only
    ("peak_inflight(d) == Min(p - d, m) - floor(d/19)*floor(m/40)", "1f1b", "", ALL,
     {"p": 20, "m": 40, "d": 19}),
    ("makespan == (m + p - 1)*(t_F + t_B) + 2*(p - 1)*c + Max(0, p - 19)*Max(0, m - 30)*c",
     "gpipe", "", ALL, {"p": 20, "m": 31}),
    ("bubble_time == (p - 1)*t_F + floor(p/20)*floor(m/(p + 5))*t_F", "zb-h1",
     "c == 0, t_I == t_F, t_W == t_F, m >= p", "p >= 2, m >= 1, v == 1", {"p": 20, "m": 25}),
    ("peak_inflight(d) == (v - 1)*p + 2*(p - d - 1) + 1 + floor(p/20)*floor(d/19)",
     "interleaved-1f1b", "m >= p*v", "p >= 2, m >= 1, v >= 2, v <= 3", {"p": 20, "m": 40, "d": 19}),
    ("makespan == (m + p - 1 + (v - 1)*m)*(t_F + t_B)", "looped-bfs", "c == 0",
     "p >= 2, m >= 1, v == 2", {"p": 2, "m": 1}),
])
def test_claims_false_only_past_the_grid_are_refuted_at_the_smallest_size(
        text, family, assume, domain, sizes, store):
    finite_domain = "p=2..16,m=1..32" + {"zb-h1": ",v=1..1", "interleaved-1f1b": ",v=2..2"}.get(
        family, "")
    if family != "looped-bfs":  # the looped claim is false at m < p, inside any grid
        assert prove(Claim(text, family, assume, finite_domain)).verdict == "PROVED"
    res = prove(Claim(text, family, assume, domain), store=store)
    assert res.verdict == "REFUTED", res.to_json()
    got = {k: v for k, v in res.counterexample["sizes"].items() if k != "v"}
    assert got == sizes
    if family in ("interleaved-1f1b", "looped-bfs"):
        assert res.counterexample["sizes"]["v"] == 2
    assert "no counterexample with smaller p" in res.minimal
    assert res.counterexample["lhs"] != res.counterexample["rhs"]


def test_grid_claims_are_extended_and_pinned_ones_stay_finite(store):
    grid = prove(Claim("peak_inflight(0) == Min(p, m)", "1f1b", "", "p=2..8,m=1..24"),
                 all_sizes=True, store=store)
    assert grid.verdict == "PROVED" and grid.kind == "all sizes in p >= 2, m >= 1"
    pinned = prove(Claim("fwd_before_bwd(0) == m", "1f1b", "", "p=4..4,m=8..8"),
                   all_sizes=True, store=store)
    assert pinned.verdict == "REFUTED" and pinned.kind == "all sizes in p == 4, m == 8"
    plain = prove(Claim("peak_inflight(0) == Min(p, m)", "1f1b", "", "p=2..4,m=1..8"))
    assert plain.kind == "finite range p=2..4,m=1..8" and plain.checked == 24


def test_a_grid_counterexample_refutes_for_all_sizes_without_a_certificate(store):
    """DualPipe's certificate has no timing, so its bubble claim is judged on the grid; the
    counterexample found there (p = 4, past every m at p = 2) refutes it for every size, and
    the verdict says it need not be the smallest."""
    claim = Claim("bubble_time == (p/2 - 1)*((t_F + t_B) + t_B - 3*t_W)", "dualpipe",
                  "c == 0, t_I == t_F, t_W == t_F, m >= 2*p", "p=2..8,m=1..24")
    res = prove(claim, all_sizes=True, store=store)
    assert res.verdict == "REFUTED" and res.kind == "all sizes in p >= 2, m >= 1"
    assert {k: res.counterexample["sizes"][k] for k in ("p", "m")} == {"p": 4, "m": 8}
    assert not res.minimal and res.reason.startswith("not shown to be the smallest")
    assert "no timing" in res.all_sizes_reason  # why the certificate did not decide it
    # without all_sizes the grid's verdict stays the grid's
    assert prove(claim).kind == "finite range p=2..8,m=1..24"


def test_the_grid_search_stops_at_its_budget_and_says_where():
    """An undecided all-sizes claim is searched on a grid for at most --timeout seconds: a
    search out of time is UNKNOWN, naming the first size it did not judge, never PROVED."""
    from schedverify.claims.finite import prove_finite

    claim = Claim("makespan >= 0", "1f1b", "", "p=2..8,m=1..24")
    res = prove_finite(claim, 20.0, budget_s=0.0)
    assert res.verdict == "UNKNOWN" and res.checked == 0 and res.stopped_at == "p=2, m=1"
    assert res.reason == "the search's budget of 0 s ran out before p=2, m=1"
    whole = prove_finite(claim, 20.0, budget_s=None)
    assert whole.verdict == "PROVED" and whole.checked == 7 * 24 and not whole.stopped_at


def test_no_certificate_or_another_cost_slice_is_unknown_with_the_reason(store):
    res = prove(Claim("peak_inflight <= 2*p", "v-half", "", ALL), store=store)
    assert res.verdict == "UNKNOWN" and "no all-sizes certificate" in res.reason
    # ZB-V's certificate is for m >= 2p - 1 (below, microbatches are dropped and only the
    # peaks are bounded): its timing and its warm-up there are not known
    for text in ("fwd_before_bwd(0) <= 2*p", "peak_inflight*t_F <= makespan"):
        res = prove(Claim(text, "zb-v", "c == 0, t_I == t_F, t_W == t_F", ALL), store=store)
        assert res.verdict == "UNKNOWN", text
        assert res.reason == ("the domain is not inside the certificate's (p >= 1, m >= 2*p - 1); the exact "
                              "search found no counterexample on p=2..8,m=1..24"), text
    # interleaved 1F1B's timing holds on c == 0: without it the certificate decides nothing,
    # and the exact search on the grid finds the claim false with latency, for all sizes
    res = prove(Claim("bubble_ratio == (p - 1)/(v*m)", "interleaved-1f1b", "",
                      "p >= 2, m >= 1, v == 2"), store=store)
    assert res.verdict == "REFUTED" and "c == 0" in res.all_sizes_reason
    assert res.counterexample["costs"]["c"] not in (0, "0") and res.kind.startswith("all sizes in p >= 2, m >= 1, v == 2")
    # no v in the domain: the generator's default, said so (the kind and the conditions show it)
    res = prove(Claim("peak_inflight <= 2*p*v", "interleaved-1f1b", "", ALL), store=store)
    assert res.verdict == "PROVED" and res.kind == f"all sizes in {ALL}, v == 2, m % p == 0"
    assert [c for c, _ in res.conditions] == ["v == 2", "m % p == 0"]
    res = prove(Claim("peak_inflight <= 2*p*v", "interleaved-1f1b", "", "p >= 2, m >= 1, v >= 2"),
                store=store)
    assert res.verdict == "UNKNOWN" and "bound v in the domain" in res.reason
    res = prove(Claim("bubble_time == (p - 1)*t_F", "zb-h1", "m >= p", "p >= 2, m >= 1, v == 1"),
                store=store)
    assert res.verdict == "REFUTED" and "c == 0" in res.all_sizes_reason
    assert res.minimal.startswith("found by the exact search, which tried every smaller m")
    # on a grid the finite prover still answers, and the refutation counts for all sizes
    res = prove(Claim("bubble_time == (p - 1)*t_F", "zb-h1", "m >= p", "p=2..4,m=1..8,v=1..1"),
                all_sizes=True, store=store)
    assert res.verdict == "REFUTED" and res.kind == "all sizes in p >= 2, m >= 1, v == 1"
    assert "c == 0" in res.all_sizes_reason


def test_1f1b_with_latency_every_cost(store):
    """1F1B's second certificate keeps c: its coefficient steps with period p."""
    res = prove(Claim("makespan == 2*c*(m + p - ceiling((m - 1)/p) - 2) + (t_F + t_B)*(m + p - 1)",
                      "1f1b", "", ALL), store=store)
    assert res.verdict == "PROVED" and res.certificates["1f1b"]["slice"] == "all costs"
    res = prove(Claim("makespan >= makespan@gpipe", "1f1b", "", ALL), store=store)
    assert res.verdict == "PROVED"
    res = prove(Claim("bubble_ratio == (p - 1)/m", "1f1b", "", "p >= 2, m >= p"), store=store)
    assert res.verdict == "REFUTED"
    ce = res.counterexample
    assert (ce["sizes"]["p"], ce["sizes"]["m"]) == (2, 2) and ce["costs"]["c"] != "0"
    # with c == 0 the linear certificate is used
    res = prove(Claim("bubble_ratio == (p - 1)/m", "1f1b", "c == 0", "p >= 2, m >= p"), store=store)
    assert res.verdict == "PROVED" and res.certificates["1f1b"]["slice"] == "c == 0"


def test_cli_domain_inequalities_text_and_json():
    code, out, _ = _cli(["prove", "--family", "1f1b", "bubble_ratio == (p - 1)/m",
                         "--assume", "c == 0", "--domain", "p>=2, m>=p"])
    assert code == 0 and "kind: all sizes in p>=2, m>=p" in out
    code, out, _ = _cli(["prove", "--family", "1f1b",
                         "peak_inflight == Min(p, m) + floor(p/20)*floor(20/p)",
                         "--domain", "p>=2, m>=1", "--format", "json"])
    row = json.loads(out)
    assert code == 1 and row["kind"] == "all sizes in p>=2, m>=1"
    assert row["counterexample"]["sizes"]["p"] == 20
    assert row["closed_forms"]["1f1b"]["peak_inflight(d)"] == "Min(m, -d + p)"
    code, out, _ = _cli(["prove", "--family", "gpipe", "peak_inflight == m", "--domain",
                         "p=2..3,m=1..4", "--all-sizes"])
    assert code == 0 and "kind: all sizes in p >= 2, m >= 1" in out


# --------------------------------------------------------------------------- shipped forms


def test_shipped_proof_records_are_what_the_prover_proves_for_gpipe():
    """proofs.json (made by `formula --prove-shipped`) holds, for GPipe, exactly the forms the
    all-sizes prover proves now; .ci/formulas checks every family."""
    from schedverify.claims.forms import prove_forms
    from schedverify.formulas import shipped

    fresh = prove_forms(["gpipe"])
    kept = {k: v for k, v in shipped.proof_records().items() if k.startswith("gpipe/")}
    assert fresh == kept
    assert "gpipe/makespan" in fresh and "gpipe/peak_memory(d)" in fresh


def test_the_verdict_is_bounded_by_resource_units_not_by_seconds(store):
    """The all-sizes prover's budget is Z3's resource limit, so a verdict does not depend
    on how fast the machine is: starved of units (with all the time in the world) a query
    that proves in a fraction of a second gives UNKNOWN and says why."""
    from schedverify.claims.allsizes import judge

    claim = Claim("bubble_ratio == (p - 1)/m", "gpipe", "c == 0")
    assert judge(claim, ALL, store, timeout_s=600).verdict == "PROVED"
    starved = judge(claim, ALL, store, timeout_s=600, rlimit=1)
    assert starved.verdict == "UNKNOWN" and "resource limit reached (1 units)" in starved.reason


def test_a_proved_form_is_labelled_and_a_changed_one_is_not(monkeypatch):
    from schedverify.formulas import shipped

    assert shipped.json_doc("gpipe", "makespan")["domain"]["status"] == "proved for every size in its domain"
    assert shipped.json_doc("zb-v", "bubble_fraction")["domain"]["status"].startswith("confirmed on p=2..8")
    real = shipped.proof_record
    monkeypatch.setattr(shipped, "proof_record", lambda f, m, d=None: (
        {**real(f, m, d), "expression": "m + p"} if real(f, m, d) else None))
    assert shipped.json_doc("gpipe", "makespan")["domain"]["status"].startswith("confirmed on")


# --------------------------------------------------------------------------- interleaved timing

INTERLEAVED_DOMAIN = "p >= 2, m >= 1, v >= 2, v <= 4"


@pytest.mark.parametrize("text", [
    "makespan == (v*m + p - 1)*(t_F + t_B)",
    "bubble_time == (p - 1)*(t_F + t_B)",
    "bubble_ratio == (p - 1)/(v*m)",
    "bubble_fraction == (p - 1)/(v*m + p - 1)",
    "bubble_ratio < bubble_ratio@1f1b",
    "peak_memory(d) == Min((v - 1)*p + 2*(p - d - 1) + 1, v*m)",
])
def test_interleaved_timing_is_proved_for_all_sizes(text, store):
    """The bound certificate makes interleaved 1F1B's makespan exact at every size of its
    domain (m a multiple of p), so Megatron's bubble claims are proved, not sampled."""
    res = prove(Claim(text, "interleaved-1f1b", "c == 0", INTERLEAVED_DOMAIN), store=store)
    assert res.verdict == "PROVED", res.to_json()
    assert res.kind == f"all sizes in {INTERLEAVED_DOMAIN}, m % p == 0"  # printed: the family's sizes
    assert {res.certificates[f"interleaved-1f1b v={v}"]["slice"] for v in (2, 3, 4)} <= {
        "c == 0", "none needed (the claim reads no timing)"}


def test_interleaved_makespan_closed_form_reads_plainly(store):
    res = prove(Claim("makespan == (v*m + p - 1)*(t_F + t_B)", "interleaved-1f1b", "c == 0",
                      "p >= 2, m >= p, v == 3"), store=store)
    assert res.forms["interleaved-1f1b v=3"]["makespan"] == "t_B*(3*m + p - 1) + t_F*(3*m + p - 1)"


@pytest.mark.parametrize("text,v,sizes", [
    # one t_B more, only for p >= 20: m is a multiple of p, so the first size is m = p = 20
    ("makespan == (v*m + p - 1)*(t_F + t_B) + floor(p/20)*t_B", 2, {"p": 20, "m": 20}),
    # the bubble of Megatron's paper, off for p >= 20 and m >= 2p only
    ("bubble_ratio == (p - 1)/(v*m) + floor(p/20)*floor(m/(2*p))/m", 3, {"p": 20, "m": 40}),
])
def test_interleaved_timing_false_only_past_the_grid_is_refuted_at_the_smallest_size(
        text, v, sizes, store):
    assert prove(Claim(text, "interleaved-1f1b", "c == 0",
                       f"p=2..16,m=1..32,v={v}..{v}")).verdict == "PROVED"
    res = prove(Claim(text, "interleaved-1f1b", "c == 0", f"p >= 2, m >= 1, v == {v}"), store=store)
    assert res.verdict == "REFUTED", res.to_json()
    assert {k: x for k, x in res.counterexample["sizes"].items() if k != "v"} == sizes
    assert res.counterexample["sizes"]["v"] == v
    assert "no counterexample with smaller p" in res.minimal


def _generated_waits(p, m, v):
    """Every data dependency of the real interleaved schedule (docs/spec.md 3.4, one forward
    and one backward per (stage, microbatch)), as (kind, device, table index) pairs."""
    from schedverify.formulas.sizes import build
    from schedverify.model import F

    cert = certificate("interleaved-1f1b", v)
    sched = build("interleaved-1f1b", p, m, v)
    index = index_of_action(cert, p, m)
    S = sched.stages
    where = {}
    for d, row in enumerate(sched.order):
        for a in row:
            where[(a.kind, a.stage, a.microbatch)] = (a.kind, d, index(a))
    def needs(kind, s, i):
        if kind == F:
            return [(F, s - 1, i)] if s > 0 else []
        return [(F, s, i)] + ([(B, s + 1, i)] if s + 1 < S else [])

    return {at: sorted(where[n] for n in needs(*key)) for key, at in where.items()}


@pytest.mark.parametrize("v", [2, 3, 4])
def test_interleaved_dependencies_in_table_indices_are_the_generators(v):
    """The certificate's deps (table index q, chunk = (q mod vp) div p) are exactly the
    waits of the generated schedule, so the bound and the chain rest on the real graph."""
    from schedverify.certificates.base import PyOps

    cert = certificate("interleaved-1f1b", v)
    o = PyOps()
    for p, m in [(1, 2), (2, 2), (2, 6), (3, 3), (3, 9), (4, 8), (5, 15), (7, 14)]:
        for (kind, d, q), want in _generated_waits(p, m, v).items():
            got = sorted((k, dd, qq) for cond, (k, dd, qq), _ in cert.deps(o, kind, p, m, d, q) if cond)
            assert got == want, (p, m, kind, d, q)


def test_a_wrong_interleaved_bound_or_chain_is_caught():
    cert = certificate("interleaved-1f1b", 2)
    good = cert.start

    def low(o, k, p, m, d, q):  # one t_B too little on the last forwards, for p >= 20 only
        s = good(o, k, p, m, d, q)
        return {"t_F": s["t_F"], "t_B": o.If(o.And(p >= 20, k == "F", q == 2 * m - 1), s["t_B"] - 1, s["t_B"])}

    chk = prove_certificate(dataclasses.replace(cert, start=low))
    assert not chk.ok
    # each refuted obligation names a size where the planted error is (Z3 picks which p >= 20;
    # an obligation the solver could not decide in time on a loaded machine names none)
    found = [int(x) for o in chk.failures() for x in re.findall(r"\bp=(\d+)", o.detail)]
    assert found and all(p >= 20 for p in found), [o.detail for o in chk.failures()]
    assert crosscheck(dataclasses.replace(cert, start=low), [(p, 2 * p) for p in range(2, 9)]) == []
    assert crosscheck(dataclasses.replace(cert, start=low), [(20, 40)])

    def high(o, k, p, m, d, q):  # still a bound (one t_B later everywhere), but not attained
        s = good(o, k, p, m, d, q)
        return {"t_F": s["t_F"], "t_B": s["t_B"] + 1}

    chk = prove_certificate(dataclasses.replace(cert, start=high))
    assert [o.name for o in chk.failures()] == [
        "makespan: the chain is as long as end(last(critical)), for every cost"]
    assert crosscheck(dataclasses.replace(cert, start=high), [(3, 6)])
    # a chain that skips a wait (F(d,0) on F(d-2,0)) is refused
    lower = cert.lower

    def skip(o, p, m, d, q):
        chain, length = lower(o, p, m, d, q)
        bad = ("chain: F(d,0) waits for F(d-2,0)",
               o.Or(d < 2, o.Or(*[o.And(c, t[1] == d - 2, t[2] == 0)
                                  for c, t, _ in cert.deps(o, "F", p, m, d, 0) if t[0] == "F"])))
        return chain + [bad], length

    assert not prove_certificate(dataclasses.replace(cert, lower=skip)).ok


@settings(max_examples=40, deadline=None)
@given(p=st.integers(1, 7), groups=st.integers(1, 4), v=st.integers(2, 4),
       t_F=st.fractions(Fraction(1, 8), 8), t_B=st.fractions(Fraction(1, 8), 8))
def test_interleaved_simulated_makespan_and_starts_obey_the_certificate(p, groups, v, t_F, t_B):
    """At random sizes and exact rational costs, the simulated schedule ends at
    (vm + p - 1)(t_F + t_B) and every action starts no later than the certificate's bound."""
    from schedverify.certificates.base import PyOps
    from schedverify.formulas.sizes import build
    from schedverify.graph import compile_graph, sweep

    m = groups * p
    cert = certificate("interleaved-1f1b", v)
    o = PyOps()
    sched = build("interleaved-1f1b", p, m, v)
    g = compile_graph(sched)
    dur = [t_F if a.kind == "F" else t_B for a in g.acts]
    res = sweep(g, dur, 0)
    assert res.completed
    assert max(res.end) == (v * m + p - 1) * (t_F + t_B)
    index = index_of_action(cert, p, m)
    for d in range(p):
        for j in range(g.starts[d], g.starts[d + 1]):
            a = g.acts[j]
            bound = cert.start(o, a.kind, p, m, d, index(a))
            assert res.start[j] <= bound["t_F"] * t_F + bound["t_B"] * t_B


def _catalogue_interleaved():
    from pathlib import Path

    from schedverify.claims.catalogue import load

    root = Path(__file__).resolve().parent.parent / "proofs"
    return [c for c in load([root]) if c.family == "interleaved-1f1b"]


@pytest.mark.parametrize("claim", _catalogue_interleaved(), ids=lambda c: c.id)
def test_every_catalogue_claim_on_interleaved_has_its_recorded_verdict_for_all_sizes(claim, store):
    """Megatron's and the seeds' interleaved claims: bubbles and peaks are judged for every
    size now (the grid's lower ends up), and no verdict changes."""
    res = prove(claim, all_sizes=True, store=store)
    assert res.verdict == claim.recorded, res.to_json()
    assert res.kind.startswith("all sizes in"), res.kind


@pytest.mark.parametrize("v", [5, 6, 7, 8])
def test_interleaved_certificates_past_the_catalogue_v_are_proved_and_match(v, store):
    """v = 5..8 (not in families(), which the catalogue's v <= 4 needs): each certificate is
    proved and agrees with the generator, and a claim over v <= 8 is proved at every v."""
    cert = certificate("interleaved-1f1b", v)
    assert prove_certificate(cert).ok
    assert crosscheck(cert, [(2, 2), (3, 6), (4, 4), (5, 10)]) == []
    if v == 8:
        res = prove(Claim("bubble_fraction == (p - 1)/(v*m + p - 1)", "interleaved-1f1b", "c == 0",
                          "p >= 2, m >= 1, v >= 2, v <= 8"), store=store)
        assert res.verdict == "PROVED" and len(res.certificates) == 7, res.to_json()


# --------------------------------------------------------------------------- zb-h1 by cones

ZB_MAX = ("Max((m*v + p - 1)*(t_F + t_I) + Max(1, m*v - p + 1)*t_W, "
          "Max(m*v, p)*t_F + (m*v + p - 1)*t_I + m*v*t_W, "
          "Max(m*v, p)*t_I + (m*v + p - 1)*t_F + m*v*t_W)")


@pytest.mark.parametrize("text,domain", [
    (f"makespan == {ZB_MAX}", "p >= 2, m >= 1, v == 1"),
    (f"makespan == {ZB_MAX}", "p >= 2, m >= 1, v >= 2, v <= 3"),
    (f"bubble_time == {ZB_MAX} - m*v*(t_F + t_I + t_W)", "p >= 2, m >= 1, v >= 1, v <= 3"),
    # the paper's bubble for equal pass times is a lower bound at any pass times
    ("bubble_time >= (p - 1)*(t_F + t_I - t_W)", "p >= 2, m >= p, v == 1"),
    ("makespan <= makespan@1f1b", "p >= 2, m >= 1, v == 1"),
])
def test_zb_h1_makespan_at_free_costs_is_proved_for_all_sizes(text, domain, store):
    """At c == 0 with t_F, t_I, t_W free the makespan is the largest of three chains, one per
    smallest cost (the cones of certificates/zero_bubble.py), for v = 1 and v = 2, 3."""
    assume = "c == 0, t_B == t_I + t_W" if "1f1b" in text else "c == 0"
    res = prove(Claim(text, "zb-h1", assume, domain), store=store)
    assert res.verdict == "PROVED", res.to_json()
    assert res.kind == f"all sizes in {domain}" + _family_sizes("zb-h1", domain)
    assert all(c["slice"] == "c == 0" for c in res.certificates.values()), res.certificates


def test_zb_h1_free_costs_refuted_past_the_grid_and_the_general_costs_claim(store):
    # one t_W more for p >= 20 only: the smallest counterexample is p = 20, m = 1
    text = f"makespan == {ZB_MAX} + floor(p/20)*t_W"
    assert prove(Claim(text, "zb-h1", "c == 0", "p=2..6,m=1..8,v=1..1")).verdict == "PROVED"
    res = prove(Claim(text, "zb-h1", "c == 0", "p >= 2, m >= 1, v == 1"), store=store)
    assert res.verdict == "REFUTED", res.to_json()
    assert {k: x for k, x in res.counterexample["sizes"].items() if k != "v"} == {"p": 20, "m": 1}
    assert "no counterexample with smaller p" in res.minimal
    # the paper's bubble with unequal pass times: refuted by the certificate at the smallest size
    res = prove(Claim("bubble_time == (p - 1)*(t_F + t_I - t_W)", "zb-h1", "c == 0, m >= p",
                      "p >= 2, m >= 1, v == 1"), store=store)
    assert res.verdict == "REFUTED" and res.certificates["zb-h1"]["slice"] == "c == 0"
    assert {k: x for k, x in res.counterexample["sizes"].items() if k != "v"} == {"p": 2, "m": 2}
    # at v = 2 (m a multiple of p), the makespan of interleaved 1F1B with B = I + W is not it
    res = prove(Claim("makespan == (v*m + p - 1)*(t_F + t_I + t_W)", "zb-h1", "c == 0",
                      "p >= 2, m >= 1, v == 2"), store=store)
    assert res.verdict == "REFUTED" and res.counterexample["sizes"]["p"] == 2


@pytest.mark.parametrize("text", [
    "peak_inflight(d) == p*v",
    "peak_memory(d) == (2*p*v - d)/2",
    "fwd_before_bwd(d) == p*v - d",
])
def test_zb_h1_chunked_peaks_are_proved_for_all_sizes(text, store):
    res = prove(Claim(text, "zb-h1", "", "p >= 2, m >= 1, v >= 2, v <= 4"), store=store)
    assert res.verdict == "PROVED", res.to_json()
    assert set(res.certificates) == {"zb-h1 v=2", "zb-h1 v=3", "zb-h1 v=4"}


def _zb_cone(cert, name):
    return next(c for c in cert.cones if c.name == name)


def _with_cone(cert, name, **change):
    """``cert`` with one cone's certificate changed (the others and the parent kept)."""
    cones = tuple(dataclasses.replace(c, cert=dataclasses.replace(c.cert, **change))
                  if c.name == name else c for c in cert.cones)
    return dataclasses.replace(cert, cones=cones)


def test_a_wrong_cone_bound_or_chain_is_caught():
    cert = certificate_options("zb-h1")[1]
    assert cert.cones and prove_certificate(cert).ok
    cone = _zb_cone(cert, "t_W smallest")
    good = cone.cert.start

    def low(o, k, p, m, d, i):  # one F too few on the chain before the last W, p >= 20 only
        s = dict(good(o, k, p, m, d, i))
        s["t_F-t_W"] = o.If(o.And(p >= 20, k == W, i == m - 1), s["t_F-t_W"] - 1, s["t_F-t_W"])
        return s

    bad = _with_cone(cert, "t_W smallest", start=low)
    chk = prove_certificate(bad)
    assert not chk.ok and any("p=20" in o.detail for o in chk.failures()), chk.failures()
    assert crosscheck(bad, [(p, 8) for p in range(2, 9)]) == []
    assert crosscheck(bad, [(20, 3)])

    def high(o, k, p, m, d, i):  # still a bound (one t_W later everywhere), but not attained
        s = dict(good(o, k, p, m, d, i))
        s["t_W"] = s["t_W"] + 1
        return s

    chk = prove_certificate(_with_cone(cert, "t_W smallest", start=high))
    assert [o.name for o in chk.failures()] == [
        "cone t_W smallest: makespan: the chain is as long as end(last(critical)), for every cost"]
    # a chain that claims a wait that is not one (W(0,m-1) on I(1,m-1)) is refused
    lower = cone.cert.lower

    def skip(o, p, m, d, i):
        chain, length = lower(o, p, m, d, i)
        return chain + [("chain: W(0,m-1) waits for I(1,m-1)", p < 2)], length

    assert not prove_certificate(_with_cone(cert, "t_W smallest", lower=skip)).ok


def test_cones_must_cover_the_costs_and_be_the_parents():
    cert = certificate_options("zb-h1")[1]
    names = lambda chk: [o.name for o in chk.failures()]  # noqa: E731
    # two cones leave the costs where t_I is the smallest uncovered
    chk = prove_certificate(dataclasses.replace(cert, cones=cert.cones[:2]))
    assert names(chk) == ["cones: every cost vector > 0 lies in a cone"]
    assert "t_I" in chk.failures()[0].detail
    # a cone whose coordinates are not the inverse of its cost map
    cone = cert.cones[0]
    wrong = dataclasses.replace(cone, coords={**cone.coords, "t_W": {"t_W": 2}})
    chk = prove_certificate(dataclasses.replace(cert, cones=(wrong,) + cert.cones[1:]))
    assert "cone t_W smallest: its coordinates and the costs are inverse linear maps" in names(chk)
    # durations that are not the parent's (W costs t_F in the cone)
    dur = dict(cone.cert.duration)
    dur[W] = {"t_W": 1, "t_F-t_W": 1}
    chk = prove_certificate(_with_cone(cert, "t_W smallest", duration=dur))
    assert "cone t_W smallest: the durations are the parent's in its coordinates" in names(chk)
    # a cone about another order
    other = certificate("zb-h2")
    chk = prove_certificate(_with_cone(cert, "t_F smallest", pos=other.pos))
    assert "cone t_F smallest: the order, sizes and last actions are the parent's" in names(chk)


def _cone_end_at(cert, p, m, costs):
    """The certificate's makespan at concrete sizes and costs: the end of last(critical) on
    the first cone that holds the costs, read as a linear form of the costs."""
    from schedverify.certificates.base import PyOps
    from schedverify.certificates.check import _end

    o = PyOps()
    for cone in cert.cones:
        coords = {x: sum(k * costs[c] for c, k in lin.items()) for x, lin in cone.coords.items()}
        if all(x >= 0 for x in coords.values()):
            dc = cone.cert.critical(o, p, m)
            k, i = cone.cert.last(o, p, m, dc)
            e = cone.to_costs(_end(cone.cert, o, k, p, m, dc, i))
            return cone, coords, sum(a * costs[c] for c, a in e.items())
    raise AssertionError("no cone holds the costs")


@settings(max_examples=40, deadline=None)
@given(p=st.integers(1, 6), n=st.integers(1, 12), v=st.integers(1, 3),
       t_F=st.fractions(Fraction(1, 8), 8), t_I=st.fractions(Fraction(1, 8), 8),
       t_W=st.fractions(Fraction(1, 8), 8))
def test_zb_h1_simulated_makespan_and_starts_obey_the_cones(p, n, v, t_F, t_I, t_W):
    """At random sizes (v = 1..3) and exact rational costs, the simulated schedule ends at
    the certificate's makespan and every action starts no later than its cone's bound."""
    from schedverify.certificates.base import PyOps
    from schedverify.formulas.sizes import build
    from schedverify.graph import compile_graph, sweep

    m = n if v == 1 else max(1, n // 4) * p
    cert = certificate_options("zb-h1", v)[-1]
    costs = {"t_F": t_F, "t_I": t_I, "t_W": t_W}
    sched = build("zb-h1", p, m, v)
    g = compile_graph(sched)
    res = sweep(g, [costs[f"t_{a.kind}"] for a in g.acts], 0)
    assert res.completed
    cone, coords, T = _cone_end_at(cert, p, m, costs)
    assert max(res.end) == T
    o = PyOps()
    index = index_of_action(cert, p, m)
    for j, a in enumerate(g.acts):
        bound = cone.cert.start(o, a.kind, p, m, g.dev[j], index(a))
        assert res.start[j] <= sum(k * coords[x] for x, k in bound.items())


@pytest.mark.parametrize("v", [2, 3])
def test_zb_h1_chunked_dependencies_in_table_indices_are_the_generators(v):
    """As for interleaved 1F1B: the certificate's deps (table index q) are exactly the
    generated schedule's waits, W after its own I included."""
    from schedverify.certificates.base import PyOps
    from schedverify.formulas.sizes import build
    from schedverify.model import F, I

    cert = certificate("zb-h1", v)
    o = PyOps()
    for p, m in [(1, 2), (2, 2), (2, 6), (3, 3), (3, 9), (4, 8), (5, 15)]:
        sched = build("zb-h1", p, m, v)
        index = index_of_action(cert, p, m)
        where = {(a.kind, a.stage, a.microbatch): (a.kind, d, index(a))
                 for d, row in enumerate(sched.order) for a in row}

        def needs(kind, s, i, stages=sched.stages):
            if kind == F:
                return [(F, s - 1, i)] if s > 0 else []
            if kind == W:
                return [(I, s, i)]
            return [(F, s, i)] + ([(I, s + 1, i)] if s + 1 < stages else [])

        for key, (kind, d, q) in where.items():
            want = sorted(where[x] for x in needs(*key))
            got = sorted((k, dd, qq) for c, (k, dd, qq), _ in cert.deps(o, kind, p, m, d, q) if c)
            assert got == want, (p, m, key)


def _catalogue(family):
    """The catalogue's claims about ``family`` alone: a law about the optimum
    (``optimal_makespan``, proofs/optimum.toml) is judged size by size, never for all sizes."""
    from pathlib import Path

    from schedverify.claims.catalogue import load

    root = Path(__file__).resolve().parent.parent / "proofs"
    return [c for c in load([root]) if c.family == family and "optimal_makespan" not in c.text]


@pytest.mark.parametrize("claim", _catalogue("zb-h1"), ids=lambda c: c.id)
def test_every_catalogue_claim_on_zb_h1_has_its_recorded_verdict_for_all_sizes(claim, store):
    res = prove(claim, all_sizes=True, store=store)
    assert res.verdict == claim.recorded, res.to_json()
    assert res.kind.startswith("all sizes in"), res.kind


def test_a_wrong_chunked_zb_h1_bound_or_peak_is_caught():
    """v = 2 (table indices, the nonlinear tactic): a bound one I too low on device 0's last
    forwards for p >= 20 only, and a memory peak one too low, are refused by Z3."""
    cert = certificate("zb-h1", 2)
    good = _zb_cone(cert, "t_I smallest").cert.start

    def low(o, k, p, m, d, q):
        s = dict(good(o, k, p, m, d, q))
        s["t_I"] = o.If(o.And(p >= 20, k == "F", q == 2 * m - 1), s["t_I"] - 1, s["t_I"])
        return s

    chk = prove_certificate(_with_cone(cert, "t_I smallest", start=low))
    assert not chk.ok
    at = [int(re.search(r"p=(\d+)", o.detail).group(1)) for o in chk.failures()]
    assert at and min(at) >= 20, chk.failures()  # Z3's witness: some size with p >= 20
    peak = cert.peak_memory2
    wrong = dataclasses.replace(cert, peak_memory2=lambda o, p, m, d: (peak(o, p, m, d)[0] - 1,
                                                                       peak(o, p, m, d)[1]))
    assert not prove_certificate(wrong).ok and crosscheck(wrong, [(3, 6)])


# --------------------------------------------------------------------------- honest verdicts


def test_unknown_never_says_confirmed_and_names_the_generators_cap(store):
    """The closed forms fail only past the generator's device cap: nothing can be simulated
    there, so the verdict is UNKNOWN, its reason names the cap (not the certificate), and
    the text does not say "confirmed"."""
    argv = ["prove", "--family", "1f1b", "makespan == (m + p - 1)*(t_F + t_B) + Max(0, p - 200000)*t_F",
            "--domain", ALL, "--assume", "c == 0"]
    code, out, _ = _cli(argv)
    assert code == 3 and out.startswith("UNKNOWN")
    assert "confirmed by simulating" not in out and "not confirmed by simulation" in out
    assert "p=200001, m=1" in out and "cap of 100,000" in out and "SCHEDVERIFY_MAX_DEVICES" in out
    assert "the certificate or the translation is wrong" not in out


@pytest.mark.parametrize("domain", [ALL, "p=2..3,m=1..3"])
def test_a_division_by_zero_is_refused_by_both_provers_naming_the_size(domain):
    """Z3 gives x/0 a value and sympy gives zoo: rather than PROVED on one and REFUTED on the
    other, both refuse the claim at the size where it divides by zero."""
    text = "peak_inflight(0) + 1/(m - 1) == Min(p, m) + 1/(m - 1)"
    with pytest.raises(UsageError, match=r"divides by zero at p=2, m=1\b.*\(m - 1 == 0 there\)"):
        prove(Claim(text, "1f1b", "", domain))
    code, _, err = _cli(["prove", "--family", "1f1b", text, "--domain", domain])
    assert code == 2 and "divides by zero at p=2, m=1" in err
    # away from m = 1 the claim is fine, for all sizes and on a grid
    assert prove(Claim(text, "1f1b", "", "p >= 2, m >= 2")).verdict == "PROVED"
    assert prove(Claim(text, "1f1b", "", "p=2..3,m=2..3")).verdict == "PROVED"
    # a cost that can be zero's divisor too: t_F - t_B is 0 at t_F = t_B
    with pytest.raises(UsageError, match="divides by zero at p=2, m=1; t_B=1, t_F=1"):
        prove(Claim("bubble_time/(t_F - t_B) >= 0", "1f1b", "c == 0", "p=2..3,m=1..3"))


def test_the_domain_conditions_the_prover_adds_are_printed():
    code, out, _ = _cli(["prove", "--family", "interleaved-1f1b", "bubble_ratio == (p - 1)/(v*m)",
                         "--assume", "c == 0", "--domain", "p >= 2, m >= 1, v == 2"])
    assert code == 0
    assert "kind: all sizes in p >= 2, m >= 1, v == 2, m % p == 0" in out
    assert "added to the domain: m % p == 0: the family is generated for m a multiple of p only" in out
    code, out, _ = _cli(["prove", "--family", "interleaved-1f1b", "bubble_ratio == (p - 1)/(v*m)",
                         "--assume", "c == 0", "--domain", "p >= 2, m >= 1, v == 2", "--format", "json"])
    assert json.loads(out)["conditions_added"][0]["condition"] == "m % p == 0"


def test_zb_h1_without_v_uses_the_default_chunk_count_of_generate_and_says_so():
    code, out, _ = _cli(["prove", "--family", "zb-h1", "peak_inflight(d) == Min(p, m)", "--domain", "p>=2, m>=p"])
    assert code == 0 and "kind: all sizes in p>=2, m>=p, v == 1" in out
    assert "added to the domain: v == 1: zb-h1's default chunk count, the one `schedverify generate` builds" in out
    # the finite prover takes the same default
    res = prove(Claim("peak_inflight(d) == Min(p, m)", "zb-h1", "", "p=2..4,m=1..4"))
    assert res.verdict == "PROVED" and res.domain["v"] == [1, 1] and res.conditions[0][0] == "v == 1"


# --------------------------------------------------------------------------- ZB-V


ZB_V_ABOVE = "c == 0, t_I == t_F, t_W == t_F, m >= 2*p - 1"


@pytest.mark.parametrize("text", [
    "makespan == (6*m + p - 1)*t_F",
    "bubble_ratio == (p - 1)/(6*m)",
    "peak_memory/2 == peak_memory@1f1b",
    "peak_inflight(d) == 2*p",
    "fwd_before_bwd(d) == 2*p",
])
def test_zb_v_above_2p_minus_1_is_proved_for_all_sizes(text, store):
    """m >= 2p - 1: ZB-V's certificate (every device busy from its first action to its last
    at unit costs; 2p chunk activations, 1F1B's p stages), for every p."""
    res = prove(Claim(text, "zb-v", ZB_V_ABOVE, ALL), store=store)
    assert res.verdict == "PROVED", res.to_json()
    assert res.kind == f"all sizes in {ALL}" and "zb-v v=2" in res.certificates and not res.below


def test_zb_v_false_past_the_grid_is_refuted_at_the_smallest_size(store):
    """A bubble bound that holds on the grid (p <= 6) and fails from p = 8 on: the smallest
    counterexample, confirmed by simulating the schedule there."""
    res = prove(Claim("bubble_ratio <= 1/m", "zb-v", ZB_V_ABOVE, ALL), store=store)
    assert res.verdict == "REFUTED", res.to_json()
    assert res.counterexample["sizes"] == {"p": 8, "m": 15, "v": 2}  # v: ZB-V's two chunks
    assert res.minimal.startswith("no counterexample with smaller p in the domain")


def test_zb_v_grid_claims_split_where_the_certificate_ends(store):
    """The catalogue's ZB-V claims with --all-sizes: one whose assumptions keep m >= 2p - 1 is
    judged for every size; a peak claim over every m too, below 2p - 1 by the truncation's
    bounds; one those bounds do not decide is split, every size with m >= 2p - 1 and the grid
    below; a refutation is the whole grid's, as without the split."""
    cat = {c.id: c for c in _catalogue("zb-v")}
    same = prove(cat["vzb-zero-same-memory"], all_sizes=True, store=store)
    assert same.verdict == "PROVED" and same.kind == "all sizes in p >= 2, m >= 1" and not same.below
    onex = prove(cat["zb-v-memory-1x"], all_sizes=True, store=store)
    assert onex.verdict == "PROVED" and onex.kind == "all sizes in p >= 2, m >= 1" and not onex.below
    assert onex.certificates["zb-v v=2"]["below"].startswith("m < 2*p - 1: its order at m = 2*p - 1 with")
    split = prove(Claim(SPLIT, "zb-v", "", "p=2..6,m=1..16"), all_sizes=True, store=store)
    assert split.verdict == "PROVED", split.to_json()
    assert split.below == "p=2..6,m=1..16,d=0..p-1 where m < 2*p - 1"
    assert split.kind == ("all sizes in p >= 2, m >= 1, m >= 2*p - 1; finite range p=2..6,m=1..16,d=0..p-1 "
                          "where m < 2*p - 1")
    assert split.checked == 140 and split.to_json()["finite_part"] == split.below
    zero = prove(cat["zb-v-zero"], all_sizes=True, store=store)
    assert zero.verdict == "REFUTED" and zero.kind == "all sizes in p >= 2, m >= 1" and not zero.below
    assert zero.counterexample["sizes"]["p"] == 2 and zero.counterexample["sizes"]["m"] == 1
    # false below m = 2p - 1 only: the whole grid judges it, no split
    low = prove(Claim("peak_inflight == 2*p", "zb-v", "", "p=2..6,m=1..16"), all_sizes=True, store=store)
    assert low.verdict == "REFUTED" and not low.below
    assert low.counterexample["sizes"]["p"] == 2 and low.counterexample["sizes"]["m"] == 1


#: true at every size (the generator's docstring), but below m = 2p - 1 the truncation bounds
#: the peaks by 2p and 2m only, not by m + 1 + d
SPLIT = "peak_inflight(d) <= Min(2*p, m + 1 + d)"


def test_a_split_verdict_says_which_sizes_are_finite():
    code, out, _ = _cli(["prove", "--family", "zb-v", SPLIT, "--domain", "p=2..6,m=1..16", "--all-sizes"])
    assert code == 0
    assert ("kind: all sizes in p >= 2, m >= 1, m >= 2*p - 1; finite range p=2..6,m=1..16,d=0..p-1 "
            "where m < 2*p - 1") in out
    assert "proved for every size of the all-sizes part (p >= 2, m >= 1, m >= 2*p - 1)" in out
    assert ("and exactly at all 140 sizes of the finite range p=2..6,m=1..16,d=0..p-1 where m < 2*p - 1 "
            "(below the closed forms of the certificate)") in out


@pytest.mark.parametrize("text, verdict", [
    ("peak_memory/2 <= peak_memory@1f1b", "PROVED"),  # the paper's "activation memory 1x"
    ("peak_inflight(d) <= 2*Min(p, m)", "PROVED"),
    ("peak_memory(d) <= 2*m", "PROVED"),
    (SPLIT, "UNKNOWN"),  # true, but not from the bounds alone
    ("peak_inflight >= 1", "UNKNOWN"),  # the bounds are from above only
    ("peak_inflight <= 2*p - 1", "REFUTED"),  # false: by the grid's counterexample
])
def test_zb_v_peaks_below_2p_minus_1_are_bounded_by_truncation(text, verdict, store):
    """Below m = 2p - 1 ZB-V's order is its order at 2p - 1 with microbatches dropped: each
    peak is at most the one there and two per microbatch (docs/proofs.md section 2), which
    proves upper bounds for every size and decides nothing else."""
    res = prove(Claim(text, "zb-v", "", "p >= 2, m >= 1"), store=store)
    assert res.verdict == verdict, res.to_json()
    why = "below m = 2*p - 1 the order of zb-v is its order there with microbatches dropped, whose peaks are " \
          "bounded from above only"
    if verdict == "UNKNOWN":
        assert res.reason.startswith(why), res.reason
    if verdict == "REFUTED":  # for all sizes, the bounds' reason kept
        assert res.kind == "all sizes in p >= 2, m >= 1" and res.all_sizes_reason.startswith(why)


def test_the_truncation_bounds_hold_on_the_simulated_schedule():
    """What the bounds say, against the memory sweep: below m = 2p - 1 every device's peaks
    are at most its peaks at 2p - 1 and two per microbatch."""
    for p in range(2, 9):
        full = sv.check(generate("zb-v", p, 2 * p - 1)).metrics.devices
        for m in range(1, 2 * p - 1):
            for d, dev in enumerate(sv.check(generate("zb-v", p, m)).metrics.devices):
                assert dev.peak_inflight <= min(full[d].peak_inflight, 2 * m), (p, m, d)
                assert dev.peak_memory <= min(full[d].peak_memory, 2 * m), (p, m, d)


# --------------------------------------------------------------------------- DualPipe, DualPipeV


@pytest.mark.parametrize("text,family", [
    ("peak_inflight(d) == 2*p + 1", "dualpipe-v"),
    ("peak_memory(d)/2 == p + 1/2", "dualpipe-v"),
    ("fwd_before_bwd(d) == 2*p + floor((d + 1)/p)", "dualpipe-v"),
    ("peak_inflight(d) == p + 1", "dualpipe"),
    ("peak_inflight == peak_inflight@1f1b + 1", "dualpipe"),
    ("fwd_before_bwd == p + 1", "dualpipe"),
])
def test_dualpipe_peaks_are_proved_for_all_sizes(text, family, store):
    """m >= 2p: DeepSeek's eight steps in closed form, composite actions as leaves; DualPipe
    on its mirror placement at p/2 half ranks, for p and m even; the generators' domains are
    added to the claim's."""
    res = prove(Claim(text, family, "m >= 2*p", ALL), store=store)
    assert res.verdict == "PROVED", res.to_json()
    added = ", p % 2 == 0, m % 2 == 0, m >= 2*p" if family == "dualpipe" else ", m >= 2*p"
    assert res.kind == f"all sizes in {ALL}{added}" and family in " ".join(res.certificates)
    assert [c for c, _ in res.conditions] == [added[2:]]  # the generator's domain, printed
    # without the assumption too: the family has no other sizes
    assert prove(Claim(text, family, "", ALL), store=store).verdict == "PROVED"


def test_dualpipe_false_past_the_grid_is_refuted_at_the_smallest_size(store):
    """A warm-up bound that holds up to p = 10 and fails from p = 12 on (p even): the
    smallest counterexample, confirmed by simulating the schedule there."""
    res = prove(Claim("fwd_before_bwd(d) <= p + 1 - floor(p/12)", "dualpipe", "m >= 2*p", ALL), store=store)
    assert res.verdict == "REFUTED", res.to_json()
    assert res.counterexample["sizes"]["p"] == 12 and res.counterexample["sizes"]["m"] == 24
    assert res.minimal.startswith("no counterexample with smaller p in the domain")


def test_dualpipe_timing_and_busy_time_stay_unknown_for_all_sizes(store):
    """The certificates give the order (leaves), not the start times: a makespan claim and a
    busy-time claim (a full B costs t_B, its leaves I and W do not) are not judged by them."""
    res = prove(Claim("makespan >= 0", "dualpipe-v", "c == 0, m >= 2*p", "p >= 1, m >= 2*p"), store=store)
    assert res.verdict == "UNKNOWN" and "no timing" in res.reason, res.to_json()
    assert res.reason.endswith("the exact search found no counterexample on p=1..7,m=1..24")
    # a false one is refuted for all sizes by the exact search on the grid (a full B costs t_B)
    for text, family in (("busy == 2*m*(t_F + t_I + t_W)", "dualpipe-v"), ("busy == 1", "dualpipe")):
        res = prove(Claim(text, family, "c == 0, m >= 2*p", "p >= 2, m >= 2*p"), store=store)
        assert res.verdict == "REFUTED" and res.kind.startswith("all sizes in p >= 2, m >= 2*p"), res.to_json()
        assert "leaves" in res.all_sizes_reason


def test_the_dualpipe_catalogue_peaks_are_judged_for_all_sizes(store):
    cat = {c.id: c for c in _catalogue("dualpipe") + _catalogue("dualpipe-v")}
    for cid in ("dualpipe-activation-pp-plus-1", "dualpipe-one-more-than-1f1b", "dualpipev-activation"):
        res = prove(cat[cid], all_sizes=True, store=store)
        assert res.verdict == "PROVED" and res.kind.startswith("all sizes in p >= 2, m >= 1"), (cid, res.to_json())
    # the bubble claims read the timing: finite, as before
    res = prove(cat["dualpipe-bubble-below-1f1b"], all_sizes=True, store=store)
    assert res.verdict == "PROVED" and res.kind.startswith("finite range")


def test_a_wrong_dualpipe_peak_is_caught_by_z3_and_by_the_generator():
    """DualPipeV's in-flight peak stated as 2p (1F1B's, in chunks) rather than 2p + 1: Z3
    refuses it ("reached at F(d, i*)" fails), and the cross-check with the schedule too."""
    cert = certificate("dualpipe-v")
    wrong = dataclasses.replace(cert, peak_inflight=lambda o, p, m, d: (2 * p, 3 * p - d - 1))
    names = [o.name for o in prove_certificate(wrong).failures()]
    assert names == ["peak_inflight(d): every F start <= value", "peak_inflight(d): reached at F(d, i*)"], names
    assert crosscheck(wrong, [(2, 4)])
