"""PyTorch interoperability: every schedule class ``get_schedule_class`` knows, built without a
process group (as torch/distributed/pipelining/_schedule_visualizer.get_schedule_ops does),
written with PyTorch's own ``_dump_csv`` (compute-only, and compute+comms after PyTorch's
lowering), read back with ``schedverify.load`` and checked.  Each one is valid, or the test
documents the PyTorch bug that makes it invalid, with our violation."""

from __future__ import annotations

import warnings

import pytest

import schedverify as sv
from schedverify.lowering import torch_lowering

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from torch.distributed.pipelining import schedules as ts  # noqa: E402

from _realrt import mock_stages  # noqa: E402

#: name -> (multi-stage, placement our reader infers)
CLASSES = {
    "GPipe": (False, "loop"),
    "1F1B": (False, "loop"),
    "Interleaved1F1B": (True, "loop"),
    "LoopedBFS": (True, "loop"),
    "InterleavedZeroBubble": (True, "loop"),
    "ZBVZeroBubble": (True, "v"),
    "DualPipeV": (True, "v"),
}
SIZES = [(2, 4), (3, 6), (4, 4), (4, 8)]
# stages per rank for the multi-stage classes (V-shaped ones need exactly 2)
PER_RANK = {"Interleaved1F1B": (2, 3), "LoopedBFS": (2, 3), "InterleavedZeroBubble": (2, 3),
            "ZBVZeroBubble": (2,), "DualPipeV": (2,)}


def _stages(cls, pp: int, per_rank: int):
    return mock_stages(pp, per_rank, single=issubclass(cls, ts.PipelineScheduleSingle))


