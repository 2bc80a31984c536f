"""Quantities with units: the one place where ``"1.5ms"``, ``"80GiB"`` and ``"75%"`` are read
and where seconds and bytes are printed back for people.

Inside schedverify a time is a float of seconds and a memory size an int of bytes (see
:class:`schedverify.plan.stages.StageProfile`); units exist only at the edges, in what a user
types and in what a report prints.  So this module only converts, and every front end (an
option, a profile file, the ``"units"`` field of a schedverify/1 file) uses the same tables
and gives the same messages.

Two decisions worth knowing:

- **SI and IEC are different units, exactly.**  ``KB``, ``MB``, ``GB``, ``TB``, ``PB`` are
  powers of 1000 and ``KiB`` ... ``PiB`` powers of 1024 (IEC 80000-13), so ``"75GB"`` is
  75,000,000,000 bytes and ``"80GiB"`` 85,899,345,920.  Spellings are case-sensitive
  (``Gb`` would be gigabits); a wrong case is refused with the right spelling suggested.
- **Decimal text is converted exactly.**  The number is read as a fraction, multiplied by
  the unit's exact factor and rounded once: ``"1.2ms"`` is the double nearest 0.0012 s, and
  a byte count is an exact integer however long (a fractional byte rounds to the nearest,
  half to even).

Errors name the text and where it came from: a :class:`~schedverify.errors.UsageError` for a
command-line value (no ``source``), an :class:`~schedverify.errors.InputError` for a file
(``source`` names it), e.g. ``--memory-limit: unknown unit 'GiBs' in '80GiBs'; known: B, kB,
KB, MB, GB, TB, PB, KiB, MiB, GiB, TiB, PiB, %``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from .errors import InputError, UsageError

#: Time units and their length in seconds (exact).  ``us``, ``µs`` (micro sign) and ``μs``
#: (Greek mu) are the same unit.
TIME_UNITS: dict[str, Fraction] = {
    "ns": Fraction(1, 10**9),
    "us": Fraction(1, 10**6),
    "µs": Fraction(1, 10**6),
    "μs": Fraction(1, 10**6),
    "ms": Fraction(1, 1000),
    "s": Fraction(1),
    "min": Fraction(60),
}

#: Memory units and their size in bytes: SI (powers of 1000) and IEC (powers of 1024).
#: ``kB`` is the SI spelling, ``KB`` the common one; both mean 1000 bytes.
MEMORY_UNITS: dict[str, int] = {
    "B": 1,
    "kB": 10**3, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12, "PB": 10**15,
    "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40, "PiB": 2**50,
}

PERCENT = "%"
#: No memory size is larger (1 quettabyte is about 2**99.7): beyond it a number is a mistake.
MAX_BYTES = 2**100

#: A number, then optionally a unit: letters (``µ`` among them), or ``%``.
_QUANTITY = re.compile(r"\s*([+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)\s*([^\W\d_]*|%)\s*\Z")


def _fail(message: str, where: str, source: str | None) -> Exception:
    if source is None:
        return UsageError(f"{where}: {message}" if where else message)
    return InputError(message, source=source, where=where or None)


def _unknown_unit(unit: str, text: str, known: list[str]) -> str:
    hint = [k for k in known if k.lower() == unit.lower()]
    tail = f"; did you mean {hint[0]!r}?" if hint else ""
    return f"unknown unit {unit!r} in {text!r}; known: {', '.join(known)}{tail}"


def _split(text: Any, where: str, source: str | None, what: str) -> tuple[Fraction, str, str]:
    """(the number, exactly; the unit text; the text as shown in messages)."""
    if isinstance(text, bool) or not isinstance(text, (str, int, float)):
        raise _fail(f"expected {what} such as {'1.5ms' if what == 'a time' else '80GiB'}, got "
                    f"{text!r} ({type(text).__name__})", where, source)
    if isinstance(text, (int, float)):
        if isinstance(text, float) and not math.isfinite(text):
            raise _fail(f"{what} must be a finite number, got {text!r}", where, source)
        return Fraction(text), "", repr(text)
    m = _QUANTITY.match(text)
    if m is None:
        raise _fail(f"not {what}: {text!r} (a number, then optionally a unit, e.g. "
                    f"{'1.5ms' if what == 'a time' else '80GiB'})", where, source)
    return Fraction(m.group(1)), m.group(2), text


def parse_time(text: str | float, where: str = "", *, default_unit: str = "s",
               source: str | None = None) -> float:
    """Seconds from ``"1.5ms"``, ``"200us"``, ``"2 s"``, ``"0.3"`` (a bare number is in
    ``default_unit``), or from a number (in ``default_unit``).  Negative times are refused."""
    if default_unit not in TIME_UNITS:
        raise UsageError(_unknown_unit(default_unit, default_unit, list(TIME_UNITS)))
    value, unit, shown = _split(text, where, source, "a time")
    factor = TIME_UNITS.get(unit or default_unit)
    if factor is None:
        raise _fail(_unknown_unit(unit, shown, list(TIME_UNITS)), where, source)
    if value < 0:
        raise _fail(f"a time cannot be negative, got {shown!r}", where, source)
    try:
        seconds = float(value * factor)
    except OverflowError:
        seconds = math.inf
    if not math.isfinite(seconds):
        raise _fail(f"{shown!r} is too large a time", where, source)
    return seconds


def parse_bytes(text: str | int | float, where: str = "", device_memory: int | None = None, *,
                default_unit: str = "B", source: str | None = None) -> int:
    """Bytes from ``"80GiB"``, ``"75GB"``, ``"512MiB"``, ``"1.5TiB"``, ``"123456"`` (a bare
    number is in ``default_unit``), or ``"75%"`` of ``device_memory`` (bytes).  Exact for
    integers; a fractional byte rounds to the nearest (half to even)."""
    if default_unit not in MEMORY_UNITS:
        raise UsageError(_unknown_unit(default_unit, default_unit, list(MEMORY_UNITS)))
    value, unit, shown = _split(text, where, source, "a memory size")
    if value < 0:
        raise _fail(f"a memory size cannot be negative, got {shown!r}", where, source)
    if unit == PERCENT:
        if device_memory is None:
            raise _fail(f"{shown!r} is a share of a device's memory, and no device was named "
                        f"(name the device, or give the size itself, e.g. 80GiB)", where, source)
        if value > 100:
            raise _fail(f"a share of the device's memory is at most 100%, got {shown!r}", where, source)
        return round(value * device_memory / 100)
    factor = MEMORY_UNITS.get(unit or default_unit)
    if factor is None:
        raise _fail(_unknown_unit(unit, shown, [*MEMORY_UNITS, PERCENT]), where, source)
    n = round(value * factor)
    if n > MAX_BYTES:
        raise _fail(f"{shown!r} is too large a memory size (more than 2**100 bytes)", where, source)
    return n


def _significant(value: float) -> str:
    """Three significant digits, without an exponent, for values in [0, 1000)."""
    if value >= 100:
        return f"{value:.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def format_time(seconds: float) -> str:
    """A time for people, three significant digits in ns, µs, ms, s or min: ``"12.3 ms"``
    (below a nanosecond, in seconds with an exponent)."""
    if not math.isfinite(seconds):
        return f"{seconds} s"
    if seconds < 0:
        return "-" + format_time(-seconds)
    if seconds == 0:
        return "0 s"
    if seconds < 1e-9:
        return f"{seconds:.3g} s"
    for unit in ("ns", "µs", "ms", "s"):
        value = float(Fraction(seconds) / TIME_UNITS[unit])
        text = _significant(value)
        limit = 60 if unit == "s" else 1000
        if float(text) < limit:
            return f"{text} {unit}"
    return f"{_significant_any(seconds / 60)} min"


def _significant_any(value: float) -> str:
    return _significant(value) if value < 1000 else f"{value:.0f}"


def format_bytes(n: int) -> str:
    """A memory size for people in IEC units, three significant digits: ``"71.2 GiB"``;
    below 1 KiB the exact count: ``"512 B"``."""
    if n < 0:
        return "-" + format_bytes(-n)
    if n < 1024:
        return f"{n} B"
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        text = _significant(n / MEMORY_UNITS[unit])
        if float(text) < 1024:
            return f"{text} {unit}"
    return f"{_significant_any(n / MEMORY_UNITS['PiB'])} PiB"


@dataclass(frozen=True)
class Units:
    """The units a file's numbers are written in: ``time`` (a key of :data:`TIME_UNITS`) and
    ``memory`` (a key of :data:`MEMORY_UNITS`), each ``None`` for abstract, unit-less numbers
    (the schedverify/1 files written before units: F=1, one activation = 1)."""

    time: str | None = None
    memory: str | None = None

    def __post_init__(self):
        if self.time is not None and self.time not in TIME_UNITS:
            raise UsageError(f"units time: {_unknown_unit(self.time, self.time, list(TIME_UNITS))}")
        if self.memory is not None and self.memory not in MEMORY_UNITS:
            raise UsageError(f"units memory: {_unknown_unit(self.memory, self.memory, list(MEMORY_UNITS))}")

    @property
    def time_factor(self) -> float | None:
        """Seconds per unit of time, or None when times are abstract."""
        return None if self.time is None else float(TIME_UNITS[self.time])

    @property
    def memory_factor(self) -> int | None:
        """Bytes per unit of memory, or None when memory is abstract."""
        return None if self.memory is None else MEMORY_UNITS[self.memory]

    @property
    def abstract(self) -> bool:
        """True when neither times nor memory have units."""
        return self.time is None and self.memory is None

    def seconds(self, value: float) -> float:
        """``value`` (in this record's time unit) in seconds, rounded once."""
        if self.time is None:
            raise UsageError("units: times are abstract (no time unit), so they have no length in seconds")
        return float(Fraction(value) * TIME_UNITS[self.time])

    def bytes(self, value: float) -> int:
        """``value`` (in this record's memory unit) in bytes, rounded to the nearest."""
        if self.memory is None:
            raise UsageError("units: memory is abstract (no memory unit), so it has no size in bytes")
        return round(Fraction(value) * MEMORY_UNITS[self.memory])

    @classmethod
    def parse(cls, value: Any, *, source: str = "<string>", where: str = "units") -> Units:
        """The ``"units"`` field of a file: an object with optional ``"time"`` and ``"memory"``
        (``null`` or absent: abstract).  Each bad key is an InputError naming it."""
        if value is None:
            return cls()
        if not isinstance(value, dict):
            raise InputError(f'expected an object such as {{"time": "ms", "memory": "B"}}, got '
                             f"{value!r} ({type(value).__name__})", source=source, where=where)
        unknown = sorted(set(value) - {"time", "memory"})
        if unknown:
            raise InputError(f"unknown key {unknown[0]!r}; known: time, memory", source=source,
                             where=f"{where}.{unknown[0]}")
        out: dict[str, str | None] = {}
        for key, table in (("time", list(TIME_UNITS)), ("memory", list(MEMORY_UNITS))):
            unit = value.get(key)
            if unit is not None and not isinstance(unit, str):
                raise InputError(f"expected a unit name (one of {', '.join(table)}), got {unit!r}",
                                 source=source, where=f"{where}.{key}")
            if unit is not None and unit not in table:
                raise InputError(_unknown_unit(unit, unit, table), source=source, where=f"{where}.{key}")
            out[key] = unit
        return cls(time=out["time"], memory=out["memory"])

    def to_json(self) -> dict[str, str]:
        """The ``"units"`` object :meth:`parse` reads back (abstract keys left out)."""
        return {k: v for k, v in (("time", self.time), ("memory", self.memory)) if v is not None}


#: Numbers in seconds and bytes: what schedverify holds inside.
SI_BASE = Units(time="s", memory="B")
