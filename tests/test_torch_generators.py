"""Our generators against PyTorch 2.13's own schedules (optional tier: needs torch).

PyTorch's schedules are built without a process group, as its
``_schedule_visualizer.get_schedule_ops`` does (mock stages), and compared on their compute
actions (PyTorch pads with idle slots and appends ``REDUCE_GRAD``, which order nothing
here).  What we found, and which side is right:

- GPipe, LoopedBFS: identical on every size tried.
- Interleaved1F1B: identical to ``interleaved-1f1b`` with ``--group-size`` set to PyTorch's
  ``n_microbatches // max(1, n_microbatches // D)`` (its "microbatches per round").  PyTorch
  always picks that group; Megatron and we default to ``D`` (for M = 10, D = 4 PyTorch
  uses groups of 5, where Megatron with the default refuses: 10 % 4 = 2 < 4).  PyTorch
  also accepts ``M < D`` (one round of M microbatches), which Megatron and we refuse: our
  checker finds PyTorch's version valid, but its bubble exceeds the paper's
  ``(D-1)(t_F + t_B)``, which is why Megatron refuses it.  Neither order is wrong; the
  refusal is Megatron's rule.
- InterleavedZeroBubble: identical to ``zb-h1 --chunks V`` (ZB-H1's warm-up ``D-1-d`` and
  W lag ``d`` over Megatron's interleaved table), with the same group as above.
- PyTorch's lowered versions (with SEND/RECV) of these are valid under both eager and
  rendezvous semantics.
- 1F1B (not one of the families compared, found on the way): PyTorch 2.13's
  ``Schedule1F1B._get_pipeline_order`` (the order its visualizer and simulator use; its
  runtime loop is separate) gives the last rank forwards ``1..M`` instead of ``0..M-1``:
  ``forward_mb`` starts at 0 and is incremented before the first steady forward when the
  rank has no warm-up.  Our checker says invalid (SV102 out-of-range microbatch M, SV201
  forward of microbatch 0 missing), so there PyTorch is wrong and ours is right.
"""

from __future__ import annotations

import warnings

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

from schedverify import Costs, Schedule, check  # noqa: E402
from schedverify import timeline  # noqa: E402
from schedverify.generators import (  # noqa: E402
    gpipe,
    interleaved_1f1b,
    looped_bfs,
    one_f_one_b,
    zb_h1,
)
from schedverify.io import parse_action  # noqa: E402
from schedverify.model import COMPUTE_KINDS  # noqa: E402

pytestmark = pytest.mark.torch


def torch_rows(name: str, devices: int, microbatches: int, chunks: int | None = None, *,
               with_comms: bool = False):
    """PyTorch's order for schedule class ``name``, as our Actions (idle slots dropped)."""
    from torch.distributed.pipelining._schedule_visualizer import get_schedule_ops

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ops = get_schedule_ops(name, devices, microbatches, num_stages_per_rank=chunks,
                               with_comms=with_comms)
    return [[parse_action(str(a)) for a in row if a is not None] for row in ops]


def compute_only(rows):
    return [[a for a in row if a.kind in COMPUTE_KINDS] for row in rows]


def ours(schedule: Schedule):
    return [list(row) for row in schedule.order]


def torch_group(devices: int, microbatches: int) -> int:
    """PyTorch's microbatches_per_round for its interleaved schedules."""
    return microbatches // max(1, microbatches // devices)


