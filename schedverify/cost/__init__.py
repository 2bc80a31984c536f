"""Cost model: the timeline (makespan, bubbles, critical path) and memory over the order.

:func:`schedverify.timeline`, the timeline of a schedule under any semantics, is
:mod:`schedverify.check`'s: under PyTorch's runtime it is the checker's run."""

from .memory import MemoryResult, memory_sweep
from ..errors import DeadlockError
from .timeline import DeviceMetrics, Metrics, Timeline

__all__ = ["DeadlockError", "DeviceMetrics", "MemoryResult", "Metrics", "Timeline",
           "memory_sweep"]
