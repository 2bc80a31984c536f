"""schedverify.plan.profile: a measured profile from JSON or CSV, written back exactly, and
the Chrome-trace reader on hand-made traces (tests/test_plan_trace.py reads real ones)."""

from __future__ import annotations

import dataclasses
import gzip
import json
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from schedverify.errors import InputError, UsageError
from schedverify.plan.profile import (FORMAT, dump_profile, dumps_profile, load_chrome_trace, load_profile,
                                      loads_profile)
from schedverify.plan.stages import StageProfile

GiB = 2**30

JSON_EXAMPLE = """{
  "units": {"time": "ms", "memory": "GiB"},
  "stages": [{"F": 1.2, "I": 1.1, "W": 0.9, "activation": 2.5, "static": 20},
             {"F": "1300us", "B": 2.2, "activation": "2560MiB", "static": 18}],
  "w": 0.4, "comm": 0.05, "notes": ["A100, bf16"]
}"""

CSV_EXAMPLE = """stage,F[ms],I[ms],W[ms],B[ms],activation[GiB],static[GiB],comm
0,1.2,1.1,0.9,,2.5,20,50us
1,1300us,,,2.2,2560MiB,18,
"""


def _expected(source: str) -> StageProfile:
    return StageProfile(F=(0.0012, 0.0013), I=(0.0011, 0.0011), W=(0.0009, 0.0011),
                        activation=(int(2.5 * GiB), int(2.5 * GiB)), w=0.4, static=(20 * GiB, 18 * GiB),
                        comm=0.00005, B=(0.0011 + 0.0009, 0.0022), source=source)


def test_json_example():
    p = loads_profile(JSON_EXAMPLE, "p.json")
    assert p == _expected("p.json")
    assert "A100, bf16" in p.notes
    assert any("stage 1: only B measured; I = W = B/2 assumed" in n for n in p.notes)


def test_csv_example_gives_the_same_profile():
    p = loads_profile(CSV_EXAMPLE, "p.csv")
    assert p == dataclasses.replace(_expected("p.csv"), w=0.5)
    assert any("I = W = B/2" in n for n in p.notes)
    assert any("w (the share" in n and "0.5 assumed" in n for n in p.notes)


def test_defaults_seconds_bytes_and_notes():
    p = loads_profile('{"stages": [{"F": 0.5, "I": 0.4, "W": 0.3}]}')
    assert (p.F, p.I, p.W, p.B) == ((0.5,), (0.4,), (0.3,), None)
    assert p.activation == (0,) and p.static == () and p.recv_buffers == () and p.comm == 0.0 and p.w == 0.5
    assert any("no activation memory given" in n for n in p.notes)
    assert loads_profile("F,I,W\n0.5,0.4,0.3\n") == dataclasses.replace(p, source="<string>")


def test_one_of_i_w_with_b_gives_the_other():
    p = loads_profile("F,I,B\n1,0.75,2\n")
    assert (p.I, p.W, p.B) == ((0.75,), (1.25,), (2.0,))
    p = loads_profile('{"stages": [{"F": 1, "W": 0.5, "B": 2}]}')
    assert (p.I, p.W) == ((1.5,), (0.5,))


def test_b_only_everywhere():
    p = loads_profile("F[ms],B[ms]\n1,3\n2,5\n")
    assert p.B == (0.003, 0.005) and p.I == p.W == (0.0015, 0.0025)
    assert p.full_backward == p.B
    assert any(n.startswith("stages 0, 1: only B measured") for n in p.notes)


def test_comments_blank_rows_and_column_order():
    text = "# measured on 2026-11-30\n\nactivation,W,F,I\n\n10,3,1,2\n# a comment row\n20,6,4,5\n"
    p = loads_profile(text)
    assert p.F == (1.0, 4.0) and p.I == (2.0, 5.0) and p.W == (3.0, 6.0) and p.activation == (10, 20)


def test_load_profile_from_paths_and_text(tmp_path):
    (tmp_path / "a.csv").write_text(CSV_EXAMPLE)
    (tmp_path / "a.json").write_text(JSON_EXAMPLE)
    (tmp_path / "noext").write_text(JSON_EXAMPLE)
    assert load_profile(tmp_path / "a.csv").source == str(tmp_path / "a.csv")
    assert load_profile(str(tmp_path / "a.json")) == _expected(str(tmp_path / "a.json"))
    assert load_profile(tmp_path / "noext", source="mine") == _expected("mine")
    assert load_profile(JSON_EXAMPLE).source == "<string>"
    assert load_profile(CSV_EXAMPLE, source="t").F == (0.0012, 0.0013)
    with pytest.raises(InputError, match="no such file"):
        load_profile(tmp_path / "absent.csv")
    with pytest.raises(UsageError, match="expected 'json' or 'csv'"):
        loads_profile(CSV_EXAMPLE, format="toml")


