"""``schedverify show FILE``: see a schedule.

In the terminal, the device x time timeline at the simulated start times (``--grid``: the
compact order grid); ``-o timeline.svg`` (or ``.png``, ``.pdf``) draws a Gantt chart with
memory over time (needs ``schedverify[plot]``); ``--trace trace.json`` writes Chrome/Perfetto
trace events.  An invalid schedule is drawn with its violations marked, never refused.
Exit code: 0 valid, 1 invalid (the picture is still drawn), 2 usage or input error.
"""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

from ..errors import UsageError
from ..io.files import source_name
from . import EXIT_INVALID, EXIT_OK
from .common import (add_cost_options, add_input_options, in_schedule_units, load_input, runtime_args,
                     whole_number, write_output)


_width = whole_number(40, unit="columns")
_dpi = whole_number(20, 1200)


def register(sub) -> None:
    p = sub.add_parser(
        "show", help="draw a schedule: terminal timeline, SVG/PNG Gantt chart, Perfetto trace",
        description="Draw a schedule (schedverify/1 .json or PyTorch .csv) from its simulated "
                    "timeline: in the terminal by default, as an image with -o, as Chrome/Perfetto "
                    "trace events with --trace. Violations are marked on the picture. Exit code: "
                    "0 valid, 1 invalid, 2 usage or input error.",
    )
    p.add_argument("file", metavar="FILE", help="schedule file ('-' reads standard input)")
    add_cost_options(p)
    add_input_options(p)
    p.add_argument("--grid", action="store_true",
                   help="print the compact device x step grid (order only, no timing) instead")
    p.add_argument("--width", type=_width, metavar="COLUMNS",
                   help="terminal width to fit (default: the terminal's)")
    p.add_argument("-o", "--output", metavar="IMAGE",
                   help="draw a Gantt chart with memory over time to IMAGE (.svg, .png or .pdf; "
                        'needs matplotlib: pip install "schedverify[plot]")')
    p.add_argument("--dpi", type=_dpi, default=150, help="resolution of a .png image (default 150)")
    p.add_argument("--trace", metavar="TRACE.json",
                   help="write Chrome/Perfetto trace-event JSON (open in ui.perfetto.dev or chrome://tracing)")
    p.set_defaults(handler=run)


def run(args, out, err) -> int:
    from ..render.view import build_view

    source = source_name(args.file)
    schedule = load_input(args.file, args)
    costs, memory_limit = in_schedule_units(args, schedule, source)
    if args.output:
        from ..render.image import _matplotlib, image_format

        image_format(args.output)  # a bad name fails before any work
        _matplotlib()
    view = build_view(schedule, costs=costs, memory_limit=memory_limit,
                      comm_semantics=args.comm_semantics, **runtime_args(args))
    code = EXIT_OK if view.report.is_valid else EXIT_INVALID
    wrote = []
    if args.output and args.trace and Path(args.output).resolve() == Path(args.trace).resolve():
        raise UsageError(f"-o {args.output} and --trace {args.trace} name the same file")
    if args.output:
        from ..render.image import render_image

        buf = io.BytesIO()
        render_image(view, args.output, dpi=args.dpi, stream=buf)
        write_output(args.output, buf.getvalue(), inputs=(args.file,))
        wrote.append(f"wrote {args.output}")
    if args.trace:
        from ..render.trace import trace_events

        write_output(args.trace, json.dumps(trace_events(view)), inputs=(args.file,), option="--trace")
        wrote.append(f"wrote {args.trace} (open it in ui.perfetto.dev or chrome://tracing)")
    if wrote:
        from ..render.text import headline

        print(headline(source, view), file=out)
        if not view.timed:
            print(f"  no timing: {view.untimed_reason}; drawn by position in each device's order",
                  file=out)
        for line in wrote:
            print(f"  {line}", file=out)
        return code
    width = args.width or shutil.get_terminal_size((100, 24)).columns
    if args.grid:
        from ..render.text import grid_text

        print(grid_text(source, view, width), file=out)
    else:
        from ..render.text import timeline_text

        print(timeline_text(source, view, width), file=out)
    return code
