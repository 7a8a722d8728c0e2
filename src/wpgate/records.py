"""The governance records the rules read: plain frozen data, built by the loaders.

Rule modules import these normally; the loaders that build them (``wpgate._evidence_tree``,
``wpgate.project_index``) import the rules never, so no import cycle needs a workaround.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from wpgate._model import Finding
from wpgate.parsers.evidence import Claim, CountMarker, EvidenceParse, IdenticalMarker

__all__ = ["ClaimContext", "EvidenceTree", "ProjectIndex", "ResolvedCitation"]


@dataclass(frozen=True)
class ProjectIndex:
    """What exists in the tree: files, Python modules and their names, flags, commands."""

    files: frozenset[str]
    directories: frozenset[str]
    modules: Mapping[str, frozenset[str]] = field(default_factory=dict)
    members: Mapping[str, frozenset[str]] = field(default_factory=dict)
    identifiers: frozenset[str] = frozenset()
    flags: frozenset[str] = frozenset()
    commands: frozenset[str] = frozenset()
    scripts: frozenset[str] = frozenset()
    make_targets: frozenset[str] = frozenset()


@dataclass(frozen=True)
class ResolvedCitation:
    """A claim's citation resolved: its repository path, or why it was refused."""

    target: str
    line: int
    path: str | None
    problem: str | None
    exists: bool
    is_evidence: bool


@dataclass(frozen=True)
class ClaimContext:
    """A claim with its citations resolved."""

    claim: Claim
    citations: tuple[ResolvedCitation, ...]

    @property
    def evidence_paths(self) -> tuple[str, ...]:
        """The evidence files the claim cites (existing ones, in order, no duplicates)."""
        return tuple(
            dict.fromkeys(c.path for c in self.citations if c.is_evidence and c.exists and c.path)
        )


@dataclass(frozen=True)
class EvidenceTree:
    """Everything the evidence rules need, read once: files, claims, hashes, git answers.

    ``git`` is False when history checks are off or ``root`` is not a git work tree; then the
    commit-bound facts are empty and the rules that need them say so. ``unreachable`` maps each
    named revision that only an unreachable object answers (resolved to None in ``commits``, as
    in a clone) to the commit in history with the same tree, or None.
    """

    evidence_dir: str
    files: Mapping[str, EvidenceParse]
    claims: tuple[ClaimContext, ...]
    current_hashes: Mapping[str, str | None]
    git: bool = False
    commits: Mapping[str, str | None] = field(default_factory=dict)
    unreachable: Mapping[str, str | None] = field(default_factory=dict)
    hashes_at: Mapping[tuple[str, str], str | None] = field(default_factory=dict)
    identical: Mapping[IdenticalMarker, bool | str] = field(default_factory=dict)
    counts: Mapping[CountMarker, int | str] = field(default_factory=dict)
    findings: tuple[Finding, ...] = ()