# --- every bad input names its place ------------------------------------------------------

@pytest.mark.parametrize("text, where, message", [
    ("", None, "the file is empty"),
    ("stage,F,I,W\n", None, "no stages"),
    ("# only a comment\n", None, "no header row"),
    ("stage,F,X\n0,1,2\n", "row 1, column 3", "unknown column 'X'"),
    ("stage,F,Ii\n0,1,2\n", "row 1, column 3", "did you mean 'I'?"),
    ("F,F\n1,2\n", "row 1, column 2", "column 'F' appears twice"),
    ("I,W\n1,2\n", "row 1", "no F column"),
    ("F[msec],B\n1,2\n", "row 1, column 1", "unknown unit 'msec' in 'F[msec]'; known: ns, us"),
    ("F,B,activation[ms]\n1,2,3\n", "row 1, column 3", "unknown unit 'ms' in 'activation[ms]'; known: B, kB"),
    ("F,B,w[s]\n1,2,0.5\n", "row 1, column 3", "w has no unit"),
    ("F,B,F (ms)\n1,2,3\n", "row 1, column 3", "not a column name: 'F (ms)'"),
    ("stage,F,B\n0,1,2\n2,1,2\n", "row 3, column stage", "expected 1, got '2'"),
    ("F,B\n1,2,3\n", "row 2, column 3", "3 cells, but the header names 2 columns"),
    ("F,B\n1ms,2GiB\n", "row 2, column B", "unknown unit 'GiB' in '2GiB'"),
    ("F,B\n1,abc\n", "row 2, column B", "not a time: 'abc'"),
    ("F,B\n-1,2\n", "row 2, column F", "cannot be negative"),
    ("F,B,activation\n1,2,1.5XB\n", "row 2, column activation", "unknown unit 'XB'"),
    ("F,B,activation\n1,2,10%\n", "row 2, column activation", "no device was named"),
    ("F,B\n1,2\n,2\n", "row 3, column F", "no forward time"),
    ("F,I,W\n1,2,3\n1,,\n", "row 3, column B", "no backward time: give I and W, or B"),
    ("F,I\n1,2\n", "row 2, column W", "I without W: give both, or B as well"),
    ("F,I,B\n1,3,2\n", "row 2, column B", "B (2.0) is less than I (3.0)"),
    ("F,B,activation\n1,2,5\n1,2,\n", "row 3, column activation", "activation is given for stage 0 but not here"),
    ("F,B,w\n1,2,0.5\n1,2,0.6\n", "row 3, column w", "one value for the whole pipeline, but this cell says 0.6 and "
                                                     "row 2, column w says 0.5"),
    ("F,B,w\n1,2,1.5\n", "row 2, column w", "must be between 0 and 1, got 1.5"),
    ("F,B,w\n1,2,half\n", "row 2, column w", "expected a number between 0 and 1, got 'half'"),
    ('F,B\n"1,2\n', "row 2", "not valid CSV"),
])
def test_bad_csv(text, where, message):
    with pytest.raises(InputError) as e:
        loads_profile(text, "p.csv", format="csv")
    assert e.value.source == "p.csv" and e.value.where == where, str(e.value)
    assert message in str(e.value)


