"""schedverify.frameworks: the orders megatron-core 0.19.2 and DeepSpeed 0.19.8 run, with
their communication, checked on those frameworks' loops (docs/spec.md section 10).

Three tiers: the re-implementations and the loops' communication (always); the same held
equal to the installed frameworks' own functions at many sizes (marked ``frameworks``,
skipped unless megatron-core / deepspeed is installed: .ci/frameworks installs them); and
mutations of the imported orders, flagged as the hang or crossing they cause.
"""

from __future__ import annotations

import io
import itertools
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import schedverify as sv
from schedverify.cli import run
from schedverify.engines import disagreements
from schedverify.errors import UsageError
from schedverify.frameworks import deepspeed as ds
from schedverify.frameworks import megatron as mg
from schedverify.grammar import BATCH, OVERLAP_F_B, RECV_B, RECV_F, SEND_B, SEND_F, Action, B, F, batch

z3check = pytest.importorskip("schedverify.smt.check")

MEGATRON = mg.framework_functions("0.19.2")
DEEPSPEED = ds.framework_steps("0.19.8")
needs_megatron = pytest.mark.skipif(MEGATRON is None, reason="megatron-core 0.19.2 is not installed")
needs_deepspeed = pytest.mark.skipif(DEEPSPEED is None, reason="deepspeed 0.19.8 is not installed")
OURS = mg.reimplemented()


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    return run(list(argv), out, err), out.getvalue(), err.getvalue()


def megatron_sizes():
    """Every (pp, vpp, M, group) megatron-core accepts, small enough to run many of."""
    for pp, vpp, m in itertools.product(range(2, 6), range(1, 4), range(1, 13)):
        for group in ([None] if vpp == 1 else [None, *range(pp, m + 1)]):
            try:
                mg.validate(pp, vpp, m, group, None)
            except UsageError:
                continue
            yield pp, vpp, m, group


def single_ops(vpp: int, overlap: bool) -> dict:
    """``overlap_p2p_comm`` where the loop takes it (interleaved), else single waited operations
    (``batch_p2p_comm`` off): megatron-core refuses overlap without interleaving."""
    if not overlap:
        return {}
    return {"overlap_p2p_comm": True} if vpp > 1 else {"batch_p2p_comm": False}


