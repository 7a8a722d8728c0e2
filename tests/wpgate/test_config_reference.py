"""The generated configuration reference agrees with the code that reads each key."""

from __future__ import annotations

import dataclasses
import re
import tomllib
from pathlib import Path

import pytest

from wpgate._config import SETTINGS, Setting, load_config
from wpgate.cli import main
from wpgate.options import (
    ChangelogOptions,
    DocsLayout,
    EvidenceOptions,
    LinterOptions,
    ProvenanceOptions,
    WorkPackageOptions,
    kind_of,
)
from wpgate.rules.trailers import TrailerOptions
from wpgate.site._config_reference import option_rows, render_config_page
from wpgate.site.plugin import OPTION_HELP, WpgateConfig

SRC = Path(__file__).resolve().parents[2] / "src" / "wpgate"
RECORDS: tuple[type[LinterOptions], ...] = (
    DocsLayout,
    ProvenanceOptions,
    WorkPackageOptions,
    EvidenceOptions,
    ChangelogOptions,
    TrailerOptions,
)
# A section read by name, past the records: `config.section("x")` or a `.get("key")` on it.
_AD_HOC_RE = re.compile(r"\.section\(\s*\"\w+\"|options\.get\(")


def _settings(table: str) -> dict[str, Setting]:
    return {s.key: s for s in SETTINGS if s.table == table}


def _literal(default: str) -> object:
    return tomllib.loads(f"value = {default}")["value"]


def _as_toml_value(value: object) -> object:
    return list(value) if isinstance(value, tuple) else value


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: r.TABLE)
def test_documented_keys_kinds_and_defaults_are_the_records_fields(
    record: type[LinterOptions],
) -> None:
    documented = _settings(record.TABLE)
    fields = {f.name: f for f in dataclasses.fields(record)}  # type: ignore[arg-type]
    assert set(documented) == set(fields)
    for key, setting in documented.items():
        assert setting.kind == kind_of(fields[key]), key
        if fields[key].default is None:  # decided at run time, which the default says in words
            assert not setting.default.startswith(("[", '"')), key
            continue
        assert _literal(setting.default) == _as_toml_value(fields[key].default), key


def test_every_key_the_linters_read_is_documented_and_every_documented_key_is_read() -> None:
    tables = {s.table for s in SETTINGS} - {"", "rules"}
    assert sorted(r.TABLE for r in RECORDS) == sorted(tables)
    sources = {p: p.read_text(encoding="utf-8") for p in sorted(SRC.rglob("*.py"))}
    readers = "\n".join(
        text for path, text in sources.items() if path.name not in {"options.py", "_config.py"}
    )
    assert _AD_HOC_RE.findall(readers) == [], "read a section through its options record"
    documented = {s.key for s in SETTINGS if s.table not in {"", "rules"}}
    never_read = {key for key in documented if not re.search(rf"\.{key}\b", readers)}
    assert never_read == set(), f"documented, never read: {never_read}"


def test_every_documented_default_is_accepted_by_the_loader(tmp_path: Path) -> None:
    # Writing each key at its documented default keeps the repository's behaviour: whatever
    # validation the loader grows must accept the reference's own values.
    lines: dict[str, list[str]] = {}
    for setting in SETTINGS:
        if setting.table == "rules" or setting.default.startswith(("the ", "true when")):
            continue
        lines.setdefault(setting.table, []).append(f"{setting.key} = {setting.default}")
    toml = "\n".join(lines.pop(""))
    for table, entries in lines.items():
        toml += f"\n[tool.wpgate.{table}]\n" + "\n".join(entries)
    assert main(["init", "--root", str(tmp_path)]) == 0
    (tmp_path / "pyproject.toml").write_text(f"[tool.wpgate]\n{toml}\n", encoding="utf-8")
    config = load_config(tmp_path)
    assert TrailerOptions.from_config(config) == TrailerOptions()
    assert main(["check", "--root", str(tmp_path)]) == 0


def test_the_page_lists_every_plugin_option_and_every_key() -> None:
    page = render_config_page(WpgateConfig._schema, OPTION_HELP, SETTINGS)
    for name, _ in WpgateConfig._schema:
        assert f"| `{name}` |" in page
    for setting in SETTINGS:
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
