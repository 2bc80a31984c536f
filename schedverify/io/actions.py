"""PyTorch's action grammar: ``2F5``, ``0SEND_B1``, ``1REDUCE_GRAD``, ``(0F3;0B1)OVERLAP_F_B``.

Stricter than PyTorch's ``_Action.from_str`` (which accepts ``0F1junk``): the whole cell
must parse.
"""

from __future__ import annotations

import re
from operator import attrgetter
from itertools import repeat

from .. import _accel
from ..model import (
    ALL_KINDS,
    BOOKKEEPING_KINDS,
    OVERLAP_F_B,
    RECV_B,
    RECV_F,
    SEND_B,
    SEND_F,
    Action,
    B,
    F,
    I,
    W,
)

_KINDS = {k: k for k in ALL_KINDS}  # interns the kind strings the regex hands back
_SIMPLE = re.compile(
    r"(\d+)(F|B|I|W|SEND_F|RECV_F|SEND_B|RECV_B|UNSHARD|RESHARD|REDUCE_GRAD)(\d*)"
)
_ANY = re.compile(r"(-?\d*)([A-Za-z_]*)(\d*)(.*)", re.DOTALL)  # a cell may hold a newline


_new = tuple.__new__
_PLAIN_KINDS = (F, B, I, W, SEND_F, RECV_F, SEND_B, RECV_B)
_PLAIN_BYTES = {k.encode(): k for k in _PLAIN_KINDS}
_PLAIN_CELL = rb"[0-9]+(?:" + b"|".join(_PLAIN_BYTES) + rb")[0-9]+"
_PLAIN_ROW = re.compile(_PLAIN_CELL + rb"(?:," + _PLAIN_CELL + rb")*")
_NON_DIGITS_TO_SPACE = bytes(b if 48 <= b <= 57 else 32 for b in range(256))


class ActionSyntaxError(ValueError):
    """An action string does not parse; the message says why, naming the text."""


def parse_action(text: str) -> Action:
    """Parse one action string.  Raises :class:`ActionSyntaxError` with a precise reason."""
    m = _SIMPLE.fullmatch(text)
    if m is not None:
        stage, kind, mb = m.groups()
        kind = _KINDS[kind]
        if kind in BOOKKEEPING_KINDS:
            if mb:
                raise ActionSyntaxError(f"{kind} takes no microbatch index: {text!r}")
            return Action(int(stage), kind, None)
        if not mb:
            raise ActionSyntaxError(
                f"{kind} needs a microbatch index, as in '{stage}{kind}0': {text!r}"
            )
        return Action(int(stage), kind, int(mb))
    return _parse_slow(text)


def _parse_slow(text: str) -> Action:
    if not isinstance(text, str):
        raise ActionSyntaxError(f"expected an action string, got {text!r} ({type(text).__name__})")
    stripped = text.strip()
    if stripped != text:
        return parse_action(stripped)
    if text.startswith("("):
        close = text.find(")")
        kind = text[close + 1 :] if close > 0 else ""
        if close < 0 or kind != OVERLAP_F_B:
            raise ActionSyntaxError(
                f"expected '(<forward>;<backward>)OVERLAP_F_B', got {text!r}"
            )
        parts = [p for p in text[1:close].split(";")]
        if len(parts) != 2:
            raise ActionSyntaxError(
                f"OVERLAP_F_B takes exactly two sub-actions, got {len(parts)} in {text!r}"
            )
        sub = tuple(parse_action(p.strip()) for p in parts)
        return Action(None, OVERLAP_F_B, None, sub)
    if not text:
        raise ActionSyntaxError("empty action (use null for an idle slot)")
    stage, kind, mb, rest = _ANY.fullmatch(text).groups()  # always matches
    if not stage or stage.startswith("-"):
        raise ActionSyntaxError(
            f"an action starts with its stage index, as in '0F1': {text!r}"
        )
    if kind not in _KINDS or kind == OVERLAP_F_B:
        known = ", ".join(sorted(ALL_KINDS - {OVERLAP_F_B}))
        raise ActionSyntaxError(f"unknown action type {kind!r} in {text!r} (known: {known})")
    raise ActionSyntaxError(f"unexpected {rest!r} after {stage}{kind}{mb} in {text!r}")


def parse_row(cells: list) -> list[Action] | None:
    """Parse a row of plain actions (``3F1``, ``0SEND_B2``: no bookkeeping, no overlap, no
    idle slot) in bulk.  Returns None when any cell needs :func:`parse_action` (which then
    says what is wrong with it).

    The compiled kernel does it in one pass when it is built; otherwise a single regular
    expression checks that the whole row reads ``digits KIND digits`` cell by cell, and
    byte-level translate/split cut out the kinds and the numbers.
    """
    kernel = _accel.kernel
    if kernel is not None and type(cells) is list:
        return kernel.parse_row(cells, Action, _PLAIN_KINDS)
    if not cells:
        return []
    try:
        raw = ",".join(cells).encode("ascii")
    except (TypeError, UnicodeEncodeError):  # a None, a non-string, a non-ASCII character
        return None
    if _PLAIN_ROW.fullmatch(raw) is None:
        return None
    kinds = raw.translate(None, b"0123456789").split(b",")
    if len(kinds) != len(cells):  # a cell held a comma
        return None
    numbers = list(map(int, raw.translate(_NON_DIGITS_TO_SPACE).split()))
    return list(map(_new, repeat(Action),
                    zip(numbers[0::2], map(_PLAIN_BYTES.__getitem__, kinds), numbers[1::2], repeat(None))))


def leaf_rows(order):
    """Each row's actions as leaves (an overlap's two sub-actions), idle slots dropped."""
    for row in order:
        acts = list(filter(None, row))
        if any(map(_SUB, acts)):
            acts = [x for a in acts for x in a.leaves()]
        yield acts


def infer_sizes(order, devices: int, stages: int | None,
                microbatches: int | None) -> tuple[int, int]:
    """(stages, microbatches): the ones the file gives, else inferred from the largest stage
    and microbatch index any action names (at least one stage per device).  Both file
    formats call it; each then refuses sizes too large in its own terms."""
    if stages is not None and microbatches is not None:
        return stages, microbatches
    top_stages, top_mbs = [0], [0]
    for acts in leaf_rows(order):
        top_stages.append(max(map(_STAGE, acts), default=0))
        named = list(map(_MB, acts))
        if None in named:  # bookkeeping actions name no microbatch
            named = [m for m in named if m is not None]
        top_mbs.append(max(named, default=0))
    return (max(devices, 1 + max(top_stages)) if stages is None else stages,
            1 + max(top_mbs) if microbatches is None else microbatches)


_SUB = attrgetter("sub")
_STAGE = attrgetter("stage")
_MB = attrgetter("microbatch")


def format_action(action: Action | None) -> str:
    """The action's string; '' for an idle slot (PyTorch's CSV convention)."""
    return "" if action is None else str(action)
