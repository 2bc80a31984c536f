"""A plan as a table: the one set of rows that the text report, the JSON-free notebook view
and anything else that shows a plan render (so that they always agree)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..units import format_bytes, format_time

if TYPE_CHECKING:  # the planner shows its plans with this module
    from .planner import Candidate, Plan

HEADERS = ("rank", "schedule", "stages", "step time", "bubble", "peak memory", "headroom", "status")


def rows(plan: Plan) -> list[tuple[str, ...]]:
    """One row of :data:`HEADERS` per candidate, in the plan's order; the rank counts only the
    candidates that fit."""
    out: list[tuple[str, ...]] = []
    rank = 0
    for c in plan.candidates:
        rank += c.fits
        out.append((
            str(rank) if c.fits else "-",
            c.label,
            "-" if c.stages is None else str(c.stages),
            "-" if c.step_time is None else format_time(c.step_time),
            "-" if c.bubble_fraction is None else f"{100 * c.bubble_fraction:.1f}%",
            "-" if c.peak is None else format_bytes(c.peak),
            _headroom(c, plan.memory_limit),
            status(c),
        ))
    return out


def _headroom(c: Candidate, limit: int | None) -> str:
    if c.peak is None or limit is None:
        return "-"
    left = limit - c.peak
    return format_bytes(left) if left >= 0 else "-" + format_bytes(-left)


def status(c: Candidate) -> str:
    """The status column: what became of the candidate, with the search's proof state."""
    text = c.status
    if c.search is not None and c.search.get("status") in ("optimal", "feasible") and c.step_time is not None:
        gap = c.search.get("gap_s")
        proof = "optimal (proven)" if c.search["status"] == "optimal" else (
            f"gap {format_time(gap)}" if gap is not None else "not proven")
        text += f", {proof}"
    return text


def text(plan: Plan, *, title: str = "", written: str | None = None, framework: str = "torchtitan",
         hint: Sequence[str] | None = None) -> str:
    """The plan as the text ``schedverify plan`` prints; ``hint``: how to run the winner on
    ``framework`` (default: torchtitan's options for the CSV)."""
    table = [HEADERS, *rows(plan)]
    widths = [max(len(r[k]) for r in table) for k in range(len(HEADERS))]
    right = {0, 2, 3, 4, 5, 6}
    lines = [title] if title else []
    for r in table:
        cells = [r[k].rjust(widths[k]) if k in right else r[k].ljust(widths[k]) for k in range(len(r))]
        lines.append("  " + "  ".join(cells).rstrip())
    reasons = [(c.label, c.reason) for c in plan.candidates if not c.fits and c.reason]
    if reasons:
        lines.append("  why not:")
        lines += [f"    {label}: {why}" for label, why in reasons]
    win = plan.winner
    if win is None:
        lines.append(f"  no schedule fits the memory limit and runs on {framework}")
    else:
        lines.append(f"  winner: {win.label}: {format_time(win.step_time or 0)} per step, "
                     f"peak {format_bytes(win.peak or 0)}")
        lines.append("    peak memory per device: " + ", ".join(
            f"{d}: {format_bytes(v)}" for d, v in enumerate(win.peak_memory)))
        lines += [f"    {h}" for h in (hint if hint is not None else [torchtitan_hint(win, written)])]
    lines += [f"  note: {n}" for n in plan.notes]
    return "\n".join(lines)


def torchtitan_hint(c: Candidate, written: str | None) -> str:
    """How to run the winner with torchtitan: the CSV and the placement torchtitan must use."""
    csv = written or "FILE.csv (give -o FILE.csv)"
    from .torchtitan import flags

    return flags(c, csv)


def plan_html(plan: Plan) -> str:
    """A :class:`~schedverify.plan.planner.Plan` as HTML, what ``Plan._repr_html_`` shows: the
    ranked table (the winner in bold), why each refused schedule was refused, and the notes;
    the same rows as the text report, in the cells of :func:`schedverify.render.notebook.table_html`."""
    from ..render.notebook import escape, table_html

    win = plan.winner
    found = rows(plan)
    best = [k for k, c in enumerate(plan.candidates) if c is win]
    title = f"plan: {plan.devices} pipeline devices, {plan.microbatches} microbatches" + (
        f", memory limit {format_bytes(plan.memory_limit)}" if plan.memory_limit else "")
    out = ['<div class="schedverify-plan">', table_html(HEADERS, found, title, highlight=best)]
    if win is None:
        out.append("<p>No schedule fits the memory limit and runs on torchtitan.</p>")
    else:
        out.append(f"<p>winner: <b>{escape(win.label)}</b>; {escape(torchtitan_hint(win, None))}</p>")
    refused = [(c.label, c.reason) for c in plan.candidates if not c.fits and c.reason]
    if refused:
        out.append(table_html(("schedule", "why not"), refused, "why not"))
    out += [f"<p>note: {escape(n)}</p>" for n in plan.notes]
    out.append("</div>")
    return "\n".join(out)
