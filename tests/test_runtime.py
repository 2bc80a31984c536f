"""PyTorch's runtime semantics (docs/spec.md 8) as properties: what lowering preserves, how the
semantics order one another, and that the sweep is linear.

- PyTorch's own lowering of any valid compute-only schedule runs under ``torch`` with exactly
  the compute-only makespan (zero SEND/RECV costs, any latency): section 8.4's promise.
- ``torch-nccl`` only adds waits to ``torch``: whatever hangs or is wrong on gloo is so on
  NCCL, and nothing runs faster on NCCL; one stream per peer and buffered sends only remove
  waits.
The real runtime's agreement with these verdicts is tests/test_realrt.py; the Z3 engine's is
tests/test_smt_runtime.py.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import schedverify as sv
from schedverify.generators import FAMILIES
from schedverify.lowering import LoweringError, lower_checked, torch_lowering
from schedverify.runtime import NcclOptions
from schedverify.strategies import costs, mutations, schedules, valid_schedules

UNIDIRECTIONAL = [name for name in FAMILIES if name not in ("dualpipe", "chimera")]

def _codes(report) -> set[str]:
    return set(report.codes())


@pytest.mark.parametrize("family", UNIDIRECTIONAL)
@pytest.mark.parametrize("devices, microbatches", [(2, 4), (4, 8), (3, 6)])
def test_pytorch_lowering_of_every_family_runs_at_its_compute_only_makespan(family, devices, microbatches):
    s = FAMILIES[family](devices, microbatches)
    low = torch_lowering(s)
    compute_only = sv.check(s, comm_semantics="torch")
    assert compute_only.is_valid, [str(v) for v in compute_only.violations]
    gloo = sv.check(low, comm_semantics="torch")
    assert gloo.is_valid, [str(v) for v in gloo.violations]
    assert gloo.metrics.makespan == compute_only.metrics.makespan
    assert [d.busy for d in gloo.metrics.devices] == [d.busy for d in compute_only.metrics.devices]
    assert gloo.warnings == []  # the lowering adds REDUCE_GRAD
    nccl = sv.check(low, comm_semantics="torch-nccl")
    if nccl.is_valid:
        assert nccl.metrics.makespan >= gloo.metrics.makespan


@settings(max_examples=40)
@given(valid_schedules(bidirectional=False, comm="none", reduce_grad=False), costs(comm=True))
def test_lowering_keeps_the_makespan_under_torch(s, c):
    """Any valid compute-only schedule whose loss stage runs in order: PyTorch's lowering runs
    on gloo exactly as the compute-only schedule does, under any costs and latency."""
    base = sv.check(s, costs=c, comm_semantics="torch")
    if not base.is_valid:  # the loss stage's forwards out of order: nothing PyTorch can run
        assert _codes(base) == {"SV406"}
        return
    try:
        low = torch_lowering(s)
    except LoweringError as e:  # a device with no action at all
        assert "has no action" in str(e)
        return
    r = sv.check(low, costs=c, comm_semantics="torch")
    assert r.is_valid, [str(v) for v in r.violations]
    assert r.metrics.makespan == pytest.approx(base.metrics.makespan)


NCCL_VARIANTS = {
    "pair+buffered": NcclOptions(streams="pair", buffered_sends=True),
    "device+buffered": NcclOptions(streams="device", buffered_sends=True),
    "pair": NcclOptions(streams="pair"),
    "device": NcclOptions(streams="device"),
}
#: (fewer waits, more waits): every wait of the first is one of the second (docs/spec.md 8.4)
LADDER = [("gloo", "pair+buffered"), ("pair+buffered", "pair"), ("pair", "device"),
          ("pair+buffered", "device+buffered"), ("device+buffered", "device")]

EXPLICIT = valid_schedules(bidirectional=False, comm="eager", devices=st.integers(2, 4))


def _assert_ladder(s, c):
    reports = {"gloo": sv.check(s, costs=c, comm_semantics="torch")}
    for name, options in NCCL_VARIANTS.items():
        reports[name] = sv.check(s, costs=c, comm_semantics="torch-nccl", nccl=options)
    # what is wrong on gloo is wrong on NCCL: every gloo code but the hang's is on every rung
    base = _codes(reports["gloo"]) - {"SV402"}
    for name in NCCL_VARIANTS:
        assert base <= _codes(reports[name]), (name, reports["gloo"].codes(), reports[name].codes())
    # more waits never make a schedule run, nor run sooner
    for fewer, more in LADDER:
        t_more = reports[more].metrics.makespan
        if t_more is not None:
            t_fewer = reports[fewer].metrics.makespan
            assert t_fewer is not None and t_fewer <= t_more + 1e-9, (fewer, t_fewer, more, t_more)


@settings(max_examples=60)
@given(EXPLICIT, costs(comm=True, comm_actions=True))
def test_nccl_only_adds_waits_on_generated_schedules(s, c):
    _assert_ladder(s, c)


@settings(max_examples=60)
@given(EXPLICIT.flatmap(mutations), costs(comm=True, comm_actions=True))
def test_nccl_only_adds_waits_on_mutated_schedules(m, c):
    _assert_ladder(m.schedule, c)


def test_every_comm_action_gets_ready_and_done_times():
    s = torch_lowering(FAMILIES["interleaved-1f1b"](4, 8))
    report = sv.check(s, comm_semantics="torch-nccl", costs={"SEND_F": 1, "RECV_F": 1, "comm": 0.5})
    tl = report.timeline
    assert tl is not None
    for d in range(s.devices):
        for _, start, end in tl.entries(d):
            assert end >= start
    # busy time counts compute only: SEND/RECV costs are transfer times
    assert [d.busy for d in report.metrics.devices] == [48] * 4
    assert report.metrics.makespan > sv.check(s, comm_semantics="torch-nccl").metrics.makespan


def test_a_hang_has_no_timing_but_keeps_its_memory_peaks():
    s = torch_lowering(FAMILIES["interleaved-1f1b"](2, 4), defer_recv=True)
    report = sv.check(s)  # a PyTorch schedule object says nothing: eager
    nccl = sv.check(s, comm_semantics="torch-nccl")
    assert "SV405" in nccl.codes() and nccl.metrics.makespan is None
    assert [d.peak_memory for d in nccl.metrics.devices] == [d.peak_memory for d in report.metrics.devices]


@settings(max_examples=150)
@given(schedules(), st.sampled_from(["torch", "torch-nccl"]), st.booleans(), st.booleans())
def test_any_schedule_gets_a_report_under_the_runtime_semantics(s, sem, pair, buffered):
    """Never an exception for a schedule, however broken; the verdict is the violations'."""
    nccl = NcclOptions(streams="pair" if pair else "device", buffered_sends=buffered)
    report = sv.check(s, comm_semantics=sem, nccl=nccl)
    assert report.is_valid == (not report.violations)
    assert report.comm_semantics == sem
    if report.is_valid:
        assert report.metrics.makespan is not None
        assert report.metrics.critical_path


