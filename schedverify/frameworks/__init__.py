"""The orders that frameworks with pipeline loops of their own run, read as schedverify
schedules: :mod:`.megatron` (megatron-core's ``forward_backward_pipelining_with_interleaving``
and ``_without_interleaving``) and :mod:`.deepspeed` (DeepSpeed's ``TrainSchedule``).

Each builds every rank's order with the communication actions its loop posts, and names its
framework, release and communicator layout in the schedule's metadata, so ``check`` runs it
on that framework's loop (:mod:`schedverify.releases`, docs/spec.md section 10).  The order
comes from the framework's own functions when it is installed (one lazy import door per
framework, ``framework_functions``), else from the re-implementation here, which a test tier
holds equal to the framework's output.  :mod:`.memory` gives what those loops hold (DeepSpeed's
pipe buffers, Megatron's ``input_tensors`` / ``output_tensors``) along an imported order.
"""

from __future__ import annotations

def namer(schedule):
    """A function naming an action of ``schedule`` in the terms of the framework its metadata
    names (``deepspeed.namer``, ``megatron.namer``), or None when it names none of them: how a
    report shows a hang's actions as the framework's own instructions."""
    from ..releases import deepspeed as ds_release
    from ..releases import megatron as mg_release

    framework = (schedule.metadata or {}).get("framework")
    if framework == ds_release.FRAMEWORK:
        from . import deepspeed

        return deepspeed.namer(schedule)
    if framework == mg_release.FRAMEWORK:
        from . import megatron

        return megatron.namer(schedule)
    return None


def terms(schedule):
    """:func:`namer` on an action's text (``"0SEND_F1"``, as a report's locations give it):
    a function giving its name in the framework's terms or None; None when the schedule names
    no framework.  What the text and JSON reports add to each offending action."""
    from ..grammar import read_action

    name = namer(schedule)
    if name is None:
        return None

    def term(text: str) -> str | None:
        a = read_action(text)
        return name(a) if a is not None else None

    return term


__all__ = ["namer", "terms"]
