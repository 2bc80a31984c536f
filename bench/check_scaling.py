"""How fast is `schedverify check`?  Prints actions per second and peak memory.

For each size it writes a 1F1B schedule (8 devices, full backward) to a JSON file, then, in a
fresh subprocess, reads it and runs the full check plus timeline (what `schedverify check`
does), reporting wall time and the process's peak resident memory.  When PyTorch is
installed, PyTorch's own dry-run simulator ``_simulate_comms_compute`` runs on the same
schedule after PyTorch's own send/recv lowering (about 2.7x as many actions), and
schedverify loads and checks that very lowered schedule from its JSON file too, best of as
many runs each; the speed-up is on that same input.  schedverify's figure is given twice:
in a fresh process (its first load and check), and warm (the best of five more in that
process), which is the condition PyTorch's figure is taken in: its simulator runs in the
process that has just parsed and lowered the schedule.  The column "in one process" sets
load plus check against ``json.load`` alone on the same file, alternating in one process,
the best of each (the target: at most 2x at 1M actions).  PyTorch is skipped above
--torch-max actions because its simulator is quadratic.

Whether the compiled kernel (schedverify/_kernel.c) is in use is printed in the title;
``SCHEDVERIFY_PURE_PYTHON=1`` measures the pure-Python paths.

    python bench/check_scaling.py                # 10k, 100k, 1M actions
    python bench/check_scaling.py --sizes 10000 --torch-max 100000
    python bench/check_scaling.py --sizes 1000000 --repeat 1 --phases   # where the time goes
    python bench/check_scaling.py --sizes --runtime-size 100000 --csv-sizes  # the semantics table only
    python bench/check_scaling.py --sizes --runtime-size 0               # the PyTorch CSV table only

The PyTorch CSV table runs the CLI on the same 1F1B as schedverify/1 JSON (``check``, eager)
and as PyTorch's CSV (``check`` with the defaults: torch-nccl semantics after PyTorch's
lowering; ``--lowering none``; ``lower``), each in a fresh process, and gives each one's time
and peak memory over the JSON check's (the targets at 1M compute actions: the default check
in at most 3x the time and 2x the memory, ``lower`` in at most 5x the time).

The semantics table checks one lowered schedule (1F1B after PyTorch's lowering, re-implemented in
``schedverify.lowering``: about 2.7 actions per compute action) under each communication
semantics, and gives each one's time over eager's on that same file (docs/spec.md 8's
``torch`` and ``torch-nccl`` run in pure Python; the kernel builds the graph they share).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

_CHILD = r"""
import json, resource, sys, time
t0 = time.perf_counter()
import schedverify
t1 = time.perf_counter()
s = schedverify.load(sys.argv[1])
t2 = time.perf_counter()
r = schedverify.check(s)
t3 = time.perf_counter()
assert r.is_valid, r.violations[:3]
# VmHWM is this process's own peak (ru_maxrss on Linux carries the parent's over exec)
hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM")]
rss = int(hwm[0].split()[1]) / 1024 if hwm else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"import": t1 - t0, "load": t2 - t1, "check": t3 - t2, "total": t3 - t1,
                  "makespan": r.metrics.makespan, "actions": s.num_actions, "rss_mb": rss}))
"""

# the same, then again in the same process: the first is a fresh process's (its allocator and
# caches cold), the best of the rest is the condition PyTorch's figure is taken in (its
# simulator runs in a process that has just lowered and parsed that very schedule)
_WARM_CHILD = r"""
import gc, json, sys, time
import schedverify
totals = []
for _ in range(6):
    t0 = time.perf_counter()
    r = schedverify.check(schedverify.load(sys.argv[1]))
    totals.append(time.perf_counter() - t0)
    assert r.is_valid, r.violations[:3]
    del r
    gc.collect()
print(json.dumps({"fresh": totals[0], "warm": min(totals[1:])}))
"""

# the measure: load and check against json.load alone on the same file, in one
# process, alternating, the best of each (neither counts freeing what it made)
_RATIO_CHILD = r"""
import gc, json, sys, time
import schedverify
path, runs = sys.argv[1], int(sys.argv[2])
plain, ours = [], []
for _ in range(runs):
    gc.collect()
    t0 = time.perf_counter()
    with open(path, encoding="utf-8") as fh:
        doc = json.load(fh)
    t1 = time.perf_counter()
    del doc
    gc.collect()
    t2 = time.perf_counter()
    r = schedverify.check(schedverify.load(path))
    t3 = time.perf_counter()
    assert r.is_valid
    del r
    plain.append(t1 - t0)
    ours.append(t3 - t2)