@pytest.mark.parametrize("doc, where, message", [
    ("[1, 2]", None, 'expected an object with "stages", got list'),
    ('{"stages": [], "speed": 1}', "speed", "unknown field 'speed'"),
    ('{"stages": [{"F": 1, "B": 2}], "format": "other/1"}', "format", f"expected {FORMAT!r}, got 'other/1'"),
    ('{"stage": []}', "stage", "did you mean 'stages'?"),
    ('{"units": {"time": "sec"}, "stages": []}', "units.time", "unknown unit 'sec'"),
    ('{"w": 0.5}', "stages", "expected a list with one object per stage"),
    ('{"stages": {"F": 1}}', "stages", "expected a list with one object per stage, got {'F': 1}"),
    ('{"stages": [3]}', "stages[0]", "expected an object such as"),
    ('{"stages": [{"F": 1, "B": 2, "Fwd": 1}]}', "stages[0].Fwd", "unknown field 'Fwd'"),
    ('{"stages": [{"F": 1, "B": 2}, {"F": true, "B": 2}]}', "stages[1].F", "expected a time such as 1.5ms, got True"),
    ('{"stages": [{"F": 1, "B": "2 GB"}]}', "stages[0].B", "unknown unit 'GB' in '2 GB'"),
    ('{"stages": [{"F": 1, "B": 2, "static": "1.5 gib"}]}', "stages[0].static", "did you mean 'GiB'?"),
    ('{"stages": [{"F": 1, "B": 2, "static": -3}]}', "stages[0].static", "cannot be negative"),
    ('{"stages": [{"F": 1}]}', "stages[0].B", "no backward time"),
    ('{"stages": [{"B": 1}]}', "stages[0].F", "no forward time"),
    ('{"stages": [{"F": 1, "B": 2}], "w": 2}', "w", "must be between 0 and 1"),
    ('{"stages": [{"F": 1, "B": 2}], "comm": "fast"}', "comm", "not a time: 'fast'"),
    ('{"stages": [{"F": 1, "B": 2}], "notes": "x"}', "notes", "expected a list of strings"),
    ('{"stages": [{"F": 1, "B": 2, "recv_buffers": 1}, {"F": 1, "B": 2}]}', "stages[1].recv_buffers",
     "recv_buffers is given for stage 0 but not here"),
    ('{"stages": [', "line 1, column 13", "invalid JSON"),
])
def test_bad_json(doc, where, message):
    with pytest.raises(InputError) as e:
        loads_profile(doc, "p.json", format="json")
    assert e.value.source == "p.json" and e.value.where == where, str(e.value)
    assert message in str(e.value)


def test_null_values_are_absent():
    p = loads_profile('{"stages": [{"F": 1, "I": null, "W": null, "B": 2}], "w": null, "comm": null}')
    assert p.I == p.W == (1.0,) and p.w == 0.5 and p.comm == 0.0


# --- round trips --------------------------------------------------------------------------

times = st.floats(min_value=0, max_value=1e4, allow_nan=False, allow_infinity=False)
sizes = st.integers(min_value=0, max_value=2**60)


@st.composite
def profiles(draw) -> StageProfile:
    n = draw(st.integers(1, 6))
    per = lambda s: tuple(draw(st.lists(s, min_size=n, max_size=n)))  # noqa: E731
    return StageProfile(
        F=per(times), I=per(times), W=per(times), activation=per(sizes), w=draw(st.floats(0, 1)),
        static=per(sizes) if draw(st.booleans()) else (),
        recv_buffers=per(sizes) if draw(st.booleans()) else (), comm=draw(times),
        B=per(times) if draw(st.booleans()) else None,
        source="mine", notes=tuple(draw(st.lists(st.text(max_size=10), max_size=2))))


@given(profiles(), st.sampled_from(["json", "csv"]))
def test_dumps_then_loads_is_exact(profile, fmt):
    back = loads_profile(dumps_profile(profile, fmt), "mine", format=fmt)
    assert back == profile  # exact: repr of each float, integers of bytes
    if fmt == "json":
        assert set(profile.notes) <= set(back.notes)


def test_dump_profile_writes_files_by_suffix(tmp_path):
    p = loads_profile(JSON_EXAMPLE, "x")
    dump_profile(p, tmp_path / "p.csv")
    dump_profile(p, tmp_path / "p.json")
    dump_profile(p, tmp_path / "other", format="csv")
    assert (tmp_path / "p.csv").read_text().startswith("stage,F[s],I[s],W[s],B[s],activation[B],static[B],w,comm[s]\n")
    assert json.loads((tmp_path / "p.json").read_text())["format"] == FORMAT
    for name in ("p.csv", "p.json", "other"):
        assert load_profile(tmp_path / name, source="x", format="csv" if name == "other" else None) == p
    assert sorted(x.name for x in tmp_path.iterdir()) == ["other", "p.csv", "p.json"]  # no temporary left


def test_b_only_profile_round_trips_with_its_b():
    p = loads_profile("F,B\n1,3\n")
    back = loads_profile(dumps_profile(p, "csv"), "<string>")
    assert back == p and back.B == (3.0,)


# --- Chrome traces, by hand ---------------------------------------------------------------

def _x(name, ts, dur, cat="user_annotation", pid=1, tid=1):
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": pid, "tid": tid}


def _op(ts, dur, name="aten::mm", pid=1, tid=1):
    return _x(name, ts, dur, "cpu_op", pid, tid)


