"""Per-stage costs from a measurement: a small file a user writes from their own timing, or
the PyTorch profiler's Chrome trace of one pipeline step.  Both give a
:class:`~schedverify.plan.stages.StageProfile` (seconds and bytes).

The profile file
================

JSON (``schedverify-profile/1``)::

    {"format": "schedverify-profile/1",            (optional)
     "units": {"time": "ms", "memory": "GiB"},      (optional; default s and B)
     "stages": [{"F": 1.2, "I": 1.1, "W": 0.9, "activation": 2.5, "static": 20},
                {"F": "1300us", "B": 2.1, "activation": "2.5GiB", "static": 18}],
     "w": 0.5,                                      (optional, default 0.5)
     "comm": 0.05,                                  (optional, default 0, in units.time)
     "notes": ["A100, bf16, seq 4096"]}             (optional)

One object per stage, in stage order.  A number is in the file's ``units``; a string may
carry its own unit (``"1300us"``, ``"2.5GiB"``), which wins.

CSV: a header row naming the columns, then one row per stage::

    stage,F[ms],I[ms],W[ms],activation[GiB],static[GiB]
    0,1.2,1.1,0.9,2.5,20
    1,1.3,1.2,0.9,2.5,18

Columns (any order; only ``F`` is required): ``stage`` (if present, 0, 1, 2, ... in order),
``F``, ``I``, ``W``, ``B`` (times), ``activation``, ``static``, ``recv_buffers`` (bytes),
``w`` and ``comm`` (one value for the whole pipeline: every non-empty cell must agree).  A
unit in brackets in the header (``F[ms]``) is the unit of that column's bare numbers; a cell
may carry its own (``1.2ms``).  Without either, times are seconds and memory bytes.  An empty
cell is a value not given; a row whose first cell starts with ``#`` is a comment.

Each stage needs ``F`` and a backward: ``I`` and ``W``, or ``B`` (an unsplit backward, as
``loss.backward()`` measures it), or all three.  **A stage with only B** gets ``I = W = B / 2``:
an assumption, said in the profile's notes, that only schedules splitting the backward use
(the unsplit ones use ``B`` itself, :attr:`StageProfile.full_backward`).  One of ``I``/``W``
with ``B`` gives the other as the difference.  ``activation``, ``static`` and
``recv_buffers`` are each given for every stage or for none (none: activation 0 and a note;
static and receive buffers empty, as :class:`StageProfile` takes them).

:func:`dump_profile` writes either form in seconds and bytes with exact numbers (``repr`` of
each float), so a profile survives a round trip through JSON and through CSV unchanged
(except its notes, which only JSON carries, and its ``source``, which names the file read).

The Chrome trace
================

What PyTorch 2.13's pipelining emits (torch/distributed/pipelining/schedules.py), per rank:

- ``PP:<stage><F|I|W|B><microbatch>`` (``PP:1I3``): a ``record_function`` around each
  action of ``_PipelineScheduleRuntime`` (Interleaved1F1B, LoopedBFS, InterleavedZeroBubble,
  ZBVZeroBubble, DualPipeV, and any schedule loaded from a CSV).  Stage and microbatch are in
  the name.  ``PP:(...)OVERLAP_F_B`` spans, whose passes are not timed apart, are skipped.
- ``Forward <microbatch>`` and ``Backward <microbatch>``: ScheduleGPipe's labels.  They carry
  no stage: the stage is the rank's position (below), so with data parallelism as well, give
  the files of one pipeline.
- Nothing from Schedule1F1B.  Profiled with ``with_stack=True``, its trace has the Python
  functions ``forward_one_chunk``, ``backward_one_chunk`` and ``backward_weight_one_chunk``
  of ``torch/distributed/pipelining/stage.py``, which are read instead (microbatches by order;
  ``backward_one_chunk`` is B, or I when the rank also runs ``backward_weight_one_chunk``).

A rank uses the first of these kinds it has.  Ranks: one trace file per rank, as
``torch.profiler`` writes them (a file's processes, by pid, when one file holds several);
files are taken in the order of their ``distributedInfo.rank`` when every file has one,
else as given.  On a GPU trace the ``gpu_user_annotation`` twin of a label (the device's
span of the pass) is read in place of the host's.

A pass's time is its span on the host from its first to its last operator (``cpu_op``)
that is not communication (``measure="busy"``, the default): the wait for a receive at the
start of a pass is the pipeline's bubble, not the pass's cost, and a span that runs no
operator at all (the first stage's I: there is no input gradient to compute) takes 0 s.
``measure="span"`` takes whole spans, and so does a trace without operators.  Each stage's
F, I, W, B is the **median** over its microbatches (and over the steps, if the trace holds
more than one).  A stage with only B gets I = W = B / 2, as in a profile file.

A trace has no memory or link times: ``activation`` is 0 and ``comm`` 0, both said in the
notes; take them from a profile file or a model (``dataclasses.replace``).  The reader is
tested on CPU traces that PyTorch writes (tests/test_plan_trace.py); the GPU path (device
spans) only on hand-made events shaped as Kineto writes them.
"""

