"""PyTorch's action grammar, the one home of what an action is and how it is written: the
kinds (``_ComputationType``'s values), :class:`Action`, and the text ``2F5``, ``0SEND_B1``,
``1REDUCE_GRAD``, ``(0F3;0B1)OVERLAP_F_B`` read and written (docs/spec.md section 2).

Stricter than PyTorch's ``_Action.from_str`` (which accepts ``0F1junk``): the whole text must
parse.  :class:`PlainRows` holds rows of plain actions as columns, before any Action is
built.  Nothing here imports the rest of schedverify except its errors, the kernel's door and
the lazy field, so the data model
(:mod:`schedverify.model`) and the file readers (:mod:`schedverify.io`) both build on it.
``Action`` is a NamedTuple rather than a dataclass because a realistic schedule holds
millions of them and a tuple is several times cheaper to build and to hash.
"""

from __future__ import annotations

import re
from array import array
from dataclasses import dataclass
from typing import Final, NamedTuple

from . import _accel
from .errors import ActionSyntaxError
from .lazy import Later

# Action kinds (PyTorch's ``_ComputationType`` values).  Plain interned strings, so that
# comparisons in the hot loops are pointer comparisons and JSON needs no conversion.
F = "F"
B = "B"
I = "I"  # noqa: E741  (the name is PyTorch's)
W = "W"
OVERLAP_F_B = "OVERLAP_F_B"
SEND_F = "SEND_F"
RECV_F = "RECV_F"
SEND_B = "SEND_B"
RECV_B = "RECV_B"
UNSHARD = "UNSHARD"
RESHARD = "RESHARD"
REDUCE_GRAD = "REDUCE_GRAD"
# PyTorch 2.15's: each send retired by its own wait, each gradient reduction by its wait
WAIT_SEND_F = "WAIT_SEND_F"
WAIT_SEND_B = "WAIT_SEND_B"
WAIT_REDUCE_GRAD = "WAIT_REDUCE_GRAD"

#: Kinds that compute on a (stage, microbatch) pair.
COMPUTE_KINDS = frozenset({F, B, I, W})
#: Point-to-point communication kinds.
COMM_KINDS = frozenset({SEND_F, RECV_F, SEND_B, RECV_B})
#: PyTorch's bookkeeping kinds: they carry a stage and no microbatch.
BOOKKEEPING_KINDS = frozenset({UNSHARD, RESHARD, REDUCE_GRAD, WAIT_REDUCE_GRAD})
#: The waits that retire a send (PyTorch 2.15): a stage and a microbatch, like the send.
SEND_WAIT_KINDS = frozenset({WAIT_SEND_F, WAIT_SEND_B})
#: Each send kind's wait, and back.
WAIT_OF = {SEND_F: WAIT_SEND_F, SEND_B: WAIT_SEND_B}
SEND_OF = {w: s for s, w in WAIT_OF.items()}
#: Point-to-point operations posted together in one ``batch_isend_irecv`` and waited for
#: together before the rank goes on (Megatron-LM's batched p2p, DeepSpeed's DualPipeV
#: commits): ``(0SEND_F1;0RECV_B0)BATCH``, the operations in posting order.  Not PyTorch's
#: runtime's: schedverify's, for the frameworks that run their own loops (docs/spec.md 10).
BATCH = "BATCH"
#: The kinds written as a composite of sub-actions, ``(a;b)KIND``.
COMPOSITE_KINDS = frozenset({OVERLAP_F_B, BATCH})
ALL_KINDS = COMPUTE_KINDS | COMM_KINDS | BOOKKEEPING_KINDS | SEND_WAIT_KINDS | COMPOSITE_KINDS
#: Kinds whose cost can be set in :class:`Costs`.
COSTED_KINDS = (F, B, I, W, OVERLAP_F_B, SEND_F, RECV_F, SEND_B, RECV_B)
#: The kinds that produce something another action can need, in the order of their integer
#: codes: the one definition of the codes, which the engines and the compiled kernel (handed
#: this tuple) use.
CODED_KINDS = (F, B, I, W, SEND_F, RECV_F, SEND_B, RECV_B)
KIND_CODE = {k: c for c, k in enumerate(CODED_KINDS)}
NCODES = len(CODED_KINDS)
#: The kinds a code of :class:`PlainRows` names: the coded kinds, then the bookkeeping kinds
#: PyTorch's lowering adds (which need nothing and have no code in a compiled graph), then
#: 2.15's waits (a WAIT_REDUCE_GRAD has a stage, a WAIT_SEND a stage and a microbatch).
COLUMN_KINDS = CODED_KINDS + (UNSHARD, RESHARD, REDUCE_GRAD, WAIT_REDUCE_GRAD, WAIT_SEND_F, WAIT_SEND_B)


