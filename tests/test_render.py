"""``schedverify show``: the terminal timeline (golden files; after an intended change,
``SCHEDVERIFY_UPDATE_GOLDEN=1 python3 -m pytest tests/test_render.py`` rewrites them and
``git diff tests/golden`` shows what moved), the trace-event JSON (checked
against the trace-event format and the timeline), and the images (headless, sizes from the
PNG header; skipped without matplotlib)."""

from __future__ import annotations

import io
import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import schedverify as sv
from schedverify.cli import run
from schedverify.generators import FAMILIES
from schedverify.render.text import IDLE, timeline_rows
from schedverify.render.trace import DEFAULT_TIME_SCALE, trace_events
from schedverify.render.view import build_view, category

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = Path(__file__).resolve().parent / "golden"
UPDATE = os.environ.get("SCHEDVERIFY_UPDATE_GOLDEN") == "1"

# Small fixed schedules, written out here so that the golden files do not move when a
# generator changes.
FIXTURES = {
    "deadlock": {
        "format": "schedverify/1", "name": "deadlock", "devices": 2, "stages": 2, "microbatches": 2,
        "placement": "loop", "order": [["0F0", "0B0", "0F1", "0B1"], ["1F1", "1F0", "1B0", "1B1"]]},
    "self_wait": {
        "format": "schedverify/1", "name": "self-wait", "devices": 2, "stages": 2, "microbatches": 2,
        "placement": "loop", "order": [["0F0", "0F1", "0B0", "0B1"], ["1B0", "1F0", "1F1", "1B1"]]},
    "misplaced": {
        "format": "schedverify/1", "name": "misplaced", "devices": 2, "stages": 2, "microbatches": 2,
        "placement": "loop", "order": [["0F0", "0F1", "0B0"], ["1F0", "1B0", "1F1", "1B1", "0B1"]]},
    "dualpipe": {
        "format": "schedverify/1", "name": "dualpipe", "devices": 2, "stages": 2, "microbatches": 4,
        "routes": ["loop", [1, 0]], "microbatch_route": [0, 0, 1, 1],
        "order": [["0F0", "1F2", "0F1", "1B2", "(1F3;0B0)OVERLAP_F_B", "1B3", "0I1", "0W1"],
                  ["0F2", "1F0", "0F3", "1B0", "(1F1;0B2)OVERLAP_F_B", "1B1", "0I3", "0W3"]]},
    "comm": {
        "format": "schedverify/1", "name": "comm", "devices": 2, "stages": 2, "microbatches": 2,
        "placement": "loop",
        "order": [["0F0", "0SEND_F0", "0F1", "0SEND_F1", "0RECV_B0", "0B0", "0RECV_B1", "0B1"],
                  ["1RECV_F0", "1F0", "1B0", "1SEND_B0", "1RECV_F1", "1F1", "1B1", "1SEND_B1"]],
        "costs": {"F": 1, "B": 2, "SEND_F": 0.5, "RECV_F": 0.5, "SEND_B": 0.5, "RECV_B": 0.5}},
    "zb": {
        "format": "schedverify/1", "name": "zb-h1", "devices": 2, "stages": 2, "microbatches": 3,
        "placement": "loop",
        "order": [["0F0", "0F1", "0I0", "0W0", "0F2", "0I1", "0W1", "0I2", "0W2"],
                  ["1F0", "1I0", "1F1", "1I1", "1W0", "1F2", "1I2", "1W1", "1W2"]]},
}


def fixture(tmp_path: Path, name: str) -> Path:
    p = tmp_path / f"{name}.json"
    p.write_text(json.dumps(FIXTURES[name]), encoding="utf-8")
    return p


def cli(*argv) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = run([str(a) for a in argv], out, err)
    return code, out.getvalue(), err.getvalue()


# --------------------------------------------------------------------------- golden text

