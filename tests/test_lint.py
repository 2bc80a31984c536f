"""``schedverify lint`` and PyTorch's grammar before 2.6.

Each rule fires on a minimal schedule and not on a clean one; the families at sizes
PyTorch's classes take get no finding; a file rewritten in the old grammar reads back as the
same schedule; the grammar hint shows where the old grammar misleads; and the messages that
quote PyTorch are checked against PyTorch 2.13 itself (the torch tier at the bottom).
"""

from __future__ import annotations

import io
import json
import re
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import schedverify as sv
from schedverify import InputError, UsageError
from schedverify.cli import run
from schedverify.generators import FAMILIES, generate
from schedverify.io import dumps_csv, load, loads_csv
from schedverify.io.actions import GRAMMARS, LEGACY_HINT
from schedverify.lint import LINT_CODES, TARGETS, Finding, lint, lint_file, looks_legacy

ROOT = Path(__file__).resolve().parent.parent
LEGACY_EXAMPLE = ROOT / "examples" / "legacy_grammar.csv"


def codes(findings: list[Finding]) -> list[str]:
    return [f.code.code for f in findings]


def to_legacy(modern_csv: str) -> str:
    """Today's CSV in PyTorch's grammar before 2.6: I was B, B was BW."""
    text = re.sub(r"(?<=\d)B(?=\d)", "BW", modern_csv)
    return re.sub(r"(?<=\d)I(?=\d)", "B", text)


def cli(*argv: str, stdin: str | None = None) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    old = sys.stdin
    if stdin is not None:
        sys.stdin = io.StringIO(stdin)
    try:
        code = run(list(argv), out, err)
    finally:
        sys.stdin = old
    return code, out.getvalue(), err.getvalue()


# ------------------------------------------------------------------ the old grammar

def test_legacy_b_is_input_gradient_when_the_file_has_w_and_bw_is_full_backward():
    s = loads_csv("0F0,0F1,0B0,0W0,0BW1\n", grammar="torch-legacy")
    assert [str(a) for a in s.order[0]] == ["0F0", "0F1", "0I0", "0W0", "0B1"]


def test_legacy_b_without_any_w_is_the_full_backward():
    # PyTorch 2.4's 1F1B wrote F and B only, B meaning the whole backward (use_full_backward)
    s = loads_csv("0F0,0B0\n1F0,1B0\n", grammar="torch-legacy")
    assert s == loads_csv("0F0,0B0\n1F0,1B0\n")


@pytest.mark.parametrize("family,devices,microbatches,options", [
    ("zb-h1", 3, 6, {}), ("zb-h2", 4, 8, {}), ("zb-v", 2, 4, {}), ("1f1b", 4, 6, {}),
    ("interleaved-1f1b", 2, 4, {"chunks": 2}), ("v-half", 2, 4, {}), ("gpipe", 3, 3, {}),
])
def test_legacy_rewrite_reads_back_as_the_same_schedule(family, devices, microbatches, options):
    modern = generate(family, devices, microbatches, **options)
    text = dumps_csv(modern)
    legacy = to_legacy(text)
    assert legacy != text or "B" not in text.replace("SEND_B", "").replace("RECV_B", "")
    assert loads_csv(legacy, grammar="torch-legacy") == loads_csv(text)


def test_legacy_rewrite_of_a_lowered_file_keeps_the_comms():
    lowered = sv.io.loads_csv(Path(ROOT / "examples" / "pytorch_interleaved_1f1b_comms.csv").read_text())
    text = dumps_csv(lowered)
    assert "SEND_F" in text
    assert loads_csv(to_legacy(text), grammar="torch-legacy") == loads_csv(text)


@given(st.sampled_from(["zb-h1", "zb-h2", "zb-v", "v-half", "v-min", "1f1b", "gpipe"]),
       st.integers(1, 4), st.integers(1, 8))
def test_legacy_round_trip_property(family, devices, microbatches):
    try:
        modern = generate(family, devices, microbatches)
    except UsageError:
        return
    text = dumps_csv(modern)
    assert loads_csv(to_legacy(text), grammar="torch-legacy") == loads_csv(text)


def test_legacy_example_is_zb_h1_in_the_old_grammar():
    text = LEGACY_EXAMPLE.read_text()
    assert "I" not in text and "BW" not in text and "W" in text
    s = load(LEGACY_EXAMPLE, grammar="torch-legacy")
    assert s == loads_csv(dumps_csv(generate("zb-h1", 3, 6)))
    assert sv.check(s).is_valid


