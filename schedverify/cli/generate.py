"""``schedverify generate FAMILY --devices D --microbatches M``: write a well-known schedule.

The families and their options come from :data:`schedverify.generators.FAMILIES`, so a
family registered there is available here (and in ``--list``) without touching this file.
"""

from __future__ import annotations

import argparse

from ..errors import UsageError
from . import EXIT_OK, EXIT_USAGE
from .common import check_costs_fit, parse_costs, positive_int, write_output

def _families():
    from ..generators import FAMILIES

    return FAMILIES


def register(sub) -> None:
    p = sub.add_parser(
        "generate", help="write a schedule of a well-known family (gpipe, 1f1b, zb-h1, ...)",
        description="Write the schedule of a well-known family as schedverify/1 JSON (PyTorch "
                    "CSV when FILE ends in .csv), to standard output unless -o is given. Sizes "
                    "outside the family's domain are refused with exit code 2 and the rule. "
                    "'schedverify generate --list' lists the families and their domains.",
    )
    p.add_argument("family", nargs="?", metavar="FAMILY", help="the family's name (see --list)")
    p.add_argument("--list", action="store_true", help="list the families with their domains and exit")
    p.add_argument("-D", "--devices", type=positive_int, metavar="D", help="number of devices")
    p.add_argument("-M", "--microbatches", type=positive_int, metavar="M", help="number of microbatches")
    p.add_argument("-V", "--chunks", type=positive_int, metavar="V",
                   help="stages per device, for families that take it (default: the family's)")
    p.add_argument("-o", "--output", metavar="FILE",
                   help="write here (overwrites FILE; '-' is standard output)")
    p.add_argument("--costs", metavar="F=1,B=2,I=1,W=1,comm=0",
                   help="costs to record in the file (check and others use them unless overridden)")
    g = p.add_argument_group("family options (each applies only to the families that list it)")
    seen: set[str] = set()
    for fam in _families().values():
        for opt in fam.options:
            if opt.flag in seen:
                continue
            seen.add(opt.flag)
            users = [f.name for f in _families().values() if any(o.flag == opt.flag for o in f.options)]
            default = f"; default {opt.default}" if opt.default is not None else ""
            g.add_argument(opt.flag, dest=f"opt_{opt.name}", type=_parser_for(opt), choices=opt.choices,
                           metavar=opt.name.upper(),
                           help=f"{opt.help} ({', '.join(users)}{default})")
    p.set_defaults(handler=run)


def _parser_for(opt):
    """Wrap an Option's type so a bad value is an argparse error naming the value."""

    def parse(text: str):
        try:
            return opt.type(text)
        except (TypeError, ValueError):
            kind = getattr(opt.type, "__name__", "value")
            raise argparse.ArgumentTypeError(f"expected {kind}, got {text!r}") from None

    parse.__name__ = getattr(opt.type, "__name__", "value")
    return parse


def list_text() -> str:
    """One line per family: name, summary and domain (what ``--list`` prints)."""
    fams = list(_families().values())
    width = max(len(f.name) for f in fams)
    lines = []
    for f in fams:
        extra = []
        if f.chunks:
            extra.append("--chunks")
        extra += [o.flag for o in f.options]
        opts = f"; options: {' '.join(extra)}" if extra else ""
        lines.append(f"{f.name:<{width}}  {f.summary}. Domain: {f.domain}{opts}")
    return "\n".join(lines)


def run(args, out, err) -> int:
    if args.list:
        print(list_text(), file=out)
        return EXIT_OK
    if args.family is None:
        print("schedverify generate: error: name a FAMILY (see 'schedverify generate --list')", file=err)
        return EXIT_USAGE
    from ..generators import family as lookup

    family = lookup(args.family)
    missing = [flag for flag, v in (("--devices", args.devices), ("--microbatches", args.microbatches))
               if v is None]
    if missing:
        raise UsageError(f"{family.name} needs {' and '.join(missing)}")
    options = {}
    if args.chunks is not None:
        if not family.chunks:
            raise UsageError(f"{family.name} does not take --chunks (its stages per device are fixed)")
        options["chunks"] = args.chunks
    own = {o.name for o in family.options}
    for key, value in vars(args).items():
        if key.startswith("opt_") and value is not None:
            name = key[4:]
            if name not in own:
                flag = "--" + name.replace("_", "-")
                raise UsageError(f"{flag} does not apply to {family.name}")
            options[name] = value
    schedule = family(args.devices, args.microbatches, **options)
    if args.costs is not None:
        from ..model import Costs

        costs = parse_costs(args.costs)
        check_costs_fit(costs, schedule, family.name)
        schedule = schedule.with_(costs=Costs(**costs))
    _write(schedule, args.output, out)
    return EXIT_OK


def _write(schedule, path: str | None, out) -> None:
    from ..io import dumps, dumps_for

    if path is None or path == "-":
        out.write(dumps(schedule))
        return
    write_output(path, dumps_for(schedule, path))