def _write(path: Path, events, rank=None) -> Path:
    doc = {"traceEvents": events, "displayTimeUnit": "ms"}
    if rank is not None:
        doc["distributedInfo"] = {"backend": "gloo", "rank": rank, "world_size": 2}
    path.write_text(json.dumps(doc))
    return path


def test_pp_labels_busy_window_and_median(tmp_path):
    """PP:<stage><pass><mb>: the busy window starts at the first operator (the wait before it
    is not the pass's), ignores communication operators, and the median is over microbatches."""
    ev = [
        _x("PP:0F0", 0, 1000), _op(600, 100), _op(700, 300),            # waits 600 us, busy 400
        _x("PP:0F1", 2000, 500), _op(2000, 200),                         # busy 200
        _x("PP:0F2", 3000, 500), _op(3000, 50, "gloo:recv"), _op(3100, 300),  # busy 300 (not the recv)
        _x("PP:0B0", 4000, 900), _op(4000, 900),
        _x("PP:0SEND_F0", 5000, 10), _x("PP:0RECV_B0", 5100, 10),
    ]
    p = load_chrome_trace(_write(tmp_path / "t.json", ev))
    assert p.F == (300e-6,) and p.B == (900e-6,) and p.I == p.W == (450e-6,)
    assert any("matched 4 spans (F 3, B 1) from PP:<stage><pass><microbatch> labels" in n for n in p.notes)
    span = load_chrome_trace(tmp_path / "t.json", measure="span")
    assert span.F == (500e-6,)
    with pytest.raises(UsageError, match="measure: expected one of busy, span, got 'wall'"):
        load_chrome_trace(tmp_path / "t.json", measure="wall")


def test_pp_labels_split_backward_and_empty_spans(tmp_path):
    ev = []
    for s in (0, 1):
        for m in range(3):
            base = (s * 3 + m) * 10_000
            ev += [_x(f"PP:{s}F{m}", base, 200), _op(base, 100 + s),
                   _x(f"PP:{s}W{m}", base + 1000, 300), _op(base + 1000, 300)]
            ev += [_x(f"PP:{s}I{m}", base + 500, 400)] + ([] if s == 0 else [_op(base + 500, 200)])
    ev.append(_x("PP:(0F1;1B0)OVERLAP_F_B", 99_000, 50))
    p = load_chrome_trace(_write(tmp_path / "t.json", ev))
    assert p.stages == 2 and p.B is None
    assert p.F == (100e-6, 101e-6) and p.W == (300e-6, 300e-6)
    assert p.I == (0.0, 200e-6)  # stage 0's I ran no operator: its span was a wait
    assert any("3 spans ran no operator" in n for n in p.notes)
    assert any("1 OVERLAP_F_B spans skipped" in n for n in p.notes)


def test_device_spans_win_over_host(tmp_path):
    ev = [_x("PP:0F0", 0, 1000), _op(0, 1000), _x("PP:0F0", 50, 123, "gpu_user_annotation", pid=0, tid=7),
          _x("PP:0B0", 2000, 1000), _op(2000, 1000), _x("PP:0B0", 2100, 246, "gpu_user_annotation", pid=0, tid=7)]
    p = load_chrome_trace(_write(tmp_path / "t.json", ev))
    assert p.F == (123e-6,) and p.B == (246e-6,)
    assert any("(device spans)" in n for n in p.notes)


def test_gpipe_labels_take_the_stage_from_the_rank(tmp_path):
    r0 = [_x("Forward 0", 0, 10), _op(0, 10), _x("Backward 0", 100, 20), _op(100, 20)]
    r1 = [_x("Forward 0", 0, 30), _op(0, 30), _x("Backward 0", 100, 40), _op(100, 40)]
    a, b = _write(tmp_path / "rank1.json", r1, rank=1), _write(tmp_path / "rank0.json", r0, rank=0)
    p = load_chrome_trace([a, b])  # distributedInfo.rank orders them, not the list
    assert p.F == (10e-6, 30e-6) and p.B == (20e-6, 40e-6)
    assert any("ordered by distributedInfo.rank (0, 1)" in n for n in p.notes)
    # without distributedInfo: the order given
    c, d = _write(tmp_path / "x.json", r1), _write(tmp_path / "y.json", r0)
    q = load_chrome_trace([c, d])
    assert q.F == (30e-6, 10e-6) and any("in the order given" in n for n in q.notes)


