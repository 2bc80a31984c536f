"""Cost model: the timeline (makespan, bubbles, critical path) and memory over the order."""

from .memory import MemoryResult, memory_sweep
from .timeline import DeadlockError, DeviceMetrics, Metrics, Timeline, timeline

__all__ = ["DeadlockError", "DeviceMetrics", "MemoryResult", "Metrics", "Timeline",
           "memory_sweep", "timeline"]
