"""``plan --framework``: only what the framework runs, each candidate its own order checked on
its own loop, ranked as the checker times it, and the arguments the framework needs.

The candidates are compared with the importers' schedules (:mod:`schedverify.frameworks`),
their times and peaks with :func:`schedverify.check` of those schedules, and their refusals
with the frameworks' rules (megatron-core's ``validate``, Megatron-LM's ``validate_args``,
torchtitan 0.3.0's placements and PyTorch release).
"""

from __future__ import annotations

import io
import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import schedverify as sv
from schedverify.cli import run
from schedverify.errors import UsageError
from schedverify.frameworks import deepspeed, megatron
from schedverify.plan.frameworks import arguments, evaluate, framework_plan
from schedverify.plan.stages import TIME_QUANTUM, StageProfile, quantized

GiB = 2**30


def uniform(stages: int, *, layers: int = 32, act: int = GiB // 2, recv: int = 0) -> StageProfile:
    """``layers`` equal layers cut into ``stages`` stages (times and bytes scale with the cut)."""
    k = layers / stages
    return StageProfile(F=(0.01 * k,) * stages, I=(0.01 * k,) * stages, W=(0.008 * k,) * stages,
                        activation=(int(act * k),) * stages, static=(int(GiB // 4 * k),) * stages,
                        recv_buffers=(recv,) * stages if recv else (), comm=2e-4, source=f"{layers} layers")


def source(stages: int, split: bool) -> StageProfile:
    return uniform(stages)


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    return run(list(argv), out, err), out.getvalue(), err.getvalue()


def test_megatron_ranks_its_own_orders_timed_on_its_own_loop():
    result = framework_plan("megatron", source, 4, 8, chunks=(2, 4), layers=32)
    got = {(c.name, c.options.get("vpp", 1), c.options.get("overlap_p2p_comm", False)): c for c in result.candidates}
    assert set(got) == {("megatron-1f1b", 1, False), *(("megatron-interleaved", v, overlap)
                                                        for v in (2, 4) for overlap in (True, False))}
    for (_, vpp, overlap), c in got.items():
        own = megatron.schedule(4, vpp, 8, overlap_p2p_comm=overlap, num_layers=32)
        assert c.schedule == own  # the framework's own order, with its communication
        assert c.schedule.metadata["framework"] == "megatron-core"
        costs, memory = quantized(uniform(own.stages), None)
        report = sv.check(own, costs=costs, memory=memory)  # on megatron-core's loop (its metadata)
        assert c.step_time == pytest.approx(report.metrics.makespan * TIME_QUANTUM)
        assert c.peak_memory == tuple(math.ceil(d.peak_memory) for d in report.metrics.devices)
    times = [c.step_time for c in result.candidates]
    assert times == sorted(times) and result.winner is result.candidates[0]


def test_megatron_at_pp_2_refuses_batched_interleaving_as_megatron_lm_does():
    result = framework_plan("megatron", source, 2, 8, layers=32)
    batched = next(c for c in result.candidates if c.options.get("overlap_p2p_comm") is False)
    assert batched.status == "refused" and "should be greater than 2" in batched.reason
    overlap = next(c for c in result.candidates if c.options.get("overlap_p2p_comm") is True)
    assert overlap.status == "fits"


def test_a_framework_schedule_is_judged_with_the_frameworks_semantics():
    """megatron-core's batched interleaved loop at PP = 2 crosses its messages (SV504) on its
    own loop: the candidate is said to hang, whatever its time."""
    c = evaluate(megatron.schedule(2, 2, 8), uniform(4), None, name="megatron-interleaved", options={})
    assert c.status == "hangs" and "SV504" in c.reason and "megatron-core 0.19.2" in c.reason


@settings(max_examples=15, deadline=None)
@given(D=st.integers(2, 5), M=st.integers(1, 10), limit=st.sampled_from([None, 6 * GiB, 10 * GiB, 20 * GiB]))
def test_the_winner_is_the_fastest_that_fits(D, M, limit):
    result = framework_plan("megatron", source, D, M, memory_limit=limit, chunks=(2,))  # 1F1B runs any M
    for c in result.candidates:  # megatron-core: group size PP in [PP, M], M % PP 0 or >= PP (so 0);
        refused = c.name == "megatron-interleaved" and (  # Megatron-LM: batched interleaving needs PP > 2
            M < D or M % D != 0 or (not c.options["overlap_p2p_comm"] and D <= 2))
        assert (c.status == "refused") == refused, c
    fits = [c for c in result.candidates if c.fits]
    for c in fits:
        assert limit is None or c.peak <= limit
    if fits:
        assert result.winner.step_time == min(c.step_time for c in fits)
    for c in result.candidates:
        if c.status == "over memory":
            assert limit is not None and c.peak > limit


def test_megatron_refusals_are_usage_errors_in_its_words():
    with pytest.raises(UsageError, match="num_layers 30 is not divisible by pp 4"):
        framework_plan("megatron", source, 4, 8, layers=30)
    with pytest.raises(UsageError, match=r"pp \(pipeline_model_parallel_size\)"):
        framework_plan("megatron", source, 1, 8)
    with pytest.raises(UsageError, match="--families"):
        framework_plan("megatron", source, 4, 8, families=["1f1b"])
    with pytest.raises(UsageError, match="expected one of megatron, deepspeed, torchtitan"):
        framework_plan("colossalai", source, 4, 8)


def test_megatron_arguments_are_megatron_lms():
    result = framework_plan("megatron", source, 4, 8, chunks=(2,), layers=32)
    by = {(c.options.get("vpp", 1), c.options.get("overlap_p2p_comm")): c for c in result.candidates}
    (line, more) = arguments("megatron", by[(2, True)], microbatches=8, layers=32)
    assert line == ("megatron: --num-layers 32 --pipeline-model-parallel-size 4 "
                    "--num-layers-per-virtual-pipeline-stage 4 --microbatch-group-size-per-vp-stage 4")
    assert "num_microbatches = 8" in more
    (line, _) = arguments("megatron", by[(2, False)], microbatches=8, layers=None)
    assert line == ("megatron: --pipeline-model-parallel-size 4 --num-virtual-stages-per-pipeline-rank 2 "
                    "--microbatch-group-size-per-vp-stage 4 --no-overlap-p2p-communication")
    (line, _) = arguments("megatron", by[(1, None)], microbatches=8)
    assert line == "megatron: --pipeline-model-parallel-size 4"


def test_deepspeed_runs_its_train_schedule_only():
    result = framework_plan("deepspeed", source, 4, 6)
    (c,) = result.candidates
    assert c.schedule == deepspeed.schedule(4, 6) and c.fits
    (line,) = arguments("deepspeed", c, microbatches=6)
    assert "PipelineModule(layers=..., num_stages=4)" in line and "gradient_accumulation_steps = 6" in line


def test_pytorchs_receive_buffers_are_not_a_frameworks():
    with_recv = framework_plan("deepspeed", lambda s, split: uniform(s, recv=GiB), 4, 6).candidates[0]
    without = framework_plan("deepspeed", source, 4, 6).candidates[0]
    assert with_recv.peak_memory == without.peak_memory


def test_torchtitan_ranks_only_what_it_builds_on_a_release_that_runs_it():
    result = framework_plan("torchtitan", source, 4, 8, search_time=None, torch="2.14")
    names = {c.name for c in result.candidates}
    assert "1f1b" in names and not {"dualpipe", "chimera"} & names  # two routes: a stage on two ranks
    assert all(c.status != "cannot run" for c in result.candidates)
    lines = arguments("torchtitan", result.winner, microbatches=8, written="w.csv")
    assert "--parallelism.pipeline_parallel_schedule_csv w.csv" in lines[0]
    assert "--training.disable_cuda_graphs" in lines[1]
    with pytest.raises(UsageError, match=r"PyTorch 2.13 \(as asked\) does not take .*--torch 2.14 or later"):
        framework_plan("torchtitan", source, 4, 8, search_time=None, torch="2.13")


def test_cli_plan_framework_writes_what_it_ran(tmp_path):
    prof = tmp_path / "p.json"
    from schedverify.plan.profile import dump_profile

    dump_profile(uniform(4), prof)
    out_json = tmp_path / "m.json"
    code, out, err = cli("plan", "--profile", str(prof), "--devices", "4", "--microbatches", "8",
                         "--framework", "megatron", "--chunks", "1", "-o", str(out_json))
    assert code == 0, err
    assert "winner: megatron-1f1b" in out and "megatron: --pipeline-model-parallel-size 4" in out
    assert sv.io.load(out_json) == megatron.schedule(4, 1, 8)
    assert sv.check(sv.io.load(out_json)).is_valid
    code, _, err = cli("plan", "--profile", str(prof), "--devices", "4", "--microbatches", "8",
                       "--framework", "megatron", "-o", str(tmp_path / "m.csv"))
    assert code == 2 and "name the output FILE.json" in err
    code, out, _ = cli("plan", "--profile", str(prof), "--devices", "4", "--microbatches", "8",
                       "--framework", "deepspeed", "--format", "json")
    doc = json.loads(out)
    assert code == 0 and doc["framework"] == "deepspeed" and doc["winner"] == "deepspeed-train-schedule"
    assert "gradient_accumulation_steps = 8" in doc["arguments"][0]


def test_cli_plan_framework_gives_the_winners_memory_in_the_frameworks_terms(tmp_path):
    from pathlib import Path

    from schedverify.frameworks.memory import memory
    from schedverify.plan.transformer import load_model, stage_activations

    prof = tmp_path / "p.json"
    from schedverify.plan.profile import dump_profile

    dump_profile(uniform(4), prof)
    code, out, _ = cli("plan", "--profile", str(prof), "--devices", "4", "--microbatches", "8",
                       "--framework", "megatron", "--chunks", "1")
    assert code == 0 and "      rank 0: output_tensors 4, input_tensors 4\n" in out
    assert "activations" not in out.split("winner:")[1].split("note:")[0]  # no model: counts only
    model_file = Path(__file__).parent.parent / "examples" / "llama3-8b.toml"
    code, out, _ = cli("plan", "--model", str(model_file), "--devices", "4", "--microbatches", "8",
                       "--framework", "deepspeed", "--memory-limit", "1TiB", "--format", "json")
    doc = json.loads(out)
    assert code == 0 and doc["framework_memory"]["runs"] == "TrainSchedule"
    model = load_model(model_file)[0]
    act = stage_activations(model, 4)
    assert [d["activation_bytes"] for d in doc["framework_memory"]["devices"]] == [(4 - s) * act[s] for s in range(4)]
    assert doc["framework_memory"] == memory(deepspeed.schedule(4, 8), model).to_json()
