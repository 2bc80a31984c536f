"""Bad input through the CLI: each file gets exit 2 (unreadable) or 1 (readable but invalid),
a message naming the field or action and where it is, never a traceback, and the file is
left exactly as it was."""

from __future__ import annotations

import hashlib
import io
import json
import re
import time

import pytest

from schedverify.cli import run

GOOD = {
    "format": "schedverify/1",
    "devices": 2,
    "stages": 2,
    "microbatches": 2,
    "order": [["0F0", "0F1", "0B0", "0B1"], ["1F0", "1B0", "1F1", "1B1"]],
}


def doc(**changes) -> str:
    d = json.loads(json.dumps(GOOD))
    for k, v in changes.items():
        if v is _DROP:
            d.pop(k)
        else:
            d[k] = v
    return json.dumps(d)


_DROP = object()


def run_cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = run(["check", *argv], out, err)
    return code, out.getvalue(), err.getvalue()


def check_file(tmp_path, name: str, content: str | bytes, *extra: str) -> tuple[int, str, str]:
    """Write ``content`` to ``name``, run ``check`` on it, and assert the file is unchanged."""
    path = tmp_path / name
    if isinstance(content, str):
        content = content.encode("utf-8")
    path.write_bytes(content)
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    mtime = path.stat().st_mtime_ns
    code, out, err = run_cli(str(path), *extra)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before
    assert path.stat().st_mtime_ns == mtime
    assert "Traceback" not in out + err
    return code, out, err


