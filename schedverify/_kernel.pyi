"""Type stub for the optional compiled kernel (``_kernel.c``; see ``_accel``).

Every function returns None when it declines, and callers reach it only through
``_accel.kernel``; its signatures are not spelled out here, so its functions are ``Any``.
"""

from typing import Any

def __getattr__(name: str) -> Any: ...
