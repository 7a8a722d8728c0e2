"""wpgate's commit-trailer linter as Python calls, for tools and benchmarks that run it in-process.

:func:`lint_trailer_range` is what ``wpgate trailers --range SPEC --root ROOT`` does, end to end:
the configuration, the references, one ``git log`` process, parsing, every enabled WPG1xx rule
and the report. :func:`trailer_differences_from_git` and :func:`git_trailers` compare wpgate's
reading of a history with git's own (``%(trailers:only,unfold)``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from wpgate import _commits, _git
from wpgate._config import load_config
from wpgate._model import Finding
from wpgate._output import format_report
from wpgate.errors import GitError

__all__ = [
    "GitError",
    "TrailerReport",
    "git_trailers",
    "lint_trailer_range",
    "trailer_differences_from_git",
]


@dataclass(frozen=True)
class TrailerReport:
    """One lint of a revision range: commits checked, the findings and the formatted report."""

    checked: int
    findings: tuple[Finding, ...]
    report: str


def lint_trailer_range(
    root: Path, spec: str, *, output_format: str = "text", comment_char: str = "#"
) -> TrailerReport:
    """Lint the commits of ``spec`` (``A..B`` or one revision) in the repository at ``root``.

    ``output_format`` is ``text``, ``json``, ``github`` or ``sarif``, as ``--format``;
    ``comment_char`` is git's ``core.commentChar`` (the CLI reads it from the repository). Raises
    ``wpgate.options.ConfigError`` for a bad ``[tool.wpgate]`` table and :class:`GitError`
    for a range git cannot read.
    """
    config = load_config(root)
    run = _commits.lint_range(config, _git.parse_range(spec), comment_char=comment_char)
    report = format_report(run.findings, [run.summary], output_format)
    return TrailerReport(run.summary.checked, run.findings, report)


def trailer_differences_from_git(
    root: Path, spec: str, *, comment_char: str = "#"
) -> tuple[int, list[str]]:
    """Commits of ``spec`` read, and the shas whose trailers wpgate reads differently from git.

    The one difference the spec requires (a ``Key://x`` URL line is not a trailer) is taken out
    of git's answer first.
    """
    return _commits.differences_from_git(root, _git.parse_range(spec), comment_char=comment_char)


def git_trailers(root: Path, spec: str) -> dict[str, list[tuple[str, str]]]:
    """Each commit's ``(key, value)`` trailers as git itself reads them, keyed by full sha."""
    return _git.git_trailers(root, _git.parse_range(spec))
