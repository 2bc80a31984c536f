"""How long a cold ``schedverify prove proofs/`` takes: each run a fresh process (nothing
cached but what the package ships), timed from outside.

    python3 bench/prove_catalogue.py            # 3 runs (default)
    python3 bench/prove_catalogue.py --runs 5

Prints, per run, the wall-clock seconds, the CPU seconds of the child (user + system) and
the machine's load average when it started (the machine is shared: wall time is CPU time
stretched by the load), then the best, the median and the worst of each.  The exit status
is the catalogue's: 0 when every verdict is the recorded one.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def one_run() -> tuple[float, float, float, int, str]:
    """(wall s, CPU s, load average, exit code, the table's last line) of one cold run."""
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    load = os.getloadavg()[0]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "schedverify", "prove", "proofs/"], cwd=ROOT, env=env,
                          capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    last = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else proc.stderr.strip()[-200:]
    return wall, cpu, load, proc.returncode, last


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3, help="cold runs (default 3)")
    args = ap.parse_args()
    rows = []
    for k in range(args.runs):
        wall, cpu, load, code, last = one_run()
        rows.append((wall, cpu, code))
        print(f"run {k + 1}: {wall:.2f} s wall, {cpu:.2f} s CPU, load {load:.2f} at start, exit {code}: {last}",
              flush=True)
    walls, cpus = [r[0] for r in rows], [r[1] for r in rows]
    print(f"wall s: best {min(walls):.2f}, median {statistics.median(walls):.2f}, worst {max(walls):.2f}")
    print(f"CPU s:  best {min(cpus):.2f}, median {statistics.median(cpus):.2f}, worst {max(cpus):.2f}")
    return max(r[2] for r in rows)


if __name__ == "__main__":
    sys.exit(main())
