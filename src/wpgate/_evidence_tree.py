"""The evidence tree: every evidence file and claim read, and git and pytest asked, in phases.

:func:`load_evidence` builds the :class:`~wpgate.records.EvidenceTree` the evidence rules
(WPG4xx) read, one phase at a time: read the evidence files, resolve each claim's citations
(reading the files they cite), hash the recorded sources as they are now, and, in a git work
tree, resolve the named commits, read the recorded blobs' hashes, answer the ``identical``
markers with ``git diff`` and the ``collected`` markers with pytest. A phase whose only rule
is switched off is not run.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path, PurePosixPath

from wpgate._config import Config
from wpgate._documents import glob_pages, read_text, resolve_inside, sha256_file
from wpgate._git import (
    blob_hashes_at,
    is_work_tree,
    paths_identical,
    require_full_history,
    resolve_commits,
    unreachable_commits,
)
from wpgate._model import Finding
from wpgate.options import DocsLayout
from wpgate.parsers.evidence import (
    CountMarker,
    EvidenceParse,
    IdenticalMarker,
    parse_claims,
    parse_evidence,
)
from wpgate.records import ClaimContext, EvidenceTree, ResolvedCitation
from wpgate.rules import EVIDENCE_CLAIM_CITES, EVIDENCE_FILE_VALID

__all__ = ["count_collected", "load_evidence"]

_PYTEST_TIMEOUT_S = 120
_COLLECT_RE = re.compile(r"(\d+) tests? collected|collected (\d+) items?")


# A line of pytest's output that names why collecting failed.
_CAUSE_RE = re.compile(r"^E\s+\w*(?:Error|Exception)\b|^\w*(?:Error|Exception):")


def count_collected(root: Path, paths: Sequence[str]) -> int | str:
    """How many tests pytest collects from ``paths`` (run in ``root``), or why it could not."""
    try:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "--collect-only",
                "-q",
                "-p",
                "no:cacheprovider",
                "--",  # the paths are paths, never pytest's options
                *paths,
            ],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=_PYTEST_TIMEOUT_S,
            check=False,
            env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"pytest could not run ({exc})"
    if done.returncode not in (0, 5):
        if "No module named pytest" in done.stderr:
            return (
                f"pytest is not installed for {sys.executable}, so the count cannot be checked; "
                "install pytest there, or run `wpgate evidence --no-collect` (for `wpgate "
                "check`, `wpgate docs` and the hooks: `collect = false` in "
                "[tool.wpgate.evidence])"
            )
        lines = (done.stdout + done.stderr).strip().splitlines() or ["no output"]
        # The summary line, and the first line naming the error behind it (an import's).
        cause = next((x.strip() for x in lines if _CAUSE_RE.search(x) and x != lines[-1]), "")
        return f"pytest collection failed ({lines[-1]}{f'; {cause}' if cause else ''})"
    for line in reversed(done.stdout.splitlines()):
        match = _COLLECT_RE.search(line)
        if match:
            return int(match.group(1) or match.group(2))
    return 0


class _EvidenceFiles:
    """The evidence files read so far, each read and validated once."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.parsed: dict[str, EvidenceParse] = {}

    def load(self, rel: str) -> None:
        if rel in self.parsed:
            return
        text, problem = read_text(self.root, rel)
        if text is None:
            found = (problem.finding(EVIDENCE_FILE_VALID),) if problem else ()
            self.parsed[rel] = EvidenceParse(rel, None, found)
        else:
            self.parsed[rel] = parse_evidence(text, rel, rule_id=EVIDENCE_FILE_VALID)

    def load_folder(self, evidence_dir: str) -> None:
        """Every ``*.json`` under the evidence folder; one that leads out of the repository (a
        symbolic link) is a finding, never read (the bounded reader refuses it before opening
        it, in the words it has for a linked page)."""
        folder = self.root / evidence_dir
        if folder.is_dir():
            for found in sorted(folder.rglob("*.json")):
                self.load(found.relative_to(self.root).as_posix())


