"""Each linter's options: one frozen record per ``[tool.wpgate.<table>]``, built once per run.

The records are the declaration of the keys: each field of :class:`DocsLayout` (``docs``),
:class:`TrailerOptions`, :class:`GateOptions`, :class:`OutputOptions` and the docs linters'
records (:mod:`wpgate.docs_options`) is one key, made with :func:`option`: its name, default,
value kind and what it does. :meth:`LinterOptions.settings` derives the key's
:class:`Setting` (``wpgate._config.settings()`` and the published reference are made of them)
and :func:`converted` is the one conversion and check of a configured value.
``Config.options(kind)`` builds a record once per loaded configuration and hands every
reader that same record.

This module imports only the standard library and :mod:`wpgate._record` (which imports no other
wpgate module): the rule modules import it, and ``wpgate._config`` imports it, without either
importing the other. The records are :func:`wpgate._record.frozen` records, not dataclasses:
the commit linters make them at every start. The records of the docs linters live in
:mod:`wpgate.docs_options`, which the commit linters do not load.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from typing import Any, ClassVar, Protocol, Self, TypeVar

from wpgate._record import Field, field, fields, frozen
from wpgate.errors import ConfigError

__all__ = [
    "DEFAULT_TYPES",
    "GATE_LANGUAGES",
    "GOVERNED_TRAILERS",
    "KINDS",
    "RULE_SWITCH_VALUES",
    "SEVERITIES",
    "ConfigError",
    "DocsLayout",
    "GateOptions",
    "LinterOptions",
    "OptionsSource",
    "OutputOptions",
    "Setting",
    "TrailerOptions",
    "accepts",
    "converted",
    "kind_of",
    "option",
    "shown",
]

#: What a rule's entry in ``[tool.wpgate.rules]`` may say besides true/false.
SEVERITIES = ("error", "warning", "off")
#: Every value a rule's entry in ``[tool.wpgate.rules]`` may take, as TOML writes it.
RULE_SWITCH_VALUES = ("true", "false", *(f'"{severity}"' for severity in SEVERITIES))

#: Value kinds: how the reference page names each, and how an error message does.
KINDS = {
    "str": ("string", "a string"),
    "bool": ("boolean", "true or false"),
    "int": ("integer", "a positive integer"),
    "str_list": ("list of strings", "a list of strings"),
    "str_or_list": ("string or list of strings", "a string or a list of strings"),
    "str_map": ("table of strings", 'a table of strings (`key = "value"`)'),
    "rule": (
        "boolean or severity",
        f"{', '.join(RULE_SWITCH_VALUES[:-1])} or {RULE_SWITCH_VALUES[-1]}",
    ),
}


def accepts(kind: str, value: Any) -> bool:  # noqa: PLR0911 - one answer per value kind
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
    if kind == "str_map":
        return isinstance(value, Mapping) and all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()
        )
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


def shown(value: Any) -> str:
    """A configured value for a message, its type named and its text cut to a readable length."""
    text = repr(value)
    text = text if len(text) <= 40 else f"{text[:40]}..."
    return f"{text} ({type(value).__name__})"


def converted(where: str, kind: str, value: Any) -> Any:
    """``value`` (as tomllib read it) as a record holds it; a :class:`ConfigError` naming
    ``where`` and the expected type when it is not of ``kind``.

    The one conversion and check of a configured value: lists become tuples, a lone string
    where a list may stand becomes a one-item tuple, a table of strings a tuple of pairs.
    """
    if not accepts(kind, value):
        raise ConfigError(where, f"must be {KINDS[kind][1]}, not {shown(value)}")
    if kind == "str_map":
        return tuple(value.items())
    if kind in ("str_list", "str_or_list"):
        return (value,) if isinstance(value, str) else tuple(value)
    return value


@frozen
class Setting:
    """One key of ``[tool.wpgate]`` as the reference publishes it: its table, value kind,
    default (as TOML, or in words) and what it does.

    Derived, never declared twice: a linter's keys come from its record's fields
    (:meth:`LinterOptions.settings`); the keys no record holds (``history_start``, the rule
    switches) are declared where ``wpgate._config`` reads them.
    """

    table: str
    key: str
    kind: str
    default: str
    help: str

    @property
    def dotted(self) -> str:
        """The key's full name, e.g. ``tool.wpgate.docs.claims``."""
        return f"tool.wpgate.{self.table}.{self.key}" if self.table else f"tool.wpgate.{self.key}"

    @property
    def type(self) -> str:
        """The value's type as the reference page names it (``list of strings``)."""
        return KINDS[self.kind][0]


