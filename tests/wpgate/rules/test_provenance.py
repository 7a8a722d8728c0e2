"""One test per provenance rule, with exact findings."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from git_helpers import isolated_git

from wpgate._docs import lint_provenance
from wpgate._git import first_citing_commits
from wpgate._model import RULES, Finding
from wpgate.docs_options import ProvenanceOptions
from wpgate.parsers.provenance import parse_provenance
from wpgate.rules import provenance as rules

P = "docs/PROVENANCE.md"


def _doc(sources: str, first_uses: str, placeholders: str = "") -> str:
    return (
        "# Provenance\n\n## Sources\n\n| ID | Reference | Licence | Role |\n"
        "| --- | --- | --- | --- |\n"
        f"{sources}\n## Placeholders\n\n| ID | Status |\n| --- | --- |\n{placeholders}\n"
        f"## First-use log\n\n| Date | Source | Used for |\n| --- | --- | --- |\n{first_uses}"
    )


# Line numbers: Sources rows start at line 7; Placeholders rows follow the sources.
GOOD = _doc(
    "| R1 | paper | n/a | paper |\n| R2–R3 | lib | MIT | code |\n",
    "| 2026-11-01 | R1 | a |\n| 2026-11-02 | R2, R3 | b |\n",
    "| R9 | withdrawn |\n",
)


def _run(check: object, text: str, options: dict[str, object] | None = None) -> list[Finding]:
    record = ProvenanceOptions.from_section(options or {})
    return list(check(parse_provenance(text, P, table_rule="WPG201", id_rule="WPG202"), record))  # type: ignore[operator]


def test_rules_are_registered() -> None:
    assert [RULES.get(f"WPG20{i}") is not None for i in range(1, 9)] == [True] * 8
    assert RULES.get("provenance-first-use-once") is RULES.get("WPG205")


def test_good_document_is_clean() -> None:
    assert [f for rule in rules.CHECKS for f in _run(rule.check, GOOD)] == []


def test_wpg201_malformed_table_row() -> None:
    text = GOOD.replace("| R1 | paper | n/a | paper |", "| R1 | paper | n/a |")
    assert [(f.line, f.rule_id) for f in _run(rules.check_tables, text)] == [(7, "WPG201")]


def test_wpg202_bad_id() -> None:
    text = GOOD.replace("| R1 | paper", "| Q1 | paper")
    (finding,) = _run(rules.check_id_format, text)
    assert (finding.line, finding.rule_id) == (7, "WPG202")


def test_wpg202_an_id_of_other_scripts_digits_is_no_id() -> None:
    """Python's \\d matched a full-width one (U+FF11) after the R: ids are ASCII digits."""
    text = GOOD.replace("| R1 | paper", "| R\uff11 | paper")
    (finding,) = _run(rules.check_id_format, text)
    assert (finding.line, finding.rule_id) == (7, "WPG202")


def test_wpg203_duplicate_ids_across_tables_and_ranges() -> None:
    text = GOOD.replace("| R9 | withdrawn |", "| R3 | withdrawn |").replace(
        "| R1 | paper", "| R1–R2 | paper"
    )
    assert [(f.line, f.message) for f in _run(rules.check_unique_ids, text)] == [
        (
            8,
            "R2 is already listed in the Sources table (line 7); give each source its own id "
            "and list it once",
        ),
        (
            14,
            "R3 is already listed in the Sources table (line 8); give each source its own id "
            "and list it once",
        ),
    ]


def test_wpg204_code_licence_allowlist() -> None:
    text = GOOD.replace("| lib | MIT | code |", "| lib | GPL-3.0-only | code |")
    (finding,) = _run(rules.check_licences, text)
    assert (finding.line, finding.rule_id) == (8, "WPG204")
    assert "`GPL-3.0-only`" in finding.message
    unknown = GOOD.replace("| lib | MIT | code |", "| lib | unknown | library |")
    assert len(_run(rules.check_licences, unknown)) == 1
    either = GOOD.replace("| lib | MIT | code |", "| lib | `MIT OR GPL-2.0` (dual) | code |")
    assert _run(rules.check_licences, either) == []
    assert _run(rules.check_licences, text, {"licences": ["GPL-3.0-only"]}) == []


def test_wpg204_a_role_a_typo_away_from_a_code_role_is_refused() -> None:
    typo = GOOD.replace("| lib | MIT | code |", "| lib | GPL-3.0-only | libary |")
    assert [(f.line, f.rule_id, f.message) for f in _run(rules.check_licences, typo)] == [
        (
            8,
            "WPG204",
            "R2's role `libary` is not a code role but is close to `library`, so its licence "
            "goes unchecked; write `library` if the source is code, or name its role plainly "
            "(e.g. `paper`, `documentation`)",
        )
    ]
    tool = GOOD.replace("| lib | MIT | code |", "| lib | GPL-3.0-only | tool |")
    assert _run(rules.check_licences, tool) == []


@pytest.mark.parametrize("role", ["libraries", "code library", "source-code", "Software"])
def test_wpg204_checks_a_code_role_in_its_plural_or_compound_forms(role: str) -> None:
    text = GOOD.replace("| lib | MIT | code |", f"| lib | GPL-3.0-only | {role} |")
    assert [(f.line, f.rule_id) for f in _run(rules.check_licences, text)] == [(8, "WPG204")]
    # A role that only mentions a code word is not one.
    prose = GOOD.replace("| lib | MIT | code |", "| lib | GPL-3.0-only | docs of a library |")
    assert _run(rules.check_licences, prose) == []