def _resolve_claims(
    root: Path, pages: Iterable[str], evidence_dir: str, files: _EvidenceFiles
) -> tuple[list[ClaimContext], list[Finding]]:
    """Every claim of ``pages`` with its citations resolved; cited evidence files are read."""
    contexts: list[ClaimContext] = []
    findings: list[Finding] = []
    seen: dict[tuple[str, str, bool], tuple[str | None, str | None, bool]] = {}

    def resolve(start: str, target: str, relative: bool) -> tuple[str | None, str | None, bool]:
        # Many claims cite the same file: resolve (and stat) each distinct citation once.
        key = (start, target, relative)
        if key not in seen:
            rel, why = resolve_inside(root, start, target, allow_parent=relative)
            seen[key] = (rel, why, rel is not None and (root / rel).exists())
        return seen[key]

    for page in pages:
        page_text, unreadable = read_text(root, page)
        if page_text is None:
            findings.extend([unreadable.finding(EVIDENCE_CLAIM_CITES)] if unreadable else [])
            continue
        base = PurePosixPath(page).parent.as_posix()
        base = "" if base == "." else base
        for claim in parse_claims(page_text, page):
            resolved: list[ResolvedCitation] = []
            for citation in claim.citations:
                rel, why, exists = resolve(
                    base if citation.page_relative else "", citation.target, citation.page_relative
                )
                is_evidence = rel is not None and rel.endswith(".json")
                if (
                    rel is not None
                    and is_evidence
                    and exists
                    and rel.startswith(evidence_dir + "/")
                ):
                    files.load(rel)  # a JSON elsewhere is not evidence: WPG401 says so
                resolved.append(
                    ResolvedCitation(citation.target, citation.line, rel, why, exists, is_evidence)
                )
            contexts.append(ClaimContext(claim, tuple(resolved)))
    return contexts, findings


def _current_hashes(root: Path, files: dict[str, EvidenceParse]) -> dict[str, str | None]:
    """The sha256 of each recorded source as it is in the tree now (None: unreadable/refused)."""
    sources = {s for parse in files.values() if parse.evidence for s in parse.evidence.sources}
    current: dict[str, str | None] = {}
    for source in sorted(sources):
        rel, why = resolve_inside(root, "", source)
        current[source] = sha256_file(root, rel) if rel is not None and why is None else None
    return current


def _named_commits(
    root: Path, files: dict[str, EvidenceParse], contexts: Sequence[ClaimContext]
) -> tuple[dict[str, str | None], dict[str, str | None]]:
    """Every commit an evidence file, a ``covers`` or a marker names, resolved, and the names
    of those that are unreachable, each with its same-tree commit in history or None.

    An unreachable commit resolves to None, as it does in a clone, which lacks it: the answer
    here is the answer CI gives."""
    markers = [m for c in contexts for m in c.claim.identical]
    revisions = {
        p.evidence.git_commit for p in files.values() if p.evidence and p.evidence.git_commit
    }
    revisions |= {sha for c in contexts for sha in c.claim.covers}
    revisions |= {m.base for m in markers} | {m.head for m in markers}
    commits = resolve_commits(root, revisions)
    lost = unreachable_commits(root, {sha for sha in commits.values() if sha is not None})
    unreachable = {rev: lost[sha] for rev, sha in commits.items() if sha in lost}
    commits.update(dict.fromkeys(unreachable))
    if any(sha is None for sha in commits.values()):
        # A commit a claim or an evidence file names may lie beyond a shallow clone's cut:
        # then "unknown commit" would be a wrong answer, so ask for the whole history instead.
        require_full_history(root, "the evidence check of recorded commits (wpgate evidence)")
    return commits, unreachable


