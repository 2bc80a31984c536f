"""Run a schedule on PyTorch's real runtime: one ``step()`` of ``_PipelineScheduleRuntime``
over gloo, in freshly spawned processes, compared with the unsplit model (imported as
``_realrt``: pytest puts this folder on sys.path; run as a script, it is one worker).

The model is S = ranks * stages_per_rank blocks ``Linear(8, 8) + tanh`` in float64 from a
fixed seed, the same on every process; each rank wraps its own blocks in ``PipelineStage``s.
The batch is ``microbatches * 2`` rows, the loss MSE (mean) with ``scale_grads=True``: the
runtime's REDUCE_GRAD divides the accumulated gradients by the number of microbatches, so
the reference is the full model's gradient of ``sum_m MSE(microbatch m) / M``, and its
losses are the per-microbatch MSEs.

    outcome = run_schedule(csv_text, fmt="compute_comms", ranks=2, stages_per_rank=1, microbatches=2)
    outcome.status  # "ok", "wrong", "error" or "hang"

The timeout is hard: every worker runs in its own session and the whole group is killed
(SIGKILL) when it expires, or as soon as one worker fails.  A worker rendezvouses with the
others (ready files) before ``init_process_group`` so that gloo's own timeout, which turns a
stuck receive into an exception, only has to cover the step itself.
"""

from __future__ import annotations

import datetime
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

import torch

WIDTH, ROWS_PER_MB, SEED = 8, 2, 1234
RTOL, ATOL = 1e-9, 1e-12



def mock_stages(ranks: int, per_rank: int, *, single: bool = False):
    """Rank 0's stages as ``get_schedule_ops`` builds them, for building a schedule class's
    ``pipeline_order`` without processes: no module, no group.  ``single``: the one stage a
    ``PipelineScheduleSingle`` class takes, else the list a multi-stage class takes."""
    from unittest import mock

    from torch.distributed.pipelining.stage import PipelineStage

    stage = mock.create_autospec(PipelineStage, instance=True)
    stage.group_rank, stage.group_size, stage.submod = 0, ranks, None
    stage.num_stages = per_rank * ranks
    return stage if single else [stage] * per_rank


@dataclass(frozen=True)
class Outcome:
    status: str  # "ok" | "wrong" | "error" | "hang"
    detail: str
    seconds: float


def stage_ranks(placement: str, ranks: int, stages: int) -> list[int]:
    """The rank of each stage: ``loop`` (s % ranks) or ``v`` (r holds r and 2*ranks-1-r)."""
    if placement == "loop":
        return [s % ranks for s in range(stages)]
    if placement == "v" and stages == 2 * ranks:
        return [s if s < ranks else 2 * ranks - 1 - s for s in range(stages)]
    raise ValueError(f"placement {placement!r} with {stages} stages on {ranks} ranks")


def model_and_data(stages: int, microbatches: int):
    """The full model (one block per stage), the batch and the target: the same everywhere."""
    torch.set_default_dtype(torch.float64)
    torch.manual_seed(SEED)
    blocks = [torch.nn.Sequential(torch.nn.Linear(WIDTH, WIDTH), torch.nn.Tanh()) for _ in range(stages)]
    x = torch.randn(microbatches * ROWS_PER_MB, WIDTH)
    y = torch.randn(microbatches * ROWS_PER_MB, WIDTH)
    return blocks, x, y


def reference(stages: int, microbatches: int):
    """(per-microbatch losses, per-stage parameter gradients) of the unsplit model."""
    blocks, x, y = model_and_data(stages, microbatches)
    out = torch.nn.Sequential(*blocks)(x)
    losses = [torch.nn.functional.mse_loss(o, t) for o, t in zip(out.chunk(microbatches), y.chunk(microbatches))]
    (sum(losses) / microbatches).backward()
    return [l.detach() for l in losses], [[p.grad for p in b.parameters()] for b in blocks]


# --- the parent: spawn, watch, kill, compare ---------------------------------------------

