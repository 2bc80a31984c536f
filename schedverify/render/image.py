"""Gantt chart of a schedule's timeline (SVG, PNG or PDF) with memory over time.

The only module that imports matplotlib, and only inside :func:`render_image` (it is the
optional extra ``schedverify[plot]``).  It draws on a bare ``matplotlib.figure.Figure``,
never through pyplot, so it needs no display and leaves the caller's backend alone.

Top panel: one lane per device, one bar per action at its simulated start, coloured by
kind (F, B, I, W, overlapped F+B, communication, bookkeeping) and shaded by microbatch
(later microbatches lighter), labelled when the label fits, idle time hatched as bubbles,
the critical path outlined in black and joined by a line, and actions that a violation
names outlined in red.  Bottom panel: memory per device over time (docs/spec.md section 5) and
the limit.  A schedule that deadlocks has no timing: it is drawn by position in each
device's order, the cycle as red arrows, and the title says so.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import UsageError
from .view import View, kind_key, microbatch_of, stage_of

#: Kind -> (colour, legend text).  Colour-blind-safe hues (Okabe-Ito / seaborn muted).
COLOURS = {
    "F": ("#4c72b0", "F forward"),
    "B": ("#55a868", "B backward"),
    "I": ("#dd8452", "I input-grad"),
    "W": ("#8172b3", "W weight-grad"),
    "OVERLAP_F_B": ("#c44e9b", "F+B overlapped"),
    "SEND": ("#7f7f7f", "SEND"),
    "RECV": ("#b0b0b0", "RECV"),
    "BOOKKEEPING": ("#ccb974", "unshard/reshard/reduce"),
}
VIOLATION = "#d62728"
CRITICAL = "#111111"
FORMATS = ("svg", "png", "pdf")
INSTALL_HINT = 'drawing images needs matplotlib, which is not installed: pip install "schedverify[plot]"'

WIDTH_IN = 12.0
DEFAULT_DPI = 150


def _matplotlib():
    try:
        import matplotlib
        from matplotlib.figure import Figure
    except ImportError:
        raise UsageError(INSTALL_HINT) from None
    return matplotlib, Figure


def image_format(path) -> str:
    suffix = Path(str(path)).suffix.lower().lstrip(".")
    if suffix not in FORMATS:
        given = ("." + suffix) if suffix else "no extension"
        raise UsageError(f"-o {path}: cannot tell the image format from {given}; "
                         f"use a name ending in {', '.join('.' + f for f in FORMATS)}")
    return suffix


def figure_size(view: View) -> tuple[float, float]:
    """(width, height) in inches: a fixed width, a lane per device, and the memory panel."""
    gantt = 0.9 + 0.34 * max(1, view.schedule.devices)
    memory = 2.3 if view.timed else 0.0
    return WIDTH_IN, round(_top(view) + 0.45 + gantt + memory + _notes_height(view), 2)


def _top(view: View) -> float:
    """Inches above the Gantt panel: the title (two lines when untimed) and the legend."""
    return 0.7 + 0.2 * _title(view).count("\n")


def _notes_height(view: View) -> float:
    n = len(_notes(view))
    return 0.16 * n + 0.1 if n else 0.0


def pixel_size(view: View, dpi: float = DEFAULT_DPI) -> tuple[int, int]:
    """The size of the PNG that :func:`render_image` writes at ``dpi``."""
    w, h = figure_size(view)
    return int(round(w * dpi)), int(round(h * dpi))


def _shade(hex_colour: str, microbatch: int | None, microbatches: int) -> tuple[float, float, float]:
    """Mix the kind's colour with white: microbatch 0 full colour, the last one 55% strength."""
    r, g, b = (int(hex_colour[k:k + 2], 16) / 255 for k in (1, 3, 5))
    t = 0.0 if microbatch is None or microbatches <= 1 else 0.45 * min(1.0, microbatch / (microbatches - 1))
    return (r + (1 - r) * t, g + (1 - g) * t, b + (1 - b) * t)


def _rect(x0: float, x1: float, y: float, height: float) -> list[tuple[float, float]]:
    h = height / 2
    return [(x0, y - h), (x0, y + h), (x1, y + h), (x1, y - h)]


_SHORT = {"SEND_F": "sF", "RECV_F": "rF", "SEND_B": "sB", "RECV_B": "rB"}


