"""Zero Bubble's handcrafted schedules ZB-H1 and ZB-H2 (Qi, Wan, Huang and Lin, "Zero Bubble
(Almost) Pipeline Parallelism", ICLR 2024, section 2).

Both split each backward into ``I`` (input gradient, the paper's B) and ``W`` (weight
gradient).  ``I`` stays on the critical path between stages; ``W`` only has to follow its
own ``I``, so it can be moved to fill idle time.  Both are the 1F1B phase pattern
(:func:`~schedverify.generators._build.phases`) with a per-device warm-up and a per-device
*W lag* (how many ``I`` run before the first ``W``), scaled by one factor ``k``:

    device d: warm-up k*(D-1-d) forwards, W lag k*d, so k*(D-1) + 1 microbatches in flight

``k`` = 1 is ZB-H1 (1F1B's warm-up, ``D`` in flight on every device: 1F1B's peak) and
``k`` = 2 is ZB-H2 (extra warm-up forwards fill the bubble before the first ``I``, and the
deferred ``W`` fill the tail, turning the trapezoid into a parallelogram; ``2D-1`` in
flight).  The paper states no tunable parameter for either; the W delay is fixed by the
in-flight budget, so none is exposed.

ZB-H1 also takes ``chunks`` (stages per device, loop placement): the same warm-up and W
lag on top of Megatron's interleaved order, which is what PyTorch ships as
``ScheduleInterleavedZeroBubble`` (its "ZB1P").
"""

from __future__ import annotations

from ..model import Schedule
from ._build import assemble, certified, looped_rows, megatron_group, positive, require


def _zb_handcrafted(name: str, k: int, devices: int, microbatches: int) -> Schedule:
    """``_build.phases(work, work, k*(D-1-d), w_lag=k*d)`` on every device, built from the
    family's certificate (certificates/zero_bubble.py), which is that order at every size."""
    positive(name, devices=devices, microbatches=microbatches)
    order = certified(name, devices, microbatches)
    assert order is not None  # ZB-H1 (one chunk) and ZB-H2 are certified at every size
    return assemble(name, order, stages=devices, microbatches=microbatches,
                    metadata={"family": name})


def zb_h1(devices: int, microbatches: int, *, chunks: int = 1, group_size: int | None = None) -> Schedule:
    """ZB-H1, the memory-efficient Zero Bubble schedule (Qi et al., ICLR 2024, section 2.1).

    1F1B with the backward split into ``I`` and ``W``: device ``d`` runs ``D-1-d`` warm-up
    forwards as 1F1B does, then ``F, I`` pairs, starting its ``W`` only after ``d`` of them
    (each ``W`` follows the ``I`` ``d`` positions later), and ends with its last ``d+1``
    ``W``.  Every device then holds at most ``min(D, M)`` microbatches in flight, 1F1B's
    peak.  Any ``D >= 1``, ``M >= 1``.

    With ``chunks`` = V >= 2 the device holds stages ``d, d+D, ...`` and follows
    Megatron's interleaved table (groups of ``group_size`` microbatches, default ``D``,
    with interleaved-1f1b's domain rules); the warm-up becomes ``(V-1)*group + D-1-d``,
    the W lag stays ``d``.  This is PyTorch's ``ScheduleInterleavedZeroBubble``.
    """
    name = "zb-h1"
    if chunks == 1 and group_size is None:
        return _zb_handcrafted(name, 1, devices, microbatches)
    positive(name, devices=devices, microbatches=microbatches, chunks=chunks)
    require(chunks >= 2, name, f"--group-size needs chunks >= 2 (got chunks {chunks})")
    group = megatron_group(name, devices, microbatches, group_size)
    order = certified(name, devices, microbatches, chunks=chunks, group_size=group)
    if order is None:  # a group size other than D, or a chunk count without a certificate
        order = looped_rows(devices, microbatches, chunks, group,
                            warmup=lambda d: (chunks - 1) * group + devices - 1 - d, w_lag=lambda d: d)
    return assemble(name, order, stages=devices * chunks, microbatches=microbatches,
                    metadata={"family": name, "chunks": chunks, "group_size": group})


def zb_h2(devices: int, microbatches: int) -> Schedule:
    """ZB-H2, the zero-bubble handcrafted schedule (Qi et al., ICLR 2024, section 2.2).

    Device ``d`` runs ``2(D-1-d)`` warm-up forwards (so ``2(D-d)-1`` forwards before its
    first ``I``, filling 1F1B's warm-up bubble), then ``F, I, W`` with a W lag of ``2d``,
    and ends with its last ``2d+1`` ``W`` (the parallelogram tail).  At most ``2D-1``
    microbatches in flight on every device.  Any ``D >= 1``, ``M >= 1``.
    """
    return _zb_handcrafted("zb-h2", 2, devices, microbatches)
