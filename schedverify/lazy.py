"""A dataclass field that may be given as a recipe and made on its first read.

A million-action file need not become a million :class:`~schedverify.grammar.Action` tuples
to be checked: the reader hands :class:`~schedverify.model.Schedule` the columns the
compiled kernel parsed (:class:`~schedverify.grammar.PlainRows`, a :class:`Later`), the
engines read those columns, and ``schedule.order`` builds the rows the first time anything
asks for them.  So too the compiled sweep's start and end times
(:class:`~schedverify.graph.Times`: a million Python numbers each) and the names of the
critical path (:class:`~schedverify.cost.timeline.PathNames`).  Whoever reads the field sees
the same value either way.

The field's descriptor (:class:`LazyField`) keeps what it was given under ``_name`` and what
it made under ``_name_made``, so the recipe stays at hand after the value is made
(:func:`given`).  Equality, hashing, ``repr`` and ``dataclasses.replace`` read the field
like any other, and so make its value.
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar

T = TypeVar("T")


class Later(Generic[T]):
    """A recipe for a field's value: :meth:`make` is called once, on the field's first read."""

    def make(self) -> T:
        raise NotImplementedError


class LazyField(Generic[T]):
    """The descriptor of a dataclass field given either its value or a :class:`Later`.

    ``LazyField()`` is a field without a default (reading it on the class raises
    AttributeError, which is how dataclasses tells a descriptor field without one);
    ``LazyField(default)`` has that default (an immutable value: it is shared)."""

    def __init__(self, *default: T) -> None:
        if len(default) > 1:
            raise TypeError("LazyField takes at most one default")
        self.default = default

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name
        self.key = "_" + name

    def __get__(self, obj: Any, owner: type | None = None) -> T:
        if obj is None:
            if not self.default:
                raise AttributeError(self.name)
            return self.default[0]
        given_value = obj.__dict__[self.key]
        if not isinstance(given_value, Later):
            return given_value
        made = obj.__dict__.get(self.key + "_made")
        if made is None:
            made = obj.__dict__[self.key + "_made"] = given_value.make()
        return made

    def __set__(self, obj: Any, value: T | Later[T]) -> None:
        obj.__dict__[self.key] = value


def given(obj: Any, name: str) -> Any:
    """What the field ``name`` of ``obj`` was given: its value, or the :class:`Later`."""
    return obj.__dict__["_" + name]