@pytest.mark.parametrize("cell,says", [
    ("0I0", "I (input gradient) is today's grammar"),
    ("(0F1;0B0)OVERLAP_F_B", "OVERLAP_F_B was added to PyTorch after 2.6"),
    ("0SEND_F1_1RECV_B0", "a batched send and receive"),
])
def test_legacy_refuses_what_the_old_grammar_did_not_have(cell, says):
    with pytest.raises(InputError) as e:
        loads_csv(f'0F0,"{cell}"\n', "old.csv", grammar="torch-legacy")
    assert says in str(e.value) and "old.csv: row 1, column 2" in str(e.value)


def test_legacy_backward_without_microbatch_names_the_cell():
    with pytest.raises(InputError, match=r"row 1, column 2: BW needs a microbatch index, as in '0BW0': '0BW'"):
        loads_csv("0F0,0BW\n", grammar="torch-legacy")


def test_unknown_grammar_is_a_usage_error():
    with pytest.raises(UsageError, match="grammar must be one of 'torch', 'torch-legacy', got 'torch-2.4'"):
        loads_csv("0F0,0B0\n", grammar="torch-2.4")
    assert GRAMMARS == ("torch", "torch-legacy")


# ------------------------------------------------------------------ the hint

def test_bw_in_the_default_grammar_names_the_old_grammar():
    with pytest.raises(InputError) as e:
        loads_csv("0F0,0BW0\n", "old.csv")
    assert str(e.value) == f"old.csv: row 1, column 2: unknown action type 'BW' in '0BW0': {LEGACY_HINT}"


def test_many_bw_cells_give_the_hint_once():
    with pytest.raises(InputError) as e:
        loads_csv("0F0,0F1,0BW0,0BW1\n", "old.csv")
    text = str(e.value)
    assert text.count(LEGACY_HINT) == 1 and text.endswith(LEGACY_HINT)
    assert "row 1, column 3: unknown action type 'BW' in '0BW0'" in text


def test_looks_legacy_finds_b_and_w_without_i():
    assert looks_legacy(loads_csv(LEGACY_EXAMPLE.read_text())) == (0, 0)
    assert looks_legacy(load(LEGACY_EXAMPLE, grammar="torch-legacy")) is None
    assert looks_legacy(loads_csv("0F0,0B0\n")) is None  # B alone is today's full backward


def test_check_cli_hints_at_the_old_grammar_for_b_and_w_without_i():
    code, out, _ = cli("check", str(LEGACY_EXAMPLE))
    assert code == 1 and "SV203" in out
    assert f"warning: stage 0, microbatch 0 has 0B0 and 0W0 but no 0I0: {LEGACY_HINT}" in out
    code, out, _ = cli("check", "--format", "json", str(LEGACY_EXAMPLE))
    assert any(LEGACY_HINT in w for w in json.loads(out)["warnings"])


def test_check_cli_reads_the_old_grammar():
    code, out, _ = cli("check", "--grammar", "torch-legacy", str(LEGACY_EXAMPLE))
    assert code == 0 and "VALID" in out and LEGACY_HINT not in out


def test_check_cli_bw_is_an_input_error_with_the_hint():
    code, out, err = cli("check", "-", stdin="0F0,0BW0\n")
    assert code == 2 and LEGACY_HINT in err


def test_no_hint_on_an_ordinary_invalid_schedule():
    code, out, _ = cli("check", "-", stdin="0F0,0I0\n")  # W missing: not the old grammar
    assert code == 1 and LEGACY_HINT not in out


# ------------------------------------------------------------------ each rule fires

def csv(text: str, **options) -> sv.Schedule:
    return loads_csv(text, **options)


def test_sv701_pytorch_1f1b_with_fewer_microbatches_than_stages():
    s = generate("1f1b", 4, 3)
    assert codes(lint(s, "pytorch")) == ["SV701"]
    assert codes(lint(generate("1f1b", 4, 4), "pytorch")) == []
    assert codes(lint(generate("gpipe", 4, 3), "pytorch")) == []  # ScheduleGPipe has no such rule


