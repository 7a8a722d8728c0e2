"""Tests for wpgate._record: frozen records that behave as frozen dataclasses do."""

from __future__ import annotations

import copy
import dataclasses
import pickle
from collections.abc import Callable
from typing import Any, ClassVar

import pytest

from wpgate import _record
from wpgate._record import field, fields, frozen, is_record, replace


def _shapes(decorate: Callable[[type], type], make_field: Callable[..., Any]) -> type:
    """The same class under ``decorate`` (``dataclass(frozen=True, order=True)`` or
    ``frozen(order=True)``) and its field maker."""

    class Point:
        """A point."""

        LIMIT: ClassVar[int] = 9

        x: int
        y: int = 0
        tags: tuple[str, ...] = make_field(default_factory=tuple)
        seen: list[str] = make_field(default_factory=list, compare=False)
        note: str = make_field(default="", compare=False, repr=False)

    return decorate(Point)


DATACLASS = _shapes(dataclasses.dataclass(frozen=True, order=True), dataclasses.field)
RECORD = _shapes(frozen(order=True), field)


@frozen
class Pickled:
    """A module-level record, which pickle finds by name."""

    name: str
    size: int = 1


def _behaviour(cls: Any) -> list[object]:
    """What a class's instances answer: repr, equality, hash, order, defaults, match."""
    a, b, c = cls(1), cls(1, 0, (), ["x"], "other"), cls(2, y=5, tags=("t",))
    points = [c, a, cls(0, 9)]
    return [
        repr(a),
        repr(c),
        a == b,
        a != c,
        a == (1, 0),
        hash(a) == hash(b),
        [repr(p) for p in sorted(points)],
        a < c,
        c >= a,
        a.seen is not cls(1).seen,  # a fresh default per instance
        cls.__match_args__,
        cls.y,
        cls.LIMIT,
    ]


def test_a_record_behaves_as_the_same_frozen_dataclass() -> None:
    assert _behaviour(RECORD) == _behaviour(DATACLASS)
    for cls in (RECORD, DATACLASS):
        point = cls(1)
        with pytest.raises(dataclasses.FrozenInstanceError, match="'x'"):
            point.x = 2
        with pytest.raises(dataclasses.FrozenInstanceError):
            del point.y
        with pytest.raises(TypeError):
            cls()
        with pytest.raises(TypeError):
            cls(1, 2, (), [], "", "extra")
        with pytest.raises(TypeError):
            cls(1, x=1)
        with pytest.raises(TypeError):
            cls(1, z=1)
        assert copy.copy(point) == point
        assert copy.deepcopy(cls(1, 2, ("a",))) == cls(1, 2, ("a",))


def test_a_record_pickles_and_replaces_by_its_fields() -> None:
    record = Pickled("a")
    assert pickle.loads(pickle.dumps(record)) == record
    assert [(item.name, item.default) for item in fields(Pickled)] == [
        ("name", _record._MISSING),
        ("size", 1),
    ]
    changed = replace(record, size=3)
    assert (changed, record) == (Pickled("a", 3), Pickled("a", 1))
    assert is_record(record)
    assert is_record(Pickled)
    assert not is_record(object())
    with pytest.raises(TypeError, match="is not a record"):
        fields(object())


def test_fields_carry_their_metadata_and_refuse_two_defaults() -> None:
    @frozen
    class Keyed:
        """A record whose field has metadata."""

        key: str = field(default="k", metadata={"kind": "str"})

    (item,) = fields(Keyed)
    assert (item.name, item.default, dict(item.metadata)) == ("key", "k", {"kind": "str"})
    with pytest.raises(TypeError):
        item.metadata["kind"] = "int"  # type: ignore[index]
    with pytest.raises(ValueError, match="not both"):
        field(default=1, default_factory=list)


def test_a_record_without_equality_compares_and_hashes_by_identity() -> None:
    @frozen(eq=False)
    class Loaded:
        """A record each load of which is its own."""

        ids: frozenset[str] = field(default_factory=frozenset)

    a = Loaded(frozenset({"R1"}))
    b = replace(a)
    assert Loaded.__eq__ is object.__eq__
    assert (a == b, {a: 1}.get(b), b.ids) == (False, None, frozenset({"R1"}))
