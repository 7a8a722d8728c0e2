"""The ``[tool.wpgate]`` table of ``pyproject.toml``: loading, rule switches, sections.

Layout::

    [tool.wpgate]
    history_start = "abc1234"        # first governed commit; `wpgate check` lints it..HEAD

    [tool.wpgate.rules]              # per-rule on/off, keyed by id or kebab name
    WPG108 = true
    subject-length = false

    [tool.wpgate.trailers]           # options of one linter; each linter reads its own section
    types = ["feat", "fix"]

A malformed file or a wrong value is a :class:`ConfigError` that names the key; the CLI turns it
into exit status 2.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from wpgate._model import RULES

__all__ = ["Config", "ConfigError", "load_config"]

_RULE_ID = re.compile(r"^WPG\d{3}$", re.IGNORECASE)
_TOP_LEVEL_KEYS = frozenset({"history_start", "rules"})


class ConfigError(Exception):
    """A wrong ``[tool.wpgate]`` setting; ``key`` is its dotted name."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"pyproject.toml: {key}: {message}")
        self.key = key


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


def _rule_switches(raw: Any) -> dict[str, bool]:
    """``[tool.wpgate.rules]`` with names resolved to ids; unknown keys are errors."""
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise ConfigError("tool.wpgate.rules", "must be a table of `RULE-ID = true|false`")
    _import_rules()
    switches: dict[str, bool] = {}
    for key, value in raw.items():
        where = f"tool.wpgate.rules.{key}"
        if not isinstance(value, bool):
            raise ConfigError(where, f"must be true or false, not {value!r}")
        rule = RULES.get(str(key))
        if rule is not None:
            switches[rule.rule_id] = value
        elif _RULE_ID.match(str(key)):
            # An id the installed version does not know yet (a newer config) is kept, not fatal.
            switches[str(key).upper()] = value
        else:
            raise ConfigError(where, "is not a known rule; `wpgate explain --list` lists them")
    return switches


def _import_rules() -> None:
    """Register every rule, so names can be looked up (rule modules register on import)."""
    import wpgate.rules  # noqa: F401


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
    history_start = table.get("history_start", "")
    if not isinstance(history_start, str):
        raise ConfigError(
            "tool.wpgate.history_start", f"must be a commit id string, not {history_start!r}"
        )
    for key, value in table.items():
        if key not in _TOP_LEVEL_KEYS and not isinstance(value, Mapping):
            raise ConfigError(
                f"tool.wpgate.{key}",
                "is not a known setting; top-level keys are history_start and sub-tables",
            )
    return Config(
        root=root,
        table=_frozen(table),
        rule_switches=_frozen(_rule_switches(table.get("rules"))),
        history_start=history_start.strip(),
    )


# --------------------------------------------------------------------------- documented keys


@dataclass(frozen=True)
class Setting:
    """One key of ``[tool.wpgate]``: its table, type, default (as TOML) and what it does.

    :data:`SETTINGS` is what the adopter's guide publishes (``wpgate.site._config_reference``);
    ``tests/wpgate/test_config_reference.py`` fails when it and the code that reads the keys
    disagree, so the published reference cannot drift.
    """

    table: str
    key: str
    type: str
    default: str
    help: str

    @property
    def dotted(self) -> str:
        """The key's full name, e.g. ``tool.wpgate.docs.claims``."""
        return f"tool.wpgate.{self.table}.{self.key}" if self.table else f"tool.wpgate.{self.key}"


_LIST = "list of strings"
SETTINGS: tuple[Setting, ...] = (
    Setting(
        "",
        "history_start",
        "string",
        '""',
        "The first governed commit; `wpgate check` lints the trailers of it..HEAD.",
    ),
    Setting(
        "rules",
        "<RULE-ID or name>",
        "boolean",
        "the rule's default",
        "Switch one rule on or off, by id (`WPG108`) or name (`subject-length`).",
    ),
    Setting(
        "trailers",
        "types",
        _LIST,
        '["feat", "fix", "perf", "refactor", "refine", "test", "docs", "ci", "chore", '
        '"exp", "release"]',
        "The commit types a subject may start with.",
    ),
    Setting(
        "trailers",
        "max_subject_length",
        "integer",
        "72",
        "The longest subject line, in characters.",
    ),
    Setting(
        "trailers",
        "required",
        _LIST,
        '["WP", "Provenance", "Gate"]',
        "The trailers every governed commit carries (of WP, Provenance, Assumptions, Gate).",
    ),
    Setting(
        "trailers",
        "bot_authors",
        _LIST,
        '["\\\\[bot\\\\]"]',
        "Regular expressions searched in `Name <email>`; their commits are counted, not linted.",
    ),
    Setting(
        "trailers",
        "signoff_matches_author",
        "boolean",
        "false",
        "Require a `Signed-off-by:` that names the commit's author (WPG108).",
    ),
    Setting(
        "trailers",
        "clean_room_statement",
        "string",
        '"Clean-room acknowledged:"',
        "The statement a pull request's body must keep (`wpgate trailers --pr`).",
    ),
    Setting(
        "docs",
        "provenance",
        "string",
        '"docs/PROVENANCE.md"',
        "The provenance record: sources, placeholders, first-use log.",
    ),
    Setting(
        "docs",
        "assumptions",
        "string",
        '"docs/ASSUMPTIONS.md"',
        "The assumptions record (ids `A<n>` a trailer may cite).",
    ),
    Setting(
        "docs",
        "work_packages",
        "string",
        '"docs/work_packages"',
        "The work-package registry folder (`wp-NNN.md` pages).",
    ),
    Setting(
        "docs",
        "engineering",
        "string",
        '"docs/engineering"',
        "The folder of the phase pages (`phase-NN[-slug].md`).",
    ),
    Setting(
        "docs",
        "evidence",
        "string",
        '"docs/evidence"',
        "The evidence folder (`wpgate-evidence/1` JSON files).",
    ),
    Setting(
        "docs",
        "changelog",
        "string",
        '"CHANGELOG.md"',
        "The changelog whose `[Unreleased]` names are checked.",
    ),
    Setting(
        "docs",
        "claims",
        _LIST,
        '["docs/**/*.md", "README.md"]',
        "Globs of the pages scanned for `[MEASURED]` claims.",
    ),
    Setting(
        "provenance",
        "licences",
        _LIST,
        '["MIT", "Apache-2.0", "BSD-2-Clause", "BSD-3-Clause", "ISC", "PSF-2.0"]',
        "The licences a code source may carry.",
    ),
    Setting(
        "provenance",
        "code_roles",
        _LIST,
        '["code", "library", "software", "source code"]',
        "The roles that make a source code (and so subject to `licences`).",
    ),
    Setting(
        "provenance",
        "history",
        "boolean",
        "true when history_start is set",
        "Check first-use dates against the first commit citing each source.",
    ),
    Setting(
        "wp",
        "extra_keys",
        _LIST,
        "[]",
        "Front-matter keys a work-package page may carry beyond the schema.",
    ),
    Setting(
        "evidence",
        "collect",
        "boolean",
        "true",
        "Run pytest to verify `collected N -- paths` markers.",
    ),
    Setting(
        "changelog",
        "ignore",
        _LIST,
        "[]",
        "Backticked names of the `[Unreleased]` section that are not checked.",
    ),
)
