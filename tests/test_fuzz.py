"""Fuzzing the readers through the CLI: random bytes, random JSON, and near-valid schedule
files (a valid schedule with one to three edits) never give a traceback.

``schedverify check FILE`` must exit 0 (the file is a valid schedule), 1 (a schedule with
violations, which it lists) or 2 (an input error, with a message naming the file), and
nothing it prints may be a Python traceback.

Differentially, every file is checked twice, with the compiled kernel and in pure Python
(``_accel.kernel`` switched off): the exit code, the verdict, the violation codes and
messages, the metrics, every byte printed must be the same (see the end of this file).
"""

from __future__ import annotations

import io
import itertools
import json
from contextlib import contextmanager

import pytest
from hypothesis import event, example, given
from hypothesis import strategies as st

import schedverify
from schedverify.cli import run
from schedverify.io.jsonfmt import FIELDS
from schedverify.strategies import schedules, valid_schedules

from _helpers import pure_python

_counter = itertools.count()

SUFFIXES = [".json", ".csv", ".txt", ""]
OPTIONS = st.sampled_from([
    [], [], ["--format", "json"], ["--grid"], ["--comm-semantics", "rendezvous"],
    ["--memory-limit", "1"], ["--costs", "F=1,B=2,comm=0.5"],
])


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("fuzz")


def check_file(directory, data: bytes, suffix: str, options=()) -> tuple[int, str, str]:
    path = directory / f"f{next(_counter)}{suffix}"
    path.write_bytes(data)
    out, err = io.StringIO(), io.StringIO()
    code = run(["check", str(path), *options], out, err)
    return code, out.getvalue(), err.getvalue()


def assert_clean(result, options=()) -> int:
    code, out, err = result
    assert "Traceback" not in out and "Traceback" not in err, err
    assert code in (0, 1, 2), (code, out, err)
    event(f"exit {code}")
    if code == 2:
        assert "error:" in err, (out, err)
        assert len(err.split("error:", 1)[1].strip()) > 5, err  # a message, not just a label
    if "--format" in options:
        for line in out.splitlines():
            doc = json.loads(line)
            assert doc["verdict"] in ("valid", "invalid", "error")
    elif code == 1:
        assert "INVALID" in out and "SV" in out, out
    return code


# --------------------------------------------------------------------------- random bytes

action_ish = st.text(alphabet="0123456789FBIWSENDRCV_OVERLAPUNHGF;(),\n \"{}[]:", max_size=300)


@given(st.one_of(st.binary(max_size=300), action_ish.map(str.encode)), st.sampled_from(SUFFIXES), OPTIONS)
@example(b"", ".json", [])
@example(b"\xff\xfe", ".csv", [])
@example(b"0F0,0B0\n", ".csv", [])
@example(b"0F0,0B0\x00\n", ".csv", [])
@example(b"(0F0;0B0)OVERLAP_F_B\n", ".csv", [])
@example(b"99999999999F0\n", ".csv", [])
@example(b"[" * 100_000, ".json", [])
@example(b"\xef\xbb\xbf0F0,0B0\n", ".csv", [])  # a byte-order mark, as Excel writes
@example(b"\xef\xbb\xbf{}", ".json", [])
@example(b'{"format": "schedverify/1", "devices": ' + b"9" * 5000 + b"}", ".json", [])  # > 4300 digits
def test_random_bytes(workdir, data, suffix, options):
    assert_clean(check_file(workdir, data, suffix, options), options)


# --------------------------------------------------------------------------- random JSON

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 10**20) | st.sampled_from([10**400, -(10**4200)])
    | st.floats(allow_nan=True) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner, max_size=5),
    max_leaves=20,
)
schedule_like = st.fixed_dictionaries(
    {"format": st.sampled_from(["schedverify/1", "schedverify/1", "schedverify/2", 1])},
    optional={k: json_values for k in FIELDS if k != "format"},
)


@given(st.one_of(json_values, schedule_like), st.sampled_from([".json", ""]), OPTIONS)
def test_random_json(workdir, doc, suffix, options):
    text = json.dumps(doc)
    assert_clean(check_file(workdir, text.encode(), suffix, options), options)


