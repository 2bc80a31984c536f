"""Every rule of docs/spec.md section 3 on crafted schedules: each violation code, its device and
position, the actions involved, and a message a person can act on."""

from __future__ import annotations

import json

import pytest

import schedverify as sv
from schedverify import CODES, Action, MemoryModel, Schedule, overlap
from schedverify.runtime import NcclOptions

# A valid 2-device, 2-microbatch 1F1B, the base most cases perturb.
ONE_F_ONE_B = [["0F0", "0F1", "0B0", "0B1"], ["1F0", "1B0", "1F1", "1B1"]]

# Explicit communication, valid under both semantics: device 1 posts microbatch 1's
# receive before it sends microbatch 0's gradient.
EXPLICIT = [
    ["0F0", "0SEND_F0", "0F1", "0SEND_F1", "0RECV_B0", "0B0", "0RECV_B1", "0B1"],
    ["1RECV_F0", "1F0", "1B0", "1RECV_F1", "1SEND_B0", "1F1", "1B1", "1SEND_B1"],
]
# Device 0 sends microbatch 1's activation before it receives microbatch 0's gradient;
# device 1 sends that gradient before it posts the receive of microbatch 1's activation.
# Eager: the sends return at once, fine.  Rendezvous: each send waits for a receive that
# sits behind the other device's send: a hang.
RENDEZVOUS_HANG = [
    ["0F0", "0SEND_F0", "0F1", "0SEND_F1", "0RECV_B0", "0B0", "0RECV_B1", "0B1"],
    ["1RECV_F0", "1F0", "1B0", "1SEND_B0", "1RECV_F1", "1F1", "1B1", "1SEND_B1"],
]


def build(order, **kw) -> Schedule:
    kw.setdefault("stages", len(order))
    return Schedule.build(order, **kw)


def only(report, code: str):
    found = [v for v in report.violations if v.code.code == code]
    assert found, f"expected {code}, got {[str(v) for v in report.violations]}"
    return found


def locs(v) -> list[tuple[int, int | None, str]]:
    return [(x.device, x.position, x.action) for x in v.locations]


def test_base_schedules_are_valid():
    assert sv.check(build(ONE_F_ONE_B)).is_valid
    for sem in ("eager", "rendezvous"):
        report = sv.check(build(EXPLICIT), comm_semantics=sem)
        assert report.is_valid, [str(v) for v in report.violations]


# ------------------------------------------------------------------ one test per code

def test_sv101_malformed_action():
    # The reader refuses unknown types; the API can still be handed one.
    order = [["0F0", "0F1", Action(0, "X", 1), "0B0", "0B1"], ["1F0", "1B0", "1F1", "1B1"]]
    report = sv.check(build(order))
    (v,) = only(report, "SV101")
    assert v.code.slug == "malformed-action"
    assert (v.device, v.position) == (0, 2)
    assert locs(v) == [(0, 2, "0X1")]
    assert v.message == "unknown action type 'X'"


def test_sv101_overlap_must_be_forward_then_backward():
    order = [["0F0", overlap(Action(0, "B", 0), Action(0, "F", 1)), "0B1"], ["1F0", "1B0", "1F1", "1B1"]]
    (v,) = only(sv.check(build(order)), "SV101")
    assert locs(v) == [(0, 1, "(0B0;0F1)OVERLAP_F_B")]
    assert "one forward then one backward" in v.message and "0B0;0F1" in v.message


def test_sv102_index_out_of_range():
    order = [["0F0", "0F1", "0B0", "0B1", "0F2"], ["1F0", "1B0", "1F1", "1B1", None, "7F0"]]
    report = sv.check(build(order, stages=2, microbatches=2))
    vs = only(report, "SV102")
    assert [locs(v) for v in vs] == [[(0, 4, "0F2")], [(1, 5, "7F0")]]
    assert vs[0].message == "microbatch 2 is out of range: the schedule has 2 microbatches (0..1)"
    assert vs[1].message == "stage 7 is out of range: the schedule has 2 stages (0..1)"


def test_sv201_missing_action_names_where_it_belongs():
    order = [["0F0", "0F1", "0B0", "0B1"], ["1F0", "1B0", "1F1"]]
    (v,) = only(sv.check(build(order, microbatches=2)), "SV201")
    assert v.code.slug == "missing-action"
    assert locs(v) == [(1, None, "1B1")]  # device 1 is where it belongs; it has no position
    assert "stage 1 never runs the backward of microbatch 1" in v.message
    assert "1B1" in v.message and "1I1 with 1W1" in v.message


def test_sv201_split_backward_needs_both_halves():
    order = [["0F0", "0I0", "0W0"], ["1F0", "1I0"]]
    report = sv.check(build(order))
    (v,) = only(report, "SV201")
    assert locs(v) == [(1, None, "1W0")]
    assert v.message == "1I0 has no weight-gradient pass 1W0"
    order = [["0F0", "0I0", "0W0"], ["1F0", "1B0", "1W0"]]
    vs = [v for v in sv.check(build(order)).violations if v.code.code in ("SV201", "SV203")]
    assert vs, "a W next to a full B is reported"


def test_sv201_missing_forward():
    order = [["0F1", "0B1"], ["1F0", "1F1", "1B0", "1B1"]]
    vs = only(sv.check(build(order, microbatches=2)), "SV201")
    missing = {locs(v)[0] for v in vs}
    assert (0, None, "0F0") in missing and (0, None, "0B0") in missing
    assert any(v.message == "stage 0 never runs the forward of microbatch 0" for v in vs)


def test_sv202_duplicate_action_same_and_other_device():
    order = [["0F0", "0F1", "0B0", "0F1", "0B1"], ["1F0", "1B0", "1F1", "1B1", "1B0"]]
    vs = only(sv.check(build(order)), "SV202")
    assert [locs(v) for v in vs] == [
        [(0, 3, "0F1"), (0, 1, "0F1")],
        [(1, 4, "1B0"), (1, 1, "1B0")],
    ]
    assert vs[0].message == "0F1 appears again; it first appears at device 0, position 1"
    # across devices: the copy also sits on the wrong device
    order = [["0F0", "0F1", "0B0", "0B1", "1F1"], ["1F0", "1B0", "1F1", "1B1"]]
    report = sv.check(build(order))
    (v,) = only(report, "SV202")
    assert locs(v) == [(1, 2, "1F1"), (0, 4, "1F1")]


def test_sv202_duplicate_inside_an_overlap_names_the_shared_half():
    order = [["0F0", "0F1", overlap(Action(0, "F", 1), Action(0, "B", 0)), "0B1"], ["1F0", "1B0", "1F1", "1B1"]]
    vs = only(sv.check(build(order)), "SV202")
    assert any(v.message.startswith("0F1 appears again") for v in vs)


def test_sv203_mixed_backward():
    order = [["0F0", "0B0", "0I0", "0W0"], ["1F0", "1B0"]]
    vs = only(sv.check(build(order)), "SV203")
    assert [locs(v) for v in vs] == [[(0, 2, "0I0")], [(0, 3, "0W0")]]
    assert vs[0].code.slug == "mixed-backward"
    assert vs[0].message == ("0I0 mixes a full backward B with a split backward (I/W) of the same "
                             "stage and microbatch; use either B, or I and W")


