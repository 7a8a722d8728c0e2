"""The ids a commit's trailers may cite, read from the governance documents."""

from __future__ import annotations

from pathlib import Path

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
