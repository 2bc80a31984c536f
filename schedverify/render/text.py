"""Text renderings: the device x step grid, the report, the per-device table, and the timed
device x time timeline that ``schedverify show`` prints."""

from __future__ import annotations

import math
from collections.abc import Iterable

from ..diagnostics import Report
from ..model import Schedule


def fmt(x) -> str:
    """A number as a person reads it: 12, 12.5, 0.333."""
    if x is None:
        return "-"
    if isinstance(x, float):
        if x.is_integer():
            return str(int(x))
        return f"{x:.4g}"
    return str(x)


def plural(count: int, word: str) -> str:
    """``1 device``, ``4 devices``, ``1 microbatch``, ``8 microbatches``."""
    if count == 1:
        return f"1 {word}"
    return f"{count} {word}{'es' if word.endswith(('ch', 's')) else 's'}"


def costs_text(costs) -> str:
    """``F=1 B=2 I=1 W=1 comm=0``, plus any overlap or communication cost that is set;
    a per-stage cost reads ``F=1:1:2:2``, as ``--costs`` takes it."""
    from ..model import Costs

    default = Costs()
    shown = []
    for key in ("F", "B", "I", "W", "OVERLAP_F_B", "SEND_F", "RECV_F", "SEND_B", "RECV_B", "comm"):
        value = getattr(costs, key)
        if value is None or (key not in ("F", "B", "I", "W", "comm") and value == getattr(default, key)):
            continue
        shown.append(f"{key}=" + (":".join(map(fmt, value)) if isinstance(value, tuple) else fmt(value)))
    return " ".join(shown)


def grid(schedule: Schedule, marks: Iterable[tuple[int, int]] = (), *, max_steps: int = 400) -> str:
    """The order as a grid: one row per device, one column per position; ``marks`` (device,
    position) pairs are flagged with ``!``, and ``.`` is an idle slot."""
    marked = set(marks)
    rows = schedule.order
    steps = max((len(r) for r in rows), default=0)
    shown = min(steps, max_steps)
    width = max([1] + [len(str(a)) for r in rows for a in r[:shown] if a is not None]) + 1 + bool(marked)
    lines = []
    label = len(f"dev {len(rows) - 1}")
    for d, row in enumerate(rows):
        cells = []
        for p in range(shown):
            a = row[p] if p < len(row) else None
            text = "." if a is None else str(a)
            if (d, p) in marked:
                text += "!"
            cells.append(text.ljust(width))
        lines.append(f"{f'dev {d}'.rjust(label)} | " + "".join(cells).rstrip())
    if shown < steps:
        lines.append(f"... {steps - shown} more positions not shown")
    if marked:
        lines.append("! = involved in a violation")
    return "\n".join(lines)


def unit_suffixes(schedule: Schedule | None) -> tuple[str, str]:
    """(" ms", " GiB")-like suffixes for the schedule's time and memory numbers, "" when they
    are in abstract units (a file without ``"units"``)."""
    u = schedule.units if schedule is not None else None
    if u is None:
        return "", ""
    return (f" {u.time}" if u.time else "", f" {u.memory}" if u.memory else "")


def device_table(report: Report, schedule: Schedule | None = None) -> str:
    m = report.metrics
    t, mem = (f" ({u.strip()})" if u else "" for u in unit_suffixes(schedule))
    head = ("device", "busy" + t, "idle" + t, "peak in-flight", "peak memory" + mem)
    rows = [(str(d.device), fmt(d.busy), fmt(d.idle), str(d.peak_inflight), fmt(d.peak_memory))
            for d in m.devices]
    widths = [max(len(h), *(len(r[k]) for r in rows)) for k, h in enumerate(head)]
    out = ["  ".join(h.rjust(w) for h, w in zip(head, widths))]
    out += ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in rows]
    return "\n".join(out)


#: how each communication semantics is named in a report (docs/spec.md 3.5 and 8)
_SEMANTICS_TEXT = {
    "eager": "abstract: a send never blocks, a listed RECV blocks its device",
    "rendezvous": "abstract: a send also waits until its RECV is posted",
    "torch": "PyTorch's runtime over gloo, docs/spec.md 8",
    "torch-nccl": "PyTorch's runtime over NCCL, docs/spec.md 8",
}


