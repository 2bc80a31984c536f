"""Schedules and reports in a Jupyter notebook: HTML with an inline SVG timeline, built as
plain strings, so that displaying a schedule imports neither matplotlib nor anything else
heavy (``render.image`` stays the only door to matplotlib, for files and print quality).

What a cell shows, drawn from one :class:`~schedverify.render.view.View` like every other
picture: a headline (name, sizes, verdict, makespan, bubble, peak memory), the violations
as a table when there are any (first: they are the news), the timeline (one row per
device, one rectangle per action coloured by kind and shaded by microbatch, the critical
path outlined in black, actions a violation names outlined in red), the memory panel
(memory per device over time as a step line, the limit dashed) and the per-device table.
A schedule that deadlocks has no timing: it is drawn by position in each device's order,
with the cycle as red arrows between the actions that wait for each other.

Every string that comes from a user or a file (names, metadata, actions, messages) passes
through :func:`escape`, which makes it printable and HTML-safe, so the output is always
well-formed XML.  The output is bounded: beyond ``max_actions`` actions (``MAX_ACTIONS``)
the timeline becomes per-device totals and says so, the memory panel becomes a binned
envelope, and the tables stop at a row limit with a count of what was left out.
"""

from __future__ import annotations

import html
import math
from collections.abc import Iterable, Sequence

from ..diagnostics import Report
from ..errors import SchedverifyError, UsageError
from ..model import Schedule
from .image import COLOURS, CRITICAL, VIOLATION
from .text import costs_text, fmt, plural, printable
from .view import View, build_view, kind_key, microbatch_of

#: The most actions drawn one rectangle each; beyond, per-device totals (about 200 bytes
#: per action, so the largest picture is a few megabytes, not a hundred).
MAX_ACTIONS = 20_000
#: The most devices drawn as rows of the timeline and as lines of the memory panel.
MAX_DEVICES = 256
#: The most (time, memory) points the memory panel draws, over all devices.
MAX_MEMORY_POINTS = 8_000
#: The most violations and table rows listed.
MAX_ROWS = 200

WIDTH = 960  # px, the SVG's width
LEFT = 64  # px, room for the device labels
RIGHT = 16
MEMORY_HEIGHT = 150
AXIS = 22  # px under a panel for its tick labels
FONT = 'font-family="sans-serif" font-size="10"'

_TAB10 = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
          "#7f7f7f", "#bcbd22", "#17becf")
_VIRIDIS = ((0x44, 0x01, 0x54), (0x3b, 0x52, 0x8b), (0x21, 0x91, 0x8c), (0x5e, 0xc9, 0x62),
            (0xfd, 0xe7, 0x25))


# --------------------------------------------------------------------------- strings


def escape(value: object) -> str:
    """``str(value)`` made printable (control, format and lone surrogate characters written
    as ``\\x..`` escapes, as the text reports do) and then HTML-escaped, quotes included:
    safe in element text and in attribute values, and always valid XML."""
    return html.escape(printable(str(value)), quote=True)


