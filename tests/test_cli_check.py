"""``schedverify check`` end to end: golden text output, the JSON shape scripts rely on, exit
codes over several files, and the options.

Regenerate the golden files after an intended change of the text output with
``SCHEDVERIFY_UPDATE_GOLDEN=1 python -m pytest tests/test_cli_check.py`` and review the diff.
"""

from __future__ import annotations

import io
import json
import os
import sys
from pathlib import Path

import pytest

import schedverify as sv
from schedverify import CODES
from schedverify.cli import run

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = Path(__file__).resolve().parent / "golden"
EXAMPLES = Path("examples")  # relative: the tests run at the root (below)


@pytest.fixture(autouse=True)
def _at_root(monkeypatch):
    monkeypatch.chdir(ROOT)  # file names in the output are as given: examples/...


def cli(*argv: str, stdin: str | None = None) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    if stdin is not None:
        old = sys.stdin
        sys.stdin = io.StringIO(stdin)
        try:
            code = run(["check", *argv], out, err)
        finally:
            sys.stdin = old
    else:
        code = run(["check", *argv], out, err)
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("golden, argv, exit_code", [
    ("check_1f1b.txt", ["examples/1f1b.json"], 0),
    ("check_deadlock_grid.txt", ["examples/deadlock.json", "--grid"], 1),
    ("check_incomplete_grid.txt", ["examples/incomplete.json", "--grid"], 1),
    ("check_rendezvous_hang.txt", ["examples/rendezvous_hang.json"], 1),
])
def test_text_output_matches_golden(golden, argv, exit_code):
    code, out, err = cli(*argv)
    assert (code, err) == (exit_code, "")
    path = GOLDEN / golden
    if os.environ.get("SCHEDVERIFY_UPDATE_GOLDEN"):
        path.parent.mkdir(exist_ok=True)
        path.write_text(out)
    assert out == path.read_text()


def test_json_shape():
    code, out, err = cli("examples/1f1b.json", "examples/deadlock.json", "--format", "json")
    assert code == 1 and err == ""
    lines = out.splitlines()
    assert len(lines) == 2  # one object per file, one per line
    valid, invalid = map(json.loads, lines)

    assert valid["file"] == "examples/1f1b.json"
    assert valid["verdict"] == "valid" and valid["violations"] == []
    m = valid["metrics"]
    assert m["makespan"] == 33
    assert m["bubble_fraction"] == pytest.approx(9 / 33)
    assert m["bubble_ratio"] == pytest.approx(3 / 8)
    assert [d["device"] for d in m["devices"]] == [0, 1, 2, 3]
    assert [(d["busy"], d["idle"], d["peak_inflight"], d["peak_memory"]) for d in m["devices"]] == [
        (24, 9, 4, 4), (24, 9, 3, 3), (24, 9, 2, 2), (24, 9, 1, 1)]
    assert m["critical_path"][0] == "0F0" and m["critical_path"][-1] == "0B7"
    assert valid["schedule"] == {"name": "1f1b", "devices": 4, "stages": 4, "microbatches": 8, "actions": 64,
                                 "units": None}

    assert invalid["verdict"] == "invalid"
    (v,) = invalid["violations"]
    assert v["code"] == "SV402" and v["slug"] == "deadlock"
    assert v["message"] == "deadlock: devices 2 -> 3 -> 2: each waits for another"
    assert (v["device"], v["position"]) == (2, 2)
    assert v["actions"] == [{"device": 2, "position": 2, "action": "2B0"},
                            {"device": 3, "position": 0, "action": "3F2"}]
    assert len(v["witness"]) == 2
    assert invalid["metrics"]["makespan"] is None  # a deadlock has no timing ...
    assert [d["peak_inflight"] for d in invalid["metrics"]["devices"]] == [4, 3, 2, 1]  # ... but memory


def test_json_for_an_unreadable_file():
    code, out, err = cli("examples/1f1b.json", "no/such.json", "--format", "json")
    assert code == 2
    ok, bad = map(json.loads, out.splitlines())
    assert ok["verdict"] == "valid"
    assert bad == {"file": "no/such.json", "verdict": "error", "error": "no/such.json: no such file",
                   "violations": [], "metrics": None}
    assert "no/such.json: no such file" in err


