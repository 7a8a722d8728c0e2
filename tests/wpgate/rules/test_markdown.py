"""Markdown rules: a list that follows a paragraph needs a blank line before it."""

from __future__ import annotations

from pathlib import Path

from wpgate._docs import lint_markdown, load_markdown_pages
from wpgate._model import RULES, Finding
from wpgate.options import DocsLayout
from wpgate.parsers.markdown import MarkdownPage, MarkdownPages
from wpgate.rules.markdown import CHECKS, check_list_blank_line

MESSAGE = (
    "this list follows a paragraph line with no blank line between them; mkdocs "
    "(Python-Markdown) renders its items as part of that paragraph; add a blank line before "
    "the list"
)


def test_the_rule_has_a_stable_id_and_name() -> None:
    (rule,) = CHECKS
    assert (rule.rule_id, rule.name, rule.enabled_by_default) == (
        "WPG601",
        "markdown-list-blank-line",
        True,
    )
    assert RULES.get("markdown-list-blank-line") is rule


def test_each_page_reports_its_lists_with_file_and_line() -> None:
    pages = MarkdownPages(
        (
            MarkdownPage("docs/a.md", "# A\n\nIt does three things:\n- one\n- two\n"),
            MarkdownPage("docs/b.md", "# B\n\n- fine\n\nSteps:\n\n1. fine too\n"),
            MarkdownPage("docs/c.md", "Then:\n1. first\n\n```\nProse\n- code\n```\n"),
        )
    )
    assert list(check_list_blank_line(pages, DocsLayout())) == [
        Finding("docs/a.md", 4, "WPG601", MESSAGE),
        Finding("docs/c.md", 2, "WPG601", MESSAGE),
    ]


def test_the_linter_reads_the_configured_pages(tmp_path: Path) -> None:
    (tmp_path / "docs" / "deep").mkdir(parents=True)
    (tmp_path / "docs" / "deep" / "page.md").write_text("Prose\n* item\n", encoding="utf-8")
    (tmp_path / "docs" / "bad.md").write_bytes(b"caf\xe9\n")
    (tmp_path / "README.md").write_text("Prose\n- GitHub renders this as a list\n")
    assert [(f.path, f.line, f.rule_id) for f in lint_markdown(tmp_path)] == [
        ("docs/bad.md", 1, "WPG601"),
        ("docs/deep/page.md", 2, "WPG601"),
    ]
    assert load_markdown_pages(tmp_path).findings[0].message == (
        "docs/bad.md is not valid UTF-8 (byte 3); re-save it as UTF-8"
    )
