"""Files in and out: bounded reading of a schedule's text, and writing whole or not at all.

Reading goes in chunks, so that what is not a schedule (``/dev/zero``, ``/dev/urandom``, a
binary file, a file larger than the cap of :mod:`schedverify.limits`) is refused after the
first chunk that shows it, not after reading it all.  A path and standard input are read the
same way: UTF-8, a leading byte-order mark dropped, NUL bytes refused.

Writing goes to a temporary file in the target's directory, flushed to disk and then renamed
over the target, so a reader (or a crash, a kill, a full disk) sees the old file or the new
one, never a part.
"""

from __future__ import annotations

import codecs
import contextlib
import os
import sys
import tempfile
from pathlib import Path
from typing import Any, BinaryIO

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10 (supported, see requires-python): the same parser as the tomli package
    import tomli as tomllib

from ..errors import InputError, UsageError
from ..limits import Limits, limits

CHUNK = 1 << 20
STDIN = "-"


def parse_toml(text: str, source: str) -> dict[str, Any]:
    """The TOML document ``text`` (a model file, a claim catalogue), or an :class:`InputError`
    naming ``source`` and what TOML's parser found wrong."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise InputError(f"not valid TOML: {e}", source=source) from None


def source_name(path: str | os.PathLike) -> str:
    """How messages name ``path``: ``<stdin>`` for ``-``."""
    return "<stdin>" if str(path) == STDIN else str(path)


def read_text(path: str | os.PathLike, what: str = "schedule file") -> str:
    """The text of a file (``-``: standard input), or an :class:`InputError` in the same words
    for every kind of file: "no such file", "is a directory, not a ``what``"."""
    if not isinstance(path, (str, os.PathLike)):
        raise UsageError(f"expected a file path, got {path!r} ({type(path).__name__})")
    name = source_name(path)
    if str(path) == STDIN:
        stream = getattr(sys.stdin, "buffer", None)
        if stream is None:  # a text stream without bytes underneath (a test's StringIO)
            return _check_text(sys.stdin.read(), name)
        return _read(stream, name)
    p = Path(path)
    if not p.exists():
        raise InputError("no such file", source=name)
    if p.is_dir():
        raise InputError(f"is a directory, not a {what}", source=name)
    try:
        with open(p, "rb") as fh:
            return _read(fh, name)
    except OSError as e:
        raise InputError(f"cannot read: {e.strerror or e}", source=name) from None


def _read(stream: BinaryIO, name: str) -> str:
    cap = limits().bytes
    decoder = codecs.getincrementaldecoder("utf-8-sig")()
    parts: list[str] = []
    size = 0
    while True:
        chunk = stream.read(CHUNK)
        if not chunk:
            break
        nul = chunk.find(b"\x00")
        if nul >= 0:
            raise InputError(f"not a text file (a NUL byte at byte {size + nul})", source=name)
        size += len(chunk)
        if size > cap:
            raise InputError(f"larger than {cap:,} bytes, the cap on what is read (set "
                             f"{Limits.variable('bytes')} to raise it)", source=name)
        try:
            parts.append(decoder.decode(chunk))
        except UnicodeDecodeError as e:
            raise InputError(f"not UTF-8 text (byte {size - len(chunk) + e.start}); a schedule "
                             f"is JSON or CSV text", source=name) from None
    try:
        parts.append(decoder.decode(b"", final=True))
    except UnicodeDecodeError:
        raise InputError(f"not UTF-8 text (it ends inside a character, byte {size})", source=name) from None
    return "".join(parts)


def as_text(text: str | bytes, name: str) -> str:
    """Text given directly (``loads(...)``) held to a file's rules: bytes decoded as UTF-8, a
    byte-order mark dropped, NUL refused, the size capped."""
    if isinstance(text, (bytes, bytearray)):
        import io

        return _read(io.BytesIO(bytes(text)), name)
    if not isinstance(text, str):
        raise UsageError(f"expected the text of a schedule (str or bytes), got {type(text).__name__}")
    return _check_text(text, name)


def _check_text(text: str, name: str) -> str:
    if len(text) > limits().bytes:
        raise InputError(f"larger than {limits().bytes:,} characters, the cap on what is read "
                         f"(set {Limits.variable('bytes')} to raise it)", source=name)
    nul = text.find("\x00")
    if nul >= 0:
        raise InputError(f"not a text file (a NUL character at character {nul})", source=name)
    return text[1:] if text.startswith("\ufeff") else text


def write_atomic(path: str | os.PathLike, data: str | bytes) -> None:
    """Write ``data`` to ``path`` whole or not at all (through a symlink: onto its target).

    The new file gets an existing target's permission bits, else the umask's default.
    Raises OSError as the system reports it; the temporary file never outlives the call.
    """
    target = Path(path).resolve()
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data.encode("utf-8") if isinstance(data, str) else data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, _mode_for(target))
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _mode_for(target: Path) -> int:
    try:
        return target.stat().st_mode & 0o7777
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask
