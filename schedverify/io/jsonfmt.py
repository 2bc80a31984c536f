"""The schedverify/1 JSON format (docs/spec.md section 6).

Reading validates every field by hand so that each message names the field, the value and
where it is (``order[2][7]``); the shipped ``schema.json`` says the same thing for other
tools, and a test keeps the two in step.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from ..errors import InputError
from ..limits import limits
from ..units import Units
from ..model import (
    COMM_SEMANTICS,
    COSTED_KINDS,
    Costs,
    MemoryModel,
    Placement,
    Schedule,
    as_schedule,
    infer_sizes,
    number_problem,
)
from ..grammar import PlainRows
from .actions import CellErrors, parse_row, parse_rows, scan_order
from .files import as_text

FORMAT = "schedverify/1"

FIELDS = (
    "format", "name", "devices", "stages", "microbatches", "placement", "routes",
    "microbatch_route", "order", "costs", "memory", "comm_semantics", "metadata", "units",
)
MEMORY_FIELDS = ("activation", "w", "static", "limit", "message")
#: ``metadata`` is written back as it was read; deeper nesting could not be printed.
MAX_METADATA_DEPTH = 64


def _describe(value: Any) -> str:
    try:
        text = json.dumps(value) if not isinstance(value, float) or math.isfinite(value) else str(value)
    except (RecursionError, ValueError):  # nested deeper than the stack allows
        text = "[[[..." if isinstance(value, list) else "{...}"
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{text} ({_type_name(value)})"


def _type_name(value: Any) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null",
            int: "integer", float: "number"}.get(type(value), type(value).__name__)


class _Reader:
    def __init__(self, source: str):
        self.source = source

    def fail(self, where: str, message: str) -> InputError:
        return InputError(message, source=self.source, where=where)

    def size(self, doc: dict, key: str, minimum: int = 1) -> int | None:
        if key not in doc:
            return None
        v = doc[key]
        if type(v) is not int:
            raise self.fail(key, f"expected a whole number, got {_describe(v)}")
        if v < minimum:
            raise self.fail(key, f"must be at least {minimum}, got {v}")
        limits().refuse("devices" if key == "devices" else "size", v, key, source=self.source, where=key)
        return v

    def number(self, where: str, v: Any, *, minimum: float = 0.0, maximum: float | None = None):
        problem = number_problem(v, minimum, maximum)
        if problem is not None:
            raise self.fail(where, f"{problem}, got {_describe(v) if problem[0] == 'e' else v}")
        return v

    def per_stage(self, where: str, v: Any, stages: int):
        if isinstance(v, list):
            if len(v) != stages:
                raise self.fail(where, f"a per-stage list needs {stages} values (one per stage), got {len(v)}")
            return tuple(self.number(f"{where}[{i}]", x) for i, x in enumerate(v))
        return self.number(where, v)

    def placement_spec(self, where: str, v: Any, devices: int, stages: int):
        if isinstance(v, str):
            if v not in ("loop", "v"):
                raise self.fail(where, f"expected 'loop', 'v' or a list of devices, got {v!r}")
            return v
        if not isinstance(v, list):
            raise self.fail(where, f"expected 'loop', 'v' or a list of devices, got {_describe(v)}")
        if len(v) != stages:
            raise self.fail(where, f"a placement list needs one device per stage ({stages}), got {len(v)}")
        for s, d in enumerate(v):
            if type(d) is not int or not 0 <= d < devices:
                raise self.fail(f"{where}[{s}]", f"stage {s}'s device must be in 0..{devices - 1}, got {_describe(d)}")
        return v

    def object(self, where: str, v: Any, allowed: tuple[str, ...]) -> dict:
        if not isinstance(v, dict):
            raise self.fail(where, f"expected an object, got {_describe(v)}")
        for key in v:
            if key not in allowed:
                raise self.fail(where, _unknown_field(key, allowed))
        return v


def _unknown_field(key: str, allowed: tuple[str, ...]) -> str:
    import difflib

    close = difflib.get_close_matches(key, allowed, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else f"; known fields: {', '.join(allowed)}"
    return f"unknown field {key!r}{hint}"


def loads(text: str | bytes, source: str = "<string>") -> Schedule:
    """Read a schedverify/1 document.  Raises :class:`InputError` naming what is wrong."""
    text = as_text(text, source)
    if not text or text.isspace():  # (text.strip() would copy a large file to say so)
        raise InputError("the file is empty", source=source)
    try:
        doc = _scan_document(text)
        if doc is None:
            doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise InputError(f"invalid JSON: {e.msg}", source=source,
                         where=f"line {e.lineno}, column {e.colno}") from None
    except ValueError as e:  # for example an integer of more than 4300 digits
        raise InputError(f"invalid JSON: {e}", source=source) from None
    except RecursionError:
        raise InputError("invalid JSON: nested too deeply", source=source) from None
    return from_document(doc, source)


_SPACE = re.compile(r"[ \t\n\r]*")  # JSON's whitespace, as json.decoder spells it
_DECODER = json.JSONDecoder()


def _skip_space(text: str, pos: int) -> int:
    match = _SPACE.match(text, pos)
    return pos if match is None else match.end()  # never None: the pattern matches ""


def _scan_document(text: str) -> dict | None:
    """``json.loads(text)`` of a top-level object, with its ``order`` read straight into
    columns (:func:`~schedverify.io.actions.scan_order`) when every cell is plain: json would
    make a str and a list per action, which costs as much as all the checking.  The object is
    walked here, member by member, each key and every other value read by json itself
    (``raw_decode``, the function ``json.loads`` calls), so the result is ``json.loads``'s
    with the order as :func:`parse_rows` would have made it.  None on anything this walk does
    not take (not an object, a syntax error): then ``json.loads`` reads the text and names
    what is wrong."""
    pos = _skip_space(text, 0)
    if not text.startswith("{", pos):
        return None
    doc: dict[str, Any] = {}
    pos = _skip_space(text, pos + 1)
    try:
        while text.startswith('"', pos):
            key, pos = _DECODER.raw_decode(text, pos)
            pos = _skip_space(text, pos)
            if not text.startswith(":", pos):
                return None
            pos = _skip_space(text, pos + 1)
            got = scan_order(text, pos) if key == "order" else None
            if got is None:
                doc[key], pos = _DECODER.raw_decode(text, pos)
            else:
                doc[key], pos = got
            pos = _skip_space(text, pos)
            if text.startswith("}", pos):
                return doc if _skip_space(text, pos + 1) == len(text) else None
            if not text.startswith(",", pos):
                return None
            pos = _skip_space(text, pos + 1)
    except (ValueError, RecursionError):  # JSONDecodeError is a ValueError
        return None
    return None  # "{}", a trailing comma, a key that is not a string: json says what it is


def from_document(doc: Any, source: str = "<document>") -> Schedule:
    r = _Reader(source)
    if not isinstance(doc, dict):
        raise InputError(f"expected a JSON object at the top level, got {_type_name(doc)}", source=source)
    r.object("top level", doc, FIELDS)
    fmt = doc.get("format")
    if fmt != FORMAT:
        raise r.fail("format", f"expected {FORMAT!r}, got {_describe(fmt) if 'format' in doc else 'nothing'}")
    name = doc.get("name", "")
    if not isinstance(name, str):
        raise r.fail("name", f"expected a string, got {_describe(name)}")

    order_doc = doc.get("order")
    if isinstance(order_doc, PlainRows):  # scanned from the text (_scan_document)
        rows, actions = len(order_doc.lengths), order_doc.n
    elif isinstance(order_doc, list):
        rows, actions = len(order_doc), sum(len(row) for row in order_doc if isinstance(row, list))
    else:
        raise r.fail("order", f"expected a list with one list of actions per device, got "
                     f"{_describe(order_doc) if 'order' in doc else 'nothing'}")
    devices = r.size(doc, "devices")
    if devices is None:
        devices = rows
        if devices == 0:
            raise r.fail("order", "has no devices")
        limits().refuse("devices", devices, "device lists", source=r.source, where="order")
    elif rows != devices:
        raise r.fail("order", f"has {rows} device lists but devices is {devices}")
    limits().refuse("actions", actions, "actions", source=r.source, where="order")
    order: Any = order_doc
    if isinstance(order_doc, list):
        order = parse_rows(order_doc)  # the columns, when every cell is plain
        if order is None:
            order = _read_order(r, order_doc)

    stages = r.size(doc, "stages")
    microbatches = r.size(doc, "microbatches")
    if stages is None or microbatches is None:
        stages, microbatches = infer_sizes(order, devices, stages, microbatches)
        if max(stages, microbatches) > limits().size:
            refuse_huge_index(order.make() if isinstance(order, PlainRows) else order, r.source,
                              lambda d, p: f"order[{d}][{p}]")
    placement = _read_placement(r, doc, devices, stages, microbatches)

    costs = None
    if "costs" in doc and doc["costs"] is not None:
        c = r.object("costs", doc["costs"], COSTED_KINDS + ("comm",))
        values = {k: (r.number("costs.comm", v) if k == "comm" else r.per_stage(f"costs.{k}", v, stages))
                  for k, v in c.items()}
        costs = Costs(**values)
    memory = None
    if "memory" in doc and doc["memory"] is not None:
        m = r.object("memory", doc["memory"], MEMORY_FIELDS)
        values = {}
        if "activation" in m:
            values["activation"] = r.per_stage("memory.activation", m["activation"], stages)
        if "static" in m:
            values["static"] = r.per_stage("memory.static", m["static"], stages)
        if "w" in m:
            values["w"] = r.number("memory.w", m["w"], maximum=1.0)
        if m.get("limit") is not None:
            values["limit"] = r.number("memory.limit", m["limit"])
        if "message" in m:
            values["message"] = r.per_stage("memory.message", m["message"], stages)
        memory = MemoryModel(**values)
    sem = doc.get("comm_semantics")
    if sem is not None and sem not in COMM_SEMANTICS:
        raise r.fail("comm_semantics", f"expected one of {', '.join(map(repr, COMM_SEMANTICS))}, got {_describe(sem)}")
    metadata = doc.get("metadata", {})
    if not isinstance(metadata, dict):
        raise r.fail("metadata", f"expected an object, got {_describe(metadata)}")
    if _depth(metadata) > MAX_METADATA_DEPTH:
        raise r.fail("metadata", f"nested more than {MAX_METADATA_DEPTH} deep; schedverify keeps "
                     f"it to write it back, and so little nesting is all any tool needs")
    units = Units.parse(doc["units"], source=r.source) if doc.get("units") is not None else None
    return Schedule(devices, stages, microbatches, order, placement, name, costs, memory, sem, metadata,
                    None if units is None or units.abstract else units)


def _depth(value: Any) -> int:
    """How deeply arrays and objects nest in ``value`` (iteratively: no recursion limit)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        v, depth = stack.pop()
        if isinstance(v, (list, dict)):
            deepest = max(deepest, depth)
            stack.extend((x, depth + 1) for x in (v.values() if isinstance(v, dict) else v))
    return deepest