# (file name, content, exit code, substrings the message must contain)
UNREADABLE = [
    ("truncated.json", doc()[:70], ["truncated.json", "invalid JSON", "line 1, column"]),
    ("not_json.json", "devices = 4\n", ["not_json.json", "invalid JSON", "line 1, column 1"]),
    ("top_list.json", "[1, 2]", ["expected a JSON object at the top level, got array"]),
    ("no_format.json", doc(format=_DROP), ["format", "expected 'schedverify/1', got nothing"]),
    ("old_format.json", doc(format="schedverify/0"), ["format", '"schedverify/0" (string)']),
    ("devices_str.json", doc(devices="2"), ["devices", "expected a whole number", '"2" (string)']),
    ("devices_float.json", doc(devices=2.0), ["devices", "expected a whole number", "2.0"]),
    ("devices_bool.json", doc(devices=True), ["devices", "true (boolean)"]),
    ("devices_neg.json", doc(devices=-2), ["devices", "must be at least 1, got -2"]),
    ("stages_zero.json", doc(stages=0), ["stages", "must be at least 1, got 0"]),
    ("mb_absurd.json", doc(microbatches=10**12), ["microbatches", "1,000,000,000,000 microbatches is over the cap of 10,000,000", "SCHEDVERIFY_MAX_SIZE"]),
    ("order_obj.json", doc(order={"0": []}), ["order", "expected a list with one list of actions per device"]),
    ("order_missing.json", doc(order=_DROP), ["order", "got nothing"]),
    ("order_rows.json", doc(devices=3), ["order", "has 2 device lists but devices is 3"]),
    ("row_str.json", doc(order=["0F0", ["1F0"]]), ["order[0]", "expected the list of device 0's actions"]),
    ("cell_int.json", doc(order=[["0F0", 7], ["1F0"]]), ["order[0][1]", "expected an action string or null, got 7"]),
    ("unknown_type.json", doc(order=[["0F0", "0X1"], ["1F0"]]), ["order[0][1]", "unknown action type 'X'", "'0X1'"]),
    ("lowercase.json", doc(order=[["0f0"], ["1F0"]]), ["order[0][0]", "unknown action type 'f'"]),
    ("no_mb.json", doc(order=[["0F0", "0B"], ["1F0"]]), ["order[0][1]", "B needs a microbatch index"]),
    ("reduce_mb.json", doc(order=[["0REDUCE_GRAD3"], ["1F0"]]), ["order[0][0]", "REDUCE_GRAD takes no microbatch"]),
    ("neg_stage.json", doc(order=[["-1F0"], ["1F0"]]), ["order[0][0]", "starts with its stage index"]),
    ("junk_after.json", doc(order=[["0F0junk"], ["1F0"]]), ["order[0][0]", "unexpected 'junk'"]),
    ("overlap3.json", doc(order=[["(0F0;0B1;0B2)OVERLAP_F_B"], ["1F0"]]),
     ["order[0][0]", "exactly two sub-actions, got 3"]),
    ("many_bad.json", doc(order=[["0Q0", "0Z1"], ["1Y0"]]),
     ["3 actions do not parse", "order[0][0]", "order[0][1]", "order[1][0]"]),
    ("typo.json", doc(microbatchs=2), ["top level", "unknown field 'microbatchs'", "did you mean 'microbatches'"]),
    ("typo_mem.json", doc(memory={"limt": 3}), ["memory", "unknown field 'limt'", "did you mean 'limit'"]),
    ("typo_cost.json", doc(costs={"F": 1, "Bw": 2}), ["costs", "unknown field 'Bw'"]),
    ("cost_str.json", doc(costs={"F": "1"}), ["costs.F", "expected a finite number", '"1" (string)']),
    ("cost_neg.json", doc(costs={"B": -2}), ["costs.B", "must be at least 0, got -2"]),
    ("cost_stage.json", doc(costs={"F": [1, 2, 3]}), ["costs.F", "needs 2 values (one per stage), got 3"]),
    ("w_big.json", doc(memory={"w": 1.5}), ["memory.w", "must be at most 1, got 1.5"]),
    ("limit_neg.json", doc(memory={"limit": -1}), ["memory.limit", "must be at least 0"]),
    ("sem.json", doc(comm_semantics="lazy"), ["comm_semantics", "expected one of 'eager', 'rendezvous', 'torch', 'torch-nccl'", '"lazy"']),
    ("placement.json", doc(placement="ring"), ["placement", "expected 'loop', 'v' or a list", "'ring'"]),
    ("placement_len.json", doc(placement=[0]), ["placement", "needs one device per stage (2), got 1"]),
    ("placement_dev.json", doc(placement=[0, 5]), ["placement[1]", "stage 1's device must be in 0..1, got 5"]),
    ("routes.json", doc(routes=[[0, 1], [1, 0]]), ["microbatch_route", "one route index per microbatch (2)"]),
    ("route_idx.json", doc(routes=[[0, 1], [1, 0]], microbatch_route=[0, 2]),
     ["microbatch_route[1]", "route index in 0..1, got 2"]),
    ("name.json", doc(name=3), ["name", "expected a string, got 3"]),
    ("metadata.json", doc(metadata=[1]), ["metadata", "expected an object"]),
    ("empty.json", "", ["empty.json", "empty"]),
    ("blank.json", "  \n\t\n", ["empty"]),
    ("empty.csv", "", ["empty.csv", "empty"]),
    ("binary.json", bytes(range(256)) * 4, ["binary.json", "not a text file (a NUL byte at byte 0)"]),
    ("binary_nonul.json", bytes(range(1, 256)) * 4, ["binary_nonul.json", "not UTF-8 text (byte 127)"]),
    ("binary.csv", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", ["binary.csv", "not a text file (a NUL byte at byte 8)"]),
    ("nul.csv", "0F0,\x00\n", ["nul.csv", "NUL"]),
    ("text_garbage.csv", "hello,world\n", ["2 cells do not parse", "row 1, column 1", "row 1, column 2"]),
    ("bad_cell.csv", "0F0,0B0\n1F0,1X0,1B0\n", ["bad_cell.csv", "row 2, column 2", "unknown action type 'X'"]),
    ("bad_quote.csv", '0F0,"0B0\n', ["bad_quote.csv", "not valid CSV"]),
    ("deep.json", "[" * 100000, ["deep.json", "invalid JSON"]),
    ("nan.json", doc(costs={"F": 1}).replace('"F": 1', '"F": NaN'), ["costs.F", "expected a finite number", "nan"]),
    # regressions: these raised OverflowError / ValueError tracebacks
    ("huge_int_cost.json", doc(costs={"F": 10**400}), ["costs.F", "expected a finite number", "(integer)"]),
    ("huge_int_limit.json", doc(memory={"limit": 10**400}), ["memory.limit", "expected a finite number"]),
    ("huge_digits.json", doc().replace('"devices": 2', '"devices": ' + "9" * 5000), ["invalid JSON", "4300 digits"]),
]


@pytest.mark.parametrize("name, content, needles", UNREADABLE, ids=[u[0] for u in UNREADABLE])
def test_unreadable_files_exit_2_naming_the_place(tmp_path, name, content, needles):
    code, out, err = check_file(tmp_path, name, content)
    assert code == 2, err
    assert out == ""
    assert err.startswith("schedverify check: error: ")
    for needle in needles:
        assert needle in err, (needle, err)


# Readable files whose schedule is invalid: exit 1, and the violation names the action and place.
INVALID = [
    ("out_of_range.json", doc(order=[["0F0", "0F1", "0B0", "0B1", "5F0"], ["1F0", "1B0", "1F1", "1B1"]]),
     ["SV102", "device 0, position 4: 5F0", "stage 5 is out of range: the schedule has 2 stages (0..1)"]),
    ("mb_range.json", doc(order=[["0F0", "0F1", "0B0", "0B1"], ["1F0", "1B0", "1F1", "1B1", "1F2"]]),
     ["SV102", "device 1, position 4: 1F2", "microbatch 2 is out of range"]),
    # parses (PyTorch's grammar) but is not one forward and one backward: violation SV101
    ("bad_overlap.json", doc(order=[["0F0", "(0F1;0F0)OVERLAP_F_B", "0B0", "0B1"], ["1F0", "1B0", "1F1", "1B1"]]),
     ["SV101", "device 0, position 1: (0F1;0F0)OVERLAP_F_B", "must hold one forward then one backward"]),
    ("ragged_invalid.csv", "0F0,0F1,0B0\n1F0,1B0,1F1,1B1,,\n",
     ["SV201", "0B1 (missing)", "stage 0 never runs the backward of microbatch 1"]),
]


@pytest.mark.parametrize("name, content, needles", INVALID, ids=[u[0] for u in INVALID])
def test_readable_but_invalid_files_exit_1(tmp_path, name, content, needles):
    code, out, err = check_file(tmp_path, name, content)
    assert code == 1, out + err
    assert err == ""
    for needle in needles:
        assert needle in out, (needle, out)


def test_ragged_csv_as_pytorch_writes_it_is_fine(tmp_path):
    # PyTorch writes each rank's list as it is: rows of different lengths, empty cells idle.
    code, out, err = check_file(tmp_path, "ragged.csv", "0F0,0F1,0B0,0B1\n,1F0,1B0,1F1,1B1,,,\n")
    assert code == 0, out + err
    assert "VALID" in out


def test_missing_path_and_directory(tmp_path):
    code, out, err = run_cli(str(tmp_path / "nope.json"))
    assert code == 2 and "nope.json: no such file" in err
    code, out, err = run_cli(str(tmp_path))
    assert code == 2 and f"{tmp_path}: is a directory" in err
    assert "Traceback" not in err


def test_one_bad_file_among_good_ones_still_checks_the_others(tmp_path):
    good = tmp_path / "good.json"
    good.write_text(doc())
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    code, out, err = run_cli(str(good), str(bad), str(good))
    assert code == 2
    assert out.count("VALID") == 2
    assert "bad.json" in err


def test_bad_options_exit_2(tmp_path):
    path = tmp_path / "s.json"
    path.write_text(doc())
    for argv, needle in [
        (["--costs", "F=x"], "expected a number, got 'x'"),
        (["--costs", "Q=1"], "unknown cost 'Q'"),
        (["--costs", "F=-1"], "expected a finite number >= 0"),
        (["--costs", "F=1:2:3"], "3 per-stage values given"),
        (["--memory-limit", "-3"], "--memory-limit"),
        (["--comm-semantics", "lazy"], "invalid choice: 'lazy'"),
        (["--max-violations", "0"], "must be at least 1"),
        (["--microbatches", "4"], "apply to CSV input only"),
    ]:
        code, out, err = run_cli(str(path), *argv)
        assert code == 2, (argv, out, err)
        assert needle in err, (argv, err)
        assert "Traceback" not in err


@pytest.mark.parametrize("value", ["-5GiB", "-3", "-0.5", "-1e9"])
def test_a_negative_value_is_read_as_the_value_and_refused_as_negative(tmp_path, value):
    path = tmp_path / "s.json"
    path.write_text(doc())
    code, out, err = run_cli(str(path), "--memory-limit", value)
    assert code == 2 and out == ""
    assert err.startswith("usage: schedverify check "), err
    assert re.search(r"argument --memory-limit: .*(cannot be negative|>= 0), got " + re.escape(repr(value)), err), err
    assert "expected one argument" not in err


@pytest.mark.parametrize("command, misspelt, meant", [
    (["check", "x.json"], "--memry-limit", "--memory-limit"),
    (["check", "x.json"], "--max-violatoins", "--max-violations"),
    (["show", "x.json"], "--widht", "--width"),
    (["plan", "--model", "m.toml", "--devices", "4"], "--search-tme", "--search-time"),
    (["search", "--devices", "2", "--microbatches", "2"], "--no-warmstart", "--no-warm-start"),
])
def test_a_misspelt_option_gets_the_subcommands_usage_and_a_did_you_mean(command, misspelt, meant):
    out, err = io.StringIO(), io.StringIO()
    code = run([*command, misspelt, "3"], out, err)
    text = err.getvalue()
    assert code == 2 and out.getvalue() == ""
    assert text.startswith(f"usage: schedverify {command[0]} "), text
    assert f"schedverify {command[0]}: error: unrecognized arguments: {misspelt} 3 (did you mean {meant}?)" in text


def test_an_unrelated_extra_argument_gets_no_guess():
    out, err = io.StringIO(), io.StringIO()
    assert run(["check", "x.json", "--zzzzzzzzzz"], out, err) == 2
    assert "unrecognized arguments: --zzzzzzzzzz\n" in err.getvalue()
    assert "did you mean" not in err.getvalue()


def test_no_file_is_a_usage_error():
    code, out, err = run_cli()
    assert code == 2 and "give at least one schedule file" in err


# --------------------------------------------------------------------- regression: absurd sizes
# These hung (minutes, then out of memory) before the readers bounded inferred sizes and the
# checker bounded how far it counts violations it does not show.


def test_huge_inferred_microbatch_index_in_csv_is_refused_fast(tmp_path):
    t = time.perf_counter()
    code, out, err = check_file(tmp_path, "huge.csv", "0F0,0F9999999999\n1F0\n")
    assert time.perf_counter() - t < 5
    assert code == 2
    assert "row 1, column 2: microbatch index 9999999999 in 0F9999999999 is absurdly large" in err


def test_huge_inferred_stage_index_in_json_is_refused_fast(tmp_path):
    text = doc(stages=_DROP, order=[["0F0", "123456789F0"], ["1F0"]])
    code, out, err = check_file(tmp_path, "huge.json", text)
    assert code == 2
    assert "order[0][1]: stage index 123456789 in 123456789F0 is absurdly large" in err


def test_absurd_csv_size_options_are_refused(tmp_path):
    code, out, err = check_file(tmp_path, "s.csv", "0F0,0B0\n1F0,1B0\n", "--microbatches", str(10**12))
    assert code == 2
    assert "microbatches: 1,000,000,000,000 microbatches is over the cap of 10,000,000 (set SCHEDVERIFY_MAX_SIZE to raise it)" in err


@pytest.mark.parametrize("text, total", [
    ("0F0,9999999F9999999\n", 2 * 10**14 - 1),  # 20 bytes: 4.5 s and 590 MB once (over 10 s sanitized)
    ("0F0,0F1,0F2,0B0,(9999999F0;9999999B1)OVERLAP_F_B,0B1,0B2\n1F0,1F1,1F2,1B0,1B1,1B2\n"
     "0F3,0B3,0F4,0B4,0F5,0B5,0F3,0B3\n2F0,2B0,2F1,2B10\n", 219_999_978),  # 130 bytes: 8 s once
])
def test_a_few_bytes_naming_index_9999999_check_in_a_moment(tmp_path, text, total):
    """The placement of ten million stages is a rule, not a tuple, and the missing actions
    are counted, not made: the issue's files check as fast as any small file (also in the
    sanitizer build, where they took over 10 s), with the exact count."""
    t = time.perf_counter()
    code, out, err = check_file(tmp_path, "tiny.csv", text)
    assert time.perf_counter() - t < 2
    assert code == 1 and f"INVALID, {total} violations" in out


def test_declared_sizes_far_beyond_the_actions_finish_and_count_exactly(tmp_path):
    """Two million microbatches declared, eight actions listed: the 7,999,992 missing actions
    are counted from the actions present, in a moment (once 100,000 were made one by one and
    the count said "at least")."""
    text = doc(microbatches=2_000_000)
    t = time.perf_counter()
    code, out, err = check_file(tmp_path, "sparse.json", text, "--max-violations", "3")
    assert time.perf_counter() - t < 2
    assert code == 1
    assert "INVALID, 7999992 violations" in out
    assert "... and 7999989 more violations" in out
    code, out, err = check_file(tmp_path, "sparse.json", text, "--max-violations", "3", "--format", "json")
    report = json.loads(out)
    assert report["violations_not_shown"] == 7_999_989
    assert report["violations_not_shown_exact"] is True


def test_counted_violations_are_exact_below_the_bound(tmp_path):
    text = doc(microbatches=5)  # 3 pairs x 2 stages missing F and B: 12 violations
    code, out, err = check_file(tmp_path, "few.json", text, "--max-violations", "2", "--format", "json")
    report = json.loads(out)
    assert len(report["violations"]) == 2
    assert report["violations_not_shown"] == 10
    assert report["violations_not_shown_exact"] is True


@pytest.mark.parametrize("name, content", [
    ("excel.csv", "0F0,0F1,0B0,0B1\n1F0,1B0,1F1,1B1\n"),
    ("bom.json", doc()),
])
def test_a_byte_order_mark_is_not_content(tmp_path, name, content):
    # Regression: Excel (and some editors) start UTF-8 files with a BOM; it made the first
    # cell unparseable and the JSON invalid.
    code, out, err = check_file(tmp_path, name, b"\xef\xbb\xbf" + content.encode())
    assert (code, err) == (0, ""), err
    assert "VALID" in out


# --------------------------------------------------------------------- fuzz: never a traceback

from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-3, 10**8), st.integers(min_value=-3), st.floats(allow_nan=False, allow_infinity=False),
              st.text(max_size=8), st.sampled_from(["0F0", "1B1", "loop", "v", "eager", "0X", "(0F0;0B1)OVERLAP_F_B"])),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=6), inner, max_size=3)),
    max_leaves=12,
)
FIELDS = ["format", "name", "devices", "stages", "microbatches", "placement", "routes", "microbatch_route",
          "order", "costs", "memory", "comm_semantics", "metadata", "extra"]