def test_sv301_wrong_device():
    order = [["0F0", "0F1", "0B0", "0B1", "1F0"], ["1B0", "1F1", "1B1"]]
    report = sv.check(build(order))
    (v,) = only(report, "SV301")
    assert locs(v) == [(0, 4, "1F0")]
    assert v.message == "stage 1 runs on device 1 (placement 'loop'), but 1F0 sits on device 0"


def test_sv301_v_placement_and_explicit_list():
    # v placement, 2 devices, 4 stages: device 0 holds stages 0 and 3
    order = [["0F0", "1F0", "2F0", "3F0"], []]
    report = sv.check(build(order, stages=4, microbatches=1, placement="v"))
    wrong = {locs(v)[0][2]: v.message for v in only(report, "SV301")}
    assert set(wrong) == {"1F0", "2F0"}
    assert wrong["2F0"] == "stage 2 runs on device 1 (placement 'v'), but 2F0 sits on device 0"
    report = sv.check(build([["1F0", "1B0"], ["0F0", "0B0"]], placement=[1, 0]))
    assert report.is_valid, [str(v) for v in report.violations]


def test_sv401_runs_before_dependency_on_the_same_device():
    order = [["0F0", "0B1", "0F1", "0B0"], ["1F0", "1B0", "1F1", "1B1"]]
    report = sv.check(build(order))
    (v,) = only(report, "SV401")
    assert v.code.slug == "runs-before-dependency"
    assert locs(v) == [(0, 1, "0B1"), (0, 2, "0F1")]
    assert v.message == ("0B1 needs its own forward 0F1, which comes later on the same device "
                         "(position 2), so device 0 waits for itself")


def test_sv401_weight_gradient_before_input_gradient():
    order = [["0F0", "0W0", "0I0"], ["1F0", "1I0", "1W0"]]
    (v,) = only(sv.check(build(order)), "SV401")
    assert locs(v) == [(0, 1, "0W0"), (0, 2, "0I0")]
    assert "needs the input-gradient pass 0I0" in v.message


def test_sv402_deadlock_witness_is_the_cycle_with_each_wait_explained():
    # Device 0 runs microbatch 0 through; device 1 starts with microbatch 1.
    order = [["0F0", "0B0", "0F1", "0B1"], ["1F1", "1B1", "1F0", "1B0"]]
    report = sv.check(build(order))
    (v,) = only(report, "SV402")
    assert v.code.slug == "deadlock"
    assert locs(v) == [(0, 1, "0B0"), (1, 0, "1F1")]
    assert v.message == "deadlock: devices 0 -> 1 -> 0: each waits for another"
    assert v.witness == (
        "device 0 is stuck at 0B0 (position 1): it needs the gradient that 1B0 produces, which is "
        "at position 3 on device 1, behind 1F1 (position 0) where device 1 is stuck",
        "device 1 is stuck at 1F1 (position 0): it needs the activation that 0F1 produces, which "
        "is at position 2 on device 0, behind 0B0 (position 1) where device 0 is stuck",
    )
    assert report.metrics.makespan is None  # a deadlock has no makespan
    with pytest.raises(sv.DeadlockError):
        sv.timeline(build(order))


def test_sv402_three_device_cycle():
    # 0 waits on 2 (via 1's backward chain), 2 waits on 1, 1 waits on 0
    order = [["0F0", "0B0", "0F1", "0B1"], ["1F0", "1F1", "1B1", "1B0"], ["2F1", "2B1", "2F0", "2B0"]]
    report = sv.check(build(order))
    vs = only(report, "SV402")
    devices_in_cycle = {x.device for v in vs for x in v.locations}
    assert len(devices_in_cycle) >= 2
    for v in vs:
        assert len(v.witness) == len(v.locations)
        for step, x in zip(v.witness, v.locations):
            assert step.startswith(f"device {x.device} is stuck at {x.action} (position {x.position}): it ")


def test_two_independent_deadlocks_are_both_reported():
    # devices 0-1 deadlock among themselves, and devices 2-3 (a second pipeline stage pair)
    order = [
        ["0F0", "0B0", "0F1", "0B1"], ["1F1", "1B1", "1F0", "1B0"],
        ["2F0", "2B0", "2F1", "2B1"], ["3F1", "3B1", "3F0", "3B0"],
    ]
    report = sv.check(build(order))
    assert len(only(report, "SV402")) >= 2


def test_sv403_rendezvous_only_deadlock():
    s = build(RENDEZVOUS_HANG)
    eager = sv.check(s, comm_semantics="eager")
    assert eager.is_valid, [str(v) for v in eager.violations]
    report = sv.check(s, comm_semantics="rendezvous")
    (v,) = report.violations
    assert v.code.code == "SV403" and v.code.slug == "rendezvous-deadlock"
    assert locs(v) == [(0, 3, "0SEND_F1"), (1, 3, "1SEND_B0")]
    assert "valid under eager semantics, hangs under rendezvous" in v.message
    assert len(v.witness) == 2
    assert v.witness == (
        "device 0 is stuck at 0SEND_F1 (position 3): it waits, under rendezvous semantics, until "
        "1RECV_F1 (after 1SEND_B0) is posted, which is at position 4 on device 1, behind 1SEND_B0 "
        "(position 3) where device 1 is stuck",
        "device 1 is stuck at 1SEND_B0 (position 3): it waits, under rendezvous semantics, until "
        "0RECV_B0 (after 0SEND_F1) is posted, which is at position 4 on device 0, behind 0SEND_F1 "
        "(position 3) where device 0 is stuck",
    )
    # the file can choose the semantics too
    assert sv.check(s.with_(comm_semantics="rendezvous")).codes() == ["SV403"]


def test_rendezvous_fixed_by_posting_the_receive_first():
    # EXPLICIT is RENDEZVOUS_HANG with device 1's receive of microbatch 1 moved before its send
    assert EXPLICIT[0] == RENDEZVOUS_HANG[0] and sorted(EXPLICIT[1]) == sorted(RENDEZVOUS_HANG[1])
    assert sv.check(build(EXPLICIT), comm_semantics="rendezvous").is_valid


def test_explicit_comm_deadlock_under_both_semantics():
    # device 1 waits to receive microbatch 1 first, but device 0 sends microbatch 0 first and
    # only sends microbatch 1 after microbatch 0's gradient comes back: a data deadlock.
    order = [
        ["0F0", "0SEND_F0", "0RECV_B0", "0B0", "0F1", "0SEND_F1", "0RECV_B1", "0B1"],
        ["1RECV_F1", "1F1", "1B1", "1SEND_B1", "1RECV_F0", "1F0", "1B0", "1SEND_B0"],
    ]
    reports = [sv.check(build(order), comm_semantics=sem) for sem in ("eager", "rendezvous")]
    # Regression: under rendezvous this was reported as SV403 "valid under eager semantics",
    # which it is not; a deadlock under both semantics is SV402 under both.
    for report in reports:
        (v,) = report.violations
        assert v.code.code == "SV402"
        assert locs(v) == [(0, 2, "0RECV_B0"), (1, 0, "1RECV_F1")]
        assert v.witness[1] == ("device 1 is stuck at 1RECV_F1 (position 0): it receives what 0SEND_F1 "
                                "sends, which is at position 5 on device 0, behind 0RECV_B0 (position 2) "
                                "where device 0 is stuck")
    assert reports[0].violations == reports[1].violations


