"""Tests for loading `[tool.wpgate]`: defaults, rule switches, sections and errors."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
from git_helpers import git, new_repository
from hypothesis import given, settings
from hypothesis import strategies as st

from wpgate import __version__
from wpgate._config import (
    ConfigError,
    load_config,
    moving_history_start,
    schema,
    unknown_history_start,
)
from wpgate.rules.trailers import TrailerOptions


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


@pytest.mark.parametrize(
    ("text", "key", "first"),
    [
        ('subject-format = "warning"\nWPG101 = "error"\n', "WPG101", "subject-format"),
        ('WPG101 = "error"\nsubject-format = false\n', "subject-format", "WPG101"),
        ("WPG101 = true\nwpg101 = true\n", "wpg101", "WPG101"),
    ],
)
def test_a_rule_set_twice_is_refused(tmp_path: Path, text: str, key: str, first: str) -> None:
    """Its id and its name both set: which one won depended on their order, silently."""
    with pytest.raises(ConfigError) as error:
        load_config(_write(tmp_path, "[tool.wpgate.rules]\n" + text))
    assert error.value.key == f"tool.wpgate.rules.{key}"
    assert f"which `{first}` already sets; keep one of them" in str(error.value)


def test_section_that_is_not_a_table(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as error:
        load_config(_write(tmp_path, "[tool.wpgate]\ntrailers = 3\n"))
    assert error.value.key == "tool.wpgate.trailers"


_TOML_VALUE = st.one_of(
    st.booleans(),
    st.integers(min_value=-(10**6), max_value=10**6),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(alphabet="abcWPG012-_ ", max_size=12),
    st.lists(st.sampled_from(["a", "WPG101", "1"]), max_size=3),
)
_TABLES = st.sampled_from(
    ["", "docs", "trailers", "provenance", "wp", "evidence", "changelog", "rules", "trailer"]
)
_KEYS = st.sampled_from(
    [
        "history_start",
        "claims",
        "types",
        "history",
        "extra_keys",
        "collect",
        "ignore",
        "WPG102",
        "subject-period",
        "max_subject_length",
        "revert_exempt",
        "nope",
    ]
)


def _toml(value: object) -> str:
    """A TOML literal for one generated value."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return '"' + value + '"'
    assert isinstance(value, list)
    return "[" + ", ".join(_toml(v) for v in value) + "]"


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(_TABLES, _KEYS, _TOML_VALUE), max_size=4, unique_by=lambda t: t[:2]))
def test_any_config_loads_or_names_its_key(entries: list[tuple[str, str, object]]) -> None:
    with tempfile.TemporaryDirectory() as folder:
        tables: dict[str, list[str]] = {}
        for table, key, value in entries:
            tables.setdefault(table, []).append(f"{key} = {_toml(value)}")
        text = "".join(
            f"[tool.wpgate{'.' + name if name else ''}]\n" + "\n".join(lines) + "\n"
            for name, lines in sorted(tables.items())
        )
        root = _write(Path(folder), text)
        error_key = _error_key(lambda: TrailerOptions.from_config(load_config(root)))
    # Every wrong setting is a ConfigError naming its key (exit 2), never another exception.
    assert error_key is None or error_key.startswith(("tool.wpgate", "pyproject.toml"))


def _error_key(load: Callable[[], object]) -> str | None:
    """The key a ConfigError names, or None when ``load`` succeeds."""
    try:
        load()
    except ConfigError as exc:
        return exc.key
    return None


def test_every_table_and_kind_is_in_the_schema() -> None:
    assert set(schema()) == {
        "",
        "docs",
        "trailers",
        "provenance",
        "wp",
        "evidence",
        "changelog",
        "gates",
        "output",
        "rules",
    }
    kinds = {setting.kind for table in schema().values() for setting in table.values()}
    assert kinds == {"str", "bool", "int", "str_list", "str_or_list", "str_map"}
    assert set(schema()["trailers"]) <= {item.name for item in TrailerOptions.fields()}


def test_a_wpgate_toml_holds_the_tables_at_the_top_level(tmp_path: Path) -> None:
    (tmp_path / "wpgate.toml").write_text(
        'history_start = "abc1234"\n[trailers]\nrequired = ["WP"]\n[gates]\nci_jobs = ["e2e"]\n',
        encoding="utf-8",
    )
    config = load_config(tmp_path)
    assert config.source == "wpgate.toml"
    assert config.history_start == "abc1234"
    assert TrailerOptions.from_config(config).required == ("WP",)
    assert config.describe_source() == ["configuration: wpgate.toml"]


