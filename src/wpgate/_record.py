"""Frozen records as the commit linter's path makes them: :func:`frozen`, without dataclasses.

A frozen dataclass compiles its generated methods (``__init__``, ``__repr__``, ``__eq__``,
``__hash__``, ``__setattr__``...) from source when its class is made, about four million
instructions a class, at every start; importing :mod:`dataclasses` imports :mod:`inspect` (and
``ast``, ``dis``, ``tokenize``) besides. The commit-msg hook and a range lint make some twenty
record classes before they read a message. :func:`frozen` gives a class the same behaviour
from methods written once here: keyword or positional initialiser with defaults and
``default_factory``, field-wise ``repr``, equality and hash (fields with ``compare=False`` left
out), optional ordering, and assignment refused with :class:`dataclasses.FrozenInstanceError`
(imported only then). :func:`fields` and :func:`replace` answer as their dataclasses
namesakes do for such a record. Type checkers read :func:`frozen` as a frozen dataclass
(``typing.dataclass_transform``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, NoReturn, TypeVar, dataclass_transform

__all__ = ["Field", "field", "fields", "frozen", "is_record", "replace"]

_T = TypeVar("_T")


class _Missing:
    """No default given."""

    def __repr__(self) -> str:
        return "MISSING"


_MISSING: Any = _Missing()
_EMPTY: Mapping[str, Any] = MappingProxyType({})


class Field:
    """One field of a record: its name, default (or ``default_factory``), whether equality,
    hashing, ordering and ``repr`` read it, and its ``metadata``."""

    __slots__ = ("compare", "default", "default_factory", "metadata", "name", "repr")

    def __init__(
        self,
        default: Any,
        default_factory: Callable[[], Any] | Any,
        compare: bool,
        repr: bool,
        metadata: Mapping[str, Any] | None,
    ) -> None:
        self.name = ""
        self.default = default
        self.default_factory = default_factory
        self.compare = compare
        self.repr = repr
        self.metadata: Mapping[str, Any] = _EMPTY if not metadata else MappingProxyType(metadata)

    def __repr__(self) -> str:
        return f"Field(name={self.name!r}, default={self.default!r})"


def field(
    *,
    default: Any = _MISSING,
    default_factory: Callable[[], Any] | Any = _MISSING,
    compare: bool = True,
    repr: bool = True,
    metadata: Mapping[str, Any] | None = None,
) -> Any:
    """A record field with what :func:`dataclasses.field` takes of it."""
    if default is not _MISSING and default_factory is not _MISSING:
        raise ValueError("a field takes a default or a default_factory, not both")
    return Field(default, default_factory, compare, repr, metadata)


def _frozen(self: object, name: str, *_value: object) -> NoReturn:
    """Assignment and deletion of a record's attribute: refused, as a frozen dataclass does."""
    from dataclasses import FrozenInstanceError

    raise FrozenInstanceError(f"cannot assign to field {name!r}")


class _Shape:
    """A record class's fields, by name in order, and the names equality compares."""

    __slots__ = ("compared", "fields", "names")

    def __init__(self, found: dict[str, Field]) -> None:
        self.fields: Mapping[str, Field] = MappingProxyType(found)
        self.names = tuple(found)
        self.compared = tuple(name for name, item in found.items() if item.compare)


#: Each record class's shape, by class.
_SHAPES: dict[type, _Shape] = {}


def _init(self: object, *args: Any, **kwargs: Any) -> None:
    """The initialiser of a record without its own: arguments by position or name, in field
    order, each missing one its default."""
    cls = type(self)
    shape = _SHAPES[cls]
    if len(args) > len(shape.names):
        raise TypeError(
            f"{cls.__qualname__}() takes {len(shape.names)} positional arguments but "
            f"{len(args)} were given"
        )
    values = dict(zip(shape.names, args, strict=False))
    for name, value in kwargs.items():
        if name in values:
            raise TypeError(f"{cls.__qualname__}() got multiple values for argument {name!r}")
        if name not in shape.fields:
            raise TypeError(f"{cls.__qualname__}() got an unexpected keyword argument {name!r}")
        values[name] = value
    for item in shape.fields.values() if len(values) < len(shape.names) else ():
        if item.name in values:
            continue
        if item.default is not _MISSING:
            values[item.name] = item.default
        elif item.default_factory is not _MISSING:
            values[item.name] = item.default_factory()
        else:
            raise TypeError(f"{cls.__qualname__}() missing 1 required argument: {item.name!r}")
    self.__dict__.update(values)