def signed(order) -> list[int]:
    """A rank's compute order in convert_schedule_table_to_order's form (+c+1 forward of
    chunk c, -(c+1) backward), from the actions of a schedule of ``pp`` ranks."""
    out = []
    for a in order:
        for x in a.leaves() if a.kind == OVERLAP_F_B else (a,):
            if x.kind in (F, B):
                out.append(x.stage // signed.pp + 1 if x.kind == F else -(x.stage // signed.pp + 1))
    return out


# ------------------------------------------------------------------ megatron: the functions and the loops


def test_the_schedule_table_and_warmup_counts_are_megatrons_documented_ones():
    # schedules.py's own example: PP2 N3 M5 VP2
    assert mg.get_schedule_table(5, 2, 3) == [(0, 0), (1, 0), (2, 0), (0, 1), (1, 1), (2, 1), (3, 0), (4, 0),
                                              (3, 1), (4, 1)]
    # cuda_graphs.convert_schedule_table_to_order's docstring example, warm-up 5
    assert mg.convert_schedule_table_to_order(5, 2, mg.get_schedule_table(5, 2, 3)) == [
        1, 1, 1, 2, 2, 2, -2, 1, -2, 1, -2, 2, -1, 2, -1, -1, -2, -2, -1, -1]
    assert mg.get_pp_rank_microbatches(8, 2, 4, 4, 1, interleaved=True) == (16, False, 8, 8)  # (4-1-1)*2 + 1*4
    assert mg.get_pp_rank_microbatches(8, 2, 4, 4, 1, interleaved=True, overlap_moe_expert_parallel_comm=True)[2] == 9
    assert mg.get_pp_rank_microbatches(2, 1, 4, 4, 0, interleaved=False) == (2, True, 2, 0)  # min(pp-r-1, M)


@pytest.mark.parametrize("overlap,combined", [(False, False), (True, False), (False, True), (True, True)])
def test_each_ranks_compute_order_is_convert_schedule_table_to_order(overlap, combined):
    """The loop's forwards and backwards, rank by rank, are the chunk order Megatron's own
    convert_schedule_table_to_order gives for that rank's warm-up count."""
    checked = 0
    for pp, vpp, m, group in megatron_sizes():
        if combined and vpp == 1:
            continue
        s = mg.schedule(pp, vpp, m, group, combined_1f1b=combined, functions=OURS, **single_ops(vpp, overlap))
        signed.pp = pp
        for r in range(pp):
            assert signed(s.order[r]) == mg.chunk_order(pp, vpp, m, r, group, combined, functions=OURS), (pp, vpp, m)
        checked += 1
    assert checked > 100


def test_batched_calls_are_one_batch_each_in_megatrons_op_order():
    """batch_p2p_comm: every _communicate call one BATCH, its operations in
    _batched_p2p_ops's order (send_prev, recv_prev, send_next, recv_next)."""
    rank = {SEND_B: 0, RECV_F: 1, SEND_F: 2, RECV_B: 3}
    s = mg.schedule(4, 2, 8, functions=OURS)
    assert s.metadata["p2p"] == "shared" and s.metadata["config"]["batch_p2p_comm"] is True
    batches = [a for row in s.order for a in row if a.kind == BATCH]
    assert batches and all(a.kind in (F, B, BATCH) for row in s.order for a in row)
    for a in batches:
        assert [rank[x.kind] for x in a.sub] == sorted(rank[x.kind] for x in a.sub)


def test_overlap_mode_posts_single_ops_in_the_even_odd_order_and_drops_the_last_forward_handle():
    s = mg.schedule(2, 2, 4, overlap_p2p_comm=True, functions=OURS)
    assert s.metadata["p2p"] == "edge"  # _p2p_ops at PP = 2: one direction on the WORLD group
    assert not any(a.kind == BATCH for row in s.order for a in row)
    sends = [a for row in s.order for a in row if a.kind in (SEND_F, SEND_B)]
    waits = [a for row in s.order for a in row if a.kind.startswith("WAIT_SEND")]
    assert 0 < len(waits) < len(sends)  # some handles waited later, some dropped
    assert sv.check(s).is_valid
    # rank 1 (odd) posts recv_prev before send_next in one call; rank 0 (even) send_next first
    odd = [str(a) for a in s.order[1]]
    assert odd.index("1RECV_F0") < odd.index("1F0")


@settings(max_examples=40)
@given(st.sampled_from(list(megatron_sizes())), st.booleans(), st.booleans(), st.sampled_from(["torch", "torch-nccl"]))
def test_every_imported_megatron_schedule_checks_valid_on_megatrons_loop_but_the_pp2_batched_crossing(
        size, overlap, combined, semantics):
    pp, vpp, m, group = size
    combined = combined and vpp > 1
    s = mg.schedule(pp, vpp, m, group, combined_1f1b=combined, functions=OURS, **single_ops(vpp, overlap))
    g = sv.check(s, comm_semantics=semantics)
    # p2p_communication.py at PP = 2: next_rank == prev_rank, and a batch that carries both a
    # send_prev and a send_next to it is received by the peer as recv_prev, recv_next.  Such a
    # batch comes with a steady state: not when the warm-up runs every forward (combined_1f1b's
    # one more warm-up microbatch at M = 3, VPP = 3)
    both = any(a.kind == BATCH and {x.kind for x in a.sub} >= {SEND_F, SEND_B} for row in s.order for a in row)
    if pp == 2 and vpp > 1 and not overlap and both:
        assert set(g.codes()) == {"SV504"}, g.codes()
    else:
        assert g.is_valid, (size, overlap, combined, semantics, [str(v) for v in g.violations[:2]])
    assert g.profile.release.name == "megatron-core 0.19.2"


def test_pp2_interleaved_batched_is_the_crossing_megatron_avoids_with_overlap():
    crossed = sv.check(mg.schedule(2, 2, 4, functions=OURS))
    assert crossed.codes()[0] == "SV504"
    assert "2SEND_B0 is send number 4 from device 0 to device 1" in str(crossed.violations[0])
    assert sv.check(mg.schedule(2, 2, 4, overlap_p2p_comm=True, functions=OURS)).is_valid


def test_both_engines_agree_on_imported_megatron_schedules():
    for s in (mg.schedule(3, 2, 6, functions=OURS), mg.schedule(4, 1, 5, batch_p2p_comm=False, functions=OURS),
              mg.schedule(2, 2, 4, functions=OURS), mg.schedule(3, 2, 3, combined_1f1b=True, functions=OURS)):
        g = sv.check(s)
        z = z3check.check_z3(s)
        assert disagreements(g, z) == [], s.name


@pytest.mark.parametrize("kwargs,message", [
    (dict(pp=4, vpp=2, microbatches=3), "should range in [PP=4, M=3]"),
    (dict(pp=4, vpp=2, microbatches=10), "M=10 mod microbatch_group_size_per_vp_stage=4 is 2"),
    (dict(pp=4, vpp=1, microbatches=8, num_layers=10), "num_layers 10 is not divisible by pp 4"),
    (dict(pp=4, vpp=3, microbatches=8, num_layers=8), "do not divide into vpp 3 model chunks"),
    (dict(pp=4, microbatches=8, version="0.18.0"), "megatron-core '0.18.0' is not modelled; modelled: 0.19.2"),
    (dict(pp=0, microbatches=8), "expected a whole number >= 2, got 0"),
    (dict(pp=4, microbatches=0), "microbatches (num_microbatches): expected a whole number >= 1, got 0"),
    (dict(pp=4, microbatches=8, combined_1f1b=True), "interleaved loop only"),
    (dict(pp=4, microbatches=8, microbatch_group_size=4), "only the interleaved loop"),
    (dict(pp=4, microbatches=8, overlap_p2p_comm=True), "Non-interleaved pipeline parallelism does not support"),
    (dict(pp=4, vpp=2, microbatches=8, overlap_p2p_comm=True, batch_p2p_comm=True), "Can not use both"),
])
def test_megatrons_refusals_are_usage_errors(kwargs, message):
    with pytest.raises(UsageError) as e:
        mg.schedule(**kwargs)
    assert message in str(e.value)


# ------------------------------------------------------------------ deepspeed


def test_deepspeed_buffers_and_steps():
    assert [ds.num_pipe_buffers(8, 4, s) for s in range(4)] == [4, 3, 2, 2]
    assert ds.num_pipe_buffers(1, 4, 0) == 2
    steps = ds.train_steps(4, 2, 0)
    assert steps[3] == [("RecvGrad", 0, 0), ("SendActivation", 1, 1), ("BackwardPass", 0, 0)]
    assert steps[-1][-3:] == [("ReduceTiedGrads", None, None), ("ReduceGrads", None, None),
                              ("OptimizerStep", None, None)]


@settings(max_examples=40)
@given(st.integers(1, 6), st.integers(1, 10), st.sampled_from(["torch", "torch-nccl"]))
def test_every_imported_deepspeed_schedule_checks_valid_on_its_engine(stages, m, semantics):
    s = ds.schedule(stages, m, steps=ds.train_steps)
    assert s.metadata["num_pipe_buffers"] == [ds.num_pipe_buffers(m, stages, i) for i in range(stages)]
    g = sv.check(s, comm_semantics=semantics)
    assert g.is_valid, [str(v) for v in g.violations[:2]]
    assert g.profile.release.name == "deepspeed 0.19.8"


def test_deepspeed_refusals():
    for kwargs, message in ((dict(stages=0, microbatches=2), "stages (num_stages): expected a whole number >= 1"),
                            (dict(stages=2, microbatches=2, version="0.14.0"), "deepspeed '0.14.0' is not modelled")):
        with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
            ds.schedule(**kwargs)


# ------------------------------------------------------------------ deepspeed: DualPipeV


def dualpipev(stages, m):
    return ds.schedule(stages, m, dualpipev=True, steps=ds.dualpipev_steps)


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 5), st.integers(0, 6), st.sampled_from(["torch", "torch-nccl"]))
def test_every_dualpipev_import_runs_each_microbatch_down_and_back_and_checks_valid(stages, extra, semantics):
    """DualPipeVSchedule: rank r holds stages r and 2S-1-r (placement v), runs every
    microbatch's forward and backward once in each, and posts every send and receive in a
    BATCH (a CommitP2P); valid on DualPipeVEngine, by both engines."""
    m = 2 * stages + extra
    s = dualpipev(stages, m)
    assert s.stages == 2 * stages and s.metadata["engine"] == "DualPipeVEngine"
    assert s.metadata["num_pipe_buffers"] == [2 * m] * stages
    for r, row in enumerate(s.order):
        assert all(a.kind in (F, B, BATCH) for a in row)
        for stage in (r, 2 * stages - 1 - r):
            for kind in (F, B):
                assert [a.microbatch for a in row if a.kind == kind and a.stage == stage] == list(range(m))
        ops = [x for a in row if a.kind == BATCH for x in a.sub]
        # per microbatch and neighbouring rank: an activation and a gradient each way, in each
        # phase's direction (none at the turn on the last rank)
        assert len(ops) == 4 * m * ((r > 0) + (r < stages - 1))
    g = sv.check(s, comm_semantics=semantics)
    assert g.is_valid, [str(v) for v in g.violations[:2]]
    assert g.profile.release.name == "deepspeed 0.19.8 DualPipeVEngine"
    assert disagreements(g, z3check.check_z3(s, comm_semantics=semantics)) == []