def option(
    default: Any,
    kind: str,
    help_text: str,
    *,
    shown_default: str | None = None,
    at_least_one: str | None = None,
) -> Any:
    """A record field, the one declaration of its key: its default, its value kind (a key of
    :data:`KINDS`) and what it does; ``shown_default`` says the default in words where it is
    decided at run time (a ``None`` default); ``at_least_one`` names the item a list may not be
    without (an empty list of commit types would refuse every subject)."""
    metadata = {"kind": kind, "help": help_text}
    if shown_default is not None:
        metadata["default"] = shown_default
    if at_least_one is not None:
        metadata["at_least_one"] = at_least_one
    return field(default=default, metadata=metadata)


def kind_of(item: Field) -> str:
    """The value kind a record field declares."""
    return str(item.metadata["kind"])


# TOML basic strings escape as JSON does (``json.dumps(text, ensure_ascii=False)``, which the
# tests compare with): the settings' defaults are rendered when wpgate._config is imported, and
# importing json for them cost every command, the commit-msg hook included, a few milliseconds.
_STRING_ESCAPES = {
    '"': '\\"',
    "\\": "\\\\",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "\b": "\\b",
    "\f": "\\f",
}
_NEEDS_ESCAPE = re.compile(r'["\\\x00-\x1f]')


def toml_string(text: str) -> str:
    """``text`` as a TOML basic string: quoted, with ``"``, ``\\`` and control characters
    escaped."""
    return '"' + _NEEDS_ESCAPE.sub(_escape_one, text) + '"'


def _escape_one(match: re.Match[str]) -> str:
    """The escape of one matched character: its short form, else ``\\uXXXX``."""
    char = match.group()
    return _STRING_ESCAPES.get(char) or f"\\u{ord(char):04x}"


def _toml(value: Any) -> str:
    """``value`` as TOML writes it: ``true``, ``72``, ``"text"``, ``["a", "b"]``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return "[" + ", ".join(map(_toml, value)) + "]"
    if isinstance(value, str):
        return toml_string(value)
    return str(value)


def _setting(table: str, item: Field) -> Setting:
    """The published :class:`Setting` of one record field."""
    if not {"kind", "help"} <= item.metadata.keys():
        raise TypeError(
            f"[tool.wpgate.{table}] {item.name}: declare the field with "
            "option(default, kind, help_text), which the reference is made of"
        )
    shown_default = item.metadata.get("default")
    if shown_default is not None:
        default = str(shown_default)
    elif kind_of(item) == "str_map":  # a table, held as (key, value) pairs
        pairs: tuple[tuple[str, str], ...] = item.default
        default = "{" + ", ".join(f"{_toml(k)} = {_toml(v)}" for k, v in pairs) + "}"
    else:
        default = _toml(item.default)
    return Setting(table, item.name, kind_of(item), default, str(item.metadata["help"]))


_O = TypeVar("_O", bound="LinterOptions")


class OptionsSource(Protocol):
    """What a linter reads its options from: a loaded ``wpgate._config.Config``."""

    def options(self, kind: type[_O]) -> _O:
        """The ``kind`` record of this configuration, built once."""
        ...


class LinterOptions:
    """Base of the option records: the table they read, its keys, the one parser and check.

    Subclasses are frozen records (:func:`wpgate._record.frozen`) whose fields are made with
    :func:`option`.
    """

    TABLE: ClassVar[str]

    @classmethod
    def fields(cls) -> tuple[Field, ...]:
        """The record's fields: one a key of its table."""
        return fields(cls)

    @classmethod
    def settings(cls) -> tuple[Setting, ...]:
        """The keys of ``[tool.wpgate.<TABLE>]`` as the reference publishes them, in order."""
        return tuple(_setting(cls.TABLE, item) for item in cls.fields())

    @classmethod
    def parse(cls, section: Mapping[str, Any]) -> Self:
        """The record of one ``[tool.wpgate.<TABLE>]`` table, each key known and each value
        converted (:func:`converted`); a wrong key or value is an error.

        Not yet checked: ``wpgate._config.load_config`` parses and then checks every table
        it loads; ``Config.options`` checks a record it builds itself (a table the file lacks).
        """
        fields = {item.name: item for item in cls.fields()}
        values: dict[str, Any] = {}
        for key, value in section.items():
            where = f"tool.wpgate.{cls.TABLE}.{key}"
            item = fields.get(key)
            if item is None:
                raise ConfigError(
                    where,
                    f"is not a known key of [tool.wpgate.{cls.TABLE}]; known: {', '.join(fields)}",
                )
            values[key] = converted(where, kind_of(item), value)
            needed = item.metadata.get("at_least_one")
            if needed is not None and not values[key]:
                raise ConfigError(
                    where,
                    f"is empty, but needs at least one {needed}; list them, or remove the key "
                    f"to use the default ({_setting(cls.TABLE, item).default})",
                )
        return cls(**values)

    @classmethod
    def from_section(cls, section: Mapping[str, Any]) -> Self:
        """The checked record of one table: :meth:`parse`, then :meth:`check`."""
        record = cls.parse(section)
        record.check()
        return record

    @classmethod
    def from_config(cls, config: OptionsSource | None) -> Self:
        """The record of a loaded configuration (built once there), or the defaults."""
        return cls() if config is None else config.options(cls)

    def check(self) -> None:
        """Refuse, with a :class:`ConfigError`, values that have the right type but are wrong."""


