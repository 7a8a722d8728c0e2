"""Markdown rules (WPG6xx): traps of the pages the site renders that its strict build misses.

mkdocs renders Markdown with Python-Markdown, which differs from CommonMark (and GitHub) where
an adopter does not look: a list needs a blank line before it when it follows a paragraph, or
its items run on as one paragraph, and ``mkdocs build --strict`` says nothing.
"""

from __future__ import annotations

from collections.abc import Iterator

from wpgate._model import Finding, Rule, register
from wpgate.options import DocsLayout
from wpgate.parsers.markdown import MarkdownPages, list_interruptions
from wpgate.rules import MARKDOWN_LIST_BLANK_LINE, declared


def check_list_blank_line(pages: MarkdownPages, options: DocsLayout) -> Iterator[Finding]:
    """A list that follows a paragraph has a blank line before it (Python-Markdown needs one)."""
    yield from (f for f in pages.findings if f.rule_id == MARKDOWN_LIST_BLANK_LINE)
    for page in pages.pages:
        for line in list_interruptions(page.text):
            yield Finding(
                page.path,
                line,
                MARKDOWN_LIST_BLANK_LINE,
                "this list follows a paragraph line with no blank line between them; mkdocs "
                "(Python-Markdown) renders its items as part of that paragraph; add a blank "
                "line before the list",
            )


#: The Markdown rules: each check reads the pages of ``[tool.wpgate.docs] pages``.
CHECKS: tuple[Rule[MarkdownPages, DocsLayout], ...] = register(
    declared(MARKDOWN_LIST_BLANK_LINE, check_list_blank_line),
)