from __future__ import annotations

import bisect
import csv
import gzip
import io
import json
import math
import os
import re
import statistics
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import InputError, UsageError
from ..io.files import as_text, read_text, source_name, write_atomic
from ..limits import Limits, limits
from ..units import SI_BASE, TIME_UNITS, MEMORY_UNITS, Units, parse_bytes, parse_time
from .stages import StageProfile

FORMAT = "schedverify-profile/1"
TIMES = ("F", "I", "W", "B")
MEMORY = ("activation", "static", "recv_buffers")
STAGE_FIELDS = TIMES + MEMORY
GLOBAL = ("w", "comm")
CSV_COLUMNS = ("stage",) + STAGE_FIELDS + GLOBAL
JSON_FIELDS = ("format", "units", "stages", "w", "comm", "notes")
MEASURES = ("busy", "span")

Value = float | int | None


# --- building a profile from per-stage values (both file forms) ---------------------------

def _build(stages: list[dict[str, Value]], w: float | None, comm: float | None, source: str,
           where: Callable[[int, str], str], notes: list[str]) -> StageProfile:
    """The profile of per-stage values, the backward rule and the all-or-none rule applied;
    ``where(stage, field)`` names a stage's field in the file's own terms."""
    if not stages:
        raise InputError("no stages: a profile needs one row (or object) per stage", source=source)
    n = len(stages)
    F, I, W = [], [], []
    halved = []
    for s, row in enumerate(stages):
        if row.get("F") is None:
            raise InputError("no forward time: every stage needs F", source=source, where=where(s, "F"))
        F.append(float(row["F"]))  # type: ignore[arg-type]
        i, wt, b = row.get("I"), row.get("W"), row.get("B")
        if i is None and wt is None:
            if b is None:
                raise InputError("no backward time: give I and W, or B (the unsplit backward)",
                                 source=source, where=where(s, "B"))
            i = wt = float(b) / 2
            halved.append(s)
        elif i is None or wt is None:
            given, other = ("I", "W") if wt is None else ("W", "I")
            if b is None:
                raise InputError(f"{given} without {other}: give both, or B as well",
                                 source=source, where=where(s, other))
            rest = float(b) - float(row[given])  # type: ignore[arg-type]
            if rest < 0:
                raise InputError(f"B ({b!r}) is less than {given} ({row[given]!r}), so {other} "
                                 f"would be negative", source=source, where=where(s, "B"))
            i, wt = (row["I"], rest) if wt is None else (rest, row["W"])
        I.append(float(i))  # type: ignore[arg-type]
        W.append(float(wt))  # type: ignore[arg-type]
    B: tuple[float, ...] | None = None
    if any(row.get("B") is not None for row in stages):
        B = tuple(float(row["B"]) if row.get("B") is not None else I[s] + W[s]  # type: ignore[arg-type]
                  for s, row in enumerate(stages))
    if halved:
        notes.append(f"stage{'s' if len(halved) > 1 else ''} {_list(halved)}: only B measured; "
                     f"I = W = B/2 assumed for schedules that split the backward")
    memory: dict[str, tuple[int, ...]] = {}
    for name in MEMORY:
        has = [s for s, row in enumerate(stages) if row.get(name) is not None]
        if has and len(has) < n:
            missing = next(s for s in range(n) if s not in has)
            raise InputError(f"{name} is given for stage{'s' if len(has) > 1 else ''} {_list(has)} "
                             f"but not here: give it for every stage or for none",
                             source=source, where=where(missing, name))
        memory[name] = tuple(int(row[name]) for row in stages) if has else ()  # type: ignore[arg-type]
    if not memory["activation"]:
        memory["activation"] = (0,) * n
        notes.append("no activation memory given: 0 bytes per microbatch assumed")
    if w is None:
        w = 0.5
        if any(memory["activation"]):
            notes.append("w (the share of the activation the weight pass holds) not given: 0.5 assumed")
    return StageProfile(F=tuple(F), I=tuple(I), W=tuple(W), activation=memory["activation"], w=w,
                        static=memory["static"], recv_buffers=memory["recv_buffers"],
                        comm=0.0 if comm is None else comm, B=B, source=source, notes=tuple(notes))


