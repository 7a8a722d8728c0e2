"""Tests for the GFM table parser."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from wpgate._model import Finding
from wpgate.parsers.markdown import find_table, parse_markdown, split_row

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