def test_sv701_torchtitan_is_a_warning_with_the_batch_fix():
    (f,) = lint(generate("1f1b", 4, 3), "torchtitan")
    assert f.code.code == "SV701" and f.severity == "warning" and f.rule == "too-few-microbatches"
    assert "3 microbatches for 4 stages" in f.message and "local_batch_size" in f.fix


def test_sv702_pytorch_interleaved_rounds():
    s = generate("interleaved-1f1b", 2, 5, group_size=5)  # Megatron takes it; PyTorch: 5 % 2 rounds
    (f,) = lint(s, "pytorch")
    assert f.code.code == "SV702" and "max(1, 5 // 2) = 2 rounds" in f.message
    assert "such as 4" in f.fix or "such as 6" in f.fix
    assert codes(lint(generate("interleaved-1f1b", 2, 6), "pytorch")) == []


def test_sv703_pytorch_class_takes_other_stages_per_rank():
    s = generate("interleaved-1f1b", 2, 4)  # 2 stages per rank
    assert codes(lint(s, "pytorch", pipeline_schedule="1f1b")) == ["SV703"]
    assert codes(lint(generate("looped-bfs", 2, 4, chunks=3), "pytorch",
                      pipeline_schedule="ZBVZeroBubble")) == ["SV703"]
    assert codes(lint(generate("zb-v", 2, 4), "pytorch", pipeline_schedule="zbvzerobubble")) == []


def test_sv704_a_stage_on_two_ranks():
    s = generate("dualpipe", 2, 4)
    (f,) = lint(s, "pytorch")
    assert f.code.code == "SV704" and "Stage 0 is assigned to both rank 1 and rank 0" in f.message
    assert codes(lint(s, "torchtitan")) == ["SV704"]


def test_sv705_torchtitan_builds_stages_by_the_schedule_name():
    zbv = generate("zb-v", 2, 4)
    (f,) = lint(zbv, "torchtitan")  # default pipeline_parallel_schedule 1F1B: one stage per rank
    assert f.code.code == "SV705" and "ZBVZeroBubble" in f.fix
    (f,) = lint(zbv, "torchtitan", pipeline_schedule="Interleaved1F1B")  # loop, 2 per rank
    assert "the CSV runs stage 2 on rank 1, but with pipeline_parallel_schedule=Interleaved1F1B " \
           "torchtitan builds it on rank 0" in f.message
    assert lint(zbv, "torchtitan", pipeline_schedule="ZBVZeroBubble") == []
    assert lint(zbv, "torchtitan", pipeline_schedule="DualPipeV") == []
    inter = generate("interleaved-1f1b", 2, 4)
    (f,) = lint(inter, "torchtitan", pipeline_schedule="ZBVZeroBubble")
    assert "stage 2 on rank 0" in f.message and "Interleaved1F1B" in f.fix
    assert lint(inter, "torchtitan", pipeline_schedule="Interleaved1F1B") == []


def only(findings: list[Finding], code: str) -> Finding:
    (f,) = [f for f in findings if f.code.code == code]
    return f


def test_sv705_torchtitan_neither_loop_nor_v():
    s = csv("0F0,1F0,1B0,0B0\n2F0,2B0\n", devices=2, stages=3)  # stages 0 and 1 on rank 0
    f = only(lint(s, "torchtitan"), "SV705")
    assert "'num_stages 3 must be evenly divisible by pp_degree 2'" in f.message
    s = csv("0F0,1F0,1B0,0B0\n2F0,3F0,3B0,2B0\n")  # stages 0, 1 on rank 0: a custom placement
    f = only(lint(s, "torchtitan", pipeline_schedule="Interleaved1F1B"), "SV705")
    assert "stage 1 on rank 0" in f.message and "only the 'loop' and 'v' placements" in f.fix


def test_sv705_more_than_two_stages_per_rank_is_a_warning():
    f = only(lint(generate("looped-bfs", 2, 6, chunks=3), "torchtitan", pipeline_schedule="LoopedBFS"),
             "SV705")
    assert f.code.code == "SV705" and f.severity == "warning"
    assert "pipeline_parallel_layers_per_stage" in f.fix


