"""GPipe and 1F1B: one stage per device, full backward."""

from __future__ import annotations

from ..model import Schedule
from ._build import assemble, certified, positive


def gpipe(devices: int, microbatches: int) -> Schedule:
    """GPipe: every forward, then every backward (Huang et al., "GPipe", NeurIPS 2019).

    Device ``d`` runs ``F0..F(m-1)`` of stage ``d`` then ``B0..B(m-1)``.  Any ``D >= 1``,
    ``M >= 1``.  Peak in flight: ``M`` on every device.
    """
    positive("gpipe", devices=devices, microbatches=microbatches)
    order = certified("gpipe", devices, microbatches)
    assert order is not None  # certified at every size (certificates/classic.py)
    return assemble("gpipe", order, stages=devices, microbatches=microbatches,
                    metadata={"family": "gpipe"})


def one_f_one_b(devices: int, microbatches: int, *, max_inflight: int | None = None) -> Schedule:
    """1F1B / PipeDream-Flush (Narayanan et al., "Memory-Efficient Pipeline-Parallel DNN
    Training", ICML 2021; Megatron-LM's non-interleaved schedule).

    Device ``d`` runs ``min(D-d-1, M)`` warm-up forwards, then alternates one forward and one
    backward, then drains the remaining backwards.  Any ``D >= 1``, ``M >= 1``.  Device
    ``d`` holds at most ``min(D-d, M)`` microbatches in flight.

    ``max_inflight`` = K < D keeps at most K microbatches in flight on every device: the
    order is 1F1B's over the virtual microbatches ``nu(i) = (i div K) D + i mod K`` (D - K
    empty slots after every K microbatches), the empty ones left out.  Its makespan at
    ``c = 0`` is ``(t_F + t_B)((M + D - 1) + (ceil(M/K) - 1)(D - K))``, the least of any
    schedule with K in flight (docs/proofs.md, "Laws about the optimum").

    The order is built from 1F1B's all-sizes certificate (certificates/classic.py).
    """
    positive("1f1b", devices=devices, microbatches=microbatches)
    if max_inflight is not None:
        positive("1f1b", max_inflight=max_inflight)
    order = certified("1f1b", devices, microbatches, max_inflight=max_inflight)
    assert order is not None  # certified at every size (certificates/classic.py)
    meta = {"family": "1f1b"} | ({} if max_inflight is None or max_inflight >= devices
                                 else {"max_inflight": max_inflight})
    return assemble("1f1b", order, stages=devices, microbatches=microbatches, metadata=meta)
