"""Each linter's options record: built from its table once per configuration, checked."""

from __future__ import annotations

from pathlib import Path

import pytest

from wpgate._config import load_config
from wpgate.docs_options import (
    ChangelogOptions,
    EvidenceOptions,
    ProvenanceOptions,
    WorkPackageOptions,
)
from wpgate.options import ConfigError, DocsLayout, LinterOptions


def test_a_lone_string_where_a_list_may_stand_is_a_one_item_tuple() -> None:
    assert DocsLayout.from_section({"claims": "x/*.md"}).claims == ("x/*.md",)
    assert ProvenanceOptions.from_section({"licences": ["MIT"]}).licences == ("MIT",)
    assert WorkPackageOptions.from_section({}) == WorkPackageOptions()


def test_a_configuration_builds_each_record_once(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[tool.wpgate.changelog]\nignore = "pkg.gone"\n', encoding="utf-8"
    )
    config = load_config(tmp_path)
    first = ChangelogOptions.from_config(config)
    assert first == ChangelogOptions(ignore=("pkg.gone",))
    assert ChangelogOptions.from_config(config) is first
    assert ChangelogOptions.from_config(None) == ChangelogOptions()
    # Switching rules off for one run keeps the table, so the same record serves.
    assert ChangelogOptions.from_config(config.ignoring(["WPG502"])) is first


def test_a_table_is_parsed_and_checked_when_loaded(tmp_path: Path) -> None:
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[tool.wpgate.docs]\nclaims = "x/*.md"\n', encoding="utf-8")
    config = load_config(tmp_path)
    assert config.options(DocsLayout).claims == ("x/*.md",)
    # A value of its kind that is still wrong is refused at load, even by a command (such as
    # `wpgate docs`) that never reads the table: the run would otherwise pass on it.
    pyproject.write_text('[tool.wpgate.trailers]\nbot_authors = ["[bot"]\n', encoding="utf-8")
    with pytest.raises(ConfigError, match=r"trailers\.bot_authors: '\[bot' is not a regular"):
        load_config(tmp_path)
    pyproject.write_text('[tool.wpgate.trailers]\nbot_authors = "x"\n', encoding="utf-8")
    with pytest.raises(ConfigError, match=r"trailers\.bot_authors: must be a list of strings"):
        load_config(tmp_path)


@pytest.mark.parametrize(
    ("table", "key", "item"),
    [
        ("trailers", "types", "commit type"),
        ("provenance", "licences", "licence"),
        ("provenance", "code_roles", "role"),
        ("docs", "claims", "glob"),
        ("docs", "pages", "glob"),
    ],
)
def test_an_empty_list_that_would_refuse_or_skip_everything_is_refused(
    tmp_path: Path, table: str, key: str, item: str
) -> None:
    # `types = []` made every subject "not a commit type; use one of  (...)".
    (tmp_path / "wpgate.toml").write_text(f"[{table}]\n{key} = []\n", encoding="utf-8")
    with pytest.raises(ConfigError) as error:
        load_config(tmp_path)
    assert (error.value.source, error.value.key) == ("wpgate.toml", f"{table}.{key}")
    assert error.value.detail.startswith(
        f"is empty, but needs at least one {item}; list them, or remove the key to use the "
        "default (["
    )


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("evidence", "../../etc"),
        ("work_packages", "/etc"),
        ("changelog", "docs/../../CHANGELOG.md"),
        ("claims", ["docs/*.md", "..\\other\\*.md"]),
        ("provenance", "C:/PROVENANCE.md"),
    ],
)
def test_a_docs_path_outside_the_repository_is_refused_where_it_is_read(
    tmp_path: Path, key: str, value: object
) -> None:
    """Tried as a stranger: ``evidence = "../../etc"`` checked nothing and passed."""
    config_file = tmp_path / "pyproject.toml"
    config_file.write_text(f"[tool.wpgate.docs]\n{key} = {value!r}\n".replace("'", '"'))
    with pytest.raises(ConfigError, match=rf"docs\.{key}: .* leaves the repository"):
        DocsLayout.from_config(load_config(tmp_path))
    assert DocsLayout.from_section({"evidence": "docs/my..evidence"}).evidence


@pytest.mark.parametrize(
    ("record", "section", "message"),
    [
        (DocsLayout, {"claims": 5}, "tool.wpgate.docs.claims: must be a string or a list"),
        (ProvenanceOptions, {"history": "no"}, "tool.wpgate.provenance.history: must be true"),
        (WorkPackageOptions, {"extra": []}, "tool.wpgate.wp.extra: is not a known key of"),
        (EvidenceOptions, {"collect": 1}, "tool.wpgate.evidence.collect: must be true or false"),
        (ChangelogOptions, {"ignore": [1]}, "tool.wpgate.changelog.ignore: must be a string"),
    ],
)
def test_a_record_built_from_a_wrong_section_names_the_key(
    record: type[LinterOptions], section: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError) as error:
        record.from_section(section)
    assert message in str(error.value)


def test_a_check_run_builds_each_record_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from wpgate.cli import main

    assert main(["init", "--root", str(tmp_path)]) == 0
    built: list[str] = []
    # `parse` converts a table's values; `load_config` calls it for the tables the file has,
    # `Config.options` for the others.
    original = LinterOptions.parse.__func__  # type: ignore[attr-defined]

    def counted(cls: type[LinterOptions], section: object) -> LinterOptions:
        built.append(cls.__name__)
        return original(cls, section)  # type: ignore[no-any-return]

    monkeypatch.setattr(LinterOptions, "parse", classmethod(counted))
    assert main(["check", "--root", str(tmp_path)]) == 0
    assert len(built) == len(set(built)), built
    # Every docs linter ran and read its options; none built a record twice.
    assert {"DocsLayout", "ProvenanceOptions", "WorkPackageOptions", "EvidenceOptions"} <= set(
        built
    )


def test_toml_strings_escape_as_json_does() -> None:
    import json

    from wpgate.options import toml_string

    every = "".join(chr(code) for code in range(0x800))
    for text in (every, "", 'a "quoted" \\ path\n', "tab\there\x7f\x1b[0m", "é ü 中"):
        assert toml_string(text) == json.dumps(text, ensure_ascii=False)
