"""Reading and writing schedules: schedverify/1 JSON and PyTorch's CSV.

``load`` picks the reader by extension (``.json``, ``.csv``), or by content when the
extension says nothing.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import InputError
from ..model import Schedule
from . import csvfmt, jsonfmt
from .actions import ActionSyntaxError, format_action, parse_action

__all__ = [
    "ActionSyntaxError", "dump", "dumps", "dumps_csv", "format_action", "load", "loads",
    "loads_csv", "parse_action", "read_text",
]

loads_csv = csvfmt.loads
dumps_csv = csvfmt.dumps
dumps = jsonfmt.dumps


def loads(text: str, source: str = "<string>", **csv_options) -> Schedule:
    """Read a schedule from text: schedverify/1 JSON when it starts with ``{``, else PyTorch CSV."""
    if text.lstrip().startswith("{"):
        if csv_options:
            raise InputError("devices/stages/microbatches/placement options apply to CSV input only; "
                             "a JSON schedule states them itself", source=source)
        return jsonfmt.loads(text, source)
    return csvfmt.loads(text, source, **csv_options)


def read_text(path: str | os.PathLike) -> str:
    """A file's text, or an :class:`InputError` saying why it cannot be read."""
    p = Path(path)
    name = str(path)
    if str(path) == "-":
        import sys

        return sys.stdin.read()
    if not p.exists():
        raise InputError("no such file", source=name)
    if p.is_dir():
        raise InputError("is a directory, not a schedule file", source=name)
    try:
        data = p.read_bytes()
    except OSError as e:
        raise InputError(f"cannot read: {e.strerror}", source=name) from None
    try:
        return data.decode("utf-8-sig")  # a leading byte-order mark (Excel's CSVs) is not content
    except UnicodeDecodeError as e:
        raise InputError(f"not UTF-8 text (byte {e.start}); a schedule is JSON or CSV text",
                         source=name) from None


def load(path: str | os.PathLike, **csv_options) -> Schedule:
    """Read a schedule file (``.json`` schedverify/1, or ``.csv`` as PyTorch writes it).

    ``csv_options`` (``devices``, ``stages``, ``microbatches``, ``placement``) fill in what a
    CSV cannot say.
    """
    text = read_text(path)
    name = "<stdin>" if str(path) == "-" else str(path)
    suffix = Path(name).suffix.lower()
    if suffix == ".json" and not text.lstrip().startswith("{"):
        return jsonfmt.loads(text, name)  # says exactly what is wrong with it as JSON
    if suffix == ".csv":
        return csvfmt.loads(text, name, **csv_options)
    return loads(text, name, **csv_options)


def dump(schedule: Schedule, path: str | os.PathLike) -> None:
    """Write ``schedule`` as JSON or CSV by the file's extension."""
    text = dumps_csv(schedule) if str(path).lower().endswith(".csv") else dumps(schedule)
    Path(path).write_text(text, encoding="utf-8")
