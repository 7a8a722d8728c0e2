"""Provenance rules (WPG2xx, governance spec §2): pure checks over a parsed ``PROVENANCE.md``.

Options (``[tool.wpgate.provenance]``): ``licences`` - the permissive licences a code source may
carry (SPDX ids); ``code_roles`` - the *Role* values that mark a source whose code is used.
Other roles are free text (``paper``, ``documentation``, ``tool``...), so a role is never
"unknown"; it must be written, and one a typo away from a code role is refused, since it would
skip the licence check.
"""

from __future__ import annotations

import datetime as dt
import difflib
import re
from collections.abc import Iterator

from wpgate._model import Finding, Rule, register
from wpgate.docs_options import ProvenanceOptions
from wpgate.parsers.provenance import Provenance, Source, id_number
from wpgate.rules import (
    PROVENANCE_CODE_LICENCE,
    PROVENANCE_FIRST_USE_DATES,
    PROVENANCE_FIRST_USE_HISTORY,
    PROVENANCE_FIRST_USE_ONCE,
    PROVENANCE_ID_FORMAT,
    PROVENANCE_SOURCE_CELLS,
    PROVENANCE_TABLES,
    PROVENANCE_UNIQUE_IDS,
    declared,
)

DEFAULT_LICENCES = ProvenanceOptions.licences
DEFAULT_CODE_ROLES = ProvenanceOptions.code_roles
_ISO_DATE_RE = re.compile(r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$")
# How alike (difflib's ratio) a role must be to a code role to be taken for a typo of it:
# `libary`, `sofware`, `codes` and `source-code` are; `tool`, `data` and `book` are not.
_TYPO_RATIO = 0.8


def check_tables(provenance: Provenance, options: ProvenanceOptions) -> Iterator[Finding]:
    """The three tables exist under their headings, with their columns and whole rows."""
    yield from (f for f in provenance.findings if f.rule_id == PROVENANCE_TABLES)


def check_id_format(provenance: Provenance, options: ProvenanceOptions) -> Iterator[Finding]:
    """Every id cell is ``R<n>``, a range ``R1-R20`` or a list of them."""
    yield from (f for f in provenance.findings if f.rule_id == PROVENANCE_ID_FORMAT)


def check_unique_ids(provenance: Provenance, options: ProvenanceOptions) -> Iterator[Finding]:
    """An id appears once across the Sources and Placeholders tables (ranges expanded)."""
    seen: dict[str, tuple[str, int]] = {}
    rows = [(s.id, "Sources", s.line) for s in provenance.sources]
    rows += [(p.id, "Placeholders", p.line) for p in provenance.placeholders]
    for source_id, table, line in rows:
        if source_id in seen:
            first_table, first_line = seen[source_id]
            yield Finding(
                provenance.path,
                line,
                PROVENANCE_UNIQUE_IDS,
                f"{source_id} is already listed in the {first_table} table (line {first_line}); "
                "give each source its own id and list it once",
            )
        else:
            seen[source_id] = (table, line)


def _licence_allowed(cell: str, allowed: frozenset[str]) -> bool:
    """Whether an SPDX expression (``MIT``, ``MIT OR Apache-2.0``) is within ``allowed``."""
    expression = re.sub(r"\([^)]*\)", " ", cell.replace("`", "")).strip()
    if not expression:
        return False
    for alternative in re.split(r"\s+OR\s+", expression):
        parts = [p.strip().lower() for p in re.split(r"\s+AND\s+", alternative)]
        if parts and all(p in allowed for p in parts):
            return True
    return False


def _lowered(values: tuple[str, ...]) -> frozenset[str]:
    """An option's strings, stripped and lower-cased."""
    return frozenset(item.strip().lower() for item in values)


def _role(cell: str) -> str:
    """A Role cell as the options are compared with: no backticks or spaces, lower case."""
    return cell.strip("` ").lower()


# What a cell holds when it holds nothing yet: a Role or Reference so written is empty (WPG208).
_PLACEHOLDERS = frozenset({"-", "--", "—", "–", "?", "...", "…", "n/a", "na", "tbd", "todo"})


def _singular(word: str) -> str:
    """An English plural's singular, for the forms a role takes (`libraries`, `tools`)."""
    if word.endswith("ies"):
        return word[:-3] + "y"
    return word[:-1] if word.endswith("s") and not word.endswith("ss") else word


def _is_code_role(role: str, roles: frozenset[str]) -> bool:
    """Whether a Role (as :func:`_role` gives it) names a code role: itself, its plural, its
    words hyphenated (`source-code`), or words that are each one (`code library`)."""
    words = [_singular(w) for w in re.findall(r"[a-z]+", role)]
    if not words:
        return False
    if role in roles or " ".join(words) in roles:
        return True
    code_words = {_singular(w) for r in roles for w in re.findall(r"[a-z]+", r)}
    return all(w in code_words for w in words) and any(w in roles for w in words)


def check_licences(provenance: Provenance, options: ProvenanceOptions) -> Iterator[Finding]:
    """A code source carries a permissive licence; copyleft or unknown is refused."""
    allowed = _lowered(options.licences)
    roles = _lowered(options.code_roles)
    reported: set[int] = set()
    for source in provenance.sources:
        role = _role(source.role)
        if source.line in reported:
            continue
        if not _is_code_role(role, roles):
            near = difflib.get_close_matches(role, sorted(roles), n=1, cutoff=_TYPO_RATIO)
            if role and near:
                reported.add(source.line)
                yield Finding(
                    provenance.path,
                    source.line,
                    PROVENANCE_CODE_LICENCE,
                    f"{source.id}'s role `{source.role.strip()}` is not a code role but is close "
                    f"to `{near[0]}`, so its licence goes unchecked; write `{near[0]}` if the "
                    "source is code, or name its role plainly (e.g. `paper`, `documentation`)",
                )
            continue
        if not _licence_allowed(source.licence, allowed):
            reported.add(source.line)
            yield Finding(
                provenance.path,
                source.line,
                PROVENANCE_CODE_LICENCE,
                f"{source.id} is a code source under `{source.licence or 'no licence'}`, which is "
                f"not on the permissive allowlist ({', '.join(sorted(allowed))}); drop the "
                "source, or record its SPDX licence if it is in fact permissive",
            )


def check_source_cells(provenance: Provenance, options: ProvenanceOptions) -> Iterator[Finding]:
    """Every source row fills its Reference, Licence and Role cells."""
    code_roles = ", ".join(f"`{role}`" for role in options.code_roles)
    fixes = (
        ("reference", "name the source in the Reference cell (title, authors, URL or version)"),
        (
            "licence",
            "write its SPDX licence (e.g. `MIT`) in the Licence cell, or `n/a (prose)` for a "
            "source whose text is not used",
        ),
        (
            "role",
            "say how it is used in the Role cell (e.g. `paper`, `documentation`, or a code "
            f"role, whose licence is checked: {code_roles})",
        ),
    )
    rows: dict[int, list[Source]] = {}
    for source in provenance.sources:
        rows.setdefault(source.line, []).append(source)
    for line, sources in rows.items():
        first = sources[0]
        ids = first.id if len(sources) == 1 else f"{first.id}-{sources[-1].id}"
        cells = (first.reference, first.licence, first.role)
        for cell, (what, fix) in zip(cells, fixes, strict=True):
            text = cell.strip("` ").lower()
            if not text or (what != "licence" and text in _PLACEHOLDERS):
                yield Finding(
                    provenance.path,
                    line,
                    PROVENANCE_SOURCE_CELLS,
                    f"{ids} has no {what}; {fix}",
                )


def check_first_use_once(provenance: Provenance, options: ProvenanceOptions) -> Iterator[Finding]:
    """Every source has exactly one first-use row, and each row names known sources."""
    sources = {s.id: s for s in provenance.sources}
    placeholders = provenance.placeholder_ids
    first: dict[str, int] = {}
    for row in provenance.first_uses:
        for source_id in row.ids:
            if source_id in placeholders:
                yield Finding(
                    provenance.path,
                    row.line,
                    PROVENANCE_FIRST_USE_ONCE,
                    f"{source_id} is a withdrawn placeholder; a first-use row cannot name it",
                )
            elif source_id not in sources:
                yield Finding(
                    provenance.path,
                    row.line,
                    PROVENANCE_FIRST_USE_ONCE,
                    f"{source_id} is not in the Sources table; add it there or fix the id",
                )
            elif source_id in first:
                yield Finding(
                    provenance.path,
                    row.line,
                    PROVENANCE_FIRST_USE_ONCE,
                    f"a second first-use row for {source_id} (the first is at line "
                    f"{first[source_id]}); the log records each source once, on the day it was "
                    "first used - later uses are traced through `Provenance:` trailers; delete "
                    "this row",
                )
            else:
                first[source_id] = row.line
    for source_id, source in sources.items():
        if source_id not in first:
            yield Finding(
                provenance.path,
                source.line,
                PROVENANCE_FIRST_USE_ONCE,
                f"{source_id} has no first-use row; add `| YYYY-MM-DD | {source_id} | what it "
                "was used for |` to the First-use log",
            )


def parse_iso_date(cell: str) -> dt.date | None:
    """``YYYY-MM-DD`` as a date, or None when the cell is not a valid ISO date."""
    text = cell.strip("` ")
    if not _ISO_DATE_RE.match(text):
        return None
    try:
        return dt.date.fromisoformat(text)
    except ValueError:
        return None


def check_first_use_dates(provenance: Provenance, options: ProvenanceOptions) -> Iterator[Finding]:
    """First-use dates are ISO (``YYYY-MM-DD``) and never decrease down the log."""
    previous: tuple[dt.date, int] | None = None
    for row in provenance.first_uses:
        date = parse_iso_date(row.date)
        if date is None:
            yield Finding(
                provenance.path,
                row.line,
                PROVENANCE_FIRST_USE_DATES,
                f"the date `{row.date}` is not an ISO date; write it as YYYY-MM-DD",
            )
            continue
        if previous is not None and date < previous[0]:
            yield Finding(
                provenance.path,
                row.line,
                PROVENANCE_FIRST_USE_DATES,
                f"{date.isoformat()} is earlier than the row above it ({previous[0].isoformat()}, "
                f"line {previous[1]}); keep the log in date order",
            )
        previous = (date, row.line)


def check_first_use_history(
    provenance: Provenance, options: ProvenanceOptions
) -> Iterator[Finding]:
    """Each source cited in a ``Provenance:`` trailer was logged on or before that commit.

    ``provenance.citations`` maps a source id to the first commit citing it and that commit's
    date; without it (no history asked for, or not a git work tree) there is nothing to check.
    """
    citations = provenance.citations
    if citations is None:
        return
    logged: dict[str, tuple[dt.date | None, int]] = {}
    for row in provenance.first_uses:
        for source_id in row.ids:
            logged.setdefault(source_id, (parse_iso_date(row.date), row.line))
    sources = provenance.source_ids
    ordered = sorted(citations.items(), key=lambda item: (id_number(item[0]) or 0, item[0]))
    for source_id, (sha, date_text) in ordered:
        if source_id not in sources:
            continue  # the trailer linter reports ids missing from the allowlist
        commit_date = parse_iso_date(date_text)
        if source_id not in logged:
            yield Finding(
                provenance.path,
                0,
                PROVENANCE_FIRST_USE_HISTORY,
                f"{source_id} is first cited by commit {sha[:12]} ({date_text}) but has no "
                f"first-use row; add `| {date_text} | {source_id} | ... |` to the First-use log",
            )
            continue
        date, line = logged[source_id]
        if date is not None and commit_date is not None and date > commit_date:
            yield Finding(
                provenance.path,
                line,
                PROVENANCE_FIRST_USE_HISTORY,
                f"{source_id}'s first use is logged on {date.isoformat()}, after commit "
                f"{sha[:12]} cited it on {date_text}; date the row {date_text} (and move it up)",
            )


#: The provenance rules: each check reads the parsed document (and, for
#: provenance-first-use-history, the first citing commits the runner put on it).
CHECKS: tuple[Rule[Provenance, ProvenanceOptions], ...] = register(
    declared(PROVENANCE_TABLES, check_tables),
    declared(PROVENANCE_ID_FORMAT, check_id_format),
    declared(PROVENANCE_UNIQUE_IDS, check_unique_ids),
    declared(PROVENANCE_CODE_LICENCE, check_licences),
    declared(PROVENANCE_FIRST_USE_ONCE, check_first_use_once),
    declared(PROVENANCE_FIRST_USE_DATES, check_first_use_dates),
    declared(PROVENANCE_FIRST_USE_HISTORY, check_first_use_history),
    declared(PROVENANCE_SOURCE_CELLS, check_source_cells),
)
