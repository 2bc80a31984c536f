"""How much schedverify reads and builds before it refuses, and how to raise it.

A schedule file is read whole into memory and every action becomes an object, so an absurd
input (``/dev/zero``, a JSON with ten million empty device lists, ``--devices 10000000``)
would otherwise take the machine's memory before any message.  Each cap is checked before
the work it bounds, and the message names the number, the cap and the variable that raises
it (docs/reference/promises.md).

The caps are read from the environment at the moment they are needed (no module state):

====================  ==========================  =====================================
variable              default                     bounds
====================  ==========================  =====================================
SCHEDVERIFY_MAX_BYTES     256 MiB (268435456)     the size of one input file or stdin
SCHEDVERIFY_MAX_ACTIONS   10,000,000              the actions of one schedule
SCHEDVERIFY_MAX_DEVICES   100,000                 devices of one schedule
SCHEDVERIFY_MAX_SIZE      10,000,000              stages, microbatches, any index
====================  ==========================  =====================================
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from collections.abc import Mapping

from .errors import UsageError

_VARIABLES = {
    "bytes": "SCHEDVERIFY_MAX_BYTES",
    "actions": "SCHEDVERIFY_MAX_ACTIONS",
    "devices": "SCHEDVERIFY_MAX_DEVICES",
    "size": "SCHEDVERIFY_MAX_SIZE",
}


@dataclass(frozen=True)
class Limits:
    """The caps in force; :func:`limits` reads them from the environment."""

    bytes: int = 256 << 20
    actions: int = 10_000_000
    devices: int = 100_000
    size: int = 10_000_000

    @staticmethod
    def variable(cap: str) -> str:
        """The environment variable that raises ``cap`` ("bytes", "actions", ...)."""
        return _VARIABLES[cap]

    def over(self, cap: str) -> str:
        """``over the cap of N (set VARIABLE to raise it)``."""
        return f"over the cap of {getattr(self, cap):,} (set {_VARIABLES[cap]} to raise it)"

    def refusal(self, cap: str, value: int, what: str) -> str:
        """The message for ``value`` (of ``what``) over the ``cap``, and how to raise it."""
        return f"{value:,} {what} is {self.over(cap)}"

    def exceeded(self, cap: str, what: str) -> str:
        """The message for "more than the ``cap`` of ``what``", counted no further."""
        return f"more than {getattr(self, cap):,} {what}, {self.over(cap)}"

    def refuse(self, cap: str, value: int, what: str, **where) -> None:
        """Raise :class:`InputError` when ``value`` is over the ``cap``; ``where`` as InputError's."""
        if value > getattr(self, cap):
            from .errors import InputError

            raise InputError(self.refusal(cap, value, what), **where)


def limits(environ: Mapping[str, str] | None = None) -> Limits:
    """The caps in force: the defaults, each overridden by its environment variable."""
    env = os.environ if environ is None else environ
    values = {}
    for f in fields(Limits):
        text = env.get(_VARIABLES[f.name])
        if text is None or not text.strip():
            continue
        try:
            v = int(text)
        except ValueError:
            v = 0
        if v < 1:
            raise UsageError(f"{_VARIABLES[f.name]}={text!r}: expected a whole number of at least 1")
        values[f.name] = v
    return Limits(**values)
