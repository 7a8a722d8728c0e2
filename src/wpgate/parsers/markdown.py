"""GitHub-flavoured Markdown tables, headings and code spans, with 1-based line numbers.

A table (GFM spec, "Tables (extension)") is a header row, a delimiter row (``| --- | :-: |``)
and the body rows that follow until a blank line or a line that is not a row. Cells are split
on unescaped ``|``; ``\\|`` stands for a literal pipe. Each table remembers the nearest heading
above it, so a document's tables are found by their headings. Fenced code blocks are skipped.
Everything here is pure: text in, records out. A row whose cell count differs from the header's
is kept (GFM pads or drops cells) and reported, because in a governance table it is a typo.
Code spans (:func:`code_spans`) and inline links (:func:`inline_links`) are found in one pass
each, in time linear in the text's length.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from wpgate._model import Finding

_HEADING_RE = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)[ \t]*#*[ \t]*$")
_FENCE_RE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_DELIMITER_CELL_RE = re.compile(r"^:?-+:?$")
_ROW_RE = re.compile(r"^ {0,3}\|")
_BACKTICKS_RE = re.compile(r"`+")
_BRACKETS_RE = re.compile(r"[\[\]]")


@dataclass(frozen=True)
class Heading:
    """An ATX heading: its level (1-6), its text and its line."""

    level: int
    text: str
    line: int


@dataclass(frozen=True)
class Row:
    """One body row: its cells (stripped, escapes resolved) and its line."""

    cells: tuple[str, ...]
    line: int


@dataclass(frozen=True)
class Table:
    """A table with the heading it sits under (None before any heading)."""

    heading: Heading | None
    header: tuple[str, ...]
    rows: tuple[Row, ...]
    line: int
    problems: tuple[tuple[int, str], ...] = ()

    def column(self, name: str) -> int | None:
        """The index of the column called ``name`` (case-insensitive), or None."""
        wanted = name.strip().lower()
        for index, cell in enumerate(self.header):
            if cell.lower() == wanted:
                return index
        return None


@dataclass(frozen=True)
class Document:
    """The headings and tables of one Markdown text."""

    headings: tuple[Heading, ...]
    tables: tuple[Table, ...]

    def tables_under(self, heading: str) -> tuple[Table, ...]:
        """The tables whose nearest heading above reads ``heading`` (case-insensitive)."""
        wanted = heading.strip().lower()
        return tuple(t for t in self.tables if t.heading and t.heading.text.lower() == wanted)

    def heading(self, text: str) -> Heading | None:
        """The first heading reading ``text`` (case-insensitive), or None."""
        wanted = text.strip().lower()
        return next((h for h in self.headings if h.text.lower() == wanted), None)


def split_row(line: str) -> tuple[str, ...]:
    """The cells of a table row: split on unescaped pipes, outer pipes dropped, stripped."""
    text = line.strip()
    cells: list[str] = []
    current: list[str] = []
    index = 0
    while index < len(text):
        char = text[index]
        if char == "\\" and index + 1 < len(text) and text[index + 1] == "|":
            current.append("|")
            index += 2
            continue
        if char == "|":
            cells.append("".join(current))
            current = []
        else:
            current.append(char)
        index += 1
    cells.append("".join(current))
    # A leading and a trailing pipe each leave one empty cell at the edge.
    if text.startswith("|"):
        cells = cells[1:]
    if text.endswith("|") and not text.endswith("\\|") and cells:
        cells = cells[:-1]
    return tuple(cell.strip() for cell in cells)


def _is_delimiter(cells: Sequence[str]) -> bool:
    """Whether ``cells`` form a GFM delimiter row (``---``, ``:--``, ``--:``, ``:-:``)."""
    return bool(cells) and all(_DELIMITER_CELL_RE.match(c.replace(" ", "")) for c in cells)


def _lines_outside_fences(text: str) -> Iterator[tuple[int, str]]:
    """Lines with their 1-based numbers, fenced code blocks left out."""
    fence: str | None = None
    for number, line in enumerate(text.splitlines(), start=1):
        match = _FENCE_RE.match(line)
        if fence is None:
            if match:
                fence = match.group(1)
                continue
            yield number, line
        elif match and match.group(1)[0] == fence[0] and len(match.group(1)) >= len(fence):
            fence = None


def parse_markdown(text: str) -> Document:
    """The headings and tables of ``text``."""
    headings: list[Heading] = []
    tables: list[Table] = []
    lines = list(_lines_outside_fences(text))
    index = 0
    while index < len(lines):
        number, line = lines[index]
        heading = _HEADING_RE.match(line)
        if heading:
            headings.append(Heading(len(heading.group(1)), heading.group(2).strip(), number))
            index += 1
            continue
        consecutive = index + 1 < len(lines) and lines[index + 1][0] == number + 1
        if _ROW_RE.match(line) and consecutive and _is_delimiter(split_row(lines[index + 1][1])):
            table, index = _read_table(lines, index, headings[-1] if headings else None)
            tables.append(table)
            continue
        index += 1
    return Document(tuple(headings), tuple(tables))


def _read_table(
    lines: Sequence[tuple[int, str]], start: int, heading: Heading | None
) -> tuple[Table, int]:
    """The table starting at ``lines[start]`` and the index just after it."""
    number, line = lines[start]
    header = split_row(line)
    delimiter = split_row(lines[start + 1][1])
    problems: list[tuple[int, str]] = []
    if len(delimiter) != len(header):
        problems.append(
            (
                lines[start + 1][0],
                f"the delimiter row has {len(delimiter)} cells but the header has {len(header)}; "
                "give every column one `---` cell",
            )
        )
    rows: list[Row] = []
    index = start + 2
    previous = lines[start + 1][0]
    while index < len(lines):
        row_number, row_line = lines[index]
        if row_number != previous + 1 or not _ROW_RE.match(row_line):
            break
        cells = split_row(row_line)
        if len(cells) != len(header):
            problems.append(
                (
                    row_number,
                    f"this row has {len(cells)} cells but the header has {len(header)} "
                    f"({' | '.join(header)}); escape a literal pipe as `\\|` or fix the row",
                )
            )
        rows.append(Row(cells, row_number))
        previous = row_number
        index += 1
    return Table(heading, header, tuple(rows), number, tuple(problems)), index


def table_findings(path: str, table: Table, rule_id: str) -> Iterator[Finding]:
    """The malformed-row problems of ``table`` as findings against ``path``."""
    for line, message in table.problems:
        yield Finding(path, line, rule_id, message)


def find_table(
    document: Document,
    path: str,
    heading: str,
    columns: Sequence[str],
    rule_id: str,
) -> tuple[Table | None, list[Finding]]:
    """The table under ``heading`` with the given leading ``columns``, or findings saying why not.

    Extra columns after the expected ones are allowed; names compare case-insensitively.
    """
    candidates = document.tables_under(heading)
    expected = " | ".join(columns)
    if not candidates:
        where = document.heading(heading)
        if where is None:
            return None, [
                Finding(
                    path,
                    0,
                    rule_id,
                    f"no `{heading}` section; add a heading `## {heading}` followed by a table "
                    f"`| {expected} |`",
                )
            ]
        return None, [
            Finding(
                path,
                where.line,
                rule_id,
                f"the `{heading}` section has no table; add one with the header `| {expected} |` "
                "and a delimiter row `| --- |` per column",
            )
        ]
    table = candidates[0]
    found = [c.lower() for c in table.header[: len(columns)]]
    if found != [c.lower() for c in columns]:
        return None, [
            Finding(
                path,
                table.line,
                rule_id,
                f"the `{heading}` table's header is `| {' | '.join(table.header)} |`; "
                f"expected `| {expected} |`",
            )
        ]
    return table, list(table_findings(path, table, rule_id))


# --------------------------------------------------------------------------- lists


@dataclass(frozen=True)
class MarkdownPage:
    """One Markdown page the Markdown rules read: its repository path and its text."""

    path: str
    text: str


@dataclass(frozen=True)
class MarkdownPages:
    """The pages of ``[tool.wpgate.docs] pages``, and the problems of those not read."""

    pages: tuple[MarkdownPage, ...]
    findings: tuple[Finding, ...] = ()


# Python-Markdown's list markers: `*`, `+`, `-` and `N.` (it has no `N)` lists).
_LIST_ITEM_RE = re.compile(r"^ {0,3}(?:[*+-]|([0-9]{1,9})\.)(?=[ \t]|$)")
_BREAK_RE = re.compile(r"^ {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$")
_SETEXT_RE = re.compile(r"^ {0,3}(?:=+|-+)[ \t]*$")
_NOT_PARAGRAPH_RE = re.compile(r"^ {0,3}(?:[>|]|\[\^?[^\]]*\]:|!!!|\?\?\?|:::)")

# HTML blocks (CommonMark 0.30, §4.6): seven kinds, by the start of their first line (after up to
# three spaces). Kinds 1-5 end on the line that holds their end string; 6 and 7 before a blank
# line. Kind 7 (any complete tag alone on its line) cannot interrupt a paragraph.
_HTML_VERBATIM = "pre|script|style|textarea"
# The tag names of kind 6, in the spec's order.
# fmt: off
_HTML_BLOCK_NAMES = frozenset((
    "address", "article", "aside", "base", "basefont", "blockquote", "body", "caption", "center",
    "col", "colgroup", "dd", "details", "dialog", "dir", "div", "dl", "dt", "fieldset",
    "figcaption", "figure", "footer", "form", "frame", "frameset", "h1", "h2", "h3", "h4", "h5",
    "h6", "head", "header", "hr", "html", "iframe", "legend", "li", "link", "main", "menu",
    "menuitem", "nav", "noframes", "ol", "optgroup", "option", "p", "param", "section", "source",
    "summary", "table", "tbody", "td", "tfoot", "th", "thead", "title", "tr", "track", "ul",
))
# fmt: on
_HTML_STARTS: tuple[tuple[int, re.Pattern[str]], ...] = (
    (1, re.compile(rf"^ {{0,3}}<(?:{_HTML_VERBATIM})(?:[ \t>]|$)", re.IGNORECASE)),
    (2, re.compile(r"^ {0,3}<!--")),
    (3, re.compile(r"^ {0,3}<\?")),
    (4, re.compile(r"^ {0,3}<![A-Za-z]")),
    (5, re.compile(r"^ {0,3}<!\[CDATA\[")),
)
_HTML_ENDS = {
    1: re.compile(rf"</(?:{_HTML_VERBATIM})>", re.IGNORECASE),
    2: re.compile(r"-->"),
    3: re.compile(r"\?>"),
    4: re.compile(r">"),
    5: re.compile(r"\]\]>"),
}
_HTML_BLOCK_TAG_RE = re.compile(r"^ {0,3}</?([A-Za-z][A-Za-z0-9]*)(?:[ \t>]|/>|$)")
# A complete open or closing tag (CommonMark §6.6), alone on its line: the start of kind 7.
_ATTRIBUTE = (
    r"[ \t]+[A-Za-z_:][A-Za-z0-9_.:-]*"
    r"(?:[ \t]*=[ \t]*(?:[^ \t\"'=<>`]+|'[^']*'|\"[^\"]*\"))?"
)
_HTML_TAG_LINE_RE = re.compile(
    rf"^ {{0,3}}(?:<(?!(?:{_HTML_VERBATIM})(?![A-Za-z0-9-]))[A-Za-z][A-Za-z0-9-]*"
    rf"(?:{_ATTRIBUTE})*[ \t]*/?>|</[A-Za-z][A-Za-z0-9-]*[ \t]*>)[ \t]*$",
    re.IGNORECASE,
)
# Python-Markdown's md_in_html: a `markdown` attribute (bare, "1" or "block") on the opening
# tag makes the element's content Markdown again, so its lines are read as Markdown.
_MARKDOWN_ATTRIBUTE_RE = re.compile(
    r"[ \t]markdown(?:[ \t]*=[ \t]*(?:\"(?:1|block)\"|'(?:1|block)'|1|block))?(?=[ \t/>]|$)",
    re.IGNORECASE,
)


#: What :func:`html_block_kind` answers for a tag whose ``markdown`` attribute keeps its content
#: Markdown: the line is a block boundary, and the lines after it are read as Markdown.
MARKDOWN_IN_HTML = 0


def html_block_kind(line: str, *, in_paragraph: bool = False) -> int | None:
    """The kind (1-7, CommonMark 0.30 §4.6) of the HTML block ``line`` starts, or None.

    ``in_paragraph``: the line follows a paragraph line, which only kinds 1-6 may interrupt. A
    tag with Python-Markdown's ``markdown`` attribute starts no raw block:
    :data:`MARKDOWN_IN_HTML`.
    """
    for kind, start in _HTML_STARTS:
        if start.match(line):
            return kind
    tag = _HTML_BLOCK_TAG_RE.match(line)
    if tag and tag.group(1).lower() in _HTML_BLOCK_NAMES:
        kind = 6
    elif not in_paragraph and _HTML_TAG_LINE_RE.match(line):
        kind = 7
    else:
        return None
    return MARKDOWN_IN_HTML if _MARKDOWN_ATTRIBUTE_RE.search(line) else kind


def html_block_ends(kind: int, line: str) -> bool:
    """Whether ``line`` ends an HTML block of ``kind`` 1-5 (kinds 6 and 7 end at a blank line)."""
    end = _HTML_ENDS.get(kind)
    return end is not None and end.search(line) is not None


def _body_lines(text: str) -> list[tuple[int, str]]:
    """The lines outside fenced code blocks, after the YAML front matter (if any)."""
    lines = list(_lines_outside_fences(text))
    if lines and lines[0] == (1, "---"):
        for index, (_, line) in enumerate(lines[1:], start=1):
            if line in ("---", "..."):
                return lines[index + 1 :]
    return lines


def _is_list_start(line: str) -> bool:
    """Whether ``line`` opens a list: a bullet or a ``1.`` marker, then text."""
    match = _LIST_ITEM_RE.match(line)
    if match is None or _BREAK_RE.match(line) or not line[match.end() :].strip():
        return False  # a thematic break, or a bare marker (an empty item interrupts nothing)
    number = match.group(1)
    # Only an ordered list that starts at 1 interrupts a paragraph (CommonMark 0.31, §5.3); a
    # wrapped sentence that starts with `2019.` is prose.
    return number is None or int(number) == 1


def list_interruptions(text: str) -> tuple[int, ...]:
    """The lines where a list starts directly under a paragraph line, with no blank line.

    CommonMark lets a list interrupt a paragraph; Python-Markdown (which mkdocs renders with)
    does not, and joins the items into the paragraph. Lines in fenced code, front matter, lists,
    tables, block quotes and indented blocks are not paragraphs; a heading or a thematic break
    above a list is fine. Raw HTML blocks (:func:`html_block_kind`) are skipped whole: what looks
    like a paragraph and a list inside a ``<div>`` is HTML text, not Markdown.
    """
    found: list[int] = []
    state = "blank"  # what the previous line was: blank, paragraph, list or other
    previous = 0
    html: int | None = None  # the kind of the raw HTML block being skipped
    in_list = False  # whether that block sits in a list (it resumes the list when it ends)
    for number, line in _body_lines(text):
        gap = number != previous + 1
        previous = number
        stripped = line.strip()
        if html is not None and html <= 5:
            if html_block_ends(html, line):
                html, state = None, "list" if in_list else "other"
            continue
        if html is not None:  # kinds 6 and 7 end before a blank line (or a fence)
            if stripped and not gap:
                continue
            html, state = None, "list" if in_list else "other"
        if gap:
            state = "other"  # a fence closed in between
        kind = html_block_kind(line, in_paragraph=state in ("paragraph", "list"))
        if kind is not None:
            in_list = state in ("list", "list-blank")
            if kind != MARKDOWN_IN_HTML and (kind > 5 or not html_block_ends(kind, line)):
                html = kind
            state = "list" if in_list else "other"
        elif not stripped:
            state = "blank" if state != "list" else "list-blank"
        elif _LIST_ITEM_RE.match(line) and not _BREAK_RE.match(line):
            if state == "paragraph" and _is_list_start(line):
                found.append(number)
            state = "list"
        elif state in ("list", "list-blank") and (state == "list" or line.startswith(" ")):
            state = "list"  # an item's continuation, lazy or indented
        elif state == "paragraph" and _SETEXT_RE.match(line):
            state = "other"  # the paragraph was a setext heading
        elif (
            _HEADING_RE.match(line)
            or _BREAK_RE.match(line)
            or _NOT_PARAGRAPH_RE.match(line)
            or line.startswith(("    ", "\t"))
        ):
            state = "other"
        else:
            state = "paragraph"
    return tuple(found)


class CodeSpan(NamedTuple):
    """An inline code span: ``text[start:end]`` with its backticks, ``text[content_start:
    content_end]`` between them (not stripped)."""

    start: int
    end: int
    content_start: int
    content_end: int


def code_spans(text: str) -> tuple[CodeSpan, ...]:
    """The code spans of ``text``, in order (CommonMark 0.31 §6.1): a run of n backticks opens
    a span that the next run of exactly n backticks closes; a run of another length inside does
    not close it, and an opener that nothing closes is literal backticks (the next run may open
    a span). Spans may cross line breaks. Outside a span a backslash escapes the backtick after
    it (an odd number of backslashes before a run: its first backtick is literal, and the rest
    of the run, if any, is the opener); inside one a backslash is literal, so it never stops a
    run from closing the span.

    One pass over the runs: each length keeps the queue of its runs' indexes and a cursor that
    only moves forward, so the time is linear in the text's length (a regular expression such as
    ``(`+)(.+?)\\1`` backtracks into cubic time on a line of backticks).
    """
    runs = [match.span() for match in _BACKTICKS_RE.finditer(text)]
    queues: dict[int, list[int]] = {}
    for index, (start, end) in enumerate(runs):
        queues.setdefault(end - start, []).append(index)
    cursors = dict.fromkeys(queues, 0)
    spans: list[CodeSpan] = []
    index = 0
    while index < len(runs):
        start, end = runs[index]
        start += _escaped(text, start)
        length = end - start
        if length not in queues:  # no run of this length: nothing can close it
            index += 1
            continue
        queue, cursor = queues[length], cursors[length]
        while cursor < len(queue) and queue[cursor] <= index:
            cursor += 1
        cursors[length] = cursor
        if cursor == len(queue):  # no closer: literal backticks
            index += 1
            continue
        closer = queue[cursor]
        close_start, close_end = runs[closer]
        spans.append(CodeSpan(start, close_end, end, close_start))
        index = closer + 1
    return tuple(spans)


class InlineLink(NamedTuple):
    """An inline link ``[text](destination "title")`` or image ``![text](...)``: where it
    lies, its text (between the brackets) and its destination (with its angle brackets)."""

    start: int
    end: int
    text_start: int
    text_end: int
    target_start: int
    target_end: int


class _Next:
    """The next position at or after a query's where ``pattern`` matches (the text's length
    where none does). Queries come in increasing order, so that each search resumes past the
    last one's answer: every finder reads the text once in all."""

    def __init__(self, text: str, pattern: str) -> None:
        self.text = text
        self.pattern = re.compile(pattern)
        self.asked = 0
        self.found = -1

    def __call__(self, at: int) -> int:
        if not self.asked <= at <= self.found:  # else nothing matches in [at, found)
            match = self.pattern.search(self.text, at)
            self.asked, self.found = at, len(self.text) if match is None else match.start()
        return self.found


def inline_links(text: str, code: Sequence[CodeSpan] = ()) -> tuple[InlineLink, ...]:
    """The inline links of ``text``, in order (CommonMark 0.31 §6.3, as far as claims need):
    a link's text may hold balanced brackets (``[a [b] c](t.json)``) and code spans, whose
    brackets (like backslash-escaped ones) do not count; the destination is ``<...>`` (no
    ``<``, ``>`` or line break inside) or a run that does not start with ``<`` and holds no
    space or ``)`` (a ``(`` in it needs no partner, unlike CommonMark's), then an optional
    ``"title"`` after white space, then ``)``; white space may come around the destination.
    The nearest open bracket pairs with a ``]``; where no destination follows, that bracket is
    literal; a link closes every bracket still open before it (a link holds no link).
    ``code``: the text's code spans, where it has any.

    One pass over the brackets; the destinations are scanned by finders whose searches never
    go back, so the time is linear in the text's length (a regular expression for the same
    shape took quadratic time on a run of ``[](``).
    """
    stops, angles = _Next(text, r"[)\s]"), _Next(text, r"[<>\n]")
    words, quotes = _Next(text, r"\S"), _Next(text, '"')
    spans = iter(code)
    span = next(spans, None)
    links: list[InlineLink] = []
    openers: list[int] = []
    after = 0  # brackets inside the last link's destination are not read
    for match in _BRACKETS_RE.finditer(text):
        at = match.start()
        while span is not None and span.end <= at:
            span = next(spans, None)
        if at < after or (span is not None and span.start <= at) or _escaped(text, at):
            continue
        if text[at] == "[":
            openers.append(at)
            continue
        if not openers:
            continue
        opener = openers.pop()
        found = _destination(text, at + 1, stops, angles, words, quotes)
        if found is None:
            continue
        start = opener - 1 if opener > 0 and text[opener - 1] == "!" else opener
        links.append(InlineLink(start, found[2], opener + 1, at, found[0], found[1]))
        openers.clear()
        after = found[2]
    return tuple(links)


def _destination(
    text: str, at: int, stops: _Next, angles: _Next, words: _Next, quotes: _Next
) -> tuple[int, int, int] | None:
    """``(target_start, target_end, end)`` of the ``(destination "title")`` at ``at``, or
    None where none is there."""
    if not text.startswith("(", at):
        return None
    start = words(at + 1)  # white space may come before the destination
    if not text.startswith("<", start):
        target_end = stops(start)
    elif text.startswith(">", close := angles(start + 1)):
        target_end = close + 1
    else:
        return None  # a bare destination does not start with `<`
    title = words(target_end)
    if text.startswith(")", title):
        return start, target_end, title + 1
    if title > target_end and text.startswith('"', title):
        close = words(quotes(title + 1) + 1)
        if text.startswith(")", close):
            return start, target_end, close + 1
    return None


def _escaped(text: str, at: int) -> int:
    """1 where the character at ``at`` follows an odd number of backslashes (it is escaped),
    else 0. Each run of backslashes is counted for the one backtick run after it."""
    before = at
    while before > 0 and text[before - 1] == "\\":
        before -= 1
    return (at - before) % 2