def test_dualpipev_steps_and_its_batches():
    """DualPipeVSchedule(4, 2, 0): the opening steps as DeepSpeed 0.19.8 yields them (read
    from its steps()), and the CommitP2P of step 5 posting four queued operations at once."""
    steps = ds.dualpipev_steps(4, 2, 0)
    assert steps[0] == [("CommitP2P", None, None), ("LoadMicroBatch", None, 0), ("ForwardPass", 0, 0),
                        ("SendActivation", 0, 0)]
    assert steps[2] == [] and steps[-1][0] == ("CommitP2P", None, None)
    row = [str(a) for a in dualpipev(2, 4).order[0]]
    assert row[:4] == ["0F0", "(0SEND_F0)BATCH", "0F1", "(0SEND_F1)BATCH"]
    assert "(0SEND_F3;3SEND_B1;3RECV_F2;0RECV_B0)BATCH" in row


@pytest.mark.parametrize("stages,m", [(2, 3), (4, 7), (1, 1)])
def test_dualpipev_refuses_fewer_than_twice_the_stages_microbatches(stages, m):
    message = f"DualPipeV needs at least 2 * stages = {2 * stages} micro-batches (gradient_accumulation_steps), got {m}"
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)").replace("*", r"\*")):
        ds.schedule(stages, m, dualpipev=True)
    code, _, err = cli("import", "deepspeed", "--stages", str(stages), "-M", str(m), "--dualpipev")
    assert code == 2 and message in err and "Traceback" not in err


def _split_commits(s):
    """Every CommitP2P of every rank split into one per queued operation, in queue order."""
    return s.with_(order=tuple(tuple(x for a in row for x in ((batch(y) for y in a.sub) if a.kind == BATCH
                                                              else (a,)))
                               for row in s.order))


