"""The ``[tool.wpgate]`` table of ``pyproject.toml``: loading, rule switches, sections.

Layout::

    [tool.wpgate]
    history_start = "abc1234"        # first governed commit; `wpgate check` lints it..HEAD

    [tool.wpgate.rules]              # per rule, keyed by id or kebab name: on/off or severity
    WPG108 = true
    subject-length = false
    subject-period = "warning"       # reported, but does not fail the run ("error", "off")

    [tool.wpgate.trailers]           # options of one linter; each linter reads its own section
    types = ["feat", "fix"]

Every table and key is checked against :data:`SCHEMA` when the file is loaded: an unknown table
or key, or a value of the wrong type, is a :class:`ConfigError` that names the key and the
expected type; the CLI turns it into exit status 2.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any, TypeVar

from wpgate._model import RULES
from wpgate.options import KINDS, SEVERITIES, ConfigError, LinterOptions, accepts, shown

_O = TypeVar("_O", bound=LinterOptions)

__all__ = ["SCHEMA", "SETTINGS", "SEVERITIES", "Config", "ConfigError", "Setting", "load_config"]

_RULE_ID = re.compile(r"^WPG\d{3}$", re.IGNORECASE)


def _frozen(value: Mapping[str, Any]) -> Mapping[str, Any]:
    """A read-only view, so a section handed to a linter cannot be changed under another."""
    return MappingProxyType(dict(value))


@dataclass(frozen=True)
class Config:
    """The loaded ``[tool.wpgate]`` table of one repository."""

    root: Path
    table: Mapping[str, Any] = field(default_factory=dict)
    rule_switches: Mapping[str, bool] = field(default_factory=dict)
    history_start: str = ""
    warnings: frozenset[str] = frozenset()
    # Each linter's options record, built on first use and then shared (see `options`).
    _options: dict[type[LinterOptions], LinterOptions] = field(
        default_factory=dict, compare=False, repr=False
    )

    def options(self, kind: type[_O]) -> _O:
        """The ``kind`` record (e.g. ``DocsLayout``) of this configuration, built and checked
        once: every linter of a run reads the same record."""
        record = self._options.get(kind)
        if record is None:
            record = self._options[kind] = kind.from_section(self.section(kind.TABLE))
        assert isinstance(record, kind)
        return record

    def section(self, name: str) -> Mapping[str, Any]:
        """The ``[tool.wpgate.<name>]`` sub-table (empty when absent)."""
        value = self.table.get(name)
        if value is None:
            return _frozen({})
        if not isinstance(value, Mapping):
            raise ConfigError(f"tool.wpgate.{name}", "must be a table ([tool.wpgate.{name}])")
        return _frozen(value)

    def enabled(self, rule_id: str) -> bool:
        """Whether a rule is on: its switch if set, else the rule's default (on if unknown)."""
        key = rule_id.upper()
        if key in self.rule_switches:
            return self.rule_switches[key]
        rule = RULES.get(key)
        return True if rule is None else rule.enabled_by_default

    def severity(self, rule_id: str) -> str:
        """``warning`` for a rule configured so (reported, never failing), else ``error``."""
        return "warning" if rule_id.upper() in self.warnings else "error"

    def ignoring(self, rules: Iterable[str]) -> Config:
        """This configuration with ``rules`` (ids or names) switched off for one run."""
        switches = dict(self.rule_switches)
        for name in rules:
            for part in filter(None, (p.strip() for p in name.split(","))):
                switches[_rule_key(part, f"--ignore {part}")] = False
        # Same table, same options: the copy shares the records built so far.
        return replace(self, rule_switches=_frozen(switches))


def _rule_key(key: str, where: str) -> str:
    """The rule id ``key`` (an id or a kebab name) stands for; unknown names are errors."""
    _import_rules()
    rule = RULES.get(key)
    if rule is not None:
        return rule.rule_id
    if _RULE_ID.match(key):
        # An id the installed version does not know yet (a newer config) is kept, not fatal.
        return key.upper()
    raise ConfigError(where, "is not a known rule; `wpgate explain --list` lists them")