# --------------------------------------------------------------------------- near-valid files

SIZES = st.sampled_from([0, -1, 1, 2, 3, 7, 10**8, 2**64, 10**400, 1.5, "3", True, None, [], 1e300])


@st.composite
def json_edits(draw, doc: dict) -> dict:
    """One edit to a schedverify/1 document."""
    doc = json.loads(json.dumps(doc))
    what = draw(st.sampled_from(["delete", "set", "size", "cell", "row", "unknown", "costs", "memory"]))
    if what == "delete":
        doc.pop(draw(st.sampled_from(sorted(doc))), None)
    elif what == "set":
        doc[draw(st.sampled_from(FIELDS))] = draw(json_values)
    elif what == "size":
        doc[draw(st.sampled_from(["devices", "stages", "microbatches"]))] = draw(SIZES)
    elif what in ("cell", "row") and isinstance(doc.get("order"), list) and doc["order"]:
        rows = doc["order"]
        d = draw(st.integers(0, len(rows) - 1))
        if what == "row" or not isinstance(rows[d], list) or not rows[d]:
            rows[d] = draw(json_values)
        else:
            p = draw(st.integers(0, len(rows[d]) - 1))
            cell = rows[d][p]
            if isinstance(cell, str) and draw(st.booleans()):
                k = draw(st.integers(0, len(cell)))
                rows[d][p] = cell[:k] + draw(st.text("0123456789FBIW_;()-x ", max_size=3)) + cell[k + 1:]
            else:
                rows[d][p] = draw(json_values)
    elif what == "unknown":
        doc[draw(st.sampled_from(["order_", "Placement", "device", "x"]))] = 1
    elif what == "costs":
        doc["costs"] = draw(st.dictionaries(st.sampled_from(["F", "B", "I", "W", "comm", "OVERLAP_F_B", "X"]),
                                            st.one_of(json_values, st.lists(st.integers(-1, 3), max_size=6)),
                                            max_size=3))
    elif what == "memory":
        doc["memory"] = draw(st.dictionaries(st.sampled_from(["activation", "w", "static", "limit", "y"]),
                                             st.one_of(json_values, st.lists(st.integers(-1, 3), max_size=6)),
                                             max_size=3))
    return doc


@st.composite
def near_valid_json(draw) -> bytes:
    s = draw(valid_schedules(comm=None, with_costs=st.none() | st.just(schedverify.Costs(comm=1))))
    doc = json.loads(schedverify.dumps(s))
    for _ in range(draw(st.integers(1, 3))):
        doc = draw(json_edits(doc))
    text = json.dumps(doc)
    if draw(st.integers(0, 9)) == 0:  # a truncated or garbled file
        k = draw(st.integers(0, len(text)))
        text = text[:k] + draw(st.text(max_size=2)) + text[k + draw(st.integers(0, 2)):]
    return text.encode("utf-8", "surrogatepass")


@st.composite
def near_valid_csv(draw) -> bytes:
    s = draw(valid_schedules(comm=None))
    text = schedverify.dumps_csv(s)
    for _ in range(draw(st.integers(1, 3))):
        k = draw(st.integers(0, len(text)))
        text = text[:k] + draw(st.text("0123456789FBIW_,;()\n\"x ", max_size=3)) + text[k + draw(st.integers(0, 3)):]
    return text.encode("utf-8", "surrogatepass")


@given(near_valid_json(), OPTIONS)
def test_near_valid_json(workdir, data, options):
    assert_clean(check_file(workdir, data, ".json", options), options)


@given(near_valid_csv(), OPTIONS)
def test_near_valid_csv(workdir, data, options):
    assert_clean(check_file(workdir, data, ".csv", options), options)