def test_dualpipev_split_commits_deadlock_where_the_batch_does_not():
    """Posted one CommitP2P per operation, rank 0 waits for its activation send to rank 1
    while rank 1 waits for its own send to rank 0: the opposite sends of one batch no longer
    go together (gloo: each waits for its receive; NCCL: one stream per rank, in order)."""
    from schedverify.render.text import report_text

    s = dualpipev(2, 4)
    bad = _split_commits(s)
    for semantics in ("torch", "torch-nccl"):
        g = sv.check(bad, comm_semantics=semantics)
        assert g.codes()[0] in ("SV402", "SV405"), g.codes()
        assert disagreements(g, z3check.check_z3(bad, comm_semantics=semantics)) == []
    text = report_text("x", bad, sv.check(bad, comm_semantics="torch"))
    assert ("      deepspeed 0.19.8: rank 0: SendGrad(buffer_id=4, phase=1), queued at DualPipeVSchedule step 4, "
            "posted by the CommitP2P of step 4\n") in text
    assert ("      deepspeed 0.19.8: rank 1: SendActivation(buffer_id=5, phase=1), queued at DualPipeVSchedule "
            "step 3, posted by the CommitP2P of step 3\n") in text
    name = ds.namer(s)
    first = next(a for a in s.order[0] if a.kind == BATCH and len(a.sub) == 4)
    assert name(first) == ("rank 0: CommitP2P at DualPipeVSchedule step 5, one batch_isend_irecv waited at once: "
                           "SendActivation(buffer_id=3, phase=0) (queued at step 5); SendGrad(buffer_id=5, phase=1) "
                           "(queued at step 5); RecvActivation(buffer_id=6, phase=1) (queued at step 5); "
                           "RecvGrad(buffer_id=0, phase=0) (queued at step 5)")


def test_dualpipev_a_send_outside_its_batch_is_not_what_its_engine_runs():
    """DualPipeVEngine only queues sends and receives; a bare one is SV103 (both engines),
    and a BATCH under PipelineEngine, which has no CommitP2P, is SV103 too."""
    s = dualpipev(2, 4)

    def unbatch(r):
        i = next(i for i, a in enumerate(r) if a.kind == BATCH)
        r[i:i + 1] = list(r[i].sub)

    bare = _mutate(s, 0, unbatch)
    for check in (sv.check, z3check.check_z3):
        got = check(bare)
        assert got.codes() == ["SV103"], got.codes()
    assert "outside every BATCH" in str(sv.check(bare).violations[0])
    plain = s.with_(metadata={**s.metadata, "engine": "PipelineEngine"})
    assert "SV103" in sv.check(plain).codes() and "SV103" in z3check.check_z3(plain).codes()


# ------------------------------------------------------------------ mutations, in the frameworks' terms


def _mutate(s, device, change):
    rows = [list(r) for r in s.order]
    change(rows[device])
    return s.with_(order=tuple(map(tuple, rows)))


def test_deepspeed_a_swapped_send_recv_pair_deadlocks_its_blocking_engine():
    """Stage 0 running SendActivation(1) before RecvGrad(0): both stages block in a send
    whose receive the other posts only after its own send completes (dist.send)."""
    s = ds.schedule(2, 4, steps=ds.train_steps)
    row = [str(a) for a in s.order[0]]
    i, j = row.index("0RECV_B0"), row.index("0SEND_F1")
    assert j == i + 1

    def swap(r):
        r[i], r[j] = r[j], r[i]

    for semantics in ("torch", "torch-nccl"):
        g = sv.check(_mutate(s, 0, swap), comm_semantics=semantics)
        assert g.codes()[0] == "SV402", g.codes()
        assert any("blocks until it completes" in step for v in g.violations for step in v.witness)
    z = z3check.check_z3(_mutate(s, 0, swap), comm_semantics="torch")
    assert z.codes()[0] == "SV402"


def test_a_deepspeed_hang_is_reported_as_deepspeeds_instructions(tmp_path):
    """TrainSchedule(2 microbatches, 2 stages), by hand: stage 0 posts SendActivation(mb 1)
    at step 3 (RecvGrad(0), SendActivation(1), BackwardPass(0)); stage 1 posts SendGrad(mb 0)
    at step 3 (SendGrad(0), RecvActivation(1), ForwardPass(1)).  Swapping stage 0's RecvGrad
    and SendActivation deadlocks those two sends, and the report names them so."""
    from schedverify.render.text import report_text

    s = ds.schedule(2, 2, steps=ds.train_steps)
    row = [str(a) for a in s.order[0]]
    i, j = row.index("0RECV_B0"), row.index("0SEND_F1")

    def swap(r):
        r[i], r[j] = r[j], r[i]

    bad = _mutate(s, 0, swap)
    text = report_text("x", bad, sv.check(bad))
    assert "      deepspeed 0.19.8: stage 0: SendActivation(buffer_id=1), TrainSchedule step 3\n" in text
    assert "      deepspeed 0.19.8: stage 1: SendGrad(buffer_id=0), TrainSchedule step 3\n" in text
    path = tmp_path / "ds.json"
    sv.dump(bad, str(path))
    code, out, _ = cli("check", str(path), "--format", "json")
    terms = [loc.get("framework_term") for loc in json.loads(out)["violations"][0]["actions"]]
    assert code == 1 and terms == ["stage 0: SendActivation(buffer_id=1), TrainSchedule step 3",
                                   "stage 1: SendGrad(buffer_id=0), TrainSchedule step 3"]
    name = ds.namer(s)
    assert name(Action(0, RECV_F, 0)) is None  # stage 0 receives no activation: no instruction
    assert name(Action(1, B, 1)) == "stage 1: BackwardPass(buffer_id=1), TrainSchedule step 4"


