"""PyTorch's releases as data (docs/spec.md 9): which release and layout a check assumes, the
2.15 grammar and its rules in both engines, communicator layouts, the waits of the lowering,
and what pending sends hold.

The real runtime's agreement is tests/test_realrt.py, run under each release; PyTorch's own
lowering's is tests/test_torch_interop.py.
"""

from __future__ import annotations

import io
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import schedverify as sv
from schedverify.engines import disagreements
from schedverify.cli import run
from schedverify.generators import FAMILIES
from schedverify.lowering import LoweringError, add_wait_send_budget, lower, retarget, torch_lowering
from schedverify.releases import DIRECTION, EDGE, SHARED, NcclOptions, release, releases, resolve
from schedverify.strategies import costs, valid_schedules, with_waits

z3check = pytest.importorskip("schedverify.smt.check")

UNIDIRECTIONAL = [name for name in FAMILIES if name not in ("dualpipe", "chimera")]
FRAMEWORKS = ["megatron-core", "deepspeed"]

#: every runtime of 2.15 the engines must agree on, as check() options
RUNTIMES_2_15 = [
    dict(comm_semantics="torch", torch="2.15"),
    dict(comm_semantics="torch", torch="2.15", p2p="edge"),
    dict(comm_semantics="torch-nccl", torch="2.15"),
    dict(comm_semantics="torch-nccl", torch="2.15", nccl=NcclOptions(streams="pair")),
    dict(comm_semantics="torch-nccl", torch="2.15", p2p="edge"),
    dict(comm_semantics="torch-nccl", torch="2.15", nccl=NcclOptions(buffered_sends=True)),
]
RUNTIME_IDS = ["gloo", "gloo-edge", "nccl", "nccl-lazy", "nccl-edge", "nccl-buffered"]


def csv(*rows: str, **options) -> sv.Schedule:
    return sv.loads_csv("\n".join(rows) + "\n", **options)


def agree(schedule, **options):
    """The graph and Z3 engines on ``schedule``: the same verdict, codes and makespan."""
    g = sv.check(schedule, **options)
    z = z3check.check_z3(schedule, **options)
    assert z.verdict is not sv.Verdict.UNKNOWN, z.reason
    assert disagreements(g, z) == [], ([str(v) for v in g.violations[:4]], [str(v) for v in z.violations[:4]])
    return g, z


# ------------------------------------------------------------------ which release, which layout


def test_the_default_release_is_the_installed_torchs():
    assert release(None, installed="2.15.0+cu132") == (releases()["2.15"], "the installed torch 2.15.0+cu132")
    assert release(None, installed="2.14.1")[0].version == "2.14"


def test_without_torch_the_newest_modelled_release():
    rel, why = release(None, installed=None)
    assert rel is list(releases().values())[-1] and "not installed" in why


@pytest.mark.parametrize("installed, nearest", [("2.16.0", "2.15"), ("2.9.1", "2.13"), ("3.0.0a0", "2.15")])
def test_an_unmodelled_installed_torch_takes_the_nearest_release_and_says_so(installed, nearest):
    rel, why = release(None, installed=installed)
    assert rel.version == nearest and "not modelled" in why and "--torch" in why


@pytest.mark.parametrize("asked", ["2.15", "2.15.0", "2.15.0+cu132", "2.15.1rc1"])
def test_torch_takes_a_release_or_a_version(asked):
    assert release(asked)[0].version == "2.15"


@pytest.mark.parametrize("asked", ["2.99", "2", "15", "2.15.x", "latest", ""])
def test_an_unknown_release_is_a_usage_error_naming_the_known_ones(asked):
    with pytest.raises(sv.UsageError, match="modelled: 2.13, 2.14, 2.15"):
        release(asked)


def test_the_layout_follows_the_releases_environment_variable():
    env = {"TORCH_DISTRIBUTED_PIPELINE_PER_EDGE_P2P": "1", "TORCH_DISTRIBUTED_PIPELINE_PER_DIRECTION_P2P": "1"}
    assert resolve("torch", torch="2.15", environ=env).layout is EDGE
    assert resolve("torch", torch="2.14", environ=env).layout is DIRECTION
    assert resolve("torch", torch="2.13", environ=env).layout is SHARED  # 2.13 has no such switch
    # as torch/utils/_config_module.py reads it: "0" and "" are off, anything else on
    for off in ("0", ""):
        assert resolve("torch", torch="2.15", environ={"TORCH_DISTRIBUTED_PIPELINE_PER_EDGE_P2P": off}).layout is SHARED
    assert resolve("torch", torch="2.15", environ={"TORCH_DISTRIBUTED_PIPELINE_PER_EDGE_P2P": "yes"}).layout is EDGE
    assert resolve("torch", torch="2.15", p2p="shared", environ=env).layout is SHARED  # --p2p overrides