class Action(NamedTuple):
    """One entry of a device's order, in PyTorch's grammar (``2F5``, ``0SEND_B1``, ...).

    ``microbatch`` is None for bookkeeping actions.  An ``OVERLAP_F_B`` action has
    ``stage``/``microbatch`` None and its two sub-actions (one ``F`` and one ``B`` or ``I``)
    in ``sub``.
    """

    stage: int | None
    kind: str
    microbatch: int | None = None
    sub: tuple[Action, ...] | None = None

    def __str__(self) -> str:
        if self.sub is not None:
            return "(" + ";".join(map(str, self.sub)) + ")" + self.kind
        if self.microbatch is None:
            return f"{self.stage}{self.kind}"
        return f"{self.stage}{self.kind}{self.microbatch}"

    def leaves(self) -> tuple[Action, ...]:
        """The compute actions this entry stands for (itself, or an overlap's sub-actions)."""
        return self.sub if self.sub is not None else (self,)


Rows = tuple[tuple["Action | None", ...], ...]


#: The typecode of :class:`PlainRows`' stage and microbatch columns (native int32).
INDEX_TYPECODE: Final = "i"


@dataclass(frozen=True, eq=False)
class PlainRows(Later[Rows]):
    """Rows of plain actions (each one F, B, I, W, SEND or RECV with its indices, or one
    UNSHARD, RESHARD or REDUCE_GRAD with its stage; no idle slot, no overlap) as columns:
    what a reader hands a Schedule when the compiled kernel parsed every cell
    (:func:`schedverify.io.actions.parse_rows`), and what the kernel's lowering gives
    (:func:`schedverify.lowering.torch_lowering`).  The engines read the columns;
    :meth:`make` builds the rows of Actions when ``schedule.order`` is first read
    (:mod:`schedverify.lazy`).

    ``codes``: per action, its kind's index in :data:`COLUMN_KINDS` (one byte each; a reader
    writes only those of :data:`CODED_KINDS`); ``stages``, ``mbs``: its stage and microbatch
    (native int32 each, typecode :data:`INDEX_TYPECODE`; -1, no microbatch, for bookkeeping; a
    reader whose index does not fit leaves the file to the Python reader); ``lengths``: the actions of each
    row; ``top_stage``, ``top_mb``: the largest indices (-1: no action)."""

    codes: bytes
    stages: bytes
    mbs: bytes
    lengths: tuple[int, ...]
    top_stage: int
    top_mb: int

    @property
    def n(self) -> int:
        return len(self.codes)

    def make(self) -> Rows:
        kernel = _accel.kernel
        if kernel is not None:
            rows: Rows = kernel.rows_of(self.codes, self.stages, self.mbs, self.lengths, Action,
                                        COLUMN_KINDS)
            return rows
        stages, mbs = array(INDEX_TYPECODE, self.stages), array(INDEX_TYPECODE, self.mbs)
        acts = [Action(s, COLUMN_KINDS[c], m if m >= 0 else None) for c, s, m in zip(self.codes, stages, mbs)]
        out, i = [], 0
        for length in self.lengths:
            out.append(tuple(acts[i:i + length]))
            i += length
        return tuple(out)

    def action(self, i: int) -> Action:
        """The Action at index ``i`` (device-major, as the rows run), made alone."""
        stage, mb = memoryview(self.stages).cast(INDEX_TYPECODE)[i], memoryview(self.mbs).cast(INDEX_TYPECODE)[i]
        return Action(stage, COLUMN_KINDS[self.codes[i]], mb if mb >= 0 else None)

    def names(self, indices: list[int]) -> list[str]:
        """``str`` of the actions at these indices (device-major, as the rows run)."""
        kernel = _accel.kernel
        got = (kernel.format_columns(self.codes, self.stages, self.mbs, self.lengths, indices,
                                     COLUMN_KINDS) if kernel is not None else None)
        if got is not None:
            return got
        stages, mbs = memoryview(self.stages).cast(INDEX_TYPECODE), memoryview(self.mbs).cast(INDEX_TYPECODE)
        return [f"{stages[i]}{COLUMN_KINDS[self.codes[i]]}{mbs[i] if mbs[i] >= 0 else ''}" for i in indices]

    @property
    def has_comm(self) -> bool:
        """Whether any action is a SEND or RECV (codes 4 to 7)."""
        codes = self.codes
        return any(codes.find(bytes((c,))) >= 0 for c in range(KIND_CODE[SEND_F], NCODES))