def test_sv706_legacy_grammar_as_read_and_as_written():
    legacy = LEGACY_EXAMPLE.read_text()
    (f,) = lint(loads_csv(legacy), "pytorch")  # read as today's grammar: B and W without I
    assert f.code.code == "SV706" and LEGACY_HINT in f.message
    (f,) = lint(loads_csv(legacy, grammar="torch-legacy"), "torchtitan", grammar="torch-legacy")
    assert f.code.code == "SV706" and "misreads" in f.message
    assert lint(loads_csv(legacy, grammar="torch-legacy"), "torchtitan") == []


def test_sv707_torchtitan_wants_a_compute_only_csv():
    s = loads_csv((ROOT / "examples" / "pytorch_interleaved_1f1b_comms.csv").read_text())
    found = codes(lint(s, "torchtitan", pipeline_schedule="Interleaved1F1B"))
    assert found == ["SV707"]
    assert "SV707" not in codes(lint(s, "pytorch"))  # _load_csv(format="compute_comms") reads it


def test_sv710_megatron_runs_loop_placements_only():
    (f,) = lint(generate("zb-v", 4, 8), "megatron")
    assert f.code.code == "SV710" and "c*PP + d" in f.message
    assert lint(generate("interleaved-1f1b", 4, 8), "megatron") == []


def test_sv711_megatron_group_size_between_pp_and_m():
    s = generate("interleaved-1f1b", 4, 8)
    (f,) = lint(s, "megatron", group_size=3)
    assert f.code.code == "SV711" and "[PP=4 , M=8]" in f.message
    (f,) = lint(generate("looped-bfs", 4, 3), "megatron")  # M < PP: no group size fits
    assert f.code.code == "SV711" and f.fix == "use at least 4 microbatches"


def test_sv712_megatron_group_remainder():
    s = generate("interleaved-1f1b", 4, 8)
    (f,) = lint(s, "megatron", group_size=6)  # 8 % 6 = 2, between 0 and PP = 4
    assert f.code.code == "SV712" and "8 % 6 = 2" in f.message
    assert lint(s, "megatron", group_size=8) == []
    assert lint(s, "megatron", group_size=4) == []


def test_sv713_megatron_layers():
    s = generate("interleaved-1f1b", 4, 8)  # PP = 4, VP = 2
    assert codes(lint(s, "megatron", num_layers=30)) == ["SV713"]  # 30 % 4
    (f,) = lint(s, "megatron", num_layers=36)  # 9 per rank, not split in 2
    assert "9 per pipeline rank" in f.message and "multiple of PP*VP = 8" in f.fix
    assert lint(s, "megatron", num_layers=32) == []
    assert lint(generate("1f1b", 4, 8), "megatron", num_layers=36) == []


# ------------------------------------------------------------------ no false findings

#: Families PyTorch 2.13 cannot run at all: a stage on two ranks (SV704), always.
_BIDIRECTIONAL = {"dualpipe", "chimera"}


@given(st.sampled_from(sorted(FAMILIES)), st.integers(1, 4), st.integers(2, 4))
def test_no_family_gets_a_false_pytorch_finding(family, devices, rounds):
    """At sizes every class takes (M a multiple of D, at least 2D), a generated schedule gets
    no pytorch finding, but the bidirectional ones, which get exactly SV704."""
    try:
        s = generate(family, devices, devices * rounds)
    except UsageError:
        return
    expected = ["SV704"] if family in _BIDIRECTIONAL and devices > 1 else []
    assert codes(lint(s, "pytorch")) == expected


@given(st.integers(1, 4), st.integers(1, 3), st.integers(1, 4))
def test_interleaved_gets_no_megatron_finding_in_megatrons_domain(devices, chunks, rounds):
    s = generate("looped-bfs" if chunks == 1 else "interleaved-1f1b", devices, devices * rounds,
                 chunks=max(chunks, 1))
    assert lint(s, "megatron", num_layers=devices * chunks * 3) == []