def test_sv404_reduce_grad_too_early():
    order = [["0F0", "0F1", "0B0", "0REDUCE_GRAD", "0B1"], ["1F0", "1B0", "1F1", "1B1", "1REDUCE_GRAD"]]
    report = sv.check(build(order))
    (v,) = report.violations
    assert v.code.code == "SV404" and v.code.slug == "reduce-grad-too-early"
    assert locs(v) == [(0, 3, "0REDUCE_GRAD"), (0, 4, "0B1")]
    assert v.message == ("0REDUCE_GRAD reduces stage 0's gradients before its backward 0B1 "
                         "(position 4) has run; REDUCE_GRAD must follow every backward of its stage")


def test_reduce_grad_after_weight_gradients_is_fine_and_waits_for_w():
    ok = [["0F0", "0I0", "0W0", "0REDUCE_GRAD"], ["1F0", "1I0", "1W0", "1REDUCE_GRAD"]]
    assert sv.check(build(ok)).is_valid
    early = [["0F0", "0I0", "0REDUCE_GRAD", "0W0"], ["1F0", "1I0", "1W0", "1REDUCE_GRAD"]]
    (v,) = sv.check(build(early)).violations
    assert v.code.code == "SV404" and locs(v)[1] == (0, 3, "0W0")


def test_sv501_unmatched_send():
    order = [list(r) for r in EXPLICIT]
    order[1].remove("1RECV_F1")  # device 1 never receives microbatch 1's activation
    report = sv.check(build(order))
    (v,) = only(report, "SV501")
    assert v.code.slug == "unmatched-send"
    assert locs(v) == [(0, 3, "0SEND_F1")]
    assert v.message == "0SEND_F1 has no matching 1RECV_F1 on device 1"
    # and 1F1 then lacks its receive
    (m,) = only(report, "SV503")
    assert locs(m)[0] == (1, 4, "1F1")


def test_sv501_send_past_the_last_stage():
    order = [list(r) for r in EXPLICIT]
    order[1].append("1SEND_F1")
    (v,) = only(sv.check(build(order)), "SV501")
    assert v.message == "1SEND_F1 has no matching 2RECV_F1: stage 1 has no next stage to send to"


def test_sv502_unmatched_recv():
    order = [list(r) for r in EXPLICIT]
    order[0].remove("0SEND_F1")
    report = sv.check(build(order))
    (v,) = only(report, "SV502")
    assert v.code.slug == "unmatched-recv"
    assert locs(v) == [(1, 3, "1RECV_F1")]
    assert v.message == "1RECV_F1 has no matching 0SEND_F1 on device 0"


def test_sv503_missing_recv():
    order = [list(r) for r in EXPLICIT]
    order[0].remove("0RECV_B1")
    order[1].remove("1SEND_B1")
    (v,) = sv.check(build(order)).violations
    assert v.code.code == "SV503" and v.code.slug == "missing-recv"
    assert locs(v) == [(0, 6, "0B1"), (0, None, "0RECV_B1")]
    assert v.message == ("0B1 needs what 1B1 produces on device 1, but device 0 has no 0RECV_B1 to "
                         "receive it (the schedule lists its communication explicitly)")


def test_send_before_its_producer_is_reported():
    order = [list(r) for r in EXPLICIT]
    order[0] = ["0SEND_F0", "0F0", "0F1", "0SEND_F1", "0RECV_B0", "0B0", "0RECV_B1", "0B1"]
    (v,) = only(sv.check(build(order)), "SV401")
    assert locs(v) == [(0, 0, "0SEND_F0"), (0, 1, "0F0")]
    assert "sends what 0F0 produces" in v.message


def test_sv601_memory_limit():
    gpipe = [["0F0", "0F1", "0F2", "0B0", "0B1", "0B2"], ["1F0", "1F1", "1F2", "1B0", "1B1", "1B2"]]
    s = build(gpipe)
    assert sv.check(s, memory_limit=3).is_valid
    report = sv.check(s, memory_limit=2)
    vs = only(report, "SV601")
    assert [locs(v) for v in vs] == [[(0, 2, "0F2")], [(1, 2, "1F2")]]
    assert vs[0].code.slug == "memory-limit-exceeded"
    assert vs[0].message == ("memory on device 0 reaches 3 at 0F2, over the limit 2 "
                             "(peak 3, 3 microbatches in flight at most)")
    # the file's limit counts too, and the command line's overrides it
    s2 = s.with_(memory=sv.MemoryModel(limit=2))
    assert sv.check(s2).codes() == ["SV601"]
    assert sv.check(s2, memory_limit=10).is_valid


def test_memory_limit_with_static_memory_and_split_backward():
    order = [["0F0", "0F1", "0I0", "0I1", "0W0", "0W1"], ["1F0", "1I0", "1F1", "1I1", "1W0", "1W1"]]
    mem = sv.MemoryModel(activation=2, w=0.5, static=1)
    report = sv.check(build(order), memory=mem)
    # device 0: 1 + 2 + 2 = 5.  device 1: 1 + 2, 1I0 frees (1 - w) * 2 = 1, 1F1 adds 2: 4
    assert [d.peak_memory for d in report.metrics.devices] == [5, 4]
    (v,) = sv.check(build(order), memory=mem, memory_limit=4).violations
    assert v.code.code == "SV601" and locs(v) == [(0, 1, "0F1")]


# ------------------------------------------------------------------ features the rules must handle

def test_overlapped_actions_valid_and_timed_as_one_op():
    # DualPipe-style: device 0 overlaps microbatch 1's forward with microbatch 0's backward.
    order = [["0F0", overlap(Action(0, "F", 1), Action(0, "B", 0)), "0B1"], ["1F0", "1B0", "1F1", "1B1"]]
    report = sv.check(build(order))
    assert report.is_valid, [str(v) for v in report.violations]
    tl = sv.timeline(build(order))
    entries = list(tl.entries(0))
    assert [str(a) for a, _, _ in entries] == ["0F0", "(0F1;0B0)OVERLAP_F_B", "0B1"]
    _, st, en = entries[1]
    assert (st, en) == (4, 7)  # waits for 1B0 (ends at 4), runs F+B = 3 without an overlap cost
    report = sv.check(build(order), costs={"OVERLAP_F_B": 2})
    assert report.metrics.makespan == list(sv.timeline(build(order), costs={"OVERLAP_F_B": 2}).entries(0))[-1][2]


def test_overlap_half_that_deadlocks_is_located_at_the_overlap():
    order = [["0F0", overlap(Action(0, "F", 1), Action(0, "B", 0)), "0B1"], ["1F0", "1F1", "1B0", "1B1"]]
    (v,) = sv.check(build(order)).violations
    assert v.code.code == "SV402"
    assert locs(v)[0] == (0, 1, "(0F1;0B0)OVERLAP_F_B")
    assert "needs the gradient that 1B0 produces" in v.witness[0]


