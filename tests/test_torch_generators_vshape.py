"""Our zb-v and dualpipe-v against PyTorch 2.13's ScheduleZBVZeroBubble and
ScheduleDualPipeV, built without a process group as ``_schedule_visualizer.get_schedule_ops``
does (mock stages), then read through our action grammar.

What differs, and which is right:

1. ZB-V, idle placeholders.  PyTorch starts rank ``r``'s list with ``r`` ``None`` cells (a
   drawing aid) and, when ``M < 2D-1``, builds the order for ``2D-1`` microbatches and
   turns the actions of microbatches ``>= M`` into ``None``.  We build the same
   ``max(M, 2D-1)`` order and drop those actions.  ``None`` is an idle slot, which the
   timing ignores, so both lists run identically: once the ``None`` cells are removed the
   two orders are equal action for action, our checker finds PyTorch's version valid, and
   its makespan and peaks equal ours.  Neither is wrong; ours carries no dead cells.
2. DualPipeV: equal action for action, including the last rank's first main-loop step
   (``F`` then ``B``, not overlapped), the ``OVERLAP_F_B`` pairs (PyTorch's ``B`` is the
   full backward, as in DualPipe's ``_forward_backward_chunk``), and the zero-bubble switch
   in step 6.  Both refuse ``M < 2D`` (the DualPipe repository asserts the same).
"""

from __future__ import annotations

import warnings

import pytest

from schedverify import Costs, Schedule, check, parse_action, timeline
from schedverify.generators.bidirectional import dualpipe_v
from schedverify.generators.vshape import zb_v

pytestmark = pytest.mark.torch


@pytest.fixture(scope="module")
def torch_ops():
    pytest.importorskip("torch")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from torch.distributed.pipelining._schedule_visualizer import get_schedule_ops

    def ops(name: str, devices: int, microbatches: int):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            rows = get_schedule_ops(name, devices, microbatches)
        return [[None if a is None else parse_action(str(a)) for a in row] for row in rows]

    return ops


def torch_schedule(rows, devices: int, microbatches: int, name: str) -> Schedule:
    return Schedule.build(rows, stages=2 * devices, microbatches=microbatches, placement="v",
                          name=name)


def compact(rows):
    return [[a for a in row if a is not None] for row in rows]


ZBV_SIZES = [(1, 1), (1, 4), (2, 1), (2, 3), (2, 8), (3, 2), (3, 5), (3, 11), (4, 3),
             (4, 7), (4, 8), (4, 16), (5, 9), (6, 4), (6, 11), (6, 24)]
DPV_SIZES = [(1, 2), (1, 5), (2, 4), (2, 7), (3, 6), (3, 10), (4, 8), (4, 10), (4, 21),
             (5, 10), (6, 12), (6, 30)]


@pytest.mark.parametrize("devices, m", ZBV_SIZES)
def test_zb_v_matches_pytorch(torch_ops, devices, m):
    rows = torch_ops("ZBVZeroBubble", devices, m)
    ours = zb_v(devices, m)
    assert compact(rows) == [list(r) for r in ours.order]
    # the only difference is placeholders: rank r starts with r idle cells, and microbatches
    # beyond M are blanked when M < 2D-1
    for r, row in enumerate(rows):
        assert row[:r] == [None] * r
    theirs = torch_schedule(rows, devices, m, "pytorch-zbv")
    report = check(theirs)
    assert report.verdict.value == "valid"
    costs = Costs(F=1, I=1, W=1)
    assert timeline(theirs, costs=costs).makespan == timeline(ours, costs=costs).makespan
    assert ([d.peak_inflight for d in report.metrics.devices]
            == [d.peak_inflight for d in check(ours).metrics.devices])


@pytest.mark.parametrize("devices, m", DPV_SIZES)
def test_dualpipe_v_matches_pytorch(torch_ops, devices, m):
    rows = torch_ops("DualPipeV", devices, m)
    assert all(a is not None for row in rows for a in row)
    assert rows == [list(r) for r in dualpipe_v(devices, m).order]
    assert check(torch_schedule(rows, devices, m, "pytorch-dualpipev")).verdict.value == "valid"


def test_pytorch_dualpipe_v_refuses_what_we_refuse(torch_ops):
    from schedverify import UnsupportedSize

    with pytest.raises(ValueError, match="at least as many microbatches as stages"):
        torch_ops("DualPipeV", 4, 7)
    with pytest.raises(UnsupportedSize, match="at least 2 x devices = 8"):
        dualpipe_v(4, 7)