def run_schedule(csv_text: str, *, fmt: str, ranks: int, stages_per_rank: int, microbatches: int,
                 placement: str = "loop", defer_pp_recv: bool = False, timeout_s: float = 30,
                 comm_timeout_s: float | None = None, env: dict | None = None,
                 runtime_options: dict | None = None) -> Outcome:
    """One ``step()`` of the schedule in ``csv_text`` (``_load_csv(format=fmt)``) on ``ranks``
    gloo processes.  ``comm_timeout_s`` (gloo's, default a third of ``timeout_s``) turns a
    stuck receive into an exception, reported as "hang" like the hard ``timeout_s``.  ``env``:
    more environment for the workers (``TORCH_DISTRIBUTED_PIPELINE_PER_EDGE_P2P=1``);
    ``runtime_options``: more keyword arguments of ``_PipelineScheduleRuntime``
    (``max_outstanding_sends``, ...)."""
    start = time.monotonic()
    stages = ranks * stages_per_rank
    stage_ranks(placement, ranks, stages)  # refuse a bad placement here, not in every worker
    tmp = Path(tempfile.mkdtemp(prefix="realrt-"))
    procs: list[subprocess.Popen] = []
    try:
        (tmp / "schedule.csv").write_text(csv_text)
        (tmp / "config.json").write_text(json.dumps(dict(
            fmt=fmt, ranks=ranks, stages=stages, microbatches=microbatches, placement=placement,
            defer_pp_recv=defer_pp_recv, comm_timeout_s=comm_timeout_s or timeout_s / 3,
            deadline=time.time() + STARTUP_S + timeout_s, runtime_options=runtime_options or {})))
        env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", **(env or {}))
        if sys.platform.startswith("linux"):
            env.setdefault("GLOO_SOCKET_IFNAME", "lo")
        for r in range(ranks):
            with open(tmp / f"stderr{r}", "wb") as err:
                procs.append(subprocess.Popen(
                    [sys.executable, __file__, str(tmp), str(r)], env=env, stdin=subprocess.DEVNULL,
                    stdout=err, stderr=subprocess.STDOUT, start_new_session=True))
        timed_out = _wait_all(procs, start + timeout_s, tmp, ranks)
        seconds = time.monotonic() - start
        if timed_out:
            return Outcome("hang", f"no result after {timeout_s:g} s", seconds)
        failed = _failures(tmp, procs)
        if failed:
            rank, line = failed[0]  # no error of its own before a timeout: a hang
            return Outcome("hang" if _is_gloo_timeout(line) else "error", f"rank {rank}: {line}", seconds)
        wrong = _compare(tmp, ranks, stages, microbatches, placement)
        return Outcome("wrong" if wrong else "ok", wrong or "losses and gradients match", seconds)
    finally:
        _kill(procs)
        shutil.rmtree(tmp, ignore_errors=True)


#: How long the workers may take to import torch and start, on top of the run's timeout (a
#: loaded 2-core machine takes 15 s or more per process to import a CUDA build of torch).
STARTUP_S = 120


def _wait_all(procs, deadline: float, tmp: Path | None = None, ranks: int = 0) -> bool:
    """Wait until every worker exits, or one fails (the others are then killed: a peer of a
    failed rank would only sit in a receive until gloo gives up); True if the deadline passed.
    The deadline is pushed back by the time the workers take to start (their ready files),
    up to :data:`STARTUP_S`."""
    started = time.monotonic()
    ready = False
    while any(p.poll() is None for p in procs):
        if any(p.returncode not in (None, 0) for p in procs):
            time.sleep(0.3)  # let a peer failing for its own reason write its error first
            _kill(procs)
            return False
        now = time.monotonic()
        if not ready:
            if tmp is None or all((tmp / f"ready{r}").exists() for r in range(ranks)):
                ready = True
                deadline += now - started
            elif now > started + STARTUP_S:
                _kill(procs)
                return True
        elif now > deadline:
            _kill(procs)
            return True
        time.sleep(0.02)
    return False


def _kill(procs) -> None:
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)  # the worker's session: it and anything it started
            except ProcessLookupError:
                pass
    for p in procs:
        p.wait()


def _failures(tmp: Path, procs) -> list[tuple[int, str]]:
    """(rank, first exception line) of each failed worker, the cause first: a worker's own
    error (earliest first), then gloo timeouts, then a worker that died without a word, and
    last the errors that only say a peer went away (a consequence, whatever their time)."""
    found = []
    for r, p in enumerate(procs):
        if p.returncode == 0:
            continue
        err = tmp / f"error{r}.json"
        if err.exists():
            e = json.loads(err.read_text())
            kind = 1 if _is_gloo_timeout(e["line"]) else 3 if _is_peer_gone(e["line"]) else 0
            found.append((kind, e["time"], r, e["line"]))
        elif p.returncode != -signal.SIGKILL:  # killed by us: a peer's failure says why
            tail = (tmp / f"stderr{r}").read_text(errors="replace").strip().splitlines()[-1:]
            found.append((2, 0, r, f"exit code {p.returncode}: {' '.join(tail)}"))
    return [(r, line) for *_, r, line in sorted(found)]


def _is_gloo_timeout(line: str) -> bool:
    return "Timed out" in line or "timed out" in line


