"""A fixed-seed differential fuzzer for the readers: schedule files mutated from a corpus,
each read and checked with the compiled kernel and in pure Python (tests/test_fuzz_corpus.py
runs it; imported as ``_fuzz``).

Inputs.  The corpus is tests/fuzz/corpus/ and the examples/ folder (JSON and CSV schedule
files, each small); an input is a corpus file with one to four mutations (most often one), drawn by
``random.Random(seed)`` so that a seed and an input number name an input exactly.  The
mutators aim at what the kernel reads itself: the JSON scanner (``scan_order``: string
escapes, characters that widen the text to 2 or 4 bytes, JSON and non-JSON whitespace,
numbers, nesting and duplicate keys where cells are expected) and the CSV reader
(``parse_row``/``parse_rows``: quoting, empty cells, spaces, line endings, byte-order marks),
with cells written in the grammar's own tables of kinds (:data:`KINDS`, so kinds added to
schedverify/grammar.py are drawn as soon as they are there) and indices at the edges of the
digit bound (18 and 19 significant digits, thousands of leading zeros).

Checks.  On each input: the kernel's scan of the order (``io.actions.scan_order``) equals
``parse_rows`` of what ``json`` reads there, and the document walk (``_scan_document``)
equals ``json.loads``; the kernel's ``parse_row`` and ``parse_rows`` of the CSV's rows equal
the pure-Python ones (or decline where parse_action decides); and ``schedverify check`` gives
the same exit code and the same bytes with the kernel and without, never a traceback.  A crash
would end the process, which the sanitizer job reports.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import random
from collections import Counter
from pathlib import Path

from schedverify import _accel
from schedverify.cli import run
from schedverify.grammar import ALL_KINDS, BOOKKEEPING_KINDS, COMPOSITE_KINDS
from schedverify.io.actions import parse_action, parse_row, parse_rows, scan_order

ROOT = Path(__file__).resolve().parent.parent
CORPUS_DIRS = (ROOT / "tests" / "fuzz" / "corpus", ROOT / "examples")
#: The seeds a run uses, in order; a failure names its seed and input number.
SEEDS = (20251201, 25, 2_150_000)

#: every kind the grammar reads but the composites (each written around others)
KINDS = tuple(sorted(ALL_KINDS - COMPOSITE_KINDS))
OPTIONS = (
    (), ("--format", "json"), ("--comm-semantics", "eager"), ("--comm-semantics", "rendezvous"),
    ("--costs", "F=0.1,B=0.7,I=0.3,W=0.4,comm=0.2", "--format", "json"), ("--memory-limit", "2"),
    ("--costs", f"F={2**50 + 1},B={2**51 + 3}", "--comm-semantics", "eager"), ("--grid",),
)


def corpus() -> list[tuple[str, str]]:
    """(text, suffix) of every corpus file, in name order."""
    files = sorted(p for d in CORPUS_DIRS for p in d.iterdir() if p.suffix in (".json", ".csv"))
    return [(p.read_text(encoding="utf-8"), p.suffix) for p in files]


# --------------------------------------------------------------------------- cells

def index(rng: random.Random) -> str:
    """An index's digits, often at an edge: of the bound of 18 significant digits, or of the
    int32 columns the kernel reads an order into (grammar.INDEX_TYPECODE)."""
    roll = rng.random()
    if roll < 0.55:
        return str(rng.randrange(4))
    if roll < 0.7:
        return str(rng.randrange(10**7))
    if roll < 0.82:
        return "0" * rng.choice((1, 5, 17, 18, 19, 300, 4400)) + str(rng.randrange(10))
    if roll < 0.89:  # the columns' edge: scanned into them, or left to the Python reader
        return str(rng.choice((2**31 - 2, 2**31 - 1, 2**31, 2**32)))
    if roll < 0.96:
        return str(rng.randrange(10**17, 10**18))  # 18 digits: read by both
    return str(rng.randrange(10**18, 10**19))  # 19: refused by both


def cell(rng: random.Random) -> str:
    """An action's text in the grammar (or just outside it)."""
    roll = rng.random()
    if roll < 0.08:
        return f"({cell(rng)};{cell(rng)})OVERLAP_F_B"
    if roll < 0.1:
        return f"({';'.join(cell(rng) for _ in range(rng.randrange(1, 4)))})BATCH"
    if roll < 0.15:
        return rng.choice(("", " 0F0", "0F0 ", "0BW1", "0f0", "-1F0", "0F", "F0", "0F0;0B0", "1REDUCE_GRAD1",
                           "0F1x", "\u00e90F0", "0F\u0661"))
    kind = rng.choice(KINDS)
    mb = "" if kind in BOOKKEEPING_KINDS and rng.random() < 0.9 else index(rng)
    return f"{index(rng)}{kind}{mb}"


# --------------------------------------------------------------------------- mutators

JSON_ALPHABET = '[]{},:"\\ \t\n\r0123456789FBIWSENDRCV_u'


