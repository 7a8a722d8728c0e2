"""Tests for the work-package page parser."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from wpgate.parsers.work_packages import (
    format_work_package,
    id_from_filename,
    parse_work_package,
    sort_key,
)

PAGE = """---
id: "006"
title: "The site"
phase: 3
status: blocked
depends_on: ["005"]
gate: ["tests/x.py::test_y"]
reason: "waits for 005"
---

# WP-006
"""


def test_parses_a_page_into_a_record() -> None:
    parsed = parse_work_package(
        PAGE, "docs/work_packages/wp-006.md", syntax_rule="WPG301", schema_rule="WPG302"
    )
    assert parsed.findings == ()
    wp = parsed.package
    assert wp is not None
    assert (wp.id, wp.title, wp.phase, wp.status) == ("006", "The site", 3, "blocked")
    assert (wp.depends_on, wp.gate, wp.reason, wp.superseded_by) == (
        ("005",),
        ("tests/x.py::test_y",),
        "waits for 005",
        None,
    )
    assert wp.line_of("gate") == 7
    assert wp.body_line == 10


def test_schema_findings_name_the_key_line() -> None:
    text = PAGE.replace('id: "006"', "id: 006").replace("status: blocked", "status: finished")
    text = text.replace('depends_on: ["005"]', "depends_on: [5]").replace("phase: 3", "phase: x")
    text = text.replace('reason: "waits for 005"', "colour: red")
    parsed = parse_work_package(text, "p.md", syntax_rule="WPG301", schema_rule="WPG302")
    assert parsed.package is None
    assert [(f.line, f.rule_id) for f in parsed.findings] == [
        (8, "WPG302"),
        (2, "WPG302"),
        (4, "WPG302"),
        (5, "WPG302"),
        (6, "WPG302"),
    ]
    messages = " ".join(f.message for f in parsed.findings)
    assert "unknown front-matter key `colour`" in messages
    assert 'quote it: the id as written, e.g. "006"' in messages  # "p.md" names no id
    assert "'finished' is not one of" in messages


def test_an_unquoted_id_is_told_to_be_quoted_as_its_file_names_it() -> None:
    """YAML reads an unquoted 010 as the octal 8: the message had said to quote `"008"`."""
    text = PAGE.replace('id: "006"', "id: 010")
    parsed = parse_work_package(
        text, "docs/work_packages/wp-010.md", syntax_rule="WPG301", schema_rule="WPG302"
    )
    assert [f.message for f in parsed.findings] == [
        "`id` was read as the number 8 (YAML drops an unquoted id's leading zeros and reads 010 "
        'as octal); quote it: "010"'
    ]


@pytest.mark.parametrize(
    ("line", "said"),
    [
        ("depends_on:", "`depends_on` is empty; write the list of ids, or `[]` for none"),
        ("gate:", "`gate` is empty; write the list of pytest node ids, or `[]` for none"),
        (
            'gate: ""',
            "`gate` is an empty string; write the list of pytest node ids, or `[]` for none",
        ),
    ],
)
def test_a_required_list_left_empty_is_a_finding(line: str, said: str) -> None:
    """`gate: null` and `gate: ""` passed with no finding where the spec asks for a list."""
    key = line.split(":", 1)[0]
    text = "\n".join(line if ln.startswith(f"{key}:") else ln for ln in PAGE.split("\n"))
    parsed = parse_work_package(text, "p.md", syntax_rule="WPG301", schema_rule="WPG302")
    assert [f.message for f in parsed.findings] == [said]


def test_missing_keys_and_extra_keys_option() -> None:
    parsed = parse_work_package(
        '---\nid: "001"\ntitle: t\nphase: 1\nstatus: todo\nowner: me\n---\n',
        "p.md",
        syntax_rule="WPG301",
        schema_rule="WPG302",
    )
    assert parsed.package is not None  # depends_on and gate are reported but not fatal
    assert [f.message.split(";")[0] for f in parsed.findings] == [
        "the front matter has no `depends_on`",
        "the front matter has no `gate`",
        "unknown front-matter key `owner`",
    ]
    full = '---\nid: "001"\ntitle: t\nphase: 1\nstatus: todo\ndepends_on: []\ngate: []\n'
    assert (
        parse_work_package(
            full + "owner: me\n---\n",
            "p.md",
            ("owner",),
            syntax_rule="WPG301",
            schema_rule="WPG302",
        ).findings
        == ()
    )


def test_scaffold_round_trips() -> None:
    text = format_work_package("012b", 'A "quoted": title', 2)
    parsed = parse_work_package(
        text, "docs/work_packages/wp-012b.md", syntax_rule="WPG301", schema_rule="WPG302"
    )
    assert parsed.findings == ()
    assert parsed.package is not None
    assert (parsed.package.id, parsed.package.title, parsed.package.status) == (
        "012b",
        'A "quoted": title',
        "todo",
    )


def test_file_names_and_order() -> None:
    assert id_from_filename("wp-197b.md") == "197b"
    assert id_from_filename("wp-19.md") is None
    assert sorted(["198", "197b", "197", "010"], key=sort_key) == ["010", "197", "197b", "198"]


@given(st.text(max_size=300))
def test_parser_never_raises(text: str) -> None:
    parsed = parse_work_package(
        "---\n" + text + "\n---\n",
        "docs/work_packages/wp-001.md",
        syntax_rule="WPG301",
        schema_rule="WPG302",
    )
    assert parsed.package is not None or parsed.findings