def test_a_layout_or_option_the_release_lacks_is_a_usage_error_naming_who_has_it():
    with pytest.raises(sv.UsageError, match="PyTorch 2.13 has no one communicator per directed pair of ranks.*"
                                            "PyTorch 2.15 has it"):
        resolve("torch", torch="2.13", p2p="edge")
    with pytest.raises(sv.UsageError, match="PyTorch 2.15 has no one communicator for forward traffic"):
        resolve("torch", torch="2.15", p2p="direction")
    with pytest.raises(sv.UsageError, match="max_outstanding_sends: PyTorch 2.14's runtime has no such option "
                                            r"\(added in PyTorch 2.15\)"):
        resolve("torch", torch="2.14", options={"max_outstanding_sends": 2})


@pytest.mark.parametrize("options, message", [
    ({"max_outstanding_sends": -1}, "max_outstanding_sends: expected a whole number >= 0"),
    ({"max_outstanding_sends": True}, "max_outstanding_sends: expected a whole number >= 0"),
    ({"max_active_stages": 0}, "max_active_stages: expected a whole number >= 1"),
    ({"unshard_lookahead": "most"}, "unshard_lookahead: expected 'full', 'auto'"),
    ({"unshard_lookahead": (1, 4)}, "unshard_lookahead: expected 'full', 'auto'"),  # 4 > max_active_stages
    ({"defer_reduce_grad_wait": 1}, "defer_reduce_grad_wait: expected True or False"),
    ({"lookahead": 2}, "unknown option 'lookahead'"),
])
def test_bad_runtime_options_are_refused_naming_the_value(options, message):
    with pytest.raises(sv.UsageError, match=message):
        resolve("torch", torch="2.15", options=options)


def test_a_runtime_choice_under_an_abstract_semantics_is_refused():
    s = FAMILIES["1f1b"](2, 2)
    with pytest.raises(sv.UsageError, match="torch choose.*PyTorch's runtime.*'eager'"):
        sv.check(s, comm_semantics="eager", torch="2.15")
    # with no semantics given, a runtime choice means PyTorch's over NCCL
    assert sv.check(s, torch="2.15").comm_semantics == "torch-nccl"


def test_the_report_names_the_release_and_layout_it_assumed():
    r = sv.check(FAMILIES["1f1b"](2, 2), comm_semantics="torch-nccl", torch="2.15", p2p="edge")
    assert r.profile.release.version == "2.15" and r.profile.layout is EDGE
    assert r.profile.describe() == ("PyTorch 2.15 over NCCL (as asked); edge layout (as asked): one communicator "
                                    "per directed pair of ranks, one stream each")
    assert r.to_json()["runtime"] == {"framework": "PyTorch", "release": "2.15", "backend": "nccl", "p2p": "edge",
                                      "nccl_streams": "device", "nccl_buffered_sends": False, "options": {},
                                      "why": ["as asked", "as asked"]}
    # the test session sees PyTorch 2.13 as the installed one (tests/conftest.py)
    assert sv.check(FAMILIES["1f1b"](2, 2), comm_semantics="torch").profile.describe().startswith(
        "PyTorch 2.13 over gloo (the installed torch 2.13.0)")


@pytest.mark.parametrize("options", [dict(comm_semantics="torch", torch="2.14"),
                                     dict(comm_semantics="torch-nccl", torch="2.15", p2p="edge"),
                                     dict(framework="megatron-core"), dict(framework="deepspeed")])
def test_a_report_through_a_runtime_pickles_with_its_release(options):
    import pickle

    r = sv.check(FAMILIES["1f1b"](2, 2), **options)
    back = pickle.loads(pickle.dumps(r))
    assert back.profile == r.profile and back.to_json() == r.to_json()
    rel = back.profile.release
    assert rel == r.profile.release and type(rel.switches) is type(r.profile.release.switches)
    with pytest.raises(TypeError):  # still read-only
        rel.switches["x"] = None  # type: ignore[index]


# ------------------------------------------------------------------ 2.15's grammar and rules

