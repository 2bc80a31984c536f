"""The one door to the optional compiled kernel (``schedverify/_kernel.c``).

``kernel`` is the extension module, or None when it was not built (no C compiler at install
time) or when the environment variable ``SCHEDVERIFY_PURE_PYTHON`` is set.  Every kernel
function is a faster twin of a Python function for the common case and returns None
otherwise, so callers write ``kernel.f(...) if kernel else None`` and fall through to the
Python code; they read ``_accel.kernel`` at call time, so tests can switch it off.

The rule at the kernel's boundary (every function checks its arguments before it uses them
to index anything):

- **None: declined.**  Consistent arguments that are not the kernel's case: an action that
  is not plain, a deadlock, a number that is neither a float nor an int of magnitude at most
  2^53 (a Fraction, a bool, a bigger int), int results that could outgrow 2^53 (the sums of
  the int costs), an index of more than 18 significant digits.  The Python code then
  answers, so the kernel gives Python's answer or none: the same values, of the same types
  (int or float), bit for bit.
- **TypeError, ValueError, IndexError: raised.**  Arguments no caller passes: a container or
  index column of the wrong type, lengths that disagree, an index out of range, ``starts``
  that do not cut the actions into consecutive device ranges, an action type that is not
  laid out as a tuple.  Those are bugs in the caller, not inputs to fall back on.

And no argument crashes it: each function reads its inputs into C arrays or references of
its own before anything that can run Python code (an allocation, an iterator, ``__index__``),
so an iterator or a ``gc.callbacks`` hook that changes a list meanwhile changes nothing the
kernel reads (``_kernel.c``, "Ownership"; docs/reliability.md).
"""

from __future__ import annotations

import os
from types import ModuleType

kernel: ModuleType | None = None
if not os.environ.get("SCHEDVERIFY_PURE_PYTHON"):
    try:
        from . import _kernel

        kernel = _kernel
    except ImportError:  # not built: the pure-Python paths run
        kernel = None


def describe() -> str:
    """Which paths ``check`` runs, for ``--version`` and the benchmarks."""
    return "compiled kernel" if kernel is not None else "pure Python, no compiled kernel"


def keep_freed_memory() -> bool:
    """Tell the allocator to keep what it frees for the next blocks (``_kernel.c``,
    ``keep_freed_memory``: a million-action check frees and makes columns of tens of
    megabytes in turn, and a fresh page costs a fault).  Only the command line calls it: it
    changes the whole process's allocator, which a library must not do to its host.  False
    without the kernel or glibc."""
    return kernel is not None and bool(kernel.keep_freed_memory())