@pytest.mark.parametrize("files, exit_code", [
    (["examples/1f1b.json"], 0),
    (["examples/1f1b.json", "examples/gpipe.json", "examples/pytorch_interleaved_1f1b.csv"], 0),
    (["examples/1f1b.json", "examples/deadlock.json"], 1),
    (["examples/deadlock.json", "examples/1f1b.json"], 1),
    (["examples/incomplete.json", "examples/memory_limit.json"], 1),
    (["examples/deadlock.json", "missing.json", "examples/1f1b.json"], 2),
    (["missing.json"], 2),
])
def test_exit_codes_over_several_files(files, exit_code):
    code, out, err = cli(*files)
    assert code == exit_code
    assert out.count("examples/") == sum(f.startswith("examples/") for f in files)


def test_grid_marks_the_actions_involved():
    code, out, _ = cli("examples/deadlock.json", "--grid")
    grid = out[out.index("dev 0 |"):]
    rows = grid.splitlines()
    assert rows[2].split()[3:7] == ["2F0", "2F1", "2B0!", "2F2"]
    assert rows[3].split()[3:5] == ["3F2!", "3B2"]
    assert rows[-1] == "! = involved in a violation"
    assert grid.count("!") == 3  # two marks and the legend
    code, out, _ = cli("examples/1f1b.json", "--grid")
    assert "dev 3 | 3F0" in out and "!" not in out


def test_costs_per_stage():
    code, out, _ = cli("examples/1f1b.json", "--costs", "F=1:1:1:3,B=2:2:2:6", "--format", "json")
    m = json.loads(out)["metrics"]
    expected = sv.check(sv.load(ROOT / "examples/1f1b.json"), costs={"F": (1, 1, 1, 3), "B": (2, 2, 2, 6)}).metrics
    assert m["makespan"] == expected.makespan
    assert [d["busy"] for d in m["devices"]] == [24, 24, 24, 72]
    assert m["bubble_ratio"] == pytest.approx((m["makespan"] - 72) / 72)


def test_costs_comm_latency_changes_the_makespan():
    _, out0, _ = cli("examples/1f1b.json", "--format", "json")
    _, out1, _ = cli("examples/1f1b.json", "--format", "json", "--costs", "comm=1")
    assert json.loads(out1)["metrics"]["makespan"] > json.loads(out0)["metrics"]["makespan"]
    _, text, _ = cli("examples/1f1b.json", "--costs", "F=2,B=4,comm=0.5")
    assert "(costs F=2 B=4 I=1 W=1 comm=0.5)" in text


def test_memory_limit_option():
    assert cli("examples/1f1b.json", "--memory-limit", "4")[0] == 0
    code, out, _ = cli("examples/1f1b.json", "--memory-limit", "3")
    assert code == 1
    assert "SV601 memory-limit-exceeded: device 0, position 3: 0F3: memory on device 0 reaches 4 at 0F3, over the limit 3" in out
    # the file's own limit, and the option overriding it
    assert cli("examples/memory_limit.json")[0] == 1
    assert cli("examples/memory_limit.json", "--memory-limit", "8")[0] == 0


def test_comm_semantics_option_overrides_the_file():
    code, out, _ = cli("examples/rendezvous_hang.json")
    assert code == 1 and "SV403 rendezvous-deadlock" in out
    code, out, _ = cli("examples/rendezvous_hang.json", "--comm-semantics", "eager")
    assert code == 0 and "VALID" in out


def test_pytorch_csvs_check_valid():
    code, out, _ = cli("examples/pytorch_interleaved_1f1b.csv", "examples/pytorch_interleaved_1f1b_comms.csv",
                       "--format", "json")
    assert code == 0
    compute, comms = map(json.loads, out.splitlines())
    # a compute-only CSV is checked as PyTorch lowers it (--lowering auto): that lowering is
    # the comms file, so both reports are the same
    assert compute["schedule"]["actions"] == comms["schedule"]["actions"] == 376
    assert compute["metrics"] == comms["metrics"]
    code, out, _ = cli("examples/pytorch_interleaved_1f1b.csv", "--lowering", "none", "--format", "json")
    assert code == 0
    assert json.loads(out)["schedule"] == {"name": "", "devices": 4, "stages": 8, "microbatches": 8, "actions": 128,
                                                 "units": None}
    code, _, _ = cli("examples/pytorch_interleaved_1f1b_comms.csv", "--comm-semantics", "rendezvous")
    assert code == 0