def printable(text: str) -> str:
    """``text`` with every control, format or unpaired surrogate character escaped
    (``\x1b``, ``\u200e``, ``\ud800``), so that a string from a file (a schedule's name, a
    path) can neither forge a line of the report (carriage returns, ANSI escapes) nor fail
    to print."""
    if text.isprintable():
        return text
    out = []
    for ch in text:
        if ch.isprintable() or ch == " ":
            out.append(ch)
        else:
            code = ord(ch)
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}")
    return "".join(out)


def describe(s: Schedule) -> str:
    """``name: D devices, S stages, M microbatches, N actions`` (the name made printable)."""
    return (f"{printable(s.name) + ': ' if s.name else ''}" + ", ".join(
        plural(k, w) for k, w in ((s.devices, "device"), (s.stages, "stage"),
                                  (s.microbatches, "microbatch"), (s.num_actions, "action"))))


def _framework_terms(s: Schedule):
    """For a schedule whose metadata names Megatron-LM or DeepSpeed: a function giving the
    lines that name a violation's actions in that framework's own terms
    (:func:`schedverify.frameworks.terms`); else None."""
    from ..frameworks import terms

    term = terms(s)
    if term is None:
        return None
    who = printable(f"{s.metadata.get('framework')} {s.metadata.get('version', '')}".strip())

    def lines(locations) -> list[str]:
        out: list[str] = []
        for loc in locations:
            t = term(loc.action)
            line = f"      {who}: {printable(t)}" if t is not None else None
            if line is not None and line not in out:
                out.append(line)
        return out

    return lines


def report_text(source: str, schedule: Schedule, report: Report, *, show_grid: bool = False,
                max_path: int = 12, framework_memory=None) -> str:
    """The text report.  ``framework_memory``: the schedule's memory in its framework's terms
    (:func:`schedverify.frameworks.memory.memory`; default: computed without a model) where
    its metadata names one."""
    s = schedule
    what = describe(s)
    source = printable(source)
    n = len(report.violations) + report.truncated
    verdict = report.verdict.value.upper()
    least = "" if report.truncated_exact else "at least "
    head = f"{source}: {verdict}" + (f", {least}{n} violation{'s' * (n != 1)}" if n else "") + f"  ({what})"
    lines = [head]
    sem = report.comm_semantics
    if report.profile is not None:
        lines.append(f"  runtime: {sem}: {printable(report.profile.describe())}")
    elif sem is not None and (sem in _SEMANTICS_TEXT and (s.has_explicit_comm or sem.startswith("torch"))):
        lines.append(f"  communication: {sem} ({_SEMANTICS_TEXT[sem]})")
    terms = _framework_terms(s) if report.violations else None
    for v in report.violations:
        lines.append(f"  {v.code.code} {v.code.slug}: {v.locations[0] if v.locations else ''}"
                     f"{': ' if v.locations else ''}{v.message}")
        for loc in v.locations[1:]:
            lines.append(f"      see {loc}")
        for step in v.witness:
            lines.append(f"      {step}")
        if terms is not None:
            lines.extend(terms(v.locations))
    if report.truncated:
        lines.append(f"  ... and {least}{report.truncated} more violations (raise --max-violations to see them)")
    for w in report.warnings:
        lines.append(f"  warning: {w}")
    if report.reason:
        lines.append(f"  reason: {report.reason}")
    m = report.metrics
    if m is not None:
        c = m.costs
        if m.makespan is not None:
            tu = unit_suffixes(s)[0].strip()
            costs = f"  (costs{' in ' + tu + ':' if tu else ''} {costs_text(c)})" if c else ""
            lines.append(f"  makespan {fmt(m.makespan)}{unit_suffixes(s)[0]}{costs}")
            lines.append(f"  bubble fraction {m.bubble_fraction:.2%} (idle share of device time: "
                         f"1 - sum(busy) / (D * T))")
            lines.append(f"  bubble ratio {m.bubble_ratio:.4g} (idle over ideal time: (T - T_ideal) / T_ideal)")
        else:
            lines.append("  no timing: the schedule cannot run to the end (memory peaks below follow the order)")
        lines.append("  " + device_table(report, s).replace("\n", "\n  "))
        if framework_memory is None:
            from ..frameworks.memory import memory

            framework_memory = memory(s)
        if framework_memory is not None:
            lines.extend("  " + printable(line) for line in framework_memory.lines())
        length, shown = m.critical_path_shown(max_path)
        if length:
            lines.append(f"  critical path ({length} actions): " + " -> ".join(shown))
    if show_grid:
        marks = {(loc.device, loc.position) for v in report.violations for loc in v.locations
                 if loc.position is not None}
        lines.append("")
        lines.append(grid(schedule, marks))
    return "\n".join(lines)


