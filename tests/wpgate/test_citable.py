"""The ids a commit's trailers may cite, read from the governance documents."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from wpgate._citable import load_references
from wpgate._config import load_config

ROOT = Path(__file__).resolve().parents[2]


def test_load_references_reads_every_id() -> None:
    refs = load_references(ROOT, load_config(ROOT))
    assert {"001", "006"} <= refs.wp_ids
    assert "R1" in refs.provenance_ids
    assert "A1" in refs.assumption_ids


def test_a_repository_without_governance_documents_cites_nothing(tmp_path: Path) -> None:
    refs = load_references(tmp_path, load_config(tmp_path))
    assert (refs.wp_ids, refs.provenance_ids, refs.assumption_ids) == (
        frozenset(),
        frozenset(),
        frozenset(),
    )
    assert refs.placeholder_ids == frozenset()
    assert refs.assumptions_unread == (
        "docs/ASSUMPTIONS.md does not exist; create it or fix the path"
    )


def test_an_assumptions_file_that_cannot_be_read_says_why(tmp_path: Path) -> None:
    """A cited assumption is not looked up in a file that cannot be read: the references say
    why (here, not UTF-8) rather than that the file lacks the id."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "ASSUMPTIONS.md").write_bytes(b"| ID | Assumption |\n|---|---|\n| A1 | caf\xe9 |\n")
    refs = load_references(tmp_path, load_config(tmp_path))
    assert refs.assumption_ids == frozenset()
    assert refs.assumptions_unread == (
        "docs/ASSUMPTIONS.md is not valid UTF-8 (byte 40); re-save it as UTF-8"
    )
    (docs / "ASSUMPTIONS.md").write_text("| ID | Assumption |\n|---|---|\n| A1 | x |\n")
    refs = load_references(tmp_path, load_config(tmp_path))
    assert (refs.assumption_ids, refs.assumptions_unread) == (frozenset({"A1"}), None)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_a_work_package_page_that_is_no_regular_file_is_not_registered(tmp_path: Path) -> None:
    registry = tmp_path / "docs" / "work_packages"
    registry.mkdir(parents=True)
    (registry / "wp-001.md").write_text('---\nid: "001"\n---\n', encoding="utf-8")
    os.mkfifo(registry / "wp-002.md")
    (registry / "wp-003.md").mkdir()
    (registry / "wp-004.md").symlink_to("nowhere.md")
    refs = load_references(tmp_path, load_config(tmp_path))  # returns: the FIFO is not opened
    assert refs.wp_ids == {"001"}
    assert refs.wp_refused == {
        "002": "docs/work_packages/wp-002.md is a FIFO (named pipe), not a regular file; "
        "replace it",
        "003": "docs/work_packages/wp-003.md is a directory, not a regular file; replace it",
    }
