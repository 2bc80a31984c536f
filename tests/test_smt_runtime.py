"""The Z3 engine against the graph engine under PyTorch's runtime semantics (docs/spec.md 8):
``torch`` (gloo) and ``torch-nccl`` (NCCL, with both stream layouts and buffered sends).

The Z3 engine encodes section 8 on its own (positional matching by indexing; the events of
8.4 as tracked "strictly after" constraints whose unsat cores are the hangs; the makespan by
minimisation), so the two engines must give the same verdict, codes and makespan on every
schedule.  Hand-made cases first, then Hypothesis properties on valid schedules with
explicit communication, their mutations, and compute-only schedules.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import schedverify
from schedverify import Costs, Verdict, check
from schedverify.engines import disagreements, run_engine
from schedverify.runtime import NcclOptions
from schedverify.strategies import costs, mutations, valid_schedules

z3check = pytest.importorskip("schedverify.smt.check")
check_z3 = z3check.check_z3

#: every runtime semantics the engines must agree on, as check() options
SEMANTICS = [
    {"comm_semantics": "torch"},
    {"comm_semantics": "torch-nccl"},
    {"comm_semantics": "torch-nccl", "nccl": NcclOptions(streams="pair")},
    {"comm_semantics": "torch-nccl", "nccl": NcclOptions(buffered_sends=True)},
    {"comm_semantics": "torch-nccl", "nccl": NcclOptions(streams="pair", buffered_sends=True)},
]
SEMANTICS_IDS = ["torch", "nccl", "nccl-pair", "nccl-buffered", "nccl-pair-buffered"]

#: codes whose primary offending action both engines name the same way
LOCATED = ("SV101", "SV102", "SV201", "SV202", "SV203", "SV301", "SV401", "SV406", "SV501", "SV502",
           "SV503", "SV504")


HANGS = {"SV402", "SV405"}
def agree(schedule, **options):
    """Both engines on ``schedule``: no disagreement, the same located actions, the same
    REDUCE_GRAD warning and semantics; returns (graph report, z3 report)."""
    g = check(schedule, **options)
    z = check_z3(schedule, **options)
    assert z.engine == "z3"
    assert z.verdict is not Verdict.UNKNOWN, z.reason
    assert disagreements(g, z) == [], ([str(v) for v in g.violations[:4]],
                                               [str(v) for v in z.violations[:4]])
    for code in LOCATED:
        gl = sorted(str(v.locations[0]) for v in g.violations if v.code.code == code)
        zl = sorted(str(v.locations[0]) for v in z.violations if v.code.code == code)
        assert gl == zl, code
    assert z.comm_semantics == g.comm_semantics
    assert bool(z.warnings) == bool(g.warnings)
    return g, z


def csv(*rows: str):
    return schedverify.loads_csv("\n".join(rows) + "\n")


# ------------------------------------------------------------------ hand-made cases

# 1F1B on 2 devices with explicit communication: device 0 sends microbatch 1's activation
# before it receives microbatch 0's gradient, device 1 sends that gradient before it posts
# the receive of microbatch 1's activation.  gloo: the sends never block; NCCL: both stream
# heads are sends to each other.
BASE = ("0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1",
        "1RECV_F0,1F0,1B0,1SEND_B0,1RECV_F1,1F1,1B1,1SEND_B1")


def test_base_runs_on_gloo_hangs_on_nccl():
    s = csv(*BASE)
    g, z = agree(s, comm_semantics="torch")
    assert z.is_valid and z.metrics.makespan == 9 == g.metrics.makespan
    assert z.comm_semantics == "torch"
    assert z.warnings  # no REDUCE_GRAD: the gradients are not scaled
    g, z = agree(s, comm_semantics="torch-nccl")
    assert z.codes() == ["SV405"] and z.metrics.makespan is None
    v = z.violations[0]
    assert {loc.action for loc in v.locations} == {"0SEND_F1", "1SEND_B0"}
    assert any(w.startswith("rank 0: [") for w in v.witness)
    _, z = agree(s, comm_semantics="torch-nccl", nccl=NcclOptions(streams="pair"))
    assert z.codes() == ["SV405"]
    _, z = agree(s, comm_semantics="torch-nccl", nccl=NcclOptions(buffered_sends=True))
    assert z.is_valid and z.metrics.makespan == 9


def test_receives_posted_out_of_send_order_cross():
    s = csv(BASE[0], "1RECV_F1,1RECV_F0,1F0,1B0,1SEND_B0,1F1,1B1,1SEND_B1")
    for opts in SEMANTICS:
        _, z = agree(s, **opts)
        assert z.codes() == ["SV504"], opts
        crossed = [v for v in z.violations if v.code.code == "SV504"]
        assert len(crossed) == 2
        assert {tuple(loc.action for loc in v.locations) for v in crossed} == {
            ("0SEND_F0", "1RECV_F1"), ("0SEND_F1", "1RECV_F0")}


# device 0 waits (in 0B0) for microbatch 0's gradient before it sends its activation
DATA_DEADLOCK = ("0F0,0RECV_B0,0B0,0SEND_F0", "1RECV_F0,1F0,1B0,1SEND_B0")


def test_data_deadlock_is_sv402_under_both():
    s = csv(*DATA_DEADLOCK)
    for opts in SEMANTICS:
        _, z = agree(s, **opts)
        assert z.codes() == ["SV402"], opts
        assert z.metrics.makespan is None


def test_zero_delay_cycle_is_still_a_hang():
    # every cost 0: the cycle has no length, it is still a hang
    s = csv(*DATA_DEADLOCK)
    zero = Costs(F=0, B=0, I=0, W=0)
    for opts in SEMANTICS:
        _, z = agree(s, costs=zero, **opts)
        assert z.codes() == ["SV402"]


# the last stage (4, on device 1) has a copy of its forward 4F0 on device 2, first in its
# order: that copy is SV202, not one of the last stage's forwards, so the loss order holds
# (docs/spec.md 8.3: "on its device"); the hang's devices are named once each in turn
DUPLICATED_LOSS_FORWARD = (
    "3RECV_F0,3F0,3SEND_F0,3RECV_B0,3B0,3SEND_B0",
    "0F0,0SEND_F0,4RECV_F0,4F0,4B0,4SEND_B0,0RECV_B0,0B0",
    "4F0,1RECV_F0,1F0,2F0,2SEND_F0,2RECV_B0,2B0,1B0,1SEND_B0")


def test_a_copy_of_the_loss_forward_off_its_device_is_a_duplicate_only():
    s = csv(*DUPLICATED_LOSS_FORWARD)
    assert s.placement.routes == ((1, 2, 2, 0, 1),)
    for opts in SEMANTICS[:2]:
        g, z = agree(s, **opts)
        assert z.codes() == ["SV202", "SV402"] == g.codes(), opts
        for v in g.violations + z.violations:
            if v.code.code == "SV402":
                path = v.message.split("devices ")[1].split(":")[0].split(" -> ")
                assert path[0] == path[-1] and all(a != b for a, b in zip(path, path[1:])), v.message


def test_recv_posted_before_the_send_it_waits_behind():
    # 0RECV_B0 is posted before 0SEND_F0 but nothing waits for it until 0B0: gloo runs it;
    # on NCCL the receive holds the head of device 0's stream, and the send behind it is
    # what device 1 needs first (PyTorch PR #165664), also with buffered sends.  (Under
    # torch the graph engine's critical path used to loop forever here: fixed in ab48b73.)
    s = csv("0F0,0RECV_B0,0SEND_F0,0B0", "1RECV_F0,1F0,1B0,1SEND_B0")
    _, z = agree(s, comm_semantics="torch")
    assert z.is_valid and z.metrics.makespan == 6
    for opts in SEMANTICS[1:]:
        _, z = agree(s, **opts)
        assert z.codes() == ["SV405"], opts


# A receive on the last stage has no peer (SV502): nothing consumes it, but under NCCL with
# one stream per device it holds the head of device 1's stream forever.  Behind it, each
# schedule has a cycle of waits of its own (docs/spec.md 8.5: the constraints' graph has a
# cycle, so it is reported): BASE's two sends to each other (SV405), DATA_DEADLOCK's data
# cycle (SV402: it hangs under gloo too, and the graph engine says so under torch).
UNMATCHED_HEAD = "1RECV_B0,"


def test_z3_reports_the_cycle_behind_an_unmatched_recv():
    s = csv(BASE[0], UNMATCHED_HEAD + BASE[1])
    assert check_z3(s, comm_semantics="torch").codes() == ["SV502"]  # gloo: runs
    assert check_z3(s, comm_semantics="torch-nccl").codes() == ["SV405", "SV502"]
    s = csv(DATA_DEADLOCK[0], UNMATCHED_HEAD + DATA_DEADLOCK[1])
    for opts in SEMANTICS:
        assert check_z3(s, **opts).codes() == ["SV402", "SV502"], opts
    assert check(s, comm_semantics="torch").codes() == ["SV402", "SV502"]


@pytest.mark.parametrize("rows", [BASE, DATA_DEADLOCK], ids=["sv405", "sv402"])
def test_graph_engine_reports_a_cycle_behind_an_unmatched_recv(rows):
    """Found by this file's properties: the graph engine looked for cycles among each stuck
    lane's first wait only, and missed these (it now releases a wait for a message that
    never comes, and goes on)."""
    s = csv(rows[0], UNMATCHED_HEAD + rows[1])
    agree(s, comm_semantics="torch-nccl")


def test_missing_recv_is_sv503():
    s = csv("0F0,0SEND_F0,0RECV_B0,0B0", "1F0,1B0,1SEND_B0")
    for opts in SEMANTICS:
        _, z = agree(s, **opts)
        assert "SV503" in z.codes(), opts
        assert "SV501" in z.codes()  # the send is never received either


def test_surplus_recv_is_sv502():
    s = csv("0F0,0SEND_F0,0RECV_B0,0B0", "1RECV_F0,1F0,1B0,1SEND_B0,1RECV_F0")
    for opts in SEMANTICS:
        _, z = agree(s, **opts)
        assert "SV502" in z.codes(), opts
        if opts["comm_semantics"] == "torch":  # gloo: nobody waits for it, the step ends
            assert z.metrics.makespan is not None
        else:  # NCCL: it holds its stream, the step never ends
            assert z.metrics.makespan is None


def test_surplus_send_has_no_makespan():
    s = csv("0F0,0SEND_F0,0SEND_F0,0RECV_B0,0B0", "1RECV_F0,1F0,1B0,1SEND_B0")
    for opts in SEMANTICS:
        _, z = agree(s, **opts)
        assert "SV501" in z.codes() and z.metrics.makespan is None


def test_loss_out_of_order_is_sv406():
    s = csv("0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B1,0B1,0RECV_B0,0B0",
            "1RECV_F0,1RECV_F1,1F1,1F0,1B1,1SEND_B1,1B0,1SEND_B0")
    for opts in SEMANTICS:
        _, z = agree(s, **opts)
        assert z.codes() == ["SV406"], opts
    # compute-only: the same rule, eager timing
    s = csv("0F0,0F1,0B1,0B0", "1F1,1F0,1B1,1B0")
    for opts in SEMANTICS[:2]:
        g, z = agree(s, **opts)
        assert z.codes() == ["SV406"] and z.metrics.makespan == g.metrics.makespan
        assert not z.warnings


def test_early_recv_is_valid():
    # device 1 posts both receives first: valid under every runtime semantics
    s = csv(BASE[0], "1RECV_F0,1RECV_F1,1F0,1B0,1SEND_B0,1F1,1B1,1SEND_B1")
    for opts in SEMANTICS:
        _, z = agree(s, **opts)
        assert z.is_valid, (opts, [str(v) for v in z.violations])


def test_consumer_before_its_recv_is_sv401():
    s = csv("0F0,0SEND_F0,0RECV_B0,0B0", "1F0,1RECV_F0,1B0,1SEND_B0")
    for opts in SEMANTICS:
        _, z = agree(s, **opts)
        assert "SV401" in z.codes() and z.metrics.makespan is None


def test_reduce_grad_silences_the_warning():
    s = csv("0F0,0SEND_F0,0RECV_B0,0B0,0REDUCE_GRAD", "1RECV_F0,1F0,1B0,1SEND_B0,1REDUCE_GRAD")
    for opts in SEMANTICS:
        g, z = agree(s, **opts)
        assert z.is_valid and not z.warnings and not g.warnings


def test_pair_streams_unblock_independent_peers():
    # interleaved (6 stages on 3 devices), 2 microbatches: on device 2, 2RECV_F1 (from
    # device 1) is posted before 2SEND_B0 (to device 1) and 5RECV_F1 (from device 1)...; with
    # one communication stream per device a receive whose send is late holds the operations
    # for the other peer behind it and the devices hang; with one stream per peer they run
    s = csv("0F0,0SEND_F0,0F1,0SEND_F1,3RECV_F0,3F0,3SEND_F0,3RECV_B0,3B0,3SEND_B0,0RECV_B0,0B0,"
            "3RECV_F1,3F1,3SEND_F1,3RECV_B1,3B1,3SEND_B1,0RECV_B1,0B1",
            "1RECV_F0,1F0,1SEND_F0,1RECV_F1,4RECV_F0,1F1,4F0,4SEND_F0,4RECV_B0,4B0,1SEND_F1,4SEND_B0,"
            "1RECV_B0,1B0,1SEND_B0,4RECV_F1,4F1,4SEND_F1,4RECV_B1,4B1,4SEND_B1,1RECV_B1,1B1,1SEND_B1",
            "2RECV_F0,2F0,2SEND_F0,5RECV_F0,5F0,5B0,5SEND_B0,2RECV_B0,2RECV_F1,2B0,2SEND_B0,2F1,"
            "2SEND_F1,5RECV_F1,5F1,5B1,5SEND_B1,2RECV_B1,2B1,2SEND_B1")
    _, z = agree(s, comm_semantics="torch")
    assert z.is_valid
    _, z = agree(s, comm_semantics="torch-nccl")
    assert z.codes() == ["SV405"]
    _, z = agree(s, comm_semantics="torch-nccl", nccl=NcclOptions(streams="pair"))
    assert z.is_valid
    for opts in SEMANTICS:
        agree(s, **opts)


def test_transfer_costs_and_latency():
    s = csv(*BASE)
    c = Costs(F=1, B=2, SEND_F=0.5, RECV_F=1, SEND_B=0.25, RECV_B=0, comm=0.75)
    for opts in SEMANTICS:
        g, z = agree(s, costs=c, **opts)
    g, z = agree(s, costs=c, comm_semantics="torch")
    # busy time counts compute only
    assert [d.busy for d in z.metrics.devices] == [d.busy for d in g.metrics.devices] == [6, 6]


def test_run_engine_forwards_nccl():
    s = csv(*BASE)
    r = run_engine("both", s, comm_semantics="torch-nccl", nccl=NcclOptions(buffered_sends=True))
    assert r.is_valid and r.engine == "graph+z3"
    r = run_engine("z3", s, comm_semantics="torch-nccl")
    assert r.codes() == ["SV405"]


def test_cli_both_engines_under_the_runtime_semantics(tmp_path):
    import io

    from schedverify.cli import run

    path = tmp_path / "base.csv"
    path.write_text("\n".join(BASE) + "\n")

    def cli(*argv):
        out, err = io.StringIO(), io.StringIO()
        return run(list(argv), out, err), out.getvalue(), err.getvalue()

    code, out, err = cli("check", "--engine", "both", "--comm-semantics", "torch-nccl", str(path))
    assert (code, err) == (1, "") and "SV405" in out
    code, out, err = cli("check", "--engine", "both", "--comm-semantics", "torch-nccl",
                         "--nccl-buffered-sends", str(path))
    assert (code, err) == (0, ""), out
    code, out, err = cli("check", "--engine", "z3", "--comm-semantics", "torch", str(path))
    assert (code, err) == (0, ""), out


def test_bad_nccl_option():
    with pytest.raises(schedverify.UsageError):
        check_z3(csv(*BASE), comm_semantics="torch-nccl", nccl={"streams": "pair"})


# ------------------------------------------------------------------ properties

comm_costs = st.one_of(st.none(), costs(comm_actions=True))
semantics = st.sampled_from(SEMANTICS)


def _options(data):
    opts = dict(data.draw(semantics))
    c = data.draw(comm_costs)
    if c is not None:
        opts["costs"] = c
    return opts


#: valid under eager, explicit SEND/RECV on every cross-device dependency, posted where the
#: topological execution put them: under positional matching they may cross, and under NCCL
#: a receive may hold its stream
explicit = valid_schedules(comm="eager", devices=st.integers(2, 4), microbatches=st.integers(1, 4))


@settings(max_examples=40)
@given(explicit, st.data())
def test_engines_agree_on_explicit_communication(s, data):
    agree(s, **_options(data))


@settings(max_examples=40)
@given(explicit.filter(lambda s: s.has_explicit_comm)
       .flatmap(lambda s: mutations(s, kinds=("reorder-comm",))), st.data())
def test_engines_agree_on_reordered_communication(m, data):
    agree(m.schedule, **_options(data))


@settings(max_examples=40)
@given(explicit.flatmap(mutations), st.data())
def test_engines_agree_on_mutated_schedules(m, data):
    agree(m.schedule, **_options(data))


@settings(max_examples=40)
@given(valid_schedules(comm="none", with_costs=True), st.sampled_from(SEMANTICS[:2]))
def test_engines_agree_on_compute_only_schedules(s, opts):
    g, z = agree(s, **opts)
    # compute-only: the timing of section 4, exactly as under eager
    e = check(s)
    assert z.metrics.makespan == e.metrics.makespan
    assert set(z.codes()) <= set(e.codes()) | {"SV406"}


def test_engines_agree_on_pytorchs_lowerings():
    """PyTorch's plain and deferred lowerings of 1F1B and interleaved 1F1B (4 devices, 8
    microbatches): valid, slowed by NCCL's stream order, or hung with more than ten cycles."""
    from schedverify.generators import FAMILIES
    from schedverify.lowering import torch_lowering

    for family in ("1f1b", "interleaved-1f1b"):
        for defer in (False, True):
            s = torch_lowering(FAMILIES[family](4, 8), defer_recv=defer)
            for opts in SEMANTICS[:2]:
                agree(s, **opts)


@settings(max_examples=30)
@given(valid_schedules(comm="none", bidirectional=False, reduce_grad=False, devices=st.integers(2, 3),
                       microbatches=st.integers(1, 4)),
       st.booleans(), st.sampled_from(SEMANTICS))
def test_engines_agree_on_lowered_schedules(s, defer, opts):
    """PyTorch's lowering (plain or deferred) of random valid compute-only schedules."""
    from schedverify.lowering import LoweringError, torch_lowering

    try:
        low = torch_lowering(s, defer_recv=defer)
    except LoweringError:  # a device without any action
        return
    agree(low, **opts)
