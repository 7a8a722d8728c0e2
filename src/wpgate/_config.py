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