def bidirectional(order, routes, microbatch_route, stages=2):
    placement = sv.Placement.bidirectional(routes, microbatch_route, len(order), stages)
    return build(order, stages=stages, placement=placement)


def test_bidirectional_routes():
    # microbatch 0 goes down (stage s on device s), microbatch 1 up (mirrored)
    order = [["0F0", "1F1", "1B1", "0B0"], ["0F1", "1F0", "1B0", "0B1"]]
    s = bidirectional(order, [[0, 1], [1, 0]], [0, 1])
    report = sv.check(s)
    assert report.is_valid, [str(v) for v in report.violations]
    assert s.placement.devices_of_stage(0) == frozenset({0, 1})
    # static memory counts both copies of every stage
    report = sv.check(s, memory={"static": 10})
    assert [d.static_memory for d in report.metrics.devices] == [20, 20]


def test_bidirectional_wrong_device_names_the_route():
    order = [["0F0", "0F1", "1F1", "1B1", "0B0", "0B1"], ["1F0", "1B0"]]
    s = bidirectional(order, [[0, 1], [1, 0]], [0, 1])
    vs = only(sv.check(s), "SV301")
    msgs = {locs(v)[0][2]: v.message for v in vs}
    assert msgs["0F1"] == "stage 0 runs on device 1 on microbatch 1's route 1, but 0F1 sits on device 0"
    assert "1F1" not in msgs  # stage 1 of route 1 is device 0: correct


def test_all_violations_are_reported_not_just_the_first():
    order = [["0F0", "0F1", "0B0", "0B1", "0B1", "1F9", "1F1"], ["1F0", "1B0"]]
    report = sv.check(build(order, microbatches=2))
    assert set(report.codes()) >= {"SV102", "SV201", "SV202", "SV301"}
    # SPEC order: well-formed, complete, placed, ...
    order_seen = [v.code.code for v in report.violations]
    assert order_seen.index("SV102") < order_seen.index("SV202") < order_seen.index("SV301")
    assert list(sv.iter_violations(build(order, microbatches=2))) == report.violations
    assert not sv.is_valid(build(order, microbatches=2))


def test_cap_keeps_the_first_and_counts_the_rest():
    # 10 microbatches declared, none on stage 1: 20 missing actions
    order = [[f"0F{i}" for i in range(10)] + [f"0B{i}" for i in range(10)], []]
    s = build(order, stages=2, microbatches=10)
    full = sv.check(s)
    assert len(full.violations) == 20 and full.truncated == 0
    capped = sv.check(s, max_violations=5)
    assert capped.violations == full.violations[:5]
    assert capped.truncated == 15 and capped.truncated_exact
    assert capped.to_json()["violations_not_shown"] == 15


def test_missing_actions_beyond_the_kept_are_counted_exactly_without_making_them():
    """Two microbatches of 10^12 run: the rest are counted from the actions present, not
    made one by one (once 100,000 were made and the count stopped there, "at least")."""
    s = build([["0F0", "0B0"], ["1F0", "1B0"]], microbatches=10**12)
    report = sv.check(s, max_violations=10)
    assert len(report.violations) == 10 and {v.code.code for v in report.violations} == {"SV201"}
    assert report.truncated == 2 * 2 * 10**12 - 4 - 10 and report.truncated_exact
    split = build([["0F0", "0I0", "0W0", "0F1", "0I1"], ["1F0", "1W1"]], microbatches=3)
    for cap in range(9):  # whatever the cap, the kept and the counted add up to every violation
        capped = sv.check(split, max_violations=cap)
        assert len(capped.violations) + capped.truncated == len(list(sv.iter_violations(split)))


def test_other_violations_beyond_the_kept_are_counted_up_to_the_cap(monkeypatch):
    import sys

    monkeypatch.setattr(sys.modules["schedverify.check"], "MAX_COUNTED", 50)
    misplaced = build([[f"1F{i}" for i in range(80)] + [f"1B{i}" for i in range(80)], []], stages=2,
                      microbatches=80)  # stage 1 belongs on device 1: 160 SV301, 160 SV201
    report = sv.check(misplaced, max_violations=10)
    assert report.truncated == 50 + 150 and not report.truncated_exact  # the SV201 counted all the same


# PyTorch 2.15's rules (docs/spec.md 9): 1F1B on 2 ranks as its lowering writes it, broken
# one way per code (tests/test_releases.py has each message, both engines and the layouts)
R0_15 = "0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0WAIT_SEND_F0,0RECV_B1,0B1,0WAIT_SEND_F1,0REDUCE_GRAD,0WAIT_REDUCE_GRAD"
R1_15 = "1RECV_F0,1F0,1B0,1SEND_B0,1RECV_F1,1F1,1B1,1SEND_B1,1REDUCE_GRAD,1WAIT_REDUCE_GRAD,1WAIT_SEND_B0,1WAIT_SEND_B1"


@pytest.mark.parametrize("torch, r0, options, code", [
    ("2.13", R0_15, {}, "SV103"),  # a kind 2.13 does not have
    ("2.15", R0_15.replace(",0WAIT_REDUCE_GRAD", ""), {}, "SV407"),  # REDUCE_GRAD never waited for
    ("2.15", R0_15.replace(",0WAIT_SEND_F1", ""), {}, "SV505"),  # a send never waited for
    ("2.15", R0_15.replace("0F1,", "0WAIT_SEND_F1,0F1,"), {}, "SV506"),  # a wait before its send
    ("2.15", R0_15, {"max_outstanding_sends": 0}, "SV507"),  # a budget no move of waits meets
])
def test_each_215_rule_has_its_code(torch, r0, options, code):
    s = sv.loads_csv(r0 + "\n" + R1_15 + "\n")
    report = sv.check(s, comm_semantics="torch", torch=torch, runtime_options=options or None)
    assert code in report.codes(), [str(v) for v in report.violations]
    assert sv.check(sv.loads_csv(R0_15 + "\n" + R1_15 + "\n"), comm_semantics="torch", torch="2.15").is_valid


def test_every_code_is_registered_once_and_tested_here():
    tested = {"SV101", "SV102", "SV103", "SV201", "SV202", "SV203", "SV301", "SV401", "SV402", "SV403",
              "SV404", "SV405", "SV406", "SV407", "SV501", "SV502", "SV503", "SV504", "SV505", "SV506",
              "SV507", "SV601"}
    assert set(CODES) == tested, "a new violation code needs a crafted-schedule test in this file"
    slugs = [c.slug for c in CODES.values()]
    assert len(slugs) == len(set(slugs))
    for c in CODES.values():
        assert c.description.endswith(".") and len(c.description) > 20


def test_violation_json_shape():
    order = [["0F0", "0B1", "0F1", "0B0"], ["1F0", "1B0", "1F1", "1B1"]]
    (v,) = only(sv.check(build(order)), "SV401")
    assert v.to_json() == {
        "code": "SV401", "slug": "runs-before-dependency", "message": v.message,
        "device": 0, "position": 1,
        "actions": [{"device": 0, "position": 1, "action": "0B1"},
                    {"device": 0, "position": 2, "action": "0F1"}],
    }
    assert str(v).startswith("SV401 runs-before-dependency: device 0, position 1: 0B1: ")