def _blob_requests(
    files: dict[str, EvidenceParse],
    contexts: Sequence[ClaimContext],
    commits: dict[str, str | None],
) -> set[tuple[str, str]]:
    """The ``(commit, path)`` pairs whose blob hashes the rules compare with the recorded ones."""
    requests: set[tuple[str, str]] = set()
    for parse in files.values():
        if parse.evidence and parse.evidence.git_commit and commits.get(parse.evidence.git_commit):
            requests |= {(parse.evidence.git_commit, s) for s in parse.evidence.sources}
    for context in contexts:
        for sha in context.claim.covers:
            full = commits.get(sha)
            if full is None:
                continue
            for path in context.evidence_paths:
                evidence = files[path].evidence
                if evidence is not None:
                    requests |= {(full, s) for s in evidence.sources}
    return requests


def _identical_answers(
    root: Path, contexts: Sequence[ClaimContext], commits: dict[str, str | None]
) -> dict[IdenticalMarker, bool | str]:
    """Each ``identical A..B -- paths`` marker: whether git sees no difference, or why not."""
    identical: dict[IdenticalMarker, bool | str] = {}
    for marker in (m for c in contexts for m in c.claim.identical):
        refused = [why for p in marker.paths if (why := resolve_inside(root, "", p)[1])]
        if refused:
            identical[marker] = f"the marker path {refused[0]}"
        elif commits.get(marker.base) and commits.get(marker.head):
            same = paths_identical(root, marker.base, marker.head, marker.paths)
            identical[marker] = "git diff failed; check the paths" if same is None else same
    return identical


def _count_answers(
    root: Path, contexts: Sequence[ClaimContext], collect: bool
) -> dict[CountMarker, int | str]:
    """Each ``collected N -- paths`` marker: pytest's count (when ``collect``), or why not."""
    counts: dict[CountMarker, int | str] = {}
    for context in contexts:
        for count in context.claim.counts:
            for marker_path in count.paths:
                why = resolve_inside(root, "", marker_path)[1]
                if marker_path.startswith("-"):
                    why = f"`{marker_path}` starts with `-`; name a test file or folder"
                if why is not None:
                    counts[count] = f"the marker path {why}"
    if collect:
        by_paths: dict[tuple[str, ...], int | str] = {}
        for context in contexts:
            for count in context.claim.counts:
                if count in counts:
                    continue  # a refused path: never hand it to pytest
                if count.paths not in by_paths:
                    by_paths[count.paths] = count_collected(root, count.paths)
                counts[count] = by_paths[count.paths]
    return counts


def load_evidence(
    root: Path,
    config: Config | None = None,
    *,
    git: bool = True,
    collect: bool = True,
    identical: bool = True,
) -> EvidenceTree:
    """Read every evidence file and claim, and ask git (and pytest) what the rules must verify.

    ``git=False`` skips every git question; ``collect=False`` skips running pytest for
    ``collected N -- paths`` markers; ``identical=False`` skips ``git diff`` for
    ``identical A..B -- paths`` markers.
    """
    layout = DocsLayout.from_config(config)
    evidence_dir = layout.evidence.rstrip("/")
    files = _EvidenceFiles(root)
    files.load_folder(evidence_dir)
    contexts, findings = _resolve_claims(root, glob_pages(root, layout.claims), evidence_dir, files)
    current = _current_hashes(root, files.parsed)
    if not git or not is_work_tree(root):
        return EvidenceTree(
            evidence_dir, files.parsed, tuple(contexts), current, findings=tuple(findings)
        )
    commits, unreachable = _named_commits(root, files.parsed, contexts)
    requests = _blob_requests(files.parsed, contexts, commits)
    return EvidenceTree(
        evidence_dir,
        files.parsed,
        tuple(contexts),
        current,
        git=True,
        commits=commits,
        unreachable=unreachable,
        hashes_at=blob_hashes_at(root, requests),
        identical=_identical_answers(root, contexts, commits) if identical else {},
        counts=_count_answers(root, contexts, collect),
        findings=tuple(findings),
    )