# 1F1B on 2 ranks, 2 microbatches, as PyTorch 2.15's lowering writes it
R0 = "0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0WAIT_SEND_F0,0RECV_B1,0B1,0WAIT_SEND_F1,0REDUCE_GRAD,0WAIT_REDUCE_GRAD"
R1 = "1RECV_F0,1F0,1B0,1SEND_B0,1RECV_F1,1F1,1B1,1SEND_B1,1REDUCE_GRAD,1WAIT_REDUCE_GRAD,1WAIT_SEND_B0,1WAIT_SEND_B1"


@pytest.mark.parametrize("options", RUNTIMES_2_15[:2], ids=RUNTIME_IDS[:2])
def test_a_215_schedule_runs_on_215(options):
    g, z = agree(csv(R0, R1), **options)
    assert g.is_valid and g.metrics.makespan == 9 and g.warnings == []


@pytest.mark.parametrize("version", ["2.13", "2.14"])
def test_a_215_schedule_on_an_older_release_is_sv103_once_per_device_and_kind(version):
    g, z = agree(csv(R0, R1), comm_semantics="torch", torch=version)
    assert g.codes() == ["SV103"]
    first = g.violations[0]
    assert str(first.locations[0]) == "device 0, position 6: 0WAIT_SEND_F0"
    assert (f"0WAIT_SEND_F0 is not in PyTorch {version}'s grammar (WAIT_SEND_F is PyTorch 2.15's): its "
            f"_Action.from_str reads '0WAIT_SEND_F0' as '0W' (no microbatch), and its runtime then raises "
            f"'missing mb_index'; 1 more WAIT_SEND_F on device 0") in first.message
    assert len(g.violations) == 4  # WAIT_SEND_F and WAIT_REDUCE_GRAD on 0, WAIT_REDUCE_GRAD and WAIT_SEND_B on 1


def test_a_213_schedule_on_215_has_sends_without_waits_and_an_unpaired_reduction():
    old = csv(R0.replace(",0WAIT_SEND_F0", "").replace(",0WAIT_SEND_F1", "").replace(",0WAIT_REDUCE_GRAD", ""),
              R1.split(",1WAIT_REDUCE_GRAD")[0])
    g, _ = agree(old, comm_semantics="torch", torch="2.15")
    assert g.codes() == ["SV407", "SV505"]
    (reduce0, reduce1, send0, send1) = g.violations
    assert "0REDUCE_GRAD is never waited for ('Stage 0 at rank 0 has REDUCE_GRAD without WAIT_REDUCE_GRAD')" \
        in reduce0.message
    assert send0.message.startswith("0SEND_F0 has no 0WAIT_SEND_F0 after it on device 0 (and 1 more send on "
                                    "device 0): PyTorch 2.15 refuses the schedule when it loads it ('Pipeline "
                                    "sends at rank 0 have no matching wait: 0SEND_F0, 0SEND_F1')")
    assert "schedverify lower --torch 2.15" in send1.message
    # the same file is what 2.13 runs
    assert agree(old, comm_semantics="torch", torch="2.13")[0].is_valid


@pytest.mark.parametrize("edit, code, message", [
    (("drop", "0WAIT_SEND_F1", None), "SV505", "0SEND_F1 has no 0WAIT_SEND_F1 after it on device 0"),
    (("again", "0WAIT_SEND_F0", None), "SV506",
     "0WAIT_SEND_F0 has no pending send: 0SEND_F0 (position 1) is already waited for by 0WAIT_SEND_F0 (position 6)"),
    (("move", "0WAIT_SEND_F0", "0F0"), "SV506",
     "0WAIT_SEND_F0 has no pending send: no 0SEND_F0 comes before it on device 0"),
    (("drop", "0WAIT_REDUCE_GRAD", None), "SV407", "0REDUCE_GRAD is never waited for"),
    (("move", "0WAIT_REDUCE_GRAD", "0REDUCE_GRAD"), "SV407", "0WAIT_REDUCE_GRAD has no pending reduction"),
])
def test_each_refusal_of_215s_load_is_a_violation_with_its_message(edit, code, message):
    how, cell, before = edit
    rows = [R0.split(","), R1.split(",")]
    k = rows[0].index(cell)
    if how == "again":
        rows[0].insert(k, cell)
    else:
        rows[0].remove(cell)
    if how == "move":
        rows[0].insert(rows[0].index(before), cell)
    g, z = agree(csv(*(",".join(r) for r in rows)), comm_semantics="torch", torch="2.15")
    assert code in g.codes() and code in z.codes()
    assert any(message in v.message for v in g.violations), [str(v) for v in g.violations]