def test_sv708_names_the_release_a_comms_csv_is_written_for():
    """A compute+comms CSV in 2.15's dialect (a wait per send and per REDUCE_GRAD), linted for
    2.13, and 2.13's dialect for 2.15 (docs/spec.md 9.7)."""
    from schedverify.lowering import retarget

    s = loads_csv("0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0WAIT_SEND_F0,0RECV_B1,0B1,0WAIT_SEND_F1,0REDUCE_GRAD,"
                  "0WAIT_REDUCE_GRAD\n1RECV_F0,1F0,1B0,1SEND_B0,1RECV_F1,1F1,1B1,1SEND_B1,1REDUCE_GRAD,"
                  "1WAIT_REDUCE_GRAD,1WAIT_SEND_B0,1WAIT_SEND_B1\n")
    (f,) = lint(s, "pytorch", torch="2.13")
    assert f.code.code == "SV708" and "written for PyTorch 2.15, and PyTorch 2.13 (as asked) will run it" in f.message
    assert f.fix == ("rewrite it for 2.13: schedverify lower --torch 2.13 FILE -o out.csv (or lower the compute-only "
                     "schedule for 2.13)")
    assert lint(s, "pytorch", torch="2.15") == []
    assert [x.code.code for x in lint(retarget(s, torch="2.13"), "pytorch", torch="2.15")] == ["SV708"]


def test_every_lint_code_is_tested_and_registered_once():
    here = "".join(p.read_text() for p in Path(__file__).parent.glob("test_lint*.py"))  # test_lint_torchtitan too
    assert {c.upper() for c in re.findall(r"def test_(sv7\d\d)_", here)} == set(LINT_CODES)
    assert len({c.slug for c in LINT_CODES.values()}) == len(LINT_CODES)
    assert set(LINT_CODES).isdisjoint(sv.CODES)


def test_bad_arguments_are_usage_errors():
    s = generate("1f1b", 2, 2)
    with pytest.raises(UsageError, match="target must be one of 'torchtitan', 'megatron', 'pytorch', got 'deepspeed'"):
        lint(s, "deepspeed")
    with pytest.raises(UsageError, match="unknown schedule 'ZB1P'"):
        lint(s, "torchtitan", pipeline_schedule="ZB1P")
    with pytest.raises(UsageError, match="group_size must be a whole number of at least 1, got 0"):
        lint(s, "megatron", group_size=0)
    with pytest.raises(UsageError):
        lint("0F0,0B0", "pytorch")  # type: ignore[arg-type]
    assert TARGETS == ("torchtitan", "megatron", "pytorch")


# ------------------------------------------------------------------ lint_file and the CLI

def test_lint_file_reads_bw_as_the_old_grammar(tmp_path):
    p = tmp_path / "old.csv"
    p.write_text("0F0,0BW0\n")
    s, found = lint_file(p, "pytorch")
    assert str(s.order[0][1]) == "0B0" and codes(found) == ["SV706"]


def test_lint_file_an_f_and_b_file_is_the_same_in_both_grammars(tmp_path):
    p = tmp_path / "old.csv"
    p.write_text("0F0,0F1,0B0,0B1\n")
    assert lint_file(p, "pytorch", grammar="torch-legacy")[1] == []


def test_lint_file_other_input_errors_are_raised(tmp_path):
    p = tmp_path / "bad.csv"
    p.write_text("0F0,0X0\n")
    with pytest.raises(InputError, match="unknown action type 'X'"):
        lint_file(p)


def test_cli_lint_exit_codes_and_text():
    code, out, _ = cli("lint", str(LEGACY_EXAMPLE), "--grammar", "torch-legacy", "--target", "megatron")
    assert code == 0 and out.endswith(": megatron: nothing found (3 ranks, 3 stages, 6 microbatches)\n")
    code, out, _ = cli("lint", str(LEGACY_EXAMPLE))
    assert code == 1 and "1 finding (3 ranks" in out
    assert "SV706 legacy-grammar (error): stage 0, microbatch 0 has 0B0 and 0W0 but no 0I0" in out
    assert "\n  fix: write the file in today's grammar" in out


def test_cli_lint_json():
    code, out, _ = cli("lint", "--format", "json", "--target", "pytorch", "-", stdin="0F0,0BW0\n")
    doc = json.loads(out)
    assert code == 1 and doc["target"] == "pytorch" and doc["file"] == "<stdin>"
    assert [f["code"] for f in doc["findings"]] == ["SV706"]
    assert set(doc["findings"][0]) == {"code", "rule", "severity", "message", "fix"}


def test_cli_lint_options():
    code, out, _ = cli("lint", "-", "--pipeline-schedule", "zbvzerobubble",
                       stdin=dumps_csv(generate("zb-v", 2, 4)))
    assert (code, out.split(": ")[-1]) == (0, "nothing found (2 ranks, 4 stages, 4 microbatches)\n")
    code, out, _ = cli("lint", "-", "--target", "megatron", "--group-size", "3",
                       stdin=dumps_csv(generate("interleaved-1f1b", 4, 8)))
    assert code == 1 and "SV711" in out


