"""The Chrome-trace reader on traces that PyTorch's profiler itself writes: a tiny pipelined
model really runs one step over gloo on CPU (2 ranks, fresh processes, a hard timeout:
tests/_realrt.py's launcher) under ``torch.profiler``, each rank exports its trace, and
:func:`schedverify.plan.profile.load_chrome_trace` reads them.

Three schedules, one per kind of span PyTorch 2.13 emits: ScheduleGPipe (its
``Forward i`` / ``Backward i`` labels), Schedule1F1B (no labels; profiled with
``with_stack=True``, stage.py's ``forward_one_chunk`` / ``backward_one_chunk``) and
ScheduleInterleavedZeroBubble on 2 stages per rank (``_PipelineScheduleRuntime``'s
``PP:<stage><F|I|W><mb>``, the backward split).  Each runs once (module-scoped fixtures):
13-16 s each on a 2-core machine at load 5 (mostly importing torch in each process), the
module about 55 s.

Run as a script (``python test_plan_trace.py TMPDIR RANK``), this file is one worker.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

WIDTH, ROWS, MICROBATCHES, SEED = 128, 64, 4, 4321


# --- the worker: python test_plan_trace.py TMPDIR RANK ------------------------------------

def _worker(tmp: Path, rank: int) -> None:
    import torch
    import torch.distributed as dist
    from torch.distributed.pipelining import schedules as ts
    from torch.distributed.pipelining.stage import PipelineStage
    from torch.profiler import ProfilerActivity, profile

    cfg = json.loads((tmp / "config.json").read_text())
    ranks, per_rank, m = cfg["ranks"], cfg["per_rank"], cfg["microbatches"]
    from _realrt import start_gloo

    start_gloo(tmp, rank, ranks, cfg)
    stages = ranks * per_rank
    torch.manual_seed(SEED)
    blocks = [torch.nn.Sequential(torch.nn.Linear(WIDTH, WIDTH), torch.nn.Tanh(), torch.nn.Linear(WIDTH, WIDTH))
              for _ in range(stages)]
    mine = [s for s in range(stages) if s % ranks == rank]
    pipeline = [PipelineStage(blocks[s], s, stages, torch.device("cpu")) for s in mine]
    cls = ts.get_schedule_class(cfg["schedule"])
    loss = torch.nn.functional.mse_loss
    schedule = cls(pipeline, m, loss_fn=loss) if per_rank > 1 else cls(pipeline[0], m, loss_fn=loss)
    x, y = torch.randn(m * ROWS, WIDTH), torch.randn(m * ROWS, WIDTH)

    def step():
        last = stages - 1 in mine
        schedule.step(*((x,) if 0 in mine else ()), target=y if last else None, losses=[] if last else None)

    step()  # the first step also sets up the stages' buffers: not the one measured
    with profile(activities=[ProfilerActivity.CPU], with_stack=cfg["with_stack"]) as prof:
        step()
    prof.export_chrome_trace(str(tmp / f"trace{rank}.json"))
    dist.destroy_process_group()


if __name__ == "__main__":
    from _realrt import run_worker

    sys.exit(run_worker(_worker, sys.argv))


# --- the tests ------------------------------------------------------------------------------

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from _realrt import _failures, _kill, _wait_all  # noqa: E402

from schedverify.plan.profile import load_chrome_trace  # noqa: E402


def run_traced(tmp: Path, schedule: str, *, per_rank: int = 1, with_stack: bool = False,
               ranks: int = 2, timeout_s: float = 60) -> list[Path]:
    """Run one profiled step of PyTorch's ``schedule`` on ``ranks`` gloo processes; the
    traces they wrote (one per rank), or a failed test saying why."""
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "config.json").write_text(json.dumps(dict(
        schedule=schedule, ranks=ranks, per_rank=per_rank, microbatches=MICROBATCHES,
        with_stack=with_stack, comm_timeout_s=timeout_s / 3, deadline=time.time() + timeout_s)))
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    if sys.platform.startswith("linux"):
        env.setdefault("GLOO_SOCKET_IFNAME", "lo")
    procs: list[subprocess.Popen] = []
    try:
        for r in range(ranks):
            with open(tmp / f"stderr{r}", "wb") as err:
                procs.append(subprocess.Popen(
                    [sys.executable, __file__, str(tmp), str(r)], env=env, stdin=subprocess.DEVNULL,
                    stdout=err, stderr=subprocess.STDOUT, start_new_session=True))
        if _wait_all(procs, time.monotonic() + timeout_s):
            pytest.fail(f"{schedule}: no traces after {timeout_s:g} s")
        failed = _failures(tmp, procs)
        if failed:
            pytest.fail(f"{schedule}: rank {failed[0][0]}: {failed[0][1]}")
    finally:
        _kill(procs)
    return [tmp / f"trace{r}.json" for r in range(ranks)]


@pytest.fixture(scope="module")
def gpipe(tmp_path_factory):
    return run_traced(tmp_path_factory.mktemp("gpipe"), "GPipe")


@pytest.fixture(scope="module")
def one_f_one_b(tmp_path_factory):
    return run_traced(tmp_path_factory.mktemp("1f1b"), "1F1B", with_stack=True)


@pytest.fixture(scope="module")
def zero_bubble(tmp_path_factory):
    return run_traced(tmp_path_factory.mktemp("izb"), "InterleavedZeroBubble", per_rank=2)


def _matched(profile) -> str:
    return next(n for n in profile.notes if n.startswith("matched"))


def _unsplit_checks(profile, stages: int):
    assert profile.stages == stages
    assert profile.B is not None and all(b > 0 for b in profile.B)
    assert all(f > 0 for f in profile.F)
    # only B was measured: I and W are the documented assumption, and said so
    assert profile.I == profile.W == tuple(b / 2 for b in profile.B)
    assert any("I = W = B/2 assumed" in n for n in profile.notes)
    # the backward computes the gradients of both the input and the weights: it takes longer
    # than the forward over the whole pipeline (summed: one stage on a loaded machine may not)
    assert sum(profile.B) > sum(profile.F)
    # one step of M microbatches is all there is, and one second is far above any pass here
    assert max(profile.F + profile.B) < 1.0


def test_gpipe_labels(gpipe):
    profile = load_chrome_trace(gpipe)
    _unsplit_checks(profile, 2)
    assert _matched(profile).startswith(f"matched {4 * MICROBATCHES} spans (F {2 * MICROBATCHES}, "
                                        f"B {2 * MICROBATCHES}) from 'Forward <microbatch>'")
    assert any("ordered by distributedInfo.rank (0, 1)" in n for n in profile.notes)


def test_gpipe_files_in_any_order_by_rank(gpipe):
    """torch.profiler's distributedInfo.rank orders the files, not the command line."""
    assert load_chrome_trace(list(reversed(gpipe))) == load_chrome_trace(gpipe)