def test_a_wait_for_another_stages_reduction_is_refused():
    rows = ["0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0WAIT_SEND_F0,0RECV_B1,0B1,0WAIT_SEND_F1,0REDUCE_GRAD,"
            "2WAIT_REDUCE_GRAD", R1]
    g, _ = agree(csv(*rows, stages=3, devices=2, placement=[0, 1, 0]), comm_semantics="torch", torch="2.15")
    assert "SV407" in g.codes()
    assert any("2WAIT_REDUCE_GRAD waits for stage 2, but the pending reduction is stage 0's" in v.message
               for v in g.violations)


@pytest.mark.parametrize("cell, code", [("9WAIT_SEND_F0", "SV102"), ("0WAIT_SEND_F7", "SV102"),
                                        ("1WAIT_SEND_F0", "SV301"), ("7WAIT_REDUCE_GRAD", "SV102")])
def test_a_wait_for_an_unknown_stage_or_microbatch_is_a_violation(cell, code):
    g, _ = agree(csv(R0 + "," + cell, R1, stages=2, microbatches=2), comm_semantics="torch", torch="2.15")
    assert code in g.codes()


@pytest.mark.parametrize("text, message", [
    ("0WAIT_SEND_F", "WAIT_SEND_F needs a microbatch index, as in '0WAIT_SEND_F0'"),
    ("0WAIT_REDUCE_GRAD1", "WAIT_REDUCE_GRAD takes no microbatch index"),
    ("0WAIT_SEND_X1", "unknown action type 'WAIT_SEND_X'"),
])
def test_malformed_waits_do_not_parse(text, message):
    with pytest.raises(sv.InputError, match=message):
        csv(R0 + "," + text, R1)


def test_each_rank_waiting_for_its_send_before_the_peers_receive_is_a_deadlock_on_gloo_and_nccl():
    """As measured on PyTorch 2.15 over gloo (tests/test_realrt.py, wait-wait-deadlock): gloo's
    wait() blocks the host until the receive is posted; NCCL's makes the compute stream wait,
    and every later send or receive waits for the compute posted before it."""
    r0 = ("0F0,0SEND_F0,0F1,0SEND_F1,0WAIT_SEND_F1,0RECV_B0,0B0,0WAIT_SEND_F0,0RECV_B1,0B1,0REDUCE_GRAD,"
          "0WAIT_REDUCE_GRAD")
    r1 = ("1RECV_F0,1F0,1B0,1SEND_B0,1WAIT_SEND_B0,1RECV_F1,1F1,1B1,1SEND_B1,1REDUCE_GRAD,1WAIT_REDUCE_GRAD,"
          "1WAIT_SEND_B1")
    for options in RUNTIMES_2_15:
        g, z = agree(csv(r0, r1), **options)
        buffered = "nccl" in options and options["nccl"].buffered_sends  # a send completes without its receive
        assert g.codes() == ([] if buffered else ["SV402"]), options
    (v,) = sv.check(csv(r0, r1), comm_semantics="torch", torch="2.15").violations
    assert v.witness[0] == ("device 0 is stuck at 0WAIT_SEND_F1 (position 4): it holds the host (gloo's wait() "
                            "blocks) until 0SEND_F1 (position 3) completes: a send completes only with its receive, "
                            "1RECV_F1 (device 1, position 5), which is not posted yet")


# ------------------------------------------------------------------ layouts

# device 0 sends microbatch 1's activation before it receives microbatch 0's gradient; device
# 1 sends that gradient before it posts the activation's receive
BASE = ("0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1",
        "1RECV_F0,1F0,1B0,1SEND_B0,1RECV_F1,1F1,1B1,1SEND_B1")


@pytest.mark.parametrize("torch, p2p, streams, codes", [
    ("2.13", None, "device", ["SV405"]),  # one stream per rank: both heads are sends
    ("2.13", None, "pair", ["SV405"]),  # one stream for the pair, both directions
    ("2.14", "direction", "device", []),  # forward and backward traffic on two streams
    ("2.15", "edge", "device", ["SV505"]),  # one stream per directed edge (2.15: no waits here)
])
def test_nccl_streams_are_one_per_communicator(torch, p2p, streams, codes):
    s = csv(*BASE)
    g, _ = agree(s, comm_semantics="torch-nccl", torch=torch, p2p=p2p, nccl=NcclOptions(streams=streams))
    assert g.codes() == codes