@given(st.dictionaries(st.sampled_from(FIELDS), json_values, max_size=4))
def test_fuzzed_json_fields_never_crash(tmp_path_factory, changes):
    d = json.loads(doc())
    d.update(changes)
    path = tmp_path_factory.mktemp("fuzz") / "f.json"
    path.write_text(json.dumps(d))
    code, out, err = run_cli(str(path), "--format", "json")
    assert code in (0, 1, 2)
    assert "Traceback" not in err
    report = json.loads(out)
    if code == 2:
        assert report["verdict"] == "error" and str(path) in err
    else:
        assert report["verdict"] == ("valid" if code == 0 else "invalid")


@given(st.lists(st.lists(st.one_of(st.sampled_from(["", "0F0", "0B0", "1F0", "1B0", "0I0", "0W0", "1SEND_F0",
                                                    "0RECV_B0", "0REDUCE_GRAD", "(0F1;0B0)OVERLAP_F_B"]),
                                   st.text(max_size=5)), max_size=6), max_size=4))
def test_fuzzed_csv_never_crashes(tmp_path_factory, rows):
    import csv

    path = tmp_path_factory.mktemp("fuzz") / "f.csv"
    with open(path, "w", newline="") as f:
        csv.writer(f).writerows(rows)
    code, out, err = run_cli(str(path))
    assert code in (0, 1, 2)
    assert "Traceback" not in err
    assert (code == 2) == bool(err)


@given(st.binary(max_size=200))
def test_fuzzed_bytes_never_crash(tmp_path_factory, data):
    for name in ("f.json", "f.csv", "f"):
        path = tmp_path_factory.mktemp("fuzz") / name
        path.write_bytes(data)
        code, out, err = run_cli(str(path))
        assert code in (0, 1, 2)
        assert "Traceback" not in err