def _rule_switches(raw: Any) -> tuple[dict[str, bool], frozenset[str]]:
    """``[tool.wpgate.rules]``: on/off per rule id, and the ids whose severity is ``warning``."""
    if raw is None:
        return {}, frozenset()
    if not isinstance(raw, Mapping):
        raise ConfigError("tool.wpgate.rules", "must be a table of `RULE-ID = true|false`")
    switches: dict[str, bool] = {}
    warnings: set[str] = set()
    for key, value in raw.items():
        where = f"tool.wpgate.rules.{key}"
        if not isinstance(value, bool) and value not in SEVERITIES:
            raise ConfigError(
                where,
                f"must be true, false or one of {', '.join(map(repr, SEVERITIES))}, not "
                f"{shown(value)}",
            )
        rule_id = _rule_key(str(key), where)
        switches[rule_id] = value is True or value in ("error", "warning")
        if value == "warning":
            warnings.add(rule_id)
    return switches, frozenset(warnings)


def _validate(table: Mapping[str, Any]) -> None:
    """Every table and key of ``[tool.wpgate]`` is known and has its expected type."""
    top = SCHEMA[""]
    for key, value in table.items():
        where = f"tool.wpgate.{key}"
        if key in top:
            _check_value(where, top[key], value)
            continue
        if key not in SCHEMA:
            tables = ", ".join(f"[tool.wpgate.{name}]" for name in SCHEMA if name)
            raise ConfigError(
                where,
                f"is not a known setting or table; the tables are {tables} and the top-level "
                f"key is {', '.join(top)}",
            )
        if not isinstance(value, Mapping):
            raise ConfigError(where, f"must be a table ([tool.wpgate.{key}]), not {shown(value)}")
        settings = SCHEMA[key]
        if key == "rules":
            continue  # rule ids and names, checked by _rule_switches
        for name, item in value.items():
            setting = settings.get(name)
            if setting is None:
                raise ConfigError(
                    f"{where}.{name}",
                    f"is not a known key of [tool.wpgate.{key}]; known: {', '.join(settings)}",
                )
            _check_value(f"{where}.{name}", setting, item)


def _check_value(where: str, setting: Setting, value: Any) -> None:
    """A :class:`ConfigError` naming the key and the expected type when ``value`` is wrong."""
    if not setting.accepts(value):
        raise ConfigError(where, f"must be {setting.expected}, not {shown(value)}")


def _import_rules() -> None:
    """Register every rule, so names can be looked up (rule modules register on import)."""
    from wpgate.rules import register_all

    register_all()


def load_config(root: Path) -> Config:
    """Read ``[tool.wpgate]`` from ``root/pyproject.toml``; a missing file or table is defaults."""
    path = root / "pyproject.toml"
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return Config(root)
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError("pyproject.toml", f"cannot be read ({exc}); fix the file") from exc
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError("pyproject.toml", f"is not valid TOML ({exc}); fix the syntax") from exc
    tool = data.get("tool", {})
    table = tool.get("wpgate", {}) if isinstance(tool, Mapping) else {}
    if not isinstance(table, Mapping):
        raise ConfigError("tool.wpgate", "must be a table ([tool.wpgate])")
    _validate(table)
    history_start = str(table.get("history_start", "")).strip()
    if history_start:
        from wpgate._git import GitError, validate_revision

        try:
            validate_revision(history_start, "history_start")
        except GitError as exc:
            raise ConfigError("tool.wpgate.history_start", str(exc)) from exc
    switches, warnings = _rule_switches(table.get("rules"))
    return Config(
        root=root,
        table=_frozen(table),
        rule_switches=_frozen(switches),
        history_start=history_start,
        warnings=warnings,
    )


# --------------------------------------------------------------------------- documented keys


@dataclass(frozen=True)
class Setting:
    """One key of ``[tool.wpgate]``: its table, value kind, default (as TOML) and what it does.

    :data:`SETTINGS` is the one declaration of the configuration: :func:`load_config` validates
    against it (through :data:`SCHEMA`) and the adopter's guide publishes it
    (``wpgate.site._config_reference``); ``tests/wpgate/test_config_reference.py`` fails when it
    and the code that reads the keys disagree, so the published reference cannot drift.
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

    @property
    def expected(self) -> str:
        """The expected type as an error message says it (``a list of strings``)."""
        return KINDS[self.kind][1]

    def accepts(self, value: Any) -> bool:
        """Whether ``value`` (as tomllib read it) has this setting's kind."""
        return accepts(self.kind, value)


