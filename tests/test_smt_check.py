"""The Z3 engine against the graph engine: same verdict, same codes, same makespan.

Random valid schedules come from the generators; invalid ones from small mutations written
here (swap, move to another device, drop, duplicate, re-index, lower to explicit
communication and reorder).  Any disagreement is a bug in one of the two engines.
"""

from __future__ import annotations

import io

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schedverify import Costs, Verdict, check
from schedverify.engines import disagreements
from schedverify.cli import run
from schedverify.generators import FAMILIES
from schedverify.model import RECV_B, RECV_F, SEND_B, SEND_F, Action, Schedule

z3check = pytest.importorskip("schedverify.smt.check")
check_z3 = z3check.check_z3


def agree(schedule: Schedule, **options) -> None:
    g = check(schedule, **options)
    z = check_z3(schedule, **options)
    assert z.engine == "z3"
    assert z.verdict is not Verdict.UNKNOWN, z.reason
    assert disagreements(g, z) == [], (g.violations[:3], z.violations[:3])
    # the same offending actions for the rules both engines locate the same way
    for code in ("SV101", "SV102", "SV201", "SV202", "SV203", "SV301", "SV401", "SV501", "SV502",
                 "SV503", "SV601"):
        gl = sorted(str(v.locations[0]) for v in g.violations if v.code.code == code)
        zl = sorted(str(v.locations[0]) for v in z.violations if v.code.code == code)
        assert gl == zl, code


FAMILY_NAMES = [n for n in ("gpipe", "1f1b", "zb-h1", "zb-h2", "interleaved-1f1b", "looped-bfs",
                            "zb-v", "dualpipe-v") if n in FAMILIES]


@st.composite
def generated(draw):
    name = draw(st.sampled_from(FAMILY_NAMES))
    fam = FAMILIES[name]
    D = draw(st.integers(1, 4))
    M = draw(st.integers(1, 8))
    kw = {"chunks": draw(st.integers(2, 3))} if fam.chunks and name != "zb-h1" else {}
    try:
        return fam(D, M, **kw)
    except Exception:  # noqa: BLE001  (sizes outside the family's domain)
        return FAMILIES["1f1b"](D, M)


costs_st = st.builds(Costs, F=st.integers(0, 3), B=st.integers(1, 4), I=st.integers(0, 2),
                     W=st.integers(0, 2), comm=st.sampled_from([0, 0, 1, 0.5]))


def _rows(s: Schedule) -> list[list]:
    return [list(r) for r in s.order]


def mutate(s: Schedule, kind: str, data) -> Schedule:
    rows = _rows(s)
    d = data.draw(st.integers(0, len(rows) - 1))
    if not rows[d]:
        return s
    p = data.draw(st.integers(0, len(rows[d]) - 1))
    if kind == "swap":
        q = data.draw(st.integers(0, len(rows[d]) - 1))
        rows[d][p], rows[d][q] = rows[d][q], rows[d][p]
    elif kind == "move":
        e = data.draw(st.integers(0, len(rows) - 1))
        a = rows[d].pop(p)
        rows[e].insert(data.draw(st.integers(0, len(rows[e]))), a)
    elif kind == "drop":
        rows[d].pop(p)
    elif kind == "duplicate":
        rows[d].insert(data.draw(st.integers(0, len(rows[d]))), rows[d][p])
    elif kind == "reindex":
        a = rows[d][p]
        if a is not None and a.sub is None and a.microbatch is not None:
            rows[d][p] = a._replace(microbatch=a.microbatch + data.draw(st.sampled_from([1, s.microbatches])))
    elif kind == "null":
        rows[d].insert(p, None)
    elif kind == "cross-swap":  # the k-th action of two devices trade places in order
        q = data.draw(st.integers(0, len(rows[d]) - 1))
        rows[d].insert(q, rows[d].pop(p))
    return s.with_(order=tuple(map(tuple, rows)))


@settings(max_examples=40)
@given(generated(), costs_st, st.data())
def test_engines_agree_on_generated_schedules(s, costs, data):
    limit = data.draw(st.one_of(st.none(), st.sampled_from([1, 2, 2.5, 4])))
    agree(s, costs=costs, memory_limit=limit)


MUTATIONS = ["swap", "move", "drop", "duplicate", "reindex", "null", "cross-swap"]


@settings(max_examples=60)
@given(generated(), st.lists(st.sampled_from(MUTATIONS), min_size=1, max_size=3), st.data())
def test_engines_agree_on_mutated_schedules(s, kinds, data):
    for k in kinds:
        s = mutate(s, k, data)
    limit = data.draw(st.one_of(st.none(), st.just(2)))
    agree(s, memory_limit=limit)


def lower(s: Schedule) -> Schedule:
    """Explicit communication for a one-chunk, loop-placed schedule: RECV before each action
    whose input crosses devices, SEND after each action whose output does."""
    S = s.stages
    rows = []
    for row in s.order:
        out = []
        for a in row:
            if a.kind == "F" and a.stage > 0:
                out.append(Action(a.stage, RECV_F, a.microbatch))
            if a.kind in ("B", "I") and a.stage < S - 1:
                out.append(Action(a.stage, RECV_B, a.microbatch))
            out.append(a)
            if a.kind == "F" and a.stage < S - 1:
                out.append(Action(a.stage, SEND_F, a.microbatch))
            if a.kind in ("B", "I") and a.stage > 0:
                out.append(Action(a.stage, SEND_B, a.microbatch))
        rows.append(tuple(out))
    return s.with_(order=tuple(rows))


