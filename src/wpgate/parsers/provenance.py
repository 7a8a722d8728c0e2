"""The provenance document (``docs/PROVENANCE.md``) as records.

Three tables, found by their headings (governance spec §2):

- *Sources* ``| ID | Reference | Licence | Role |`` - the allowlist a ``Provenance:`` trailer
  cites from;
- *Placeholders* ``| ID | Status |`` - ids reserved and withdrawn;
- *First-use log* ``| Date | Source | Used for |`` - the day each source was first used.

An id cell may hold a range (``R1-R20``, with an en dash, em dash, hyphen or ``..``) or a
comma-separated list; both are expanded here, so the rules count each id. Cells that do not
parse become findings with their line, never exceptions.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from wpgate._model import Finding

if TYPE_CHECKING:
    from wpgate.parsers.markdown import Table

SOURCES_HEADING = "Sources"
PLACEHOLDERS_HEADING = "Placeholders"
FIRST_USE_HEADING = "First-use log"
SOURCES_COLUMNS = ("ID", "Reference", "Licence", "Role")
PLACEHOLDERS_COLUMNS = ("ID", "Status")
FIRST_USE_COLUMNS = ("Date", "Source", "Used for")


_ID_RE = re.compile(r"^R([0-9]+)$")
_RANGE_RE = re.compile(r"^R([0-9]+)\s*(?:\u2013|\u2014|-|\.\.)\s*R?([0-9]+)$")
# A single cell expanding to more ids than this is a typo (``R1-R100000``), not a range.
_MAX_RANGE = 10_000


@dataclass(frozen=True)
class Source:
    """One row of the Sources table (a range row yields one record per id)."""

    id: str
    reference: str
    licence: str
    role: str
    line: int


@dataclass(frozen=True)
class Placeholder:
    """A reserved, withdrawn id."""

    id: str
    status: str
    line: int


@dataclass(frozen=True)
class FirstUse:
    """One row of the First-use log: its date cell as written, the ids it names, its purpose."""

    date: str
    ids: tuple[str, ...]
    used_for: str
    line: int


@dataclass(frozen=True)
class Provenance:
    """The parsed provenance document and the problems found while parsing it."""

    path: str
    sources: tuple[Source, ...]
    placeholders: tuple[Placeholder, ...]
    first_uses: tuple[FirstUse, ...]
    findings: tuple[Finding, ...]
    #: Per source id, the first commit citing it and that commit's date, when the first-use
    #: history is checked (WPG207); None otherwise. The docs runner adds it from git.
    citations: Mapping[str, tuple[str, str]] | None = field(default=None, compare=False)

    @property
    def source_ids(self) -> frozenset[str]:
        """The allowlisted ids (the Sources table)."""
        return frozenset(s.id for s in self.sources)

    @property
    def placeholder_ids(self) -> frozenset[str]:
        """The withdrawn ids (the Placeholders table)."""
        return frozenset(p.id for p in self.placeholders)


def id_number(source_id: str) -> int | None:
    """The number of ``R<n>``, or None when ``source_id`` is not one."""
    match = _ID_RE.match(source_id.strip())
    return int(match.group(1)) if match else None


def expand_ids(cell: str) -> tuple[tuple[str, ...], list[str]]:
    """The ids named by ``cell`` (``R3``, ``R1-R20``, ``R1, R4``) and the parts that are not ids.

    Backticks and surrounding whitespace are ignored.
    """
    ids: list[str] = []
    bad: list[str] = []
    for raw in cell.replace("`", "").split(","):
        part = raw.strip()
        if not part:
            continue
        single = _ID_RE.match(part)
        if single:
            ids.append(part)
            continue
        ranged = _RANGE_RE.match(part)
        if ranged:
            low, high = int(ranged.group(1)), int(ranged.group(2))
            if low <= high and high - low < _MAX_RANGE:
                ids.extend(f"R{n}" for n in range(low, high + 1))
                continue
        bad.append(part)
    return tuple(ids), bad


def _bad_id_finding(path: str, line: int, part: str, what: str, rule_id: str) -> Finding:
    """The finding for an id cell part that does not parse."""
    return Finding(
        path,
        line,
        rule_id,
        f"{what} `{part}` is not a source id; write `R<n>` (e.g. `R12`), a range `R1-R20` "
        "(low before high) or a comma-separated list",
    )


def _cell(table: Table, cells: tuple[str, ...], column: str) -> str:
    """The cell of ``column`` in ``cells``, or ``""`` when the row is short."""
    index = table.column(column)
    return cells[index] if index is not None and index < len(cells) else ""


def parse_provenance(
    text: str, path: str = "docs/PROVENANCE.md", *, table_rule: str, id_rule: str
) -> Provenance:
    """Parse the provenance document ``text`` (found at repository-relative ``path``)."""
    # The Markdown parser is loaded with a document to parse: a repository without one (and
    # the commit linters reading its ids) needs only the records above.
    from wpgate.parsers.markdown import find_table, parse_markdown

    document = parse_markdown(text)
    findings: list[Finding] = []
    sources: list[Source] = []
    placeholders: list[Placeholder] = []
    first_uses: list[FirstUse] = []

    table, problems = find_table(document, path, SOURCES_HEADING, SOURCES_COLUMNS, table_rule)
    findings.extend(problems)
    if table is not None:
        for row in table.rows:
            ids, bad = expand_ids(_cell(table, row.cells, "ID"))
            findings.extend(
                _bad_id_finding(path, row.line, b, "the Sources id", id_rule) for b in bad
            )
            if not ids and not bad:
                findings.append(
                    _bad_id_finding(path, row.line, "", "the empty Sources id", id_rule)
                )
            sources.extend(
                Source(
                    source_id,
                    _cell(table, row.cells, "Reference"),
                    _cell(table, row.cells, "Licence"),
                    _cell(table, row.cells, "Role"),
                    row.line,
                )
                for source_id in ids
            )

    table, problems = find_table(
        document, path, PLACEHOLDERS_HEADING, PLACEHOLDERS_COLUMNS, table_rule
    )
    findings.extend(problems)
    if table is not None:
        for row in table.rows:
            ids, bad = expand_ids(_cell(table, row.cells, "ID"))
            findings.extend(
                _bad_id_finding(path, row.line, b, "the placeholder id", id_rule) for b in bad
            )
            status = _cell(table, row.cells, "Status")
            placeholders.extend(Placeholder(p, status, row.line) for p in ids)

    table, problems = find_table(document, path, FIRST_USE_HEADING, FIRST_USE_COLUMNS, table_rule)
    findings.extend(problems)
    if table is not None:
        for row in table.rows:
            ids, bad = expand_ids(_cell(table, row.cells, "Source"))
            findings.extend(
                _bad_id_finding(path, row.line, b, "the first-use source", id_rule) for b in bad
            )
            first_uses.append(
                FirstUse(
                    _cell(table, row.cells, "Date"),
                    ids,
                    _cell(table, row.cells, "Used for"),
                    row.line,
                )
            )

    return Provenance(path, tuple(sources), tuple(placeholders), tuple(first_uses), tuple(findings))
