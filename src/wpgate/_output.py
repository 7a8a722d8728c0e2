"""Rendering findings for people, programs and GitHub Actions; shared by every linter.

``text``: ``<sha12|file>:<line>: <RULE-ID> <message>`` per finding, then a summary line.
``json``: ``{"findings": [...], "summary": {...}}``. ``github``: workflow commands
(``::error file=...,line=...,title=...::message``) that annotate the pull request, then the
summary as a notice.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from wpgate._model import Finding

__all__ = ["FORMATS", "LinterRun", "Summary", "format_report"]

FORMATS = ("text", "json", "github")


@dataclass(frozen=True)
class Summary:
    """What one linter looked at: ``checked`` items of a ``kind``, and exemptions by reason."""

    linter: str
    checked: int
    kind: str = "item"
    exempt: Mapping[str, int] = field(default_factory=dict)

    def describe(self) -> str:
        """One line, e.g. ``trailers: 12 commits checked, 2 exempt (merge 1, fixup 1)``."""
        noun = self.kind if self.checked == 1 else f"{self.kind}s"
        line = f"{self.linter}: {self.checked} {noun} checked"
        total = sum(self.exempt.values())
        if self.exempt:
            reasons = ", ".join(f"{reason} {count}" for reason, count in self.exempt.items())
            line += f", {total} exempt ({reasons})"
        return line


@dataclass(frozen=True)
class LinterRun:
    """One linter's result: its findings and its summary."""

    findings: tuple[Finding, ...]
    summary: Summary


def _escape_data(text: str) -> str:
    """GitHub workflow-command escaping of a message."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    """GitHub workflow-command escaping of a property value (also ``:`` and ``,``)."""
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def _is_commit(path: str) -> bool:
    """Whether a finding's path is a commit sha rather than a file."""
    return len(path) == 12 and all(c in "0123456789abcdef" for c in path)


def _github(finding: Finding) -> str:
    """One finding as a workflow ``::error`` (or ``::warning``) command."""
    title = _escape_property(f"{finding.rule_id}")
    if _is_commit(finding.path):
        # A commit is not a file of the diff: name it in the message instead.
        text = _escape_data(f"commit {finding.path}: {finding.message}")
        return f"::{finding.severity} title={title}::{text}"
    props = [f"file={_escape_property(finding.path)}"]
    if finding.line > 0:
        props.append(f"line={finding.line}")
    props.append(f"title={title}")
    return f"::{finding.severity} {','.join(props)}::{_escape_data(finding.message)}"


def _label(finding: Finding) -> str:
    """`` (warning)`` after the rule id of a warning; errors carry no label."""
    return " (warning)" if finding.severity == "warning" else ""


def _totals(findings: list[Finding], summaries: list[Summary]) -> str:
    """The closing line of a text or github report."""
    parts = [s.describe() for s in summaries]
    verdict = f"{len(findings)} finding{'s' if len(findings) != 1 else ''}"
    warned = sum(1 for f in findings if f.severity == "warning")
    if warned:
        verdict += f" ({warned} warning{'s' if warned != 1 else ''}, not failing)"
    return "; ".join([*parts, verdict])


def format_report(
    findings: Iterable[Finding], summaries: Iterable[Summary], fmt: str = "text"
) -> str:
    """Findings and summaries in ``fmt`` (one of :data:`FORMATS`), ending with a newline."""
    found = list(findings)
    done = list(summaries)
    if fmt == "json":
        payload = {
            "findings": [
                {
                    "path": f.path,
                    "line": f.line,
                    "rule_id": f.rule_id,
                    "severity": f.severity,
                    "message": f.message,
                }
                for f in found
            ],
            "summary": {
                "findings": len(found),
                "linters": [
                    {
                        "linter": s.linter,
                        "kind": s.kind,
                        "checked": s.checked,
                        "exempt": dict(s.exempt),
                    }
                    for s in done
                ],
            },
        }
        return json.dumps(payload, indent=2, ensure_ascii=False) + "\n"
    if fmt == "github":
        lines = [_github(f) for f in found]
        lines.append(f"::notice title=wpgate::{_escape_data(_totals(found, done))}")
        return "\n".join(lines) + "\n"
    if fmt != "text":
        raise ValueError(f"unknown format {fmt!r}; use one of {', '.join(FORMATS)}")
    lines = [f"{f.path}:{f.line}: {f.rule_id}{_label(f)} {f.message}" for f in found]
    lines.append(_totals(found, done))
    return "\n".join(lines) + "\n"