def test_a_megatron_crossing_is_reported_as_megatrons_calls():
    """PP = 2, two chunks, batched: rank 0's chunk 1 sends microbatch 0's input gradient
    (send_prev) where rank 1's chunk 0 receives microbatch 2's input activation (recv_prev)."""
    from schedverify.render.text import report_text

    s = mg.schedule(2, 2, 4, functions=OURS)
    text = report_text("x", s, sv.check(s, max_violations=1))
    assert "SV504" in text
    assert "      megatron-core 0.19.2: rank 0, model chunk 1, microbatch 0: send_prev (its input gradient)\n" in text
    assert "      megatron-core 0.19.2: rank 1, model chunk 0, microbatch 2: recv_prev (its input activation)\n" in text
    name = mg.namer(s)
    first_batch = next(a for a in s.order[0] if a.kind == BATCH)
    assert name(first_batch).startswith("one batch_isend_irecv (_batched_p2p_ops), waited at once: rank 0")
    unnamed = s.with_(metadata={})  # the same order, no framework named: schedverify's terms only
    text = report_text("y", unnamed, sv.check(unnamed))
    assert "INVALID" in text and "send_prev" not in text and "\n      megatron-core" not in text


def test_deepspeed_a_moved_recv_and_a_missing_step_are_flagged():
    s = ds.schedule(3, 4, steps=ds.train_steps)
    row = list(s.order[1])
    k = next(i for i, a in enumerate(row) if a == Action(1, RECV_F, 1))

    def move(r):  # RecvActivation(1) after the ForwardPass it feeds
        a = r.pop(k)
        r.insert(k + 1, a)

    assert not sv.check(_mutate(s, 1, move)).is_valid
    missing = sv.check(_mutate(s, 2, lambda r: r.remove(Action(2, SEND_B, 0))))  # SendGrad(0) dropped
    assert not missing.is_valid and missing.codes()[0] in ("SV402", "SV201", "SV301"), missing.codes()


def test_megatron_a_swapped_send_recv_pair_hangs_on_nccls_streams():
    """_p2p_ops (batch_p2p_comm off) on the even rank 0 posts send_next before recv_next;
    posted the other way round, its receive waits on the communicator's stream for a gradient
    that rank 1 sends only after it has received the activation queued behind that receive."""
    s = mg.schedule(4, 1, 6, batch_p2p_comm=False, functions=OURS)
    row = [str(a) for a in s.order[0]]
    i = row.index("0SEND_F3")
    assert row[i + 1] == "0RECV_B0"

    def swap(r):
        r[i], r[i + 1] = r[i + 1], r[i]

    g = sv.check(_mutate(s, 0, swap))
    assert g.codes()[0] == "SV405", g.codes()
    assert "0RECV_B0" in str(g.violations[0])


def test_megatron_a_batch_before_its_forward_and_a_missing_batch():
    s = mg.schedule(4, 1, 6, functions=OURS)

    def early(r):  # (0SEND_F0)BATCH posted before 0F0 computes what it sends
        r[0], r[1] = r[1], r[0]

    assert sv.check(_mutate(s, 0, early)).codes()[0] == "SV401"
    dropped = sv.check(_mutate(s, 2, lambda r: r.pop(next(i for i, x in enumerate(r) if x.kind == BATCH))))
    assert not dropped.is_valid


# ------------------------------------------------------------------ the framework tier


@pytest.mark.frameworks
@needs_megatron
def test_megatrons_own_functions_give_the_reimplemented_orders_at_every_size():
    assert MEGATRON is not None
    n = 0
    for pp, vpp, m, group in megatron_sizes():
        g = pp if group is None else group
        assert MEGATRON.schedule_table(m, vpp, g) == OURS.schedule_table(m, vpp, g)
        for r in range(pp):
            for moe in (False, True):
                assert (MEGATRON.rank_microbatches(m, vpp, g, pp, r, interleaved=vpp > 1,
                                                   overlap_moe_expert_parallel_comm=moe)
                        == OURS.rank_microbatches(m, vpp, g, pp, r, interleaved=vpp > 1,
                                                  overlap_moe_expert_parallel_comm=moe))
            assert (mg.chunk_order(pp, vpp, m, r, group, functions=MEGATRON)
                    == mg.chunk_order(pp, vpp, m, r, group, functions=OURS))
        assert (mg.schedule(pp, vpp, m, group, functions=MEGATRON).order
                == mg.schedule(pp, vpp, m, group, functions=OURS).order)
        n += 1
    assert n > 250
    assert "megatron-core 0.19.2's own functions" in mg.schedule(4, 2, 8).metadata["order_from"]


@pytest.mark.frameworks
@needs_deepspeed
def test_deepspeeds_own_train_schedule_gives_the_reimplemented_steps_at_every_size():
    assert DEEPSPEED is not None
    for stages, m in itertools.product(range(1, 9), range(1, 17)):
        for stage in range(stages):
            assert DEEPSPEED(m, stages, stage) == ds.train_steps(m, stages, stage), (stages, m, stage)
    assert ds.schedule(4, 8).metadata["order_from"] == "deepspeed 0.19.8's own TrainSchedule"