def _read_order(r: _Reader, order_doc: list) -> tuple:
    rows = []
    errors = CellErrors(r.source, "actions", _describe)
    for d, row in enumerate(order_doc):
        if not isinstance(row, list):
            raise r.fail(f"order[{d}]", f"expected the list of device {d}'s actions, got {_describe(row)}")
        fast = parse_row(row)
        rows.append(tuple(fast if fast is not None else errors.parse(row, lambda p, d=d: f"order[{d}][{p}]")))
    errors.raise_any()
    return tuple(rows)


def refuse_huge_index(order, source: str, where) -> None:
    """Sizes inferred from the largest index must stay sane: raise naming the first action
    whose stage or microbatch index is absurdly large (``where(d, p)`` names its place)."""
    cap = limits()
    for d, row in enumerate(order):
        for p, a in enumerate(row):
            for x in (() if a is None else a.leaves()):
                for what, v in (("stage", x.stage), ("microbatch", x.microbatch)):
                    if v is not None and v >= cap.size:
                        many = "stages" if what == "stage" else "microbatches"
                        raise InputError(f"{what} index {v} in {a} is absurdly large: it makes "
                                         f"{v + 1:,} {many}, {cap.over('size')}", source=source,
                                         where=where(d, p))


def _read_placement(r: _Reader, doc: dict, devices: int, stages: int, microbatches: int) -> Placement:
    if "routes" in doc:
        if "placement" in doc:
            raise r.fail("placement", "give either placement or routes (with microbatch_route), not both")
        routes = doc["routes"]
        if not isinstance(routes, list) or not routes:
            raise r.fail("routes", f"expected a non-empty list of placements, got {_describe(routes)}")
        specs = [r.placement_spec(f"routes[{k}]", p, devices, stages) for k, p in enumerate(routes)]
        mr = doc.get("microbatch_route")
        if not isinstance(mr, list) or len(mr) != microbatches:
            raise r.fail("microbatch_route", f"expected a list with one route index per microbatch "
                         f"({microbatches}), got {_describe(mr) if 'microbatch_route' in doc else 'nothing'}")
        for i, k in enumerate(mr):
            if type(k) is not int or not 0 <= k < len(routes):
                raise r.fail(f"microbatch_route[{i}]",
                             f"expected a route index in 0..{len(routes) - 1}, got {_describe(k)}")
        return Placement.bidirectional(specs, mr, devices, stages)
    if "microbatch_route" in doc:
        raise r.fail("microbatch_route", "only meaningful together with routes")
    spec = r.placement_spec("placement", doc.get("placement", "loop"), devices, stages)
    return Placement.of(spec, devices, stages)


