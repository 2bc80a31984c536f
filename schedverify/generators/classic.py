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


def one_f_one_b(devices: int, microbatches: int) -> Schedule:
    """1F1B / PipeDream-Flush (Narayanan et al., "Memory-Efficient Pipeline-Parallel DNN
    Training", ICML 2021; Megatron-LM's non-interleaved schedule).

    Device ``d`` runs ``min(D-d-1, M)`` warm-up forwards, then alternates one forward and one
    backward, then drains the remaining backwards.  Any ``D >= 1``, ``M >= 1``.  Device
    ``d`` holds at most ``min(D-d, M)`` microbatches in flight.
    """
    positive("1f1b", devices=devices, microbatches=microbatches)
    order = certified("1f1b", devices, microbatches)
    assert order is not None  # certified at every size (certificates/classic.py)
    return assemble("1f1b", order, stages=devices, microbatches=microbatches,
                    metadata={"family": "1f1b"})
