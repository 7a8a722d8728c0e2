"""``wpgate.api``: the trailer linter as calls, as ``wpgate trailers --range`` runs it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from git_helpers import git, governed_repository

from wpgate.api import (
    GitError,
    TrailerReport,
    git_trailers,
    lint_trailer_range,
    trailer_differences_from_git,
)

GOOD = (
    "feat(cli): x\n\nWhy.\n\nWP: 004\nProvenance: R7\nAssumptions: A1\nGate: tests/test_gate.py\n"
)
BAD = GOOD.replace("R7", "R99")

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A governed repository, then a good and a bad commit."""
    path = governed_repository(tmp_path)
    for message in (GOOD, BAD):
        git(path, "commit", "-q", "--allow-empty", "-m", message)
    return path


def test_lint_trailer_range_reports_as_the_cli_does(root: Path) -> None:
    report = lint_trailer_range(root, "HEAD~2..HEAD")
    assert isinstance(report, TrailerReport)
    assert report.checked == 2
    assert [f.rule_id for f in report.findings] == ["WPG105"]
    assert "R99 is not in the Sources table" in report.report
    assert report.report.endswith("\n")
    assert lint_trailer_range(root, "HEAD~2..HEAD~1").findings == ()
    json_report = lint_trailer_range(root, "HEAD~2..HEAD", output_format="json").report
    assert json_report.lstrip().startswith("{")


def test_a_range_git_cannot_read_is_a_git_error(root: Path) -> None:
    with pytest.raises(GitError):
        lint_trailer_range(root, "no-such-branch..HEAD")


def test_wpgate_reads_the_trailers_git_reads(root: Path) -> None:
    git(root, "commit", "-q", "--allow-empty", "-m", "fix: z\n\nbody\n\nSee: https://x.org\n")
    assert trailer_differences_from_git(root, "HEAD") == (4, [])
    trailers = git_trailers(root, "HEAD")
    assert trailers[git(root, "rev-parse", "HEAD~1")][0] == ("WP", "004")
    assert trailers[git(root, "rev-parse", "HEAD")] == [("See", "https://x.org")]