# --------------------------------------------------------------------------- writing


def _num(v):
    if isinstance(v, tuple):
        return [_num(x) for x in v]
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return v


def _spec_json(spec):
    return spec if isinstance(spec, str) else list(spec)


def to_document(schedule: Schedule) -> dict:
    """The schedverify/1 document of ``schedule`` (what :func:`dumps` writes)."""
    as_schedule(schedule, "dumps")
    doc: dict[str, Any] = {"format": FORMAT}
    if schedule.name:
        doc["name"] = schedule.name
    doc["devices"] = schedule.devices
    doc["stages"] = schedule.stages
    doc["microbatches"] = schedule.microbatches
    p = schedule.placement
    specs = p.specs or p.routes
    if p.microbatch_route is not None:  # bidirectional
        doc["routes"] = [_spec_json(s) for s in specs]
        doc["microbatch_route"] = list(p.microbatch_route)
    else:
        doc["placement"] = _spec_json(specs[0])
    doc["order"] = [[None if a is None else str(a) for a in row] for row in schedule.order]
    if schedule.costs is not None:
        defaults = Costs()
        doc["costs"] = {
            k: _num(getattr(schedule.costs, k))
            for k in COSTED_KINDS + ("comm",)
            if getattr(schedule.costs, k) is not None
            and (k in ("F", "B", "I", "W", "comm") or getattr(schedule.costs, k) != getattr(defaults, k))
        }
    if schedule.memory is not None:
        m = schedule.memory
        doc["memory"] = {"activation": _num(m.activation), "w": m.w, "static": _num(m.static), "limit": m.limit}
        if m.message:
            doc["memory"]["message"] = _num(m.message)
    if schedule.comm_semantics is not None:
        doc["comm_semantics"] = schedule.comm_semantics
    if schedule.units is not None and not schedule.units.abstract:
        doc["units"] = schedule.units.to_json()
    if schedule.metadata:
        doc["metadata"] = schedule.metadata
    return doc


def dumps(schedule: Schedule) -> str:
    """schedverify/1 JSON text: indented, one device's order per line, so diffs stay readable."""
    parts = []
    for key, value in to_document(schedule).items():
        if key == "order":
            rows = ",\n".join("    " + json.dumps(row) for row in value)
            text = f"[\n{rows}\n  ]"
        else:
            text = json.dumps(value, indent=2).replace("\n", "\n  ")
        parts.append(f"  {json.dumps(key)}: {text}")
    return "{\n" + ",\n".join(parts) + "\n}\n"
