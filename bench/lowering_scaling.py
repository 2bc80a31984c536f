"""How fast is lowering?  Prints seconds and actions per second for PyTorch's lowering
(re-implemented: ``schedverify.lowering.torch_lowering``) and ours (``lower``: the
construction, and with its re-checks), on 1F1B (8 devices, full backward) of growing size.

    python bench/lowering_scaling.py                     # 10k and 100k compute actions
    python bench/lowering_scaling.py --sizes 1000000
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import schedverify as sv  # noqa: E402
from schedverify.generators import one_f_one_b  # noqa: E402
from schedverify.lowering import _keyed_lowering, lower, torch_lowering  # noqa: E402
from schedverify.releases import resolve  # noqa: E402


def best(f, repeat: int) -> tuple[float, object]:
    times, result = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        result = f()
        times.append(time.perf_counter() - t)
    return min(times), result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    ap.add_argument("--devices", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    print(f"lowering 1F1B, {args.devices} devices, best of {args.repeat}")
    print("| compute actions | lowered actions | PyTorch's s | ours, construction s | ours, with re-checks s "
          "| ours, construction actions/s |")
    print("|---:|---:|---:|---:|---:|---:|")
    for size in args.sizes:
        s = one_f_one_b(args.devices, max(1, size // (2 * args.devices)))
        timeline = sv.check(s, comm_semantics="torch").timeline
        t_torch, low = best(lambda: torch_lowering(s), args.repeat)
        t_ours, _ = best(lambda: _keyed_lowering(s, timeline, resolve("torch")), args.repeat)
        t_full, _ = best(lambda: lower(s, comm_semantics="torch-nccl"), 1)
        print(f"| {s.num_actions:,} | {low.num_actions:,} | {t_torch:.3f} | {t_ours:.3f} | {t_full:.3f} | "
              f"{s.num_actions / t_ours:,.0f} |", flush=True)


if __name__ == "__main__":
    main()