def _key(self: object) -> tuple[Any, ...]:
    """The values equality, hashing and ordering compare, in field order."""
    get = self.__dict__.get
    return tuple([get(name) for name in _SHAPES[type(self)].compared])


def _eq(self: object, other: object) -> Any:
    """Equality of two records of one class: their compared values."""
    if other.__class__ is self.__class__:
        return _key(self) == _key(other)
    return NotImplemented


def _hash(self: object) -> int:
    """The hash of a record's compared values."""
    return hash(_key(self))


def _repr(self: object) -> str:
    """``Name(field=value, ...)`` of the fields ``repr`` shows."""
    fields = _SHAPES[type(self)].fields.values()
    shown = ", ".join(f"{item.name}={getattr(self, item.name)!r}" for item in fields if item.repr)
    return f"{type(self).__qualname__}({shown})"


def _order(compare: Callable[[tuple[Any, ...], tuple[Any, ...]], bool]) -> Callable[..., Any]:
    """A rich comparison of two records of one class by their compared values."""

    def method(self: object, other: object) -> Any:
        if other.__class__ is self.__class__:
            return compare(_key(self), _key(other))
        return NotImplemented

    return method


_ORDER = {
    "__lt__": _order(lambda a, b: a < b),
    "__le__": _order(lambda a, b: a <= b),
    "__gt__": _order(lambda a, b: a > b),
    "__ge__": _order(lambda a, b: a >= b),
}


def _is_class_variable(annotation: object) -> bool:
    """Whether an annotation (a string, under postponed evaluation) declares a ClassVar."""
    text = str(annotation)
    return text.startswith(("ClassVar", "typing.ClassVar"))


def _make(cls: type[_T], *, eq: bool, order: bool) -> type[_T]:
    """``cls`` made a frozen record (see :func:`frozen`)."""
    found: dict[str, Field] = {}
    for name, annotation in cls.__dict__.get("__annotations__", {}).items():  # noqa: RUF063 - no inspect
        if _is_class_variable(annotation):
            continue
        value = cls.__dict__.get(name, _MISSING)
        item = value if isinstance(value, Field) else Field(value, _MISSING, True, True, None)
        item.name = name
        if item.default is _MISSING:
            if name in cls.__dict__:
                delattr(cls, name)
        else:
            setattr(cls, name, item.default)
        found[name] = item
    _SHAPES[cls] = _Shape(found)
    cls.__match_args__ = tuple(found)  # type: ignore[attr-defined,misc]
    methods: dict[str, Any] = {"__setattr__": _frozen, "__delattr__": _frozen}
    methods["__repr__"] = _repr
    if "__init__" not in cls.__dict__:
        methods["__init__"] = _init
    if eq:
        methods["__eq__"] = _eq
        methods["__hash__"] = _hash
    if order:
        methods.update(_ORDER)
    for name, method in methods.items():
        if name not in cls.__dict__ or name in ("__setattr__", "__delattr__"):
            setattr(cls, name, method)
    return cls


@dataclass_transform(frozen_default=True, field_specifiers=(field, Field))
def frozen(cls: type[_T] | None = None, /, *, eq: bool = True, order: bool = False) -> Any:
    """Make ``cls`` a frozen record: ``@frozen`` or ``@frozen(order=True)`` (``eq=False``
    keeps identity equality and hashing)."""
    if cls is None:
        return lambda target: _make(target, eq=eq, order=order)
    return _make(cls, eq=eq, order=order)


def is_record(thing: object) -> bool:
    """Whether ``thing`` is a record class or instance."""
    return (thing if isinstance(thing, type) else type(thing)) in _SHAPES


def fields(thing: object) -> tuple[Field, ...]:
    """The fields of a record class or instance, in order."""
    cls = thing if isinstance(thing, type) else type(thing)
    shape = _SHAPES.get(cls)
    if shape is None:
        raise TypeError(f"{cls.__qualname__} is not a record (wpgate._record.frozen)")
    return tuple(shape.fields.values())


def replace(obj: _T, /, **changes: Any) -> _T:
    """A copy of the record ``obj`` with ``changes``, made by its initialiser."""
    for item in fields(obj):
        if item.name not in changes:
            changes[item.name] = obj.__dict__[item.name]
    return type(obj)(**changes)