# --------------------------------------------------------------------------- timed timeline

#: How each drawing class looks in the terminal: (letter, fill character, legend text).
TEXT_STYLE = {
    "F": ("F", "-", "forward"),
    "B": ("B", "=", "backward (full)"),
    "I": ("I", "~", "input-grad backward"),
    "W": ("W", "+", "weight-grad backward"),
    "OVERLAP_F_B": ("X", "#", "overlapped F+B"),
    "SEND": ("s", ":", "send"),
    "RECV": ("r", ":", "recv"),
    "BOOKKEEPING": ("*", "*", "unshard/reshard/reduce-grad"),
}
IDLE = "."
MARK = "!"


def _label(action, style_key: str, level: int, with_stage: bool) -> str:
    """An action's label at a level of detail: 0 names the stage where it is needed
    (``3F1``), 1 is TYPE+microbatch (``F1``), 2 the letter alone (``F``)."""
    letter = TEXT_STYLE[style_key][0]
    if level >= 2:
        return letter
    if action.sub is not None:
        f, b = action.sub[0], action.sub[1]
        if level == 0 and with_stage:
            return f"{f.stage}F{f.microbatch}/{b.stage}{b.kind}{b.microbatch}"
        return f"F{f.microbatch}/{b.kind}{b.microbatch}"
    if action.microbatch is None:
        return str(action) if level == 0 else letter
    if level == 0 and with_stage:
        return f"{action.stage}{letter}{action.microbatch}"
    return f"{letter}{action.microbatch}"


def _nice_step(span: float, cols: int, min_gap: int = 8) -> float:
    """A round time step (1, 2, 5 x 10^k) whose ticks are at least ``min_gap`` columns apart."""
    if span <= 0 or cols <= 0:
        return 1.0
    raw = span * min_gap / cols
    k = 10.0 ** math.floor(math.log10(raw))
    for m in (1, 2, 5, 10):
        if m * k >= raw:
            return m * k
    return 10 * k


def column_scale(span: float, cols: int) -> float:
    """The smallest round time per column (1, 1.5, 2, 2.5, 3, 4, 5, 6, 8 x 10^k) that fits
    ``span`` in ``cols`` columns: round scales keep equal actions equally wide."""
    if span <= 0:
        return 1.0
    raw = span / max(1, cols)
    k = 10.0 ** math.floor(math.log10(raw))
    for m in (1, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10):
        if m * k >= raw * (1 - 1e-12):
            return m * k
    return 10 * k


def _ruler(span: float, cols: int) -> str:
    step = _nice_step(span, cols)
    line = [" "] * (cols + 8)
    t = 0.0
    n = 0
    while t <= span + 1e-9:
        c = int(round(t / span * cols)) if span > 0 else 0
        text = fmt(float(t))
        if all(ch == " " for ch in line[max(0, c - 1): c + len(text) + 1]):
            line[c: c + len(text)] = text
        n += 1
        t = n * step
    return "".join(line).rstrip()


