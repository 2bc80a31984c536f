"""The timeline and memory of docs/spec.md sections 4 and 5 on small cases computed by hand."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

import schedverify as sv
from schedverify import Costs, MemoryModel, Schedule


def gpipe(D: int, M: int) -> Schedule:
    return Schedule.build([[f"{d}F{i}" for i in range(M)] + [f"{d}B{i}" for i in range(M)] for d in range(D)])


def one_f_one_b(D: int, M: int) -> Schedule:
    """Device d: D-1-d warm-up forwards, then one forward one backward, then the rest."""
    rows = []
    for d in range(D):
        warm = min(D - 1 - d, M)
        row = [f"{d}F{i}" for i in range(warm)]
        f, b = warm, 0
        while f < M:
            row += [f"{d}F{f}", f"{d}B{b}"]
            f, b = f + 1, b + 1
        row += [f"{d}B{i}" for i in range(b, M)]
        rows.append(row)
    return Schedule.build(rows, stages=D)


def times(tl) -> dict[str, tuple[float, float]]:
    return {str(a): (s, e) for d in range(tl.schedule.devices) for a, s, e in tl.entries(d)}


def test_gpipe_two_devices_by_hand():
    tl = sv.timeline(gpipe(2, 2))
    assert times(tl) == {
        "0F0": (0, 1), "0F1": (1, 2), "0B0": (5, 7), "0B1": (7, 9),
        "1F0": (1, 2), "1F1": (2, 3), "1B0": (3, 5), "1B1": (5, 7),
    }
    m = tl.metrics()
    assert m.makespan == 9
    assert [(d.busy, d.idle) for d in m.devices] == [(6, 3), (6, 3)]
    assert m.bubble_fraction == pytest.approx(1 - 12 / 18)
    assert m.bubble_ratio == pytest.approx(3 / 6)


@pytest.mark.parametrize("D, M", [(2, 1), (2, 4), (3, 5), (4, 8), (4, 2), (5, 16)])
def test_1f1b_and_gpipe_makespan_and_bubble(D, M):
    for s in (one_f_one_b(D, M), gpipe(D, M)):
        report = sv.check(s, costs={"F": 1, "B": 2})
        assert report.is_valid, [str(v) for v in report.violations]
        m = report.metrics
        assert m.makespan == (M + D - 1) * 3
        # Narayanan et al.'s (p-1)/m is the bubble *ratio*
        assert m.bubble_ratio == pytest.approx((D - 1) / M)
        assert m.bubble_fraction == pytest.approx((D - 1) / (M + D - 1))
        assert all(d.busy == 3 * M and d.idle == m.makespan - 3 * M for d in m.devices)


@pytest.mark.parametrize("D, M", [(2, 1), (3, 2), (4, 4), (4, 8), (5, 3), (6, 12)])
def test_1f1b_first_stage_peaks_at_min_D_M_in_flight(D, M):
    m = sv.check(one_f_one_b(D, M)).metrics
    assert m.devices[0].peak_inflight == min(D, M)  # not D - 1 (docs/spec.md 5)
    assert [d.peak_inflight for d in m.devices] == [min(D - d, M) for d in range(D)]
    assert [d.peak_memory for d in m.devices] == [min(D - d, M) for d in range(D)]
    # GPipe holds all M
    assert {d.peak_inflight for d in sv.check(gpipe(D, M)).metrics.devices} == {M}


def test_in_flight_depends_on_the_order_not_the_costs():
    s = one_f_one_b(4, 8)
    a = sv.check(s, costs={"F": 1, "B": 2}).metrics
    b = sv.check(s, costs={"F": 5, "B": 0.5, "comm": 3}).metrics
    assert [d.peak_inflight for d in a.devices] == [d.peak_inflight for d in b.devices]
    assert a.makespan != b.makespan


def test_weighted_memory_with_split_backward_and_w():
    # one device: F0 allocates 2; I0 frees (1-w)*2; F1 allocates 2; W0 frees w*2; ...
    s = Schedule.build([["0F0", "0I0", "0F1", "0W0", "0I1", "0W1"]])
    for w, peak in [(0.25, 2.5), (0.5, 3.0), (1.0, 4.0), (0.0, 2.0)]:
        m = sv.check(s, memory={"activation": 2, "w": w}).metrics
        assert m.devices[0].peak_memory == pytest.approx(peak), w
        assert m.devices[0].peak_inflight == 2  # F1 starts before W0 ends: both in flight
    # a full backward frees everything at its end
    s = Schedule.build([["0F0", "0B0", "0F1", "0B1"]])
    m = sv.check(s, memory={"activation": 2}).metrics
    assert (m.devices[0].peak_memory, m.devices[0].peak_inflight) == (2, 1)


def test_memory_over_time_steps():
    s = Schedule.build([["0F0", "0I0", "0F1", "0W0", "0I1", "0W1"]])
    tl = sv.timeline(s, costs={"F": 1, "I": 1, "W": 1}, memory={"activation": 2, "w": 0.25})
    series = tl.memory().series[0]
    # (time, memory) at each action's start and end
    assert series[0] == (0.0, 0.0)
    assert max(v for _, v in series) == pytest.approx(2.5)
    assert series[-1][1] == pytest.approx(0)
    assert (2, 2.5) in [(t, pytest.approx(v)) for t, v in series]


def test_per_stage_activation_and_static_memory():
    # loop placement, 2 devices, 4 stages: device 0 holds stages 0 and 2, device 1 stages 1 and 3
    s = Schedule.build([["0F0", "2F0", "2B0", "0B0"], ["1F0", "3F0", "3B0", "1B0"]], stages=4)
    mem = MemoryModel(activation=(1, 2, 3, 4), static=(10, 20, 30, 40))
    m = sv.check(s, memory=mem).metrics
    assert [d.static_memory for d in m.devices] == [40, 60]
    assert [d.peak_memory for d in m.devices] == [40 + 1 + 3, 60 + 2 + 4]
    assert [d.peak_inflight for d in m.devices] == [2, 2]
    assert m.peak_memory == 66 and m.peak_inflight == 2


def test_comm_latency_on_cross_device_dependencies_only():
    s = gpipe(2, 1)
    tl = sv.timeline(s, costs={"F": 1, "B": 2, "comm": 0.5})
    assert times(tl) == {"0F0": (0, 1), "1F0": (1.5, 2.5), "1B0": (2.5, 4.5), "0B0": (5, 7)}
    m = tl.metrics()
    assert m.makespan == 7
    assert m.bubble_fraction == pytest.approx(1 - 6 / 14)
    assert m.bubble_ratio == pytest.approx((7 - 3) / 3)


def test_per_stage_costs():
    s = gpipe(2, 1)
    tl = sv.timeline(s, costs=Costs(F=(1, 3), B=(2, 6)))
    assert times(tl) == {"0F0": (0, 1), "1F0": (1, 4), "1B0": (4, 10), "0B0": (10, 12)}
    assert tl.metrics().bubble_ratio == pytest.approx((12 - 9) / 9)


def test_costs_from_the_file_and_overrides():
    s = gpipe(2, 1).with_(costs=Costs(F=2, B=4))
    assert sv.timeline(s).makespan == 12
    assert sv.timeline(s, costs={"B": 1}).makespan == 6  # F=2 from the file, B=1 on top
    assert sv.timeline(s, costs=Costs()).makespan == 6  # a Costs replaces the file's


def test_critical_path_single_microbatch_is_the_whole_chain():
    tl = sv.timeline(gpipe(3, 1), costs={"F": 1, "B": 2, "comm": 1})
    m = tl.metrics()
    assert m.critical_path == ("0F0", "1F0", "2F0", "2B0", "1B0", "0B0")
    assert m.makespan == 3 * 1 + 3 * 2 + 4 * 1


@pytest.mark.parametrize("make, D, M, comm", [(one_f_one_b, 4, 8, 0), (gpipe, 3, 4, 0.5), (one_f_one_b, 3, 6, 2)])
def test_critical_path_is_tight_from_zero_to_the_makespan(make, D, M, comm):
    tl = sv.timeline(make(D, M), costs={"F": 1, "B": 2, "comm": comm})
    path = tl.metrics().critical_path
    t = times(tl)
    dev = {str(a): d for d in range(D) for a, _, _ in tl.entries(d)}
    assert t[path[0]][0] == 0
    assert t[path[-1]][1] == tl.makespan
    for a, b in zip(path, path[1:]):
        gap = comm if dev[a] != dev[b] else 0
        assert t[b][0] == pytest.approx(t[a][1] + gap), (a, b)


def test_explicit_comm_actions_take_their_costs():
    order = [["0F0", "0SEND_F0", "0RECV_B0", "0B0"], ["1RECV_F0", "1F0", "1B0", "1SEND_B0"]]
    s = Schedule.build(order)
    assert sv.timeline(s).makespan == 6  # sends and receives cost 0 by default
    tl = sv.timeline(s, costs={"SEND_F": 1, "RECV_F": 1, "SEND_B": 1, "RECV_B": 1})
    t = times(tl)
    assert t["0SEND_F0"] == (1, 2) and t["1RECV_F0"] == (2, 3)
    assert tl.makespan == 10


def test_overlap_cost():
    from schedverify import Action, overlap

    order = [["0F0", overlap(Action(0, "F", 1), Action(0, "B", 0)), "0B1"], ["1F0", "1B0", "1F1", "1B1"]]
    s = Schedule.build(order)
    t = times(sv.timeline(s))
    assert t["(0F1;0B0)OVERLAP_F_B"] == (4, 7)  # F + B when no overlap cost is given
    t = times(sv.timeline(s, costs={"OVERLAP_F_B": 2}))
    assert t["(0F1;0B0)OVERLAP_F_B"] == (4, 6)


def test_idle_slots_are_ignored_by_timing():
    a = sv.timeline(gpipe(2, 2)).makespan
    rows = [[None, *r, None] for r in gpipe(2, 2).order]
    assert sv.timeline(Schedule.build(rows)).makespan == a


def test_timeline_refuses_a_deadlock():
    s = Schedule.build([["0F0", "0B0", "0F1", "0B1"], ["1F1", "1B1", "1F0", "1B0"]])
    with pytest.raises(sv.DeadlockError, match="deadlocks; run check to see the cycle"):
        sv.timeline(s)
    m = sv.check(s).metrics
    assert m.makespan is None and m.bubble_fraction is None
    assert [d.peak_inflight for d in m.devices] == [1, 1]  # memory still follows the order


@given(st.integers(1, 6), st.integers(1, 12), st.integers(1, 4), st.integers(1, 4), st.integers(0, 3))
def test_1f1b_closed_form_for_any_costs(D, M, F, B, comm):
    m = sv.check(one_f_one_b(D, M), costs={"F": F, "B": B, "comm": comm}).metrics
    busy = M * (F + B)
    assert all(d.busy == busy for d in m.devices)
    assert m.makespan >= busy + (D - 1) * (F + B) + 2 * (D - 1) * comm
    assert m.bubble_fraction == pytest.approx(1 - busy / m.makespan)
    assert m.bubble_ratio == pytest.approx(m.makespan / busy - 1)
    if comm == 0:
        assert m.makespan == (M + D - 1) * (F + B)


def test_comm_latency_with_explicit_communication_sits_between_send_and_recv():
    order = [["0F0", "0SEND_F0", "0RECV_B0", "0B0"], ["1RECV_F0", "1F0", "1B0", "1SEND_B0"]]
    t = times(sv.timeline(Schedule.build(order), costs={"comm": 1}))
    assert t["0SEND_F0"] == (1, 1) and t["1RECV_F0"] == (2, 2) and t["1F0"] == (2, 3)
    assert t["1SEND_B0"] == (5, 5) and t["0RECV_B0"] == (6, 6) and t["0B0"] == (6, 8)


def test_rendezvous_send_waits_until_its_receive_is_posted():
    # device 1 posts the receive of microbatch 1 only after 1B0; under rendezvous the send on
    # device 0 cannot happen before that, under eager it returns at once.
    order = [["0F0", "0SEND_F0", "0F1", "0SEND_F1", "0RECV_B0", "0B0", "0RECV_B1", "0B1"],
             ["1RECV_F0", "1F0", "1B0", "1RECV_F1", "1SEND_B0", "1F1", "1B1", "1SEND_B1"]]
    s = Schedule.build(order)
    eager = times(sv.timeline(s, comm_semantics="eager"))
    rdv = times(sv.timeline(s, comm_semantics="rendezvous"))
    assert eager["0SEND_F1"] == (2, 2)  # a send never blocks
    # 1RECV_F1 is posted when 1B0 ends (at 4): the send starts then
    assert rdv["0SEND_F1"] == (4, 4)
    assert rdv["0RECV_B0"][0] >= rdv["0SEND_F1"][1]