# --------------------------------------------------------------------------- our lowering (8.6)

from schedverify.lowering import _keyed_lowering, lower  # noqa: E402

ALL_RUNTIMES = [("torch", None)] + [("torch-nccl", options) for options in NCCL_VARIANTS.values()]


@settings(max_examples=60)
@given(valid_schedules(bidirectional=False, comm="none", reduce_grad=False), costs(comm=True))
def test_keyed_lowering_runs_everywhere_at_the_compute_only_makespan(s, c):
    """docs/spec.md 8.6's argument, tested: no hang and no crossed message under gloo and every
    NCCL variant; the compute-only makespan under gloo, and under NCCL without latency."""
    base = sv.check(s, costs=c, comm_semantics="torch")
    if not base.is_valid or any(all(a is None for a in row) for row in s.order):
        return  # the loss stage out of order, or a device PyTorch's lowering refuses
    low = _keyed_lowering(s, base.timeline, base.profile)
    for sem, nccl in ALL_RUNTIMES:
        r = sv.check(low, costs=c, comm_semantics=sem, nccl=nccl)
        assert r.is_valid, (sem, nccl, [str(v) for v in r.violations[:3]])
        if sem == "torch" or c.comm == 0:
            assert r.metrics.makespan == pytest.approx(base.metrics.makespan)


@pytest.mark.parametrize("family", UNIDIRECTIONAL)
@pytest.mark.parametrize("semantics, nccl", ALL_RUNTIMES, ids=["gloo"] + list(NCCL_VARIANTS))
def test_lower_beats_or_equals_pytorch_on_every_family(family, semantics, nccl):
    s = FAMILIES[family](4, 8)
    ours = sv.check(lower(s, comm_semantics=semantics, nccl=nccl), comm_semantics=semantics, nccl=nccl)
    theirs = sv.check(torch_lowering(s), comm_semantics=semantics, nccl=nccl)
    assert ours.is_valid, [str(v) for v in ours.violations[:3]]
    assert ours.metrics.makespan == sv.check(s, comm_semantics="torch").metrics.makespan
    assert theirs.metrics.makespan is None or ours.metrics.makespan <= theirs.metrics.makespan