print(json.dumps({"json": min(plain), "ours": min(ours)}))
"""

_SEMANTICS_CHILD = r"""
import json, sys, time
import schedverify
s = schedverify.load(sys.argv[1])
t0 = time.perf_counter()
r = schedverify.check(s, comm_semantics=sys.argv[2])
t1 = time.perf_counter()
assert r.verdict.value in ("valid", "invalid"), r
print(json.dumps({"check": t1 - t0, "verdict": r.verdict.value, "makespan": r.metrics.makespan,
                  "actions": s.num_actions}))
"""

_PHASES_CHILD = r"""
import json, sys, time
from schedverify import load
from schedverify.cost.memory import memory_sweep
from schedverify.graph import compile_graph, durations_for, sweep
from schedverify.cost.timeline import Timeline
from schedverify.model import resolve_costs, resolve_memory
clock = time.perf_counter
t = [clock()]
s = load(sys.argv[1]); t.append(clock())
g = compile_graph(s); t.append(clock())
costs, memory = resolve_costs(s), resolve_memory(s)
d = durations_for(g, costs); t.append(clock())
r = sweep(g, d, costs.comm); t.append(clock())
m = memory_sweep(g, memory); t.append(clock())
Timeline(g, costs, memory, d, r).metrics(m); t.append(clock())
names = ["load", "compile", "durations", "sweep", "memory", "metrics"]
from schedverify import _accel
print(json.dumps({n: t[k + 1] - t[k] for k, n in enumerate(names)} | {"engine": _accel.describe()}))
"""

_TORCH_CHILD = r"""
import json, sys, time
import schedverify
from torch.distributed.pipelining.schedules import _Action, _add_send_recv, _simulate_comms_compute
s = schedverify.load(sys.argv[1])
order = {d: [_Action.from_str(str(a)) for a in row] for d, row in enumerate(s.order)}
comms = _add_send_recv(order, lambda st: st % s.devices, s.stages)
n = sum(len(v) for v in comms.values())
t0 = time.perf_counter()
_simulate_comms_compute(comms, lambda st: st % s.devices, s.stages)
t1 = time.perf_counter()
# the lowered schedule itself, for schedverify to check the very same input
lowered = schedverify.Schedule.build([[str(a) for a in comms[d]] for d in range(s.devices)],
                                     stages=s.stages, microbatches=s.microbatches, name="lowered")
schedverify.dump(lowered, sys.argv[2])
print(json.dumps({"seconds": t1 - t0, "actions_with_comms": n}))
"""


# one CLI command in a fresh process, its report discarded: wall time from before the import
# of schedverify to the exit, and the process's own peak memory
_CLI_CHILD = r"""
import contextlib, json, os, sys, time
t0 = time.perf_counter()
sys.argv = ["schedverify"] + sys.argv[2:]
from schedverify.cli import main
code = 0
with open(os.devnull, "w") as null, contextlib.redirect_stdout(null):
    try:
        main()
    except SystemExit as e:
        code = e.code
wall = time.perf_counter() - t0
hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM")]
print(json.dumps({"wall": wall, "rss_mb": int(hwm[0].split()[1]) / 1024 if hwm else 0, "code": code}),
      file=sys.__stdout__)