@given(valid_schedules(comm=None), st.sampled_from([".json", ".csv"]))
def test_valid_files_exit_zero(workdir, s, suffix):
    text = schedverify.dumps(s) if suffix == ".json" else schedverify.dumps_csv(s)
    # A CSV holds only the order: give the sizes it cannot say (it infers S >= D otherwise).
    # It is checked as PyTorch's runtime runs it unless told otherwise: keep the draw's semantics.
    sizes = [] if suffix == ".json" else ["--devices", str(s.devices), "--stages", str(s.stages),
                                          "--microbatches", str(s.microbatches),
                                          "--comm-semantics", s.comm_semantics or "eager"]
    code = assert_clean(check_file(workdir, text.encode(), suffix, sizes))
    assert code == 0


@given(schedules(comm=None))
def test_any_schedule_file_gets_the_verdict_check_gives(workdir, s):
    """A well-formed file (valid or not) is never an input error: the CLI's exit code is the
    verdict of schedverify.check on the same schedule."""
    code = assert_clean(check_file(workdir, schedverify.dumps(s).encode(), ".json"))
    assert code == (0 if schedverify.check(s).is_valid else 1)


# --------------------------------------------------------------------------- kernel vs Python

#: options that steer the paths the kernel takes or declines: float and mixed costs (the
#: bit-for-bit sums), int costs beyond 2^53 (the kernel declines: Python's exact ints), a
#: memory limit, another semantics, and JSON output (every metric, to the last digit)
DIFF_OPTIONS = st.sampled_from([
    [], ["--format", "json"], ["--grid"], ["--comm-semantics", "rendezvous"],
    ["--memory-limit", "1", "--format", "json"],
    ["--costs", "F=1,B=2,comm=0.5", "--format", "json"],
    ["--costs", "F=0.1,B=0.7,I=0.3,W=0.4,comm=0.2", "--format", "json"],
    ["--costs", f"F={2**53},B={2**53 + 1},comm=3", "--format", "json"],
    ["--costs", f"F={2**50 + 1},B={2**51 + 3},I={2**49},W=7", "--format", "json"],
    # a CSV is checked as PyTorch's runtime runs it (in Python) unless told otherwise
    ["--costs", f"F={2**50 + 1},B={2**51 + 3},I={2**49},W=7,comm=1", "--comm-semantics", "eager",
     "--format", "json"],
    ["--costs", "F=0.1,B=0.7,I=0.3,W=0.4,comm=0.2", "--comm-semantics", "eager", "--format", "json"],
])


def assert_kernel_agrees(directory, data: bytes, suffix: str, options) -> None:
    """``check`` on one file with the kernel and without: the same exit code and output."""
    path = directory / f"f{next(_counter)}{suffix}"
    path.write_bytes(data)
    results = []
    for switch in (contextmanager(lambda: (yield))(), pure_python()):
        out, err = io.StringIO(), io.StringIO()
        with switch:
            code = run(["check", str(path), *options], out, err)
        results.append((code, out.getvalue(), err.getvalue()))
    (code, out, err), slow = results
    assert (code, out, err) == slow
    assert "Traceback" not in out + err
    event(f"exit {code}")


@given(st.one_of(schedules(comm=None), valid_schedules(comm=None, with_costs=True, with_memory=True)),
       st.sampled_from([".json", ".csv"]), DIFF_OPTIONS)
def test_kernel_and_python_agree_on_generated_files(workdir, s, suffix, options):
    text = schedverify.dumps(s) if suffix == ".json" else schedverify.dumps_csv(s)
    assert_kernel_agrees(workdir, text.encode(), suffix, options)


@given(st.one_of(near_valid_json().map(lambda b: (b, ".json")), near_valid_csv().map(lambda b: (b, ".csv"))),
       DIFF_OPTIONS)
@example((b"0F0,0F1,0F2,0F3,0F4,0B0,0B1,0B2,0B3,0B4\n", ".csv"),  # makespan beyond 2^53, odd
         ["--costs", f"F={2**50 + 1},B={2**51 + 3}", "--comm-semantics", "eager", "--format", "json"])
@example((b"9999999999999999999F0\n", ".csv"), [])  # an index the kernel's parser leaves to Python
def test_kernel_and_python_agree_on_mutated_files(workdir, file, options):
    data, suffix = file
    assert_kernel_agrees(workdir, data, suffix, options)