def test_csv_size_options():
    code, out, _ = cli("examples/pytorch_interleaved_1f1b.csv", "--microbatches", "9", "--format", "json")
    doc = json.loads(out)
    assert code == 1
    assert {v["code"] for v in doc["violations"]} == {"SV201"}
    assert len(doc["violations"]) == 16  # 8 stages x (forward and backward) of microbatch 8
    code, out, _ = cli("examples/pytorch_interleaved_1f1b.csv", "--placement", "v")
    assert code == 1 and "SV301 wrong-device" in out
    code, out, _ = cli("examples/pytorch_interleaved_1f1b.csv", "--devices", "5", "--format", "json")
    assert json.loads(out)["schedule"]["devices"] == 5


def test_max_violations():
    code, out, _ = cli("examples/pytorch_interleaved_1f1b.csv", "--microbatches", "9", "--max-violations", "3")
    assert out.splitlines()[0].startswith("examples/pytorch_interleaved_1f1b.csv: INVALID, 16 violations")
    assert out.count("SV201") == 3
    assert "... and 13 more violations (raise --max-violations to see them)" in out


def test_stdin():
    text = (ROOT / "examples/gpipe.json").read_text()
    code, out, _ = cli("-", stdin=text)
    assert code == 0 and out.startswith("<stdin>: VALID")


def test_list_codes():
    code, out, err = cli("--list-codes")
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert len(lines) == len(CODES)
    for line, c in zip(lines, CODES.values()):
        assert line == f"{c.code} {c.slug} [{c.rule}]: {c.description}"


def test_help_and_version():
    out, err = io.StringIO(), io.StringIO()
    assert run(["--version"], out, err) == 0 and out.getvalue().startswith("schedverify ")
    out = io.StringIO()
    assert run(["check", "--help"], out, io.StringIO()) == 0
    for option in ("--costs", "--memory-limit", "--comm-semantics", "--format", "--grid", "--list-codes"):
        assert option in out.getvalue()
    assert run([], io.StringIO(), io.StringIO()) == 2
    err = io.StringIO()
    assert run(["chekc"], io.StringIO(), err) == 2 and "invalid choice: 'chekc'" in err.getvalue()


