#!/usr/bin/env python3
"""Regenerate the site's schedule pictures (docs/howto/show.md): docs/images/<family>.svg for every family in
schedverify.generators.FAMILIES (4 devices, 8 microbatches, 2 chunks where a family takes
chunks, default costs F=1 B=2 I=1 W=1), plus docs/images/deadlock.svg showing how an
invalid schedule is drawn.

    pip install -e ".[plot]"
    python3 docs/make_images.py                      # every family
    python3 docs/make_images.py --families gpipe 1f1b --format png

Each picture is exactly what ``schedverify generate FAMILY ... | schedverify show - -o
FILE`` draws; the files are deterministic (no dates, fixed SVG ids), so a diff means the
schedule or the renderer changed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # run from a checkout without installing

from schedverify import Schedule, SchedverifyError  # noqa: E402
from schedverify.generators import FAMILIES  # noqa: E402
from schedverify.render.image import render_image  # noqa: E402
from schedverify.render.view import build_view  # noqa: E402

#: Sizes tried in turn: the first one a family accepts is drawn.
SIZES = ((4, 8), (4, 12), (4, 16), (2, 4))

#: A schedule that deadlocks: device 1 starts with microbatch 2's forward, whose input device 0
#: produces only after 0B0, which waits for 1B0, which device 1 runs after 1F2.
DEADLOCK = Schedule.build([["0F0", "0F1", "0B0", "0F2", "0B1", "0B2"],
                           ["1F2", "1F0", "1B0", "1F1", "1B1", "1B2"]], name="deadlock (1F2 first)")


def generate(name: str) -> tuple[Schedule, str]:
    family = FAMILIES[name]
    options = {"chunks": 2} if getattr(family, "chunks", False) else {}
    problems = []
    for devices, microbatches in SIZES:
        try:
            return family(devices, microbatches, **options), f"D={devices} M={microbatches}"
        except SchedverifyError as e:
            problems.append(str(e))
    raise SchedverifyError(f"{name}: no size in {SIZES} accepted: {problems[-1]}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=str(HERE / "images"), help="directory (default docs/images)")
    p.add_argument("--families", nargs="+", metavar="NAME", help="only these families (default: all)")
    p.add_argument("--format", choices=("svg", "png"), default="svg")
    p.add_argument("--no-deadlock", action="store_true", help="skip the invalid-schedule example")
    args = p.parse_args(argv)
    names = args.families or list(FAMILIES)
    unknown = [n for n in names if n not in FAMILIES]
    if unknown:
        print(f"make_images: unknown famil{'ies' if len(unknown) > 1 else 'y'} {', '.join(unknown)}; "
              f"known: {', '.join(FAMILIES)}", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    failed = 0
    jobs = [(n, None) for n in names] + ([] if args.no_deadlock or args.families else [("deadlock", DEADLOCK)])
    for name, schedule in jobs:
        try:
            sizes = ""
            if schedule is None:
                schedule, sizes = generate(name)
            target = out / f"{name}.{args.format}"
            render_image(build_view(schedule), target, dpi=110)
            print(f"wrote {target}  ({name} {sizes})".rstrip())
        except SchedverifyError as e:
            print(f"make_images: {name}: {e}", file=sys.stderr)
            failed += 1
    return 2 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