def overlap(forward: Action, backward: Action) -> Action:
    """An ``OVERLAP_F_B`` action running ``forward`` and ``backward`` together (DualPipe)."""
    return Action(None, OVERLAP_F_B, None, (forward, backward))


def batch(*ops: Action) -> Action:
    """A ``BATCH`` of point-to-point operations posted and waited for together."""
    return Action(None, BATCH, None, tuple(ops))


def malformation(a: Action) -> str:
    """Why ``a`` is not a well-formed action (docs/spec.md 3.1), for an action already known not
    to be: the one wording both checking engines use."""
    if a.kind == BATCH:
        subs = a.sub or ()
        if not subs:
            return "BATCH must hold one or more SEND/RECV actions, got nothing"
        bad = next((x for x in subs if x.sub is not None or x.kind not in COMM_KINDS), None)
        if bad is not None:
            return f"BATCH holds SEND/RECV actions only, got {bad}"
        return next(malformation(x) for x in subs if x.microbatch is None or type(x.stage) is not int
                    or x.stage < 0 or type(x.microbatch) is not int or x.microbatch < 0)
    if a.sub is not None or a.kind == OVERLAP_F_B:
        if a.kind != OVERLAP_F_B:
            return f"only OVERLAP_F_B and BATCH have sub-actions, not {a.kind!r}"
        subs = a.sub or ()
        kinds = [x.kind for x in subs]
        if len(subs) != 2 or kinds[0] != F or kinds[1] not in (B, I):
            return (f"OVERLAP_F_B must hold one forward then one backward (F;B or F;I), "
                    f"got {';'.join(map(str, subs)) or 'nothing'}")
        return "sub-actions cannot themselves overlap"
    if a.kind not in ALL_KINDS:
        return f"unknown action type {a.kind!r}"
    if type(a.stage) is not int or a.stage < 0:
        return f"stage index must be a whole number >= 0, got {a.stage!r}"
    if a.kind in BOOKKEEPING_KINDS:
        return f"{a.kind} takes no microbatch index, got {a.microbatch!r}"
    return f"microbatch index must be a whole number >= 0, got {a.microbatch!r}"


#: An index of more significant digits than this (leading zeros aside, as ``int()`` reads
#: it) is refused as it is read: no cap is anywhere near it, and Python's ``int()`` refuses
#: strings of more than 4300 digits.  Both parsers (this module's and the compiled kernel's)
#: count digits the same way, before converting anything.
MAX_DIGITS = 18
#: Said wherever a file reads as PyTorch's grammar before 2.6 would have written it.
LEGACY_HINT = ("this looks like PyTorch's grammar before 2.6 (B = input gradient, BW = full "
               "backward): try --grammar torch-legacy")

_KINDS = {k: k for k in ALL_KINDS}  # interns the kind strings the regex hands back
_SIMPLE = re.compile(
    r"(\d+)(F|B|I|W|SEND_F|RECV_F|SEND_B|RECV_B|UNSHARD|RESHARD|REDUCE_GRAD|WAIT_SEND_F|WAIT_SEND_B"
    r"|WAIT_REDUCE_GRAD)(\d*)"
)
_ANY = re.compile(r"(-?\d*)([A-Za-z_]*)(\d*)(.*)", re.DOTALL)  # a cell may hold a newline


def _index(digits: str) -> int | None:
    """The one conversion of an index's digits (ASCII ``0-9``, as the patterns match them)
    to an int: None when it has more than :data:`MAX_DIGITS` significant digits, which is
    decided before ``int()`` sees them (so its own 4300-digit limit is never reached)."""
    if len(digits) > MAX_DIGITS:
        digits = digits.lstrip("0") or "0"
        if len(digits) > MAX_DIGITS:
            return None
    return int(digits)


def read_action(text) -> Action | None:
    """The Action that ``text`` spells, or None where :func:`parse_action` would raise,
    without building a message (a file of a million bad cells costs no more than reading
    them).  The one place where an action's text is read and its indices converted."""
    if type(text) is not str:
        if not isinstance(text, str):
            return None
        text = str(text)  # a str subclass (numpy's str_): its characters
    m = _SIMPLE.fullmatch(text)
    if m is not None:
        stage_digits, kind, mb_digits = m.groups()
        kind = _KINDS[kind]
        stage = int(stage_digits) if len(stage_digits) <= MAX_DIGITS else _index(stage_digits)
        if stage is None:
            return None
        if kind in BOOKKEEPING_KINDS:
            return None if mb_digits else Action(stage, kind, None)
        if not mb_digits:
            return None
        mb = int(mb_digits) if len(mb_digits) <= MAX_DIGITS else _index(mb_digits)
        return None if mb is None else Action(stage, kind, mb)
    stripped = text.strip()
    if stripped != text:
        return read_action(stripped)
    return _read_composite(text) if text.startswith("(") else None


