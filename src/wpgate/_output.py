"""Rendering findings for people, programs and GitHub Actions; shared by every linter.

``text``: ``<sha12|file>:<line>: <RULE-ID> <message>`` per finding, then a summary line.
``json``: ``{"findings": [...], "summary": {...}}``. ``github``: workflow commands
(``::error file=...,line=...,title=...::message``) that annotate the pull request, then the
summary as a notice. ``sarif``: a SARIF 2.1.0 log for code scanning (:func:`format_sarif`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from operator import attrgetter
from typing import Any
from urllib.parse import quote

from wpgate._model import Finding, Rule
from wpgate._record import field, frozen

__all__ = [
    "FORMATS",
    "LinterRun",
    "Summary",
    "describe_rule",
    "format_report",
    "format_sarif",
    "format_sarif_failure",
]

FORMATS = ("text", "json", "github", "sarif")

#: The official schema of the SARIF 2.1.0 log (OASIS Standard with Errata 01).
SARIF_SCHEMA = (
    "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
)
#: The base a result's relative ``artifactLocation.uri`` is resolved against: the repository.
SARIF_ROOT = "SRCROOT"


@frozen
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


@frozen
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
    logical = _logical_kind(finding.path)
    if logical is not None:
        # A commit, or a message read from stdin (`<pr>`), is not a file of the diff: name it
        # in the message instead, with the line for a message.
        where = (
            f"commit {finding.path}" if logical == "commit" else f"{finding.path}:{finding.line}"
        )
        text = _escape_data(f"{where}: {finding.message}")
        return f"::{finding.severity} title={title}::{text}"
    props = [f"file={_escape_property(finding.path)}"]
    if finding.line > 0:
        props.append(f"line={finding.line}")
    props.append(f"title={title}")
    return f"::{finding.severity} {','.join(props)}::{_escape_data(finding.message)}"


_SEVERITY = attrgetter("severity")


def _totals(findings: list[Finding], summaries: list[Summary]) -> str:
    """The closing line of a text or github report."""
    parts = [s.describe() for s in summaries]
    verdict = f"{len(findings)} finding{'s' if len(findings) != 1 else ''}"
    # One pass in C over a history's findings (tens of thousands), not a generator's.
    warned = list(map(_SEVERITY, findings)).count("warning")
    if warned:
        verdict += f" ({warned} warning{'s' if warned != 1 else ''}, not failing)"
    return "; ".join([*parts, verdict])


# A reStructuredText literal (``x``), as the checks' docstrings write code.
_RST_LITERAL = re.compile(r"``(.+?)``")


def describe_rule(rule: Rule[Any, Any]) -> str:
    """What ``rule`` checks, for people (``wpgate explain``) and SARIF: the first paragraph of
    its check's docstring on one line, each reST literal (````x````) as Markdown code (`` `x` ``).
    """
    doc = (rule.check.__doc__ or "").strip()
    paragraph = " ".join(doc.split("\n\n", 1)[0].split())
    return _RST_LITERAL.sub(r"`\1`", paragraph)


def _sarif_rule(rule: Rule[Any, Any], help_uri: str) -> dict[str, Any]:
    """One rule as a SARIF ``reportingDescriptor``."""
    descriptor: dict[str, Any] = {
        "id": rule.rule_id,
        "name": rule.name,
        "shortDescription": {"text": rule.summary},
        "defaultConfiguration": {"enabled": rule.enabled_by_default, "level": "error"},
    }
    description = describe_rule(rule)
    if description:
        descriptor["fullDescription"] = {"text": description}
    if help_uri:
        descriptor["helpUri"] = help_uri.format(id=rule.rule_id.lower(), name=rule.name)
    return descriptor


def _logical_kind(path: str) -> str | None:
    """``commit`` or ``input`` (``<stdin>``, ``<pr>``) for a path that names no file, else None."""
    if _is_commit(path):
        return "commit"
    return "input" if path.startswith("<") and path.endswith(">") else None


def _sarif_result(finding: Finding, index: int | None) -> dict[str, Any]:
    """One finding as a SARIF ``result``.

    A file finding has a physical location: the path relative to the repository root
    (:data:`SARIF_ROOT`) and the line when one is known. A commit finding has no file: its
    location is logical (the commit's sha, kind ``commit``), its message names the commit as the
    ``github`` format does, and the line of the message goes into the result's properties. A
    message read from stdin (``<stdin>``, ``<pr>``) is logical too, of kind ``input``.
    """
    result: dict[str, Any] = {"ruleId": finding.rule_id, "level": finding.severity}
    if index is not None:
        result["ruleIndex"] = index
    logical = _logical_kind(finding.path)
    if logical is not None:
        prefix = f"commit {finding.path}: " if logical == "commit" else ""
        result["message"] = {"text": f"{prefix}{finding.message}"}
        result["locations"] = [{"logicalLocations": [{"name": finding.path, "kind": logical}]}]
        if finding.line > 0:
            result["properties"] = {"messageLine": finding.line}
        return result
    result["message"] = {"text": finding.message}
    physical: dict[str, Any] = {
        "artifactLocation": {"uri": quote(finding.path, safe="/"), "uriBaseId": SARIF_ROOT}
    }
    if finding.line > 0:
        physical["region"] = {"startLine": finding.line}
    result["locations"] = [{"physicalLocation": physical}]
    return result


def format_sarif(
    findings: Iterable[Finding], summaries: Iterable[Summary], *, help_uri: str = ""
) -> str:
    """Findings as a SARIF 2.1.0 log: one run of wpgate, every known rule, one result each.

    ``help_uri`` is a template of each rule's documentation page (``{id}``: the lower-case
    rule id, ``{name}``: its name), e.g. ``https://example.org/reference/rules/{id}/``; empty,
    the rules carry no ``helpUri``. The summaries go into the run's properties.
    """
    driver = _sarif_driver(help_uri)
    index = {descriptor["id"]: i for i, descriptor in enumerate(driver["rules"])}
    run: dict[str, Any] = {
        "tool": {"driver": driver},
        "results": [_sarif_result(f, index.get(f.rule_id)) for f in findings],
        "properties": {
            "summaries": [
                {"linter": s.linter, "kind": s.kind, "checked": s.checked, "exempt": dict(s.exempt)}
                for s in summaries
            ]
        },
    }
    return _sarif_log(run)


def format_sarif_failure(message: str, exit_code: int) -> str:
    """A SARIF 2.1.0 log of a run that could not lint (a usage, configuration or git error).

    The run's one invocation failed (``executionSuccessful`` false, SARIF §3.20.14) and carries
    the error as a tool execution notification of level ``error``, which means the run failed
    (§3.20.21). ``results`` is left out: a run that never began its analysis has none to list,
    and an empty array would claim a clean one (§3.14.23).
    """
    invocation = {
        "executionSuccessful": False,
        "exitCode": exit_code,
        "toolExecutionNotifications": [{"level": "error", "message": {"text": message}}],
    }
    return _sarif_log({"tool": {"driver": _sarif_driver("")}, "invocations": [invocation]})


def _sarif_driver(help_uri: str) -> dict[str, Any]:
    """wpgate as a SARIF ``toolComponent``: name, version and every registered rule."""
    import wpgate
    from wpgate._model import RULES
    from wpgate.rules import register_all

    register_all()  # every rule is described, not only those of the linters that ran
    rules = [_sarif_rule(rule, help_uri) for rule in RULES]
    return {"name": "wpgate", "version": wpgate.__version__, "rules": rules}


def _sarif_log(run: Mapping[str, Any]) -> str:
    """The SARIF log of one ``run``, as JSON text ending with a newline."""
    import json

    log = {"$schema": SARIF_SCHEMA, "version": "2.1.0", "runs": [run]}
    return json.dumps(log, indent=2, ensure_ascii=False) + "\n"


def format_report(
    findings: Iterable[Finding],
    summaries: Iterable[Summary],
    fmt: str = "text",
    *,
    help_uri: str = "",
) -> str:
    """Findings and summaries in ``fmt`` (one of :data:`FORMATS`), ending with a newline.

    ``help_uri`` is used by ``sarif`` alone (:func:`format_sarif`).
    """
    found = list(findings)
    done = list(summaries)
    if fmt == "sarif":
        return format_sarif(found, done, help_uri=help_uri)
    if fmt == "json":
        import json  # the text report, the hooks' default, never loads it

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
    # A warning is labelled after its rule id; errors carry no label.
    lines = [
        f"{f.path}:{f.line}: {f.rule_id}{' (warning)' if f.severity == 'warning' else ''} "
        f"{f.message}"
        for f in found
    ]
    lines.append(_totals(found, done))
    return "\n".join(lines) + "\n"