def test_the_first_file_that_configures_wpgate_is_read(tmp_path: Path) -> None:
    # A pyproject.toml without [tool.wpgate] does not count; a dedicated file does, even empty.
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n', encoding="utf-8")
    assert load_config(tmp_path).source == ""
    assert load_config(tmp_path).describe_source()[0].startswith("configuration: none found")
    (tmp_path / "pyproject.toml").write_text(
        '[tool.wpgate.trailers]\nrequired = ["Gate"]\n', encoding="utf-8"
    )
    assert load_config(tmp_path).source == "pyproject.toml"
    (tmp_path / "wpgate.toml").write_text("", encoding="utf-8")
    (tmp_path / ".wpgate.toml").write_text('[trailers]\nrequired = ["WP"]\n', encoding="utf-8")
    config = load_config(tmp_path)
    assert (config.source, config.unread) == (".wpgate.toml", ("wpgate.toml", "pyproject.toml"))
    assert TrailerOptions.from_config(config).required == ("WP",)
    assert config.describe_source()[1] == (
        "configuration: wpgate.toml also configures wpgate and is not read (.wpgate.toml comes "
        "first); keep one of them"
    )


@pytest.mark.parametrize("name", [".wpgate.toml", "wpgate.toml", "pyproject.toml"])
def test_a_configuration_link_to_nothing_is_refused_not_taken_for_no_file(
    tmp_path: Path, name: str
) -> None:
    # The defaults would be linted silently while the adopter believes the file is read.
    (tmp_path / name).symlink_to("shared/wpgate.toml")
    with pytest.raises(ConfigError) as error:
        load_config(tmp_path)
    assert str(error.value) == (
        f"{name}: is a symbolic link to shared/wpgate.toml, which does not exist; point it at "
        "the configuration file or remove it"
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[trailers\n", "wpgate.toml: is not valid TOML"),
        ("[trailers]\nnope = 1\n", "wpgate.toml: trailers.nope: is not a known key of [trailers]"),
        ("colour = 3\n", "wpgate.toml: colour: is not a known setting or table; the tables are"),
        (
            '[tool.wpgate.trailers]\ntypes = ["x"]\n',
            "wpgate.toml: tool: in wpgate.toml the tables are top level: write [trailers], not "
            "[tool.wpgate.trailers] (that form belongs in pyproject.toml)",
        ),
        (
            '[tool.wpgate]\nhistory_start = "abc1234"\n',
            "wpgate.toml: tool: in wpgate.toml the tables are top level: write history_start "
            "at the top, not under [tool.wpgate] (that form belongs in pyproject.toml)",
        ),
        (
            '[tool.wpgate.gates]\nlanguages = ["go"]\n[tool.wpgate.docs]\npages = "x"\n',
            "wpgate.toml: tool: in wpgate.toml the tables are top level: write [gates], not "
            "[tool.wpgate.gates] (that form belongs in pyproject.toml)",
        ),
    ],
)
def test_errors_in_a_wpgate_toml_name_its_keys(tmp_path: Path, text: str, message: str) -> None:
    (tmp_path / "wpgate.toml").write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as error:
        load_config(tmp_path)
    assert str(error.value).startswith(message), str(error.value)


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ('[tool.wpgate.trailers]\nbot_authors = ["(x"]\n', "tool.wpgate.trailers.bot_authors"),
        ('[tool.wpgate.trailers]\nrequired = ["Nope"]\n', "tool.wpgate.trailers.required"),
        ('[tool.wpgate.output]\nhelp_uri = "x/{rule}"\n', "tool.wpgate.output.help_uri"),
        ('[tool.wpgate.gates]\nlanguages = ["cobol"]\n', "tool.wpgate.gates.languages"),
        ('[tool.wpgate.docs]\nregistry = "../x"\n', "tool.wpgate.docs.registry"),
    ],
)
def test_a_wrong_value_is_refused_when_the_file_is_loaded(
    tmp_path: Path, text: str, key: str
) -> None:
    # Loading checks every table the file holds, not only those a command reads: `wpgate
    # check` without history_start reads no trailer options, and must not pass a bad one.
    with pytest.raises(ConfigError) as error:
        load_config(_write(tmp_path, text))
    assert error.value.key == key