@pytest.mark.frameworks
@needs_deepspeed
def test_deepspeeds_own_dualpipev_schedule_gives_the_reimplemented_steps_at_every_size():
    own = ds.framework_dualpipev_steps("0.19.8")
    assert own is not None
    n = 0
    for stages in range(1, 9):
        for m in range(2 * stages, 2 * stages + 13):
            for stage in range(stages):
                assert own(m, stages, stage) == ds.dualpipev_steps(m, stages, stage), (stages, m, stage)
                n += 1
    assert n == 468  # stages 1..8, M from 2 * stages to 2 * stages + 12, every rank
    with pytest.raises(UsageError, match="DualPipeV needs at least 2 \\* stages = 8"):
        own(7, 4, 0)
    assert ds.schedule(4, 8, dualpipev=True).metadata["order_from"] == "deepspeed 0.19.8's own DualPipeVSchedule"


REAL_LOOP_SIZES = [(pp, vpp, m, group) for pp, vpp, m, group in megatron_sizes()
                   if m <= 9 and (group is None or group == pp + 1)]


@pytest.mark.frameworks
@needs_megatron
@pytest.mark.parametrize("mode", ["batched", "single", "overlap"])
def test_megatrons_own_loops_post_what_the_imported_schedule_says(monkeypatch, mode):
    """megatron-core's forward_backward_pipelining_with(out)_interleaving, run rank by rank
    against a recording communicator (tests/_megatron_loop.py), compute and call
    _communicate where the imported schedule says, and wait for the handles it says."""
    from _megatron_loop import patched, run_rank

    n = 0
    with patched(monkeypatch):
        for pp, vpp, m, group in REAL_LOOP_SIZES:
            if mode == "overlap" and vpp == 1:
                continue
            kwargs = {"batched": {}, "single": {"batch_p2p_comm": False},
                      "overlap": {"overlap_p2p_comm": True}}[mode]
            s = mg.schedule(pp, vpp, m, group, functions=OURS, **kwargs)
            for r in range(pp):
                got = run_rank(pp, vpp, m, r, overlap=mode == "overlap", batch=mode == "batched", group=group)
                assert list(got) == list(s.order[r]), (pp, vpp, m, group, r)
            n += 1
    assert n > 40


# ------------------------------------------------------------------ memory, in the frameworks' terms


def _engine_slots(stream, stages: int, stage: int) -> tuple[int, int, int]:
    """(peak in flight, peak inputs held, peak outputs held) of one stage's TrainSchedule
    stream (name, microbatch, buffer_id), by PipelineEngine's own rules (engine.py):
    inputs set by LoadMicroBatch on the first stage and RecvActivation, freed by SendGrad;
    outputs set by ForwardPass, freed by BackwardPass except on the last stage."""
    inputs: dict[int, object] = {}
    outputs: dict[int, object] = {}
    live: set[int] = set()
    peak = [0, 0, 0]
    for row in stream:
        for name, mb, buf in row:
            if name == "LoadMicroBatch" and stage == 0 or name == "RecvActivation":
                inputs[buf] = mb
            elif name == "SendGrad":
                inputs.pop(buf)
            elif name == "ForwardPass":
                outputs[buf] = mb
                live.add(mb)
            elif name == "BackwardPass":
                live.discard(mb)
                if stage != stages - 1:
                    outputs.pop(buf)
            peak = [max(peak[0], len(live)), max(peak[1], len(inputs)), max(peak[2], len(outputs))]
    return peak[0], peak[1], peak[2]


def test_deepspeed_memory_is_num_pipe_buffers_and_the_engines_slots_at_every_size():
    from schedverify.frameworks.memory import memory

    for stages, m in itertools.product(range(1, 8), range(1, 13)):
        got = memory(ds.schedule(stages, m, steps=ds.train_steps))
        assert got is not None and got.runs == "TrainSchedule"
        for d in got.devices:
            stream = ds.train_steps(m, stages, d.device)
            assert d.buffers == max(2, min(stages - d.device, m))
            assert (d.in_flight, *(n for _, n in d.held)) == _engine_slots(stream, stages, d.device), (stages, m)
            # TrainSchedule's in flight is min(stages - stage, M): num_pipe_buffers exceeds it
            # only where that is 1 (the last stage, or M = 1), as max(2, ...) says
            assert d.in_flight == min(stages - d.device, m)
            assert (d.buffers > d.in_flight) == (min(stages - d.device, m) == 1)
    last = memory(ds.schedule(4, 8)).devices[-1]
    assert (last.buffers, last.in_flight, dict(last.held)) == (2, 1, {"inputs": 1, "outputs": 2})