def _list(xs: Sequence[int]) -> str:
    return ", ".join(map(str, xs))


def _w(value: Any, where: str, source: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise InputError(f"expected a number between 0 and 1, got {value!r}", source=source, where=where)
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            raise InputError(f"expected a number between 0 and 1, got {value!r}", source=source,
                             where=where) from None
    if not (math.isfinite(value) and 0 <= value <= 1):
        raise InputError(f"must be between 0 and 1, got {value!r}", source=source, where=where)
    return float(value)


def _value(name: str, value: Any, where: str, source: str, units: Units) -> Value:
    """One field's value in seconds or bytes: a number in ``units``, or a string with a unit."""
    if name in TIMES or name == "comm":
        return parse_time(value, where, default_unit=units.time or "s", source=source)
    return parse_bytes(value, where, default_unit=units.memory or "B", source=source)


# --- reading ------------------------------------------------------------------------------

def load_profile(path_or_text: str | os.PathLike, source: str | None = None, *,
                 format: str | None = None) -> StageProfile:
    """A profile from a file (a path, ``-`` for standard input) or from its text (a string
    holding a newline or starting with ``{``).  ``format`` is ``"json"`` or ``"csv"``; by
    default a ``.csv`` file is CSV, and other text is JSON when it starts with ``{``."""
    if isinstance(path_or_text, str) and ("\n" in path_or_text or path_or_text.lstrip().startswith("{")):
        return loads_profile(path_or_text, source or "<string>", format=format)
    text = read_text(path_or_text, "profile")
    name = source or source_name(path_or_text)
    if format is None and str(path_or_text).lower().endswith(".csv"):
        format = "csv"
    return loads_profile(text, name, format=format)


def loads_profile(text: str | bytes, source: str = "<string>", *, format: str | None = None) -> StageProfile:
    """A profile from the text of a JSON or CSV profile (see the module's docstring)."""
    if format not in (None, "json", "csv"):
        raise UsageError(f"profile format: expected 'json' or 'csv', got {format!r}")
    text = as_text(text, source)
    if not text.strip():
        raise InputError("the file is empty", source=source)
    if format is None:
        format = "json" if text.lstrip().startswith("{") else "csv"
    return _read_json(text, source) if format == "json" else _read_csv(text, source)


def _read_json(text: str, source: str) -> StageProfile:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise InputError(f"invalid JSON: {e.msg}", source=source, where=f"line {e.lineno}, column {e.colno}") from None
    except (ValueError, RecursionError) as e:
        raise InputError(f"invalid JSON: {e}", source=source) from None
    if not isinstance(doc, dict):
        raise InputError(f"expected an object with \"stages\", got {type(doc).__name__}", source=source)
    for key in doc:
        if key not in JSON_FIELDS:
            raise InputError(_unknown(key, JSON_FIELDS, "field"), source=source, where=key)
    if "format" in doc and doc["format"] != FORMAT:
        raise InputError(f"expected {FORMAT!r}, got {doc['format']!r}", source=source, where="format")
    units = Units.parse(doc.get("units", {}), source=source)
    raw = doc.get("stages")
    if not isinstance(raw, list):
        raise InputError("expected a list with one object per stage" + ("" if raw is None else f", got {raw!r}"),
                         source=source, where="stages")
    limits().refuse("size", len(raw), "stages", source=source, where="stages")
    stages: list[dict[str, Value]] = []
    for s, obj in enumerate(raw):
        if not isinstance(obj, dict):
            raise InputError(f"expected an object such as {{\"F\": 1.2, \"B\": 2.0}}, got {obj!r}",
                             source=source, where=f"stages[{s}]")
        row: dict[str, Value] = {}
        for key, value in obj.items():
            if key not in STAGE_FIELDS:
                raise InputError(_unknown(key, STAGE_FIELDS, "field"), source=source, where=f"stages[{s}].{key}")
            if value is not None:
                row[key] = _value(key, value, f"stages[{s}].{key}", source, units)
        stages.append(row)
    w = _w(doc["w"], "w", source) if doc.get("w") is not None else None
    comm = _value("comm", doc["comm"], "comm", source, units) if doc.get("comm") is not None else None
    notes = doc.get("notes", [])
    if not isinstance(notes, list) or not all(isinstance(x, str) for x in notes):
        raise InputError("expected a list of strings", source=source, where="notes")
    return _build(stages, w, comm, source, lambda s, name: f"stages[{s}].{name}", list(notes))


_HEADER = re.compile(r"\s*([A-Za-z_]+)\s*(?:\[\s*([^\]]*?)\s*\])?\s*\Z")


def _read_csv(text: str, source: str) -> StageProfile:
    cap = limits()
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    header: list[tuple[str, str | None]] | None = None
    stages: list[dict[str, Value]] = []
    lines: list[int] = []  # the file line of each stage's row, for messages
    shared: dict[str, tuple[Value, str]] = {}
    try:
        for row in reader:
            line = reader.line_num
            if not any(c.strip() for c in row) or row[0].lstrip().startswith("#"):
                continue
            if header is None:
                header = _csv_header(row, source, line)
                continue
            if len(row) > len(header):
                raise InputError(f"{len(row)} cells, but the header names {len(header)} columns",
                                 source=source, where=f"row {line}, column {len(header) + 1}")
            if len(stages) == cap.size:
                raise InputError(cap.exceeded("size", "rows (stages)"), source=source)
            values: dict[str, Value] = {}
            for (name, unit), cell in zip(header, row):
                cell = cell.strip()
                if not cell:
                    continue
                where = f"row {line}, column {name}"
                if name == "stage":
                    if cell != str(len(stages)):
                        raise InputError(f"stages are numbered 0, 1, 2, ... in order: expected "
                                         f"{len(stages)}, got {cell!r}", source=source, where=where)
                elif name == "w":
                    _agree(shared, "w", _w(cell, where, source), where, source)
                elif name == "comm":
                    _agree(shared, "comm", parse_time(cell, where, default_unit=unit or "s", source=source),
                           where, source)
                elif name in TIMES:
                    values[name] = parse_time(cell, where, default_unit=unit or "s", source=source)
                else:
                    values[name] = parse_bytes(cell, where, default_unit=unit or "B", source=source)
            stages.append(values)
            lines.append(line)
    except csv.Error as e:
        raise InputError(f"not valid CSV: {e}", source=source, where=f"row {reader.line_num}") from None
    if header is None:
        raise InputError("no header row (e.g. stage,F[ms],I[ms],W[ms],activation[GiB])", source=source)
    w = shared["w"][0] if "w" in shared else None
    comm = shared["comm"][0] if "comm" in shared else None
    return _build(stages, w, comm, source,
                  lambda s, name: f"row {lines[s]}, column {name}", [])


def _csv_header(row: list[str], source: str, line: int) -> list[tuple[str, str | None]]:
    out: list[tuple[str, str | None]] = []
    for c, cell in enumerate(row):
        where = f"row {line}, column {c + 1}"
        m = _HEADER.match(cell)
        if m is None:
            raise InputError(f"not a column name: {cell!r} (a name such as F, or F[ms] with its unit)",
                             source=source, where=where)
        name, unit = m.group(1), m.group(2)
        if name not in CSV_COLUMNS:
            raise InputError(_unknown(name, CSV_COLUMNS, "column"), source=source, where=where)
        if any(name == n for n, _ in out):
            raise InputError(f"column {name!r} appears twice", source=source, where=where)
        if unit is not None:
            table = (list(TIME_UNITS) if name in TIMES or name == "comm"
                     else list(MEMORY_UNITS) if name in MEMORY else [])
            if unit not in table:
                known = f"known: {', '.join(table)}" if table else f"{name} has no unit"
                raise InputError(f"unknown unit {unit!r} in {cell.strip()!r}; {known}", source=source, where=where)
        out.append((name, unit))
    if "F" not in [n for n, _ in out]:
        raise InputError("no F column: the header must name at least F (the forward time)",
                         source=source, where=f"row {line}")
    return out


def _agree(shared: dict[str, tuple[Value, str]], name: str, value: Value, where: str, source: str) -> None:
    if name in shared and shared[name][0] != value:
        raise InputError(f"{name} is one value for the whole pipeline, but this cell says {value!r} and "
                         f"{shared[name][1]} says {shared[name][0]!r}", source=source, where=where)
    shared.setdefault(name, (value, where))


def _unknown(key: str, allowed: Iterable[str], what: str) -> str:
    import difflib

    allowed = list(allowed)
    close = difflib.get_close_matches(key, allowed, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else f"; known: {', '.join(allowed)}"
    return f"unknown {what} {key!r}{hint}"


# --- writing ------------------------------------------------------------------------------

def dumps_profile(profile: StageProfile, format: str = "json") -> str:
    """The text of ``profile`` as a JSON or CSV profile, in seconds and bytes, exactly."""
    if format == "json":
        return _json_text(profile)
    if format == "csv":
        return _csv_text(profile)
    raise UsageError(f"profile format: expected 'json' or 'csv', got {format!r}")


def dump_profile(profile: StageProfile, path: str | os.PathLike, *, format: str | None = None) -> None:
    """Write ``profile`` to ``path`` whole or not at all; CSV when the name ends in ``.csv``
    (or ``format="csv"``), else JSON."""
    if format is None:
        format = "csv" if str(path).lower().endswith(".csv") else "json"
    write_atomic(path, dumps_profile(profile, format))


def _columns(profile: StageProfile) -> list[tuple[str, tuple]]:
    cols: list[tuple[str, tuple]] = [("F", profile.F), ("I", profile.I), ("W", profile.W)]
    if profile.B is not None:
        cols.append(("B", profile.B))
    cols.append(("activation", profile.activation))
    for name in ("static", "recv_buffers"):
        if getattr(profile, name):
            cols.append((name, getattr(profile, name)))
    return cols


def _json_text(profile: StageProfile) -> str:
    cols = _columns(profile)
    doc = {"format": FORMAT, "units": SI_BASE.to_json(),
           "stages": [{name: values[s] for name, values in cols} for s in range(profile.stages)],
           "w": profile.w, "comm": profile.comm}
    if profile.notes:
        doc["notes"] = list(profile.notes)
    return json.dumps(doc, indent=1, ensure_ascii=False) + "\n"


def _csv_text(profile: StageProfile) -> str:
    cols = _columns(profile)
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(["stage"] + [f"{n}[{'s' if n in TIMES else 'B'}]" for n, _ in cols] + ["w", "comm[s]"])
    for s in range(profile.stages):
        writer.writerow([s] + [repr(values[s]) for _, values in cols] + [repr(profile.w), repr(profile.comm)])
    return buf.getvalue()


# --- the Chrome trace ---------------------------------------------------------------------

_PP = re.compile(r"PP:(\d+)([FIWB])(\d+)\Z")
_PP_OVERLAP = re.compile(r"PP:\(.*\)OVERLAP_F_B\Z")
_GPIPE = re.compile(r"(Forward|Backward) (\d+)\Z")
_PYTHON = re.compile(r".*pipelining[/\\]stage\.py\(\d+\): (forward_one_chunk|backward_one_chunk|"
                     r"backward_weight_one_chunk)\Z")
_COMM_PREFIXES = ("c10d::", "gloo:", "nccl:", "record_param_comms", "ProfilerStep")
LOOKED_FOR = ("record_function labels 'PP:<stage><F|I|W|B><microbatch>' (_PipelineScheduleRuntime) "
              "and 'Forward <microbatch>' / 'Backward <microbatch>' (ScheduleGPipe), or, profiled with "
              "with_stack=True, the functions forward_one_chunk, backward_one_chunk and "
              "backward_weight_one_chunk of torch/distributed/pipelining/stage.py (Schedule1F1B labels nothing)")


@dataclass(frozen=True)
class _Event:
    name: str
    cat: str
    pid: Any
    tid: Any
    ts: float  # microseconds
    dur: float

    @property
    def end(self) -> float:
        return self.ts + self.dur


@dataclass
class _Rank:
    """One process's complete events (``ph: "X"``), from one file."""

    label: str  # for notes: the file, and the pid when the file holds several processes
    events: list[_Event]


def load_chrome_trace(paths: str | os.PathLike | Sequence[str | os.PathLike], *,
                      measure: str = "busy") -> StageProfile:
    """The per-stage F, I, W (or B) times of the PyTorch profiler trace(s) of one pipeline
    step, one file per rank (``.json`` or ``.json.gz``); see the module's docstring for what
    is read.  Raises :class:`InputError` for a file that is not a Chrome trace or that has no
    pipelining spans, naming what was looked for."""
    if measure not in MEASURES:
        raise UsageError(f"measure: expected one of {', '.join(MEASURES)}, got {measure!r}")
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    paths = list(paths)
    if not paths:
        raise UsageError("load_chrome_trace: no trace files given")
    docs = [(source_name(p), _read_trace(p)) for p in paths]
    numbers = [_rank_of(doc) for _, doc in docs]
    if None not in numbers and len(set(numbers)) == len(docs):
        known = [n for n in numbers if n is not None]
        docs = [d for _, d in sorted(zip(known, docs), key=lambda x: x[0])]
        order = f"ordered by distributedInfo.rank ({_list(sorted(known))})"
    else:
        order = "in the order given"
    ranks: list[_Rank] = []
    for name, doc in docs:
        ranks.extend(_processes(name, doc))
    samples: dict[tuple[int, str], list[float]] = defaultdict(list)
    counts: dict[str, int] = defaultdict(int)
    kinds: set[str] = set()
    skipped = empty = 0
    for r, rank in enumerate(ranks):
        found, kind, overlap, none = _rank_spans(rank, r, measure)
        skipped += overlap
        empty += none
        if kind:
            kinds.add(kind)
        for stage, pass_, seconds in found:
            samples[(stage, pass_)].append(seconds)
            counts[pass_] += 1
    source = ", ".join(name for name, _ in docs)
    if not samples:
        events = sum(len(r.events) for r in ranks)
        raise InputError(f"no pipelining spans among its {events} complete events: looked for {LOOKED_FOR}",
                         source=source)
    stages = sorted({s for s, _ in samples})
    missing = [s for s in range(stages[-1] + 1) if s not in stages]
    if missing:
        raise InputError(f"spans for stages {_list(stages)} but none for stage{'s' if len(missing) > 1 else ''} "
                         f"{_list(missing)}: give every rank's trace", source=source)
    rows: list[dict[str, Value]] = []
    for s in stages:
        row: dict[str, Value] = {p: statistics.median(samples[(s, p)]) for p in TIMES if samples.get((s, p))}
        rows.append(row)
    notes = [f"read {len(ranks)} rank{'s' if len(ranks) > 1 else ''} ({', '.join(r.label for r in ranks)}), {order}",
             f"matched {sum(counts.values())} spans ({', '.join(f'{p} {counts[p]}' for p in TIMES if counts[p])}) "
             f"from {'; '.join(sorted(kinds))}",
             "each time is the median over the stage's microbatches (and steps) of "
             + ("the span from its first to its last non-communication operator" if measure == "busy"
                else "the whole span")]
    if empty:
        notes.append(f"{empty} spans ran no operator (e.g. the first stage's I, with no input gradient "
                     f"to compute): 0 s")
    if skipped:
        notes.append(f"{skipped} OVERLAP_F_B spans skipped (their passes are not timed apart)")
    notes.append("a trace holds no link times: comm = 0")

    def where(s: int, name: str) -> str:
        return f"stage {s}, {name}"

    return _build(rows, None, None, source, where, notes)


def _read_trace(path: str | os.PathLike) -> Any:
    name = source_name(path)
    text = as_text(_read_gzip(path, name), name) if str(path).endswith(".gz") else read_text(path, "trace")
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise InputError(f"not a Chrome trace (invalid JSON: {e.msg})", source=name,
                         where=f"line {e.lineno}, column {e.colno}") from None
    except (ValueError, RecursionError) as e:
        raise InputError(f"not a Chrome trace (invalid JSON: {e})", source=name) from None
    events = doc if isinstance(doc, list) else doc.get("traceEvents") if isinstance(doc, dict) else None
    if not isinstance(events, list):
        raise InputError('not a Chrome trace: expected an object with "traceEvents" (a list of events)',
                         source=name, where="traceEvents")
    return doc


def _read_gzip(path: str | os.PathLike, name: str) -> bytes:
    cap = limits().bytes
    try:
        with gzip.open(Path(path), "rb") as fh:
            data = fh.read(cap + 1)
    except FileNotFoundError:
        raise InputError("no such file", source=name) from None
    except IsADirectoryError:
        raise InputError("is a directory, not a trace", source=name) from None
    except (OSError, EOFError) as e:
        raise InputError(f"cannot read as gzip: {e}", source=name) from None
    if len(data) > cap:
        raise InputError(f"larger than {cap:,} bytes once decompressed, the cap on what is read (set "
                         f"{Limits.variable('bytes')} to raise it)", source=name)
    return data


def _rank_of(doc: Any) -> int | None:
    info = doc.get("distributedInfo") if isinstance(doc, dict) else None
    rank = info.get("rank") if isinstance(info, dict) else None
    return rank if type(rank) is int else None


_HOST = ("cpu_op", "user_annotation", "python_function")


def _processes(name: str, doc: Any) -> list[_Rank]:
    """The complete events of ``doc``, one rank per process with host events (a merged file
    holds several; then a GPU's events, which cannot be told apart by process, are left out)."""
    raw = doc if isinstance(doc, list) else doc["traceEvents"]
    events = []
    for e in raw:
        if not isinstance(e, dict) or e.get("ph") != "X":
            continue
        ts, dur, ev_name = e.get("ts"), e.get("dur"), e.get("name")
        if not isinstance(ev_name, str) or not all(
                isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in (ts, dur)):
            continue
        if dur >= 0:  # type: ignore[operator]
            events.append(_Event(ev_name, str(e.get("cat", "")), e.get("pid"), e.get("tid"), float(ts), float(dur)))  # type: ignore[arg-type]
    hosts = sorted({e.pid for e in events if e.cat in _HOST}, key=lambda p: (str(type(p)), p))
    if len(hosts) <= 1:
        return [_Rank(name, events)]
    return [_Rank(f"{name} pid {pid}", [e for e in events if e.pid == pid and e.cat in _HOST]) for pid in hosts]


def _rank_spans(rank: _Rank, position: int, measure: str) -> tuple[list[tuple[int, str, float]], str, int, int]:
    """((stage, pass, seconds) of each matched span, which kind was read, OVERLAP_F_B spans
    skipped, spans without operators) for one rank, whose stage is ``position`` when the
    names carry none.  A span without operators on a host that has them ran nothing (the
    first stage's I: no input gradient to compute): 0 s, its length being a wait."""
    device = [e for e in rank.events if e.cat == "gpu_user_annotation"]
    host = [e for e in rank.events if e.cat != "gpu_user_annotation"]
    overlap = sum(1 for e in host if _PP_OVERLAP.match(e.name))
    found: list[tuple[int, str, _Event]] = []
    for events, where in ((device, " (device spans)"), (host, "")):
        found = [(int(m.group(1)), m.group(2), e) for e in events if (m := _PP.match(e.name))]
        if found:
            kind = "PP:<stage><pass><microbatch> labels" + where
            break
        found = [(position, "F" if m.group(1) == "Forward" else "B", e)
                 for e in events if (m := _GPIPE.match(e.name))]
        if found:
            kind = "'Forward <microbatch>' / 'Backward <microbatch>' labels" + where
            break
    else:
        py = [(e, m.group(1)) for e in host if e.cat == "python_function" and (m := _PYTHON.match(e.name))]
        split = any(f == "backward_weight_one_chunk" for _, f in py)
        passes = {"forward_one_chunk": "F", "backward_one_chunk": "I" if split else "B",
                  "backward_weight_one_chunk": "W"}
        found = [(position, passes[f], e) for e, f in py]
        kind = "the *_one_chunk functions of pipelining/stage.py (with_stack)" if found else ""
        where = ""
    ops = _operators(host) if measure == "busy" and not where else {}
    if not ops:  # a device's span is its kernels'; a host without operators: spans whole
        return [(s, p, e.dur / 1e6) for s, p, e in found], kind, overlap, 0
    out, empty = [], 0
    for stage, pass_, span in found:
        busy = _busy(span, ops)
        empty += busy is None
        out.append((stage, pass_, 0.0 if busy is None else busy / 1e6))
    return out, kind, overlap, empty


def _operators(host: list[_Event]) -> dict[tuple[Any, Any], tuple[list[float], list[_Event]]]:
    """The non-communication operators of each thread, sorted by start."""
    by_thread: dict[tuple[Any, Any], list[_Event]] = defaultdict(list)
    for e in host:
        if e.cat == "cpu_op" and not e.name.startswith(_COMM_PREFIXES):
            by_thread[(e.pid, e.tid)].append(e)
    out = {}
    for key, ops in by_thread.items():
        ops.sort(key=lambda e: e.ts)
        out[key] = ([e.ts for e in ops], ops)
    return out


def _busy(span: _Event, ops) -> float | None:
    """Microseconds from the first to the last operator inside ``span`` on its thread, or
    None when it has none."""
    found = ops.get((span.pid, span.tid))
    if found is None:
        return None
    starts, events = found
    lo, hi = bisect.bisect_left(starts, span.ts), bisect.bisect_right(starts, span.end)
    inside = [e for e in events[lo:hi] if e.end <= span.end + 1e-3]
    if not inside:
        return None
    return max(e.end for e in inside) - inside[0].ts
