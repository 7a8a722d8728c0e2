"""The configuration reference page, generated from the code so it cannot drift.

Two sources, both read at build time: the mkdocs plugin's options (the schema of
``WpgateConfig`` with the help of :data:`wpgate.site.plugin.OPTION_HELP`) and the
``[tool.wpgate]`` keys (:func:`wpgate._config.settings`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from wpgate._config import Setting
from wpgate.site._escape import escape_markdown

__all__ = ["option_rows", "render_config_page"]

_INTRO = """# Configuration reference

Generated from wpgate's code when this site is built, so every option and key here is one the
installed version reads. The evidence charts need matplotlib: install the `docs` extra,
`pip install "wpgate[docs]"` (mkdocs, mkdocs-material and matplotlib).
"""


def _type_name(option: Any) -> str:
    """A readable type of an mkdocs config option (``string``, ``list of strings``, ...)."""
    names = {str: "string", bool: "boolean", int: "integer", float: "number"}
    inner = getattr(option, "option_type", None)
    if inner is not None:
        return f"list of {_type_name(inner)}s"
    kind = getattr(option, "_type", None)
    return names.get(kind, getattr(kind, "__name__", "any")) if kind else "any"


def _toml_like(value: Any) -> str:
    """A default as the reader writes it in ``mkdocs.yml``: ``""``, ``[]``, ``reference``."""
    if value == "":
        return '""'
    if isinstance(value, list):
        return "[" + ", ".join(map(str, value)) + "]"
    return str(value).lower() if isinstance(value, bool) else str(value)


def option_rows(
    schema: Iterable[tuple[str, Any]], help_by_name: Mapping[str, str]
) -> list[tuple[str, str, str, str]]:
    """``(option, type, default, meaning)`` for each option of a plugin's config schema.

    Raises ValueError naming an option without help, or help for an option that is gone.
    """
    rows = []
    names = []
    for name, option in schema:
        names.append(name)
        if name not in help_by_name:
            raise ValueError(f"the plugin option {name!r} has no help text; add it to OPTION_HELP")
        rows.append((name, _type_name(option), _toml_like(option.default), help_by_name[name]))
    stale = sorted(set(help_by_name) - set(names))
    if stale:
        raise ValueError(f"OPTION_HELP describes options the plugin lacks: {', '.join(stale)}")
    return rows


def _table(heads: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """A Markdown table; the first column and the defaults are code, the rest escaped text."""
    lines = ["| " + " | ".join(heads) + " |", "|" + " --- |" * len(heads)]
    for name, kind, default, meaning in rows:
        cells = [f"`{name}`", escape_markdown(kind), _code(default), meaning.replace("|", "\\|")]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _code(text: str) -> str:
    """``text`` as a code span (a default that is prose stays prose)."""
    if text.startswith(("the ", "true when")):
        return escape_markdown(text)
    return f"`` {text} ``" if "`" in text else f"`{text}`"


def render_config_page(
    schema: Iterable[tuple[str, Any]],
    help_by_name: Mapping[str, str],
    settings: Sequence[Setting],
) -> str:
    """The whole page: the plugin's options, then each ``[tool.wpgate.*]`` table's keys."""
    parts = [
        _INTRO,
        "## The mkdocs plugin (`mkdocs.yml`)\n",
        "```yaml\nplugins:\n  - search\n  - wpgate:\n      roadmap: ROADMAP.md\n```\n",
        "Every option is optional; pages are relative to `docs_dir`.\n",
        _table(("Option", "Type", "Default", "Meaning"), option_rows(schema, help_by_name)),
        "",
        "## `pyproject.toml`: `[tool.wpgate]`\n",
        "Where the documents live is set once in `[tool.wpgate.docs]`, for the linters and the "
        "plugin alike. A malformed table, an unknown rule or a wrong trailer option stops "
        "`wpgate` with exit status 2 and a message that names the key.\n",
    ]
    tables: dict[str, list[Setting]] = {}
    for setting in settings:
        tables.setdefault(setting.table, []).append(setting)
    for table, members in tables.items():
        header = f"[tool.wpgate.{table}]" if table else "[tool.wpgate]"
        parts.append(f"### `{header}`\n")
        rows = [(s.key, s.type, s.default, s.help) for s in members]
        parts.append(_table(("Key", "Type", "Default", "Meaning"), rows))
        parts.append("")
    return "\n".join(parts)