def _read_composite(text: str) -> Action | None:
    """``(<forward>;<backward>)OVERLAP_F_B`` or ``(<op>;<op>...)BATCH``, its sub-actions
    read; None otherwise."""
    close = text.find(")")
    kind = text[close + 1:]
    if close < 0 or kind not in COMPOSITE_KINDS:
        return None
    parts = text[1:close].split(";")
    if kind == OVERLAP_F_B and len(parts) != 2:
        return None
    sub = tuple(read_action(p.strip()) for p in parts)
    if any(x is None for x in sub):
        return None
    if kind == BATCH and any(x.sub is not None or x.kind not in COMM_KINDS for x in sub):  # type: ignore[union-attr]
        return None
    return Action(None, kind, None, sub)  # type: ignore[arg-type]


def parse_action(text: str) -> Action:
    """Parse one action string.  Raises :class:`ActionSyntaxError` with a precise reason."""
    a = read_action(text)
    if a is None:
        _refuse(text)
    return a  # type: ignore[return-value]  # _refuse always raises


def _refuse(text) -> None:
    """Raise why ``text`` is not an action (what :func:`read_action` refused)."""
    if not isinstance(text, str):
        raise ActionSyntaxError(f"expected an action string, got {text!r} ({type(text).__name__})")
    text = str(text)
    stripped = text.strip()
    if stripped != text:
        _refuse(stripped)
    m = _SIMPLE.fullmatch(text)
    if m is not None:  # the simple form: an absurd index, or a microbatch index (not) there
        stage, kind, mb = m.groups()
        for which, digits in (("stage", stage), ("microbatch", mb)):
            if digits and _index(digits) is None:
                shown = text if len(text) <= 40 else text[:20] + "..." + text[-12:]
                raise ActionSyntaxError(f"a {which} index of {len(digits.lstrip('0'))} digits is "
                                        f"absurdly large: {shown!r}")
        if kind in BOOKKEEPING_KINDS:
            raise ActionSyntaxError(f"{kind} takes no microbatch index: {text!r}")
        raise ActionSyntaxError(f"{kind} needs a microbatch index, as in '{stage}{kind}0': {text!r}")
    if text.startswith("("):
        close = text.find(")")
        kind = text[close + 1 :] if close > 0 else ""
        if close < 0 or kind not in COMPOSITE_KINDS:
            raise ActionSyntaxError(
                f"expected '(<forward>;<backward>)OVERLAP_F_B' or '(<op>;<op>...)BATCH', got {text!r}"
            )
        parts = text[1:close].split(";")
        if kind == OVERLAP_F_B and len(parts) != 2:
            raise ActionSyntaxError(
                f"OVERLAP_F_B takes exactly two sub-actions, got {len(parts)} in {text!r}"
            )
        sub = [parse_action(part.strip()) for part in parts]
        if kind == BATCH and any(x.sub is not None or x.kind not in COMM_KINDS for x in sub):
            raise ActionSyntaxError(f"BATCH holds SEND/RECV actions only: {text!r}")
    if not text:
        raise ActionSyntaxError("empty action (use null for an idle slot)")
    m = _ANY.fullmatch(text)
    assert m is not None  # every group may be empty: the pattern matches any text
    stage, kind, mb, rest = m.groups()
    if not stage or stage.startswith("-"):
        raise ActionSyntaxError(
            f"an action starts with its stage index, as in '0F1': {text!r}"
        )
    if kind == "BW":
        raise ActionSyntaxError(f"unknown action type 'BW' in {text!r}: {LEGACY_HINT}")
    if kind not in _KINDS or kind in COMPOSITE_KINDS:
        known = ", ".join(sorted(ALL_KINDS - COMPOSITE_KINDS))
        raise ActionSyntaxError(f"unknown action type {kind!r} in {text!r} (known: {known})")
    raise ActionSyntaxError(f"unexpected {rest!r} after {stage}{kind}{mb} in {text!r}")


def is_action(text) -> bool:
    """Whether :func:`parse_action` accepts ``text``, without building a message when not."""
    return read_action(text) is not None


def format_action(action: Action | None) -> str:
    """The action's string; '' for an idle slot (PyTorch's CSV convention)."""
    return "" if action is None else str(action)
