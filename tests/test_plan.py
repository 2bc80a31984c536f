"""The planner: every family and the search's optimum ranked under real costs (seconds) and a
memory limit (bytes), the winner exported as the CSV torchtitan runs, checked first; and the
``schedverify plan`` command around it."""

from __future__ import annotations

import io
import json
import math
import re

import pytest
from hypothesis import given, settings, strategies as st

import schedverify as sv
from schedverify.cli import run
from schedverify.errors import SchedverifyError, UsageError
from schedverify.lowering import torch_lowering
from schedverify.plan import planner, torchtitan
from schedverify.plan.stages import StageProfile
from schedverify.plan.profile import dump_profile

GiB = 2**30


def uniform(stages: int, *, F=0.010, I=0.010, W=0.008, act=GiB // 2, static=GiB // 4, w=0.5, comm=2e-4,
            layers: int = 32) -> StageProfile:
    """A model of ``layers`` equal layers cut into ``stages`` stages (times and bytes scale)."""
    k = layers / stages
    return StageProfile(F=(F * k,) * stages, I=(I * k,) * stages, W=(W * k,) * stages,
                        activation=(int(act * k),) * stages, w=w, static=(int(static * k),) * stages,
                        comm=comm, source=f"{layers} equal layers")


def model(stages: int, split: bool) -> StageProfile:
    return uniform(stages)


def _cli(*argv):
    out, err = io.StringIO(), io.StringIO()
    code = run(list(argv), out, err)
    return code, out.getvalue(), err.getvalue()


# --------------------------------------------------------------------------- the library


def test_rows_agree_with_the_checker_and_are_ranked():
    p = planner.plan(model, 4, 16, memory_limit=40 * GiB, search_time=None)
    fits = [c for c in p.candidates if c.fits]
    assert fits and p.winner is fits[0]
    assert [c.step_time for c in fits] == sorted(c.step_time for c in fits)
    for c in p.candidates:
        if c.schedule is None:
            continue
        costs, memory = planner.quantized(c.profile, None)
        m = sv.check(c.schedule, costs=costs, memory=memory).metrics
        assert c.step_time == pytest.approx(m.makespan * planner.TIME_QUANTUM)
        assert c.peak_memory == tuple(math.ceil(d.peak_memory) for d in m.devices)
        if c.status == "over memory":
            assert c.peak > 40 * GiB
        elif c.fits:
            assert c.peak <= 40 * GiB


def test_refusals_say_why():
    p = planner.plan(model, 4, 6, memory_limit=40 * GiB, search_time=None)
    by = {c.label: c for c in p.candidates}
    assert by["dualpipe"].status == "refused" and "at least 2 x devices = 8" in by["dualpipe"].reason
    assert by["chimera"].status == "refused" and "multiple of" in by["chimera"].reason
    assert "interleaved-1f1b (chunks=2)" in by
    # a measured profile fixes the number of stages
    fixed = planner.plan(uniform(4), 4, 8, memory_limit=None, search_time=None)
    v = {c.label: c for c in fixed.candidates}["zb-v"]
    assert v.status == "refused" and "has 4 stages; this schedule needs 8" in v.reason


def test_nothing_fits_a_tiny_limit():
    p = planner.plan(model, 4, 8, memory_limit=GiB, search_time=None)
    assert p.winner is None
    assert all(c.status != "fits" for c in p.candidates)


def test_bidirectional_schedules_cannot_run_on_torchtitan():
    p = planner.plan(model, 4, 8, memory_limit=None, families=["dualpipe", "chimera"], search_time=None)
    assert {c.status for c in p.candidates} == {"cannot run"}
    assert p.winner is None


def test_unknown_family_is_a_usage_error_with_a_hint():
    with pytest.raises(UsageError, match="did you mean '1f1b'"):
        planner.plan(model, 4, 8, families=["1fb1"], search_time=None)


@settings(max_examples=15, deadline=None)
@given(st.integers(2, 4), st.integers(1, 12), st.floats(0.001, 0.05), st.floats(0.001, 0.05),
       st.floats(0.001, 0.05), st.floats(0.0, 1.0))
