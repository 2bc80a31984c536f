"""DeepSpeed's real pipeline engine (0.19.8, gloo, CPU, 2 ranks, a tiny PipelineModule) runs
each instruction stream schedverify checks, the stream swapped in through a TrainSchedule
subclass (tests/_dsrt.py): the verdict on the stream equals what the engine does with it.
VALID runs to the end with the loss of TrainSchedule's own stream; a hang (SV402) is a run
that ends by its timeout; any other finding runs to a wrong loss or to an error.  Skipped
unless DeepSpeed 0.19.8 and torch are installed (.ci/frameworks installs them).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

import schedverify as sv
from schedverify.frameworks import deepspeed as ds

pytestmark = [pytest.mark.frameworks, pytest.mark.slow,
              pytest.mark.skipif(ds.framework_steps("0.19.8") is None, reason="deepspeed 0.19.8 is not installed")]

WORKER = Path(__file__).resolve().parent / "_dsrt.py"
STAGES, M = 2, 4
#: seconds a run may take before it counts as hung (a healthy run takes about 25 s on 2 cores)
TIMEOUT = float(os.environ.get("SCHEDVERIFY_DS_TIMEOUT", "75"))
#: the first run of a venv also builds DeepSpeed's CPU communication op (deepspeed_shm_comm_op):
#: TrainSchedule's own stream, which must run to its end, gets this long
FIRST_RUN_TIMEOUT = 900.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_engine(steps, timeout: float = TIMEOUT, dualpipev: bool = False) -> tuple[str, float | None]:
    """("done", loss), ("hang", None) or ("error", None) of the two ranks running ``steps``
    (TrainSchedule's (name, microbatch, buffer) on PipelineEngine; with ``dualpipev``,
    DualPipeVSchedule's (name, phase, buffer) on DualPipeVEngine).  An error prints each
    rank's output, which pytest shows with the failure."""
    outcome, outs = _run_engine(steps, timeout, dualpipev)
    if outcome[0] == "error":
        for rank, (code, out) in enumerate(outs):
            print(f"rank {rank} exited {code}:\n{out[-4000:]}")
    return outcome


def _run_engine(steps, timeout: float, dualpipev: bool):
    stream = [[[[name, buffer, phase] if dualpipev else [name, buffer] for name, phase, buffer in step]
               for step in steps(M, STAGES, stage)] for stage in range(STAGES)]
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()), WORLD_SIZE=str(STAGES),
               SV_STEPS=json.dumps(stream), SV_MICROBATCHES=str(M), DS_ACCELERATOR="cpu",
               SV_DUALPIPEV="1" if dualpipev else "0",
               # the op DeepSpeed builds on first use, per venv: a build of one venv's is not
               # another's, and a run killed as hung never leaves a half-built op's lock in a
               # directory another venv's tier then waits on
               TORCH_EXTENSIONS_DIR=os.environ.get("TORCH_EXTENSIONS_DIR", str(Path(sys.prefix) / "torch_extensions")))
    procs = [subprocess.Popen([sys.executable, str(WORKER)], env=dict(env, RANK=str(r), LOCAL_RANK=str(r)),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
             for r in range(STAGES)]
    deadline, outs, hung = time.monotonic() + timeout, [], False
    for p in procs:
        try:
            out, _ = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            hung = True
            os.killpg(p.pid, 9)
            out, _ = p.communicate()
        outs.append((p.returncode, out))
    if hung:
        return ("hang", None), outs
    done = [line for _, out in outs for line in out.splitlines() if line.startswith("DONE ")]
    if len(done) != STAGES or any(code != 0 for code, _ in outs):
        return ("error", None), outs
    return ("done", float(done[-1].split()[1])), outs


def mutated(change):
    """TrainSchedule's stream (name, microbatch, buffer) with ``change(stage, rows)`` applied."""
    def steps(m, stages, stage):
        rows = [list(r) for r in ds.train_steps(m, stages, stage)]
        change(stage, rows)
        return rows
    return steps


def swap_send_recv(stage, rows):  # stage 0: SendActivation(1) before RecvGrad(0)
    if stage == 0:
        assert [n for n, _, _ in rows[3]] == ["RecvGrad", "SendActivation", "BackwardPass"]
        rows[3][0], rows[3][1] = rows[3][1], rows[3][0]


def drop_send_grad(stage, rows):  # stage 1 never sends microbatch 0's gradient
    if stage == 1:
        for row in rows:
            if row and row[0][0] == "SendGrad":
                row.pop(0)
                return


def move_recv(stage, rows):  # stage 1: RecvActivation(1) after the ForwardPass it feeds
    if stage == 1:
        for row in rows:
            names = [n for n, _, _ in row]
            if "RecvActivation" in names and row[names.index("RecvActivation")][1] == 1:
                recv = row.pop(names.index("RecvActivation"))
                row.append(recv)
                return


CASES = {"TrainSchedule": ds.train_steps, "swapped send/recv": mutated(swap_send_recv),
         "missing SendGrad": mutated(drop_send_grad), "moved RecvActivation": mutated(move_recv)}


def verdict(steps) -> str:
    r = sv.check(ds.schedule(STAGES, M, steps=steps), comm_semantics="torch")
    if r.is_valid:
        return "valid"
    return "hang" if r.codes()[0] == "SV402" else "invalid"


@pytest.fixture(scope="module")
def reference_loss():
    outcome, loss = run_engine(ds.train_steps, FIRST_RUN_TIMEOUT)
    assert outcome == "done", outcome
    return loss


@pytest.mark.parametrize("case", list(CASES))
def test_the_verdict_is_what_deepspeeds_engine_does(case, reference_loss):
    steps = CASES[case]
    expected = verdict(steps)
    outcome, loss = run_engine(steps) if case != "TrainSchedule" else ("done", reference_loss)
    if expected == "valid":
        assert outcome == "done" and loss == reference_loss, (case, outcome, loss)
    elif expected == "hang":
        assert outcome == "hang", (case, outcome)
    else:
        assert outcome == "error" or outcome == "done" and loss != reference_loss, (case, outcome, loss)


def split_commits(m, stages, stage):
    """DualPipeVSchedule's stream with each send and receive posted by a CommitP2P of its own,
    right where it is queued: the operations of one batch no longer go together."""
    rows = []
    for row in ds.dualpipev_steps(m, stages, stage):
        rows.append([x for cmd in row for x in ([cmd, (ds.COMMIT, None, None)] if cmd[0] in ds.KIND
                                                and cmd[0] not in ("ForwardPass", "BackwardPass") else [cmd])])
    return rows


DUALPIPEV_CASES = {"DualPipeVSchedule": ds.dualpipev_steps, "one CommitP2P per operation": split_commits}


@pytest.mark.parametrize("case", list(DUALPIPEV_CASES))
def test_the_verdict_is_what_deepspeeds_dualpipev_engine_does(case, reference_loss):
    """DualPipeVEngine (a DualPipeVModule of four Linear layers on 2 ranks, M = 4):
    DualPipeVSchedule's own stream, valid, runs to its end; posting each operation alone
    deadlocks (SV402 over gloo) and the run hangs until its timeout."""
    steps = DUALPIPEV_CASES[case]
    r = sv.check(ds.schedule(STAGES, M, dualpipev=True, steps=steps), comm_semantics="torch")
    assert r.profile.release.name == "deepspeed 0.19.8 DualPipeVEngine"
    expected = "valid" if r.is_valid else "hang" if r.codes()[0] == "SV402" else "invalid"
    assert expected == ("valid" if case == "DualPipeVSchedule" else "hang"), r.codes()
    outcome, loss = run_engine(steps, dualpipev=True)
    if expected == "valid":
        assert outcome == "done" and loss is not None and loss > 0, (case, outcome, loss)
    else:
        assert outcome == "hang", (case, outcome)
