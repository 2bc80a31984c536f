"""The data model: actions, placements, costs, memory and schedules (docs/spec.md sections 1, 2, 4-6).

Everything here is immutable and free of heavy dependencies.  What an action is (its kinds,
:class:`Action`, its text) is :mod:`schedverify.grammar`'s, re-exported here.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from fractions import Fraction
from itertools import chain
from numbers import Integral
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Union, overload

from .errors import UsageError
from .grammar import (  # noqa: F401 - the grammar's names, re-exported with the rest of the model
    ALL_KINDS, B, BATCH, BOOKKEEPING_KINDS, COMM_KINDS, COMPOSITE_KINDS, COMPUTE_KINDS, COSTED_KINDS, F, I, OVERLAP_F_B,
    RECV_B, RECV_F, REDUCE_GRAD, RESHARD, SEND_B, SEND_F, SEND_OF, SEND_WAIT_KINDS, UNSHARD, W,
    WAIT_OF, WAIT_REDUCE_GRAD, WAIT_SEND_B, WAIT_SEND_F, Action, KIND_CODE, PlainRows, Rows,
    batch, malformation, overlap, parse_action,
)
from .lazy import LazyField, given
from .units import Units

_kind_of = attrgetter("kind")

# --------------------------------------------------------------------------- placement

PlacementSpec = Union[str, Sequence[int]]  # noqa: UP007 - an alias evaluated at import, on 3.10

#: A placement's map (stage -> device, microbatch -> route) longer than this is kept as its
#: rule and the entries that differ from it (:class:`RuleMap`), not as a tuple of every entry:
#: a file of 20 bytes can name stage 9,999,999, and what it costs to read must not grow with
#: that number (docs/reference/promises.md).  Shorter ones are tuples, which index fastest.
DENSE_MAX = 1 << 16

_RULES = ("loop", "v")


def _rule_value(rule: str, modulus: int, i: int) -> int:
    """Entry ``i`` of a rule: ``loop``, ``i % modulus``; ``v``, ZB-V's shape (see
    :func:`stage_devices`)."""
    if rule == "loop":
        return i % modulus
    chunk, r = divmod(i, modulus)
    return r if chunk % 2 == 0 else modulus - 1 - r


class RuleMap(Sequence[int]):
    """``length`` ints given by a rule over ``modulus`` (``"loop"``: ``i % modulus``; ``"v"``:
    ZB-V's shape over ``modulus`` devices; ``"loop"`` over 1 is all zeros) except at the
    indices of ``exceptions``: a placement's map of any size in memory proportional to the
    entries that differ from the rule.  Immutable and equal to the tuple of its entries (and
    hashed as it), so a Placement holding one behaves as one holding that tuple.
    :func:`rule_map` makes one, or the tuple when it is short."""

    __slots__ = ("rule", "modulus", "length", "exceptions", "_hash")

    def __init__(self, rule: str, modulus: int, length: int, exceptions: Mapping[int, int] | None = None):
        if rule not in _RULES or type(modulus) is not int or modulus < 1 or type(length) is not int or length < 0:
            raise UsageError(f"RuleMap: expected a rule in {_RULES}, a modulus >= 1 and a length >= 0, "
                             f"got {rule!r}, {modulus!r}, {length!r}")
        if rule == "v" and (modulus == 1 or length <= modulus):
            rule = "loop"  # the same map: one canonical rule, so equal maps compare by their exceptions
        kept = {}
        for i, v in sorted((exceptions or {}).items()):
            if type(i) is not int or not 0 <= i < length or type(v) is not int:
                raise UsageError(f"RuleMap: an exception must map an index in 0..{length - 1} to an int, "
                                 f"got {i!r}: {v!r}")
            if v != _rule_value(rule, modulus, i):
                kept[i] = v
        self.rule, self.modulus, self.length, self.exceptions = rule, modulus, length, kept
        self._hash: int | None = None

    def __len__(self) -> int:
        return self.length

    @overload
    def __getitem__(self, i: int) -> int: ...

    @overload
    def __getitem__(self, i: slice) -> tuple[int, ...]: ...

    def __getitem__(self, i):
        if isinstance(i, slice):
            return tuple(self[k] for k in range(*i.indices(self.length)))
        if i < 0:
            i += self.length
        if not 0 <= i < self.length:
            raise IndexError(f"index {i} out of range for {self.length} entries")
        v = self.exceptions.get(i)
        return _rule_value(self.rule, self.modulus, i) if v is None else v

    def __iter__(self) -> Iterator[int]:
        get, rule, modulus = self.exceptions.get, self.rule, self.modulus
        for i in range(self.length):
            v = get(i)
            yield _rule_value(rule, modulus, i) if v is None else v

    def __eq__(self, other: object) -> bool:
        if isinstance(other, RuleMap):
            if self.length != other.length:
                return False
            if (self.rule, self.modulus) == (other.rule, other.modulus):
                return self.exceptions == other.exceptions
        elif not isinstance(other, tuple) or len(other) != self.length:
            return NotImplemented if not isinstance(other, tuple) else False
        # entry by entry, stopping at the first difference (two different rules differ within
        # two periods of the first index where no exception makes them agree)
        return all(a == b for a, b in zip(self, other))

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(tuple(self))
        return self._hash

    def __repr__(self) -> str:
        return f"RuleMap({self.rule!r}, {self.modulus}, {self.length}, {self.exceptions!r})"

    def __reduce__(self):
        return RuleMap, (self.rule, self.modulus, self.length, self.exceptions)


def rule_map(rule: str, modulus: int, length: int, exceptions: Mapping[int, int] | None = None) -> Sequence[int]:
    """The map ``rule`` over ``modulus`` with ``exceptions``: a tuple of its entries when it
    has at most :data:`DENSE_MAX`, else a :class:`RuleMap`."""
    if length <= DENSE_MAX:
        out = [_rule_value(rule, modulus, i) for i in range(length)]
        for i, v in (exceptions or {}).items():
            out[i] = v
        return tuple(out)
    return RuleMap(rule, modulus, length, exceptions)


def stage_devices(spec: PlacementSpec, devices: int, stages: int) -> Sequence[int]:
    """Resolve a placement spec (``"loop"``, ``"v"`` or an explicit list) to stage -> device:
    a tuple, or for a rule over more than :data:`DENSE_MAX` stages a :class:`RuleMap`.

    ``"v"`` generalises ZB-V's shape to any number of chunks: chunk ``c`` of device ``d``
    holds stage ``c*D + d`` when ``c`` is even and ``c*D + D-1-d`` when it is odd, so the
    forward pass walks down the devices and back up again.
    """
    if isinstance(spec, str):
        if spec in _RULES:
            return rule_map(spec, devices, stages)
        raise UsageError(f"unknown placement {spec!r}; expected 'loop', 'v' or a list of devices")
    if isinstance(spec, RuleMap):
        return spec
    if not isinstance(spec, (list, tuple)) or not all(type(d) is int for d in spec):
        raise UsageError(f"placement: expected 'loop', 'v' or a list of device numbers, got {spec!r}")
    return tuple(spec)


@dataclass(frozen=True)
class Placement:
    """Which device runs each stage, for each route (docs/spec.md section 1).

    Unidirectional schedules have one route.  Bidirectional ones (DualPipe, Chimera) have
    two, and ``microbatch_route[i]`` says which route microbatch ``i`` follows.  ``specs``
    keeps what the user wrote (``"loop"``, ``"v"`` or lists) so files round-trip unchanged.
    A route (and the microbatch route) is a tuple, or for huge sizes a :class:`RuleMap`.
    """

    routes: tuple[Sequence[int], ...]
    microbatch_route: Sequence[int] | None = None
    specs: tuple[PlacementSpec, ...] = ()

    @classmethod
    def of(
        cls, spec: PlacementSpec, devices: int, stages: int
    ) -> Placement:
        return cls((stage_devices(spec, devices, stages),), None, (_freeze_spec(spec),))

    @classmethod
    def bidirectional(
        cls,
        specs: Sequence[PlacementSpec],
        microbatch_route: Sequence[int],
        devices: int,
        stages: int,
    ) -> Placement:
        return cls(
            tuple(stage_devices(s, devices, stages) for s in specs),
            microbatch_route if isinstance(microbatch_route, RuleMap) else tuple(microbatch_route),
            tuple(_freeze_spec(s) for s in specs),
        )

    @property
    def is_bidirectional(self) -> bool:
        return self.microbatch_route is not None

    def device(self, stage: int, microbatch: int | None = None) -> int:
        """The device of ``stage`` on ``microbatch``'s route (route 0 when not given)."""
        route = 0
        if self.microbatch_route is not None and microbatch is not None:
            route = self.microbatch_route[microbatch]
        return self.routes[route][stage]

    def devices_of_stage(self, stage: int) -> frozenset[int]:
        """Every device that holds a copy of ``stage`` (two for bidirectional schedules)."""
        return frozenset(r[stage] for r in self.routes)

    def stages_held(self, devices: int) -> list[int]:
        """Per device, how many stages it holds a copy of (on any route): in time linear in
        ``devices`` and the routes' exceptions when the routes are :class:`RuleMap`s, whose
        rules repeat every ``2 * modulus`` stages."""
        routes = self.routes
        out = [0] * devices
        if not all(isinstance(r, RuleMap) for r in routes):
            for held in zip(*routes):
                for d in set(held):
                    out[d] += 1
            return out
        maps: list[RuleMap] = list(routes)  # type: ignore[arg-type]  # all RuleMaps, just tested
        S = maps[0].length
        period = 2 * math.lcm(*(m.modulus for m in maps))
        odd = sorted(set().union(*(m.exceptions for m in maps)))  # where a map leaves its rule

        def rule_holders(i: int) -> set[int]:
            return {_rule_value(m.rule, m.modulus, i) for m in maps}

        whole, rest = divmod(S, period)
        for i in range(min(S, period)):
            times = whole + (i < rest)
            for d in rule_holders(i):
                out[d] += times
        for i in odd:  # those stages counted by the rules: count them as they are
            for d in rule_holders(i):
                out[d] -= 1
            for d in {m[i] for m in maps}:
                out[d] += 1
        return out


def _freeze_spec(spec: PlacementSpec) -> PlacementSpec:
    return spec if isinstance(spec, (str, RuleMap)) else tuple(spec)


# --------------------------------------------------------------------------- costs, memory

PerStage = Union[float, tuple[float, ...]]  # noqa: UP007 - an alias evaluated at import, on 3.10


def per_stage(value: PerStage, stage: int) -> float:
    return value[stage] if isinstance(value, tuple) else value


#: The largest magnitude a cost or a memory amount may have: what a float can hold, so that
#: every engine (exact integers in Python and Z3, doubles in the kernel, which declines
#: beyond 2**53) can represent the value it was given.
MAX_NUMBER = 1e308


def number_problem(v: object, minimum: float = 0, maximum: float | None = None) -> str | None:
    """What makes ``v`` unusable as a cost, a memory amount or a limit, or None: the one rule
    for the API and for files (their readers word the value in their own terms)."""
    if isinstance(v, bool) or not isinstance(v, (int, float, Fraction)):
        return "expected a finite number"
    if not -MAX_NUMBER <= v <= MAX_NUMBER:  # also NaN; an int is compared exactly, never converted
        return "expected a finite number"
    if v < minimum:
        return f"must be at least {minimum:g}"
    if maximum is not None and v > maximum:
        return f"must be at most {maximum:g}"
    return None


def _number(what: str, v, minimum: float = 0, maximum: float | None = None):
    """``v`` as a plain int or float (numpy's scalars included), or a :class:`UsageError`."""
    if isinstance(v, Integral) and not isinstance(v, (bool, int)):
        v = int(v)
    elif isinstance(v, float) and type(v) is not float:
        v = float(v)
    problem = number_problem(v, minimum, maximum)
    if problem is not None:
        shown = f"{v!r}" if len(repr(v)) <= 60 else f"an integer of {len(str(v))} digits" \
            if isinstance(v, int) else f"{repr(v)[:57]}..."
        raise UsageError(f"{what}: {problem}, got {shown} ({type(v).__name__})")
    return v


def _amount(what: str, v, minimum: float = 0, maximum: float | None = None) -> PerStage:
    """One number, or one per stage (a list or tuple, made a tuple)."""
    if isinstance(v, (list, tuple)):
        if not v:
            raise UsageError(f"{what}: a per-stage list needs one value per stage, got none")
        return tuple(_number(f"{what}[{k}]", x, minimum, maximum) for k, x in enumerate(v))
    return _number(what, v, minimum, maximum)


def _validate(obj, what: str, rules: dict) -> None:
    """Check and normalise a frozen dataclass's number fields once, as it is built: ``rules``
    maps a field to (per stage allowed, minimum, maximum, None allowed)."""
    for f in fields(obj):
        if f.name not in rules:
            continue
        staged, minimum, maximum, optional = rules[f.name]
        v = getattr(obj, f.name)
        if v is None and optional:
            continue
        name = f"{what} {f.name}"
        v = _amount(name, v, minimum, maximum) if staged else _number(name, v, minimum, maximum)
        object.__setattr__(obj, f.name, v)


@dataclass(frozen=True)
class Costs:
    """Durations per action kind (optionally per stage) and the cross-device latency.

    ``OVERLAP_F_B`` None means "the sum of the two sub-actions" (no overlap gain).
    Communication actions take no compute time unless ``SEND_F`` ... say otherwise; ``comm``
    is added on every data dependency that crosses devices.
    """

    F: PerStage = 1
    B: PerStage = 2
    I: PerStage = 1  # noqa: E741
    W: PerStage = 1
    OVERLAP_F_B: PerStage | None = None
    SEND_F: PerStage = 0
    RECV_F: PerStage = 0
    SEND_B: PerStage = 0
    RECV_B: PerStage = 0
    comm: float = 0

    def __post_init__(self):
        _validate(self, "costs", {**{k: (True, 0, None, k == OVERLAP_F_B) for k in COSTED_KINDS},
                                  "comm": (False, 0, None, False)})

    def of(self, action: Action) -> float:
        """The duration of ``action`` under these costs."""
        kind = action.kind
        if kind == OVERLAP_F_B:
            if self.OVERLAP_F_B is None or action.sub is None:
                return sum(self.of(a) for a in action.leaves())
            # a malformed action's None stage raises TypeError on a per-stage tuple, as callers expect
            return per_stage(self.OVERLAP_F_B, action.sub[0].stage)  # type: ignore[arg-type]
        if kind not in COSTED_KINDS:
            return 0  # bookkeeping, or a malformed action (the checker reports it)
        return per_stage(getattr(self, kind), action.stage)  # type: ignore[arg-type]  # as above

    def with_values(self, **values: Any) -> Costs:  # each field's own type (checked on building)
        return replace(self, **values)


@dataclass(frozen=True)
class MemoryModel:
    """Activation memory (docs/spec.md section 5).

    ``F`` allocates ``activation`` (per stage) at its start; ``B`` frees it at its end; ``I``
    frees ``(1-w)`` of it and ``W`` the remaining ``w``.  ``static`` is added, per stage, on
    every device that holds the stage.  ``limit`` None means "no limit".  ``message`` (per
    stage, default 0): what a SEND of the stage holds while it is pending, under PyTorch's
    runtime (docs/spec.md 9.2): from the SEND until the WAIT_SEND that retires it (2.15), or
    to the end of the step (2.13, 2.14), on top of the activation.
    """

    activation: PerStage = 1
    w: float = 0.5
    static: PerStage = 0
    limit: float | None = None
    message: PerStage = 0

    def __post_init__(self):
        _validate(self, "memory", {"activation": (True, 0, None, False), "w": (False, 0, 1, False),
                                   "static": (True, 0, None, False), "limit": (False, 0, None, True),
                                   "message": (True, 0, None, False)})


#: docs/spec.md 3.5 (eager, rendezvous: abstract) and 8 (torch, torch-nccl: PyTorch's runtime
#: over gloo and over NCCL).
COMM_SEMANTICS = ("eager", "rendezvous", "torch", "torch-nccl")


# --------------------------------------------------------------------------- schedule


@dataclass(frozen=True)
class Schedule:
    """A pipeline schedule: one ordered list of actions per device (None is an idle slot).

    ``costs``, ``memory``, ``comm_semantics`` and ``units`` are what the file said (None when
    absent); the checker and timeline fill in defaults and command-line overrides.

    ``order`` is always the rows of Actions.  A reader may give it as the columns the
    compiled kernel parsed (:class:`~schedverify.grammar.PlainRows`): the rows are then made
    on the first read of ``order`` (:mod:`schedverify.lazy`), and the engines read
    :attr:`columns` instead, so that checking a file need not build its Actions.
    """

    devices: int
    stages: int
    microbatches: int
    if TYPE_CHECKING:  # to mypy a plain field; at run time the lazy descriptor (no default)
        order: Rows
    else:
        order: LazyField[Rows] = LazyField()
    placement: Placement
    name: str = ""
    costs: Costs | None = None
    memory: MemoryModel | None = None
    comm_semantics: str | None = None
    metadata: dict = field(default_factory=dict, compare=False, hash=False)
    #: what the numbers of ``costs`` and ``memory`` are in (seconds, bytes, ...); None: the
    #: abstract units of files without a ``"units"`` field (F=1, one activation = 1)
    units: Units | None = None

    @classmethod
    def build(
        cls,
        order: Sequence[Sequence[Action | str | None]],
        *,
        stages: int | None = None,
        microbatches: int | None = None,
        placement: PlacementSpec | Placement = "loop",
        name: str = "",
        costs: Costs | None = None,
        memory: MemoryModel | None = None,
        comm_semantics: str | None = None,
    ) -> Schedule:
        """Convenience constructor: parses action strings and infers missing sizes."""
        if isinstance(order, (str, bytes)) or not isinstance(order, Sequence) or not all(
                isinstance(row, Sequence) and not isinstance(row, (str, bytes)) for row in order):
            raise UsageError("Schedule.build: order must be a list with one list of actions per device")
        for key, value in (("stages", stages), ("microbatches", microbatches)):
            if value is not None and (type(value) is not int or value < 1):
                raise UsageError(f"Schedule.build: {key} must be a whole number >= 1, got {value!r}")
        rows = tuple(
            tuple(a if a is None or isinstance(a, Action) else parse_action(a) for a in row)
            for row in order
        )
        devices = len(rows)
        stages, microbatches = infer_sizes(rows, devices, stages, microbatches)
        if not isinstance(placement, Placement):
            placement = Placement.of(placement, devices, stages)
        return cls(
            devices, stages, microbatches, rows, placement, name, costs, memory, comm_semantics
        )

    @property
    def columns(self) -> PlainRows | None:
        """The order as the reader's columns, when it was given so (plain actions only)."""
        rows = given(self, "order")
        return rows if isinstance(rows, PlainRows) else None

    @property
    def num_actions(self) -> int:
        if (cols := self.columns) is not None:
            return cols.n
        return sum(len(row) - row.count(None) for row in self.order)

    @property
    def has_explicit_comm(self) -> bool:
        if (cols := self.columns) is not None:
            return cols.has_comm
        kinds = set(map(_kind_of, filter(None, chain.from_iterable(self.order))))
        return not kinds.isdisjoint(COMM_KINDS | {BATCH})

    def with_(self, **changes) -> Schedule:
        return replace(self, **changes)

    # Jupyter's view, ``_repr_html_`` (the checked timeline with its memory panel), is given to
    # this class by schedverify/render/notebook.py, which draws it: the model draws nothing.


def leaf_rows(order):
    """Each row's actions as leaves (an overlap's two sub-actions), idle slots dropped."""
    for row in order:
        acts = list(filter(None, row))
        if any(map(_SUB, acts)):
            acts = [x for a in acts for x in a.leaves()]
        yield acts


def infer_sizes(order, devices: int, stages: int | None = None,
                microbatches: int | None = None) -> tuple[int, int]:
    """(stages, microbatches): the ones given, else inferred from the largest stage and
    microbatch index any action names, with at least one stage per device (every rank holds
    a stage, as in PyTorch) and one microbatch.  The one rule for both file formats and
    :meth:`Schedule.build`; the readers then refuse sizes too large in their own terms."""
    if stages is not None and microbatches is not None:
        return stages, microbatches
    top_stage, top_mb = devices - 1, 0
    if isinstance(order, PlainRows):
        top_stage, top_mb = max(top_stage, order.top_stage), max(top_mb, order.top_mb)
    for acts in () if isinstance(order, PlainRows) else leaf_rows(order):
        top_stage = max(top_stage, _largest(map(_STAGE, acts)))
        top_mb = max(top_mb, _largest(map(_MB, acts)))
    return (1 + top_stage if stages is None else stages,
            1 + top_mb if microbatches is None else microbatches)


def _largest(values) -> int:
    """The largest of some indices, None (bookkeeping, a malformed action) left out; 0 if none."""
    values = list(values)
    try:
        top = max(values, default=0)
        if type(top) is int:
            return top
    except TypeError:
        pass
    return max((v for v in values if type(v) is int), default=0)


_SUB = attrgetter("sub")
_STAGE = attrgetter("stage")
_MB = attrgetter("microbatch")


def as_schedule(obj, where: str) -> Schedule:
    """``obj`` when it is a :class:`Schedule`; else a :class:`UsageError` naming ``where``."""
    if not isinstance(obj, Schedule):
        raise UsageError(f"{where}: expected a Schedule, got {type(obj).__name__}")
    return obj


def resolve_costs(schedule: Schedule, override=None) -> Costs:
    """The costs in force: the file's (or the defaults), with ``override`` on top.

    ``override`` is a :class:`Costs` (used as is) or a mapping of the fields to change, as
    ``--costs F=1,B=3`` gives.
    """
    base = schedule.costs if schedule.costs is not None else Costs()
    if override is None:
        costs = base
    elif isinstance(override, Costs):
        costs = override
    else:
        costs = replace(base, **_fields("costs", override, COSTED_KINDS + ("comm",)))
    _check_per_stage("costs", costs, COSTED_KINDS, schedule.stages)
    return costs


def _fields(what: str, values, known: tuple[str, ...]) -> dict:
    """An override mapping with per-stage lists made tuples; unknown keys are a UsageError."""
    if not hasattr(values, "items"):
        raise UsageError(f"{what}: expected a mapping of field to value (or the object itself), "
                         f"got {type(values).__name__}")
    out = {}
    for key, value in dict(values).items():
        if key not in known:
            raise UsageError(f"{what}: unknown field {key!r}; known: {', '.join(known)}")
        out[key] = tuple(value) if isinstance(value, list) else value
    return out


def _check_per_stage(what: str, obj, keys, stages: int) -> None:
    for key in keys:
        value = getattr(obj, key)
        if isinstance(value, tuple) and len(value) != stages:
            raise UsageError(f"{what} {key}: {len(value)} per-stage values given, but the schedule "
                             f"has {stages} stages")


def resolve_memory(schedule: Schedule, override=None, limit: float | None = None) -> MemoryModel:
    """The memory model in force: the file's (or the defaults), ``override``, then ``limit``."""
    base = schedule.memory if schedule.memory is not None else MemoryModel()
    if isinstance(override, MemoryModel):
        base = override
    elif override:
        base = replace(base, **_fields("memory", override, ("activation", "w", "static", "limit", "message")))
    if limit is not None:
        base = replace(base, limit=limit)
    _check_per_stage("memory", base, ("activation", "static", "message"), schedule.stages)
    return base
