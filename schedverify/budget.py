"""One time budget per command: a deadline on the monotonic clock that every phase reads.

``schedverify search --time-limit S`` and ``schedverify check --engine z3 --timeout S`` each
make one :class:`Budget` of ``S`` seconds when they start, and every phase runs under it:
the warm start (generators and the greedy heuristic), the pure-Python bounds (propagation,
the device-order branching), building the Z3 encoding, each solver call (whose Z3 ``timeout``
is what is left, :func:`schedverify.smt.solver.check`) and the re-validation of what is
returned.  A phase that runs long checks the budget inside its loops; when it has run out,
:meth:`Budget.check` raises :class:`TimeUp`, and the phase's caller answers with the best it
has (a schedule with its lower bound and gap, or "nothing decided within the limit").

What cannot be interrupted is bounded by size: the final re-validation by the graph checker
(linear in the actions, about 0.1 s per 100k) and writing the answer.  So a command answers
within its limit plus :data:`OVERSHOOT_S`, which also covers starting Python and importing
z3; ``bench/limits.py`` measures it on a fixed set of instances and ``tests/test_limits.py``
holds it.

A phase that should take only part of what is left asks for :meth:`Budget.part`: a budget
of its own that never ends after its parent's.  Nothing here is global: each command makes
its own budget and passes it down.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

#: Seconds past its limit by which a command under a :class:`Budget` answers (documented in
#: docs/reference/promises.md; measured by bench/limits.py, held by tests/test_limits.py).
OVERSHOOT_S = 1.0


class TimeUp(Exception):
    """A phase found its :class:`Budget` spent; its caller keeps the best answer so far."""


class Budget:
    """A deadline on ``clock`` (``time.monotonic``): ``Budget(seconds)`` ends ``seconds``
    from now; ``Budget(None)`` never ends.  Immutable: a phase that needs less time takes
    :meth:`part` of it."""

    __slots__ = ("_clock", "start", "deadline")

    def __init__(self, seconds: float | None = None, *, clock: Callable[[], float] = time.monotonic,
                 deadline: float | None = None):
        if seconds is not None and (not isinstance(seconds, (int, float)) or math.isnan(seconds)):
            raise TypeError(f"seconds must be a number or None, got {seconds!r}")
        self._clock = clock
        self.start = clock()
        if deadline is not None:
            self.deadline = float(deadline)
        else:
            self.deadline = math.inf if seconds is None else self.start + max(0.0, float(seconds))

    @classmethod
    def until(cls, deadline: float | None, *, clock: Callable[[], float] = time.monotonic) -> Budget:
        """The budget that ends at ``deadline`` (a ``clock()`` value; None: never)."""
        return cls(clock=clock, deadline=math.inf if deadline is None else deadline)

    def remaining(self) -> float:
        """Seconds left (0 when spent, ``inf`` when unlimited)."""
        return max(0.0, self.deadline - self._clock())

    def elapsed(self) -> float:
        return self._clock() - self.start

    def expired(self) -> bool:
        return self._clock() >= self.deadline

    def check(self) -> None:
        """Raise :class:`TimeUp` when the budget is spent (call it inside long loops)."""
        if self._clock() >= self.deadline:
            raise TimeUp("time limit reached")

    def part(self, share: float = 1.0, *, at_most: float | None = None,
             at_least: float = 0.0) -> Budget:
        """A budget for one phase: ``share`` of what is left, at most ``at_most`` and at least
        ``at_least`` seconds, but never past this budget's own deadline."""
        now = self._clock()
        left = max(0.0, self.deadline - now)
        want = left * share if math.isfinite(left) else (at_most if at_most is not None else math.inf)
        if at_most is not None:
            want = min(want, at_most)
        want = max(want, at_least)
        return Budget(clock=self._clock, deadline=min(self.deadline, now + want))

    def timeout_ms(self, at_most: float | None = None) -> int:
        """What is left (or ``at_most`` seconds, if less) in whole milliseconds, at least 1:
        the value of a Z3 solver's ``timeout`` parameter for one call."""
        left = self.remaining()
        if at_most is not None:
            left = min(left, at_most)
        if not math.isfinite(left):
            return 2**32 - 1  # Z3's "no timeout"
        return max(1, min(2**32 - 2, int(left * 1000)))

    def __repr__(self) -> str:
        return f"Budget(remaining={self.remaining():.3f}s)"
