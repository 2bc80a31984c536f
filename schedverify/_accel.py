"""The one door to the optional compiled kernel (``schedverify/_kernel.c``).

``kernel`` is the extension module, or None when it was not built (no C compiler at install
time) or when the environment variable ``SCHEDVERIFY_PURE_PYTHON`` is set.  Every kernel
function is a faster twin of a Python function for the common case and returns None
otherwise, so callers write ``kernel.f(...) if kernel else None`` and fall through to the
Python code; they read ``_accel.kernel`` at call time, so tests can switch it off.
"""

from __future__ import annotations

import os

kernel = None
if not os.environ.get("SCHEDVERIFY_PURE_PYTHON"):
    try:
        from . import _kernel as kernel  # noqa: F811
    except ImportError:  # not built: the pure-Python paths run
        kernel = None


def describe() -> str:
    """Which paths ``check`` runs, for ``--version`` and the benchmarks."""
    return "compiled kernel" if kernel is not None else "pure Python, no compiled kernel"