def test_megatron_memory_counts_the_loops_lists():
    from schedverify.frameworks.memory import memory

    one = memory(mg.schedule(4, 1, 8))
    assert [(d.in_flight, dict(d.held)) for d in one.devices] == [
        (4 - r, {"output_tensors": 4 - r, "input_tensors": 4 - r}) for r in range(4)]
    over = memory(mg.schedule(4, 2, 8, overlap_p2p_comm=True))
    r2 = over.devices[2]
    assert [(s.stage, dict(s.held)) for s in r2.stages] == [
        (2, {"output_tensors": 7, "input_tensors": 8}), (6, {"output_tensors": 3, "input_tensors": 4})]
    assert (r2.in_flight, dict(r2.held)["input_tensors"]) == (7, 8)
    # the activation peak, in flight, is the compute order's: the same with or without the overlap
    assert [d.in_flight for d in over.devices] == [d.in_flight for d in memory(mg.schedule(4, 2, 8)).devices]
    from schedverify.generators import generate

    assert memory(generate("gpipe", 2, 4)) is None


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 5), st.integers(1, 3), st.integers(1, 12), st.booleans())
def test_megatron_in_flight_is_the_signed_orders_peak(pp, vpp, m, overlap):
    """Per rank, the peak of output_tensors' lengths is the peak, along the signed chunk
    order, of forwards minus backwards; and no chunk holds more than M, nor input_tensors
    fewer than output_tensors."""
    from schedverify.frameworks.memory import memory

    try:
        s = mg.schedule(pp, vpp, m, functions=OURS, **single_ops(vpp, overlap))
    except UsageError:
        return
    for d in memory(s).devices:
        order = mg.chunk_order(pp, vpp, m, d.device, functions=OURS)
        level = list(itertools.accumulate(1 if c > 0 else -1 for c in order))
        assert d.in_flight == max(level)
        for part in d.stages:
            held = dict(part.held)
            assert part.in_flight == held["output_tensors"] <= held["input_tensors"] <= m


def test_memory_in_bytes_weighs_each_stage_by_its_activation():
    from schedverify.frameworks.memory import memory
    from schedverify.plan.transformer import TransformerModel, stage_activations

    model = TransformerModel(layers=8, hidden=256, heads=4, ffn=1024, vocab=1000, seq_len=128)
    act = stage_activations(model, 4)
    got = memory(ds.schedule(4, 8), model)
    assert [d.activation_bytes for d in got.devices] == [min(4 - s, 8) * act[s] for s in range(4)]
    act8 = stage_activations(model, 8)
    r0 = memory(mg.schedule(4, 2, 8, num_layers=8), model).devices[0]
    # at its peak rank 0 holds chunk 0's and chunk 1's microbatches: never more than each at its own peak
    assert r0.activation_bytes <= sum(p.in_flight * act8[p.stage] for p in r0.stages)
    assert r0.activation_bytes >= max(p.in_flight * act8[p.stage] for p in r0.stages)
    with pytest.raises(UsageError, match="cannot cut 8 layers into 16"):
        memory(ds.schedule(16, 4), model)


@pytest.mark.frameworks
@needs_deepspeed
def test_deepspeeds_num_pipe_buffers_and_slots_are_its_own_at_every_size():
    from schedverify.frameworks.memory import memory

    module = ds._schedule_module("0.19.8")
    n = 0
    for stages, m in itertools.product(range(1, 9), range(1, 17)):
        got = memory(ds.schedule(stages, m))
        for d in got.devices:
            own = module.TrainSchedule(micro_batches=m, stages=stages, stage_id=d.device)
            assert d.buffers == own.num_pipe_buffers(), (stages, m, d.device)
            assert (d.in_flight, *(n for _, n in d.held)) == _engine_slots(DEEPSPEED(m, stages, d.device),
                                                                           stages, d.device)
            n += 1
    assert n == 16 * 36
    own_dualpipev = ds.framework_dualpipev_steps("0.19.8")
    for stages in range(1, 6):
        for m in range(2 * stages, 2 * stages + 5):
            got = memory(ds.schedule(stages, m, dualpipev=True))
            for d in got.devices:
                own = module.DualPipeVSchedule(micro_batches=m, stages=stages, stage_id=d.device)
                assert d.buffers == own.num_pipe_buffers() == 2 * m
                # in flight per phase and per rank, along DeepSpeed's own instruction stream
                live: dict[int, int] = {0: 0, 1: 0}
                peaks = {0: 0, 1: 0, "rank": 0}
                for row in own_dualpipev(m, stages, d.device):
                    for name, phase, _ in row:
                        if name in ("ForwardPass", "BackwardPass"):
                            live[phase] += 1 if name == "ForwardPass" else -1
                            peaks[phase] = max(peaks[phase], live[phase])
                            peaks["rank"] = max(peaks["rank"], live[0] + live[1])
                assert [p.in_flight for p in d.stages] == [peaks[0], peaks[1]], (stages, m, d.device)
                assert d.in_flight == peaks["rank"]


def _list_probe(pp: int, vpp: int, seen: list):
    """A probe for tests/_megatron_loop.py: at each forward_step and backward_step, the
    lengths of the loop's own input_tensors and output_tensors per chunk (read from its
    frame), the chunk a backward has just popped counted back (its length before the pop)."""
    import sys

    def probe(kind, chunk):
        frame = sys._getframe(1)
        while frame is not None and not {"input_tensors", "output_tensors"} <= frame.f_locals.keys():
            frame = frame.f_back
        assert frame is not None
        lists = frame.f_locals
        ins, outs = lists["input_tensors"], lists["output_tensors"]
        if vpp == 1:
            ins, outs = [ins], [outs]
        back = [int(kind == B and c == chunk) for c in range(vpp)]
        seen.append(([len(x) + k for x, k in zip(ins, back)], [len(x) + k for x, k in zip(outs, back)]))

    return probe