def torch_accepts(devices: int, microbatches: int) -> bool:
    return microbatches % max(1, microbatches // devices) == 0


def verdict(rows, stages: int, microbatches: int, **kw):
    return check(Schedule.build(rows, stages=stages, microbatches=microbatches), **kw)


small = settings(max_examples=15)


@small
@given(st.integers(1, 6), st.integers(1, 12))
def test_gpipe_matches(p, m):
    rows = torch_rows("GPipe", p, m)
    assert compute_only(rows) == ours(gpipe(p, m))
    assert verdict(rows, p, m).verdict.value == "valid"


@small
@given(st.integers(1, 5), st.integers(1, 10), st.integers(2, 4))
def test_looped_bfs_matches(p, m, v):
    rows = torch_rows("LoopedBFS", p, m, v)
    assert compute_only(rows) == ours(looped_bfs(p, m, chunks=v))
    assert verdict(rows, p * v, m).verdict.value == "valid"


@small
@given(st.integers(1, 5), st.integers(1, 16), st.integers(2, 4))
def test_interleaved_1f1b_matches_with_pytorchs_group(p, m, v):
    assume(m >= p and torch_accepts(p, m))
    rows = torch_rows("Interleaved1F1B", p, m, v)
    assert compute_only(rows) == ours(interleaved_1f1b(p, m, chunks=v, group_size=torch_group(p, m)))


@small
@given(st.integers(1, 5), st.integers(1, 16), st.integers(2, 3))
def test_interleaved_zero_bubble_is_zb_h1_interleaved(p, m, v):
    assume(m >= p and torch_accepts(p, m))
    rows = torch_rows("InterleavedZeroBubble", p, m, v)
    assert compute_only(rows) == ours(zb_h1(p, m, chunks=v, group_size=torch_group(p, m)))
    assert verdict(rows, p * v, m).verdict.value == "valid"


def test_pytorch_default_group_differs_from_megatrons():
    # M = 10, D = 4: PyTorch runs 2 rounds of 5; Megatron's default group 4 is refused.
    rows = torch_rows("Interleaved1F1B", 4, 10, 2)
    assert compute_only(rows) == ours(interleaved_1f1b(4, 10, chunks=2, group_size=5))
    with pytest.raises(Exception, match="10 % 4 = 2"):
        interleaved_1f1b(4, 10, chunks=2)


@pytest.mark.parametrize("p, m", [(4, 3), (4, 2), (3, 2), (5, 4)])
def test_pytorch_accepts_fewer_microbatches_than_devices(p, m):
    """Valid, but over the paper's bubble: the reason Megatron (and we) refuse it."""
    rows = torch_rows("Interleaved1F1B", p, m, 2)
    costs = Costs(F=1, B=2)
    assert verdict(rows, 2 * p, m).verdict.value == "valid"
    T = timeline(Schedule.build(compute_only(rows), stages=2 * p, microbatches=m), costs=costs).makespan
    assert T - 2 * m * 3 > (p - 1) * 3
    with pytest.raises(Exception, match="between devices and microbatches"):
        interleaved_1f1b(p, m, chunks=2)


@pytest.mark.parametrize("name", ["Interleaved1F1B", "LoopedBFS", "InterleavedZeroBubble"])
@pytest.mark.parametrize("semantics", ["eager", "rendezvous"])
def test_pytorchs_lowered_schedules_are_valid(name, semantics):
    rows = torch_rows(name, 4, 8, 2, with_comms=True)
    assert any(a.kind.startswith("SEND") for a in rows[0])
    report = verdict(rows, 8, 8, comm_semantics=semantics)
    assert report.verdict.value == "valid", [str(v) for v in report.violations[:3]]


@pytest.mark.skipif(not torch.__version__.startswith("2.13"), reason="documents PyTorch 2.13's order")
@pytest.mark.parametrize("p, m", [(3, 4), (4, 8)])
def test_pytorch_1f1b_order_misnumbers_the_last_rank(p, m):
    rows = torch_rows("1F1B", p, m)
    last = [a for a in rows[-1] if a.kind == "F"]
    assert [a.microbatch for a in last] == list(range(1, m + 1))
    report = verdict(rows, p, m)
    assert report.verdict.value == "invalid"
    assert {v.code.code for v in report.violations} >= {"SV102", "SV201"}
    # The other ranks agree with ours.
    assert compute_only(rows)[:-1] == ours(one_f_one_b(p, m))[:-1]