def test_bad_arguments_raise_usage_errors():
    with pytest.raises(sv.UsageError, match="comm_semantics must be one of 'eager', 'rendezvous', 'torch', 'torch-nccl', got 'lazy'"):
        sv.check(build(ONE_F_ONE_B), comm_semantics="lazy")
    with pytest.raises(sv.UsageError, match="expected a Schedule"):
        sv.check(ONE_F_ONE_B)
    # Regression: these crashed with IndexError/TypeError deep in the timeline
    s = build(ONE_F_ONE_B)
    for options, message in [
        ({"costs": {"F": (1, 2, 3)}}, "costs F: 3 per-stage values given, but the schedule has 2 stages"),
        ({"costs": {"Q": 1}}, "costs: unknown field 'Q'"),
        ({"memory": {"activation": (1,)}}, "memory activation: 1 per-stage values given"),
        ({"memory": {"w": 1.5}}, "memory w: must be at most 1, got 1.5"),
        ({"memory": {"limt": 1}}, "memory: unknown field 'limt'"),
    ]:
        with pytest.raises(sv.UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
            sv.check(s, **options)
        with pytest.raises(sv.UsageError):
            sv.timeline(s, **options)
    # per-stage lists are accepted as well as tuples
    assert sv.check(s, costs={"F": [1, 3]}).metrics.makespan == sv.check(s, costs={"F": (1, 3)}).metrics.makespan


# ------------------------------------------------------------------ against a naive reading of SPEC
# A deliberately simple simulator written straight from docs/spec.md 3.4 and 4 (no graph, no
# compilation): repeat "run every device's next action whose inputs are done" until nothing
# moves.  Random device orders of complete, correctly placed compute-only schedules must get
# the same verdict from the checker, and, when they run, the same times.

from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


def naive_needs(a: Action, S: int, split: set) -> list[tuple[int, str, int]]:
    s, k, i = a.stage, a.kind, a.microbatch
    first_bwd = lambda t: "I" if (t, i) in split else "B"  # noqa: E731
    if k == "F":
        return [(s - 1, "F", i)] if s > 0 else []
    if k in ("B", "I"):
        return [(s, "F", i)] + ([(s + 1, first_bwd(s + 1), i)] if s + 1 < S else [])
    return [(s, "I", i)]  # W


def naive_run(rows, S, split, cost, comm):
    where = {(a.stage, a.kind, a.microbatch): d for d, row in enumerate(rows) for a in row}
    end: dict = {}
    free = [0.0] * len(rows)
    ptr = [0] * len(rows)
    moved = True
    while moved:
        moved = False
        for d, row in enumerate(rows):
            while ptr[d] < len(row):
                a = row[ptr[d]]
                deps = naive_needs(a, S, split)
                if any(x not in end for x in deps):
                    break
                st_ = max([free[d]] + [end[x] + (comm if where[x] != d else 0) for x in deps])
                end[(a.stage, a.kind, a.microbatch)] = free[d] = st_ + cost[a.kind]
                ptr[d] += 1
                moved = True
    done = all(p == len(r) for p, r in zip(ptr, rows))
    return done, (max(end.values(), default=0) if done else None)


@st.composite
def shuffled_schedules(draw):
    D = draw(st.integers(1, 3))
    S = D * draw(st.integers(1, 2))
    M = draw(st.integers(1, 4))
    split = {(s, i) for s in range(S) for i in range(M) if draw(st.booleans())}
    rows = [[] for _ in range(D)]
    for s in range(S):
        for i in range(M):
            kinds = ("F", "I", "W") if (s, i) in split else ("F", "B")
            rows[s % D] += [Action(s, k, i) for k in kinds]
    rows = [draw(st.permutations(r)) for r in rows]
    return rows, S, M, split


def naive_memory(row, activation, w):
    """Peak in-flight pairs and peak activation memory along one device's order."""
    cur = n = peak = peak_n = 0
    for a in row:
        act = activation[a.stage]
        if a.kind == "F":
            cur, n = cur + act, n + 1
            peak, peak_n = max(peak, cur), max(peak_n, n)
        elif a.kind == "B":
            cur, n = cur - act, n - 1
        elif a.kind == "I":
            cur -= (1 - w) * act
        elif a.kind == "W":
            cur, n = cur - w * act, n - 1
    return peak_n, peak


@given(st.one_of(shuffled_schedules(), st.deferred(lambda: runnable_schedules())), st.integers(1, 3), st.integers(1, 3),
       st.integers(0, 2), st.sampled_from((0, 0.25, 0.5, 1)), st.lists(st.integers(1, 4), min_size=6, max_size=6))
def test_checker_agrees_with_a_naive_simulator(case, F, B, comm, w, act):
    rows, S, M, split = case
    cost = {"F": F, "B": B, "I": 1, "W": 1}
    done, makespan = naive_run(rows, S, split, cost, comm)
    memory = MemoryModel(activation=tuple(act[:S]), w=w)
    report = sv.check(Schedule.build(rows, stages=S, microbatches=M), costs={"F": F, "B": B, "comm": comm},
                      memory=memory)
    assert set(report.codes()) <= {"SV401", "SV402"}
    assert report.is_valid == done, [str(v) for v in report.violations]
    if done:
        assert report.metrics.makespan == makespan
    for d, row in enumerate(rows):
        peak_n, peak = naive_memory(row, act, w)
        assert report.metrics.devices[d].peak_inflight == peak_n
        assert report.metrics.devices[d].peak_memory == pytest.approx(peak)


@st.composite
def any_schedules(draw):
    """Anything the model can hold, valid or not, with communication and overlaps."""
    D = draw(st.integers(1, 3))
    S, M = D * draw(st.integers(1, 2)), draw(st.integers(1, 3))
    kinds = ("F", "B", "I", "W", "SEND_F", "RECV_F", "SEND_B", "RECV_B", "REDUCE_GRAD", "UNSHARD")
    cell = st.one_of(
        st.none(),
        st.builds(lambda s, k, i: Action(s, k, None if k in ("REDUCE_GRAD", "UNSHARD") else i),
                  st.integers(0, S), st.sampled_from(kinds), st.integers(0, M)),
        st.builds(lambda s, i, t, j: overlap(Action(s, "F", i), Action(s, t, j)),
                  st.integers(0, S - 1), st.integers(0, M - 1), st.sampled_from("BIF"), st.integers(0, M - 1)),
    )
    rows = draw(st.lists(st.lists(cell, max_size=10), min_size=D, max_size=D))
    placement = draw(st.sampled_from(("loop", "v")))
    return Schedule.build(rows, stages=S, microbatches=M, placement=placement)


@given(any_schedules(), st.sampled_from(("eager", "rendezvous")), st.one_of(st.none(), st.integers(0, 4)))
def test_check_never_raises_and_its_views_agree(s, semantics, limit):
    report = sv.check(s, comm_semantics=semantics, memory_limit=limit, max_violations=5)
    assert report.is_valid == (not report.violations)
    assert report.is_valid == sv.is_valid(s, comm_semantics=semantics, memory_limit=limit)
    everything = list(sv.iter_violations(s, comm_semantics=semantics, memory_limit=limit))
    assert everything[:5] == report.violations
    assert report.truncated == max(0, len(everything) - 5)
    json.dumps(report.to_json())
    for v in report.violations:
        assert v.code.code in CODES and v.message
        for loc in v.locations:
            assert 0 <= loc.device < s.devices
            if loc.position is not None:
                assert str(s.order[loc.device][loc.position]) == loc.action
    if report.is_valid:
        assert report.metrics.makespan is not None


def naive_comm_run(rows, S, split, rendezvous: bool) -> bool:
    """docs/spec.md 3.5 straight: a consumer whose producer sits elsewhere waits for the RECV on
    its own device; a RECV waits for its SEND; under rendezvous a SEND also waits until its
    RECV is posted (is the next action of its device)."""
    where = {(a.stage, a.kind, a.microbatch): d for d, row in enumerate(rows) for a in row}
    index = {(a.stage, a.kind, a.microbatch): p for row in rows for p, a in enumerate(row)}
    done: set = set()
    ptr = [0] * len(rows)
    moved = True
    while moved:
        moved = False
        for d, row in enumerate(rows):
            while ptr[d] < len(row):
                a = row[ptr[d]]
                s, k, i = a.stage, a.kind, a.microbatch
                if k == "RECV_F":
                    deps = [(s - 1, "SEND_F", i)]
                elif k == "RECV_B":
                    deps = [(s + 1, "SEND_B", i)]
                elif k in ("SEND_F", "SEND_B"):
                    deps = []
                    if rendezvous:
                        peer = (s + 1, "RECV_F", i) if k == "SEND_F" else (s - 1, "RECV_B", i)
                        if ptr[where[peer]] != index[peer]:
                            break
                else:
                    deps = []
                    for x in naive_needs(a, S, split):
                        if where[x] != d:
                            x = (s, "RECV_F" if x[1] == "F" else "RECV_B", i)
                        deps.append(x)
                if any(x not in done for x in deps):
                    break
                done.add((s, k, i))
                ptr[d] += 1
                moved = True
    return all(p == len(r) for p, r in zip(ptr, rows))


@st.composite
def runnable_schedules(draw):
    """Device orders read off one random sequential run (always deadlock-free)."""
    rows, S, M, split = draw(shuffled_schedules())
    pending = sorted((a for row in rows for a in row), key=lambda a: (a.stage, a.microbatch, a.kind))
    done: set = set()
    out = [[] for _ in rows]
    while pending:
        ready = [a for a in pending if all(x in done for x in naive_needs(a, S, split))]
        a = ready[draw(st.integers(0, len(ready) - 1))]
        pending.remove(a)
        done.add((a.stage, a.kind, a.microbatch))
        out[a.stage % len(rows)].append(a)
    return out, S, M, split


@st.composite
def lowered_schedules(draw):
    """Compute orders (runnable ones, or shuffled ones that may deadlock) with a SEND after
    each producer and a RECV before each consumer whose input crosses devices, at random places."""
    rows, S, M, split = draw(st.one_of(runnable_schedules(), shuffled_schedules()))
    D = len(rows)
    if D == 1:
        return rows, S, M, split
    rows = [list(r) for r in rows]
    jitter = draw(st.sampled_from((0, 0, 1, 2)))
    for s in range(S):
        for i in range(M):
            bwd = "I" if (s, i) in split else "B"
            for kind, nxt, send, recv in (("F", s + 1, "SEND_F", "RECV_F"), (bwd, s - 1, "SEND_B", "RECV_B")):
                if not 0 <= nxt < S or nxt % D == s % D:
                    continue
                consumer_kind = "F" if kind == "F" else ("I" if (nxt, i) in split else "B")
                src, dst = rows[s % D], rows[nxt % D]
                p = src.index(Action(s, kind, i))
                # close to where they belong (far away, nearly everything deadlocks)
                src.insert(draw(st.integers(p + 1, min(len(src), p + 1 + jitter))), Action(s, send, i))
                q = dst.index(Action(nxt, consumer_kind, i))
                dst.insert(draw(st.integers(max(0, q - jitter), q)), Action(nxt, recv, i))
    return rows, S, M, split


@given(lowered_schedules())
def test_explicit_comm_agrees_with_a_naive_simulator_under_both_semantics(case):
    rows, S, M, split = case
    s = Schedule.build(rows, stages=S, microbatches=M)
    eager_ok = naive_comm_run(rows, S, split, rendezvous=False)
    rendezvous_ok = naive_comm_run(rows, S, split, rendezvous=True)
    eager = sv.check(s, comm_semantics="eager")
    rendezvous = sv.check(s, comm_semantics="rendezvous")
    assert set(eager.codes()) <= {"SV401", "SV402"}
    assert eager.is_valid == eager_ok, [str(v) for v in eager.violations]
    assert rendezvous.is_valid == rendezvous_ok, [str(v) for v in rendezvous.violations]
    if eager_ok and not rendezvous_ok:
        assert set(rendezvous.codes()) <= {"SV401", "SV403"} and "SV403" in rendezvous.codes()
    if not eager_ok:
        assert "SV403" not in rendezvous.codes()  # it hangs under eager too: not rendezvous-only


def test_rendezvous_cycle_next_to_a_self_wait_is_not_called_rendezvous_only():
    # Regression (found by the property above): device 1 runs 1B0 before 1F0 (SV401, a hang
    # under both semantics); the rendezvous cycle next to it must not claim "valid under eager".
    order = [["0F0", "0SEND_F0", "0RECV_B0", "0B0"], ["1B0", "1SEND_B0", "1RECV_F0", "1F0"]]
    for sem in ("eager", "rendezvous"):
        assert sv.check(build(order), comm_semantics=sem).codes() == ["SV401"], sem


def test_more_cycles_marker_has_the_kind_of_the_cycles_before_it():
    # Regression (found by the property above): a rendezvous hang with more than ten cycles
    # ended with an SV402 "more deadlock cycles exist" although nothing deadlocks under eager.
    fwd = [f"{s}{k}{i}" for s in (0, 1) for i in range(4) for k in ("RECV_F", "F", "SEND_F") if (s, k) != (0, "RECV_F")]
    dev0 = [a for a in fwd if a[0] == "0"] + [f"2{k}{i}" for i in range(4) for k in ("RECV_F", "F", "SEND_F")]
    dev0 += ["2RECV_B0", "2B0", "2SEND_B0", "0RECV_B0", "0B0", "2RECV_B1", "2B1", "2SEND_B1", "0RECV_B1", "0B1",
             "2RECV_B2", "2B2", "2SEND_B2", "2RECV_B3", "2B3", "2SEND_B3", "0RECV_B2", "0B2", "0RECV_B3", "0B3"]
    dev1 = [a for a in fwd if a[0] == "1"] + [
        "3RECV_F0", "3F0", "3B0", "3SEND_B0", "1RECV_B0", "1B0", "1SEND_B0", "3RECV_F1", "3F1", "3B1", "3SEND_B1",
        "3RECV_F2", "3F2", "3B2", "3SEND_B2", "1RECV_B1", "1B1", "1SEND_B1", "1RECV_B2", "1B2", "1SEND_B2",
        "3RECV_F3", "3F3", "3B3", "3SEND_B3", "1RECV_B3", "1B3", "1SEND_B3"]
    s = build([dev0, dev1], stages=4)
    assert sv.check(s, comm_semantics="eager").is_valid
    report = sv.check(s, comm_semantics="rendezvous")
    assert report.codes() == ["SV403"]
    assert report.violations[-1].message == "more deadlock cycles exist; fix the ones above and check again"


def test_overlap_of_a_backward_with_its_own_forward_is_sv401():
    # Regression: (0F0;0B0)OVERLAP_F_B was valid, although 0B0 needs what 0F0 produces and
    # the two run at the same time.
    order = [[overlap(Action(0, "F", 0), Action(0, "B", 0)), "0F1", "0B1"]]
    report = sv.check(build(order, stages=1))
    (v,) = report.violations
    assert v.code.code == "SV401"
    assert locs(v) == [(0, 0, "(0F0;0B0)OVERLAP_F_B")]
    assert v.message == ("(0F0;0B0)OVERLAP_F_B runs 0B0 together with 0F0, but 0B0 needs what 0F0 "
                         "produces; overlap a backward with the forward of another microbatch")
    order = [["0F0", overlap(Action(0, "F", 1), Action(0, "I", 1)), "0I0", "0W0", "0W1"]]
    assert sv.check(build(order, stages=1)).codes() == ["SV401"]
    order = [["0F0", overlap(Action(0, "F", 1), Action(0, "B", 0)), "0B1"]]
    assert sv.check(build(order, stages=1)).is_valid


@st.composite
def bidirectional_runnable(draw):
    """Two mirrored routes (DualPipe's shape): microbatch i runs stage s on device s (route
    0) or D-1-s (route 1); device orders read off one random sequential run."""
    D = draw(st.integers(2, 3))
    S, M = D, draw(st.integers(1, 4))
    route = [draw(st.integers(0, 1)) for _ in range(M)]
    split = {(s, i) for s in range(S) for i in range(M) if draw(st.booleans())}
    pending = [Action(s, k, i) for s in range(S) for i in range(M)
               for k in (("F", "I", "W") if (s, i) in split else ("F", "B"))]
    done: set = set()
    rows = [[] for _ in range(D)]
    while pending:
        ready = [a for a in pending if all(x in done for x in naive_needs(a, S, split))]
        a = ready[draw(st.integers(0, len(ready) - 1))]
        pending.remove(a)
        done.add((a.stage, a.kind, a.microbatch))
        rows[a.stage if route[a.microbatch] == 0 else D - 1 - a.stage].append(a)
    return rows, S, M, split, route


@given(bidirectional_runnable(), st.integers(1, 3), st.integers(0, 2))
def test_bidirectional_agrees_with_the_naive_simulator_and_survives_csv(case, F, comm):
    rows, S, M, split, route = case
    D = len(rows)
    placement = sv.Placement.bidirectional([list(range(D)), list(range(D - 1, -1, -1))], route, D, S)
    s = build(rows, stages=S, microbatches=M, placement=placement)
    report = sv.check(s, costs={"F": F, "comm": comm})
    assert report.is_valid, [str(v) for v in report.violations]
    done, makespan = naive_run(rows, S, split, {"F": F, "B": 2, "I": 1, "W": 1}, comm)
    assert done and report.metrics.makespan == makespan
    # PyTorch's CSV holds no placement: inferring it must give a schedule just as valid (under
    # the abstract semantics: a CSV is checked as PyTorch's runtime by default, docs/spec.md 8)
    back = sv.loads_csv(sv.dumps_csv(s), stages=S, microbatches=M)
    again = sv.check(back, costs={"F": F, "comm": comm}, comm_semantics="eager")
    assert again.is_valid, [str(v) for v in again.violations]
    assert again.metrics.makespan == makespan


def test_bookkeeping_on_a_device_without_its_stage_is_sv301():
    # Regression: 1REDUCE_GRAD on device 0 (which never holds stage 1) was accepted.
    order = [["0F0", "0B0", "0REDUCE_GRAD", "1REDUCE_GRAD"], ["1UNSHARD", "1F0", "1B0", "0UNSHARD"]]
    vs = sv.check(build(order)).violations
    assert [(v.code.code, locs(v)) for v in vs] == [
        ("SV301", [(0, 3, "1REDUCE_GRAD")]), ("SV301", [(1, 3, "0UNSHARD")])]
    assert vs[0].message == "stage 1 is held by device 1, but 1REDUCE_GRAD sits on device 0"
    # with two routes a stage lives on two devices, and either may reduce it
    order = [["0F0", "1F1", "1B1", "0B0", "0REDUCE_GRAD", "1REDUCE_GRAD"],
             ["0F1", "1F0", "1B0", "0B1", "1REDUCE_GRAD", "0REDUCE_GRAD"]]
    assert sv.check(bidirectional(order, [[0, 1], [1, 0]], [0, 1])).is_valid
    order = [["0F0", "1F1", "1B1", "0B0"], ["0F1", "1F0", "1B0", "0B1"], ["0REDUCE_GRAD"]]
    placement = sv.Placement.bidirectional([[0, 1], [1, 0]], [0, 1], 3, 2)
    (v,) = sv.check(build(order, stages=2, placement=placement)).violations
    assert v.message == "stage 0 is held by devices 0 and 1, but 0REDUCE_GRAD sits on device 2"


# --------------------------------------------------------------------------- docs/spec.md 8
# PyTorch's runtime: torch (over gloo) and torch-nccl (over NCCL).  Each case below was also
# run on PyTorch's real runtime over gloo (tests/test_realrt.py).


def test_torch_runs_what_rendezvous_calls_a_hang_and_nccl_hangs_on_it():
    # Issue pytorch#172668's shape: both devices' communication streams start with a send to
    # the other, whose receive sits behind it.  gloo posts sends without blocking: it runs.
    s = build(RENDEZVOUS_HANG)
    gloo = sv.check(s, comm_semantics="torch")
    assert gloo.is_valid and gloo.metrics.makespan == 9 and gloo.comm_semantics == "torch"
    (v,) = only(sv.check(s, comm_semantics="torch-nccl"), "SV405")
    assert v.code.slug == "comm-stream-deadlock"
    assert locs(v) == [(0, 3, "0SEND_F1"), (1, 3, "1SEND_B0")]
    assert "a send completes only with its receive, 1RECV_F1 (device 1, position 4), which is not " \
           "at the head of device 1's communication stream yet" in v.witness[0]
    assert v.witness[2:] == ("rank 0: [... 0SEND_F1, 0RECV_B0, 0B0]", "rank 1: [... 1SEND_B0, 1RECV_F1, 1F1]")
    # messages that fit NCCL's buffers: the sends complete alone, and it runs
    buffered = sv.check(s, comm_semantics="torch-nccl", nccl=NcclOptions(buffered_sends=True))
    assert buffered.is_valid and buffered.metrics.makespan == 9


def test_an_early_recv_is_no_deadlock_under_torch_but_hangs_on_nccl():
    # Device 1 posts microbatch 1's receive before it sends microbatch 0's gradient, and device
    # 0 posts its receive of that gradient before it sends microbatch 1: a listed RECV that
    # blocks (eager) deadlocks; PyTorch only posts it, and waits at the consumer (gloo).  On
    # NCCL the early receives sit at the heads of the communication streams and hold the sends
    # behind them (PyTorch PR #165664): each head waits for a send behind the other's head.
    order = [["0F0", "0SEND_F0", "0RECV_B0", "0F1", "0SEND_F1", "0B0", "0RECV_B1", "0B1"],
             ["1RECV_F0", "1RECV_F1", "1F0", "1B0", "1SEND_B0", "1F1", "1B1", "1SEND_B1"]]
    s = build(order)
    assert only(sv.check(s, comm_semantics="eager"), "SV402")
    report = sv.check(s, comm_semantics="torch")
    assert report.is_valid, [str(v) for v in report.violations]
    assert report.metrics.makespan == sv.check(build(ONE_F_ONE_B)).metrics.makespan
    (v,) = only(sv.check(s, comm_semantics="torch-nccl"), "SV405")
    assert locs(v) == [(1, 1, "1RECV_F1"), (0, 2, "0RECV_B0")]
    assert "has not reached the head of device" not in v.witness[0]


def test_receives_posted_out_of_send_order_cross_their_data():
    order = [list(EXPLICIT[0]), ["1RECV_F1", "1RECV_F0", "1F0", "1B0", "1SEND_B0", "1F1", "1B1", "1SEND_B1"]]
    s = build(order)
    assert sv.check(s, comm_semantics="eager").is_valid  # labels match: eager cannot see it
    for sem in ("torch", "torch-nccl"):
        first, second = only(sv.check(s, comm_semantics=sem), "SV504")
        assert locs(first) == [(0, 1, "0SEND_F0"), (1, 0, "1RECV_F1")]
        assert locs(second) == [(0, 3, "0SEND_F1"), (1, 1, "1RECV_F0")]
        assert first.message.startswith(
            "0SEND_F0 is send number 0 from device 0 to device 1, so PyTorch delivers it to receive "
            "number 0 there, 1RECV_F1, not to 1RECV_F0: stage 1 computes on microbatch 0's "
            "activation as if it were microbatch 1's activation")


def test_the_loss_stage_runs_its_forwards_in_microbatch_order():
    order = [["0F0", "0F1", "0B0", "0B1"], ["1F1", "1F0", "1B0", "1B1"]]
    s = build(order)
    assert sv.check(s).is_valid  # fine for the abstract model
    for sem in ("torch", "torch-nccl"):
        (v,) = only(sv.check(s, comm_semantics=sem), "SV406")
        assert locs(v) == [(1, 0, "1F1")]
        assert "1F1 is the last stage's forward number 0 on device 1, but it is microbatch 1" in v.message
    # bidirectional schedules have two last stages, on their routes: the rule does not apply
    routes = [[0, 1], [1, 0]]
    assert "SV406" not in sv.check(bidirectional([["0F0", "1F1", "1B1", "0B0"], ["0F1", "1F0", "1B0", "0B1"]],
                                                 routes, [0, 1]), comm_semantics="torch").codes()


def test_unmatched_and_missing_messages_under_torch():
    # an extra receive of microbatch 1's activation: nothing is ever sent to it
    surplus = [list(EXPLICIT[0]), ["1RECV_F0", "1F0", "1B0", "1RECV_F1", "1SEND_B0", "1F1", "1B1", "1SEND_B1", "1RECV_F1"]]
    report = sv.check(build(surplus), comm_semantics="torch")
    (v,) = only(report, "SV502")
    assert locs(v) == [(1, 8, "1RECV_F1")]
    assert "receive number 2 on device 1 from device 0, but device 0 posts only 2 sends" in v.message
    # a send nobody receives: the step's last wait never returns, so there is no makespan
    extra = [EXPLICIT[0] + ["0SEND_F1"], list(EXPLICIT[1])]
    report = sv.check(build(extra), comm_semantics="torch")
    (v,) = only(report, "SV501")
    assert "device 1 posts only 2 receives from device 0" in v.message
    assert report.metrics.makespan is None
    # a consumer without its RECV: PyTorch raises before computing
    missing = [list(EXPLICIT[0]), [a for a in EXPLICIT[1] if a != "1RECV_F1"]]
    (v,) = only(sv.check(build(missing), comm_semantics="torch"), "SV503")
    assert "PyTorch raises 'Computing ... before receiving input'" in v.message


def test_a_data_deadlock_is_sv402_under_both_runtimes():
    order = [["0F0", "0SEND_F0", "0RECV_B0", "0B0"], ["1RECV_B0", "1RECV_F0", "1F0", "1B0", "1SEND_B0"]]
    # device 1 lists microbatch 0's gradient receive: it has no such thing to receive
    report = sv.check(build(order), comm_semantics="torch")
    assert "SV502" in report.codes()
    # a real cycle: each device's first compute needs what the other computes later
    order = [["0RECV_B0", "0F0", "0B0", "0SEND_F0"], ["1RECV_F0", "1F0", "1B0", "1SEND_B0"]]
    for sem in ("torch", "torch-nccl"):
        codes = sv.check(build(order), comm_semantics=sem).codes()
        assert "SV402" in codes or "SV401" in codes, (sem, codes)


def test_a_cycle_on_gloo_is_reported_as_sv402_under_nccl_too():
    order = [["0F0", "0RECV_B0", "0B0", "0SEND_F0"], ["1RECV_F0", "1F0", "1B0", "1SEND_B0"]]
    gloo = sv.check(build(order), comm_semantics="torch")
    nccl = sv.check(build(order), comm_semantics="torch-nccl")
    assert "SV402" in gloo.codes() or "SV401" in gloo.codes()
    assert "SV405" not in nccl.codes() and set(gloo.codes()) <= set(nccl.codes())


def test_no_reduce_grad_is_a_warning_not_a_violation():
    report = sv.check(build(EXPLICIT), comm_semantics="torch")
    assert report.is_valid
    assert any("no REDUCE_GRAD" in w for w in report.warnings)
    reduced = [EXPLICIT[0] + ["0REDUCE_GRAD"], EXPLICIT[1] + ["1REDUCE_GRAD"]]
    assert sv.check(build(reduced), comm_semantics="torch").warnings == []
    assert sv.check(build(EXPLICIT), comm_semantics="eager").warnings == []
    assert report.to_json()["warnings"] == report.warnings
    assert report.to_json()["comm_semantics"] == "torch"


def test_nccl_options_are_checked():
    with pytest.raises(sv.UsageError, match="nccl streams must be 'device' or 'pair', got 'rank'"):
        NcclOptions(streams="rank")
    with pytest.raises(sv.UsageError, match="nccl must be a schedverify.runtime.NcclOptions"):
        sv.check(build(EXPLICIT), comm_semantics="torch-nccl", nccl={"streams": "pair"})