def timeline_rows(view, cols: int, span: float | None = None) -> tuple[list[str], int | None]:
    """The rows of the timed picture and the label level used (None: letters only).

    ``cols`` columns stand for ``span`` time (default the makespan).  Each column shows the
    action that fills most of it; a column less than half busy is idle (``.``); a column
    shared by short actions of different kinds shows the main one's letter in lower case;
    an instant action (zero cost, such as a free SEND) shows only in an otherwise idle
    column; actions a violation names carry ``!``.

    Runs are labelled (``F3`` padded with the kind's fill, ``F3--``) when every action is
    two columns wide or more, otherwise every column shows its action's letter: labelling
    some actions and not their neighbours would draw a pattern that is not there.  One label
    level (with stage, TYPE+microbatch, letter) is chosen for the whole picture: the most
    detailed that fits at least 90% of the runs.
    """
    s = view.schedule
    span = view.span if span is None else span
    start, end, acts = view.start, view.end, view.graph.acts
    from .view import kind_key

    scale = span / cols if span > 0 else 1.0
    eps = 1e-9 * scale
    shortest = min((end[i] - start[i] for i in range(len(acts)) if end[i] - start[i] > eps),
                   default=scale)
    labelled = shortest >= 2 * scale - eps
    layouts = []  # per device: (cells, runs [(c, e, i, mixed)])
    for d in range(s.devices):
        busy = [0.0] * cols
        best = [0.0] * cols
        owner = [-1] * cols
        kinds: list[set | None] = [None] * cols
        instant = [-1] * cols
        for i in view.device_range(d):
            t0, t1 = start[i], end[i]
            c0 = min(cols - 1, max(0, int(math.floor(t0 / scale + 1e-9))))
            if t1 - t0 <= eps:
                if instant[c0] < 0:
                    instant[c0] = i
                continue
            c1 = min(cols, max(c0 + 1, int(math.ceil(t1 / scale - 1e-9))))
            for c in range(c0, c1):
                cover = min(t1, (c + 1) * scale) - max(t0, c * scale)
                if cover <= eps:
                    continue
                busy[c] += cover
                seen = kinds[c]
                if seen is None:
                    kinds[c] = {acts[i].kind}
                else:
                    seen.add(acts[i].kind)
                if cover > best[c] + eps:
                    best[c], owner[c] = cover, i
        cells = [IDLE] * cols
        runs = []
        c = 0
        while c < cols:
            i = owner[c]
            if i < 0 or busy[c] < 0.5 * scale - eps:
                j = instant[c]
                if j >= 0:
                    cells[c] = MARK if j in view.marked else TEXT_STYLE[kind_key(acts[j])][0]
                c += 1
                continue
            e = c
            while e < cols and owner[e] == i and busy[e] >= 0.5 * scale - eps:
                e += 1
            # a run's columns are covered (owner >= 0), so each has its set of kinds
            mixed = all(len(kinds[k] or ()) > 1 and best[k] < scale - eps for k in range(c, e))
            runs.append((c, e, i, mixed))
            c = e
        layouts.append((cells, runs))

    def text_of(i: int, level: int) -> str:
        a = acts[i]
        label = _label(a, kind_key(a), level, view.needs_stage_label(i))
        return label + MARK if i in view.marked else label

    level = None
    if labelled:
        plain = [(e - c, i) for _, runs in layouts for c, e, i, mixed in runs if not mixed]
        level = 2
        for lv in (0, 1):
            if sum(len(text_of(i, lv)) <= w for w, i in plain) >= 0.9 * len(plain):
                level = lv
                break
    rows = []
    for cells, runs in layouts:
        for c, e, i, mixed in runs:
            width = e - c
            a = acts[i]
            key = kind_key(a)
            letter, fill = TEXT_STYLE[key][0], TEXT_STYLE[key][1]
            marked = i in view.marked
            if mixed:
                run = (letter.lower() if letter.isalpha() else letter) * width
            elif level is None:
                run = letter * width
            else:
                label = next((x for x in (text_of(i, lv) for lv in range(level, 3))
                              if len(x) <= width), letter)
                run = label + (MARK if marked else fill) * width
            run = run[:width]
            if marked and MARK not in run:
                run = run[:-1] + MARK
            cells[c:e] = run
        rows.append("".join(cells))
    return rows, level


def _legend(view, level: int | None) -> str:
    from .view import kind_key

    present = {kind_key(a) for a in view.graph.acts}
    parts = [f"{TEXT_STYLE[k][0]}{TEXT_STYLE[k][1] * 2} {TEXT_STYLE[k][2]}"
             for k in TEXT_STYLE if k in present]
    parts.append(f"{IDLE * 3} idle (bubble)")
    parts.append("lower case: a column shared by short actions of several kinds")
    if view.marked:
        parts.append(f"{MARK} involved in a violation")
    if level is None:
        labels = "; each column shows its action's letter (widen with --width for labels)"
    elif level == 0 and any(view.needs_stage_label(i) for i in range(view.graph.n)):
        labels = "; labels are TYPE+microbatch, stage first where a device holds several stages"
    elif level <= 1:
        labels = "; labels are TYPE+microbatch"
    else:
        labels = "; labels are the TYPE letter (widen with --width for microbatches)"
    return "legend: " + ", ".join(parts) + labels


def headline(source: str, view) -> str:
    """``FILE: VERDICT, n violations  (name: D devices, S stages, M microbatches, N actions)``."""
    s, report = view.schedule, view.report
    what = describe(s)
    source = printable(source)
    n = len(report.violations) + report.truncated
    verdict = report.verdict.value.upper()
    return f"{source}: {verdict}" + (f", {n} violation{'s' * (n != 1)}" if n else "") + f"  ({what})"


