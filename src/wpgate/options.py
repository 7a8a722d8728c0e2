"""Each linter's options: one frozen record per ``[tool.wpgate.<table>]``, built once per run.

:data:`wpgate._config.SETTINGS` declares every key (its table, kind and default); the records
here are what the linters read: :class:`DocsLayout` (``docs``), :class:`ProvenanceOptions`,
:class:`WorkPackageOptions` (``wp``), :class:`EvidenceOptions`, :class:`ChangelogOptions` and
``wpgate.rules.trailers.TrailerOptions``. Each field names its kind in its metadata, so one
builder (:meth:`LinterOptions.from_section`) converts and checks every table the same way,
and ``tests/wpgate/test_config_reference.py`` fails when a record and the declaration differ.
``Config.options(kind)`` builds a record once per loaded configuration and hands every
reader that same record.

This module imports only the standard library: the rule modules import it, and
``wpgate._config`` imports it, without either importing the other.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, Self, TypeVar

__all__ = [
    "KINDS",
    "SEVERITIES",
    "ChangelogOptions",
    "ConfigError",
    "DocsLayout",
    "EvidenceOptions",
    "LinterOptions",
    "OptionsSource",
    "ProvenanceOptions",
    "WorkPackageOptions",
    "accepts",
    "shown",
]

#: What a rule's entry in ``[tool.wpgate.rules]`` may say besides true/false.
SEVERITIES = ("error", "warning", "off")

#: Value kinds: how the reference page names each, and how an error message does.
KINDS = {
    "str": ("string", "a string"),
    "bool": ("boolean", "true or false"),
    "int": ("integer", "a positive integer"),
    "str_list": ("list of strings", "a list of strings"),
    "str_or_list": ("string or list of strings", "a string or a list of strings"),
    "rule": ("boolean or severity", 'true, false, "error", "warning" or "off"'),
}


class ConfigError(Exception):
    """A wrong ``[tool.wpgate]`` setting; ``key`` is its dotted name."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"pyproject.toml: {key}: {message}")
        self.key = key


def accepts(kind: str, value: Any) -> bool:
    """Whether ``value`` (as tomllib read it) has the value kind ``kind`` (a key of KINDS)."""
    if kind == "bool":
        return isinstance(value, bool)
    if kind == "int":
        return isinstance(value, int) and not isinstance(value, bool) and value >= 1
    if kind == "str":
        return isinstance(value, str)
    if kind == "rule":
        return isinstance(value, bool) or value in SEVERITIES
    if kind == "str_or_list" and isinstance(value, str):
        return True
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


def shown(value: Any) -> str:
    """A configured value for a message, its type named and its text cut to a readable length."""
    text = repr(value)
    text = text if len(text) <= 40 else f"{text[:40]}..."
    return f"{text} ({type(value).__name__})"


def option(default: Any, kind: str) -> Any:
    """A record field with its default and its value kind (a key of :data:`KINDS`)."""
    return field(default=default, metadata={"kind": kind})


def kind_of(item: dataclasses.Field[Any]) -> str:
    """The value kind a record field declares."""
    return str(item.metadata["kind"])


_O = TypeVar("_O", bound="LinterOptions")


class OptionsSource(Protocol):
    """What a linter reads its options from: a loaded ``wpgate._config.Config``."""

    def options(self, kind: type[_O]) -> _O:
        """The ``kind`` record of this configuration, built once."""
        ...


class LinterOptions:
    """Base of the option records: the table they read and the one builder and check.

    Subclasses are frozen dataclasses whose fields are made with :func:`option`.
    """

    TABLE: ClassVar[str]

    @classmethod
    def from_section(cls, section: Mapping[str, Any]) -> Self:
        """The record of one ``[tool.wpgate.<TABLE>]`` table; a wrong key or value is an error.

        Lists become tuples, a lone string where a list may stand becomes a one-item tuple;
        :meth:`check` then adds what a type cannot say (a regular expression compiles, ...).
        """
        fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        values: dict[str, Any] = {}
        for key, value in section.items():
            where = f"tool.wpgate.{cls.TABLE}.{key}"
            item = fields.get(key)
            if item is None:
                raise ConfigError(
                    where,
                    f"is not a known key of [tool.wpgate.{cls.TABLE}]; known: {', '.join(fields)}",
                )
            kind = kind_of(item)
            if not accepts(kind, value):
                raise ConfigError(where, f"must be {KINDS[kind][1]}, not {shown(value)}")
            if kind in ("str_list", "str_or_list"):
                values[key] = (value,) if isinstance(value, str) else tuple(value)
            else:
                values[key] = value
        record = cls(**values)
        record.check()
        return record

    @classmethod
    def from_config(cls, config: OptionsSource | None) -> Self:
        """The record of a loaded configuration (built once there), or the defaults."""
        return cls() if config is None else config.options(cls)

    def check(self) -> None:
        """Refuse, with a :class:`ConfigError`, values that have the right type but are wrong."""


@dataclass(frozen=True)
class DocsLayout(LinterOptions):
    """``[tool.wpgate.docs]``: where the governance documents live, relative to the root."""

    TABLE: ClassVar[str] = "docs"

    provenance: str = option("docs/PROVENANCE.md", "str")
    assumptions: str = option("docs/ASSUMPTIONS.md", "str")
    work_packages: str = option("docs/work_packages", "str")
    engineering: str = option("docs/engineering", "str")
    evidence: str = option("docs/evidence", "str")
    changelog: str = option("CHANGELOG.md", "str")
    claims: tuple[str, ...] = option(("docs/**/*.md", "README.md"), "str_or_list")


@dataclass(frozen=True)
class ProvenanceOptions(LinterOptions):
    """``[tool.wpgate.provenance]``: the licences a code source may carry, and the history."""

    TABLE: ClassVar[str] = "provenance"

    licences: tuple[str, ...] = option(
        ("MIT", "Apache-2.0", "BSD-2-Clause", "BSD-3-Clause", "ISC", "PSF-2.0"), "str_or_list"
    )
    code_roles: tuple[str, ...] = option(
        ("code", "library", "software", "source code"), "str_or_list"
    )
    #: None: on when ``history_start`` is set.
    history: bool | None = option(None, "bool")


@dataclass(frozen=True)
class WorkPackageOptions(LinterOptions):
    """``[tool.wpgate.wp]``: front-matter keys a page may carry beyond the schema."""

    TABLE: ClassVar[str] = "wp"

    extra_keys: tuple[str, ...] = option((), "str_or_list")


@dataclass(frozen=True)
class EvidenceOptions(LinterOptions):
    """``[tool.wpgate.evidence]``: whether pytest collection verifies the markers."""

    TABLE: ClassVar[str] = "evidence"

    collect: bool = option(True, "bool")


@dataclass(frozen=True)
class ChangelogOptions(LinterOptions):
    """``[tool.wpgate.changelog]``: backticked names of ``[Unreleased]`` that are not checked."""

    TABLE: ClassVar[str] = "changelog"

    ignore: tuple[str, ...] = option((), "str_or_list")