def test_nccl_edge_streams_take_215s_own_1f1b_that_one_shared_stream_hangs():
    assert agree(csv(R0, R1), comm_semantics="torch-nccl", torch="2.15")[0].codes() == ["SV405"]
    assert agree(csv(R0, R1), comm_semantics="torch-nccl", torch="2.15", p2p="edge")[0].is_valid


def test_messages_are_matched_per_communicator():
    """Stages 0, 2 on device 0 and 1 on device 1: device 0 sends microbatch 1's activation
    (0SEND_F1) before stage 2's gradient of microbatch 0 (2SEND_B0); device 1 receives the
    gradient first.  One communicator: the k-th send is the k-th receive whatever its kind,
    so they cross; per direction: activations and gradients are matched apart."""
    r0 = "0F0,0SEND_F0,2RECV_F0,2F0,2B0,0F1,0SEND_F1,2SEND_B0,0RECV_B0,0B0,2RECV_F1,2F1,2B1,2SEND_B1,0RECV_B1,0B1"
    r1 = "1RECV_F0,1F0,1SEND_F0,1RECV_B0,1RECV_F1,1B0,1SEND_B0,1F1,1SEND_F1,1RECV_B1,1B1,1SEND_B1"
    s = csv(r0, r1, stages=3, placement=[0, 1, 0])
    assert "SV504" in agree(s, comm_semantics="torch", torch="2.14")[0].codes()
    assert agree(s, comm_semantics="torch", torch="2.14", p2p="direction")[0].is_valid


# ------------------------------------------------------------------ lowering, retargeting


@pytest.mark.parametrize("family", UNIDIRECTIONAL)
def test_our_215_lowering_runs_on_every_layout_at_the_compute_only_makespan(family):
    """docs/spec.md 9.5: the keyed construction with PyTorch's waits runs under every layout and
    backend of 2.15, whichever it was made for, at the compute-only makespan (zero latency)."""
    s = FAMILIES[family](3, 6)
    base = sv.check(s, comm_semantics="torch", torch="2.15").metrics.makespan
    low = lower(s, comm_semantics="torch-nccl", torch="2.15")
    for options in RUNTIMES_2_15:
        r = sv.check(low, **options)
        assert r.is_valid and r.metrics.makespan == base, (options, [str(v) for v in r.violations[:3]])


@settings(max_examples=30)
@given(valid_schedules(bidirectional=False, comm="none", reduce_grad=False), costs(comm=False))
def test_lowering_for_215_keeps_the_makespan_everywhere(s, c):
    base = sv.check(s, costs=c, comm_semantics="torch", torch="2.15")
    if not base.is_valid:
        return
    try:
        low = lower(s, costs=c, comm_semantics="torch-nccl", torch="2.15")
    except LoweringError as e:  # a device with no action at all
        assert "has no action" in str(e)
        return
    for options in RUNTIMES_2_15:
        r = sv.check(low, costs=c, **options)
        assert r.is_valid and r.metrics.makespan == base.metrics.makespan, options


@settings(max_examples=40)
@given(valid_schedules(bidirectional=False, comm=("eager", "rendezvous"), reduce_grad=True), costs(comm=True))
def test_pytorchs_wait_placement_keeps_validity_and_makespan(s, c):
    """A schedule written for 2.13 and its 2.15 dialect (PyTorch's placement of the waits) run
    alike: each forward send's wait comes after what already waits for it, the others at the
    end."""
    if not s.has_explicit_comm:
        return
    for semantics in ("torch", "torch-nccl"):
        old = sv.check(s, costs=c, comm_semantics=semantics, torch="2.13")
        new = sv.check(retarget(s, torch="2.15"), costs=c, comm_semantics=semantics, torch="2.15")
        assert old.is_valid == new.is_valid, (semantics, new.codes(), old.codes())
        if old.is_valid:
            assert new.metrics.makespan == old.metrics.makespan


def test_retargeting_there_and_back_is_the_identity_on_213_files():
    s = torch_lowering(FAMILIES["interleaved-1f1b"](2, 4), torch="2.13")
    assert retarget(retarget(s, torch="2.15"), torch="2.13").order == s.order