def test_lower_checked_holds_the_run_of_its_answer_alone():
    """The compute-only and PyTorch reports of lower_checked keep their verdicts and metrics,
    not their runs (each as large as its schedule); the answer's report is check's, whole."""
    s = FAMILIES["interleaved-1f1b"](4, 8)
    found = lower_checked(s, torch="2.15", p2p="shared")
    assert found.report.timeline is not None and found.report.runtime is not None
    assert found.report.to_json() == sv.check(found.schedule, torch="2.15", p2p="shared").to_json()
    for got, schedule in ((found.compute_only, s), (found.pytorch, found.plain)):
        assert got.timeline is None and got.runtime is None
        assert got.to_json() == sv.check(schedule, torch="2.15", p2p="shared").to_json()


def test_lower_checked_falls_back_to_pytorchs_lowering_with_its_whole_report(monkeypatch):
    """When our construction does not run (here, made to hang), PyTorch's lowering is the
    answer, with the report check gives it (checked again in full: its summary was cut)."""
    import schedverify.lowering as lowering

    s = FAMILIES["1f1b"](4, 8)
    hangs = torch_lowering(s, torch="2.15")
    order = [list(row) for row in hangs.order]
    order[1].reverse()
    monkeypatch.setattr(lowering, "_keyed_lowering", lambda *_: hangs.with_(order=tuple(map(tuple, order))))
    found = lower_checked(s, torch="2.15", p2p="shared")
    assert found.schedule.order == found.plain.order and found.report is found.pytorch
    assert found.report.timeline is not None and found.report.runtime is not None
    assert found.report.to_json() == sv.check(found.plain, torch="2.15", p2p="shared").to_json()


def test_a_reports_critical_path_does_not_hold_the_graph_of_a_schedule_of_columns():
    """A report cut to its verdict and metrics (as lower_checked's) lets its graph go: the
    critical path's names are read off the schedule's columns."""
    import gc
    import weakref

    s = sv.loads_csv(sv.dumps_csv(torch_lowering(FAMILIES["1f1b"](4, 8), torch="2.15")))
    if s.columns is None:
        pytest.skip("the Python reader gives Actions, not columns (no kernel)")
    report = sv.check(s, torch="2.15")
    names = sv.check(s, torch="2.15").to_json()["metrics"]["critical_path"]
    graph = weakref.ref(report.timeline.graph)
    report.timeline = report.runtime = None
    gc.collect()
    assert graph() is None
    assert list(report.metrics.critical_path) == names


def test_lower_refuses_what_cannot_run():
    with pytest.raises(LoweringError, match="the compute-only schedule is invalid"):
        lower(sv.Schedule.build([["0F0", "0F1", "0B0", "0B1"], ["1F1", "1F0", "1B0", "1B1"]]))  # SV406
    with pytest.raises(LoweringError, match="already lists SEND/RECV"):
        lower(torch_lowering(FAMILIES["1f1b"](2, 2)))
    with pytest.raises(LoweringError, match="bidirectional"):
        lower(FAMILIES["dualpipe"](2, 4))
    with pytest.raises(LoweringError, match="comm_semantics must be 'torch' or 'torch-nccl'"):
        lower(FAMILIES["1f1b"](2, 2), comm_semantics="eager")


@pytest.mark.parametrize("bad", [sv.Action(None, "F", 1), sv.Action(None, "W", 1), sv.Action("1", "B", 1)],
                         ids=["F", "W", "str"])
def test_pytorch_lowering_refuses_an_action_without_a_stage(bad):
    """An action whose stage is not an int (only the API can build one) is refused with a
    LoweringError that names it, not a TypeError from the lowering's arithmetic nor a lowered
    schedule with UNSHARD/RESHARD of stage None."""
    s = sv.Schedule.build([["0F0", "0F1", "0B0", "0B1"], ["1F0", "1B0", bad, "1F1", "1B1"]],
                          stages=2, microbatches=2)
    with pytest.raises(LoweringError, match=rf"{bad} at rank 1, position 2 has no stage index"):
        torch_lowering(s)
    with pytest.raises(LoweringError, match="has no stage index"):
        lower(s)
    overlapped = sv.Schedule.build([["0F0", "0F1", "0B0", "0B1"], ["1F0", sv.overlap(sv.Action(1, "F", 1), bad)]],
                                   stages=2, microbatches=2)
    with pytest.raises(LoweringError, match="has no stage index"):
        torch_lowering(overlapped)


def test_a_hung_runs_critical_path_ends_where_released_waits_close_a_cycle():
    """A hung run's released waits are set at time 0 and can bind one another in a cycle:
    the critical path stops there instead of walking it forever."""
    from schedverify.runtime import RuntimeResult

    r = RuntimeResult([0, 0], [1, 1], [3, -1, -1, 0, -1, -1], [], [], None, [None, None], [False, False])
    assert r.critical_path() == [1, 0]  # 0 ends last, bound by 1, which 0 binds again