@frozen
class DocsLayout(LinterOptions):
    """``[tool.wpgate.docs]``: where the governance documents live, relative to the root."""

    TABLE: ClassVar[str] = "docs"

    provenance: str = option(
        "docs/PROVENANCE.md", "str", "The provenance record: sources, placeholders, first-use log."
    )
    assumptions: str = option(
        "docs/ASSUMPTIONS.md", "str", "The assumptions record (ids `A<n>` a trailer may cite)."
    )
    work_packages: str = option(
        "docs/work_packages", "str", "The work-package registry folder (`wp-NNN.md` pages)."
    )
    engineering: str = option(
        "docs/engineering", "str", "The folder of the phase pages (`phase-NN[-slug].md`)."
    )
    evidence: str = option(
        "docs/evidence", "str", "The evidence folder (`wpgate-evidence/1` JSON files)."
    )
    changelog: str = option(
        "CHANGELOG.md", "str", "The changelog whose `[Unreleased]` names are checked."
    )
    claims: tuple[str, ...] = option(
        ("docs/**/*.md", "README.md"),
        "str_or_list",
        "Globs of the pages scanned for `[MEASURED]` claims.",
        at_least_one="glob",
    )
    pages: tuple[str, ...] = option(
        ("docs/**/*.md",),
        "str_or_list",
        "Globs of the Markdown pages the site renders, which the Markdown rules (WPG6xx) read.",
        at_least_one="glob",
    )

    def check(self) -> None:
        """Every path and glob stays inside the repository: relative, with no ``..`` part (a
        folder outside would be read, or found empty, and pass silently)."""
        for item in fields(self):
            value = getattr(self, item.name)
            for path in value if isinstance(value, tuple) else (value,):
                parts = path.replace("\\", "/").split("/")
                if path.startswith(("/", "\\")) or path[1:2] == ":" or ".." in parts:
                    raise ConfigError(
                        f"tool.wpgate.docs.{item.name}",
                        f"{path!r} leaves the repository; name a path relative to the "
                        "repository root, without `..`",
                    )


#: The languages whose test files a gate may name without configuration (``wpgate._gate_languages``
#: holds their scanners).
GATE_LANGUAGES = ("python", "go", "rust", "javascript", "bats")

#: Where ``Gate: ci:<job>`` looks for job ids unless ``ci_workflows`` says otherwise.
CI_WORKFLOWS = (".github/workflows/*.yml", ".github/workflows/*.yaml")


@frozen
class GateOptions(LinterOptions):
    """``[tool.wpgate.gates]``: what a ``Gate:`` may name (trailers and work-package pages)."""

    TABLE: ClassVar[str] = "gates"

    languages: tuple[str, ...] = option(
        GATE_LANGUAGES,
        "str_or_list",
        "The built-in test-file readers a gate may use (python, go, rust, javascript, bats).",
    )
    patterns: tuple[tuple[str, str], ...] = option(
        (),
        "str_map",
        "Test files of other kinds: a file glob = a regular expression whose group `name` "
        "matches a test's name, e.g. `\"t/*.t\" = '^ok \\d+ - (?P<name>.+)$'`.",
    )
    ci_workflows: tuple[str, ...] = option(
        CI_WORKFLOWS,
        "str_or_list",
        "Globs of the CI workflow files whose job ids `Gate: ci:<job>` may name.",
    )
    ci_jobs: tuple[str, ...] = option(
        (),
        "str_or_list",
        "CI job names `Gate: ci:<job>` may name besides the workflows' jobs (other CI systems).",
    )

    def check(self) -> None:
        """Each language is known; each pattern compiles and has a group named ``name``."""
        unknown = [name for name in self.languages if name not in GATE_LANGUAGES]
        if unknown:
            raise ConfigError(
                "tool.wpgate.gates.languages",
                f"{unknown[0]!r} is not a known language; use {', '.join(GATE_LANGUAGES)}, or "
                "describe the files in [tool.wpgate.gates] patterns",
            )
        for glob, pattern in self.patterns:
            where = f"tool.wpgate.gates.patterns.{glob}"
            try:
                compiled = re.compile(pattern)
            except re.error as exc:
                raise ConfigError(
                    where, f"{pattern!r} is not a regular expression ({exc}); fix it"
                ) from exc
            if "name" not in compiled.groupindex:
                raise ConfigError(
                    where,
                    f"{pattern!r} has no group `name`; mark the test's name with (?P<name>...)",
                )


