"""The ids a commit's trailers may cite, read from the governance documents.

Kept apart from :mod:`wpgate._docs` (the docs linters' I/O) so that the commit linters (the
commit-msg hook, ``wpgate trailers --range``) import only what reading these ids needs: a
document's parser is imported when the document is there to parse.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from wpgate._config import Config
from wpgate._documents import ReadRefusedError, load_shared, read_bounded, read_text
from wpgate.options import DocsLayout
from wpgate.rules import PROVENANCE_ID_FORMAT, PROVENANCE_TABLES

if TYPE_CHECKING:
    from wpgate._model import Problem
    from wpgate.parsers.provenance import Provenance
    from wpgate.references import References

__all__ = ["load_assumption_ids", "load_provenance", "load_references", "load_wp_ids"]

_ASSUMPTION_ID_RE = re.compile(r"^A[0-9]+$")


def load_provenance(root: Path, config: Config | None = None) -> Provenance:
    """The parsed provenance document; a missing or unreadable file is one finding."""
    rel = DocsLayout.from_config(config).provenance
    return _provenance(root, rel, read_text(root, rel))


def _provenance(root: Path, rel: str, read: tuple[str | None, Problem | None]) -> Provenance:
    """The provenance document ``rel`` parsed from ``read`` (what :func:`read_text` gave)."""

    def load() -> Provenance:
        from wpgate.parsers.provenance import Provenance, parse_provenance

        text, problem = read
        if text is None:
            found = (problem.finding(PROVENANCE_TABLES),) if problem else ()
            return Provenance(rel, (), (), (), found)
        return parse_provenance(
            text, rel, table_rule=PROVENANCE_TABLES, id_rule=PROVENANCE_ID_FORMAT
        )

    parsed: Provenance = load_shared(("provenance", root, rel), load)
    return parsed


def load_assumption_ids(root: Path, config: Config | None = None) -> frozenset[str]:
    """The ids (``A<n>``) in the first column of the assumptions document's ID tables."""
    return _assumptions(root, DocsLayout.from_config(config).assumptions)[0]


def _assumptions(root: Path, rel: str) -> tuple[frozenset[str], str | None]:
    """The assumption ids of ``rel``, and why it could not be read (None when it was), from
    one read: a file's existence is not probed apart from its reading."""
    text, problem = read_text(root, rel)
    if text is None:
        return frozenset(), None if problem is None else problem.message
    from wpgate.parsers.markdown import parse_markdown

    ids: set[str] = set()
    for table in parse_markdown(text).tables:
        column = table.column("ID")
        if column is None:
            continue
        for row in table.rows:
            cell = row.cells[column].strip("` ") if column < len(row.cells) else ""
            if _ASSUMPTION_ID_RE.match(cell):
                ids.add(cell)
    return frozenset(ids), None


def load_wp_ids(root: Path, config: Config | None = None) -> frozenset[str]:
    """The ids of the registry's pages, read from their file names (no page is parsed).

    A commit's ``WP:`` trailer needs only which packages exist; ``wpgate wp`` checks that each
    page's front matter agrees with its file name.
    """
    return _registry(root, config)[0]


def _registry(root: Path, config: Config | None = None) -> tuple[frozenset[str], Mapping[str, str]]:
    """The ids of the registry's pages that are regular files, and for each page name that is
    not one (a FIFO, a directory, a link out of the repository) why it cannot be read.

    Only the odd entries are looked at further: a regular page is known by its name alone.
    """
    folder = DocsLayout.from_config(config).work_packages
    try:
        entries = list(os.scandir(root / folder))
    except OSError:
        return frozenset(), {}
    from wpgate.parsers.work_packages import id_from_filename

    ids: set[str] = set()
    refused: dict[str, str] = {}
    for entry in entries:
        wp_id = id_from_filename(entry.name)
        if wp_id is None:
            continue
        try:
            regular = entry.is_file()
        except OSError:
            regular = False
        if regular:
            ids.add(wp_id)
            continue
        try:
            read_bounded(root, f"{folder}/{entry.name}", limit=0)
        except ReadRefusedError as exc:
            refused[wp_id] = str(exc)
        except OSError:
            continue  # a link to nothing: no page
    return frozenset(ids), refused


def load_references(root: Path, config: Config | None = None) -> References:
    """The ids a trailer may cite: work packages, sources, placeholders and assumptions."""
    from wpgate.references import References

    rel = DocsLayout.from_config(config).provenance
    read = read_text(root, rel)
    sources: frozenset[str] = frozenset()
    placeholders: frozenset[str] = frozenset()
    if read[0] is not None:  # no document, no ids: its parser is not even imported
        provenance = _provenance(root, rel, read)
        sources, placeholders = provenance.source_ids, provenance.placeholder_ids
    wp_ids, wp_refused = _registry(root, config)
    assumptions = DocsLayout.from_config(config).assumptions
    assumption_ids, assumptions_unread = _assumptions(root, assumptions)
    return References(
        wp_ids=wp_ids,
        wp_refused=wp_refused,
        provenance_ids=sources,
        placeholder_ids=placeholders,
        assumption_ids=assumption_ids,
        assumptions_path=assumptions,
        assumptions_unread=assumptions_unread,
        provenance_path=rel,
        provenance_unread=None if read[1] is None else read[1].message,
    )
