"""Are time limits kept?  Runs a fixed set of commands with a limit, each in a fresh process,
and prints the limit, the wall time (process start to exit, as a user measures it), the
overrun beyond the limit plus the documented constant (schedverify.budget.OVERSHOOT_S;
it should be 0) and the answer.

    python bench/limits.py                 # the whole table
    python bench/limits.py --repeat 3      # the worst of 3 runs per instance
    python bench/limits.py --only search   # the instances whose name contains "search"

The instances are the targets of the limits' design (search 64x64 with 3 s, 100x100 with 2 s, check
--engine z3 --timeout 2 on 64k actions) and a few whose limit runs out inside each phase:
the warm start and the bounds (memory-limited 64x64 and 100x100), the solver (4x8 v, two
chunks, memory 2), a minimisation of memory, and the Z3 checker on a smaller schedule.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def instances(tmp: str) -> list[tuple[str, float, list[str]]]:
    s64k = os.path.join(tmp, "1f1b-8x4096.json")
    s16k = os.path.join(tmp, "1f1b-8x1024.json")
    search = ["search", "--format", "json"]
    return [
        ("search 64x64", 3, search + ["--devices", "64", "--microbatches", "64", "--time-limit", "3"]),
        ("search 100x100", 2, search + ["--devices", "100", "--microbatches", "100", "--time-limit", "2"]),
        ("search 64x64 split mem 32", 3,
         search + ["--devices", "64", "--microbatches", "64", "--split-backward", "--memory-limit", "32",
                   "--time-limit", "3"]),
        ("search 100x100 split 2-2-1 mem 50", 2,
         search + ["--devices", "100", "--microbatches", "100", "--split-backward", "--costs", "F=2,I=2,W=1",
                   "--memory-limit", "50", "--time-limit", "2"]),
        ("search 32x64 v 2 chunks split mem 16", 3,
         search + ["--devices", "32", "--microbatches", "64", "--chunks", "2", "--placement", "v",
                   "--split-backward", "--memory-limit", "16", "--time-limit", "3"]),
        ("search 16x32 split mem 4 comm 1", 3,
         search + ["--devices", "16", "--microbatches", "32", "--split-backward", "--memory-limit", "4",
                   "--comm-latency", "1", "--time-limit", "3"]),
        ("search 4x8 v 2 chunks split mem 2", 3,
         search + ["--devices", "4", "--microbatches", "8", "--chunks", "2", "--placement", "v",
                   "--split-backward", "--costs", "F=1,I=1,W=1", "--memory-limit", "2", "--time-limit", "3"]),
        ("search memory 16x32 split by 200", 2,
         search + ["--devices", "16", "--microbatches", "32", "--split-backward", "--minimize", "memory",
                   "--makespan-bound", "200", "--time-limit", "2"]),
        ("check z3 64k actions", 2, ["check", "--engine", "z3", "--timeout", "2", "--format", "json", s64k]),
        ("check z3 16k actions", 1, ["check", "--engine", "z3", "--timeout", "1", "--format", "json", s16k]),
    ]


def _schedules(tmp: str, env: dict) -> None:
    for m in (4096, 1024):
        subprocess.run([sys.executable, "-m", "schedverify", "generate", "1f1b", "-D", "8", "-M", str(m),
                        "-o", os.path.join(tmp, f"1f1b-8x{m}.json")], check=True, env=env, cwd=ROOT)


def answer(cmd: list[str], out: str) -> str:
    try:
        doc = json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return out.strip().splitlines()[-1][:60] if out.strip() else "-"
    if cmd[0] == "search":
        if doc.get("makespan") is None:
            return f"{doc.get('status')}: {doc.get('reason')}"
        value = doc["makespan"] if doc["objective"] == "makespan" else doc["peak_memory"]
        gap = "" if doc["optimal"] else f", bound {doc['lower_bound']:g}, gap {doc['gap']:g}"
        return f"{doc['status']} {doc['objective']} {value:g}{gap}"
    return f"{doc['verdict']}" + (f" ({doc['reason']})" if doc.get("reason") else "")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=1, help="runs per instance (the worst is shown)")
    ap.add_argument("--only", default="", help="run only instances whose name contains this")
    args = ap.parse_args()
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    sys.path.insert(0, ROOT)
    from schedverify.budget import OVERSHOOT_S

    with tempfile.TemporaryDirectory() as tmp:
        _schedules(tmp, env)
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
        print(f"# time limits: wall seconds from process start to exit, constant {OVERSHOOT_S:g} s, "
              f"{os.cpu_count()} cores, load {load:.2f}, worst of {args.repeat}")
        print("| instance | limit s | wall s | overrun s | exit | answer |")
        print("|---|---|---|---|---|---|")
        worst_over = 0.0
        for name, limit, cmd in instances(tmp):
            if args.only not in name:
                continue
            worst = None
            for _ in range(args.repeat):
                t = time.monotonic()
                p = subprocess.run([sys.executable, "-m", "schedverify", *cmd], capture_output=True,
                                   text=True, env=env, cwd=ROOT)
                wall = time.monotonic() - t
                if worst is None or wall > worst[0]:
                    worst = (wall, p)
            wall, p = worst
            over = max(0.0, wall - limit - OVERSHOOT_S)
            worst_over = max(worst_over, over)
            print(f"| {name} | {limit:g} | {wall:.2f} | {over:.2f} | {p.returncode} | {answer(cmd, p.stdout)} |",
                  flush=True)
        print(f"# largest overrun beyond limit + {OVERSHOOT_S:g} s: {worst_over:.2f} s")


if __name__ == "__main__":
    main()
