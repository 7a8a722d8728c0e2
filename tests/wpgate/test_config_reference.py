"""The configuration reference is derived from one declaration, the option records' fields."""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

import pytest

from wpgate._config import load_config, records, settings
from wpgate.cli import main
from wpgate.options import KINDS, LinterOptions
from wpgate.rules import register_all
from wpgate.rules.trailers import TrailerOptions
from wpgate.site._config_reference import option_rows, render_config_page
from wpgate.site.plugin import OPTION_HELP, WpgateConfig

SRC = Path(__file__).resolve().parents[2] / "src" / "wpgate"
# A section read by name, past the records: `config.section("x")` or a `.get("key")` on it.
_AD_HOC_RE = re.compile(r"\.section\(\s*\"\w+\"|options\.get\(")
# The tables no record holds: their settings are declared where `_config` reads them.
_UNRECORDED_TABLES = {"", "rules"}


def _records() -> set[type[LinterOptions]]:
    """Every options record the package defines (each rule module imported)."""
    register_all()
    found: set[type[LinterOptions]] = set()
    todo = [LinterOptions]
    while todo:
        for sub in todo.pop().__subclasses__():
            if sub.__module__.startswith("wpgate.") and sub not in found:
                found.add(sub)
                todo.append(sub)
    return found


def _literal(default: str) -> object:
    return tomllib.loads(f"value = {default}")["value"]


def _as_toml_value(value: object, kind: str) -> object:
    if kind == "str_map":  # a table, held as a tuple of (key, value) pairs
        return dict(value)  # type: ignore[call-overload]
    return list(value) if isinstance(value, tuple) else value


def test_every_record_is_published_and_parsed_by_the_loader() -> None:
    assert _records() == set(records())
    tables = [r.TABLE for r in records()]
    assert len(tables) == len(set(tables))
    assert not _UNRECORDED_TABLES & set(tables)


# (The name is older than the derivation: a commit's Gate trailer names it.)
@pytest.mark.parametrize("record", records(), ids=lambda r: r.TABLE)
def test_documented_keys_kinds_and_defaults_are_the_records_fields(
    record: type[LinterOptions],
) -> None:
    for item in record.fields():
        assert item.metadata.get("kind") in set(KINDS) - {"rule"}, item.name
        assert str(item.metadata.get("help", "")).strip(), f"{item.name} has no help"
    for setting, item in zip(record.settings(), record.fields(), strict=True):
        assert (setting.table, setting.key) == (record.TABLE, item.name)
        if item.default is None:  # decided at run time, which the default says in words
            assert not setting.default.startswith(("[", '"', "None")), item.name
            continue
        # The published default is the field's own, written as TOML.
        assert _literal(setting.default) == _as_toml_value(item.default, setting.kind), item.name


def _written_settings(path: Path) -> list[tuple[str, object]]:
    """``(file, table)`` for each ``Setting(...)`` in ``path`` whose table is written out."""
    found: list[tuple[str, object]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Setting"):
            continue
        tables = [k.value for k in node.keywords if k.arg == "table"] + node.args[:1]
        found += [(path.name, t.value) for t in tables if isinstance(t, ast.Constant)]
    return found


def test_each_key_is_declared_once_and_settings_are_derived() -> None:
    # A `Setting(...)` written out with its table is a declaration; one for a record's table
    # would declare a key a second time, beside the record's field.
    written = [w for path in sorted(SRC.rglob("*.py")) for w in _written_settings(path)]
    assert written, "the scan sees no written-out Setting, so it could not fail"
    assert [w for w in written if w[1] not in _UNRECORDED_TABLES] == []
    derived = [s for r in records() for s in r.settings()]
    assert [s for s in settings() if s.table not in _UNRECORDED_TABLES] == derived
    keys = [(s.table, s.key) for s in settings()]
    assert len(keys) == len(set(keys))


def test_every_key_the_linters_read_is_documented_and_every_documented_key_is_read() -> None:
    tables = {s.table for s in settings()} - {"", "rules"}
    assert sorted(r.TABLE for r in records()) == sorted(tables)
    sources = {p: p.read_text(encoding="utf-8") for p in sorted(SRC.rglob("*.py"))}
    readers = "\n".join(
        text for path, text in sources.items() if path.name not in {"options.py", "_config.py"}
    )
    assert _AD_HOC_RE.findall(readers) == [], "read a section through its options record"
    # A key is read as an attribute of its record: by a linter, or by the record's own methods
    # (`TrailerOptions.bot_pattern` reads `bot_authors`).
    read = {
        node.attr
        for path, text in sources.items()
        if path.name != "_config.py"
        for node in ast.walk(ast.parse(text))
        if isinstance(node, ast.Attribute)
    }
    documented = {s.key for s in settings() if s.table not in {"", "rules"}}
    never_read = documented - read
    assert never_read == set(), f"documented, never read: {never_read}"


def test_every_documented_default_is_accepted_by_the_loader(tmp_path: Path) -> None:
    # Writing each key at its documented default keeps the repository's behaviour: whatever
    # validation the loader grows must accept the reference's own values.
    lines: dict[str, list[str]] = {}
    for setting in settings():
        if setting.table == "rules" or setting.default.startswith(("the ", "true when")):
            continue
        lines.setdefault(setting.table, []).append(f"{setting.key} = {setting.default}")
    toml = "\n".join(lines.pop(""))
    for table, entries in lines.items():
        toml += f"\n[tool.wpgate.{table}]\n" + "\n".join(entries)
    assert main(["init", "--root", str(tmp_path)]) == 0
    # init wrote a wpgate.toml (no pyproject.toml here), which would come first: the defaults
    # go to pyproject.toml instead.
    (tmp_path / "wpgate.toml").unlink()
    (tmp_path / "pyproject.toml").write_text(f"[tool.wpgate]\n{toml}\n", encoding="utf-8")
    config = load_config(tmp_path)
    assert config.source == "pyproject.toml"
    assert TrailerOptions.from_config(config) == TrailerOptions()
    assert main(["check", "--root", str(tmp_path)]) == 0


def test_the_page_lists_every_plugin_option_and_every_key() -> None:
    page = render_config_page(WpgateConfig._schema, OPTION_HELP, settings())
    for name, _ in WpgateConfig._schema:
        assert f"| `{name}` |" in page
    for setting in settings():
        header = f"[tool.wpgate.{setting.table}]" if setting.table else "[tool.wpgate]"
        section = page.split(f"### `{header}`", 1)[1].split("###", 1)[0]
        assert f"| `{setting.key}` |" in section, setting.dotted
    assert "| `api_members` | list of strings | `[]` |" in page
    assert "| `config_reference` | boolean | `true` |" in page


def test_plugin_options_without_help_or_help_without_an_option_are_refused() -> None:
    schema = WpgateConfig._schema
    with pytest.raises(ValueError, match="'roadmap' has no help text"):
        option_rows(schema, {k: v for k, v in OPTION_HELP.items() if k != "roadmap"})
    with pytest.raises(ValueError, match="lacks: gone"):
        option_rows(schema, {**OPTION_HELP, "gone": "an option removed from the plugin"})