@pytest.mark.frameworks
@needs_megatron
@pytest.mark.parametrize("mode", ["batched", "overlap"])
def test_megatrons_own_lists_peak_where_the_memory_says(monkeypatch, mode):
    """megatron-core's own loops, run rank by rank (tests/_megatron_loop.py): the longest
    input_tensors[chunk] and output_tensors[chunk] (and their sums per rank) are the ones
    frameworks.memory counts from the imported order."""
    from _megatron_loop import patched, run_rank

    from schedverify.frameworks.memory import memory

    n = 0
    with patched(monkeypatch):
        for pp, vpp, m, group in REAL_LOOP_SIZES:
            if mode == "overlap" and vpp == 1:
                continue
            kwargs = {"overlap_p2p_comm": True} if mode == "overlap" else {}
            got = memory(mg.schedule(pp, vpp, m, group, functions=OURS, **kwargs))
            for d in got.devices:
                seen: list = []
                run_rank(pp, vpp, m, d.device, overlap=mode == "overlap", batch=mode == "batched", group=group,
                         probe=_list_probe(pp, vpp, seen))
                ins = [max(x[0][c] for x in seen) for c in range(vpp)]
                outs = [max(x[1][c] for x in seen) for c in range(vpp)]
                assert [dict(p.held)["input_tensors"] for p in d.stages] == ins, (pp, vpp, m, group, d.device)
                assert [dict(p.held)["output_tensors"] for p in d.stages] == outs, (pp, vpp, m, group, d.device)
                assert dict(d.held)["input_tensors"] == max(sum(x[0]) for x in seen)
                assert d.in_flight == dict(d.held)["output_tensors"] == max(sum(x[1]) for x in seen)
            n += 1
    assert n > 40


# ------------------------------------------------------------------ the command line


def test_cli_import_writes_a_schedule_that_check_runs_on_the_framework(tmp_path):
    path = tmp_path / "m.json"
    code, out, err = cli("import", "megatron", "--pp", "4", "--vpp", "2", "-M", "8", "-o", str(path))
    assert code == 0 and not err
    doc = json.loads(path.read_text())
    assert doc["metadata"]["framework"] == "megatron-core" and doc["metadata"]["version"] == "0.19.2"
    code, out, err = cli("check", str(path))
    assert code == 0 and "megatron-core 0.19.2 over NCCL" in out
    code, out, _ = cli("import", "deepspeed", "--stages", "2", "-M", "4", "--check", "--backend", "gloo")
    assert code == 0 and "VALID" in out and "deepspeed 0.19.8 over gloo" in out
    code, out, _ = cli("import", "megatron", "--pp", "2", "--vpp", "2", "-M", "4", "--check")
    assert code == 1 and "SV504" in out


def test_cli_check_gives_the_memory_in_the_frameworks_terms(tmp_path):
    from pathlib import Path

    model = str(Path(__file__).parent.parent / "examples" / "llama3-8b.toml")
    path = tmp_path / "ds.json"
    assert cli("import", "deepspeed", "--stages", "4", "-M", "8", "-o", str(path))[0] == 0
    code, out, _ = cli("check", str(path), "--format", "json", "--model", model)
    doc = json.loads(out)["framework_memory"]
    assert code == 0 and doc["runs"] == "TrainSchedule"
    last = doc["devices"][3]
    assert (last["num_pipe_buffers"], last["in_flight"], last["inputs"], last["outputs"]) == (2, 1, 1, 2)
    assert last["activation_bytes"] > 0
    code, out, _ = cli("check", str(path))
    assert "    stage 3: 2 num_pipe_buffers, 1 in flight, inputs 1, outputs 2\n" in out
    plain = tmp_path / "gpipe.json"
    assert cli("generate", "gpipe", "--devices", "2", "--microbatches", "2", "-o", str(plain))[0] == 0
    code, out, _ = cli("check", str(plain), "--model", model)
    assert code == 0 and "warning: --model: the schedule's metadata names no framework" in out
    assert "memory, peaks" not in out
    code, _, err = cli("check", str(path), "--model", str(tmp_path / "nope.toml"))
    assert code == 2 and "nope.toml" in err and "Traceback" not in err
    small = tmp_path / "small.toml"
    small.write_text(Path(model).read_text().replace("layers = 32", "layers = 2"))
    code, _, err = cli("check", str(path), "--model", str(small))
    assert code == 2 and "cannot cut 2 layers into 4 layer-holding stages" in err and "Traceback" not in err


@pytest.mark.parametrize("argv,message", [
    (["megatron", "--pp", "4", "--vpp", "2", "-M", "3"], "should range in [PP=4, M=3]"),
    (["megatron", "--pp", "4", "-M", "8", "--num-layers", "6"], "num_layers 6 is not divisible by pp 4"),
    (["megatron", "--pp", "4", "-M", "8", "--version", "0.1"], "megatron-core '0.1' is not modelled"),
    (["deepspeed", "--stages", "0", "-M", "4"], "--stages: must be at least 1, got 0"),
    ([], "name a framework"),
])
def test_cli_import_bad_input_is_exit_2_without_a_traceback(argv, message):
    code, out, err = cli("import", *argv)
    assert code == 2 and message in err and "Traceback" not in err, err