"""


def csv_table(args, tmp: str) -> None:
    """A PyTorch CSV checked with the defaults (torch-nccl semantics, PyTorch's lowering) and
    lowered (`schedverify lower`, its re-checks and the write) for each release of
    ``--csv-torch``, against the same schedule's
    JSON checked under eager, each in a fresh process through the CLI; the ratios are the
    targets (at most 3x the time and 2x the memory for the check, 5x the time for lower)."""
    from schedverify import dump, dumps_csv
    from schedverify.generators import one_f_one_b

    print(f"\nPyTorch CSV against JSON, whole process through the CLI, 1F1B on {args.devices} devices, "
          f"best of {args.csv_repeat}")
    print("| compute actions | command | exit | wall s | peak RSS MB | time / JSON | memory / JSON |")
    print("|---:|---|---:|---:|---:|---:|---:|")
    for size in args.csv_sizes:
        s = one_f_one_b(args.devices, max(1, size // (2 * args.devices)))
        js, cs, out = (os.path.join(tmp, f"c{size}.{ext}") for ext in ("json", "csv", "lowered.csv"))
        dump(s, js)
        with open(cs, "w", encoding="utf-8") as fh:
            fh.write(dumps_csv(s))
        commands = [("check s.json", ["check", js]), ("check s.csv --lowering none",
                    ["check", cs, "--lowering", "none"])]
        for release in args.csv_torch:  # the defaults but the release, each modelled one asked for
            commands += [(f"check s.csv --torch {release}", ["check", cs, "--torch", release]),
                         (f"lower s.csv -o out.csv --torch {release}", ["lower", cs, "-o", out, "--torch", release])]
        base = None
        for label, argv in commands:
            runs = [run_child(_CLI_CHILD, cs, 1800, *argv) for _ in range(args.csv_repeat)]
            r = min((x for x in runs if x is not None), key=lambda x: x["wall"], default=None)
            if r is None:
                print(f"| {s.num_actions:,} | `{label}` | - | > 1800 (timed out) | - | - | - |", flush=True)
                continue
            base = base or r
            print(f"| {s.num_actions:,} | `{label}` | {r['code']} | {r['wall']:.2f} | {r['rss_mb']:.0f} | "
                  f"{r['wall'] / base['wall']:.1f}x | {r['rss_mb'] / base['rss_mb']:.1f}x |", flush=True)


def write_schedule(path: str, actions: int, devices: int) -> None:
    sys.path.insert(0, ROOT)
    from schedverify import dump
    from schedverify.generators import one_f_one_b

    microbatches = max(1, actions // (2 * devices))
    dump(one_f_one_b(devices, microbatches), path)


def write_lowered(path: str, compute_actions: int, devices: int) -> None:
    sys.path.insert(0, ROOT)
    from schedverify import dump
    from schedverify.generators import one_f_one_b
    from schedverify.lowering import torch_lowering

    microbatches = max(1, compute_actions // (2 * devices))
    dump(torch_lowering(one_f_one_b(devices, microbatches)), path)


def semantics_table(args, tmp: str) -> None:
    path = os.path.join(tmp, "lowered.json")
    write_lowered(path, args.runtime_size, args.devices)
    rows = {}
    for sem in ("eager", "rendezvous", "torch", "torch-nccl"):
        rows[sem] = min((run_child(_SEMANTICS_CHILD, path, 600, sem) for _ in range(args.repeat)),
                        key=lambda r: r["check"])
    n = rows["eager"]["actions"]
    print(f"\ncheck of one lowered 1F1B ({n:,} actions, {args.devices} devices) per communication "
          f"semantics, best of {args.repeat}")
    print("| semantics | verdict | makespan | check s | over eager |")
    print("|---|---|---:|---:|---:|")
    for sem, r in rows.items():
        print(f"| {sem} | {r['verdict']} | {r['makespan']} | {r['check']:.3f} | "
              f"{r['check'] / rows['eager']['check']:.2f}x |", flush=True)


def run_child(code: str, path: str, timeout: float, *extra: str) -> dict | None:
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    # as an installed package runs: its modules' bytecode cached (a fresh process compiling
    # every module it imports would add about 0.07 s to each command)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    try:
        out = subprocess.run([sys.executable, "-c", code, path, *extra], capture_output=True, text=True,
                             env=env, timeout=timeout, check=True)
    except subprocess.TimeoutExpired:
        return None
    except subprocess.CalledProcessError as e:
        raise SystemExit(f"benchmark child failed:\n{e.stderr}") from None
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="*", default=[10_000, 100_000, 1_000_000])
    ap.add_argument("--runtime-size", type=int, default=100_000, metavar="N",
                    help="compute actions of the schedule lowered for the semantics table "
                         "(default 100,000: about 275,000 actions after lowering); 0 skips it")
    ap.add_argument("--devices", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=3, help="runs per size; the best is reported")
    ap.add_argument("--torch-max", type=int, default=100_000,
                    help="largest size PyTorch's simulator is timed on (it is quadratic)")
    ap.add_argument("--torch-timeout", type=float, default=300)
    ap.add_argument("--csv-sizes", type=int, nargs="*", default=[1_000_000], metavar="N",
                    help="compute actions of the PyTorch CSV table (default 1,000,000, the targets' size); "
                         "none skips it")
    ap.add_argument("--csv-repeat", type=int, default=1, help="runs per command of the CSV table")
    ap.add_argument("--csv-torch", nargs="*", default=["2.14", "2.15"], metavar="RELEASE",
                    help="the PyTorch releases the CSV table checks and lowers for (default 2.14 and 2.15, "
                         "the current two; the default release is the installed torch's, else the newest)")
    ap.add_argument("--phases", action="store_true",
                    help="also print where the time goes, phase by phase, for each size")
    args = ap.parse_args()
    import importlib.util

    have_torch = importlib.util.find_spec("torch") is not None  # not imported: it is large

    sys.path.insert(0, ROOT)
    from schedverify import _accel

    print(f"schedverify check ({_accel.describe()}): 1F1B, {args.devices} devices, full check + timeline, "
          f"best of {args.repeat}")
    print("| actions | file MB | load s | check s | total s | actions/s | peak RSS MB | "
          "in one process: json.load s / load + check s (ratio) |"
          + (" lowered actions | PyTorch sim s | schedverify s, lowered (fresh / warm) | "
             "speed-up, same input (fresh / warm) |"
             if have_torch else ""))
    print("|---:|---:|---:|---:|---:|---:|---:|---:|" + ("---:|---:|---:|---:|" if have_torch else ""))
    with tempfile.TemporaryDirectory() as tmp:
        for size in args.sizes:
            path = os.path.join(tmp, f"s{size}.json")
            write_schedule(path, size, args.devices)
            mb = os.path.getsize(path) / 1e6
            runs = [run_child(_CHILD, path, 600) for _ in range(args.repeat)]
            best = min(runs, key=lambda r: r["total"])
            rate = best["actions"] / best["total"]
            ratio = run_child(_RATIO_CHILD, path, 600, str(max(3, args.repeat)))
            row = (f"| {best['actions']:,} | {mb:.1f} | {best['load']:.3f} | {best['check']:.3f} | "
                   f"{best['total']:.3f} | {rate:,.0f} | {max(r['rss_mb'] for r in runs):.0f} | "
                   f"{ratio['json']:.3f} / {ratio['ours']:.3f} ({ratio['ours'] / ratio['json']:.2f}x) |")
            if have_torch:
                if best["actions"] <= args.torch_max:
                    # PyTorch's simulator and schedverify on the very same input: the schedule
                    # after PyTorch's own send/recv lowering; best of as many runs each
                    lowered = os.path.join(tmp, f"s{size}.lowered.json")
                    timed = [run_child(_TORCH_CHILD, path, args.torch_timeout, lowered)
                             for _ in range(args.repeat)]
                    if None in timed:
                        row += f" - | > {args.torch_timeout:.0f} (timed out) | - | - |"
                    else:
                        t = min(timed, key=lambda r: r["seconds"])
                        ours = [run_child(_WARM_CHILD, lowered, 600) for _ in range(args.repeat)]
                        fresh = min(r["fresh"] for r in ours)
                        warm = min(r["warm"] for r in ours)
                        row += (f" {t['actions_with_comms']:,} | {t['seconds']:.3f} | {fresh:.3f} / {warm:.3f} | "
                                f"{t['seconds'] / fresh:,.1f}x / {t['seconds'] / warm:,.1f}x |")
                else:
                    row += " - | skipped | - | - |"
            print(row, flush=True)
            if args.phases:
                ph = run_child(_PHASES_CHILD, path, 600)
                print("|   phases: " + ", ".join(f"{k} {v:.2f} s" if isinstance(v, float) else f"{k} {v}"
                                                for k, v in ph.items()) + " |", flush=True)
        if args.runtime_size:
            semantics_table(args, tmp)
        if args.csv_sizes:
            csv_table(args, tmp)


if __name__ == "__main__":
    main()