def _clip(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _n(x: float) -> str:
    """A coordinate, to a tenth of a pixel."""
    s = f"{x:.1f}"
    return s[:-2] if s.endswith(".0") else s


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _cell(value: object) -> str:
    return "-" if value is None else fmt(value) if _is_number(value) else str(value)


_TD = "padding:2px 8px;border-bottom:1px solid #ddd;"


def table_html(headers: Sequence[object], rows: Iterable[Sequence[object]], caption: str | None = None,
               *, highlight: Iterable[int] = (), max_rows: int = MAX_ROWS) -> str:
    """An HTML table: ``headers``, then one row per item of ``rows`` (each as long as
    ``headers``; numbers formatted as the text reports do, None as ``-``, numbers right-aligned),
    ``caption`` above it.  Rows whose index is in ``highlight`` are bold (a plan's winner).
    At most ``max_rows`` rows are listed, then a line says how many were left out.  Every
    header, cell and the caption is escaped."""
    headers = list(headers)
    if not headers:
        raise UsageError("table_html: headers must name at least one column")
    if type(max_rows) is not int or max_rows < 0:
        raise UsageError(f"table_html: max_rows must be a whole number >= 0, got {max_rows!r}")
    bold = set(highlight)
    out = ['<table style="border-collapse:collapse;margin:4px 0">']
    if caption is not None:
        out.append(f'<caption style="text-align:left;font-weight:bold">{escape(caption)}</caption>')
    out.append("<thead><tr>" + "".join(f'<th style="{_TD}text-align:left">{escape(h)}</th>'
                                       for h in headers) + "</tr></thead><tbody>")
    left_out = 0
    for k, row in enumerate(rows):
        if isinstance(row, (str, bytes)) or not isinstance(row, Sequence):
            raise UsageError(f"table_html: row {k} must be a sequence of cells, got {type(row).__name__}")
        if len(row) != len(headers):
            raise UsageError(f"table_html: row {k} has {len(row)} cells, but there are "
                             f"{len(headers)} headers")
        if k >= max_rows:
            left_out += 1
            continue
        weight = "font-weight:bold;" if k in bold else ""
        out.append("<tr>" + "".join(
            f'<td style="{_TD}{weight}text-align:{"right" if _is_number(c) else "left"}">'
            f"{escape(_cell(c))}</td>" for c in row) + "</tr>")
    out.append("</tbody></table>")
    if left_out:
        out.append(f"<p><i>... and {left_out} more row{'s' * (left_out != 1)} not shown</i></p>")
    return "".join(out)


# --------------------------------------------------------------------------- the page


def schedule_html(schedule: Schedule, *, costs=None, memory=None, memory_limit=None,
                  comm_semantics=None, max_actions: int = MAX_ACTIONS) -> str:
    """``schedule`` checked (with these overrides, as :func:`schedverify.check` takes them)
    and drawn: what ``Schedule._repr_html_`` shows.  A problem with the overrides or the
    schedule's own numbers is shown as the message, not raised."""
    if not isinstance(schedule, Schedule):
        raise UsageError(f"schedule_html: expected a Schedule, got {type(schedule).__name__}")
    try:
        view = build_view(schedule, costs=costs, memory=memory, memory_limit=memory_limit,
                          comm_semantics=comm_semantics)
    except SchedverifyError as e:
        return _page([_headline_schedule(schedule),
                      f'<p style="color:{VIOLATION}">cannot check this schedule: {escape(e)}</p>'])
    return view_html(view, max_actions=max_actions)


def report_html(report: Report, *, schedule: Schedule | None = None,
                max_actions: int = MAX_ACTIONS) -> str:
    """``report`` shown: its violations first, then the timeline of the schedule it
    checked (:attr:`Report.schedule`; or ``schedule``), and for one that could not run (a
    deadlock), the order grid with the cycle drawn."""
    if not isinstance(report, Report):
        raise UsageError(f"report_html: expected a Report, got {type(report).__name__}")
    if schedule is None and report.timeline is not None:
        schedule = report.timeline.schedule
    if schedule is None:
        schedule = report.schedule
    if schedule is None:
        parts = [_headline_report(report), violations_html(report)]
        if report.metrics is not None:
            parts.append(_device_table(report))
        parts.append("<p><i>no picture: this report holds no timing (the schedule cannot run "
                     "to the end); <code>report_html(report, schedule=s)</code> draws the order "
                     "grid</i></p>")
        return _page(parts)
    try:
        view = build_view(schedule, report=report)
    except SchedverifyError as e:
        return _page([_headline_report(report), violations_html(report),
                      f'<p style="color:{VIOLATION}">cannot draw the schedule: {escape(e)}</p>'])
    return view_html(view, max_actions=max_actions)


def view_html(view: View, *, max_actions: int = MAX_ACTIONS) -> str:
    """The whole cell for ``view``: headline, violations (when invalid), legend, the SVG
    timeline with its memory panel, the per-device table and the schedule's metadata."""
    report = view.report
    parts = [_headline(view)]
    if report.violations or report.truncated:
        parts.append(violations_html(report))
    if report.warnings:
        parts.append("<ul>" + "".join(f"<li>warning: {escape(w)}</li>" for w in report.warnings[:MAX_ROWS])
                     + "</ul>")
    if not view.timed:
        parts.append(f"<p><b>no timing</b>: {escape(view.untimed_reason)}; drawn by position in "
                     "each device's order</p>")
    if view.missing:
        shown = ", ".join(map(escape, view.missing[:50]))
        more = len(view.missing) - 50
        parts.append(f"<p>missing actions: {shown}{f' and {more} more' if more > 0 else ''}</p>")
    if view.graph.n > max_actions or view.schedule.devices > MAX_DEVICES:
        parts.append(f"<p><i>{plural(view.graph.n, 'action')} on {plural(view.schedule.devices, 'device')}: "
                     f"too many to draw one by one here (the limits are {max_actions} actions and "
                     f"{MAX_DEVICES} devices), so the timeline shows totals; "
                     "<code>schedverify show FILE -o FILE.svg</code> draws every action</i></p>")
    parts.append(_legend(view, max_actions))
    parts.append(timeline_svg(view, max_actions=max_actions))
    if report.metrics is not None:
        parts.append(_device_table(report))
    if view.schedule.metadata:
        items = list(view.schedule.metadata.items())
        parts.append(table_html(("metadata", "value"),
                                [(_clip(printable(str(k)), 80), _clip(printable(str(v)))) for k, v in items],
                                max_rows=50))
    return _page(parts)


def _page(parts: list[str]) -> str:
    return '<div class="schedverify" style="font-family:sans-serif;font-size:13px">' + "".join(parts) + "</div>"


def _headline_schedule(s: Schedule) -> str:
    name = f"<b>{escape(s.name)}</b>: " if s.name else ""
    sizes = ", ".join(plural(k, w) for k, w in ((s.devices, "device"), (s.stages, "stage"),
                                                (s.microbatches, "microbatch"), (s.num_actions, "action")))
    return f"<p>{name}{sizes}</p>"


def _verdict(report: Report) -> str:
    colour = {"valid": "#2a7d2a", "invalid": VIOLATION}.get(report.verdict.value, "#b07000")
    n = len(report.violations) + report.truncated
    least = "" if report.truncated_exact else "at least "
    count = f", {least}{n} violation{'s' * (n != 1)}" if n else ""
    reason = f" ({escape(report.reason)})" if report.reason else ""
    return f'<b style="color:{colour}">{report.verdict.value.upper()}</b>{count}{reason}'


def _metrics_text(report: Report) -> str:
    m = report.metrics
    if m is None:
        return ""
    bits = []
    if m.makespan is not None:
        bits.append(f"makespan {fmt(m.makespan)}")
    if m.bubble_fraction is not None:
        bits.append(f"bubble {m.bubble_fraction:.1%}")
    bits.append(f"peak memory {fmt(m.peak_memory)}")
    bits.append(f"peak in-flight {m.peak_inflight}")
    if m.costs is not None:
        bits.append(f"costs {escape(costs_text(m.costs))}")
    return "; ".join(bits)


def _headline(view: View) -> str:
    s = view.schedule
    return (_headline_schedule(s)[:-4] + f"; {_verdict(view.report)}</p>"
            + (f"<p>{_metrics_text(view.report)}</p>" if view.report.metrics is not None else ""))


def _headline_report(report: Report) -> str:
    metrics = _metrics_text(report)
    return f"<p>{_verdict(report)}</p>" + (f"<p>{metrics}</p>" if metrics else "")


def violations_html(report: Report, *, limit: int = MAX_ROWS) -> str:
    """The violations as a table (code, slug, location, message; the witness, such as a
    deadlock's cycle step by step, under the message), at most ``limit`` of them."""
    rows = []
    for v in report.violations[:limit]:
        where = "<br/>".join(escape(loc) for loc in v.locations[:20])
        if len(v.locations) > 20:
            where += f"<br/>... {len(v.locations) - 20} more"
        witness = "".join(f"<br/>&#8627; {escape(_clip(w))}" for w in v.witness[:20])
        rows.append(f'<tr><td style="padding:2px 8px;color:{VIOLATION};white-space:nowrap" '
                    f'title="{escape(v.code.description)}">{escape(v.code.code)} {escape(v.code.slug)}</td>'
                    f'<td style="padding:2px 8px;white-space:nowrap">{where}</td>'
                    f'<td style="padding:2px 8px">{escape(_clip(v.message, 1000))}{witness}</td></tr>')
    more = len(report.violations) - len(rows) + report.truncated
    tail = ""
    if more > 0:
        least = "" if report.truncated_exact else "at least "
        tail = f"<p><i>... and {least}{more} more violation{'s' * (more != 1)} not shown</i></p>"
    if not rows:
        return tail
    th = 'style="padding:2px 8px;text-align:left;border-bottom:1px solid #999"'
    return ('<table class="schedverify-violations" style="border-collapse:collapse;margin:4px 0">'
            f"<thead><tr><th {th}>code</th><th {th}>location</th><th {th}>message</th></tr></thead>"
            "<tbody>" + "".join(rows) + "</tbody></table>" + tail)


def _device_table(report: Report) -> str:
    m = report.metrics
    rows = [(d.device, d.busy, d.idle, d.peak_inflight, d.peak_memory) for d in m.devices]
    return table_html(("device", "busy", "idle", "peak in-flight", "peak memory"), rows,
                      max_rows=MAX_DEVICES)


_LEGEND_TEXT = {"F": "F forward", "B": "B backward", "I": "I input-grad", "W": "W weight-grad",
                "OVERLAP_F_B": "F+B overlapped", "SEND": "SEND", "RECV": "RECV",
                "BOOKKEEPING": "bookkeeping"}


def _legend(view: View, max_actions: int) -> str:
    if view.graph.n > max_actions:
        return ""
    present = {kind_key(a) for a in view.graph.acts}
    items = [(COLOURS[k][0], "none", _LEGEND_TEXT[k]) for k in COLOURS if k in present]
    if view.critical:
        items.append(("none", CRITICAL, "critical path"))
    if view.marked:
        items.append(("none", VIOLATION, "named by a violation"))
    box = ('<span style="display:inline-block;width:11px;height:11px;background:{};'
           'border:2px solid {};margin:0 3px 0 10px;vertical-align:middle"></span>')
    return "<div>" + "".join(box.format(fill if fill != "none" else "transparent",
                                        edge if edge != "none" else fill) + text
                             for fill, edge, text in items) + "</div>"


# --------------------------------------------------------------------------- the SVG


def _shade(hex_colour: str, microbatch: int | None, microbatches: int) -> str:
    """The kind's colour mixed with white: microbatch 0 full colour, the last one 55%."""
    t = 0.0 if type(microbatch) is not int or microbatches <= 1 else 0.45 * max(
        0.0, min(1.0, microbatch / (microbatches - 1)))
    rgb = (int(hex_colour[k:k + 2], 16) for k in (1, 3, 5))
    return "#" + "".join(f"{round(c + (255 - c) * t):02x}" for c in rgb)


def _device_colour(d: int, devices: int) -> str:
    if devices <= 10:
        return _TAB10[d % 10]
    x = d / max(1, devices - 1) * (len(_VIRIDIS) - 1)
    k = min(int(x), len(_VIRIDIS) - 2)
    f = x - k
    return "#" + "".join(f"{round(a + (b - a) * f):02x}" for a, b in zip(_VIRIDIS[k], _VIRIDIS[k + 1]))


def nice_ticks(hi: float, count: int = 6) -> list[float]:
    """Round tick values from 0 to about ``hi`` (steps of 1, 2 or 5 times a power of ten)."""
    if not hi > 0 or not math.isfinite(hi):
        return [0.0]
    raw = hi / max(1, count)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    return [k * step for k in range(int(hi / step + 1e-9) + 1)]


def _short(x: float) -> str:
    """A tick label: 12, 2.5, 1.5e+09."""
    return fmt(float(x)) if abs(x) < 1e6 else f"{x:.3g}"


def timeline_svg(view: View, *, max_actions: int = MAX_ACTIONS) -> str:
    """The timeline of ``view`` as an ``<svg>`` element: one row per device and one
    ``<rect class="sv-action">`` per action (``data-device`` and ``data-position`` say
    which, ``<title>`` gives its name and times), then the memory panel when timed.  Beyond
    ``max_actions`` actions or ``MAX_DEVICES`` devices, per-device totals instead, and the
    picture says so."""
    if type(max_actions) is not int or max_actions < 0:
        raise UsageError(f"timeline_svg: max_actions must be a whole number >= 0, got {max_actions!r}")
    g = view.graph
    D = view.schedule.devices
    summary = g.n > max_actions or D > MAX_DEVICES
    rows = 1 if summary and D > MAX_DEVICES else max(1, D)
    row_h = 22 if rows <= 32 else max(6, 700 // rows)
    top = 18 if summary else 4
    gantt_h = rows * row_h
    mem_top = top + gantt_h + AXIS + 28
    memory = view.timed and D > 0
    height = mem_top + (MEMORY_HEIGHT + AXIS if memory else 10)
    span = view.span or 1.0
    plot_w = WIDTH - LEFT - RIGHT
    scale = plot_w / span

    def x(t: float) -> float:
        return LEFT + t * scale

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
           f'viewBox="0 0 {WIDTH} {height}" {FONT} class="sv-timeline">']
    # time axis of the Gantt panel
    axis_y = top + gantt_h
    out.append(_axis(view, x, axis_y, top, span))
    if summary:
        out.append(_summary(view, top, row_h, rows, x, max_actions))
    else:
        out.append(_bars(view, top, row_h, x))
    if memory:
        out.append(_memory_panel(view, mem_top, x, span))
    out.append("</svg>")
    return "".join(out)


def _axis(view: View, x, axis_y: float, top: float, span: float) -> str:
    out = [f'<line x1="{LEFT}" y1="{_n(axis_y)}" x2="{WIDTH - RIGHT}" y2="{_n(axis_y)}" stroke="#333"/>']
    if view.timed:
        for t in nice_ticks(span, 10):
            if t:
                out.append(f'<line x1="{_n(x(t))}" y1="{_n(top)}" x2="{_n(x(t))}" y2="{_n(axis_y + 3)}" '
                           'stroke="#eee"/>')
            out.append(f'<text x="{_n(x(t))}" y="{_n(axis_y + 14)}" text-anchor="middle">{_short(t)}</text>')
        label = "time (cost units)"
    else:
        steps = int(span)
        every = max(1, math.ceil(steps / 24))
        for p in range(0, steps, every):
            out.append(f'<text x="{_n(x(p + 0.5))}" y="{_n(axis_y + 14)}" text-anchor="middle">{p}</text>')
        label = "position in the device's order (no timing)"
    out.append(f'<text x="{WIDTH - RIGHT}" y="{_n(axis_y + 27)}" text-anchor="end" fill="#555">{label}</text>')
    return "".join(out)


def _labels(view: View, i: int) -> tuple[str, ...]:
    """An action's labels, most detailed first: with the stage where it matters (``3F1``),
    TYPE+microbatch (``F1``), the microbatch alone (the colour says the type)."""
    a = view.graph.acts[i]
    if a.sub is not None:
        f, b = a.sub
        return f"F{f.microbatch}|{b.kind}{b.microbatch}", f"{f.microbatch}|{b.microbatch}"
    if a.microbatch is None:
        return (str(a),)
    kind = {"SEND_F": "sF", "RECV_F": "rF", "SEND_B": "sB", "RECV_B": "rB"}.get(a.kind, a.kind)
    text = f"{kind}{a.microbatch}"
    short = (text, str(a.microbatch))
    return (f"{a.stage}{text}",) + short if view.needs_stage_label(i) else short


def _bars(view: View, top: float, row_h: float, x) -> str:
    g, s = view.graph, view.schedule
    start, end = view.start, view.end
    bar = row_h * 0.78
    pad = (row_h - bar) / 2
    out = []
    for d in range(s.devices):
        y = top + d * row_h
        out.append(f'<text x="{LEFT - 6}" y="{_n(y + row_h / 2 + 3.5)}" text-anchor="end" '
                   f'class="sv-device" data-device="{d}">dev {d}</text>')
        for lo, hi in view.idle(d):
            out.append(f'<rect x="{_n(x(lo))}" y="{_n(y + pad)}" width="{_n(x(hi) - x(lo))}" '
                       f'height="{_n(bar)}" fill="#f4f4f4" class="sv-idle"/>')
    critical = set(view.critical)
    labels = row_h >= 14
    for i, a in enumerate(g.acts):
        d = g.dev[i]
        y = top + d * row_h + pad
        x0 = x(start[i])
        w = max(1.5, x(end[i]) - x0)
        fill = _shade(COLOURS[kind_key(a)][0], microbatch_of(a), s.microbatches)
        if i in view.marked:
            edge = f' stroke="{VIOLATION}" stroke-width="2"'
        elif i in critical:
            edge = f' stroke="{CRITICAL}" stroke-width="1.2"'
        else:
            edge = ' stroke="#fff" stroke-width="0.5"'
        name = escape(a)
        when = (f" [{fmt(start[i])}, {fmt(view.timeline.end[i])})" if view.timed
                else f" position {g.pos[i]}")
        codes = f" ({', '.join(view.marked[i])})" if i in view.marked else ""
        out.append(f'<rect x="{_n(x0)}" y="{_n(y)}" width="{_n(w)}" height="{_n(bar)}" fill="{fill}"'
                   f'{edge} class="sv-action" data-device="{d}" data-position="{g.pos[i]}">'
                   f"<title>{name} on device {d}{when}{codes}</title></rect>")
        if labels:
            text = next((t for t in _labels(view, i) if len(t) * 6.2 + 4 <= w), "")
            if text:
                out.append(f'<text x="{_n(x0 + w / 2)}" y="{_n(y + bar / 2 + 3.5)}" text-anchor="middle" '
                           f'fill="#fff" pointer-events="none">{escape(text)}</text>')
    # deadlock cycles: an arrow from each awaited action to the one stuck waiting for it
    for cycle in view.cycles:
        for head, awaited in cycle:
            k = awaited if awaited >= 0 else ~awaited
            if not (0 <= k < g.n and 0 <= head < g.n):
                continue
            out.append(_arrow(x((start[k] + end[k]) / 2), top + (g.dev[k] + 0.5) * row_h,
                              x((start[head] + end[head]) / 2), top + (g.dev[head] + 0.5) * row_h))
    return "".join(out)


def _arrow(x1: float, y1: float, x2: float, y2: float) -> str:
    """A red arc bowed to its left (so that two waits in opposite directions between the same
    actions stay apart) with a triangular head at (x2, y2); no ``<marker>``, whose ids would
    clash between the outputs of one notebook page."""
    length = math.hypot(x2 - x1, y2 - y1) or 1.0
    cx = (x1 + x2) / 2 + 0.2 * (y2 - y1)
    cy = (y1 + y2) / 2 - 0.2 * (x2 - x1)
    tangent = math.hypot(x2 - cx, y2 - cy) or length
    ux, uy = (x2 - cx) / tangent, (y2 - cy) / tangent
    bx, by = x2 - 8 * ux, y2 - 8 * uy
    pts = f"{_n(x2)},{_n(y2)} {_n(bx - 4 * uy)},{_n(by + 4 * ux)} {_n(bx + 4 * uy)},{_n(by - 4 * ux)}"
    return (f'<g class="sv-cycle"><path d="M{_n(x1)} {_n(y1)}Q{_n(cx)} {_n(cy)} {_n(bx)} {_n(by)}" '
            f'fill="none" stroke="{VIOLATION}" stroke-width="1.6"/>'
            f'<polygon points="{pts}" fill="{VIOLATION}"/></g>')


def _summary(view: View, top: float, row_h: float, rows: int, x, max_actions: int) -> str:
    """Per-device totals for a schedule too large to draw action by action."""
    g, s = view.graph, view.schedule
    why = (f"{g.n} actions, more than the {max_actions} drawn one by one" if g.n > max_actions
           else f"{s.devices} devices, more than the {MAX_DEVICES} drawn one by one")
    what = "shade: the share of each time bin spent computing" if view.timed else "bar: the order's length"
    out = [f'<text x="{LEFT}" y="12" class="sv-summary">summary ({why}); {what}</text>']
    if rows == 1 and s.devices > 1:
        total = view.span * s.devices
        share = sum(view.timeline.busy()) / total if view.timed and total > 0 else 1.0
        out.append(f'<text x="{LEFT - 6}" y="{_n(top + row_h / 2 + 3.5)}" text-anchor="end">all</text>'
                   f'<rect x="{LEFT}" y="{_n(top + 2)}" width="{_n((WIDTH - LEFT - RIGHT) * share)}" '
                   f'height="{_n(row_h - 4)}" fill="{COLOURS["F"][0]}"/>')
        return "".join(out)
    busy = view.timeline.busy()
    bins = max(1, min(200, max_actions // max(1, s.devices)))
    width = (WIDTH - LEFT - RIGHT) / bins
    for d in range(s.devices):
        y = top + d * row_h
        n = g.starts[d + 1] - g.starts[d]
        out.append(f'<text x="{LEFT - 6}" y="{_n(y + row_h / 2 + 3.5)}" text-anchor="end" '
                   f'class="sv-device" data-device="{d}">dev {d}</text>')
        if not view.timed:
            out.append(f'<rect x="{LEFT}" y="{_n(y + 2)}" width="{_n(x(n) - LEFT)}" height="{_n(row_h - 4)}" '
                       f'fill="{COLOURS["F"][0]}" class="sv-busy"><title>device {d}: {n} actions'
                       "</title></rect>")
            continue
        for b, share in enumerate(_busy_bins(view, d, bins)):
            if share > 0:
                out.append(f'<rect x="{_n(LEFT + b * width)}" y="{_n(y + 2)}" width="{_n(width)}" '
                           f'height="{_n(row_h - 4)}" fill="{_shade(COLOURS["F"][0], 0, 1)}" '
                           f'fill-opacity="{share:.2f}" shape-rendering="crispEdges" class="sv-busy"/>')
        out.append(f'<rect x="{LEFT}" y="{_n(y + 2)}" width="{WIDTH - LEFT - RIGHT}" height="{_n(row_h - 4)}" '
                   f'fill="none" stroke="#ccc" stroke-width="0.5"><title>device {d}: {n} actions, busy '
                   f"{fmt(busy[d])} of {fmt(view.span)}</title></rect>")
    return "".join(out)


def _busy_bins(view: View, d: int, bins: int) -> list[float]:
    """The share of each of ``bins`` equal time bins that device ``d`` spends computing."""
    span = view.span
    if not span > 0:
        return [0.0] * bins
    width = span / bins
    out = [0.0] * bins
    start, end = view.timeline.start, view.end
    for i in view.device_range(d):
        a, b = start[i], end[i]
        k = min(bins - 1, int(a / width))
        while a < b and k < bins:
            hi = min(b, (k + 1) * width)
            out[k] += max(0.0, hi - a)
            a = hi
            k += 1
    return [min(1.0, v / width) for v in out]


def envelope(steps: Sequence[tuple[float, float]], span: float, bins: int) -> list[tuple[float, float]]:
    """A step function (``(time, value)`` pairs in time order, each value holding until the
    next time) reduced to ``bins`` equal bins over ``[0, span]``, each the largest value
    taken inside it: the peaks survive, the size is bounded."""
    if not steps or bins < 1 or not span > 0:
        return list(steps[:1])
    out = []
    j, n = 0, len(steps)
    cur = steps[0][1]
    width = span / bins
    for b in range(bins):
        lo, hi = b * width, (b + 1) * width
        while j < n and steps[j][0] <= lo:  # what is in force as the bin opens
            cur = steps[j][1]
            j += 1
        peak = cur
        while j < n and (steps[j][0] < hi or b == bins - 1):
            cur = steps[j][1]
            peak = max(peak, cur)
            j += 1
        out.append((lo, peak))
    return out


def _memory_panel(view: View, top: float, x, span: float) -> str:
    mem = view.timeline.memory()
    series = [_settled(st) for st in mem.series or []]
    D = len(series)
    limit = view.timeline.memory_model.limit
    note = ""
    bins = max(50, MAX_MEMORY_POINTS // max(1, min(D, MAX_DEVICES)))
    if D > MAX_DEVICES:  # one line: the largest over all devices, per bin
        binned = [envelope(st, span, bins) for st in series]
        series = [[(t, max(b[k][1] for b in binned if k < len(b))) for k, (t, _) in enumerate(binned[0])]]
        note = f" (the largest over all {D} devices, peak per bin of {fmt(span / bins)} time units)"
    elif sum(len(st) for st in series) > MAX_MEMORY_POINTS:
        series = [envelope(st, span, bins) for st in series]
        note = f" (peak per bin of {fmt(span / bins)} time units)"
    peak = max([m for st in series for _, m in st] + [limit or 0.0, 0.0])
    ymax = peak * 1.08 if peak > 0 else 1.0
    h = MEMORY_HEIGHT

    def y(m: float) -> float:
        return top + h - m / ymax * h

    out = [f'<g class="sv-memory"><text x="{LEFT}" y="{_n(top - 4)}">memory per device over time'
           f"{escape(note)}</text>",
           f'<line x1="{LEFT}" y1="{_n(top + h)}" x2="{WIDTH - RIGHT}" y2="{_n(top + h)}" stroke="#333"/>',
           f'<line x1="{LEFT}" y1="{_n(top)}" x2="{LEFT}" y2="{_n(top + h)}" stroke="#333"/>']
    for m in nice_ticks(ymax, 4):
        out.append(f'<text x="{LEFT - 6}" y="{_n(y(m) + 3.5)}" text-anchor="end">{_short(m)}</text>')
    for t in nice_ticks(span, 10):
        out.append(f'<text x="{_n(x(t))}" y="{_n(top + h + 14)}" text-anchor="middle">{_short(t)}</text>')
    for d, st in enumerate(series):
        if not st:
            continue
        path = [f"M{_n(x(st[0][0]))} {_n(y(st[0][1]))}"]
        for (_, m), (t1, m1) in zip(st, st[1:]):
            path.append(f"H{_n(x(t1))}V{_n(y(m1))}" if m1 != m else f"H{_n(x(t1))}")
        path.append(f"H{_n(x(span))}")
        colour = _device_colour(d, len(series)) if len(series) > 1 else _TAB10[0]
        width = 1.0 + (1.3 * (len(series) - 1 - d) / (len(series) - 1) if 1 < len(series) <= 8 else 0.0)
        out.append(f'<path d="{"".join(path)}" fill="none" stroke="{colour}" stroke-width="{width:.2f}" '
                   f'class="sv-memory-line" data-device="{d}"><title>device {d}: peak '
                   f"{fmt(max(m for _, m in st))}</title></path>")
    if limit is not None:
        out.append(f'<line x1="{LEFT}" y1="{_n(y(limit))}" x2="{WIDTH - RIGHT}" y2="{_n(y(limit))}" '
                   f'stroke="{VIOLATION}" stroke-dasharray="6 4" stroke-width="1.2" class="sv-limit"/>'
                   f'<text x="{WIDTH - RIGHT}" y="{_n(y(limit) - 3)}" text-anchor="end" '
                   f'fill="{VIOLATION}">limit {_short(limit)}</text>')
    # the device colours, when there are few enough to name
    if 1 < len(series) <= 16:
        for d in range(len(series)):
            lx = WIDTH - RIGHT - (len(series) - d) * 52
            out.append(f'<line x1="{lx}" y1="{_n(top - 7.5)}" x2="{lx + 14}" y2="{_n(top - 7.5)}" '
                       f'stroke="{_device_colour(d, len(series))}" stroke-width="2"/>'
                       f'<text x="{lx + 17}" y="{_n(top - 4)}">dev {d}</text>')
    out.append("</g>")
    return "".join(out)


def _settled(steps: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The steps with only the last value at each time: a value that holds for no time (a
    backward's free and the next forward's allocation at the same instant) draws as a
    spike, not a level; the peaks are in the per-device table."""
    out: list[tuple[float, float]] = []
    for t, m in steps:
        if out and out[-1][0] == t:
            out[-1] = (t, m)
        else:
            out.append((t, m))
    return out


# --------------------------------------------------------------------------- the display hooks


def _install_views() -> None:
    """Give :class:`Schedule` and :class:`Report` their Jupyter view (``_repr_html_``, the
    method IPython's display looks for).  The model and the diagnostics sit below the
    renderer and import nothing from it; the renderer, which knows how to draw them, fills
    their display hook once, when it is imported, which ``import schedverify`` does."""
    for cls, view in ((Schedule, schedule_html), (Report, report_html)):
        def _repr_html_(self, _view=view) -> str:
            return _view(self)

        _repr_html_.__doc__ = f"Jupyter's view of a {cls.__name__} (schedverify/render/notebook.py)."
        _repr_html_.__qualname__ = f"{cls.__name__}._repr_html_"
        cls._repr_html_ = _repr_html_  # type: ignore[union-attr]


_install_views()