def _is_peer_gone(line: str) -> bool:
    return "Connection closed by peer" in line or "Connection reset by peer" in line


def _compare(tmp: Path, ranks: int, stages: int, microbatches: int, placement: str) -> str:
    """'' when every stage's gradients and every microbatch's loss equal the reference, else
    which differ."""
    ref_losses, ref_grads = reference(stages, microbatches)
    where = stage_ranks(placement, ranks, stages)
    results = [torch.load(tmp / f"result{r}.pt") for r in range(ranks)]
    problems = []
    for s in range(stages):
        got = results[where[s]]["grads"][s]
        if any(g is None for g in got):
            problems.append(f"stage {s}: no gradient")
        elif not all(torch.allclose(g, e, rtol=RTOL, atol=ATOL) for g, e in zip(got, ref_grads[s])):
            problems.append(f"stage {s}: gradients differ")
    losses = results[where[-1]]["losses"]
    if len(losses) != microbatches:
        problems.append(f"{len(losses)} losses for {microbatches} microbatches")
    else:
        bad = [m for m, (l, e) in enumerate(zip(losses, ref_losses)) if not torch.allclose(l, e, rtol=RTOL, atol=ATOL)]
        if bad:
            problems.append(f"losses of microbatches {bad} differ")
    return "; ".join(problems)


# --- a worker: python _realrt.py TMPDIR RANK ----------------------------------------------

def start_gloo(tmp: Path, rank: int, ranks: int, cfg: dict) -> None:
    """Join the run's gloo group once every worker is up: everyone has imported torch
    (seconds, and uneven on a loaded machine) before anyone starts gloo, whose timeout
    (``cfg["comm_timeout_s"]``) is then only about the schedule."""
    import torch.distributed as dist

    (tmp / f"ready{rank}").touch()
    while not all((tmp / f"ready{r}").exists() for r in range(ranks)):
        if time.time() > cfg["deadline"]:
            raise TimeoutError("Timed out waiting for the other workers to start")
        time.sleep(0.01)
    dist.init_process_group("gloo", init_method=f"file://{tmp / 'store'}", rank=rank, world_size=ranks,
                            timeout=datetime.timedelta(seconds=cfg["comm_timeout_s"]))


def _worker(tmp: Path, rank: int) -> None:
    import torch.distributed as dist
    from torch.distributed.pipelining.schedules import _PipelineScheduleRuntime
    from torch.distributed.pipelining.stage import PipelineStage

    cfg = json.loads((tmp / "config.json").read_text())
    ranks, stages, m = cfg["ranks"], cfg["stages"], cfg["microbatches"]
    start_gloo(tmp, rank, ranks, cfg)
    blocks, x, y = model_and_data(stages, m)
    mine = [s for s, r in enumerate(stage_ranks(cfg["placement"], ranks, stages)) if r == rank]
    pipeline = [PipelineStage(blocks[s], s, stages, torch.device("cpu")) for s in mine]
    schedule = _PipelineScheduleRuntime(pipeline, m, loss_fn=torch.nn.functional.mse_loss,
                                        defer_pp_recv=cfg["defer_pp_recv"], **cfg["runtime_options"])
    schedule._load_csv(str(tmp / "schedule.csv"), format=cfg["fmt"])
    # The first stage's rank passes the batch, the last stage's the target and a list that
    # receives the losses; a rank with neither passes nothing.
    args = (x,) if 0 in mine else ()
    last = stages - 1 in mine
    losses: list = []
    schedule.step(*args, target=y if last else None, losses=losses if last else None)
    torch.save({"grads": {s: [p.grad for p in blocks[s].parameters()] for s in mine},
                "losses": [l.detach() for l in losses]}, tmp / f"result{rank}.pt")
    dist.destroy_process_group()


def _first_line(e: BaseException) -> str:
    return f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0]}"


def run_worker(worker, argv) -> int:
    """A worker process's main: ``worker(tmp, rank)`` from ``argv``; any failure is printed and
    recorded in ``error<rank>.json`` (its first line, and the cause PyTorch wrapped), exit 1."""
    tmp, rank = Path(argv[1]), int(argv[2])
    try:
        worker(tmp, rank)
    except BaseException as e:  # noqa: BLE001 - any failure is the outcome
        traceback.print_exc()
        line = _first_line(e)
        root = e
        while root.__cause__ is not None:  # PyTorch wraps autograd's errors in its own
            root = root.__cause__
        if root is not e:
            line += f" (from {_first_line(root)})"
        (tmp / f"error{rank}.json").write_text(json.dumps({"time": time.time(), "line": line}))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(run_worker(_worker, sys.argv))
