"""``schedverify lower``: the lowered file is written whole, runs, and never replaces an input."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest

import schedverify as sv
from schedverify.cli import run

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "pytorch_interleaved_1f1b.csv"


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = run(["lower", *argv], out, err)
    return code, out.getvalue(), err.getvalue()


def test_writes_a_comms_csv_that_runs_at_the_compute_only_makespan(tmp_path):
    target = tmp_path / "comms.csv"
    code, out, err = cli(str(EXAMPLE), "-o", str(target))
    assert (code, err) == (0, "")
    assert out.splitlines()[1:] == [
        "  compute-only             makespan 57",
        "  ours                     makespan 57",
        "  PyTorch's lowering       makespan 70",
        "  PyTorch, defer_pp_recv   hangs on NCCL",
        f"wrote {target}",
    ]
    lowered = sv.load(target)
    assert lowered.has_explicit_comm and lowered.comm_semantics == "torch-nccl"
    report = sv.check(lowered)
    assert report.is_valid and report.metrics.makespan == 57
    assert all(a is not None for row in lowered.order for a in row)  # compute_comms: no idle cells
    assert [p.name for p in tmp_path.iterdir()] == ["comms.csv"]  # no temporary file left


def test_a_memory_limit_checks_each_lowering_again_under_it(tmp_path):
    """With --memory-limit the reports are made again with the limit's rule: a limit every
    lowering keeps gives the same summary as none."""
    target = tmp_path / "comms.csv"
    code, out, err = cli(str(EXAMPLE), "--memory-limit", "1000", "-o", str(target))
    assert (code, err) == (0, "")
    assert out.splitlines()[1:5] == [
        "  compute-only             makespan 57",
        "  ours                     makespan 57",
        "  PyTorch's lowering       makespan 70",
        "  PyTorch, defer_pp_recv   hangs on NCCL",
    ]


def test_standard_output_and_json(tmp_path):
    code, out, err = cli(str(EXAMPLE), "--comm-semantics", "torch")
    assert code == 0 and err.startswith(f"{EXAMPLE}: lowered for torch on PyTorch 2.13 (shared layout): 376 actions, re-checked: VALID")
    assert sv.check(sv.loads_csv(out), comm_semantics="torch").is_valid
    code, _, _ = cli(str(EXAMPLE), "-o", str(tmp_path / "x.json"))
    assert code == 0 and sv.load(tmp_path / "x.json").has_explicit_comm


def test_never_writes_onto_its_input(tmp_path):
    copy = tmp_path / "in.csv"
    copy.write_text(EXAMPLE.read_text())
    link = tmp_path / "link.csv"
    os.symlink(copy, link)
    for target in (copy, link):
        code, out, err = cli(str(copy), "-o", str(target))
        assert code == 2 and out == ""
        assert "is the input file" in err
    assert copy.read_text() == EXAMPLE.read_text()


@pytest.mark.parametrize("text, message", [
    # a compute+comms schedule is rewritten in the release's dialect, and must still check
    ("0F0,0SEND_F0,0RECV_B0,0B0,0F1,0SEND_F1,0RECV_B1,0B1\n1RECV_F0,1F0,1RECV_F1,1F1,1B0,1SEND_B0,1B1,1SEND_B1\n",
     "rewritten for PyTorch 2.13, it does not check: SV402"),
    ("0F0,0F1,0B0,0B1\n1F1,1F0,1B0,1B1\n", "cannot lower: the compute-only schedule is invalid (1 violation; first: SV406"),
])
def test_what_cannot_be_lowered_is_a_usage_error(tmp_path, text, message):
    path = tmp_path / "s.csv"
    path.write_text(text)
    target = tmp_path / "out.csv"
    code, out, err = cli(str(path), "-o", str(target))
    assert code == 2 and out == "" and message in err
    assert not target.exists()


def test_a_compute_comms_schedule_is_rewritten_for_the_release(tmp_path):
    """lower on a file that lists its communication: 2.15's dialect adds a wait per send."""
    path = tmp_path / "s.csv"
    path.write_text("0F0,0SEND_F0,0RECV_B0,0B0\n1RECV_F0,1F0,1B0,1SEND_B0\n")
    code, out, err = cli(str(path), "--torch", "2.15")
    assert code == 0 and err.startswith(f"{path}: rewritten for torch-nccl on PyTorch 2.15: 10 actions")
    assert out.splitlines() == ["0F0,0SEND_F0,0RECV_B0,0B0,0WAIT_SEND_F0", "1RECV_F0,1F0,1B0,1SEND_B0,1WAIT_SEND_B0"]


def test_a_failed_write_leaves_the_old_file(tmp_path, monkeypatch):
    target = tmp_path / "comms.csv"
    target.write_text("old\n")

    def refuse(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", refuse)
    code, out, err = cli(str(EXAMPLE), "-o", str(target))
    assert code == 2 and "cannot write: No space left on device" in err
    assert target.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["comms.csv"]
