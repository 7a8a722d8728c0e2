"""Tests for the text, json, github and sarif report formats."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from wpgate import __version__
from wpgate._model import RULES, Finding
from wpgate._output import SARIF_SCHEMA, Summary, format_report, format_sarif_failure
from wpgate.rules import register_all

#: The official SARIF 2.1.0 schema (OASIS, errata 01), copied verbatim (docs/PROVENANCE.md R252).
SCHEMA = json.loads(
    (Path(__file__).parent / "fixtures" / "sarif-schema-2.1.0.json").read_text(encoding="utf-8")
)

FINDINGS = [
    Finding("abc123def456", 5, "WPG104", "the `WP:` trailer is missing; add `WP: NNN`"),
    Finding("docs/PROVENANCE.md", 12, "WPG202", "50% done, a:b\nsecond line"),
]
SUMMARY = Summary("trailers", 12, "commit", {"fixup": 1, "merge": 2})


def test_text() -> None:
    assert format_report(FINDINGS, [SUMMARY], "text") == (
        "abc123def456:5: WPG104 the `WP:` trailer is missing; add `WP: NNN`\n"
        "docs/PROVENANCE.md:12: WPG202 50% done, a:b\nsecond line\n"
        "trailers: 12 commits checked, 3 exempt (fixup 1, merge 2); 2 findings\n"
    )


def test_json_round_trips() -> None:
    data = json.loads(format_report(FINDINGS, [SUMMARY], "json"))
    assert data["findings"][0] == {
        "path": "abc123def456",
        "line": 5,
        "rule_id": "WPG104",
        "severity": "error",
        "message": "the `WP:` trailer is missing; add `WP: NNN`",
    }
    assert data["summary"] == {
        "findings": 2,
        "linters": [
            {
                "linter": "trailers",
                "kind": "commit",
                "checked": 12,
                "exempt": {"fixup": 1, "merge": 2},
            }
        ],
    }


def test_github_annotations_are_escaped() -> None:
    lines = format_report(FINDINGS, [Summary("trailers", 1, "commit")], "github").splitlines()
    assert lines == [
        "::error title=WPG104::commit abc123def456: the `WP:` trailer is missing; add `WP: NNN`",
        "::error file=docs/PROVENANCE.md,line=12,title=WPG202::50%25 done, a:b%0Asecond line",
        "::notice title=wpgate::trailers: 1 commit checked; 2 findings",
    ]
    # A pull request's description (`--pr -`) is no file: no `file=` GitHub cannot resolve.
    pr = Finding("<pr>", 6, "WPG109", "the PR description must keep the statement")
    assert format_report([pr], [], "github").splitlines()[0] == (
        "::error title=WPG109::<pr>:6: the PR description must keep the statement"
    )


def test_unknown_format() -> None:
    with pytest.raises(ValueError, match="use one of text, json, github, sarif"):
        format_report([], [], "xml")


def _sarif(findings: list[Finding], help_uri: str = "") -> dict[str, Any]:
    """The SARIF log of ``findings``, checked against the official schema."""
    log: dict[str, Any] = json.loads(format_report(findings, [SUMMARY], "sarif", help_uri=help_uri))
    jsonschema.Draft4Validator(SCHEMA).validate(log)
    return log


def test_the_schema_is_the_official_one() -> None:
    assert SCHEMA["id"] == SARIF_SCHEMA
    assert SCHEMA["title"] == "Static Analysis Results Format (SARIF) Version 2.1.0 JSON Schema"
    jsonschema.Draft4Validator.check_schema(SCHEMA)


def test_the_schema_refuses_a_log_that_breaks_it() -> None:
    # Control: the validation can fail (a result without its required message).
    log = _sarif(FINDINGS)
    broken = copy.deepcopy(log)
    del broken["runs"][0]["results"][1]["message"]
    with pytest.raises(jsonschema.ValidationError, match="'message' is a required property"):
        jsonschema.Draft4Validator(SCHEMA).validate(broken)


def test_a_run_that_could_not_lint_is_a_failed_invocation_without_results() -> None:
    log = json.loads(format_sarif_failure("pyproject.toml: is not valid TOML; fix it", 2))
    jsonschema.Draft4Validator(SCHEMA).validate(log)
    (run,) = log["runs"]
    assert run["tool"]["driver"]["name"] == "wpgate"
    assert run["invocations"] == [
        {
            "executionSuccessful": False,
            "exitCode": 2,
            "toolExecutionNotifications": [
                {"level": "error", "message": {"text": "pyproject.toml: is not valid TOML; fix it"}}
            ],
        }
    ]
    # No analysis ran: no results array, which would read as a clean run (SARIF §3.14.23).
    assert "results" not in run


def test_sarif_is_one_run_of_wpgate_with_every_rule() -> None:
    register_all()
    log = _sarif(FINDINGS)
    assert (log["$schema"], log["version"], len(log["runs"])) == (SARIF_SCHEMA, "2.1.0", 1)
    driver = log["runs"][0]["tool"]["driver"]
    assert (driver["name"], driver["version"]) == ("wpgate", __version__)
    assert [r["id"] for r in driver["rules"]] == [rule.rule_id for rule in RULES]
    subject = next(r for r in driver["rules"] if r["id"] == "WPG101")
    assert subject["name"] == "subject-format"
    assert subject["shortDescription"] == {"text": RULES.get("WPG101").summary}  # type: ignore[union-attr]
    assert subject["defaultConfiguration"] == {"enabled": True, "level": "error"}
    assert "helpUri" not in subject
    assert log["runs"][0]["properties"]["summaries"] == [
        {"linter": "trailers", "kind": "commit", "checked": 12, "exempt": {"fixup": 1, "merge": 2}}
    ]


def test_rule_descriptions_write_code_as_markdown_not_rest() -> None:
    register_all()
    rules = _sarif(FINDINGS)["runs"][0]["tool"]["driver"]["rules"]
    described = {r["id"]: r["fullDescription"]["text"] for r in rules}
    assert described["WPG101"] == "The subject reads `type(scope): text` with a configured type."
    # The first paragraph, whole: the docstring's first line ends mid-sentence.
    assert described["WPG107"] == (
        "`Gate:` names tests that resolve statically (`path::name` in any configured language, "
        "a whole test file, or `ci:<job>`)."
    )
    assert not [text for text in described.values() if "``" in text]


def test_sarif_results_locate_files_and_commits() -> None:
    log = _sarif([*FINDINGS, Finding("docs/a b.md", 0, "WPG301", "x", "warning")])
    rules = [r["id"] for r in log["runs"][0]["tool"]["driver"]["rules"]]
    commit, page, whole = log["runs"][0]["results"]
    assert commit == {
        "ruleId": "WPG104",
        "ruleIndex": rules.index("WPG104"),
        "level": "error",
        "message": {"text": "commit abc123def456: the `WP:` trailer is missing; add `WP: NNN`"},
        "locations": [{"logicalLocations": [{"name": "abc123def456", "kind": "commit"}]}],
        "properties": {"messageLine": 5},
    }
    assert page == {
        "ruleId": "WPG202",
        "ruleIndex": rules.index("WPG202"),
        "level": "error",
        "message": {"text": "50% done, a:b\nsecond line"},
        "locations": [
            {
                "physicalLocation": {
                    "artifactLocation": {"uri": "docs/PROVENANCE.md", "uriBaseId": "SRCROOT"},
                    "region": {"startLine": 12},
                }
            }
        ],
    }
    # A warning stays a warning; a whole-file finding has no region; the uri is escaped.
    assert whole["level"] == "warning"
    assert whole["locations"][0]["physicalLocation"] == {
        "artifactLocation": {"uri": "docs/a%20b.md", "uriBaseId": "SRCROOT"}
    }


def test_sarif_links_each_rule_to_its_page() -> None:
    log = _sarif([], help_uri="https://example.org/rules/{id}/?n={name}")
    rules = {r["id"]: r for r in log["runs"][0]["tool"]["driver"]["rules"]}
    assert rules["WPG104"]["helpUri"] == "https://example.org/rules/wpg104/?n=wp-trailer"
    assert log["runs"][0]["results"] == []


def test_sarif_gives_stdin_a_logical_location() -> None:
    (result,) = _sarif([Finding("<stdin>", 1, "WPG101", "the subject is wrong")])["runs"][0][
        "results"
    ]
    assert result["message"] == {"text": "the subject is wrong"}
    assert result["locations"] == [{"logicalLocations": [{"name": "<stdin>", "kind": "input"}]}]
    assert result["properties"] == {"messageLine": 1}