SETTINGS: tuple[Setting, ...] = (
    Setting(
        "",
        "history_start",
        "str",
        '""',
        "The first governed commit; `wpgate check` lints the trailers of it..HEAD.",
    ),
    Setting(
        "rules",
        "<RULE-ID or name>",
        "rule",
        "the rule's default",
        "Switch one rule on or off, by id (`WPG108`) or name (`subject-length`), or set its "
        'severity: `"warning"` is reported but never fails the run.',
    ),
    Setting(
        "trailers",
        "types",
        "str_list",
        '["feat", "fix", "perf", "refactor", "refine", "test", "docs", "ci", "chore", '
        '"exp", "release"]',
        "The commit types a subject may start with.",
    ),
    Setting(
        "trailers",
        "max_subject_length",
        "int",
        "72",
        "The longest subject line, in characters.",
    ),
    Setting(
        "trailers",
        "required",
        "str_list",
        '["WP", "Provenance", "Gate"]',
        "The trailers every governed commit carries (of WP, Provenance, Assumptions, Gate).",
    ),
    Setting(
        "trailers",
        "bot_authors",
        "str_list",
        '["\\\\[bot\\\\]"]',
        "Regular expressions searched in `Name <email>`; their commits are counted, not linted.",
    ),
    Setting(
        "trailers",
        "signoff_matches_author",
        "bool",
        "false",
        "Require a `Signed-off-by:` that names the commit's author (WPG108).",
    ),
    Setting(
        "trailers",
        "clean_room_statement",
        "str",
        '"Clean-room acknowledged:"',
        "The statement a pull request's body must keep (`wpgate trailers --pr`).",
    ),
    Setting(
        "trailers",
        "revert_exempt",
        "bool",
        "true",
        "`git revert` messages are exempt from the trailer rules, like merges.",
    ),
    Setting(
        "docs",
        "provenance",
        "str",
        '"docs/PROVENANCE.md"',
        "The provenance record: sources, placeholders, first-use log.",
    ),
    Setting(
        "docs",
        "assumptions",
        "str",
        '"docs/ASSUMPTIONS.md"',
        "The assumptions record (ids `A<n>` a trailer may cite).",
    ),
    Setting(
        "docs",
        "work_packages",
        "str",
        '"docs/work_packages"',
        "The work-package registry folder (`wp-NNN.md` pages).",
    ),
    Setting(
        "docs",
        "engineering",
        "str",
        '"docs/engineering"',
        "The folder of the phase pages (`phase-NN[-slug].md`).",
    ),
    Setting(
        "docs",
        "evidence",
        "str",
        '"docs/evidence"',
        "The evidence folder (`wpgate-evidence/1` JSON files).",
    ),
    Setting(
        "docs",
        "changelog",
        "str",
        '"CHANGELOG.md"',
        "The changelog whose `[Unreleased]` names are checked.",
    ),
    Setting(
        "docs",
        "claims",
        "str_or_list",
        '["docs/**/*.md", "README.md"]',
        "Globs of the pages scanned for `[MEASURED]` claims.",
    ),
    Setting(
        "provenance",
        "licences",
        "str_or_list",
        '["MIT", "Apache-2.0", "BSD-2-Clause", "BSD-3-Clause", "ISC", "PSF-2.0"]',
        "The licences a code source may carry.",
    ),
    Setting(
        "provenance",
        "code_roles",
        "str_or_list",
        '["code", "library", "software", "source code"]',
        "The roles that make a source code (and so subject to `licences`).",
    ),
    Setting(
        "provenance",
        "history",
        "bool",
        "true when history_start is set",
        "Check first-use dates against the first commit citing each source.",
    ),
    Setting(
        "wp",
        "extra_keys",
        "str_or_list",
        "[]",
        "Front-matter keys a work-package page may carry beyond the schema.",
    ),
    Setting(
        "evidence",
        "collect",
        "bool",
        "true",
        "Run pytest to verify `collected N -- paths` markers.",
    ),
    Setting(
        "changelog",
        "ignore",
        "str_or_list",
        "[]",
        "Backticked names of the `[Unreleased]` section that are not checked.",
    ),
)


def _schema(settings: Iterable[Setting]) -> Mapping[str, Mapping[str, Setting]]:
    """Each table of ``[tool.wpgate]`` and its keys; ``rules`` is free-form (ids and names)."""
    tables: dict[str, dict[str, Setting]] = {}
    for setting in settings:
        members = tables.setdefault(setting.table, {})
        if setting.kind != "rule":
            members[setting.key] = setting
    return MappingProxyType({name: MappingProxyType(keys) for name, keys in tables.items()})


#: :data:`SETTINGS` by table and key, as :func:`load_config` validates against it.
SCHEMA: Mapping[str, Mapping[str, Setting]] = _schema(SETTINGS)