def _label(action, level: int, with_stage: bool) -> str:
    """A bar's label: level 0 names the stage where needed (``3F1``), 1 is TYPE+microbatch
    (``F1``), 2 the microbatch alone (the colour says the type)."""
    if action.sub is not None:
        f, b = action.sub
        if level == 0 and with_stage:
            return f"{f.stage}F{f.microbatch}|{b.stage}{b.kind}{b.microbatch}"
        if level <= 1:
            return f"F{f.microbatch}|{b.kind}{b.microbatch}"
        return f"{f.microbatch}|{b.microbatch}"
    if action.microbatch is None:
        return str(action) if level == 0 else ""
    kind = _SHORT.get(action.kind, action.kind)
    if level == 0 and with_stage:
        return f"{action.stage}{kind}{action.microbatch}"
    if level <= 1:
        return f"{kind}{action.microbatch}"
    return str(action.microbatch)


def render_image(view: View, path, *, dpi: float = DEFAULT_DPI, title: str | None = None,
                 stream=None) -> Path:
    """Draw ``view`` to ``path`` (format from its extension: .svg, .png or .pdf), or, with
    ``stream`` (a binary file object), into that stream in ``path``'s format."""
    fmt = image_format(path)
    matplotlib, Figure = _matplotlib()
    from matplotlib.collections import PolyCollection
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    s, g = view.schedule, view.graph
    D = s.devices
    start, end = view.start, view.end
    span = view.span or 1.0
    w_in, h_in = figure_size(view)
    with matplotlib.rc_context({"svg.hashsalt": "schedverify", "svg.fonttype": "none",
                                "font.size": 9, "axes.titlesize": 10}):
        fig = Figure(figsize=(w_in, h_in), dpi=dpi)
        gantt_h = 0.9 + 0.34 * max(1, D)
        if view.timed:
            gs = fig.add_gridspec(2, 1, height_ratios=[gantt_h, 2.3],
                                  hspace=0.55 / ((gantt_h + 2.3) / 2))
            ax = fig.add_subplot(gs[0])
            axm = fig.add_subplot(gs[1], sharex=ax)
        else:
            ax = fig.add_subplot(1, 1, 1)
            axm = None
        fig.subplots_adjust(left=0.07, right=0.985, top=1 - _top(view) / h_in,
                            bottom=(0.45 + _notes_height(view)) / h_in)

        # ------------------------------------------------------------ bars
        height = 0.78
        ys, lefts, widths, colours, edges, lws = [], [], [], [], [], []
        for i, a in enumerate(g.acts):
            key = kind_key(a)
            ys.append(g.dev[i])
            lefts.append(start[i])
            widths.append(end[i] - start[i])
            colours.append(_shade(COLOURS[key][0], microbatch_of(a), s.microbatches))
            if i in view.marked:
                edges.append(VIOLATION)
                lws.append(2.0)
            else:
                edges.append("white")
                lws.append(0.5)
        # bubbles first, under everything
        gaps = [(d, a, b) for d in range(D) for a, b in view.idle(d)]
        if gaps:
            ax.add_collection(PolyCollection(
                [_rect(a, b, d, height) for d, a, b in gaps], facecolors="#f4f4f4",
                edgecolors="#c8c8c8", linewidths=0, hatch="////", zorder=1))
        ax.add_collection(PolyCollection(
            [_rect(lefts[k], lefts[k] + widths[k], ys[k], height) for k in range(len(ys))],
            facecolors=colours, edgecolors=edges, linewidths=lws, zorder=2))
        # devices holding several stages: a dark band along the bottom of every bar whose stage
        # is not the device's first (chunk 1, 2, ...), one band per chunk index
        bands = []
        chunk_of = {d: sorted(view.stages_on(d)) for d in range(D)}
        for i, a in enumerate(g.acts):
            own = chunk_of[g.dev[i]]
            st = stage_of(a)
            if len(own) > 1 and st in own and own.index(st) > 0 and end[i] > start[i]:
                for c in range(own.index(st)):
                    y1 = g.dev[i] + height / 2 - c * 0.09
                    bands.append([(start[i], y1 - 0.07), (start[i], y1), (end[i], y1), (end[i], y1 - 0.07)])
        if bands:
            ax.add_collection(PolyCollection(bands, facecolors="#222222", edgecolors="none",
                                             alpha=0.55, zorder=3))
        # instant actions (zero cost, e.g. free SEND/RECV): a thin tick so they stay visible
        for i, a in enumerate(g.acts):
            if end[i] - start[i] <= 0:
                ax.plot([start[i], start[i]], [g.dev[i] - height / 2, g.dev[i] + height / 2],
                        color=VIOLATION if i in view.marked else COLOURS[kind_key(a)][0],
                        linewidth=1.2, zorder=3)

        # ------------------------------------------------------------ critical path
        if view.critical:
            crit = view.critical
            ax.add_collection(PolyCollection(
                [_rect(start[i], end[i], g.dev[i], height) for i in crit], facecolors="none",
                edgecolors=CRITICAL, linewidths=1.4, zorder=4))
            from matplotlib.collections import LineCollection

            hops = [((end[a], g.dev[a]), (start[b], g.dev[b]))
                    for a, b in zip(crit, crit[1:]) if g.dev[a] != g.dev[b]]
            if hops:
                ax.add_collection(LineCollection(hops, colors=CRITICAL, linewidths=1.1, zorder=5))

        # ------------------------------------------------------------ deadlock cycles
        for cycle in view.cycles:
            for head, awaited in cycle:
                k = awaited if awaited >= 0 else ~awaited
                ax.annotate("", xy=((start[head] + end[head]) / 2, g.dev[head]),
                            xytext=((start[k] + end[k]) / 2, g.dev[k]),
                            arrowprops=dict(arrowstyle="-|>", color=VIOLATION, lw=1.6,
                                            connectionstyle="arc3,rad=0.15"), zorder=6)

        # ------------------------------------------------------------ labels that fit
        ax.set_xlim(0, span)
        ax.set_ylim(D - 0.5, -0.5)
        fig_w_px = w_in * dpi
        ax_w_px = fig_w_px * (0.985 - 0.07)
        px_per_unit = ax_w_px / span
        fontsize = 7 if D <= 8 else 6
        char_px = fontsize * 0.64 * dpi / 72
        lane_px = (gantt_h * dpi) / max(1, D) * 0.6
        if lane_px >= fontsize * dpi / 72:
            # one label level for the whole picture: the most detailed that fits 90% of bars
            room = [(end[i] - start[i]) * px_per_unit - 6 for i in range(g.n)]

            def text_of(i: int, level: int) -> str:
                text = _label(g.acts[i], level, view.needs_stage_label(i))
                return text + "!" if text and i in view.marked else text

            def fits(i: int, level: int) -> bool:
                return len(text_of(i, level)) * char_px <= room[i]

            timed_bars = [i for i in range(g.n) if room[i] > -6]
            chosen = 2
            for level in (0, 1):
                if sum(fits(i, level) for i in timed_bars) >= 0.9 * len(timed_bars):
                    chosen = level
                    break
            for i in timed_bars:
                level = next((lv for lv in range(chosen, 3) if fits(i, lv)), None)
                if level is None or not text_of(i, level):
                    continue
                ax.text((start[i] + end[i]) / 2, g.dev[i], text_of(i, level), ha="center",
                        va="center", fontsize=fontsize, color="white", zorder=7, clip_on=True)
        ax.set_yticks(range(D))
        ax.set_yticklabels([f"dev {d}" for d in range(D)])
        ax.tick_params(axis="y", length=0)
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
        if view.timed:
            ax.set_xlabel("")
            ax.tick_params(axis="x", labelbottom=False)
        else:
            ax.set_xlabel("position in the device's order (no timing: the schedule never finishes)")
            steps = int(span)
            every = max(1, steps // 24)
            ax.set_xticks([p + 0.5 for p in range(0, steps, every)])
            ax.set_xticklabels([str(p) for p in range(0, steps, every)])

        # ------------------------------------------------------------ memory panel
        if axm is not None:
            mem = view.timeline.memory()
            cmap = matplotlib.colormaps["viridis" if D > 10 else "tab10"]
            for d, series in enumerate(mem.series or []):
                colour = cmap(d / max(1, D - 1)) if D > 10 else cmap(d % 10)
                xs = [t for t, _ in series] + [span]
                ys_m = [m for _, m in series] + [series[-1][1]]
                # earlier devices thicker and underneath, so devices with identical memory
                # curves (mirrored schedules) still show each colour
                lw = 1.0 + (1.3 * (D - 1 - d) / (D - 1) if 1 < D <= 8 else 0.0)
                axm.plot(xs, ys_m, drawstyle="steps-post", color=colour, linewidth=lw,
                         label=f"dev {d}", zorder=2 + d)
            limit = view.timeline.memory_model.limit
            if limit is not None:
                axm.axhline(limit, color=VIOLATION, linestyle="--", linewidth=1.2,
                            label=f"limit {limit:g}")
            axm.set_ylabel("memory")
            axm.set_xlabel("time (cost units)")
            axm.set_ylim(bottom=0)
            for side in ("top", "right"):
                axm.spines[side].set_visible(False)
            handles_m, labels_m = axm.get_legend_handles_labels()
            if D > 8:  # name the ends of the colour scale only
                keep = [0, D // 2, D - 1] + ([D] if limit is not None else [])
                handles_m = [handles_m[k] for k in keep]
                labels_m = [labels_m[k] for k in keep]
            axm.legend(handles_m, labels_m, loc="lower right", bbox_to_anchor=(1.0, 1.0),
                       ncol=len(handles_m), fontsize=7, frameon=False, borderaxespad=0.1,
                       handlelength=1.4, columnspacing=1.0)
            axm.set_title("memory per device (activations + static, docs/spec.md section 5)",
                          loc="left", fontsize=8)

        # ------------------------------------------------------------ legend and title
        present = [k for k in COLOURS if any(kind_key(a) == k for a in g.acts)]
        handles = [Patch(facecolor=COLOURS[k][0], edgecolor="white", label=COLOURS[k][1])
                   for k in present]
        if bands:
            handles.append(Patch(facecolor="#bbbbbb", edgecolor="#222222", hatch="",
                                 linewidth=0, label="band: later chunk on the device"))
        if view.timed:
            handles.append(Patch(facecolor="#f4f4f4", edgecolor="#c8c8c8", hatch="////",
                                 label="idle (bubble)"))
        if view.critical:
            handles.append(Patch(facecolor="none", edgecolor=CRITICAL, linewidth=1.4,
                                 label="critical path"))
        if view.marked:
            handles.append(Patch(facecolor="none", edgecolor=VIOLATION, linewidth=2,
                                 label="violation"))
        if view.cycles:
            handles.append(Line2D([], [], color=VIOLATION, marker=">", label="deadlock wait"))
        ax.legend(handles=handles, loc="lower left", bbox_to_anchor=(0, 1.0), ncol=len(handles),
                  fontsize=7.5, frameon=False, borderaxespad=0.3, handlelength=1.6,
                  columnspacing=1.2)
        fig.suptitle(title or _title(view), x=0.07, ha="left", y=1 - 0.12 / h_in, fontsize=10)
        notes = _notes(view)
        if notes:
            fig.text(0.07, 0.12 / h_in, "\n".join(notes), fontsize=7.5, color=VIOLATION,
                     va="bottom", ha="left")
        out = Path(path)
        meta = {"Date": None} if fmt == "svg" else ({"Software": None} if fmt == "png" else {})
        fig.savefig(out if stream is None else stream, format=fmt, dpi=dpi, metadata=meta)
    return out


def _title(view: View) -> str:
    s, report = view.schedule, view.report
    head = f"{s.name or 'schedule'}: {s.devices} devices, {s.stages} stages, {s.microbatches} microbatches"
    m = report.metrics
    if view.timed and m is not None and m.makespan is not None:
        c = m.costs
        costs = f"F={c.F:g} B={c.B:g} I={c.I:g} W={c.W:g} comm={c.comm:g}" if c and all(
            isinstance(x, (int, float)) for x in (c.F, c.B, c.I, c.W)) else f"per-stage costs, comm={c.comm:g}"
        head += (f"  |  makespan {m.makespan:g} ({costs}), bubble fraction {m.bubble_fraction:.1%}, "
                 f"peak memory {m.peak_memory:g}")
    if not report.is_valid:
        n = len(report.violations) + report.truncated
        head += f"\nINVALID: {n} violation{'s' * (n != 1)} ({', '.join(report.codes())})"
    if not view.timed:
        head += f"\nno timing: {view.untimed_reason}; drawn by position in each device's order"
    return head


def _notes(view: View, limit: int = 6) -> list[str]:
    """The violations under the picture (a deadlock's cycle, step by step), at most ``limit`` lines."""
    out: list[str] = []
    shown = 0
    for v in view.report.violations:
        lines = [str(v)] + [f"    {step}" for step in v.witness]
        if out and len(out) + len(lines) > limit:
            break
        out += [x if len(x) <= 175 else x[:172] + "..." for x in lines[:limit]]
        shown += 1
    more = len(view.report.violations) - shown + view.report.truncated
    if more > 0:
        out.append(f"... and {more} more (schedverify check lists them all)")
    return out
