"""What `schedverify check` costs on files of a few bytes that name huge indices: the time and
peak memory must follow the file's size, not its largest stage or microbatch index
(docs/reference/promises.md; the target: the 20-byte and the 130-byte file under 0.5 s and 100 MB).

Each file is checked in a fresh process, five times: the table gives the best time of reading
and checking it (``run(["check", FILE])``, what ``schedverify check FILE`` runs, after one
check of a two-action file has paid for what every process pays once: the imports made on
first use), the best wall time of the whole command ``python -m schedverify check FILE``
(the interpreter's start included), and the process's peak resident memory.  The two-action
file is the floor.  ``--tree`` measures another checkout of
schedverify (for example the tree before a change) in the same run, so that the two can be
compared on this noisy machine:

    python bench/bounded_cost.py
    python bench/bounded_cost.py --tree /path/to/other/checkout
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: (name, file name, text): two tiny files that name huge sizes, and others of the same kind
FILES = [
    ("floor: two actions", "floor.csv", "0F0,0B0\n"),
    ("a 20-byte CSV naming stage 9,999,999", "twenty.csv", "0F0,9999999F9999999\n"),
    ("a 130-byte CSV: an overlap at stage 9,999,999", "overlap.csv",
     "0F0,0F1,0F2,0B0,(9999999F0;9999999B1)OVERLAP_F_B,0B1,0B2\n"
     "1F0,1F1,1F2,1B0,1B1,1B2\n0F3,0B3,0F4,0B4,0F5,0B5,0F3,0B3\n2F0,2B0,2F1,2B10\n"),
    ("JSON declaring 10^7 stages and microbatches", "declared.json", json.dumps({
        "format": "schedverify/1", "stages": 10**7, "microbatches": 10**7, "placement": "v",
        "memory": {"static": 1}, "order": [["0F0", "9999999B9999999"], ["5F5"]]})),
    ("JSON, one microbatch index of 4,400 leading zeros", "zeros.json", json.dumps({
        "format": "schedverify/1", "order": [["0F0", "0F" + "0" * 4400 + "1"]]})),
]

# the floor file first, so that what every check pays once (the imports made on first use,
# finding the installed torch's version) is paid before the file is timed
_CHILD = r"""
import io, json, sys, time
from schedverify.cli import run
run(["check", sys.argv[1]], io.StringIO(), io.StringIO())
out, err = io.StringIO(), io.StringIO()
t = time.perf_counter()
code = run(["check", sys.argv[2]], out, err)
elapsed = time.perf_counter() - t
hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM")]
head = (out.getvalue() or err.getvalue()).splitlines()[0][len(sys.argv[2]) + 2:]
print(json.dumps({"check": elapsed, "code": code, "rss_mb": int(hwm[0].split()[1]) / 1024, "head": head}))
"""


def measure(tree: str, floor: str, path: str, repeat: int) -> dict:
    env = {**os.environ, "PYTHONPATH": tree}
    runs = []
    for _ in range(repeat):
        done = subprocess.run([sys.executable, "-c", _CHILD, floor, path], env=env, cwd=tree,
                              capture_output=True, text=True)
        if done.returncode != 0:  # an exception escaped run(): the tree has a bug this file finds
            last = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}"
            return {"check": float("nan"), "wall": float("nan"), "rss_mb": float("nan"), "code": "traceback",
                    "head": last}
        runs.append(json.loads(done.stdout))
    walls = []
    for _ in range(repeat):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-m", "schedverify", "check", path], env=env, cwd=tree,
                       capture_output=True)
        walls.append(time.perf_counter() - t)
    best = min(runs, key=lambda r: r["check"])
    return {**best, "wall": min(walls), "rss_mb": max(r["rss_mb"] for r in runs)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tree", action="append", default=[], help="another schedverify checkout to measure too")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    trees = [ROOT] + [os.path.abspath(t) for t in args.tree]
    with tempfile.TemporaryDirectory() as tmp:
        for tree in trees:
            print(f"schedverify check, tree {tree}: best of {args.repeat} fresh processes")
            print("| file | bytes | read + check s | whole command s | peak RSS MB | exit | report |")
            print("|---|---:|---:|---:|---:|---:|---|")
            for name, fname, text in FILES:
                path = os.path.join(tmp, fname)
                with open(path, "w") as fh:
                    fh.write(text)
                m = measure(tree, os.path.join(tmp, FILES[0][1]), path, args.repeat)
                head = m["head"] if len(m["head"]) <= 70 else m["head"][:67] + "..."
                print(f"| {name} | {len(text.encode()):,} | {m['check']:.3f} | {m['wall']:.3f} | "
                      f"{m['rss_mb']:.0f} | {m['code']} | {head} |")
            print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