GOLDEN_CASES = [
    # (golden name, fixture or example, extra arguments, expected exit code)
    ("show_1f1b.txt", "examples/1f1b.json", ["--width", "100"], 0),
    ("show_1f1b_narrow.txt", "examples/1f1b.json", ["--width", "60"], 0),
    ("show_1f1b_grid.txt", "examples/1f1b.json", ["--grid", "--width", "100"], 0),
    ("show_gpipe_costs.txt", "examples/gpipe.json", ["--width", "120", "--costs", "F=1.5,B=3,comm=0.5"], 0),
    ("show_1f1b_memory_limit.txt", "examples/1f1b.json", ["--width", "100", "--memory-limit", "3"], 1),
    ("show_deadlock.txt", "deadlock", ["--width", "100"], 1),
    ("show_self_wait.txt", "self_wait", ["--width", "100"], 1),
    ("show_misplaced.txt", "misplaced", ["--width", "100"], 1),
    ("show_dualpipe.txt", "dualpipe", ["--width", "100"], 0),
    ("show_comm.txt", "comm", ["--width", "100"], 0),
    ("show_comm_rendezvous.txt", "comm", ["--width", "100", "--comm-semantics", "rendezvous"], 1),
    ("show_zb.txt", "zb", ["--width", "100"], 0),
]


@pytest.mark.parametrize("golden,source,extra,expected", GOLDEN_CASES, ids=[c[0] for c in GOLDEN_CASES])
def test_text_rendering_matches_golden_file(tmp_path, golden, source, extra, expected):
    path = ROOT / source if source.endswith(".json") else fixture(tmp_path, source)
    code, out, err = cli("show", path, *extra)
    assert err == ""
    assert code == expected
    text = out.replace(str(path), f"<{source}>")
    target = GOLDEN / golden
    if UPDATE:
        target.write_text(text, encoding="utf-8")
    assert target.exists(), f"{target} is missing: run with SCHEDVERIFY_UPDATE_GOLDEN=1 to write it"
    assert text == target.read_text(encoding="utf-8")


def test_width_is_honoured_exactly():
    for width in (60, 80, 100, 140):
        code, out, _ = cli("show", ROOT / "examples/1f1b.json", "--width", width)
        rows = [line for line in out.splitlines() if line.startswith("dev ")]
        assert len(rows) == 4
        assert max(len(r) for r in rows) <= width


def test_terminal_width_is_the_default(monkeypatch):
    import shutil

    monkeypatch.setattr(shutil, "get_terminal_size", lambda fallback=(100, 24): os.terminal_size((72, 24)))
    code, out, _ = cli("show", ROOT / "examples/1f1b.json")
    rows = [line for line in out.splitlines() if line.startswith("dev ")]
    assert rows and max(len(r) for r in rows) <= 72


def test_costs_option_changes_the_picture():
    _, plain, _ = cli("show", ROOT / "examples/1f1b.json", "--width", "100")
    _, slow, _ = cli("show", ROOT / "examples/1f1b.json", "--width", "100", "--costs", "B=4")
    assert "makespan 33 " in plain
    assert "makespan 55 " in slow  # 1F1B: (M + D - 1)(F + B) = 11 * 5
    assert sv.timeline(sv.load(ROOT / "examples/1f1b.json"), costs={"B": 4}).makespan == 55


def test_csv_input_draws_the_same_timeline(tmp_path):
    s = sv.load(ROOT / "examples/1f1b.json")
    csv = tmp_path / "1f1b.csv"
    csv.write_text(sv.dumps_csv(s), encoding="utf-8")
    _, from_json, _ = cli("show", ROOT / "examples/1f1b.json", "--width", "100")
    code, from_csv, err = cli("show", csv, "--width", "100")
    assert code == 0, err
    rows = lambda text: [line for line in text.splitlines() if line.startswith("dev ")]  # noqa: E731
    assert rows(from_csv) == rows(from_json)


@pytest.mark.parametrize("argv,needle", [
    (["show", "missing.json"], "no such file"),
    (["show", "examples/1f1b.json", "--width", "10"], "at least 40"),
    (["show", "examples/1f1b.json", "--width", "wide"], "whole number"),
    (["show", "examples/1f1b.json", "--costs", "F=1:2"], "4 stages"),
    (["show", "examples/1f1b.json", "-o", "picture.gif"], ".gif"),
    (["show", "examples/1f1b.json", "--trace", "/nonexistent-dir/t.json"],
     "--trace /nonexistent-dir/t.json: directory '/nonexistent-dir' does not exist"),
])
def test_bad_input_is_exit_2_with_a_message(argv, needle, monkeypatch):
    monkeypatch.chdir(ROOT)
    code, out, err = cli(*argv)
    assert code == 2
    assert needle in err
    assert "Traceback" not in err