def test_the_send_budget_moves_waits_or_refuses():
    low = torch_lowering(FAMILIES["interleaved-1f1b"](2, 4), torch="2.15")
    r = sv.check(low, torch="2.15", runtime_options={"max_outstanding_sends": 1})
    assert r.is_valid and any("moves 22 waits earlier to keep at most 1 send(s) pending" in w for w in r.warnings)
    g, z = agree(low, comm_semantics="torch", torch="2.15", runtime_options={"max_outstanding_sends": 0})
    assert g.codes() == ["SV507"]
    assert "Cannot satisfy max_outstanding_sends=0 on pipeline rank 0 before 0SEND_F0" in g.violations[0].message
    rows = {d: [a for a in row if a is not None] for d, row in enumerate(low.order)}
    budgeted = add_wait_send_budget(rows, low.placement.routes[0].__getitem__, 2)
    for row in budgeted.values():
        pending = 0
        for a in row:
            pending += a.kind.startswith("SEND") - a.kind.startswith("WAIT_SEND")
            assert pending <= 2


# ------------------------------------------------------------------ the engines agree


@settings(max_examples=25)
@given(st.data())
def test_both_engines_agree_on_215_schedules_with_random_waits(data):
    s = data.draw(valid_schedules(devices=st.integers(2, 3), microbatches=st.integers(1, 3),
                                  bidirectional=False, comm=("eager", "rendezvous"), reduce_grad=True))
    waited = data.draw(with_waits(s))
    options = data.draw(st.sampled_from(RUNTIMES_2_15))
    agree(waited, **options)


@settings(max_examples=25)
@given(valid_schedules(devices=st.integers(2, 3), bidirectional=False, comm="eager").flatmap(
    lambda s: with_waits(s, placement="pytorch")), st.sampled_from(["2.13", "2.15"]))
def test_both_engines_count_what_pending_sends_hold(s, version):
    g, z = agree(s, comm_semantics="torch", torch=version, memory={"message": 0.5})
    assert [d.peak_memory for d in g.metrics.devices] == [d.peak_memory for d in z.metrics.devices]


def test_a_pending_send_holds_its_message_until_its_wait_or_the_step_ends():
    s = torch_lowering(FAMILIES["1f1b"](2, 4), torch="2.15")
    peaks = [d.peak_memory for d in sv.check(s, torch="2.15", memory={"message": 0.25}).metrics.devices]
    # rank 0 holds at most 2 activations and the messages of its 2 pending forward sends; rank
    # 1's backward sends wait at the end of its list, so it holds all 4 (and 1 activation)
    assert peaks == [2.5, 1.75]
    old = [d.peak_memory for d in sv.check(torch_lowering(FAMILIES["1f1b"](2, 4), torch="2.13"), torch="2.13",
                                           memory={"message": 0.25}).metrics.devices]
    assert old == [3.0, 1.75]  # 2.13 holds every send to the end of the step
    assert [d.peak_memory for d in sv.check(s, torch="2.15").metrics.devices] == [2, 1]  # message 0 by default


# ------------------------------------------------------------------ lint and command line


def cli(*argv):
    out, err = io.StringIO(), io.StringIO()
    return run(list(argv), out, err), out.getvalue(), err.getvalue()


@pytest.mark.parametrize("argv, message", [
    (["check", "examples/pytorch_interleaved_1f1b.csv", "--torch", "2.99"],
     "--torch '2.99': not a modelled PyTorch release; modelled: 2.13, 2.14, 2.15"),
    (["check", "examples/pytorch_interleaved_1f1b.csv", "--torch", "2.13", "--p2p", "edge"],
     "--p2p edge: PyTorch 2.13 has no one communicator per directed pair of ranks"),
    (["check", "examples/pytorch_interleaved_1f1b.csv", "--torch", "2.13", "--max-outstanding-sends", "1"],
     "runtime option max_outstanding_sends: PyTorch 2.13's runtime has no such option (added in PyTorch 2.15)"),
    (["lower", "examples/pytorch_interleaved_1f1b.csv", "--torch", "2.99"], "--torch '2.99'"),
    (["lint", "examples/pytorch_interleaved_1f1b.csv", "--torch", "2.99"], "--torch '2.99'"),
    (["show", "examples/pytorch_interleaved_1f1b.csv", "--torch", "2.99"], "--torch '2.99'"),
])
def test_bad_runtime_choices_exit_2_with_one_line(argv, message, monkeypatch):
    from pathlib import Path

    monkeypatch.chdir(Path(__file__).resolve().parent.parent)
    code, out, err = cli(*argv)
    assert code == 2 and message in err and "Traceback" not in err + out, err


