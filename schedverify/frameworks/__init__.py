"""The orders that frameworks with pipeline loops of their own run, read as schedverify
schedules: :mod:`.megatron` (megatron-core's ``forward_backward_pipelining_with_interleaving``
and ``_without_interleaving``) and :mod:`.deepspeed` (DeepSpeed's ``TrainSchedule``).

Each builds every rank's order with the communication actions its loop posts, and names its
framework, release and communicator layout in the schedule's metadata, so ``check`` runs it
on that framework's loop (:mod:`schedverify.releases`, docs/spec.md section 10).  The order
comes from the framework's own functions when it is installed (one lazy import door per
framework, ``framework_functions``), else from the re-implementation here, which a test tier
holds equal to the framework's output.
"""

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
