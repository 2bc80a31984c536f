"""Jupyter display (schedverify/render/notebook.py): the HTML is well-formed XML and HTML,
draws one rectangle per action at its simulated times and one row per device, puts the
violations first, draws a deadlock by position with its cycle, stays bounded for huge
schedules, escapes every user string, and imports neither matplotlib nor torch."""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import schedverify as sv
from schedverify.engines import run_engine
from schedverify.errors import UsageError
from schedverify.generators import generate
from schedverify.model import Action, Costs, Schedule
from schedverify.render import notebook as nb
from schedverify.render.text import printable
from schedverify.render.view import build_view
from schedverify.strategies import schedules, valid_schedules

ROOT = Path(__file__).resolve().parent.parent
SVG = "{http://www.w3.org/2000/svg}"
VOID = {"br", "hr", "img", "input", "meta", "link", "col", "area", "base", "wbr"}


class _Balance(HTMLParser):
    """Fails on a closing tag that does not close the innermost open element."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.tags: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        if tag not in VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):
        self.tags.append(tag)

    def handle_endtag(self, tag):
        assert self.stack and self.stack[-1] == tag, f"</{tag}> closes {self.stack[-1:]}"
        self.stack.pop()


def parse(html: str) -> ET.Element:
    """The output as an XML tree (it must be well-formed XML), after checking that an HTML
    parser sees every element closed in order."""
    p = _Balance()
    p.feed(html)
    p.close()
    assert p.stack == [], f"unclosed: {p.stack}"
    assert "script" not in p.tags
    root = ET.fromstring(html)
    assert root.tag == "div" and root.get("class") == "schedverify"
    return root


def by_class(root: ET.Element, tag: str, cls: str) -> list[ET.Element]:
    return [e for e in root.iter(SVG + tag) if e.get("class") == cls]


def text_of(root: ET.Element) -> str:
    return "".join(root.itertext())


def action_rects(root):
    return by_class(root, "rect", "sv-action")


# --------------------------------------------------------------------------- timed


@pytest.mark.parametrize("family,d,m", [("1f1b", 4, 8), ("gpipe", 3, 5), ("zb-h1", 4, 8),
                                        ("interleaved-1f1b", 4, 8), ("dualpipe", 4, 8)])
def test_one_rect_per_action_at_its_times_and_one_row_per_device(family, d, m):
    s = generate(family, d, m)
    root = parse(s._repr_html_())
    rects = action_rects(root)
    assert len(rects) == s.num_actions
    assert len(by_class(root, "text", "sv-device")) == s.devices
    assert len(by_class(root, "path", "sv-memory-line")) == s.devices
    assert by_class(root, "line", "sv-limit") == []  # no limit set
    tl = sv.timeline(s)
    scale = (nb.WIDTH - nb.LEFT - nb.RIGHT) / tl.makespan
    index = {(tl.graph.dev[i], tl.graph.pos[i]): i for i in range(tl.graph.n)}
    seen = set()
    for r in rects:
        i = index[int(r.get("data-device")), int(r.get("data-position"))]
        seen.add(i)
        assert float(r.get("x")) == pytest.approx(nb.LEFT + tl.start[i] * scale, abs=0.06)
        width = max(1.5, (tl.end[i] - tl.start[i]) * scale)
        assert float(r.get("width")) == pytest.approx(width, abs=0.11)
        title = r.find(SVG + "title").text
        assert title.startswith(f"{tl.graph.acts[i]} on device {tl.graph.dev[i]}")
    assert len(seen) == s.num_actions  # every action drawn once
    assert "VALID" in text_of(root)
    assert f"makespan {sv.check(s).metrics.makespan:g}" in text_of(root)


def test_rows_and_rects_follow_the_devices():
    s = generate("1f1b", 4, 8)
    root = parse(nb.schedule_html(s))
    rects = action_rects(root)
    for d in range(4):
        ys = {r.get("y") for r in rects if r.get("data-device") == str(d)}
        assert len(ys) == 1  # one row per device
        assert sum(r.get("data-device") == str(d) for r in rects) == len(s.order[d])
    assert len({r.get("y") for r in rects}) == 4


def test_memory_panel_steps_reach_each_devices_peak_and_the_limit_is_dashed():
    s = generate("1f1b", 4, 8)
    report = sv.check(s, memory_limit=3)
    assert not report.is_valid and "SV601" in report.codes()
    html = report._repr_html_()
    root = parse(html)
    limit = by_class(root, "line", "sv-limit")
    assert len(limit) == 1 and limit[0].get("stroke-dasharray")
    for line in by_class(root, "path", "sv-memory-line"):
        d = int(line.get("data-device"))
        peak = report.metrics.devices[d].peak_memory
        assert line.find(SVG + "title").text == f"device {d}: peak {peak:g}"
    # the violations first, then the picture; the offending actions outlined in red
    assert html.index("schedverify-violations") < html.index("<svg")
    red = [r for r in action_rects(root) if r.get("stroke") == nb.VIOLATION]
    over = {(loc.device, loc.position) for v in report.violations for loc in v.locations}
    assert {(int(r.get("data-device")), int(r.get("data-position"))) for r in red} == over
    table = root.find(".//table[@class='schedverify-violations']")
    assert len(table.findall("./tbody/tr")) == len(report.violations)
    assert "SV601 memory-limit-exceeded" in text_of(table)


def test_a_valid_report_has_no_violation_table_and_the_same_picture_as_its_schedule():
    s = generate("zb-h1", 4, 6)
    html = sv.check(s)._repr_html_()
    assert "schedverify-violations" not in html
    assert html == s._repr_html_()


# --------------------------------------------------------------------------- deadlock


def test_deadlocked_schedule_is_drawn_by_position_with_the_cycle():
    s = sv.load(ROOT / "examples" / "deadlock.json")
    report = sv.check(s)
    assert report.codes() == ["SV402"] and report.timeline is None
    html = s._repr_html_()
    root = parse(html)
    rects = action_rects(root)
    assert len(rects) == s.num_actions
    assert "no timing" in text_of(root) and "SV402 deadlock" in text_of(root)
    assert by_class(root, "g", "sv-memory") == []  # no timing, no memory over time
    # positions: action k of a device is one unit wide at x = k units
    span = max(len(r) for r in s.order)
    unit = (nb.WIDTH - nb.LEFT - nb.RIGHT) / span
    for r in rects:
        assert float(r.get("x")) == pytest.approx(nb.LEFT + int(r.get("data-position")) * unit, abs=0.06)
    red = {(int(r.get("data-device")), int(r.get("data-position")))
           for r in rects if r.get("stroke") == nb.VIOLATION}
    assert red == {(loc.device, loc.position) for loc in report.violations[0].locations}
    view = build_view(s)
    assert len(by_class(root, "g", "sv-cycle")) == sum(map(len, view.cycles)) == 2
    assert html.index("schedverify-violations") < html.index("<svg")
    # the witness (each wait of the cycle) is under the message
    for step in report.violations[0].witness:
        assert step in text_of(root)


@pytest.mark.parametrize("engine", ["graph", "z3"])
def test_a_deadlocked_report_draws_its_cycle_in_jupyter(engine):
    s = sv.load(ROOT / "examples" / "deadlock.json")
    report = run_engine(engine, s, timeout_s=60)
    assert report.timeline is None and report.schedule is not None  # no timing, but the schedule
    root = parse(report._repr_html_())
    assert "INVALID" in text_of(root) and "no picture" not in text_of(root)
    assert root.find(".//table[@class='schedverify-violations']") is not None
    assert len(action_rects(root)) == s.num_actions
    assert len(by_class(root, "g", "sv-cycle")) == 2
    assert report._repr_html_() == nb.report_html(report, schedule=s)


def test_a_report_without_its_schedule_says_it_has_no_picture():
    s = sv.load(ROOT / "examples" / "deadlock.json")
    bare = sv.Report(sv.check(s).verdict, list(sv.check(s).violations))
    root = parse(bare._repr_html_())
    assert action_rects(root) == [] and "no picture" in text_of(root)
    assert root.find(".//table[@class='schedverify-violations']") is not None


def test_runtime_semantics_with_explicit_comms():
    s = sv.load(ROOT / "examples" / "pytorch_interleaved_1f1b_comms.csv")
    report = sv.check(s, comm_semantics="torch")
    root = parse(report._repr_html_())
    assert len(action_rects(root)) == s.num_actions
    assert len(by_class(root, "text", "sv-device")) == s.devices


def test_bad_costs_are_shown_not_raised():
    s = generate("1f1b", 2, 2).with_(costs=Costs(F=(1, 2, 3)))  # 3 values for 2 stages
    with pytest.raises(UsageError):
        sv.check(s)
    root = parse(s._repr_html_())
    assert "cannot check this schedule" in text_of(root) and "3 per-stage values" in text_of(root)


# --------------------------------------------------------------------------- bounded


def test_beyond_max_actions_a_summary_is_drawn_and_said():
    s = generate("1f1b", 4, 8)
    root = parse(nb.schedule_html(s, max_actions=63))
    assert action_rects(root) == []
    assert len(by_class(root, "text", "sv-device")) == 4
    assert "summary (64 actions, more than the 63 drawn one by one)" in text_of(root)
    assert "too many to draw one by one" in text_of(root)
    busy = by_class(root, "rect", "sv-busy")
    assert busy and all(0 < float(r.get("fill-opacity")) <= 1 for r in busy)
    assert len(by_class(root, "path", "sv-memory-line")) == 4


def test_a_real_huge_schedule_stays_small():
    s = generate("1f1b", 8, 1300)  # 20,800 actions
    assert s.num_actions > nb.MAX_ACTIONS
    html = s._repr_html_()
    assert len(html) < 400_000
    root = parse(html)
    assert action_rects(root) == [] and "summary" in text_of(root)
    points = sum(line.get("d").count("H") for line in by_class(root, "path", "sv-memory-line"))
    assert points <= nb.MAX_MEMORY_POINTS + 8
    # the envelope keeps the peaks
    report = sv.check(s)
    for line in by_class(root, "path", "sv-memory-line"):
        d = int(line.get("data-device"))
        assert line.find(SVG + "title").text == f"device {d}: peak {report.metrics.devices[d].peak_memory:g}"


def test_just_under_the_limit_every_action_is_drawn_in_a_few_megabytes():
    s = generate("1f1b", 8, 1200)  # 19,200 actions
    html = s._repr_html_()
    assert len(html) < 300 * s.num_actions
    assert html.count('class="sv-action"') == s.num_actions


def test_many_devices_become_one_row():
    s = generate("1f1b", nb.MAX_DEVICES + 4, 2)
    root = parse(s._repr_html_())
    assert action_rects(root) == [] and by_class(root, "text", "sv-device") == []
    assert len(by_class(root, "path", "sv-memory-line")) == 1
    assert f"the largest over all {s.devices} devices" in text_of(root)


@given(st.lists(st.tuples(st.integers(0, 50), st.integers(0, 20)), min_size=1, max_size=60),
       st.integers(1, 40))
def test_envelope_keeps_the_peak_and_the_size(raw, bins):
    steps = sorted((float(t), float(m)) for t, m in raw)
    span = max(t for t, _ in steps) + 1.0
    out = nb.envelope(steps, span, bins)
    assert len(out) == bins
    assert max(m for _, m in out) == max(m for _, m in steps)
    # each bin's value is at least the value in force anywhere inside it
    for k, (lo, value) in enumerate(out):
        hi = out[k + 1][0] if k + 1 < bins else span
        inside = [m for t, m in steps if lo <= t < hi] + [m for t, m in steps if t <= lo][-1:]
        assert value == max(inside, default=out[k - 1][1] if k else steps[0][1])


# --------------------------------------------------------------------------- escaping

NASTY = "<script>alert('x')</script> & \"q\" \x00\x1b[31m\ud800 \ufffe ]]> &amp;"


def test_names_metadata_actions_and_messages_are_escaped():
    s = Schedule.build([["0F0", "0B0"]], name=NASTY)
    s = s.with_(metadata={"<k>": "</div><b>", "n": NASTY})
    html = s._repr_html_()
    root = parse(html)
    text = text_of(root)
    assert printable(NASTY) in text and "<script>" not in html
    assert "</div><b>" in text  # as text, not markup
    weird = Schedule.build([[Action(0, "F", 0), Action(0, "<img src=x>", 0), Action(0, "B", 0)]],
                           stages=1, microbatches=1)
    report = sv.check(weird)
    assert "SV101" in report.codes()
    root = parse(weird._repr_html_())
    assert "<img" in text_of(root) and root.find(".//img") is None
    assert len(action_rects(root)) == 3


def test_table_html():
    html = nb.table_html(["family", "step time", "fits"],
                         [["1f1b <b>", 1.5, True], ["zb-h1", 2.0, None], ["gpipe", 3, False]],
                         "ranked & <sorted>", highlight=[0], max_rows=2)
    root = ET.fromstring("<div>" + html + "</div>")
    table = root.find("table")
    assert table.find("caption").text == "ranked & <sorted>"
    assert [th.text for th in table.findall("./thead/tr/th")] == ["family", "step time", "fits"]
    rows = table.findall("./tbody/tr")
    assert [[td.text for td in r] for r in rows] == [["1f1b <b>", "1.5", "True"], ["zb-h1", "2", "-"]]
    assert "bold" in rows[0][0].get("style") and "bold" not in rows[1][0].get("style")
    assert "right" in rows[0][1].get("style") and "left" in rows[0][2].get("style")
    assert "1 more row not shown" in text_of(root)
    with pytest.raises(UsageError, match="row 1 has 1 cells, but there are 2 headers"):
        nb.table_html(["a", "b"], [[1, 2], [3]])
    with pytest.raises(UsageError, match="headers"):
        nb.table_html([], [])
    with pytest.raises(UsageError, match="row 0 must be a sequence"):
        nb.table_html(["a"], ["abc"])
    with pytest.raises(UsageError, match="max_rows"):
        nb.table_html(["a"], [], max_rows=-1)


def test_bad_arguments_are_usage_errors():
    with pytest.raises(UsageError, match="expected a Schedule, got dict"):
        nb.schedule_html({})
    with pytest.raises(UsageError, match="expected a Report, got str"):
        nb.report_html("valid")
    with pytest.raises(UsageError, match="max_actions"):
        nb.schedule_html(generate("1f1b", 2, 2), max_actions=-1)


@settings(max_examples=40)
@given(schedules(), st.text(max_size=30), st.dictionaries(st.text(max_size=8), st.text(max_size=20), max_size=3))
def test_any_schedule_displays_well_formed_with_its_name_escaped(s, name, metadata):
    s = s.with_(name=name, metadata=metadata)
    root = parse(s._repr_html_())
    assert len(action_rects(root)) == s.num_actions
    assert len(by_class(root, "text", "sv-device")) == s.devices
    if name:
        assert printable(name) in text_of(root)
    for k, v in metadata.items():
        assert printable(k) in text_of(root) and printable(v) in text_of(root)
    report = sv.check(s)
    rep = parse(report._repr_html_())
    assert (rep.find(".//table[@class='schedverify-violations']") is not None) == bool(report.violations)


@settings(max_examples=30)
@given(valid_schedules(comm=None, with_costs=True, with_memory=True))
def test_valid_schedules_draw_every_action_and_a_memory_line_per_device(s):
    report = sv.check(s)
    root = parse(report._repr_html_())
    assert len(action_rects(root)) == s.num_actions
    assert len(by_class(root, "path", "sv-memory-line")) == s.devices
    assert all(r.get("stroke") != nb.VIOLATION for r in action_rects(root))


# --------------------------------------------------------------------------- imports


def test_display_imports_neither_matplotlib_nor_torch():
    code = f"""
import sys, schedverify as sv
from schedverify.generators import generate
for s in (generate("1f1b", 4, 8), generate("zb-v", 4, 8), sv.load({str(ROOT / 'examples' / 'deadlock.json')!r})):
    assert s._repr_html_() and sv.check(s)._repr_html_()
assert sv.check(generate("1f1b", 4, 8), memory_limit=2)._repr_html_()
from schedverify.render.notebook import table_html
table_html(["a"], [[1]])
heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("matplotlib", "torch", "z3", "sympy"))
print(heavy)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().replace("'", '"')) == []
