"""Tests for the provenance-document parser."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from wpgate.parsers.provenance import expand_ids, parse_provenance

GOOD = """# Provenance

## Sources

| ID | Reference | Licence | Role |
| --- | --- | --- | --- |
| R1 | A paper | n/a | paper |
| R2–R4 | Docs set | n/a | documentation |

## Placeholders

| ID | Status |
| --- | --- |
| R9 | withdrawn |

## First-use log

| Date | Source | Used for |
| --- | --- | --- |
| 2026-11-29 | R1, R2 | x |
"""


def test_parses_three_tables_with_ranges_expanded() -> None:
    parsed = parse_provenance(GOOD, "docs/PROVENANCE.md", table_rule="WPG201", id_rule="WPG202")
    assert [(s.id, s.line) for s in parsed.sources] == [("R1", 7), ("R2", 8), ("R3", 8), ("R4", 8)]
    assert parsed.placeholder_ids == frozenset({"R9"})
    assert [(f.date, f.ids, f.line) for f in parsed.first_uses] == [
        ("2026-11-29", ("R1", "R2"), 20)
    ]
    assert parsed.findings == ()


def test_expand_ids_forms() -> None:
    assert expand_ids("R1–R3")[0] == ("R1", "R2", "R3")
    assert expand_ids("R1-R2, `R7`")[0] == ("R1", "R2", "R7")
    assert expand_ids("R5..R6")[0] == ("R5", "R6")
    assert expand_ids("R3–R1") == ((), ["R3–R1"])
    assert expand_ids("X1, R2") == (("R2",), ["X1"])


def test_bad_ids_and_missing_tables_are_findings() -> None:
    text = GOOD.replace("| R1 | A paper", "| S1 | A paper").replace("## Placeholders", "## Other")
    parsed = parse_provenance(text, "p.md", table_rule="WPG201", id_rule="WPG202")
    assert [(f.line, f.rule_id) for f in parsed.findings] == [(7, "WPG202"), (0, "WPG201")]
    assert "`S1` is not a source id" in parsed.findings[0].message


@given(st.text(max_size=300))
def test_never_raises(text: str) -> None:
    parse_provenance(text, "p.md", table_rule="WPG201", id_rule="WPG202")
