"""What a plan needs to know about each pipeline stage, in real units: the one record that a
model description (:mod:`.transformer`) and a measurement (:mod:`.profile`) both produce and
the planner (:mod:`.planner`) consumes.

Times are in seconds and memory in bytes, always; the planner and the reports choose the
units they show.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from ..errors import UsageError
from ..model import Costs, MemoryModel


@dataclass(frozen=True)
class StageProfile:
    """Per-stage costs (seconds) and memory (bytes) of one way of cutting a model into stages.

    ``F``, ``I``, ``W``: the forward, the input-gradient and the weight-gradient pass of one
    microbatch on each stage (``B``, the full backward, is ``I + W`` unless ``B`` is given,
    as a measurement of an unsplit backward gives it).  ``activation``: the bytes one
    microbatch's forward leaves on the stage until its backward; ``w``: the share of them
    the weight-gradient pass still needs after the input-gradient pass (docs/spec.md 5).
    ``static``: parameters, gradients and optimizer state held for the whole step.
    ``recv_buffers``: the bytes of receive buffers the runtime keeps for the stage for the
    whole step.  ``message``: the bytes of the tensor a send of the stage carries (one
    stage-to-stage boundary): under PyTorch's runtime a pending send holds it until its wait
    (2.15) or the end of the step (2.13, 2.14: docs/spec.md 9.2).  ``comm``: seconds to move
    one microbatch's activation (or its gradient) between adjacent stages on different
    devices.  ``notes``: what the numbers assume, printed with a plan.
    """

    F: tuple[float, ...]
    I: tuple[float, ...]  # noqa: E741  (PyTorch's name for the input-gradient pass)
    W: tuple[float, ...]
    activation: tuple[int, ...]
    w: float = 0.5
    static: tuple[int, ...] = ()
    recv_buffers: tuple[int, ...] = ()
    message: tuple[int, ...] = ()
    comm: float = 0.0
    B: tuple[float, ...] | None = None
    source: str = ""
    notes: tuple[str, ...] = field(default=(), compare=False)

    def __post_init__(self):
        n = len(self.F)
        if n == 0:
            raise UsageError("a stage profile needs at least one stage")
        for name in ("I", "W", "activation", "static", "recv_buffers", "message", "B"):
            value = getattr(self, name)
            if value is None or (name in ("static", "recv_buffers", "message") and value == ()):
                continue
            if len(value) != n:
                raise UsageError(f"stage profile {name}: {len(value)} values for {n} stages")
        if not 0 <= self.w <= 1:
            raise UsageError(f"stage profile w: must be between 0 and 1, got {self.w!r}")

    @property
    def stages(self) -> int:
        return len(self.F)

    @property
    def full_backward(self) -> tuple[float, ...]:
        """The unsplit backward per stage: ``B`` when measured, else ``I + W``."""
        return self.B if self.B is not None else tuple(i + w for i, w in zip(self.I, self.W))

    @property
    def static_total(self) -> tuple[int, ...]:
        """Bytes held for the whole step on each stage (static plus receive buffers)."""
        n = self.stages
        static = self.static or (0,) * n
        recv = self.recv_buffers or (0,) * n
        return tuple(a + b for a, b in zip(static, recv))


#: Durations are planned in whole microseconds: exact integers for every engine (the search
#: scales costs to integers, and a second's float has a denominator of up to 2**52), and a
#: resolution far finer than any pass of a model worth pipelining.
TIME_QUANTUM = 1e-6


def quantized(profile: StageProfile, memory_limit: int | None) -> tuple[Costs, MemoryModel]:
    """The :class:`Costs` (whole microseconds) and :class:`MemoryModel` (bytes) of a profile."""
    def us(values: Iterable[float]) -> tuple[int, ...]:
        return tuple(round(v / TIME_QUANTUM) for v in values)

    costs = Costs(F=us(profile.F), B=us(profile.full_backward), I=us(profile.I), W=us(profile.W),
                  comm=round(profile.comm / TIME_QUANTUM))
    memory = MemoryModel(activation=tuple(profile.activation), w=profile.w,
                         static=profile.static_total, limit=memory_limit, message=profile.message or 0)
    return costs, memory