def _violation_lines(report, limit: int = 20) -> list[str]:
    lines = []
    for v in report.violations[:limit]:
        where = f"{v.locations[0]}: " if v.locations else ""
        lines.append(f"  {v.code.code} {v.code.slug}: {where}{v.message}")
        for step in v.witness:
            lines.append(f"      {step}")
    more = len(report.violations) - limit + report.truncated
    if more > 0:
        lines.append(f"  ... and {more} more violations (schedverify check lists them all)")
    return lines


def timeline_text(source: str, view, width: int = 100, *, max_path: int = 12) -> str:
    """The device x time picture of a :class:`~schedverify.render.view.View` in ``width``
    columns: headline, metrics, a time ruler, one row per device with its busy share and
    peak memory, the legend, violations and the critical path.  An untimed view (a
    deadlock) falls back to the order grid with the offending actions marked."""
    s, report = view.schedule, view.report
    lines = [headline(source, view)]
    if not view.timed:
        lines.append(f"  no timing: {view.untimed_reason}; showing the order instead "
                     "(one column per position, not a timeline)")
        lines += _violation_lines(report)
        lines.append("")
        lines.append(_fitted_grid(view, width))
        return "\n".join(lines)
    m = report.metrics
    c = m.costs
    tl = view.timeline
    mem = tl.memory()
    busy = tl.busy()
    span = view.span
    label_w = len(f"dev {s.devices - 1}")
    tu, mu = unit_suffixes(s)
    suffixes = [f" {busy[d] / span:4.0%} busy, mem {fmt(mem.peak_memory[d])}{mu}" if span > 0
                else f"    - busy, mem {fmt(mem.peak_memory[d])}{mu}" for d in range(s.devices)]
    suffix_w = max(len(x) for x in suffixes)
    avail = max(10, width - label_w - 3 - suffix_w - 1)
    scale = column_scale(span, avail)
    cols = max(1, min(avail, math.ceil(span / scale - 1e-9)))
    span_drawn = cols * scale
    costs = f" (costs{' in ' + tu.strip() + ':' if tu else ''} {costs_text(c)})" if c else ""
    lines.append(f"  makespan {fmt(m.makespan)}{tu}{costs}")
    lines.append(f"  bubble fraction {m.bubble_fraction:.2%} (1 - sum(busy) / (D * T)), "
                 f"bubble ratio {m.bubble_ratio:.4g} ((T - T_ideal) / T_ideal)")
    peak_dev = max(range(s.devices), key=lambda d: mem.peak_memory[d]) if s.devices else 0
    limit = view.timeline.memory_model.limit
    lines.append(f"  peak memory {fmt(m.peak_memory)}{mu} (device {peak_dev}), "
                 f"peak in flight {m.peak_inflight}"
                 + (f", limit {fmt(limit)}{mu}" if limit is not None else "")
                 + (f"; 1 column = {fmt(scale)}{tu or ' time units'}" if span > 0 else ""))
    lines.append("")
    lines.append(" " * (label_w + 2) + _ruler(span_drawn, cols))
    rows, level = timeline_rows(view, cols, span_drawn)
    for d, row in enumerate(rows):
        lines.append(f"{f'dev {d}'.rjust(label_w)} |{row}|{suffixes[d]}")
    lines.append("")
    lines.append(_legend(view, level) + "; right: busy share and peak memory per device")
    if view.missing:
        lines.append("not drawn (missing): " + ", ".join(view.missing[:20])
                     + (" ..." if len(view.missing) > 20 else ""))
    lines += _violation_lines(report)
    length, shown = m.critical_path_shown(max_path)
    if length:
        lines.append(f"critical path ({length} actions): " + " -> ".join(shown))
    return "\n".join(lines)


def _fitted_grid(view, width: int) -> str:
    """The order grid with the violations' actions marked, cut to ``width`` columns."""
    s = view.schedule
    marks = [(view.graph.dev[i], view.graph.pos[i]) for i in view.marked]
    cell = max([1] + [len(str(a)) for r in s.order for a in r if a is not None]) + 1 + bool(marks)
    steps = max(1, (width - len(f"dev {s.devices - 1} | ")) // cell)
    return grid(s, marks, max_steps=steps)


def grid_text(source: str, view, width: int = 100) -> str:
    """``show --grid``: the headline, the order grid (one column per position, no timing)
    with the actions a violation names marked, and the violations."""
    lines = [headline(source, view), "  the order, one column per position (no timing; "
             "drop --grid for the timeline)", ""]
    lines.append(_fitted_grid(view, width))
    lines += _violation_lines(view.report)
    return "\n".join(lines)
