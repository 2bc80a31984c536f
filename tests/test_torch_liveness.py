"""Activation memory against PyTorch's own count: from 2.15, PyTorch's
``analyze_pipeline_activation_liveness`` assigns each rank's (stage, microbatch) activations
to reusable slots, from a forward to its full backward or weight-gradient pass, both
inclusive; its number of slots is the largest number of activations alive at once, which is
schedverify's peak in-flight count (docs/spec.md 5).  The two are held equal on every
schedule class PyTorch has and on our generators, compute-only and lowered (docs/spec.md 9.6
says where they differ: nowhere but PyTorch's Schedule1F1B, whose order PyTorch's own
analysis refuses)."""

from __future__ import annotations

import csv
import io
import warnings

import pytest

import schedverify as sv
from schedverify.generators import FAMILIES
from schedverify.lowering import lower

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from torch.distributed.pipelining import schedules as ts  # noqa: E402

from _realrt import mock_stages  # noqa: E402

if not hasattr(ts, "analyze_pipeline_activation_liveness"):
    pytest.skip(f"torch {torch.__version__} has no analyze_pipeline_activation_liveness (PyTorch 2.15 and later)",
                allow_module_level=True)

#: PyTorch's classes (stages per rank, placement) and the sizes they are compared at
CLASSES = {"GPipe": (1, "loop"), "Interleaved1F1B": (2, "loop"), "LoopedBFS": (2, "loop"),
           "InterleavedZeroBubble": (2, "loop"), "ZBVZeroBubble": (2, "v"), "DualPipeV": (2, "v")}
SIZES = [(2, 4), (3, 6), (4, 8)]
UNIDIRECTIONAL = [name for name in FAMILIES if name not in ("dualpipe", "chimera")]


def _slots(schedule, ranks: int) -> list[int]:
    """PyTorch's number of activation slots of each rank, at stage-microbatch granularity."""
    order = (schedule.pipeline_order_with_comms if isinstance(schedule, ts._PipelineScheduleRuntime)
             else schedule.pipeline_order)
    out = []
    for r in range(ranks):
        stages = sorted({x.stage_index for a in order[r] if a is not None for x in (a.sub_actions or (a,))
                         if x.computation_type == ts.F})
        out.append(ts.analyze_pipeline_activation_liveness(
            schedule, pp_rank=r, stage_indices=stages, granularity="stage_microbatch").num_slots)
    return out


def _csv(order) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf)
    for rank in order:
        writer.writerow(order[rank])
    return buf.getvalue()


def _peaks(schedule: sv.Schedule) -> list[int]:
    return [d.peak_inflight for d in sv.check(schedule, comm_semantics="eager").metrics.devices]


@pytest.mark.parametrize("pp, m", SIZES)
@pytest.mark.parametrize("name", sorted(CLASSES))
def test_peak_in_flight_is_pytorchs_number_of_activation_slots(name, pp, m):
    per_rank, placement = CLASSES[name]
    cls = ts.get_schedule_class(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sched = cls(mock_stages(pp, per_rank, single=issubclass(cls, ts.PipelineScheduleSingle)), m)
    ours = sv.loads_csv(_csv(sched.pipeline_order), stages=pp * per_rank, microbatches=m, placement=placement)
    assert _peaks(ours) == _slots(sched, pp)


@pytest.mark.parametrize("pp, m", SIZES)
@pytest.mark.parametrize("family", UNIDIRECTIONAL)
def test_our_generators_in_flight_is_pytorchs_count_once_it_loads_them(family, pp, m):
    """Our schedule, loaded into PyTorch's runtime (which lowers it): its slots per rank are
    our in-flight peaks, of the compute-only schedule and of our lowering of it."""
    s = FAMILIES[family](pp, m)
    per_rank = s.stages // pp
    runtime = ts._PipelineScheduleRuntime(mock_stages(pp, per_rank), m)
    actions = {r: [ts._Action.from_str(str(a)) if a is not None else None for a in row]
               for r, row in enumerate(s.order)}
    runtime._prepare_schedule_with_comms(actions)
    theirs = _slots(runtime, pp)
    assert _peaks(s) == theirs
    assert [d.peak_inflight for d in sv.check(lower(s), comm_semantics="torch").metrics.devices] == theirs


def test_pytorchs_own_analysis_refuses_its_1f1b_order():
    """Schedule1F1B's pipeline_order names a forward of microbatch M on the last rank (the
    off-by-one tests/test_torch_interop.py documents): PyTorch's analysis raises, our check
    reports SV102 at the same action."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sched = ts.Schedule1F1B(mock_stages(3, 1, single=True), 6)
    with pytest.raises(ValueError, match="Action 2F6 has a microbatch outside"):
        _slots(sched, 3)
    ours = sv.loads_csv(_csv(sched.pipeline_order), stages=3, microbatches=6)
    assert "SV102" in sv.check(ours, comm_semantics="eager").codes()
