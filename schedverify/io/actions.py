"""Actions as files hold them: rows of cells read in bulk (:func:`parse_rows` into columns,
:func:`parse_row` one row into Actions), bad cells
collected and named (:class:`CellErrors`), and the grammar a CSV is read in.  What one action
is and how its text reads is :mod:`schedverify.grammar`'s.

Two grammars are read (:data:`GRAMMARS`): ``torch``, today's (PyTorch 2.6 and later), and
``torch-legacy``, the one PyTorch's files used before 2.6, which :func:`legacy_rows`
rewrites into today's before parsing.
"""

from __future__ import annotations

import re
from itertools import repeat

from .. import _accel
from ..errors import ActionSyntaxError
from ..grammar import (  # noqa: F401 - parse_action, is_action, format_action, LEGACY_HINT re-exported
    BOOKKEEPING_KINDS,
    CODED_KINDS,
    COLUMN_KINDS,
    LEGACY_HINT,
    MAX_DIGITS,
    OVERLAP_F_B,
    RECV_B,
    RECV_F,
    SEND_B,
    SEND_F,
    Action,
    B,
    F,
    I,
    PlainRows,
    W,
    format_action,
    is_action,
    parse_action,
    read_action,
)



_new = tuple.__new__
_PLAIN_KINDS = CODED_KINDS
#: Per column kind, whether it is written without a microbatch (bookkeeping): scan_csv's flags
_COLUMN_BARE = bytes(k in BOOKKEEPING_KINDS for k in COLUMN_KINDS)
_PLAIN_BYTES = {k.encode(): k for k in _PLAIN_KINDS}
_PLAIN_CELL = rb"[0-9]{1,18}(?:" + b"|".join(_PLAIN_BYTES) + rb")[0-9]{1,18}"  # MAX_DIGITS
_PLAIN_ROW = re.compile(_PLAIN_CELL + rb"(?:," + _PLAIN_CELL + rb")*")
_NON_DIGITS_TO_SPACE = bytes(b if 48 <= b <= 57 else 32 for b in range(256))


#: The action grammars a CSV can be read in: today's, and PyTorch's before 2.6.
GRAMMARS = ("torch", "torch-legacy")

#: How many unparsable cells a message lists; the rest are counted.
MAX_REPORTED = 20


def parse_rows(rows: list) -> PlainRows | None:
    """Every row of plain actions at once, as columns and without building an Action (the
    compiled kernel's ``parse_rows``; a Schedule makes the Actions when its order is first
    read).  None when the kernel is not built or a cell is not plain: then
    :func:`parse_row`, row by row."""
    kernel = _accel.kernel
    if kernel is None or type(rows) is not list:
        return None
    columns = kernel.parse_rows(rows, _PLAIN_KINDS)
    return None if columns is None else PlainRows(*columns)


def scan_order(text: str, pos: int) -> tuple[PlainRows, int] | None:
    """The JSON array of rows of plain actions that starts at ``text[pos]``, read straight
    from the text into columns (the kernel's ``scan_order``), and the index just past it:
    what :func:`parse_rows` makes of ``json.loads`` of that array, without a str per action.
    None when the kernel is not built or the value is anything else (an escape in a cell,
    a cell that is not plain, not JSON): then json reads it."""
    kernel = _accel.kernel
    if kernel is None:
        return None
    got = kernel.scan_order(text, pos, _PLAIN_KINDS)
    return None if got is None else (PlainRows(*got[:-1]), got[-1])


def scan_csv(text: str) -> PlainRows | None:
    """A PyTorch CSV's rows of plain actions read straight from the text into columns (the
    kernel's ``scan_csv``): what :func:`parse_rows` makes of the rows ``csv.reader`` reads,
    without a str per cell.  A compute+comms CSV's bookkeeping and waits (UNSHARD, RESHARD,
    REDUCE_GRAD, WAIT_REDUCE_GRAD without a microbatch, WAIT_SEND_F/B with one:
    :data:`~schedverify.grammar.COLUMN_KINDS`) are read too, as :func:`grammar.read_action`
    reads them.  None when the kernel is not built or the text is anything
    else (a quote, a space, an idle slot, a cell that is not plain, a lone carriage
    return): then ``csv.reader`` and :func:`parse_row` read it, and say what is wrong."""
    kernel = _accel.kernel
    if kernel is None:
        return None
    got = kernel.scan_csv(text, COLUMN_KINDS, _COLUMN_BARE)
    return None if got is None else PlainRows(*got)


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

    def parse(self, cells, where) -> list[Action | None]:
        """Each cell parsed (None for an idle slot: None or ''), a bad one recorded with
        ``where(k)`` naming its place and kept as None."""
        out: list[Action | None] = []
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
            else:
                a = read_action(cell)  # no message beyond the ones listed
                self.count += a is None
                append(a)
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
        hint = f": {LEGACY_HINT}"
        legacy = any(line.endswith(hint) for line in self.shown)
        shown = [line.removesuffix(hint) for line in self.shown]  # said once, at the end
        lines = shown + ([f"... and {more:,} more"] if more > 0 else []) + ([LEGACY_HINT] if legacy else [])
        raise InputError(f"{self.count:,} {self.noun} do not parse:\n  " + "\n  ".join(lines),
                         source=self.source)