@settings(max_examples=40)
@given(st.sampled_from(["1f1b", "gpipe", "zb-h1"]), st.integers(2, 4), st.integers(1, 5),
       st.sampled_from(["eager", "rendezvous"]),
       st.lists(st.sampled_from(["swap", "drop", "cross-swap"]), max_size=2), st.data())
def test_engines_agree_with_explicit_communication(name, D, M, sem, kinds, data):
    s = lower(FAMILIES[name](D, M))
    for k in kinds:
        s = mutate(s, k, data)
    agree(s, comm_semantics=sem)


def test_rendezvous_deadlock_found_by_both():
    # device 0 sends both forwards before receiving any backward; device 1 receives only
    # after posting its own send: fine eagerly, a hang under rendezvous
    s = Schedule.build([
        ["0F0", "0SEND_F0", "0F1", "0SEND_F1", "0RECV_B0", "0B0", "0RECV_B1", "0B1"],
        ["1RECV_F0", "1F0", "1B0", "1SEND_B0", "1RECV_F1", "1F1", "1B1", "1SEND_B1"],
    ])
    assert check_z3(s, comm_semantics="eager").is_valid
    r = check_z3(s, comm_semantics="rendezvous")
    g = check(s, comm_semantics="rendezvous")
    assert r.codes() == g.codes()
    assert disagreements(g, r) == []


def test_unsat_core_is_mapped_to_the_actions_of_the_cycle():
    s = FAMILIES["1f1b"](2, 2)
    rows = _rows(s)
    # device 1 runs its second forward before the first backward, device 0 waits for it
    rows[0] = [Action(0, "F", 0), Action(0, "B", 0), Action(0, "F", 1), Action(0, "B", 1)]
    rows[1] = [Action(1, "F", 1), Action(1, "F", 0), Action(1, "B", 0), Action(1, "B", 1)]
    r = check_z3(s.with_(order=tuple(map(tuple, rows))))
    assert r.codes() == ["SV402"]
    v = r.violations[0]
    assert {str(loc.action) for loc in v.locations} == {"0B0", "1F1"}
    assert len(v.witness) == 2


def test_timeout_is_unknown_never_valid():
    s = FAMILIES["1f1b"](4, 8)
    r = check_z3(s, timeout_s=1e-9)
    assert r.verdict is Verdict.UNKNOWN
    assert "time" in r.reason


def test_timeout_with_structural_violations_is_still_invalid():
    s = FAMILIES["1f1b"](2, 2)
    rows = _rows(s)
    rows[0].pop()
    r = check_z3(s.with_(order=tuple(map(tuple, rows))), timeout_s=1e-9)
    assert r.verdict is Verdict.INVALID and "SV201" in r.codes()
    assert r.reason and "did not finish" in r.reason


def test_makespan_and_memory_metrics_come_from_the_solver():
    s = FAMILIES["1f1b"](4, 8)
    r = check_z3(s, costs=Costs(F=1, B=2, comm=0.5))
    g = check(s, costs=Costs(F=1, B=2, comm=0.5))
    assert r.metrics.makespan == g.metrics.makespan
    assert [d.peak_memory for d in r.metrics.devices] == [d.peak_memory for d in g.metrics.devices]
    assert [d.peak_inflight for d in r.metrics.devices] == [d.peak_inflight for d in g.metrics.devices]


def _cli(*argv):
    out, err = io.StringIO(), io.StringIO()
    code = run(list(argv), out, err)
    return code, out.getvalue(), err.getvalue()


def test_cli_engines(tmp_path):
    from schedverify import dump

    good = tmp_path / "good.json"
    dump(FAMILIES["1f1b"](3, 4), good)
    rows = _rows(FAMILIES["1f1b"](3, 4))
    rows[2][0], rows[2][1] = rows[2][1], rows[2][0]
    bad = tmp_path / "bad.json"
    dump(FAMILIES["1f1b"](3, 4).with_(order=tuple(map(tuple, rows))), bad)
    for engine in ("graph", "z3", "both"):
        assert _cli("check", "--engine", engine, str(good))[0] == 0
        assert _cli("check", "--engine", engine, str(bad))[0] == 1
    code, out, _ = _cli("check", "--engine", "z3", "--timeout", "0.000000001", str(good))
    assert code == 3 and "time limit" in out
    assert _cli("check", "--engine", "nope", str(good))[0] == 2


def test_cli_both_fails_loudly_on_disagreement(tmp_path, monkeypatch):
    from schedverify import dump

    path = tmp_path / "s.json"
    dump(FAMILIES["1f1b"](2, 2), path)
    real = z3check.check_z3

    def wrong(schedule, **kw):
        r = real(schedule, **kw)
        r.metrics = r.metrics.__class__(r.metrics.makespan + 1, *[getattr(r.metrics, f) for f in
                                        ("bubble_fraction", "bubble_ratio", "devices")])
        return r

    monkeypatch.setattr(z3check, "check_z3", wrong)
    code, _, err = _cli("check", "--engine", "both", str(path))
    assert code == 2 and "disagree" in err and "makespan" in err
