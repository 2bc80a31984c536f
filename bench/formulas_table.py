"""Which closed forms are derived, on which domain, and how long each family's derivation takes.

Each family is derived in a fresh subprocess (so no cache is shared between families); the
time reported is that process's CPU time for ``schedverify.formulas.derive`` (wall time is
printed beside it, since the machine may be shared), plus the load average at the start.
The last column is a cold ``schedverify formula FAMILY --metric makespan`` in a fresh process
(CPU and wall seconds): it reads the shipped form.

    python3 bench/formulas_table.py                 # every family, markdown table
    python3 bench/formulas_table.py gpipe zb-h2     # some families
    python3 bench/formulas_table.py --json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

CHILD = r"""
import json, sys, time
from schedverify.formulas import derive, derive_formula as formula
from schedverify.formulas.derive import NotDerived
name = sys.argv[1]
t0, w0 = time.process_time(), time.time()
der = derive(name)
cpu, wall = time.process_time() - t0, time.time() - w0
rows = {}
for metric, device in (("makespan", None), ("bubble_fraction", None), ("bubble_ratio", None),
                       ("bubble_time", "d"), ("peak_inflight", None), ("peak_inflight", "d"),
                       ("peak_memory", None), ("peak_memory", "d")):
    key = metric + ("(d)" if device else "")
    try:
        f = formula(name, metric, device)
    except NotDerived as e:
        rows[key] = {"derived": False, "why": str(e)}
        continue
    timing = metric.startswith(("makespan", "bubble"))
    rows[key] = {"derived": True, "slice": list(der.slice) if timing else [],
                 "sizes": list(f.restricted)}
print(json.dumps({"family": name, "cpu": cpu, "wall": wall, "confirm": dict(der.confirm_range),
                  "sizes": der.confirmed, "rows": rows}))
"""


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}


def cold_formula(name: str, metric: str = "makespan") -> tuple[float, float]:
    """(CPU s, wall s) of ``schedverify formula NAME --metric METRIC`` in a fresh process."""
    import resource
    import time

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    w0 = time.time()
    subprocess.run([sys.executable, "-m", "schedverify", "formula", name, "--metric", metric],
                   capture_output=True, env=_env(), cwd=ROOT, check=True)
    wall = time.time() - w0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime, wall)


def run_family(name: str) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, name], capture_output=True, text=True,
                         env=_env(), cwd=ROOT)
    if out.returncode:
        return {"family": name, "error": out.stderr.strip().splitlines()[-1]}
    doc = json.loads(out.stdout)
    doc["cold"] = cold_formula(name)
    return doc


def _cell(row: dict) -> str:
    if not row["derived"]:
        return "no"
    slice_ = row["slice"]
    out = "yes"
    if slice_ == ["c == 0", "t_I == t_F", "t_W == t_F"]:
        out += ", c=0, t_I=t_W=t_F"
    elif slice_:
        out += ", " + ", ".join(cond.replace(" ", "").replace("==", "=") for cond in slice_)
    for cond in row.get("sizes", ()):  # a restricted size domain (irregular small m left out)
        out += ", " + cond.replace(" ", "")
    return out


def main(argv=None) -> int:
    from schedverify.generators import FAMILIES

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("families", nargs="*", default=list(FAMILIES))
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    load = os.getloadavg()
    results = [run_family(f) for f in args.families]
    if args.json:
        print(json.dumps({"loadavg": load, "families": results}, indent=1))
        return 0
    cols = ("makespan", "bubble_fraction", "bubble_time(d)", "peak_inflight", "peak_inflight(d)",
            "peak_memory", "peak_memory(d)")
    print(f"load average at start: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} (2 cores)\n")
    print("| family | " + " | ".join(cols) + " | confirmed exactly over | derive CPU s (wall s) "
          "| cold `formula` CPU s (wall s) |")
    print("|---" * (len(cols) + 4) + "|")
    for r in results:
        if "error" in r:
            print(f"| {r['family']} | " + " | ".join("error" for _ in cols) + f" | {r['error']} | | |")
            continue
        c = r["confirm"]
        vs = c["v"]
        v = f"{vs[0]}..{vs[1]}" if len(vs) == 2 else ",".join(map(str, vs))
        where = f"p={c['p'][0]}..{c['p'][1]}, m={c['m'][0]}..{c['m'][1]}, v={v} ({r['sizes']} sizes)"
        print(f"| {r['family']} | " + " | ".join(_cell(r["rows"][k]) for k in cols)
              + f" | {where} | {r['cpu']:.1f} ({r['wall']:.1f}) "
              f"| {r['cold'][0]:.2f} ({r['cold'][1]:.2f}) |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
