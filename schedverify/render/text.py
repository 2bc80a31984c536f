"""Text renderings: the device x step grid, the report, the per-device table."""

from __future__ import annotations

from typing import Iterable

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


def device_table(report: Report) -> str:
    m = report.metrics
    head = ("device", "busy", "idle", "peak in-flight", "peak memory")
    rows = [(str(d.device), fmt(d.busy if m.makespan is not None else None),
             fmt(d.idle if m.makespan is not None else None), str(d.peak_inflight), fmt(d.peak_memory))
            for d in m.devices]
    widths = [max(len(h), *(len(r[k]) for r in rows)) for k, h in enumerate(head)]
    out = ["  ".join(h.rjust(w) for h, w in zip(head, widths))]
    out += ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in rows]
    return "\n".join(out)


def report_text(source: str, schedule: Schedule, report: Report, *, show_grid: bool = False,
                max_path: int = 12) -> str:
    s = schedule
    what = f"{s.name + ': ' if s.name else ''}{s.devices} devices, {s.stages} stages, " \
           f"{s.microbatches} microbatches, {s.num_actions} actions"
    n = len(report.violations) + report.truncated
    verdict = report.verdict.value.upper()
    head = f"{source}: {verdict}" + (f", {n} violation{'s' * (n != 1)}" if n else "") + f"  ({what})"
    lines = [head]
    for v in report.violations:
        lines.append(f"  {v.code.code} {v.code.slug}: {v.locations[0] if v.locations else ''}"
                     f"{': ' if v.locations else ''}{v.message}")
        for loc in v.locations[1:]:
            lines.append(f"      see {loc}")
        for step in v.witness:
            lines.append(f"      {step}")
    if report.truncated:
        lines.append(f"  ... and {report.truncated} more violations (raise --max-violations to see them)")
    if report.reason:
        lines.append(f"  reason: {report.reason}")
    m = report.metrics
    if m is not None:
        c = m.costs
        if m.makespan is not None:
            costs = f"  (costs F={fmt(c.F)} B={fmt(c.B)} I={fmt(c.I)} W={fmt(c.W)} comm={fmt(c.comm)})" if c else ""
            lines.append(f"  makespan {fmt(m.makespan)}{costs}")
            lines.append(f"  bubble fraction {m.bubble_fraction:.2%} (idle share of device time: "
                         f"1 - sum(busy) / (D * T))")
            lines.append(f"  bubble ratio {m.bubble_ratio:.4g} (idle over ideal time: (T - T_ideal) / T_ideal)")
        else:
            lines.append("  no timing: the schedule cannot run to the end (memory peaks below follow the order)")
        lines.append("  " + device_table(report).replace("\n", "\n  "))
        if m.critical_path:
            path = list(m.critical_path)
            shown = path if len(path) <= max_path else path[: max_path // 2] + ["..."] + path[-max_path // 2:]
            lines.append(f"  critical path ({len(path)} actions): " + " -> ".join(shown))
    if show_grid:
        marks = {(loc.device, loc.position) for v in report.violations for loc in v.locations
                 if loc.position is not None}
        lines.append("")
        lines.append(grid(schedule, marks))
    return "\n".join(lines)