def test_every_fitting_winner_runs_as_torchtitan_lowers_it(p_, m, f, i, w, share):
    def src(stages, split):
        return uniform(stages, F=f, I=i, W=w, w=share)

    result = planner.plan(src, p_, m, memory_limit=None, search_time=None)
    win = result.winner
    assert win is not None  # 1F1B always runs
    for c in result.candidates:
        if c.fits:
            costs, memory = planner.quantized(c.profile, None)
            assert sv.check(torch_lowering(c.schedule), costs=costs, memory=memory,
                            comm_semantics="torch-nccl").is_valid
            assert c.step_time >= win.step_time


def test_search_is_no_worse_than_the_best_family_of_its_shape_at_8x32():
    """The issue's size: 8 devices, 32 microbatches, the Llama 3 8B example's costs."""
    from schedverify.plan.sources import from_model

    source = from_model("examples/llama3-8b.toml")
    p = planner.plan(source.stages, 8, 32, memory_limit=source.memory_limit, search_time=10)
    by = {c.label: c for c in p.candidates}
    shapes = {"search (placement=loop)": ("gpipe", "1f1b", "zb-h1", "zb-h2"),
              "search (placement=v, chunks=2)": ("zb-v", "v-half", "v-min")}
    for label, families in shapes.items():
        found = by[label]
        best = min((by[f].step_time for f in families if by[f].fits), default=None)
        assert found.fits, found.reason
        assert best is None or found.step_time <= best + 1e-9, (label, found.step_time, best)
        assert found.search["status"] in ("optimal", "feasible")
        if found.search["status"] == "feasible":
            assert found.search["gap_s"] is not None


