"""Tests for the text, json and github report formats."""

from __future__ import annotations

import json

import pytest

from wpgate._model import Finding
from wpgate._output import Summary, format_report

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


def test_unknown_format() -> None:
    with pytest.raises(ValueError, match="use one of text, json, github"):
        format_report([], [], "xml")