def test_gpipe_span_measure_is_at_least_busy(gpipe):
    """The whole span holds the busy window (and, on the second stage, the wait for its input)."""
    busy, span = load_chrome_trace(gpipe), load_chrome_trace(gpipe, measure="span")
    assert all(s >= b for s, b in zip(span.F + span.B, busy.F + busy.B))  # type: ignore[operator]
    assert span.F[1] > busy.F[1]


def test_1f1b_python_functions(one_f_one_b):
    profile = load_chrome_trace(one_f_one_b)
    _unsplit_checks(profile, 2)
    assert "forward_one_chunk" not in _matched(profile)  # the note names the kind, not each function
    assert _matched(profile).startswith(f"matched {4 * MICROBATCHES} spans (F {2 * MICROBATCHES}, "
                                        f"B {2 * MICROBATCHES}) from the *_one_chunk functions")


def test_zero_bubble_split_backward(zero_bubble):
    profile = load_chrome_trace(zero_bubble)
    assert profile.stages == 4 and profile.B is None
    assert all(f > 0 for f in profile.F) and all(w > 0 for w in profile.W)
    assert all(i > 0 for i in profile.I[1:])
    # the first stage's input needs no gradient: its I runs (nearly) nothing, its W the rest
    assert profile.I[0] < profile.W[0]
    assert sum(profile.I) + sum(profile.W) > sum(profile.F)
    n = 4 * MICROBATCHES
    assert _matched(profile).startswith(f"matched {3 * n} spans (F {n}, I {n}, W {n}) from PP:")


def test_a_trace_of_no_pipeline_is_refused(tmp_path):
    """A trace the profiler writes around plain model code has no pipelining spans."""
    from torch.profiler import ProfilerActivity, profile

    from schedverify.errors import InputError

    model = torch.nn.Linear(4, 4)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        model(torch.randn(2, 4)).sum().backward()
    path = tmp_path / "plain.json"
    prof.export_chrome_trace(str(path))
    with pytest.raises(InputError, match=r"no pipelining spans .*looked for record_function labels 'PP:"):
        load_chrome_trace(path)
