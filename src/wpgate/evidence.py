"""The one writer of ``wpgate-evidence/1`` files: wpgate owns the format it checks.

Benchmarks (``musgd.bench``, ``scripts/bench_*.py``) build their documents with
:func:`evidence_document` and write them with :func:`write_evidence`, which validates each
document with the same parser ``wpgate evidence`` reads it with (WPG404) before writing a byte.
The format is documented in ``docs/evidence/README.md`` and in :mod:`wpgate.parsers.evidence`.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import platform
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wpgate._documents import read_bounded
from wpgate._git import head_state
from wpgate.errors import EvidenceError
from wpgate.parsers.evidence import SCHEMA, parse_evidence
from wpgate.rules import EVIDENCE_FILE_VALID

__all__ = [
    "SCHEMA",
    "EvidenceError",
    "GitState",
    "evidence_document",
    "find_repo_root",
    "git_state",
    "host_environment",
    "source_hashes",
    "write_evidence",
]


@dataclass(frozen=True)
class GitState:
    """HEAD of the repository a benchmark ran from, and whether tracked files differed from it."""

    commit: str | None
    dirty: bool | None


def find_repo_root(start: Path) -> Path | None:
    """The nearest directory at or above ``start`` holding both ``.git`` and ``pyproject.toml``."""
    for candidate in (start, *start.parents):
        if (candidate / ".git").exists() and (candidate / "pyproject.toml").is_file():
            return candidate
    return None


def git_state(root: Path | None, paths: Sequence[str] = ()) -> GitState:
    """HEAD's sha and dirtiness of ``root``; both None outside a repository or without git.

    Without ``paths`` any changed tracked file makes the tree dirty; with ``paths`` (the measured
    files, repository-relative) a change to one of them, or one that is not committed, does.
    """
    if root is None:
        return GitState(None, None)
    return GitState(*head_state(root, paths))


def source_hashes(base: Path, paths: Iterable[Path]) -> dict[str, str]:
    """sha256 of each file in ``paths``, keyed by its POSIX path relative to ``base``.

    Each is read by :func:`~wpgate._documents.read_bounded` (a regular file inside ``base``);
    one that is not raises :class:`~wpgate._documents.ReadRefusedError`, saying why.
    """
    hashes: dict[str, str] = {}
    for path in sorted(paths):
        rel = path.relative_to(base).as_posix()
        hashes[rel] = hashlib.sha256(read_bounded(base, rel)).hexdigest()
    return hashes


def host_environment(**extra: Any) -> dict[str, Any]:
    """Where a benchmark ran: Python, platform, machine and CPU count, then ``extra``'s keys."""
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        **extra,
    }


def evidence_document(
    kind: str,
    results: Any,
    *,
    command: Any,
    environment: Mapping[str, Any],
    git: GitState,
    sources: Mapping[str, str],
    created: str | None = None,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """One evidence document, keys in the house order (``extra`` goes before ``sources``).

    ``created`` defaults to now (UTC, seconds). ``extra`` holds writer-specific keys, e.g.
    ``git_commit_source``.
    """
    return {
        "schema": SCHEMA,
        "kind": kind,
        "created": created or _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "command": command,
        "environment": dict(environment),
        "git_commit": git.commit,
        "git_dirty": git.dirty,
        **(extra or {}),
        "sources": dict(sources),
        "results": results,
    }


def write_evidence(document: Mapping[str, Any], path: Path) -> Path:
    """Validate ``document`` as ``wpgate-evidence/1``, then write it to ``path`` as JSON.

    Returns ``path``. Raises :class:`EvidenceError` (nothing written) when the document would
    fail ``wpgate evidence``; OSError when the location cannot be written.
    """
    text = json.dumps(document, indent=2) + "\n"
    findings = parse_evidence(text, path.name, rule_id=EVIDENCE_FILE_VALID).findings
    if findings:
        raise EvidenceError(
            f"not writing {path}: " + "; ".join(finding.message for finding in findings)
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path