def test_unknown_history_start_is_asked_of_git_only_in_a_work_tree(tmp_path: Path) -> None:
    (tmp_path / "wpgate.toml").write_text('history_start = "v9.9.9"\n', encoding="utf-8")
    # No repository: git cannot answer, so the git error that led here stands.
    assert unknown_history_start(load_config(tmp_path)) is None
    root = new_repository(tmp_path)
    git(root, "commit", "-q", "--allow-empty", "-m", "feat: first")
    assert unknown_history_start(load_config(root)) is None  # none set
    (root / "wpgate.toml").write_text('history_start = "HEAD"\n', encoding="utf-8")
    assert unknown_history_start(load_config(root)) is None  # a commit git knows
    (root / "wpgate.toml").write_text('history_start = "v9.9.9"\n', encoding="utf-8")
    error = unknown_history_start(load_config(root))
    assert error is not None
    assert (error.source, error.key) == ("wpgate.toml", "history_start")
    assert str(error).startswith("wpgate.toml: history_start: `v9.9.9` is not a commit git knows")


def test_a_table_is_named_as_the_file_that_holds_it_writes_it(tmp_path: Path) -> None:
    assert load_config(tmp_path).table_in_file("docs") == (
        "[tool.wpgate.docs] in pyproject.toml (or [docs] in wpgate.toml)"
    )
    (tmp_path / "pyproject.toml").write_text("[tool.wpgate]\n", encoding="utf-8")
    assert load_config(tmp_path).table_in_file("docs") == "[tool.wpgate.docs] in pyproject.toml"
    (tmp_path / ".wpgate.toml").write_text("", encoding="utf-8")
    assert load_config(tmp_path).table_in_file("docs") == "[docs] in .wpgate.toml"


def test_an_unknown_rule_id_is_kept_with_one_warning_on_stderr(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "wpgate.toml").write_text(
        "[rules]\nWPG999 = false\nwpg998 = true\nWPG101 = false\n", encoding="utf-8"
    )
    config = load_config(tmp_path)
    assert not config.enabled("WPG999")  # a newer version's rule: kept, not fatal
    assert capsys.readouterr() == (
        "",
        "".join(
            f"wpgate: warning: [rules] in wpgate.toml names {rule_id}, which this wpgate "
            f"(version {__version__}) does not know; it is ignored: check for a typo (`wpgate "
            "explain --list` lists the rules), or upgrade wpgate if the rule is newer\n"
            for rule_id in ("WPG999", "WPG998")
        ),
    )
    assert not config.ignoring(["WPG997,wpg997", "WPG997", "WPG102"]).enabled("WPG997")
    assert capsys.readouterr().err == (
        f"wpgate: warning: --ignore names WPG997, which this wpgate (version {__version__}) "
        "does not know; it is ignored: check for a typo (`wpgate explain --list` lists the "
        "rules), or upgrade wpgate if the rule is newer\n"
    )


def test_a_history_start_that_moves_is_warned_about_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = new_repository(tmp_path)
    git(root, "commit", "-q", "--allow-empty", "-m", "feat: first")
    git(root, "commit", "-q", "--allow-empty", "-m", "feat: second")
    git(root, "tag", "v1", "HEAD~1")
    sha = git(root, "rev-parse", "HEAD~1")
    fix = "set it to the sha of the first governed commit (`git rev-parse {}` prints the one it"

    def warning(value: str) -> str | None:
        (root / "wpgate.toml").write_text(f'history_start = "{value}"\n', encoding="utf-8")
        return moving_history_start(load_config(root))

    for value in ("HEAD", "HEAD~1", "@", "main^", "main", "ORIG_HEAD"):
        text = warning(value)
        assert text is not None, value
        assert text.startswith(f"history_start in wpgate.toml names `{value}`"), text
        assert fix.format(value) in text
    assert "on the branch refs/heads/main, which moves" in (warning("main") or "")
    for value in (sha, sha[:7], "v1", "v1~0", "no-such-ref"):
        assert warning(value) is None, value
    capsys.readouterr()
    (root / "pyproject.toml").write_text('[tool.wpgate]\nhistory_start = "HEAD"\n')
    (root / "wpgate.toml").unlink()
    load_config(root)
    (err,) = capsys.readouterr().err.splitlines()  # said once, when the file is loaded
    assert err.startswith(
        "wpgate: warning: [tool.wpgate] history_start in pyproject.toml names `HEAD`, which "
        "moves with every commit (or checkout), so `wpgate check` lints a range that moves "
        "with it; set it to the sha"
    )