def test_export_writes_a_csv_that_reads_back_and_runs(tmp_path):
    p = planner.plan(model, 4, 8, memory_limit=40 * GiB, search_time=None)
    path = tmp_path / "plan.csv"
    back = torchtitan.export(p.winner, str(path))
    again = sv.io.load(path, devices=4, stages=back.stages, microbatches=8, placement=p.winner.placement)
    assert again.order == back.order
    assert sv.check(torch_lowering(again), comm_semantics="torch-nccl").is_valid
    from schedverify.lint import lint, torchtitan_schedule

    cls = torchtitan_schedule(p.winner.placement, back.stages // 4)
    assert not [f for f in lint(again, "torchtitan", pipeline_schedule=cls) if f.severity == "error"]
    assert cls in torchtitan.flags(p.winner, str(path))


def test_export_refuses_a_candidate_without_a_runnable_schedule(tmp_path):
    p = planner.plan(model, 4, 8, memory_limit=None, families=["dualpipe"], search_time=None)
    path = tmp_path / "plan.csv"
    path.write_text("keep me")
    (c,) = p.candidates
    with pytest.raises(SchedverifyError):
        torchtitan.export(c, str(path))
    assert path.read_text() == "keep me"


def test_plan_displays_itself_in_a_notebook():
    import xml.etree.ElementTree as ET

    p = planner.plan(model, 4, 8, memory_limit=40 * GiB, search_time=None)
    html = p._repr_html_()
    ET.fromstring(html)  # well-formed
    assert html.count("<tr>") >= len(p.candidates) + 1
    assert p.winner.label in html


# --------------------------------------------------------------------------- the command


@pytest.fixture
def profile_csv(tmp_path):
    path = tmp_path / "profile.csv"
    dump_profile(uniform(4), path)
    return path


def test_cli_plan_from_a_profile_writes_the_winner(tmp_path, profile_csv):
    out_csv = tmp_path / "winner.csv"
    code, out, err = _cli("plan", "--profile", str(profile_csv), "--devices", "4", "--microbatches", "8",
                          "--memory-limit", "40GiB", "--search-time", "2", "-o", str(out_csv))
    assert code == 0, err
    assert "rank  schedule" in out and "winner:" in out
    assert re.search(r"winner: .*: [0-9.]+ (ms|s) per step, peak [0-9.]+ GiB", out)
    assert "--parallelism.pipeline_parallel_schedule_csv " + str(out_csv) in out
    schedule = sv.io.load(out_csv, devices=4, stages=4, microbatches=8)
    assert sv.check(torch_lowering(schedule), comm_semantics="torch-nccl").is_valid


def test_cli_plan_json(profile_csv):
    code, out, _ = _cli("plan", "--profile", str(profile_csv), "--devices", "4", "--microbatches", "8",
                        "--search-time", "0", "--format", "json")
    doc = json.loads(out)
    assert code == 0 and doc["winner"] == doc["candidates"][0]["name"]
    assert doc["memory_limit_bytes"] is None
    assert all("step_time_s" in c and "peak_memory_bytes" in c for c in doc["candidates"])


def test_cli_plan_exit_1_when_nothing_fits(profile_csv, tmp_path):
    out_csv = tmp_path / "none.csv"
    code, out, _ = _cli("plan", "--profile", str(profile_csv), "--devices", "4", "--microbatches", "8",
                        "--memory-limit", "1GiB", "--search-time", "0", "-o", str(out_csv))
    assert code == 1 and "no schedule fits" in out and not out_csv.exists()


@pytest.mark.parametrize("argv, message", [
    (["--memory-limit", "75%"], "no device was named"),
    (["--memory-limit", "80GiBs"], "unknown unit 'GiBs'"),
    (["--device", "H100-SMX"], "did you mean"),
    (["-o", "out.json"], "torchtitan reads a .csv file"),
    (["--families", "1fb1"], "did you mean '1f1b'"),
    (["--search-time", "nan"], "expected a finite number >= 0"),
    (["--devices", "0"], "must be at least 1"),
])
def test_cli_plan_bad_input_is_named(profile_csv, argv, message):
    code, _, err = _cli("plan", "--profile", str(profile_csv), "--devices", "4", "--microbatches", "8",
                        "--search-time", "0", *argv)
    assert code == 2 and message in err and "Traceback" not in err


def test_cli_plan_needs_one_source_and_microbatches(profile_csv):
    code, _, err = _cli("plan", "--devices", "4", "--microbatches", "8")
    assert code == 2 and "--model" in err
    code, _, err = _cli("plan", "--profile", str(profile_csv), "--devices", "4")
    assert code == 2 and "--microbatches" in err


def test_cli_plan_from_the_8b_example_refuses_what_does_not_fit():
    # On 4 devices, 1F1B fits under the paper's count and not under what CUDA's autograd keeps
    # (four SwiGLU tensors, not three) on PyTorch 2.13, whose receive buffers (one per
    # microbatch and direction, 4 GiB here) and pending sends (every one until the step's end)
    # take even V-Min over; 2.15 allocates each receive buffer when it receives and frees each
    # sent activation at its wait: 1F1B and V-Min fit there.
    def rows(*extra, fits=True):
        code, out, _ = _cli("plan", "--model", "examples/llama3-8b.toml", "--devices", "4", "--search-time", "0",
                            *extra)
        assert code == (0 if fits else 1) and ("peak memory per device: 0:" in out) == fits, out
        return {line.split()[1]: line for line in out.splitlines()[2:] if line.startswith("  ") and
                len(line.split()) > 2 and line.split()[0] in "-0123456789"}

    cuda = rows("--torch", "2.15")
    assert "over memory" in cuda["gpipe"]
    assert [name for name, line in cuda.items() if line.rstrip().endswith("fits")] == ["1f1b", "v-min"]
    old, paper = rows("--torch", "2.13", fits=False), rows("--torch", "2.13", "--backend", "paper")
    assert "over memory" in old["v-min"] and "over memory" in old["1f1b"] and "fits" in paper["1f1b"]


def test_cli_plan_formulas_print_the_models_expressions_and_values():
    code, out, _ = _cli("plan", "--model", "examples/llama3-8b.toml", "--formulas", "--format", "json")
    assert code == 0
    rows = {r["name"]: r for r in json.loads(out)["formulas"]}
    # Llama 3 8B: 32 layers, embedding and LM head of 128256 x 4096 each, a final norm
    assert 32 * rows["params"]["value"] + 2 * 128256 * 4096 + 4096 == 8_030_261_248
    assert rows["boundary"]["value"] == 8192 * 4096 * 2  # one bf16 activation, s x h
    assert rows["W"]["unit"] == "FLOPs" and "s" in rows["F"]["expression"]
    code, out, _ = _cli("plan", "--model", "examples/llama3-8b.toml", "--formulas")
    assert code == 0 and "activation = " in out and " bytes" in out
    code, _, err = _cli("plan", "--profile", "x.csv", "--formulas")
    assert code == 2 and "give --model" in err


def test_cli_plan_never_writes_onto_its_input(profile_csv):
    before = profile_csv.read_bytes()
    code, _, err = _cli("plan", "--profile", str(profile_csv), "--devices", "4", "--microbatches", "8",
                        "--search-time", "0", "-o", str(profile_csv))
    assert code == 2 and "is the input file" in err
    assert profile_csv.read_bytes() == before


# --------------------------------------------------------------------------- sizes and inputs
# The library and the command line say the same thing about the same question.

EXAMPLES = __import__("pathlib").Path(__file__).resolve().parent.parent / "examples"


def test_search_time_0_skips_the_search_in_the_library_as_on_the_command_line():
    skipped = planner.plan(model, 4, 8, memory_limit=None, families=["1f1b"], search_time=0)
    assert skipped == planner.plan(model, 4, 8, memory_limit=None, families=["1f1b"], search_time=None)
    assert [c.name for c in skipped.candidates] == ["1f1b"]
    code, out, err = _cli("plan", "--model", str(EXAMPLES / "llama3-8b.toml"), "--devices", "4",
                          "--families", "1f1b", "--search-time", "0", "--format", "json")
    assert code in (0, 1), err  # fits or not: 8B on 4 devices is near the limit
    assert [c["name"] for c in json.loads(out)["candidates"]] == ["1f1b"]
    for bad in (-1, float("nan"), "10", True):
        with pytest.raises(UsageError, match="search_time must be a number of seconds >= 0"):
            planner.plan(model, 4, 8, families=["1f1b"], search_time=bad)


@pytest.mark.parametrize("argv, reason", [
    (["--devices", "33", "--search-time", "0"],
     "no schedule can be built for 33 devices and 32 microbatches: cannot cut 32 layers into 33 "
     "layer-holding stages: each stage needs at least one layer (gpipe, 1f1b, "),
    (["--devices", "33"], "cannot cut 32 layers into 33 layer-holding stages"),  # the search too
    (["--devices", "100000000"], "100,000,000 devices is over the cap of 100,000 (set SCHEDVERIFY_MAX_DEVICES"),
])
def test_sizes_no_schedule_can_have_are_a_usage_error_naming_why(argv, reason):
    code, out, err = _cli("plan", "--model", str(EXAMPLES / "llama3-8b.toml"), *argv)
    assert code == 2 and out == ""
    assert err.startswith("schedverify plan: error: plan: ") and reason in err, err
    assert "memory limit" not in err and "Traceback" not in err


def test_a_plan_where_every_family_is_refused_is_a_usage_error_in_the_library_too():
    with pytest.raises(UsageError, match=r"no schedule can be built for 3 devices and 8 microbatches: needs an even number of devices.* \(dualpipe, chimera\)$"):
        planner.plan(model, 3, 8, memory_limit=None, families=["dualpipe", "chimera"], search_time=None)


@pytest.mark.parametrize("option", ["--model", "--profile", "--calibration"])
def test_a_missing_file_or_a_directory_is_named_in_checks_words(tmp_path, option):
    check_missing = _cli("check", str(tmp_path / "nosuch.json"))[2]
    assert check_missing.endswith("nosuch.json: no such file\n"), check_missing
    argv = ["--devices", "4", "--search-time", "0"]
    if option == "--calibration":
        argv = ["--model", str(EXAMPLES / "llama3-8b.toml"), *argv]
    missing = tmp_path / ("nosuch.json" if option == "--calibration" else "nosuch.toml")
    code, out, err = _cli("plan", option, str(missing), *argv)
    assert (code, out, err) == (2, "", f"schedverify plan: error: {missing}: no such file\n")
    folder = tmp_path / ("folder.json" if option == "--calibration" else "folder")
    folder.mkdir()
    code, out, err = _cli("plan", option, str(folder), *argv)
    assert code == 2 and out == "" and err.startswith(f"schedverify plan: error: {folder}: is a directory, not a "), err
    assert "Errno" not in err
