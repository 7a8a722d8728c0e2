"""Tests for loading `[tool.wpgate]`: defaults, rule switches, sections and errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from wpgate._config import ConfigError, load_config


def _write(tmp_path: Path, text: str) -> Path:
    (tmp_path / "pyproject.toml").write_text(text, encoding="utf-8")
    return tmp_path


def test_missing_file_gives_defaults(tmp_path: Path) -> None:
    config = load_config(tmp_path)
    assert config.history_start == ""
    assert config.section("trailers") == {}
    assert config.enabled("WPG104")
    assert not config.enabled("WPG108")  # off by default
    assert config.enabled("WPG999")  # unknown ids are not silenced


def test_switches_by_id_or_name_and_sections(tmp_path: Path) -> None:
    root = _write(
        tmp_path,
        '[tool.wpgate]\nhistory_start = "abc1234"\n'
        "[tool.wpgate.rules]\nsigned-off-by = true\nWPG102 = false\n"
        '[tool.wpgate.trailers]\ntypes = ["feat"]\n',
    )
    config = load_config(root)
    assert config.history_start == "abc1234"
    assert config.enabled("WPG108")
    assert not config.enabled("wpg102")
    assert dict(config.section("trailers")) == {"types": ["feat"]}
    with pytest.raises(TypeError):
        config.section("trailers")["types"] = []  # type: ignore[index]


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("[tool.wpgate\n", "pyproject.toml"),
        ('[tool]\nwpgate = "x"\n', "tool.wpgate"),
        ("[tool.wpgate]\nhistory_start = 3\n", "tool.wpgate.history_start"),
        ("[tool.wpgate]\ncolour = 3\n", "tool.wpgate.colour"),
        ("[tool.wpgate.rules]\nWPG104 = 1\n", "tool.wpgate.rules.WPG104"),
        ("[tool.wpgate.rules]\nno-such-rule = true\n", "tool.wpgate.rules.no-such-rule"),
        ("[tool.wpgate]\nrules = 3\n", "tool.wpgate.rules"),
    ],
)
def test_errors_name_the_key(tmp_path: Path, text: str, key: str) -> None:
    with pytest.raises(ConfigError) as error:
        load_config(_write(tmp_path, text))
    assert error.value.key == key
    assert key in str(error.value)


def test_section_that_is_not_a_table(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as error:
        load_config(_write(tmp_path, "[tool.wpgate]\ntrailers = 3\n"))
    assert error.value.key == "tool.wpgate.trailers"
