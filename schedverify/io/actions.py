"""PyTorch's action grammar: ``2F5``, ``0SEND_B1``, ``1REDUCE_GRAD``, ``(0F3;0B1)OVERLAP_F_B``.

Stricter than PyTorch's ``_Action.from_str`` (which accepts ``0F1junk``): the whole cell
must parse.
"""

from __future__ import annotations

import re
from itertools import repeat

from .. import _accel
from ..errors import ActionSyntaxError
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
_PLAIN_CELL = rb"[0-9]{1,18}(?:" + b"|".join(_PLAIN_BYTES) + rb")[0-9]{1,18}"  # MAX_DIGITS
_PLAIN_ROW = re.compile(_PLAIN_CELL + rb"(?:," + _PLAIN_CELL + rb")*")
_NON_DIGITS_TO_SPACE = bytes(b if 48 <= b <= 57 else 32 for b in range(256))


#: An index longer than this is refused as it is read (no size cap is anywhere near it, and
#: Python's int() refuses strings of more than 4300 digits).
MAX_DIGITS = 18
#: How many unparsable cells a message lists; the rest are counted.
MAX_REPORTED = 20


def parse_action(text: str) -> Action:
    """Parse one action string.  Raises :class:`ActionSyntaxError` with a precise reason."""
    m = _SIMPLE.fullmatch(text) if type(text) is str else None
    if m is not None:
        stage, kind, mb = m.groups()
        if len(stage) > MAX_DIGITS or len(mb) > MAX_DIGITS:  # leading zeros aside, as int() reads it
            long_stage = len(stage.lstrip("0")) > MAX_DIGITS
            if long_stage or len(mb.lstrip("0")) > MAX_DIGITS:
                which, digits = ("stage", stage) if long_stage else ("microbatch", mb)
                shown = text if len(text) <= 40 else text[:20] + "..." + text[-12:]
                raise ActionSyntaxError(f"a {which} index of {len(digits.lstrip('0'))} digits is absurdly "
                                        f"large: {shown!r}")
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


class CellErrors:
    """The cells of a file that do not parse: the first :data:`MAX_REPORTED` with their
    messages, the rest only counted (a file of ten million bad cells costs no more than
    checking them)."""

    def __init__(self, source: str, noun: str, describe=repr):
        self.source, self.noun, self.describe = source, noun, describe
        self.shown: list[str] = []
        self.count = 0

    def parse(self, cells, where) -> list:
        """Each cell parsed (None for an idle slot: None or ''), a bad one recorded with
        ``where(k)`` naming its place and kept as None."""
        out = []
        append = out.append
        for k, cell in enumerate(cells):
            if cell is None or cell == "":
                append(None)
            elif len(self.shown) < MAX_REPORTED:
                try:
                    if not isinstance(cell, str):
                        raise ActionSyntaxError(f"expected an action string or null, got "
                                                f"{self.describe(cell)}")
                    append(parse_action(cell))
                except ActionSyntaxError as e:
                    self.count += 1
                    self.shown.append(f"{where(k)}: {e}")
                    append(None)
            elif is_action(cell):
                append(parse_action(cell))
            else:
                self.count += 1
                append(None)
        return out

    def raise_any(self) -> None:
        """An :class:`InputError` naming the bad cells, if there are any."""
        if not self.count:
            return
        from ..errors import InputError

        if self.count == 1:
            where, _, msg = self.shown[0].partition(": ")
            raise InputError(msg, source=self.source, where=where)
        more = self.count - len(self.shown)
        lines = self.shown + ([f"... and {more:,} more"] if more > 0 else [])
        raise InputError(f"{self.count:,} {self.noun} do not parse:\n  " + "\n  ".join(lines),
                         source=self.source)


def is_action(text) -> bool:
    """Whether :func:`parse_action` accepts ``text``, without building a message when not."""
    if type(text) is not str:
        return False
    m = _SIMPLE.fullmatch(text.strip())
    if m is not None:
        stage, kind, mb = m.groups()
        return (len(stage.lstrip("0")) <= MAX_DIGITS and len(mb.lstrip("0")) <= MAX_DIGITS
                and (not mb) == (kind in BOOKKEEPING_KINDS))
    if not text.lstrip().startswith("("):
        return False
    try:
        parse_action(text)
    except ActionSyntaxError:
        return False
    return True


def format_action(action: Action | None) -> str:
    """The action's string; '' for an idle slot (PyTorch's CSV convention)."""
    return "" if action is None else str(action)
