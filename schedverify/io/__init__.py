"""Reading and writing schedules: schedverify/1 JSON and PyTorch's CSV.

``load`` picks the reader by extension (``.json``, ``.csv``), or by content when the
extension says nothing.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import InputError
from ..model import Schedule
from . import csvfmt, files, jsonfmt
from .actions import ActionSyntaxError, format_action, parse_action
from .files import read_text, write_atomic

__all__ = [
    "ActionSyntaxError", "dump", "dumps", "dumps_csv", "dumps_for", "format_action", "load", "loads",
    "loads_csv", "parse_action", "read_text", "write_atomic",
]

loads_csv = csvfmt.loads
dumps_csv = csvfmt.dumps
dumps = jsonfmt.dumps


def loads(text: str | bytes, source: str = "<string>", **csv_options) -> Schedule:
    """Read a schedule from text (or UTF-8 bytes): schedverify/1 JSON when it starts with
    ``{``, else PyTorch CSV."""
    text = files.as_text(text, source)
    if text.lstrip().startswith("{"):
        if csv_options:
            raise InputError("devices/stages/microbatches/placement options apply to CSV input only; "
                             "a JSON schedule states them itself", source=source)
        return jsonfmt.loads(text, source)
    return csvfmt.loads(text, source, **csv_options)


def load(path: str | os.PathLike, **csv_options) -> Schedule:
    """Read a schedule file (``.json`` schedverify/1, or ``.csv`` as PyTorch writes it).

    ``csv_options`` (``devices``, ``stages``, ``microbatches``, ``placement``) fill in what a
    CSV cannot say.
    """
    text = read_text(path)
    name = files.source_name(path)
    suffix = Path(name).suffix.lower()
    if suffix == ".json" and not text.lstrip().startswith("{"):
        return jsonfmt.loads(text, name)  # says exactly what is wrong with it as JSON
    if suffix == ".csv":
        return csvfmt.loads(text, name, **csv_options)
    return loads(text, name, **csv_options)


def dumps_for(schedule: Schedule, path: str | os.PathLike, default: str = "json") -> str:
    """The text :func:`dump` writes to ``path``: PyTorch's CSV for ``.csv``, schedverify/1
    JSON for ``.json``, else the ``default`` ("json" or "csv")."""
    suffix = Path(str(path)).suffix.lower()
    fmt = {".csv": "csv", ".json": "json"}.get(suffix, default)
    return dumps_csv(schedule) if fmt == "csv" else dumps(schedule)


def dump(schedule: Schedule, path: str | os.PathLike) -> None:
    """Write ``schedule`` as JSON or CSV by the file's extension, whole or not at all."""
    files.write_atomic(path, dumps_for(schedule, path))