def _string_spans(text: str) -> list[tuple[int, int]]:
    """Where the JSON string literals are (start and end of their contents), roughly: a
    mutation may land anywhere, this only aims it."""
    spans, i = [], text.find('"')
    while i >= 0:
        j = i + 1
        while j < len(text) and text[j] != '"':
            j += 2 if text[j] == "\\" else 1
        if j >= len(text):
            break
        spans.append((i + 1, j))
        i = text.find('"', j + 1)
    return spans


def _cell_spans(text: str) -> list[tuple[int, int]]:
    """The string literals after the order's key that are not keys themselves: its cells."""
    start = text.find('"order"')
    return [(a, b) for a, b in _string_spans(text)
            if a > start >= 0 and not text[b + 1:b + 3].lstrip().startswith(":")]


def mutate_json(text: str, rng: random.Random) -> str:
    """One edit: most keep the text JSON (a cell replaced, escaped, widened, spaced), some
    break it (a bracket or quote, a character, the end cut off)."""
    spans = _cell_spans(text) or _string_spans(text) or [(0, 0)]
    a, b = rng.choice(spans)
    roll = rng.random()
    if roll < 0.4:  # a new cell where a string was
        return text[:a] + json.dumps(cell(rng), ensure_ascii=rng.random() < 0.5)[1:-1] + text[b:]
    if roll < 0.5 and b > a:  # a character of a string written as an escape
        k = rng.randrange(a, b)
        if text[k] != "\\" and text[k - 1] != "\\":
            return text[:k] + f"\\u{ord(text[k]):04x}" + text[k + 1:]
    if roll < 0.58:  # a wide character in a string: the text becomes 2 or 4 bytes a character
        k = rng.randrange(a, b + 1)
        return text[:k] + rng.choice(("\u00e9", "\u0100", "\u20ac", "\U0001F600", "\ud7ff")) + text[k:]
    if roll < 0.68:  # whitespace after a token, JSON's (mostly) or not
        tokens = [k + 1 for k, c in enumerate(text) if c in ",:[]{}"] or [0]
        k = rng.choice(tokens)
        space = rng.choice((" ", "\t", "\n", "\r\n", "  \t", " ", "\f", "\u00a0"))
        return text[:k] + space + text[k:]
    if roll < 0.74:  # a number, null, nesting or an object where a cell was
        return text[:a - 1] + rng.choice(("1", "-0", "1e999", "null", "[]", '["0F0"]', "{}", "true",
                                          "9" * 30)) + text[b + 1:]
    if roll < 0.8:  # a row added
        k = text.find("[[")
        if k >= 0:
            row = json.dumps([cell(rng) for _ in range(rng.randrange(4))])
            return text[:k + 1] + row + "," + text[k + 1:]
    if roll < 0.84:  # a second "order", or another key
        k = text.rfind("}")
        if k > 0:
            key = rng.choice(('"order"', '"x"', '"stages"', '"\u00e9"'))
            return text[:k] + f', {key}: [["{cell(rng)}"], []]' + text[k:]
    if roll < 0.88:  # a cell's quote or bracket removed or doubled
        k = rng.choice((a - 1, b)) if b > a else rng.randrange(len(text) + 1)
        return text[:k] + rng.choice(("", '"', '""', "]", "[", ",")) + text[k + 1:]
    if roll < 0.9:  # truncated
        return text[:rng.randrange(len(text) + 1)]
    # a character put in, taken out or changed
    k = rng.randrange(len(text) + 1)
    return text[:k] + rng.choice(("", rng.choice(JSON_ALPHABET))) + text[k + rng.randrange(2):]


def mutate_csv(text: str, rng: random.Random) -> str:
    rows = list(csv.reader(io.StringIO(text, newline=""))) or [[]]
    what = rng.randrange(9)
    d = rng.randrange(len(rows))
    row = rows[d]
    p = rng.randrange(len(row) + 1)
    if what == 0:  # a new cell
        row.insert(p, cell(rng))
    elif what == 1 and row:  # a cell changed in place
        row[min(p, len(row) - 1)] = cell(rng)
    elif what == 2:  # an empty cell (an idle slot), spaces around a cell
        row.insert(p, rng.choice(("", " ", " 0F0 ", "\t1B0")))
    elif what == 3 and row:  # a cell deleted, a row deleted or doubled
        del row[min(p, len(row) - 1)]
    elif what == 4:
        rows.insert(d, list(row) if rng.random() < 0.5 else [])
    elif what == 5 and row:  # an index's digits at an edge
        c = row[min(p, len(row) - 1)]
        k = rng.randrange(len(c) + 1)
        row[min(p, len(row) - 1)] = c[:k] + index(rng) + c[k:]
    else:  # the text itself: quoting, line endings, a byte-order mark, a byte
        out = io.StringIO()
        csv.writer(out, lineterminator=rng.choice(("\n", "\r\n")),
                   quoting=rng.choice((csv.QUOTE_MINIMAL, csv.QUOTE_ALL))).writerows(rows)
        text = out.getvalue()
        k = rng.randrange(len(text) + 1)
        extra = rng.choice(("", '"', ",", "\n", "\r", "\ufeff", "\u00e9", ";", "(", ")", "\x0b"))
        return ("\ufeff" if rng.random() < 0.05 else "") + text[:k] + extra + text[k + rng.randrange(2):]
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)
    return out.getvalue()