@frozen
class OutputOptions(LinterOptions):
    """``[tool.wpgate.output]``: what the reports link to."""

    TABLE: ClassVar[str] = "output"

    help_uri: str = option(
        "",
        "str",
        "The page of each rule in `--format sarif` (its `helpUri`): a URL with `{id}` (the "
        "lower-case rule id) or `{name}`, e.g. `https://example.org/reference/rules/{id}/`.",
    )

    def check(self) -> None:
        """The template names only ``{id}`` and ``{name}``."""
        try:
            self.help_uri.format(id="wpg101", name="subject-format")
        except (KeyError, IndexError, ValueError) as exc:
            raise ConfigError(
                "tool.wpgate.output.help_uri",
                f"{self.help_uri!r} is not a URL template ({exc}); use {{id}} or {{name}} only",
            ) from exc


#: The commit types a subject may start with, unless ``types`` says otherwise: wpgate's own
#: (``refine``, ``exp``, ``release``) and every type the Conventional Commits 1.0.0 spec and
#: commitlint's conventional config name (``build``, ``style``, ``revert`` among them), so an
#: adopter's existing history passes without configuration.
DEFAULT_TYPES = (
    "feat",
    "fix",
    "perf",
    "refactor",
    "refine",
    "test",
    "docs",
    "ci",
    "chore",
    "exp",
    "release",
    "build",
    "style",
    "revert",
)

#: The trailers the commit rules govern (WPG104-WPG107), which ``required`` may name.
GOVERNED_TRAILERS = ("WP", "Provenance", "Assumptions", "Gate")


@frozen
class TrailerOptions(LinterOptions):
    """``[tool.wpgate.trailers]``: what the commit rules accept."""

    TABLE: ClassVar[str] = "trailers"

    types: tuple[str, ...] = option(
        DEFAULT_TYPES,
        "str_list",
        "The commit types a subject may start with.",
        at_least_one="commit type",
    )
    max_subject_length: int = option(72, "int", "The longest subject line, in characters.")
    required: tuple[str, ...] = option(
        ("WP", "Provenance", "Gate"),
        "str_list",
        "The trailers every governed commit carries (of WP, Provenance, Assumptions, Gate).",
    )
    bot_authors: tuple[str, ...] = option(
        (r"\[bot\]",),
        "str_list",
        "Regular expressions searched in `Name <email>`; their commits are counted, not linted.",
    )
    signoff_matches_author: bool = option(
        False, "bool", "Require a `Signed-off-by:` that names the commit's author (WPG108)."
    )
    clean_room_statement: str = option(
        "Clean-room acknowledged:",
        "str",
        "The statement a pull request's body must keep (`wpgate trailers --pr`).",
    )
    # `git revert`'s own message (`Revert "..."`, `This reverts commit X.`) is exempt, as merges.
    revert_exempt: bool = option(
        True, "bool", "`git revert` messages are exempt from the trailer rules, like merges."
    )
    # A `fixup!`, `squash!` or `amend!` commit is work in progress: the commit-msg hook lets it
    # through, but one that reaches a history range has landed unsquashed.
    fixup_exempt_in_history: bool = option(
        False,
        "bool",
        "`fixup!`, `squash!` and `amend!` commits are exempt in history ranges (`--range`, "
        "`--pushed`, `check`) too, not only in the commit-msg hook.",
    )

    def check(self) -> None:
        """The statement is not empty, each bot pattern compiles, each required trailer is
        governed."""
        if not self.clean_room_statement:
            raise ConfigError(
                "tool.wpgate.trailers.clean_room_statement", "must be a non-empty string"
            )
        for pattern in self.bot_authors:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ConfigError(
                    "tool.wpgate.trailers.bot_authors",
                    f"{pattern!r} is not a regular expression ({exc}); escape [ ] as \\[ \\]",
                ) from exc
        unknown = [k for k in self.required if k not in GOVERNED_TRAILERS]
        if unknown:
            raise ConfigError(
                "tool.wpgate.trailers.required",
                f"{unknown[0]!r} is not a governed trailer; use {', '.join(GOVERNED_TRAILERS)}",
            )

    @functools.cached_property
    def bot_pattern(self) -> re.Pattern[str]:
        """``bot_authors`` as one compiled alternation (never matches when empty)."""
        return _bot_pattern(self.bot_authors)


@functools.lru_cache(maxsize=16)
def _bot_pattern(patterns: tuple[str, ...]) -> re.Pattern[str]:
    """One compiled alternation of the bot-author patterns (never matches when empty)."""
    return re.compile("|".join(f"(?:{p})" for p in patterns) or r"(?!)")