def check_grammar(grammar) -> str:
    """``grammar`` if it is one of :data:`GRAMMARS`; else a :class:`UsageError` naming it."""
    if grammar not in GRAMMARS:
        from ..errors import UsageError

        raise UsageError(f"grammar must be one of {', '.join(map(repr, GRAMMARS))}, got {grammar!r}")
    return grammar


# PyTorch before 2.6 (torch/distributed/pipelining/schedules.py, ``_ComputationType``): F, B
# (BACKWARD), W (WEIGHT), BW (FULL_BACKWARD), UNSHARD, RESHARD, SEND_F, RECV_F, SEND_B,
# RECV_B, and the batched SEND_F_RECV_B / SEND_B_RECV_F written ``0SEND_F1_1RECV_B0``.
_LEGACY_B = re.compile(r"(\d+)(BW|B)(\d*)")
_LEGACY_W = re.compile(r"\d+W\d+")
_LEGACY_BATCHED = re.compile(r"\d+(SEND_F|SEND_B)\d+_\d+(RECV_B|RECV_F)\d+")
_MODERN_I = re.compile(r"\d+I\d+")


def legacy_rows(rows: list[list[str]], source: str) -> list[list[str]]:
    """Rows of cells written in PyTorch's grammar before 2.6, rewritten in today's.

    Before PyTorch 2.6 ``B`` (``BACKWARD``) was ambiguous: each schedule class carried a
    ``use_full_backward`` flag, and the runtime ran ``B`` as the input-gradient half when it
    was off (the zero-bubble schedules, which also issue ``W``; a ``W`` with the flag on
    raised) and as the whole backward when it was on.  ``BW`` (``FULL_BACKWARD``) was always
    the whole backward.  PyTorch 2.6 (pytorch/pytorch#138886, "Update schedules to use I, B
    actions") made the IR unambiguous: ``I`` the input gradient, ``B`` the whole backward.
    So a file with any ``W`` reads each ``B`` as today's ``I``, a file without reads it as
    ``B``, and ``BW`` is ``B`` everywhere.  The other kinds are spelled as today.  Refused,
    naming the cell: ``I`` (it did not exist: the file is in today's grammar),
    ``OVERLAP_F_B`` (added after 2.6) and the batched ``SEND_F_RECV_B`` / ``SEND_B_RECV_F``
    (one cell holding two operations, which today's grammar has no spelling for).
    """
    from ..errors import InputError

    has_w = any(_LEGACY_W.fullmatch(c) for row in rows for c in row)
    out = []
    for d, row in enumerate(rows):
        new = []
        for p, cell in enumerate(row):
            m = _LEGACY_B.fullmatch(cell)
            if m is not None:
                stage, kind, mb = m.groups()
                if not mb:
                    raise InputError(f"{kind} needs a microbatch index, as in '{stage}{kind}0': {cell!r}",
                                     source=source, where=f"row {d + 1}, column {p + 1}")
                new.append(f"{stage}{'I' if kind == 'B' and has_w else 'B'}{mb}")
                continue
            if _MODERN_I.fullmatch(cell) or cell.endswith(OVERLAP_F_B) or _LEGACY_BATCHED.fullmatch(cell):
                raise InputError(_legacy_refusal(cell), source=source, where=f"row {d + 1}, column {p + 1}")
            new.append(cell)
        out.append(new)
    return out


def _legacy_refusal(cell: str) -> str:
    if _MODERN_I.fullmatch(cell):
        return (f"{cell!r}: I (input gradient) is today's grammar (PyTorch 2.6 and later), not the "
                "grammar before 2.6; read this file without --grammar torch-legacy")
    if cell.endswith(OVERLAP_F_B):
        return (f"{cell!r}: OVERLAP_F_B was added to PyTorch after 2.6 and is not in the grammar "
                "before 2.6; read this file without --grammar torch-legacy")
    return (f"{cell!r}: a batched send and receive (SEND_F_RECV_B / SEND_B_RECV_F of PyTorch before "
            "2.6) has no spelling in today's grammar; write it as two cells, the SEND then the RECV")