# --------------------------------------------------------------------------- the timeline rows


def _family_schedules():
    out = []
    for name, fam in FAMILIES.items():
        for d, m in ((2, 4), (4, 8), (3, 6)):
            try:
                out.append(fam(d, m, **({"chunks": 2} if getattr(fam, "chunks", False) else {})))
            except sv.UsageError:
                continue
    return out


SCHEDULES = _family_schedules()
COST = st.integers(1, 4)


@settings(max_examples=40)
@given(st.sampled_from(SCHEDULES), COST, COST, COST, COST, st.integers(30, 200))
def test_rows_show_each_action_where_it_runs_and_idle_where_none_does(s, f, b, i, w, cols):
    """A column lying wholly inside an action's run is drawn busy; one wholly inside a
    bubble is drawn idle; every row has exactly ``cols`` characters."""
    view = build_view(s, costs={"F": f, "B": b, "I": i, "W": w})
    assert view.timed
    rows, _ = timeline_rows(view, cols)
    span = view.span
    scale = span / cols
    assert [len(r) for r in rows] == [cols] * s.devices
    for d, row in enumerate(rows):
        for i_ in view.device_range(d):
            t0, t1 = view.start[i_], view.end[i_]
            for c in range(cols):
                if t0 <= c * scale and (c + 1) * scale <= t1:
                    assert row[c] != IDLE, (d, c, str(view.graph.acts[i_]))
        for g0, g1 in view.idle(d):
            for c in range(cols):
                if g0 <= c * scale and (c + 1) * scale <= g1:
                    assert row[c] == IDLE, (d, c)


def test_idle_intervals_add_up_to_idle_time():
    for s in SCHEDULES:
        view = build_view(s, costs={"F": 1, "B": 3, "I": 2, "W": 1})
        busy = view.timeline.busy()
        for d in range(s.devices):
            gaps = sum(b - a for a, b in view.idle(d))
            assert gaps == pytest.approx(view.span - busy[d], abs=1e-9)


# --------------------------------------------------------------------------- trace events

REQUIRED = {
    "X": ("name", "ph", "ts", "dur", "pid", "tid"),
    "M": ("name", "ph", "pid", "args"),
    "s": ("name", "cat", "ph", "id", "ts", "pid", "tid"),
    "f": ("name", "cat", "ph", "id", "ts", "pid", "tid"),
}