def test_module_entry_point_runs(tmp_path):
    import subprocess

    proc = subprocess.run([sys.executable, "-m", "schedverify", "check", "examples/deadlock.json"],
                          capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 1
    assert "SV402 deadlock" in proc.stdout and proc.stderr == ""


@pytest.mark.parametrize("rows, extra, exit_code, needle", [
    # idle cells between actions: nothing to say but the missing REDUCE_GRAD
    (["0F0,,0SEND_F0,0RECV_B0,0B0", "1RECV_F0,1F0,,1B0,1SEND_B0"], [], 0, "warning: the schedule lists its communication but no REDUCE_GRAD"),
    # a send to a stage that does not exist: named as out of range
    (["0F0,0SEND_F0,5SEND_F0,0RECV_B0,0B0", "1RECV_F0,1F0,1B0,1SEND_B0"], ["--stages", "2"], 1, "SV102 index-out-of-range: device 0, position 2: 5SEND_F0"),
    # a receive nobody sends to
    (["0F0,0SEND_F0,0RECV_B0,0B0", "1RECV_F0,1RECV_F0,1F0,1B0,1SEND_B0"], [], 1, "SV202 duplicate-action"),
    # a receive from a stage after the last one
    (["0F0,0SEND_F0,0RECV_B0,0B0", "1RECV_F0,1F0,1B0,1SEND_B0,1RECV_B0"], [], 1,
     "SV502 unmatched-recv: device 1, position 4: 1RECV_B0: 1RECV_B0 has no peer: stage 1 has no next stage"),
])
def test_bad_comms_csv_gets_a_violation_never_a_traceback(tmp_path, rows, extra, exit_code, needle):
    path = tmp_path / "comms.csv"
    path.write_text("\n".join(rows) + "\n")
    code, out, err = cli(str(path), *extra)
    assert (code, err) == (exit_code, ""), err
    assert "runtime: torch-nccl: PyTorch 2.13 over NCCL" in out
    assert needle in out, out


def test_a_recv_without_its_send_is_unmatched_under_torch(tmp_path):
    path = tmp_path / "comms.csv"
    path.write_text("0F0,0SEND_F0,0RECV_B0,0B0\n1RECV_F0,1RECV_F1,1F0,1B0,1SEND_B0\n")
    code, out, err = cli(str(path), "--comm-semantics", "torch", "--microbatches", "2", "--format", "json")
    assert code == 1 and err == ""
    doc = json.loads(out)
    assert doc["comm_semantics"] == "torch"
    (v,) = [v for v in doc["violations"] if v["code"] == "SV502"]
    assert v["actions"] == [{"device": 1, "position": 1, "action": "1RECV_F1"}]
    assert "device 0 posts only 1 send to device 1" in v["message"]


def test_a_compute_only_csv_pytorch_cannot_lower_is_checked_as_it_is(tmp_path):
    path = tmp_path / "deadlock.csv"
    path.write_text("0F0,0B0,0F1,0B1\n1F1,1B1,1F0,1B0\n")  # device 1 waits for 0F1 behind 0B0
    code, out, err = cli(str(path))
    assert code == 1 and err == ""
    assert "(2 devices, 2 stages, 2 microbatches, 8 actions)" in out  # not lowered
    assert "warning: PyTorch 2.13's lowering refuses this schedule (Malformed compute schedule" in out
    assert "SV402 deadlock" in out


def test_lowering_checks_what_pytorch_runs():
    # PyTorch's own lowering of the compute-only example is the comms example, byte for byte
    # (but for csv.writer's line ends): --lowering torch checks that very schedule
    code, out, err = cli(str(EXAMPLES / "pytorch_interleaved_1f1b.csv"), "--lowering", "torch", "--format", "json")
    assert (code, err) == (0, "")
    doc = json.loads(out)
    comms = (EXAMPLES / "pytorch_interleaved_1f1b_comms.csv").read_text().replace("\r\n", "\n")
    assert [",".join(row) for row in doc["schedule"]["order"]] == comms.splitlines()
    _, direct, _ = cli(str(EXAMPLES / "pytorch_interleaved_1f1b_comms.csv"), "--format", "json")
    assert doc["metrics"] == json.loads(direct)["metrics"]
    code, out, _ = cli(str(EXAMPLES / "pytorch_interleaved_1f1b.csv"), "--lowering", "torch-defer")
    assert code == 1 and "SV405 comm-stream-deadlock" in out
    code, out, err = cli(str(EXAMPLES / "pytorch_interleaved_1f1b_comms.csv"), "--lowering", "torch")
    assert code == 2 and out == ""
    assert err == ("schedverify check: error: " + str(EXAMPLES / "pytorch_interleaved_1f1b_comms.csv")
                   + ": --lowering torch: the schedule already lists SEND/RECV: PyTorch lowers only "
                   "compute-only schedules (format='compute_only')\n")


def test_strings_from_the_file_cannot_forge_lines_of_the_report(tmp_path):
    # A name with a carriage return and an ANSI escape (and a lone surrogate, which could not
    # even be encoded for printing) is shown escaped, on its own line.
    doc = json.loads(sv.dumps(sv.load("examples/1f1b.json")))
    doc["name"] = "x\u001b[2K\rfake.json: VALID \ud800"
    path = tmp_path / "evil.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    code, out, err = cli(str(path))
    assert (code, err) == (0, "")
    head = out.splitlines()[0]
    assert "\r" not in out and "\x1b" not in out
    assert head == (f"{path}: VALID  (x\\x1b[2K\\x0dfake.json: VALID \\ud800: 4 devices, 4 stages, "
                    "8 microbatches, 64 actions)")
    out.encode("utf-8")  # printable as it is