@pytest.mark.parametrize("placeholder", ["-", "n/a", "TBD", "?"])
def test_wpg208_a_placeholder_role_or_reference_is_empty(placeholder: str) -> None:
    text = GOOD.replace(
        "| R1 | paper | n/a | paper |", f"| R1 | {placeholder} | n/a | {placeholder} |"
    )
    found = [(f.line, f.message.split(";")[0]) for f in _run(rules.check_source_cells, text)]
    assert found == [(7, "R1 has no reference"), (7, "R1 has no role")]  # `n/a` licence: prose


def test_wpg208_empty_reference_licence_and_role() -> None:
    text = GOOD.replace("| R1 | paper | n/a | paper |", "| R1 | | | |").replace(
        "| lib | MIT | code |", "| lib | MIT | `` |"
    )
    code_roles = "`code`, `library`, `software`, `source code`"
    assert [(f.line, f.rule_id, f.message) for f in _run(rules.check_source_cells, text)] == [
        (
            7,
            "WPG208",
            "R1 has no reference; name the source in the Reference cell (title, authors, URL "
            "or version)",
        ),
        (
            7,
            "WPG208",
            "R1 has no licence; write its SPDX licence (e.g. `MIT`) in the Licence cell, or "
            "`n/a (prose)` for a source whose text is not used",
        ),
        (
            7,
            "WPG208",
            "R1 has no role; say how it is used in the Role cell (e.g. `paper`, "
            f"`documentation`, or a code role, whose licence is checked: {code_roles})",
        ),
        (
            8,
            "WPG208",
            "R2-R3 has no role; say how it is used in the Role cell (e.g. `paper`, "
            f"`documentation`, or a code role, whose licence is checked: {code_roles})",
        ),
    ]


def test_wpg205_first_use_once_the_seed_duplicate() -> None:
    text = GOOD + "| 2026-11-03 | R1 | again |\n| 2026-11-03 | R9 | x |\n| 2026-11-03 | R7 | x |\n"
    text = text.replace("| 2026-11-02 | R2, R3 | b |", "| 2026-11-02 | R2 | b |")
    assert [(f.line, f.message.split(";")[0]) for f in _run(rules.check_first_use_once, text)] == [
        (22, "a second first-use row for R1 (the first is at line 20)"),
        (23, "R9 is a withdrawn placeholder"),
        (24, "R7 is not in the Sources table"),
        (8, "R3 has no first-use row"),
    ]


def test_wpg206_dates_iso_and_ordered() -> None:
    text = GOOD.replace("2026-11-02", "2026-10-02") + "| 29/11/2026 | R1 | x |\n"
    assert [(f.line, f.message.split(";")[0]) for f in _run(rules.check_first_use_dates, text)] == [
        (21, "2026-10-02 is earlier than the row above it (2026-11-01, line 20)"),
        (22, "the date `29/11/2026` is not an ISO date"),
    ]


def test_wpg207_history_against_first_citing_commit() -> None:
    parsed = parse_provenance(GOOD, P, table_rule="WPG201", id_rule="WPG202")
    citations = {
        "R1": ("c" * 40, "2026-10-31"),
        "R2": ("d" * 40, "2026-11-02"),
        "R3": ("e" * 40, "2026-11-05"),
        "R8": ("f" * 40, "2026-01-01"),
    }
    findings = list(
        rules.check_first_use_history(replace(parsed, citations=citations), ProvenanceOptions())
    )
    assert [(f.line, f.rule_id) for f in findings] == [(20, "WPG207")]
    assert "logged on 2026-11-01, after commit cccccccccccc cited it on 2026-10-31" in (
        findings[0].message
    )
    unlogged = GOOD.replace("| 2026-11-02 | R2, R3 | b |", "| 2026-11-02 | R2 | b |")
    findings = list(
        rules.check_first_use_history(
            replace(
                parse_provenance(unlogged, P, table_rule="WPG201", id_rule="WPG202"),
                citations=citations,
            ),
            ProvenanceOptions(),
        )
    )
    assert [(f.line, f.message.split(" but")[0]) for f in findings][1] == (
        0,
        "R3 is first cited by commit eeeeeeeeeeee (2026-11-05)",
    )


def test_history_reads_trailers_with_git(tmp_path: Path) -> None:
    isolated_git(tmp_path, "init", "-q")
    (tmp_path / "docs").mkdir()
    (tmp_path / P).write_text(GOOD, encoding="utf-8")
    isolated_git(tmp_path, "add", ".")
    isolated_git(
        tmp_path,
        "commit",
        "-q",
        "-m",
        "feat: a\n\nProvenance: R1, R2–R3 §2",
        date="2026-10-30T10:00:00+00:00",
    )
    isolated_git(
        tmp_path,
        "commit",
        "-q",
        "--allow-empty",
        "-m",
        "feat: b\n\nProvenance: R1",
        date="2026-11-01T12:00:00+00:00",
    )
    first = first_citing_commits(tmp_path)
    assert sorted(first) == ["R1", "R2", "R3"]
    assert {d for _, d in first.values()} == {"2026-10-30"}
    findings = lint_provenance(tmp_path, None, history=True)
    assert [(f.line, f.rule_id) for f in findings] == [
        (20, "WPG207"),
        (21, "WPG207"),
        (21, "WPG207"),
    ]
    assert lint_provenance(tmp_path, None, history=False) == []


def test_wpg204_options_accept_a_lone_string() -> None:
    text = GOOD.replace("| lib | MIT | code |", "| lib | MPL-2.0 | code |")
    assert _run(rules.check_licences, text, {"licences": "MPL-2.0"}) == []
    assert len(_run(rules.check_licences, text, {"code_roles": "library"})) == 0
    assert len(_run(rules.check_licences, text, {"code_roles": ["code"]})) == 1