def check_trace_format(doc) -> list[str]:
    """The trace-event format's rules that the viewers rely on (Trace Event Format doc):
    the JSON object form with ``traceEvents``; each event's required fields with the right
    types; complete events with a non-negative duration; metadata names the viewers know;
    flow starts and ends paired by id, each bound to a slice on its process and thread
    (``s`` inside its slice, ``f`` with ``bp: "e"`` inside the slice it ends on)."""
    problems = []
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        return ["not an object with a traceEvents list"]
    if doc.get("displayTimeUnit", "ms") not in ("ms", "ns"):
        problems.append("displayTimeUnit must be ms or ns")
    slices: dict[tuple, list[tuple[float, float]]] = {}
    flows: dict[object, dict[str, dict]] = {}
    for n, e in enumerate(doc["traceEvents"]):
        ph = e.get("ph")
        if ph not in REQUIRED:
            problems.append(f"event {n}: unexpected phase {ph!r}")
            continue
        for key in REQUIRED[ph]:
            if key not in e:
                problems.append(f"event {n} ({ph}): missing {key}")
        for key in ("ts", "dur"):
            if key in e and (not isinstance(e[key], (int, float)) or e[key] < 0):
                problems.append(f"event {n}: {key} must be a number >= 0, got {e[key]!r}")
        for key in ("pid", "tid"):
            if key in e and not isinstance(e[key], int):
                problems.append(f"event {n}: {key} must be an integer")
        if ph == "M" and e.get("name") not in ("process_name", "process_sort_index", "thread_name",
                                               "thread_sort_index", "process_labels"):
            problems.append(f"event {n}: unknown metadata {e.get('name')!r}")
        if ph == "X" and "ts" in e and "dur" in e:
            slices.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"]))
        if ph in ("s", "f") and "id" in e:
            if ph in flows.setdefault(e["id"], {}):
                problems.append(f"flow id {e['id']}: two {ph!r} events")
            flows[e["id"]][ph] = e
            if ph == "f" and e.get("bp") != "e":
                problems.append(f"event {n}: a flow end binds to its enclosing slice only with bp 'e'")
    for fid, pair in flows.items():
        if set(pair) != {"s", "f"}:
            problems.append(f"flow id {fid}: unpaired ({sorted(pair)})")
            continue
        for e in pair.values():
            spans = slices.get((e["pid"], e["tid"]), [])
            if not any(a <= e["ts"] <= b for a, b in spans):
                problems.append(f"flow id {fid}: {e['ph']} at {e['ts']} is in no slice of pid {e['pid']}")
        if pair["f"]["ts"] < pair["s"]["ts"] and doc.get("otherData", {}).get("timed", True):
            problems.append(f"flow id {fid}: ends before it starts")
    return problems


@pytest.mark.parametrize("name", ["comm", "dualpipe", "zb", "misplaced"])
def test_trace_is_valid_and_its_times_are_the_timeline(tmp_path, name):
    path = fixture(tmp_path, name)
    out = tmp_path / "trace.json"
    code, _, err = cli("show", path, "--trace", out)
    assert code in (0, 1), err
    doc = json.loads(out.read_text())
    assert check_trace_format(doc) == []
    view = build_view(sv.load(path))
    assert view.timed
    xs = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert len(xs) == view.graph.n
    g = view.graph
    for i, e in enumerate(xs):
        assert e["name"] == str(g.acts[i])
        assert e["pid"] == g.dev[i]
        assert e["ts"] / DEFAULT_TIME_SCALE == pytest.approx(view.timeline.start[i])
        assert (e["ts"] + e["dur"]) / DEFAULT_TIME_SCALE == pytest.approx(view.timeline.end[i])
        a = g.acts[i]
        if a.sub is None and a.microbatch is not None:
            assert e["args"]["microbatch"] == a.microbatch and e["args"]["stage"] == a.stage
    # one flow per cross-device wait
    waits = sum(len(w) for w in g.waits)
    assert sum(1 for e in doc["traceEvents"] if e["ph"] == "s") == waits
    names = {e["args"]["name"] for e in doc["traceEvents"] if e["ph"] == "M" and e["name"] == "process_name"}
    assert names == {f"device {d}" for d in range(view.schedule.devices)}


@settings(max_examples=25)
@given(st.sampled_from(SCHEDULES), COST, COST, st.integers(0, 2))
def test_trace_of_generated_schedules_is_valid(s, f, b, comm):
    view = build_view(s, costs={"F": f, "B": b, "I": f, "W": b, "comm": comm})
    doc = json.loads(json.dumps(trace_events(view)))
    assert check_trace_format(doc) == []
    xs = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    ends = [(e["ts"] + e["dur"]) / DEFAULT_TIME_SCALE for e in xs]
    assert max(ends) == pytest.approx(view.timeline.makespan)


def test_trace_checker_catches_broken_traces():
    good = trace_events(build_view(sv.load(ROOT / "examples/1f1b.json")))
    assert check_trace_format(good) == []
    events = good["traceEvents"]
    no_dur = [dict(e) for e in events]
    next(e for e in no_dur if e["ph"] == "X").pop("dur")
    assert any("missing dur" in p for p in check_trace_format({"traceEvents": no_dur}))
    unpaired = [e for e in events if e["ph"] != "f"]
    assert any("unpaired" in p for p in check_trace_format({"traceEvents": unpaired}))
    moved = [dict(e) for e in events]
    s0 = next(e for e in moved if e["ph"] == "s")
    s0["ts"] = 10 ** 9
    assert any("in no slice" in p for p in check_trace_format({"traceEvents": moved}))


