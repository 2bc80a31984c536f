"""A markdown table of every registered schedule family at one common size (for docs/reference/families.md).

    python3 bench/families_table.py              # D=4, M=8, F=1 B=2 (I=1 W=1) per device
    python3 bench/families_table.py -D 8 -M 16

Costs and activation sizes are per *device share of the model*: a family with ``S`` stages
on ``D`` devices splits each device's share into ``S/D`` chunks, so each chunk costs
``F/(S/D)``, ``B/(S/D)`` ... and holds ``1/(S/D)`` of an activation.  Every family then does
the same work, and the makespans and memories compare directly.  Communication latency is
0.  Memory is docs/spec.md section 5's weighted activation memory (``W`` keeps half of an
activation alive after ``I``), in units of one microbatch's activation for one device's
share; "in flight" counts (stage, microbatch) pairs, so chunks count separately.
"""

from __future__ import annotations

import argparse
import os
import sys
from fractions import Fraction

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from schedverify import Costs, MemoryModel, check  # noqa: E402
from schedverify.errors import SchedverifyError  # noqa: E402
from schedverify.generators import FAMILIES  # noqa: E402


def _num(x) -> str:
    x = Fraction(x).limit_denominator(1000)
    return str(x.numerator) if x.denominator == 1 else f"{float(x):.4g}"


def row(name: str, devices: int, microbatches: int, base: dict) -> str:
    fam = FAMILIES[name]
    try:
        schedule = fam(devices, microbatches)
    except SchedverifyError as e:
        return f"| `{name}` | refused: {e} | | | | | |"
    chunks = Fraction(schedule.stages, devices)
    costs = Costs(**{k: Fraction(v) / chunks for k, v in base.items()})
    report = check(schedule, costs=costs, memory=MemoryModel(activation=1 / chunks))
    m = report.metrics
    if report.verdict.value != "valid":
        codes = sorted({v.code.code for v in report.violations})
        return f"| `{name}` | INVALID ({', '.join(codes)}) | | | | | |"
    return (f"| `{name}` | {_num(chunks)} | {_num(m.makespan)} | {float(m.bubble_fraction):.1%} | "
            f"{float(m.bubble_ratio):.3f} | {_num(m.peak_memory)} | {m.peak_inflight} |")


def table(devices: int, microbatches: int, base: dict) -> str:
    ideal = microbatches * (base["F"] + base["B"])
    lines = [
        f"D={devices} devices, M={microbatches} microbatches, per device share F={_num(base['F'])} "
        f"B={_num(base['B'])} (I={_num(base['I'])} W={_num(base['W'])}), comm=0; "
        f"ideal (no bubble) makespan {_num(ideal)}.",
        "",
        "| family | chunks/device | makespan | bubble fraction | bubble ratio | peak memory | peak in flight |",
        "|---|---|---|---|---|---|---|",
    ]
    lines += [row(name, devices, microbatches, base) for name in FAMILIES]
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-D", "--devices", type=int, default=4)
    p.add_argument("-M", "--microbatches", type=int, default=8)
    p.add_argument("--F", type=Fraction, default=Fraction(1))
    p.add_argument("--I", type=Fraction, default=Fraction(1))
    p.add_argument("--W", type=Fraction, default=Fraction(1))
    args = p.parse_args(argv)
    base = {"F": args.F, "B": args.I + args.W, "I": args.I, "W": args.W}
    print(table(args.devices, args.microbatches, base))
    return 0


if __name__ == "__main__":
    sys.exit(main())
