"""Reference pages from code: click help, module docstrings, lint rules."""

from __future__ import annotations

from collections.abc import Iterator

import click
import pytest

from wpgate._model import Finding, Rule
from wpgate.errors import ReferenceBuildError
from wpgate.site import _reference


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def tool() -> None:
    """A fixture tool."""


@tool.command()
@click.argument("rule_id")
def explain(rule_id: str) -> None:
    """Explain RULE_ID."""


@tool.command(hidden=True)
def secret() -> None:
    """Not shown."""


def _check(parsed: object, config: object) -> Iterator[Finding]:
    """Refuse `x` (and ```fenced``` text)."""
    yield from ()


RULE = Rule("WPG999", "no-x", "No <x> in *titles*.", _check, False, {"max": 3})


def test_cli_page_has_every_visible_command() -> None:
    text = _reference.render_cli_page(tool, "tool")
    assert text.startswith("# Command-line reference: `tool`")
    assert [line for line in text.splitlines() if line.startswith("##")] == [
        "## `tool`",
        "### `tool explain`",
    ]
    assert "Usage: tool explain [OPTIONS] RULE_ID" in text
    # Subcommands inherit the group's context settings, as at the terminal.
    assert text.count("-h, --help") == 2
    assert "secret" not in text.split("### `tool explain`")[0].split("Commands:")[1]


def test_api_page_is_mkdocstrings_directives() -> None:
    text = _reference.render_api_page("musgd", ["MuSGD", "param_groups"])
    assert text == (
        "# API reference: `musgd`\n\n"
        "::: musgd\n    options:\n      members: false\n      show_root_heading: false\n\n"
        "::: musgd.MuSGD\n\n::: musgd.param_groups\n"
    )
    # No members: the module whole. Nothing is imported either way.
    assert (
        _reference.render_api_page("pkg.mod", []) == "# API reference: `pkg.mod`\n\n::: pkg.mod\n"
    )


@pytest.mark.parametrize(
    ("module", "members", "message"),
    [
        ("musgd x", [], "'musgd x' is not a dotted module name"),
        ("musgd", ["MuSGD", "a-b"], "api_members 'a-b' are not names"),
    ],
)
def test_api_page_refuses_what_is_not_a_name(module: str, members: list[str], message: str) -> None:
    with pytest.raises(ReferenceBuildError, match=message):
        _reference.render_api_page(module, members)


def test_rule_page_and_index_escape_the_summary() -> None:
    page = _reference.render_rule_page(RULE)
    assert page.startswith("# WPG999 no-x\n")
    assert "No &#60;x&#62; in &#42;titles&#42;&#46;" not in page  # '.' stays readable
    assert "No &#60;x&#62; in &#42;titles&#42;." in page
    assert "- Enabled by default: no" in page
    assert "    - `max`: `3`" in page
    # The docstring holds a ``` run: the fence around it is longer.
    assert "````text\nRefuse `x` (and ```fenced``` text).\n````" in page
    index = _reference.render_rules_index([RULE])
    assert "| [WPG999](wpg999.md) | no-x |" in index
    assert "No rule is registered" in _reference.render_rules_index([])


def test_import_target_errors() -> None:
    with pytest.raises(ReferenceBuildError, match="has no attribute 'nope'"):
        _reference.import_target("wpgate._model:nope")
    assert _reference.import_target("wpgate._model:RULES") is not None