def build(name: str, pp: int, microbatches: int, per_rank: int = 1):
    cls = ts.get_schedule_class(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return cls(_stages(cls, pp, per_rank), microbatches)


def lower(name: str, pp: int, microbatches: int, per_rank: int):
    """PyTorch's runtime with its compute+comms lowering of the schedule."""
    sched = build(name, pp, microbatches, per_rank)
    cls = ts.get_schedule_class(name)
    stages = _stages(cls, pp, per_rank)
    runtime = ts._PipelineScheduleRuntime(stages if isinstance(stages, list) else [stages], microbatches)
    runtime._prepare_schedule_with_comms(sched.pipeline_order)
    return runtime


def dump_compute_only(sched, path) -> None:
    """PyTorch's own writer: PipelineScheduleMulti._dump_csv; the single-stage classes have
    none in 2.13, so for them the same body (csv.writer over pipeline_order) runs here."""
    if isinstance(sched, ts.PipelineScheduleMulti):
        sched._dump_csv(str(path), format="compute_only")
        return
    import csv

    with open(path, "w", newline="") as csvfile:
        writer = csv.writer(csvfile)
        for rank in sched.pipeline_order:
            writer.writerow(sched.pipeline_order[rank])


def cases():
    for name, (multi, _) in CLASSES.items():
        for pp, m in SIZES:
            for per_rank in (PER_RANK[name] if multi else (1,)):
                if name == "DualPipeV" and m < pp * per_rank:
                    continue  # PyTorch: "requires at least as many microbatches as stages"
                yield pytest.param(name, pp, m, per_rank, id=f"{name}-pp{pp}-m{m}-v{per_rank}")


def assert_valid(report):
    assert report.is_valid, "\n".join(map(str, report.violations[:10]))


@pytest.mark.parametrize("name, pp, m, per_rank", list(cases()))
def test_compute_only_csv(tmp_path, name, pp, m, per_rank):
    sched = build(name, pp, m, per_rank)
    path = tmp_path / f"{name}.csv"
    dump_compute_only(sched, path)
    s = sv.load(path)
    stages = pp * per_rank
    assert s.devices == pp
    assert [[str(a) if a else "" for a in row] for row in s.order] == \
        [[str(a) if a else "" for a in sched.pipeline_order[r]] for r in range(pp)]
    if name == "1F1B":
        # PyTorch 2.13 bug in Schedule1F1B._get_pipeline_order: the last rank has no warm-up
        # forward, so ``forward_mb`` is bumped from 0 to 1 before its first forward: it never
        # runs microbatch 0's forward and runs a forward of microbatch M, one past the end.
        # (The eager runtime does not use this IR, but the visualizer and CSV export do.)
        s = sv.load(path, microbatches=m)
        report = sv.check(s)
        last = pp - 1
        found = {(v.code.code, v.locations[0].device, v.locations[0].action) for v in report.violations}
        # and, checked as PyTorch's runtime runs it (a CSV's default), the loss stage's first
        # forward is microbatch 1: SV406
        assert found == {("SV102", last, f"{last}F{m}"), ("SV201", last, f"{last}F0"),
                         ("SV406", last, f"{last}F1")}
        (bad,) = [v for v in report.violations if v.code.code == "SV102"]
        assert bad.message == f"microbatch {m} is out of range: the schedule has {m} microbatches (0..{m - 1})"
        return
    assert (s.stages, s.microbatches) == (stages, m)
    assert s.placement.specs == (CLASSES[name][1],)
    report = sv.check(s)
    assert_valid(report)
    busy = {d.busy for d in report.metrics.devices}
    # every rank does the same work: F=1 and B=2 (or I=1 + W=1) per stage and microbatch
    assert busy == {3 * m * per_rank}


@pytest.mark.parametrize("name, pp, m, per_rank", [c for c in cases() if CLASSES[c.values[0]][0]])
def test_compute_comms_csv_under_both_semantics(tmp_path, name, pp, m, per_rank):
    runtime = lower(name, pp, m, per_rank)
    path = tmp_path / f"{name}_comms.csv"
    runtime._dump_csv(str(path), format="compute_comms")
    s = sv.load(path)
    assert s.has_explicit_comm
    assert (s.devices, s.stages, s.microbatches) == (pp, pp * per_rank, m)
    kinds = {a.kind for row in s.order for a in row if a is not None}
    assert {"SEND_F", "RECV_F", "SEND_B", "RECV_B"} <= kinds
    for semantics in ("eager", "rendezvous"):
        assert_valid(sv.check(s, comm_semantics=semantics))
    # the lowering keeps the compute order: dropping comms gives the compute-only schedule back
    compute = [[a for a in row if a is not None and a.kind in COMPUTE] for row in s.order]
    plain = [[a for a in row if a is not None and a.kind in COMPUTE]
             for row in sv.loads_csv(_compute_only_text(name, pp, m, per_rank)).order]
    assert compute == plain


COMPUTE = ("F", "B", "I", "W", "OVERLAP_F_B")


@pytest.mark.parametrize("defer", [False, True], ids=["plain", "defer_pp_recv"])
@pytest.mark.parametrize("name, pp, m, per_rank", [c for c in cases() if CLASSES[c.values[0]][0]])
def test_our_lowering_is_pytorchs_action_for_action(name, pp, m, per_rank, defer):
    """schedverify.lowering.torch_lowering against _prepare_schedule_with_comms (and
    _defer_recv_ops), on every multi-stage class and size: what check verifies for a
    compute-only CSV is what PyTorch's runtime executes."""
    runtime = lower(name, pp, m, per_rank)
    theirs = runtime.pipeline_order_with_comms
    if defer:
        ranks = runtime.stage_index_to_group_rank
        theirs = ts._defer_recv_ops(theirs, lambda s: ranks[s])
    s = sv.loads_csv(_compute_only_text(name, pp, m, per_rank), stages=pp * per_rank,
                     placement=CLASSES[name][1])
    ours = torch_lowering(s, defer_recv=defer)
    assert [[str(a) for a in row] for row in ours.order] == [[str(a) for a in theirs[r]] for r in range(pp)]
    # on gloo, the plain lowering runs at the compute-only makespan; the deferred one runs
    # too, but may cross its messages (tests/test_realrt.py runs both for real)
    report = sv.check(ours, comm_semantics="torch")
    if not defer:
        assert_valid(report)
        assert report.metrics.makespan == sv.check(s, comm_semantics="torch").metrics.makespan
    else:
        assert set(report.codes()) <= {"SV504"}, [str(v) for v in report.violations]


def _compute_only_text(name, pp, m, per_rank) -> str:
    import csv
    import io

    buf = io.StringIO()
    writer = csv.writer(buf)
    order = build(name, pp, m, per_rank).pipeline_order
    for rank in order:
        writer.writerow(order[rank])
    return buf.getvalue()


@pytest.mark.parametrize("name, error, message", [
    # PyTorch 2.13 limitation: the runtime's lowering refuses the REDUCE_GRAD that the single-
    # stage generators append themselves, so no compute+comms CSV exists for these classes...
    ("GPipe", ValueError, "found communication action '0REDUCE_GRAD'"),
    # ... and for 1F1B PyTorch's own validator trips over the off-by-one above first.
    ("1F1B", AssertionError, "Rank 3, step 1: Running Full Backward for stage 3, microbatch 0 without first running Forward"),
])
def test_single_stage_schedules_cannot_be_lowered_by_pytorch(name, error, message):
    with pytest.raises(error, match=message):
        lower(name, 4, 8, 1)


def test_our_lowering_refuses_what_pytorchs_refuses():
    from schedverify.lowering import LoweringError

    gpipe = sv.loads_csv(_compute_only_text("GPipe", 4, 8, 1))
    with pytest.raises(LoweringError, match="Expected compute-only schedule but found 0REDUCE_GRAD at rank 0"):
        torch_lowering(gpipe)


def test_gpipe_with_comms_once_reduce_grad_is_left_out(tmp_path):
    # Without the bookkeeping actions (REDUCE_GRAD; from 2.15 also WAIT_REDUCE_GRAD) PyTorch
    # lowers GPipe fine, and so we check it.
    sched = build("GPipe", 4, 8, 1)
    order = {r: [a for a in row if a is None or a.is_compute_op] for r, row in sched.pipeline_order.items()}
    runtime = ts._PipelineScheduleRuntime([_stages(ts.ScheduleGPipe, 4, 1)], 8)
    runtime._prepare_schedule_with_comms(order)
    path = tmp_path / "gpipe_comms.csv"
    runtime._dump_csv(str(path), format="compute_comms")
    s = sv.load(path)
    for semantics in ("eager", "rendezvous"):
        assert_valid(sv.check(s, comm_semantics=semantics))


def test_pytorch_and_schedverify_agree_on_a_broken_schedule(tmp_path):
    # Swap two forwards on rank 1 of a lowered Interleaved1F1B: PyTorch's simulator and our
    # checker must both refuse it; ours says where and why.
    runtime = lower("Interleaved1F1B", 2, 4, 2)
    path = tmp_path / "ok.csv"
    runtime._dump_csv(str(path), format="compute_comms")
    rows = path.read_text().splitlines()
    cells = rows[1].split(",")
    f = [i for i, c in enumerate(cells) if c in ("1F0", "1F1")]
    cells[f[0]], cells[f[1]] = cells[f[1]], cells[f[0]]
    rows[1] = ",".join(cells)
    bad = tmp_path / "bad.csv"
    bad.write_text("\n".join(rows) + "\n")
    report = sv.check(sv.load(bad))
    assert not report.is_valid
    assert {v.code.code for v in report.violations} & {"SV401", "SV402"}
    order = {r: [ts._Action.from_str(c) if c else None for c in row.split(",")] for r, row in enumerate(rows)}
    with pytest.raises(Exception):
        ts._simulate_comms_compute(order, lambda s: s % 2, 4)


def test_examples_exported_from_pytorch_are_current(tmp_path):
    """examples/pytorch_interleaved_1f1b*.csv are what examples/export_pytorch.py writes."""
    import runpy
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    script = runpy.run_path(str(root / "examples" / "export_pytorch.py"))
    written = script["export"](tmp_path)
    for path in written:
        assert path.read_text() == (root / "examples" / path.name).read_text(), path.name
        assert sv.check(sv.load(path)).is_valid


def test_every_schedule_name_pytorch_knows_is_covered():
    """If PyTorch adds a schedule to get_schedule_class, this test asks for it to be checked."""
    import inspect
    import re

    names = set(re.findall(r'"(\w+)":\s*\w+,', inspect.getsource(ts.get_schedule_class)))
    # the two base classes generate nothing: one is abstract, the other has an empty order
    bases = {"PipelineScheduleSingle", "PipelineScheduleMulti"}
    assert names - bases == set(CLASSES)
    with pytest.raises(TypeError, match="abstract"):
        build("PipelineScheduleSingle", 2, 4, 1)
    assert build("PipelineScheduleMulti", 2, 4, 2).pipeline_order == {}