def test_cli_lint_bad_input_and_usage():
    code, _, err = cli("lint", "-", stdin="0F0,0X0\n")
    assert code == 2 and "schedverify lint: error: <stdin>: row 1, column 2: unknown action type 'X'" in err
    code, _, err = cli("lint", "-", "--pipeline-schedule", "ZB1P", stdin="0F0,0B0\n")
    assert code == 2 and "invalid choice: 'ZB1P'" in err
    code, _, err = cli("lint")
    assert code == 2 and "give a schedule file" in err
    code, _, err = cli("lint", "-", "--grammar", "torch-2.4", stdin="0F0,0B0\n")
    assert code == 2 and "invalid choice: 'torch-2.4'" in err


def test_cli_lint_list_codes():
    code, out, _ = cli("lint", "--list-codes")
    lines = out.splitlines()
    assert code == 0 and len(lines) == len(LINT_CODES)
    assert lines[0].startswith("SV701 too-few-microbatches [lint: pytorch, torchtitan]: ")


# ------------------------------------------------------------------ against PyTorch 2.13 itself

@pytest.mark.torch
def test_pytorch_misreads_the_old_grammar_as_the_findings_say():
    schedules = pytest.importorskip("torch.distributed.pipelining.schedules")
    A = schedules._Action
    assert repr(A.from_str("0BW0")) == "0B"  # a prefix match: no microbatch
    legacy = {r: [A.from_str(c) for c in row.split(",")]
              for r, row in enumerate(LEGACY_EXAMPLE.read_text().split())}
    with pytest.raises(AssertionError, match="Running Backward Weight for stage 0, microbatch 0 "
                                             "without first running Backward Input"):
        schedules._validate_schedule(legacy, 3, 3, 6)
    modern = dumps_csv(load(LEGACY_EXAMPLE, grammar="torch-legacy"))
    actions = {r: [A.from_str(c) for c in row.split(",")] for r, row in enumerate(modern.split())}
    assert schedules._validate_schedule(actions, 3, 3, 6) == {0: 0, 1: 1, 2: 2}


@pytest.mark.torch
def test_pytorch_refuses_a_stage_on_two_ranks_as_sv704_says():
    schedules = pytest.importorskip("torch.distributed.pipelining.schedules")
    s = generate("dualpipe", 2, 4)
    text = dumps_csv(s)
    actions = {r: [schedules._Action.from_str(c) if c else None for c in row.split(",")]
               for r, row in enumerate(text.split())}
    (f,) = lint(s, "pytorch")
    quoted = re.search(r"'(Stage \d+ is assigned to both rank \d+ and rank \d+)'", f.message).group(1)
    with pytest.raises(AssertionError, match=quoted):
        schedules._validate_schedule(actions, 2, s.stages, s.microbatches)


@pytest.mark.torch
@pytest.mark.parametrize("name,per_rank", [
    ("1F1B", 1), ("GPipe", 1), ("Interleaved1F1B", 2), ("Interleaved1F1B", 3),
    ("InterleavedZeroBubble", 2), ("LoopedBFS", 2), ("ZBVZeroBubble", 2), ("DualPipeV", 2),
])
def test_pytorch_target_finds_exactly_what_pytorch_refuses(name, per_rank):
    """Differential: PyTorch 2.13 builds each class (with mock stages, as its visualizer
    does) at every size here; lint's pytorch findings are non-empty exactly when it raises."""
    import warnings

    pytest.importorskip("torch")
    from torch.distributed.pipelining._schedule_visualizer import get_schedule_ops

    v_shaped = name in ("ZBVZeroBubble", "DualPipeV")
    for devices in (2, 3, 4):
        for microbatches in range(1, 13):
            s = (generate("zb-v", devices, microbatches) if v_shaped
                 else generate("looped-bfs", devices, microbatches, chunks=per_rank))
            found = lint(s, "pytorch", pipeline_schedule=name)
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    get_schedule_ops(name, devices, microbatches, num_stages_per_rank=per_rank)
                refused = None
            except ValueError as e:
                refused = str(e)
            assert bool(found) == (refused is not None), (name, devices, microbatches, found, refused)