def test_lower_rewrites_a_comms_csv_for_another_release(tmp_path, monkeypatch):
    from pathlib import Path

    monkeypatch.chdir(Path(__file__).resolve().parent.parent)
    code, out, err = cli("lower", "examples/pytorch_interleaved_1f1b_comms.csv", "--torch", "2.15",
                         "-o", str(tmp_path / "new.csv"))
    assert code == 0 and "rewritten for torch-nccl on PyTorch 2.15: 496 actions, re-checked: VALID" in out
    code, out, _ = cli("check", str(tmp_path / "new.csv"), "--torch", "2.15")
    assert code == 0, out
    code, out, _ = cli("check", str(tmp_path / "new.csv"), "--torch", "2.13")
    assert code == 1 and "SV103" in out


# ------------------------------------------------------------------ batches (docs/spec.md 10)

BATCHED = ("0F0,(0SEND_F0)BATCH,0F1,(0SEND_F1;0RECV_B0)BATCH,0B0,(0RECV_B1)BATCH,0B1",
           "(1RECV_F0)BATCH,1F0,1B0,(1SEND_B0;1RECV_F1)BATCH,1F1,1B1,(1SEND_B1)BATCH")


def test_a_batch_is_one_group_on_nccl_and_waited_for_on_gloo():
    """Megatron-LM's send_forward_recv_backward as one batch_isend_irecv: over NCCL its send and
    receive are one group, so the two ranks' opposite sends do not block each other, where the
    same operations posted one by one hang on one stream per rank (SV405)."""
    for semantics in ("torch", "torch-nccl"):
        g, _ = agree(csv(*BATCHED), comm_semantics=semantics, framework="megatron-core")
        assert g.is_valid and g.metrics.makespan == 9, semantics
    plain = tuple(row.replace("(", "").replace(")BATCH", "").replace(";", ",") for row in BATCHED)
    assert agree(csv(*plain), comm_semantics="torch-nccl", framework="megatron-core")[0].codes() == ["SV405"]
    # under a PyTorch release, a BATCH is not in the grammar (and on 2.15 its sends lack waits)
    assert agree(csv(*BATCHED), comm_semantics="torch", torch="2.13")[0].codes() == ["SV103"]


def test_blocking_sends_and_receives_hang_where_posted_ones_run():
    """With every send and receive blocking (dist.send, dist.recv: DeepSpeed's engine), device
    0 blocks in its second send until device 1 posts that receive, which device 1 does after its
    gradient's send completes, which needs device 0's receive: a deadlock on gloo too."""
    s = csv(*BASE)
    assert agree(s, comm_semantics="torch", torch="2.13")[0].is_valid
    g, _ = agree(s, comm_semantics="torch", framework="deepspeed")
    assert g.codes() == ["SV402"]
    assert any("blocks until it completes" in step for step in g.violations[0].witness)


@settings(max_examples=30)
@given(st.data())
def test_both_engines_agree_on_batches_and_blocking_operations(data):
    from schedverify.strategies import with_batches

    s = data.draw(valid_schedules(devices=st.integers(2, 3), microbatches=st.integers(1, 3), bidirectional=False,
                                  backward="B", comm=("eager", "rendezvous"), reduce_grad=False))
    batched = data.draw(with_batches(s))
    framework = data.draw(st.sampled_from(FRAMEWORKS))
    semantics = data.draw(st.sampled_from(["torch", "torch-nccl"]))
    p2p = data.draw(st.sampled_from(sv.releases.framework_release(framework)[0].layouts))
    agree(batched, comm_semantics=semantics, framework=framework, p2p=p2p, nccl=NcclOptions(streams=data.draw(
        st.sampled_from(["device", "pair"]))))


# ------------------------------------------------------------------ the frameworks' loops (10)


def test_a_framework_is_named_with_an_optional_version():
    from schedverify.releases import framework_release

    assert framework_release("megatron-core")[0].name == "megatron-core 0.19.2"
    assert framework_release("DeepSpeed==0.19.8")[0].name == "deepspeed 0.19.8"
    rel, why = framework_release("megatron-core", "0.19.9", asked=False)  # from a schedule's metadata
    assert rel.version == "0.19.2" and "0.19.9, which is not modelled" in why