def inputs(seed: int, count: int) -> list[tuple[str, str, tuple[str, ...]]]:
    """``count`` inputs (text, suffix, options) for ``seed``: a corpus file, mutated."""
    rng = random.Random(seed)
    files = corpus()
    out = []
    for _ in range(count):
        text, suffix = rng.choice(files)
        mutate = mutate_json if suffix == ".json" else mutate_csv
        for _ in range(rng.choice((1, 1, 1, 2, 2, 3, 4))):
            text = mutate(text, rng)
        out.append((text, suffix, rng.choice(OPTIONS)))
    return out


# --------------------------------------------------------------------------- the checks

@dataclasses.dataclass
class Tally:
    inputs: int = 0
    scanned: int = 0  # JSON inputs whose order the kernel read from the text
    rows_parsed: int = 0  # CSV rows the kernel's parse_row read
    exits: Counter = dataclasses.field(default_factory=Counter)


def _pure():
    class Off:
        def __enter__(self):
            self.saved, _accel.kernel = _accel.kernel, None

        def __exit__(self, *exc):
            _accel.kernel = self.saved

    return Off()


def check_scan(text: str, tally: Tally) -> None:
    """The kernel's scan of an order equals what json and parse_rows make of it, and the
    document walk equals json.loads."""
    from schedverify.grammar import PlainRows
    from schedverify.io.jsonfmt import _scan_document

    k = text.find('"order"')
    pos = text.find(":", k) + 1 if k >= 0 else 0
    got = scan_order(text, pos)
    if got is not None:
        tally.scanned += 1
        columns, end = got
        start = len(text) - len(text[pos:].lstrip(" \t\n\r"))
        value, value_end = json.JSONDecoder().raw_decode(text, start)  # the kernel took it: JSON
        want = parse_rows(value)
        assert want is not None and dataclasses.astuple(columns) == dataclasses.astuple(want), text
        assert end == value_end, text
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):
        doc = None
    got_doc = _scan_document(text)
    if got_doc is None:
        return
    assert isinstance(doc, dict) and list(got_doc) == list(doc), text
    for key, value in doc.items():
        if isinstance(got_doc[key], PlainRows):
            want = parse_rows(value)
            assert key == "order" and want is not None, text
            assert dataclasses.astuple(got_doc[key]) == dataclasses.astuple(want), text
        else:
            assert repr(got_doc[key]) == repr(value), text


def check_rows(text: str, tally: Tally) -> None:
    """The kernel's parse_row and parse_rows of a CSV's rows equal the pure-Python parsers'."""
    try:
        rows = [list(map(str.strip, r)) for r in csv.reader(io.StringIO(text, newline=""), strict=True)]
    except csv.Error:
        return
    for row in rows:
        cells = [c for c in row if c]
        fast = parse_row(cells)
        with _pure():
            slow = parse_row(cells)
        if fast is not None:
            tally.rows_parsed += 1
        assert fast is not None or slow is None, row
        if fast is not None and slow is None:
            assert fast == [parse_action(c) for c in cells], row
        else:
            assert fast == slow, row
    columns = parse_rows([[c for c in row if c] for row in rows])
    if columns is not None:
        assert columns.make() == tuple(tuple(parse_row([c for c in row if c])) for row in rows), text


def check_command(directory: Path, name: str, text: str, suffix: str, options, tally: Tally) -> None:
    """``schedverify check`` with the kernel and without: the same exit code and bytes."""
    path = directory / f"{name}{suffix}"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    results = []
    for off in (False, True):
        out, err = io.StringIO(), io.StringIO()
        if off:
            with _pure():
                code = run(["check", str(path), *options], out, err)
        else:
            code = run(["check", str(path), *options], out, err)
        results.append((code, out.getvalue(), err.getvalue()))
    (code, out, err), slow = results
    assert "Traceback" not in out + err and code in (0, 1, 2), (code, err[-500:], text)
    assert (code, out, err) == slow, (text, options)
    tally.exits[code] += 1
    path.unlink()


def run_inputs(directory: Path, seed: int, count: int, tally: Tally) -> None:
    for k, (text, suffix, options) in enumerate(inputs(seed, count)):
        try:
            if suffix == ".json":
                check_scan(text, tally)
            else:
                check_rows(text, tally)
            check_command(directory, f"s{seed}-{k}", text, suffix, options, tally)
        except AssertionError as e:
            raise AssertionError(f"seed {seed}, input {k} ({suffix}, options {list(options)}): {e}\n"
                                 f"input: {text[:2000]!r}") from None
        tally.inputs += 1