def test_input_gradient_is_computation_not_communication():
    view = build_view(sv.loads(json.dumps(FIXTURES["zb"])))
    doc = trace_events(view)
    cats = {e["name"]: e["cat"] for e in doc["traceEvents"] if e["ph"] == "X"}
    assert cats["0I0"] == "computation" and cats["1W2"] == "computation"
    comm = trace_events(build_view(sv.loads(json.dumps(FIXTURES["comm"]))))
    cats = {e["name"]: e["cat"] for e in comm["traceEvents"] if e["ph"] == "X"}
    assert cats["0SEND_F0"] == "communication" and cats["1RECV_F0"] == "communication"
    assert cats["0F0"] == "computation"
    overlap = sv.loads(json.dumps(FIXTURES["dualpipe"]))
    assert {category(a) for r in overlap.order for a in r} == {"computation"}


@pytest.mark.torch
def test_pytorch_dump_calls_input_gradient_communication(tmp_path):
    """What we correct: PyTorch's own dump files I under "communication"."""
    pytest.importorskip("torch")
    from torch.distributed.pipelining import schedules as ps

    actions = {0: [ps._Action(0, ps.F, 0), ps._Action(0, ps.I, 0), ps._Action(0, ps.W, 0)]}
    out = tmp_path / "torch.json"
    ps._dump_chrometrace(actions, str(out))
    cats = {e["name"]: e["cat"] for e in json.loads(out.read_text())["traceEvents"]}
    assert cats["0I0"] == "communication"  # PyTorch's label
    ours = trace_events(build_view(sv.Schedule.build([["0F0", "0I0", "0W0"]])))
    assert {e["name"]: e["cat"] for e in ours["traceEvents"] if e["ph"] == "X"}["0I0"] == "computation"


def test_deadlock_trace_is_untimed_and_shows_the_cycle(tmp_path):
    view = build_view(sv.loads(json.dumps(FIXTURES["deadlock"])))
    assert not view.timed and view.cycles
    doc = trace_events(view)
    assert check_trace_format(doc) == []
    assert doc["otherData"]["timed"] is False and "no timing" in doc["otherData"]["note"]
    flows = [e for e in doc["traceEvents"] if e["ph"] == "s"]
    assert len(flows) == sum(len(c) for c in view.cycles) and all(e["cat"] == "deadlock" for e in flows)
    marked = {e["name"] for e in doc["traceEvents"] if e["ph"] == "X" and "violations" in e["args"]}
    assert marked == {"0B0", "1F1"}
    for e in doc["traceEvents"]:
        if e["ph"] == "X":
            assert e["ts"] == e["args"]["position"] * DEFAULT_TIME_SCALE


# --------------------------------------------------------------------------- views


def test_view_marks_the_actions_violations_name():
    view = build_view(sv.load(ROOT / "examples/1f1b.json"), memory_limit=3)
    assert view.timed
    assert [str(view.graph.acts[i]) for i in view.marked] == ["0F3"]
    dead = build_view(sv.loads(json.dumps(FIXTURES["self_wait"])))
    assert not dead.timed and "SV401" in dead.untimed_reason
    assert sorted(str(dead.graph.acts[i]) for i in dead.marked) == ["1B0", "1F0"]


def test_critical_path_is_the_timeline_s():
    s = sv.load(ROOT / "examples/1f1b.json")
    view = build_view(s)
    assert [str(view.graph.acts[i]) for i in view.critical] == list(sv.check(s).metrics.critical_path)


