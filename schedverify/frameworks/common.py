"""What the framework importers share: their argument checks, each a :class:`UsageError`
that names the value."""

from __future__ import annotations

from ..errors import UsageError


def positive(name: str, value, *, least: int = 1) -> int:
    """``value`` as a whole number >= ``least``, or a :class:`UsageError` naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise UsageError(f"{name}: expected a whole number >= {least}, got {value!r}")
    return value


def modelled_version(framework: str, version: str, known) -> str:
    """``version`` when ``known`` (a release table) models it, else a :class:`UsageError`."""
    if version not in known:
        raise UsageError(f"{framework} {version!r} is not modelled; modelled: {', '.join(known)}")
    return version


__all__ = ["modelled_version", "positive"]
