"""The reliability figures: files fuzzed through ``check`` with the compiled kernel and in pure
Python, counting tracebacks, crashes and disagreements (all must be zero).

    python bench/reliability.py            # 2,000 files of each kind
    python bench/reliability.py -n 10000

The files come from the strategies of tests/test_fuzz.py (one home for them): random bytes,
random JSON, valid schedules (generated, with costs and memory), near-valid JSON and CSV (a
valid schedule with one to three edits).  Each file is checked twice in this process, kernel
on and off: a *traceback* is an exception escaping ``run`` or the word in its output, a
*disagreement* is any difference in exit code or in a byte printed, a *crash* would end this
script (the count printed is then of the files checked before it).
"""

from __future__ import annotations

import argparse
import collections
import io
import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import schedverify  # noqa: E402
from schedverify import _accel  # noqa: E402
from schedverify.cli import run  # noqa: E402
from schedverify.strategies import schedules, valid_schedules  # noqa: E402
from test_fuzz import (DIFF_OPTIONS, action_ish, json_values, near_valid_csv,  # noqa: E402
                       near_valid_json, schedule_like)


def kinds():
    as_json = lambda s: (schedverify.dumps(s).encode(), ".json")  # noqa: E731
    as_csv = lambda s: (schedverify.dumps_csv(s).encode(), ".csv")  # noqa: E731
    import json

    return {
        "random bytes": st.tuples(st.one_of(st.binary(max_size=300), action_ish.map(str.encode)),
                                  st.sampled_from([".json", ".csv", ""])),
        "random JSON": st.one_of(json_values, schedule_like).map(lambda d: (json.dumps(d).encode(), ".json")),
        "generated schedules": st.one_of(
            schedules(comm=None), valid_schedules(comm=None, with_costs=True, with_memory=True)
        ).flatmap(lambda s: st.sampled_from([as_json(s), as_csv(s)])),
        "near-valid JSON": near_valid_json().map(lambda b: (b, ".json")),
        "near-valid CSV": near_valid_csv().map(lambda b: (b, ".csv")),
    }


class Tally:
    def __init__(self, directory: Path):
        self.directory = directory
        self.files = 0
        self.tracebacks = 0
        self.disagreements = 0
        self.exits: collections.Counter = collections.Counter()
        self.first_problem: str | None = None

    def check(self, data: bytes, suffix: str, options) -> None:
        path = self.directory / f"f{self.files}{suffix}"
        path.write_bytes(data)
        self.files += 1
        results = []
        for kernel in (_accel.kernel, None):
            saved, _accel.kernel = _accel.kernel, kernel
            out, err = io.StringIO(), io.StringIO()
            try:
                code = run(["check", str(path), *options], out, err)
            except BaseException as e:  # noqa: BLE001 - counted, not hidden
                if isinstance(e, KeyboardInterrupt):
                    raise
                code, err = "exception", io.StringIO(f"Traceback: {type(e).__name__}: {e}")
            finally:
                _accel.kernel = saved
            results.append((code, out.getvalue(), err.getvalue()))
        (code, out, err), pure = results
        if "Traceback" in out + err + pure[1] + pure[2]:
            self.tracebacks += 1
            self.first_problem = self.first_problem or f"traceback on {data[:200]!r}"
        if (code, out, err) != pure:
            self.disagreements += 1
            self.first_problem = self.first_problem or f"disagreement on {data[:200]!r} {options}"
        self.exits[code] += 1
        path.unlink()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=2000, help="files of each kind (default 2000)")
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    print(f"schedverify check, {_accel.describe()} vs pure Python, {args.n:,} files of each kind")
    print(f"{'kind':<22}{'files':>8}{'exit 0/1/2':>16}{'tracebacks':>12}{'disagree':>10}{'s':>8}")
    total = collections.Counter()
    with tempfile.TemporaryDirectory() as tmp:
        for name, strategy in kinds().items():
            tally = Tally(Path(tmp))

            @settings(max_examples=args.n, database=None, deadline=None, derandomize=True,
                      suppress_health_check=list(HealthCheck))
            @given(strategy, DIFF_OPTIONS)
            def one(file, options):
                tally.check(file[0], file[1], options)

            t = time.perf_counter()
            one()
            e = tally.exits
            print(f"{name:<22}{tally.files:>8,}{f'{e[0]}/{e[1]}/{e[2]}':>16}{tally.tracebacks:>12}"
                  f"{tally.disagreements:>10}{time.perf_counter() - t:>8.1f}")
            if tally.first_problem:
                print(f"  first: {tally.first_problem}")
            total.update(files=tally.files, tracebacks=tally.tracebacks, disagreements=tally.disagreements)
    print(f"total: {total['files']:,} files, {total['tracebacks']} tracebacks, "
          f"{total['disagreements']} disagreements, 0 crashes (the run completed)")
    return 1 if total["tracebacks"] or total["disagreements"] else 0


if __name__ == "__main__":
    sys.exit(main())