@pytest.mark.parametrize("D, M, most", [(2, 1, 12), (4, 8, 12), (4, 8, 5), (3, 2, 2)])
def test_the_text_reports_path_names_only_the_actions_it_shows(D, M, most):
    """The text report shows a long critical path's first and last few actions: it names
    those alone (the whole path of a million-action run is a hundred thousand strings), and
    shows what it showed when it named them all."""
    from schedverify.lazy import given as given_field
    from schedverify.render.text import report_text

    s = FAMILIES["1f1b"](D, M)
    report = sv.check(s)
    assert type(given_field(report.metrics, "critical_path")).__name__ == "PathNames"
    text = report_text("s.json", s, report, max_path=most)
    names = given_field(report.metrics, "critical_path").make()
    long = len(names) > most
    assert ("_critical_path_made" in vars(report.metrics)) is not long  # made only to show all
    shown = names if not long else names[:most // 2] + ("...",) + names[-most // 2:]
    assert f"critical path ({len(names)} actions): " + " -> ".join(shown) in text


# --------------------------------------------------------------------------- images


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG file"
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


@pytest.fixture
def headless(monkeypatch):
    pytest.importorskip("matplotlib")
    monkeypatch.setenv("MPLBACKEND", "Agg")


@pytest.mark.parametrize("source,extra,expected", [
    ("examples/1f1b.json", [], 0),
    ("examples/gpipe.json", ["--memory-limit", "5", "--dpi", "80"], 1),
    ("deadlock", [], 1),
    ("dualpipe", ["--dpi", "100"], 0),
    ("comm", [], 0),
])
def test_png_has_the_size_the_figure_says(headless, tmp_path, source, extra, expected):
    from schedverify.render.image import pixel_size

    path = ROOT / source if source.endswith(".json") else fixture(tmp_path, source)
    out = tmp_path / "timeline.png"
    code, text, err = cli("show", path, "-o", out, *extra)
    assert code == expected, err
    assert f"wrote {out}" in text
    dpi = int(extra[extra.index("--dpi") + 1]) if "--dpi" in extra else 150
    view = build_view(sv.load(path), memory_limit=5 if "--memory-limit" in extra else None)
    assert png_size(out) == pixel_size(view, dpi)
    assert out.stat().st_size > 10_000


def test_svg_is_written_and_names_the_devices(headless, tmp_path):
    out = tmp_path / "timeline.svg"
    code, _, err = cli("show", ROOT / "examples/1f1b.json", "-o", out)
    assert code == 0, err
    text = out.read_text()
    assert text.lstrip().startswith("<?xml") and "<svg" in text
    assert "dev 3" in text and "makespan 33" in text and "critical path" in text


def test_large_schedule_renders(headless, tmp_path):
    from schedverify.render.image import pixel_size, render_image

    view = build_view(FAMILIES["1f1b"](16, 64))
    out = render_image(view, tmp_path / "big.png", dpi=60)
    assert png_size(out) == pixel_size(view, 60)


def test_missing_matplotlib_is_exit_2_with_the_install_hint(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # makes "import matplotlib" fail
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    code, _, err = cli("show", ROOT / "examples/1f1b.json", "-o", tmp_path / "x.svg")
    assert code == 2
    assert 'pip install "schedverify[plot]"' in err
    assert not (tmp_path / "x.svg").exists()


def test_rendering_modules_do_not_import_matplotlib_until_drawing():
    code = ("import sys, schedverify.render.image, schedverify.render.trace, schedverify.cli.show;"
            "print('matplotlib' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "False"


def test_make_images_script_writes_svgs(headless, tmp_path):
    out = subprocess.run([sys.executable, str(ROOT / "docs/make_images.py"), "--out", str(tmp_path),
                          "--families", "gpipe", "1f1b"], capture_output=True, text=True, cwd=ROOT,
                         env={**os.environ, "MPLBACKEND": "Agg"})
    assert out.returncode == 0, out.stderr
    for name in ("gpipe", "1f1b"):
        svg = tmp_path / f"{name}.svg"
        assert svg.exists() and "<svg" in svg.read_text()


# --------------------------------------------------------------------------- runtime streams


def _events(view):
    t = trace_events(view)
    ev = t["traceEvents"]
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in ev if e["name"] == "thread_name"}
    slices = {e["name"]: e for e in ev if e["ph"] == "X"}
    flows = {}
    for e in ev:
        if e["ph"] in ("s", "f"):
            flows.setdefault(e["id"], {})[e["ph"]] = e
    return threads, slices, list(flows.values())


def test_trace_has_a_comm_stream_per_device_and_messages_as_flows():
    s = sv.load(Path(__file__).resolve().parent.parent / "examples" / "crossed_recvs.csv")
    view = build_view(s)  # a CSV: PyTorch's runtime over NCCL
    threads, slices, flows = _events(view)
    assert threads == {(0, 0): "compute stream", (0, 1): "communication stream",
                       (1, 0): "compute stream", (1, 1): "communication stream"}
    tl = view.timeline
    for i, a in enumerate(view.graph.acts):
        ev = slices[str(a)]
        assert ev["tid"] == (1 if a.kind in ("SEND_F", "RECV_F", "SEND_B", "RECV_B") else 0)
        assert ev["ts"] == tl.start[i] * DEFAULT_TIME_SCALE  # a RECV spans ready..done
        assert ev["dur"] == (tl.end[i] - tl.start[i]) * DEFAULT_TIME_SCALE
    assert slices["1RECV_F1"]["dur"] > 0
    messages = {(f["s"]["name"]) for f in flows if f["s"]["cat"] == "message"}
    # matched by position: the crossed pair's arrows cross
    assert {"0SEND_F0 -> 1RECV_F1", "0SEND_F1 -> 1RECV_F0"} <= messages
    for f in flows:
        if f["s"]["cat"] == "message":
            assert (f["s"]["tid"], f["f"]["tid"]) == (1, 1)
    deps = {f["s"]["name"] for f in flows if f["s"]["cat"] == "dependency"}
    assert "1RECV_F0 -> 1F0" in deps


def test_trace_of_a_hang_marks_the_stuck_heads_and_draws_the_cycle():
    s = sv.load(Path(__file__).resolve().parent.parent / "examples" / "nccl_send_send_hang.csv")
    view = build_view(s)
    assert not view.timed
    _, slices, flows = _events(view)
    stuck = sorted(name for name, ev in slices.items() if ev["args"].get("stuck"))
    assert stuck == ["0B0", "0SEND_F1", "1F1", "1SEND_B0"]  # each device's stuck heads
    assert sorted(f["s"]["name"] for f in flows) == ["0SEND_F1 waits for 1RECV_F1", "1SEND_B0 waits for 0RECV_B0"]
    gloo = build_view(s, comm_semantics="torch")
    threads, _, _ = _events(gloo)
    assert threads[(0, 0)].startswith("host") and threads[(0, 1)] == "messages (gloo)"


def test_trace_names_a_stream_per_peer():
    from schedverify.lowering import lower
    from schedverify.runtime import NcclOptions

    nccl = NcclOptions(streams="pair")
    s = lower(FAMILIES["1f1b"](3, 3), nccl=nccl)
    threads, _, _ = _events(build_view(s, comm_semantics="torch-nccl", nccl=nccl))
    assert threads[(1, 1)] == "communication stream with device 0"
    assert threads[(1, 2)] == "communication stream with device 2"


def test_show_never_writes_onto_its_input(tmp_path):
    # Regression: `show s.json --trace s.json` replaced the schedule with a trace (exit 0).
    schedule = tmp_path / "s.json"
    schedule.write_text((ROOT / "examples/1f1b.json").read_text())
    for target in (schedule, tmp_path / "." / "s.json"):
        code, out, err = cli("show", schedule, "--trace", target)
        assert code == 2 and out == ""
        assert f"--trace {target}: is the input file {schedule}; write the result elsewhere" in err
    assert schedule.read_text() == (ROOT / "examples/1f1b.json").read_text()


def test_show_writes_its_trace_whole(tmp_path):
    target = tmp_path / "t.json"
    target.write_text("old")
    code, _, err = cli("show", ROOT / "examples/1f1b.json", "--trace", target)
    assert code == 0, err
    assert json.loads(target.read_text())["otherData"]["makespan"] == 33
    assert [p.name for p in tmp_path.iterdir()] == ["t.json"]
    picture = tmp_path / "t.svg"
    code, _, err = cli("show", ROOT / "examples/1f1b.json", "--trace", picture, "-o", picture)
    assert code == 2 and "name the same file" in err