@pytest.mark.parametrize("options, message", [
    (dict(framework="megatron"), "'megatron': not a modelled framework; modelled: megatron-core, deepspeed"),
    (dict(framework="megatron-core==0.18.0"), "megatron-core 0.18.0 is not modelled; modelled: 0.19.2"),
    (dict(framework="deepspeed", torch="2.15"), "--torch '2.15' chooses PyTorch's _PipelineScheduleRuntime"),
    (dict(framework="deepspeed", p2p="edge"), "deepspeed 0.19.8 has no one communicator per directed pair"),
    (dict(framework="megatron-core", runtime_options={"defer_pp_recv": True}),
     "megatron-core 0.19.2's runtime has no such option (PyTorch 2.13 and PyTorch 2.14 and PyTorch 2.15: "
     "PyTorch's _PipelineScheduleRuntime's)"),
    (dict(framework=3), "framework: expected a name such as 'megatron-core'"),
])
def test_a_framework_choice_it_cannot_take_is_a_usage_error(options, message):
    with pytest.raises(sv.UsageError, match=re.escape(message)):
        sv.check(csv(*BATCHED), comm_semantics="torch", **options)


def test_a_schedule_imported_from_a_framework_runs_on_its_loop():
    """The metadata schedverify.frameworks writes picks the framework's loop (and the layout its
    configuration uses); --torch or --framework overrides it."""
    s = csv(*BATCHED).with_(metadata={"framework": "megatron-core", "version": "0.19.2", "p2p": "edge"})
    r = sv.check(s, comm_semantics="torch")
    assert r.is_valid and r.profile.release.name == "megatron-core 0.19.2" and r.profile.layout is EDGE
    assert r.profile.why[0] == "named in the schedule's metadata"
    assert r.to_json()["runtime"]["framework"] == "megatron-core"
    assert sv.check(s, comm_semantics="torch", torch="2.13").codes() == ["SV103"]  # BATCH is no PyTorch kind
    assert sv.check(s, comm_semantics="torch", framework="deepspeed").profile.layout is SHARED


def test_what_only_pytorch_refuses_a_framework_runs():
    """Megatron-LM waits for some sends and drops other handles (no SV505), scales and reduces
    gradients after its loop (no REDUCE_GRAD and no warning), and keeps each microbatch's loss
    with it (a last stage's forwards in any order: no SV406)."""
    s = csv("0F0,0SEND_F0,0F1,0SEND_F1,0WAIT_SEND_F0,0RECV_B1,0RECV_B0,0B1,0B0",
            "1RECV_F0,1RECV_F1,1F1,1F0,1B1,1SEND_B1,1B0,1SEND_B0", devices=2, stages=2, microbatches=2)
    megatron = sv.check(s, comm_semantics="torch", framework="megatron-core")
    assert megatron.is_valid and not megatron.warnings
    codes = set(sv.check(s, comm_semantics="torch", torch="2.15").codes())
    assert {"SV505", "SV406"} <= codes
    assert any("REDUCE_GRAD" in w for w in sv.check(s, comm_semantics="torch", torch="2.13").warnings)
    agree(s, comm_semantics="torch", framework="megatron-core")


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("edit", [("0B0", "0I0,0W0"), ("0B1", "0B1,0REDUCE_GRAD"), ("0F0", "0UNSHARD,0F0")])
def test_a_kind_the_frameworks_loop_does_not_run_is_sv103(framework, edit):
    rows = list(BATCHED)
    rows[0] = rows[0].replace(*edit)
    g, _ = agree(csv(*rows), comm_semantics="torch", framework=framework)
    found = [v for v in g.violations if v.code.code == "SV103"]
    assert found and "runs (" in found[0].message, g.violations


def test_lower_refuses_a_frameworks_loop(tmp_path):
    path = tmp_path / "s.json"
    path.write_text(sv.dumps(csv(*BATCHED).with_(metadata={"framework": "megatron-core", "version": "0.19.2"})))
    out, err = io.StringIO(), io.StringIO()
    assert run(["lower", str(path)], out, err) == 2
    assert "cannot lower for megatron-core (its metadata)" in err.getvalue()
    with pytest.raises(LoweringError, match="deepspeed 0.19.8's pipeline engine posts its own communication"):
        torch_lowering(FAMILIES["1f1b"](2, 2), torch=sv.releases.framework_release("deepspeed")[0])
