"""Tests for the GFM table parser, the finder of lists that interrupt a paragraph and the code
span scanner."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st
from linear_time import assert_linear, needs_clocks

from wpgate._model import Finding
from wpgate.parsers.markdown import (
    code_spans,
    find_table,
    html_block_ends,
    html_block_kind,
    inline_links,
    list_interruptions,
    parse_markdown,
    split_row,
)

DOC = """# Title

## Sources

| ID | Name |
| --- | :-: |
| R1 | a \\| b |
| R2 | `code` |

```
| not | a |
| --- | --- |
```

## Other

| A |
|---|
| x | extra |
"""


def test_tables_found_by_heading_with_lines() -> None:
    doc = parse_markdown(DOC)
    assert [h.text for h in doc.headings] == ["Title", "Sources", "Other"]
    (sources,) = doc.tables_under("sources")
    assert sources.header == ("ID", "Name")
    assert sources.line == 5
    assert [(r.cells, r.line) for r in sources.rows] == [
        (("R1", "a | b"), 7),
        (("R2", "`code`"), 8),
    ]
    assert len(doc.tables) == 2  # the fenced table is not a table


def test_row_with_wrong_cell_count_is_a_finding() -> None:
    doc = parse_markdown(DOC)
    table, findings = find_table(doc, "x.md", "Other", ["A"], "WPG201")
    assert table is not None
    assert findings == [
        Finding(
            "x.md",
            19,
            "WPG201",
            "this row has 2 cells but the header has 1 (A); escape a literal pipe as `\\|` or "
            "fix the row",
        )
    ]


def test_missing_section_and_missing_table_and_wrong_header() -> None:
    doc = parse_markdown("# T\n\n## Empty\n\ntext\n")
    assert find_table(doc, "p.md", "Gone", ["ID"], "WPG201")[1][0].line == 0
    assert find_table(doc, "p.md", "Empty", ["ID"], "WPG201")[1][0].line == 3
    _, findings = find_table(parse_markdown(DOC), "p.md", "Sources", ["ID", "Other"], "WPG201")
    assert findings[0].line == 5
    assert "expected `| ID | Other |`" in findings[0].message


def test_header_without_delimiter_is_not_a_table() -> None:
    assert parse_markdown("| a | b |\n| c | d |\n").tables == ()


def test_split_row_edges() -> None:
    assert split_row("| a | b |") == ("a", "b")
    assert split_row("a | b") == ("a", "b")
    assert split_row("| a \\| b |") == ("a | b",)


@given(st.text(max_size=400))
def test_parser_never_raises(text: str) -> None:
    doc = parse_markdown(text)
    for table in doc.tables:
        assert all(row.line > table.line for row in table.rows)


@pytest.mark.parametrize(
    ("text", "lines"),
    [
        # A list under a paragraph line, each marker Python-Markdown knows.
        ("Some prose that introduces:\n- one\n- two\n", (2,)),
        ("Some prose:\n* one\n", (2,)),
        ("Some prose:\n+ one\n", (2,)),
        ("Some prose:\n1. one\n2. two\n", (2,)),
        ("Some prose:\n   - indented up to three spaces\n", (2,)),
        # Once per list, at its first item; a nested list inside it is the list's own.
        ("Intro:\n- one\n  - nested\n- two\n", (2,)),
        ("- one\n  text of one\n  - nested\n- two\n", ()),
        # Fine: a blank line, a heading, a setext heading, a thematic break, a table above.
        ("Some prose:\n\n- one\n", ()),
        ("## A heading\n- one\n", ()),
        ("A heading\n---------\n- one\n", ()),
        ("Some prose\n***\n- one\n", ()),
        ("| a |\n| - |\n| b |\n- one\n", ()),
        ("> quoted\n- one\n", ()),
        # Not a list: a dash or a number inside a sentence, a wrapped year, a bare marker.
        ("a - b and\nc - d, and the range 1 - 2\n", ()),
        ("In the year\n2019. the release\n", ()),
        ("Prose\n-not a list\n", ()),
        ("Prose\n-\n", ()),
        ("Prose\n1) is CommonMark's, not Python-Markdown's\n", ()),
        # Fenced code is not Markdown; a fence between prose and a list separates them.
        ("```\nprose\n- one\n```\n", ()),
        ("Prose:\n```\ncode\n```\n- one\n", ()),
        ("~~~~\nx\n~~~~\n- one\n", ()),
        # Front matter is YAML, whatever its lines look like.
        ("---\ntitle: x\ngate:\n  - tests/a.py::t\n---\n\n# X\n", ()),
        # A paragraph after a list, then a list: the second list is reported.
        ("- one\n\nProse again\n- two\n", (4,)),
        # An indented block (code, or an admonition's body) is not checked.
        ("    code line\n- one\n", ()),
        ("Prose\n\n  - item after a blank line\n  continued\n- next\n", ()),
        # Raw HTML blocks (CommonMark 0.30, §4.6) are HTML, whatever their lines look like:
        # kind 6 ends before a blank line, kinds 1-5 on the line with their end string.
        ('<div class="note">\nSteps:\n- install\n- run\n</div>\n', ()),
        ("Prose:\n<DIV>\nSteps:\n- one\n", ()),  # kind 6 interrupts a paragraph
        ("<div>\nSteps:\n\nAfter the block:\n- one\n", (5,)),
        ("<pre>\nSteps:\n\n- one\n</pre>\nProse\n- two\n", (7,)),
        ("<!--\nNotes:\n- hidden\n-->\n- shown\n", ()),
        ("<!-- one line -->\nProse\n- one\n", (3,)),
        ("<?php\nProse\n- one\n?>\n", ()),
        ("<!DOCTYPE\nhtml>\nProse\n- one\n", (4,)),
        ("<![CDATA[\nProse\n- one\n]]>\n", ()),
        # Kind 7: any complete tag alone on its line, but not inside a paragraph.
        ('<custom-box data-x="1">\nSteps:\n- one\n', ()),
        ("Prose\n<span>\n- one\n", (3,)),
        # A line that starts with inline HTML is a paragraph: its list is reported.
        ("<span>Steps:</span>\n- one\n", (2,)),
        ("<https://example.org> lists:\n- one\n", (2,)),
        # md_in_html: a `markdown` attribute makes the element's content Markdown again.
        ('<div class="grid" markdown>\nSteps:\n- one\n</div>\n', (3,)),
        ('<div markdown="1">\n- first line of the content\n</div>\n', ()),
        # Inside a list, a raw block leaves the list's own lines as they were.
        ("- one\n  <div>\n  Steps:\n  - x\n\n  more\n- two\n", ()),
    ],
)
def test_list_interruptions(text: str, lines: tuple[int, ...]) -> None:
    assert list_interruptions(text) == lines


@pytest.mark.parametrize(
    ("line", "kind"),
    [
        ("<pre>", 1),
        ("   <script src=x>", 1),
        ("<TEXTAREA", 1),
        ("<!-- c", 2),
        ("<?x", 3),
        ("<!DOCTYPE html>", 4),
        ("<![CDATA[", 5),
        ("<div>", 6),
        ("</table>", 6),
        ("<hr/>", 6),
        ("<h1 id=x>Title</h1>", 6),
        ("<a href='x'>", 7),
        ("</span>  ", 7),
        ("<my-tag flag a=b c='d' e=\"f\" />", 7),
        ("<div markdown>", 0),
        ('<details markdown="block">', 0),
        ('<div markdown="span">', 6),  # span content is inline: the block stays raw
    ],
)
def test_html_block_kinds(line: str, kind: int) -> None:
    assert html_block_kind(line) == kind


@pytest.mark.parametrize(
    "line",
    [
        "    <div>",  # four spaces: indented code
        "<divx>",  # not a kind-6 name, and <divx> alone is kind 7 only outside a paragraph
        "<span>text</span>",  # a tag with text after it: inline HTML
        "<a href=>",  # an attribute value is not empty
        "<pre/>",  # kind 1 needs a space, `>` or the end after the name; kind 7 excludes pre
        "<https://example.org>",  # an autolink
        "< div>",
    ],
)
def test_lines_that_start_no_html_block_in_a_paragraph(line: str) -> None:
    assert html_block_kind(line, in_paragraph=True) is None


def test_html_block_ends() -> None:
    assert html_block_ends(1, "text </PRE> more")
    assert html_block_ends(2, "end -->")
    assert not html_block_ends(2, "-- >")
    assert html_block_ends(4, ">")
    assert html_block_ends(5, "]]>")
    assert not html_block_ends(6, "")  # kinds 6 and 7 end at a blank line, not at a string


def test_list_interruptions_report_every_list_of_a_page() -> None:
    page = "# T\n\nFirst:\n- a\n\nSecond:\n1. b\n\nThird\n\n- c\n"
    assert list_interruptions(page) == (4, 7)


@given(st.lists(st.sampled_from(["", "Prose.", "- item", "## H", "```", "1. x", "  more"])))
def test_list_interruptions_name_list_lines_after_prose(lines: list[str]) -> None:
    text = "\n".join(lines)
    for number in list_interruptions(text):
        assert lines[number - 1] in ("- item", "1. x")
        assert lines[number - 2] in ("Prose.", "  more")


def _contents(text: str) -> list[str]:
    return [text[span.content_start : span.content_end] for span in code_spans(text)]


@pytest.mark.parametrize(
    ("text", "contents"),
    [
        ("`a` and ``b`` and ```c```", ["a", "b", "c"]),  # runs of equal length pair up
        ("`a``b`", ["a``b"]),  # a run of another length does not close a span
        ("``a`", []),  # an opener that nothing closes is literal backticks...
        ("``a`b`", ["b"]),  # ...and the run after it may open a span
        ("`a``", []),
        ("````", []),  # one run is no span
        ("`` a`b ``", [" a`b "]),  # a double-backtick span holds single backticks
        ("`a\nb` c", ["a\nb"]),  # a span may cross a line break (within a paragraph)
        ("x`a`y`b`", ["a", "b"]),
        ("no code", []),
        ("\\`not code`", []),  # an escaped backtick opens nothing
        ("\\``code`", ["code"]),  # ...and the rest of its run is the opener
        ("\\\\`code`", ["code"]),  # an escaped backslash escapes nothing after it
        ("`a\\`b", ["a\\"]),  # inside a span a backslash is literal: the run closes it
    ],
)
def test_code_spans_follow_the_commonmark_rule(text: str, contents: list[str]) -> None:
    assert _contents(text) == contents


def test_a_code_span_records_its_backticks_and_its_content() -> None:
    ((start, end, content_start, content_end),) = code_spans("see ``a`b`` here")
    assert (start, end, content_start, content_end) == (4, 11, 6, 9)


# CommonMark's rule as one regular expression (backtick strings are runs no backtick touches):
# right on small texts, but it backtracks into super-linear time on long ones.
_COMMONMARK_SPAN_RE = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)", re.DOTALL)


@given(st.text(alphabet="`a \n", max_size=80))
def test_code_spans_are_the_spans_of_the_commonmark_expression(text: str) -> None:
    expected = [
        (m.start(), m.end(), m.start(2), m.end(2)) for m in _COMMONMARK_SPAN_RE.finditer(text)
    ]
    assert [tuple(span) for span in code_spans(text)] == expected


def _reference_spans(text: str) -> list[tuple[int, int, int, int]]:
    """CommonMark's code spans with backslash escapes, read as its spec words them, left to
    right: outside a span a backslash escapes a backslash or backtick after it; a run of n
    backticks opens a span that the next run of exactly n closes (quadratic, for small texts)."""
    runs = [m.span() for m in re.finditer("`+", text)]
    spans = []
    at = 0
    while at < len(text):
        if text[at] == "\\" and at + 1 < len(text) and text[at + 1] in "\\`":
            at += 2
            continue
        if text[at] != "`":
            at += 1
            continue
        end = next(e for s, e in runs if s <= at < e)
        closer = next(((s, e) for s, e in runs if s >= end and e - s == end - at), None)
        if closer is None:
            at = end
            continue
        spans.append((at, closer[1], end, closer[0]))
        at = closer[1]
    return spans


@given(st.text(alphabet="`a\\ \n", max_size=80))
def test_code_spans_read_backslash_escapes_as_commonmark_does(text: str) -> None:
    assert [tuple(span) for span in code_spans(text)] == _reference_spans(text)


def _links(text: str) -> list[tuple[str, str, str]]:
    return [
        (
            text[link.start : link.end],
            text[link.text_start : link.text_end],
            text[link.target_start : link.target_end],
        )
        for link in inline_links(text, code_spans(text))
    ]


@pytest.mark.parametrize(
    ("text", "links"),
    [
        ("[a](b.json)", [("[a](b.json)", "a", "b.json")]),
        ("![a](b.png)", [("![a](b.png)", "a", "b.png")]),
        ('[a](<b c.json> "t")', [('[a](<b c.json> "t")', "a", "<b c.json>")]),
        ("[a]( b )", [("[a]( b )", "a", "b")]),  # white space around the destination
        ('[a](b "t" )', [('[a](b "t" )', "a", "b")]),
        ("[a [b] c](d)", [("[a [b] c](d)", "a [b] c", "d")]),  # balanced brackets in the text
        ("[[a](b)", [("[a](b)", "a", "b")]),  # the nearest open bracket pairs
        ("[a [b](c) d](e)", [("[b](c)", "b", "c")]),  # a link holds no link
        ("[`]`](b)", [("[`]`](b)", "`]`", "b")]),  # a code span's bracket does not count
        ("`[a](b)`", []),  # a link inside a code span is code
        ("\\[a](b) [c\\](d)", []),  # escaped brackets do not count
        ("[a](b c)", []),  # a bare destination holds no space
        ('[a](b "t)', []),  # an unclosed title
        ("[a](<b)", []),  # a bare destination does not start with `<`
        ("[a](<b>c)", []),
        ("[a] (b)", []),
        ("[a](b(c)", [("[a](b(c)", "a", "b(c")]),  # a `(` needs no partner (as before)
    ],
)
def test_inline_links(text: str, links: list[tuple[str, str, str]]) -> None:
    assert _links(text) == links


@needs_clocks
@pytest.mark.parametrize("unit", ["[](", "[a [b] c](<d ", '[a](b "', "[[[a]]]("])
def test_inline_links_take_linear_time(unit: str) -> None:
    assert_linear(inline_links, lambda size: unit * (size // len(unit)), 50_000)


@needs_clocks
@pytest.mark.parametrize("unit", ["`a", "``a`", "`a``a```a", "\\`a", "\\\\``a\\"])
def test_code_spans_take_linear_time(unit: str) -> None:
    assert_linear(code_spans, lambda size: unit * (size // len(unit)), 50_000)