def test_merged_file_one_rank_per_pid(tmp_path):
    ev = [_x("Forward 0", 0, 10, pid=200), _x("Backward 0", 20, 20, pid=200),
          _x("Forward 0", 0, 30, pid=100), _x("Backward 0", 40, 40, pid=100)]
    p = load_chrome_trace(_write(tmp_path / "merged.json", ev))
    assert p.F == (30e-6, 10e-6)  # pid 100 first; no operators anywhere: spans whole
    assert any("merged.json pid 100, " in n for n in p.notes)


def test_python_functions_when_nothing_is_labelled(tmp_path):
    fn = "torch/distributed/pipelining/stage.py({}): {}"
    ev = [_x(fn.format(857, "forward_one_chunk"), 0, 10, "python_function"),
          _x(fn.format(937, "backward_one_chunk"), 100, 20, "python_function"),
          _x(fn.format(1010, "backward_weight_one_chunk"), 200, 5, "python_function"),
          _x("torch/nn/modules/module.py(1): forward", 0, 5, "python_function")]
    p = load_chrome_trace(_write(tmp_path / "t.json", ev))
    assert p.F == (10e-6,) and p.I == (20e-6,) and p.W == (5e-6,) and p.B is None
    unsplit = load_chrome_trace(_write(tmp_path / "u.json", ev[:2]))
    assert unsplit.B == (20e-6,)


def test_gzip_trace(tmp_path):
    path = tmp_path / "t.json.gz"
    with gzip.open(path, "wt") as fh:
        json.dump({"traceEvents": [_x("PP:0F0", 0, 10), _x("PP:0B0", 20, 30)]}, fh)
    assert load_chrome_trace(path).F == (10e-6,)
    (tmp_path / "bad.json.gz").write_bytes(b"not gzip")
    with pytest.raises(InputError, match="cannot read as gzip"):
        load_chrome_trace(tmp_path / "bad.json.gz")


def test_no_pipelining_spans_names_what_was_looked_for(tmp_path):
    path = _write(tmp_path / "plain.json", [_op(0, 10), _x("ProfilerStep#1", 0, 100), {"ph": "M", "name": "x"}])
    with pytest.raises(InputError) as e:
        load_chrome_trace(path)
    message = str(e.value)
    assert message.startswith(f"{path}: no pipelining spans among its 2 complete events: looked for")
    for name in ("'PP:<stage><F|I|W|B><microbatch>'", "'Forward <microbatch>'", "with_stack=True",
                 "forward_one_chunk", "Schedule1F1B labels nothing"):
        assert name in message


@pytest.mark.parametrize("content, message", [
    ("{", "not a Chrome trace (invalid JSON"),
    ('{"events": []}', 'expected an object with "traceEvents"'),
    ('{"traceEvents": 3}', 'expected an object with "traceEvents"'),
    ("3", 'expected an object with "traceEvents"'),
])
def test_not_a_trace(tmp_path, content, message):
    (tmp_path / "t.json").write_text(content)
    with pytest.raises(InputError, match=re.escape(message)):
        load_chrome_trace(tmp_path / "t.json")


def test_malformed_events_are_skipped_not_fatal(tmp_path):
    ev = [{"ph": "X", "name": "PP:0F0", "ts": "0", "dur": 10}, {"ph": "X", "name": 3, "ts": 0, "dur": 1},
          {"ph": "X", "name": "PP:0F0", "ts": 0, "dur": -1}, "junk", _x("PP:0F0", 0, 10), _x("PP:0B0", 20, 30)]
    assert load_chrome_trace(_write(tmp_path / "t.json", ev)).F == (10e-6,)


def test_a_missing_stage_is_refused(tmp_path):
    ev = [_x("PP:0F0", 0, 10), _x("PP:0B0", 20, 30), _x("PP:2F0", 0, 10), _x("PP:2B0", 20, 30)]
    with pytest.raises(InputError, match="spans for stages 0, 2 but none for stage 1: give every rank's trace"):
        load_chrome_trace(_write(tmp_path / "t.json", ev))


def test_a_stage_without_backward_is_refused(tmp_path):
    with pytest.raises(InputError, match=r"stage 0, B: no backward time"):
        load_chrome_trace(_write(tmp_path / "t.json", [_x("PP:0F0", 0, 10)]))


def test_no_files():
    with pytest.raises(UsageError, match="no trace files"):
        load_chrome_trace([])
    with pytest.raises(InputError, match="no such file"):
        load_chrome_trace("/nonexistent/trace.json")
