"""Evidence rules (WPG4xx, governance spec §4): pure checks over a loaded evidence tree.

The tree (``wpgate.records.EvidenceTree``, built by ``wpgate._evidence_tree``) already holds
every answer that needs the file system, git or pytest; these functions only compare.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Iterator, Sequence
from decimal import ROUND_HALF_EVEN, ROUND_HALF_UP, Decimal, InvalidOperation

from wpgate._model import Finding, Rule, register
from wpgate.docs_options import EvidenceOptions
from wpgate.parsers.evidence import Claim, Evidence, Number, evidence_numbers, version_prefixes
from wpgate.records import ClaimContext, EvidenceTree
from wpgate.rules import (
    EVIDENCE_CITATION_EXISTS,
    EVIDENCE_CITATION_INSIDE,
    EVIDENCE_CLAIM_CITES,
    EVIDENCE_COUNT_MARKER,
    EVIDENCE_FILE_VALID,
    EVIDENCE_IDENTICAL_MARKER,
    EVIDENCE_NUMBERS,
    EVIDENCE_SOURCE_HASHES,
    EVIDENCE_STALE,
    declared,
)

_HUNDRED = Decimal(100)
_SHORT_COMMIT = 7  # the digits of git's shortest abbreviated commit


def _cited(tree: EvidenceTree, context: ClaimContext) -> list[Evidence]:
    """The valid evidence records a claim cites."""
    out = []
    for path in context.evidence_paths:
        parse = tree.files.get(path)
        if parse is not None and parse.evidence is not None:
            out.append(parse.evidence)
    return out


def _link_on(page: str, path: str) -> str:
    """``path`` (from the repository's root) as a Markdown link on ``page`` writes it: relative
    to the page's folder."""
    return posixpath.relpath(path, posixpath.dirname(page) or ".")


def _namesake(tree: EvidenceTree, path: str) -> str | None:
    """The evidence file named as ``path`` is, where ``path`` is not that file: the file a
    link relative to the wrong folder meant."""
    candidate = f"{tree.evidence_dir}/{posixpath.basename(path)}"
    return candidate if candidate != path and candidate in tree.files else None


def check_claim_cites(tree: EvidenceTree, options: EvidenceOptions) -> Iterator[Finding]:
    """A claim cites at least one evidence file, kept under the evidence directory."""
    yield from (f for f in tree.findings if f.rule_id == EVIDENCE_CLAIM_CITES)
    for context in tree.claims:
        claim = context.claim
        evidence = [c for c in context.citations if c.is_evidence and c.path is not None]
        if not evidence and not any(c.problem for c in context.citations):
            yield Finding(
                claim.path,
                claim.line,
                EVIDENCE_CLAIM_CITES,
                "this [MEASURED] claim cites no evidence file; link the JSON the benchmark wrote "
                f"in the same paragraph (from this page: [evidence]"
                f"({_link_on(claim.path, tree.evidence_dir)}/<file>.json))",
            )
        for citation in evidence:
            assert citation.path is not None  # narrowed above; mypy cannot see it
            if not citation.path.startswith(f"{tree.evidence_dir}/"):
                yield Finding(
                    claim.path,
                    citation.line,
                    EVIDENCE_CLAIM_CITES,
                    f"`{citation.target}` resolves to {citation.path}, which is not under "
                    f"{tree.evidence_dir}/ (a link is relative to its page); "
                    + _fix_link(
                        tree, claim.path, citation.path, "move the file there or cite the right one"
                    ),
                )


def check_citations_inside(tree: EvidenceTree, options: EvidenceOptions) -> Iterator[Finding]:
    """Citations stay inside the repository (no absolute path, ``..`` or escaping link)."""
    for context in tree.claims:
        for citation in context.citations:
            if citation.problem is not None:
                yield Finding(
                    context.claim.path,
                    citation.line,
                    EVIDENCE_CITATION_INSIDE,
                    f"citation refused: {citation.problem}",
                )


def _fix_link(tree: EvidenceTree, page: str, path: str, otherwise: str) -> str:
    """The fix for a citation of ``path`` on ``page``: the link to the evidence file of that
    name where there is one, else ``otherwise``."""
    meant = _namesake(tree, path)
    if meant is None:
        return otherwise
    return f"{meant} exists: link it as [evidence]({_link_on(page, meant)})"


def check_citations_exist(tree: EvidenceTree, options: EvidenceOptions) -> Iterator[Finding]:
    """Every cited file exists.

    The finding sits on the citation's line and names the claim's page and line, the link as
    written and the repository path it resolves to, so that either side can be fixed.
    """
    for context in tree.claims:
        claim = context.claim
        for citation in context.citations:
            if citation.path is not None and not citation.exists:
                yield Finding(
                    claim.path,
                    citation.line,
                    EVIDENCE_CITATION_EXISTS,
                    f"the [MEASURED] claim at {claim.path}:{claim.line} cites "
                    f"`{citation.target}`, looked for as {citation.path}, which does not exist; "
                    + _fix_link(
                        tree,
                        claim.path,
                        citation.path,
                        f"write the evidence file at {citation.path} (run the benchmark that "
                        "records it) or correct the link to name an existing file",
                    ),
                )


def check_files_valid(tree: EvidenceTree, options: EvidenceOptions) -> Iterator[Finding]:
    """Every evidence file is a ``wpgate-evidence/1`` JSON object."""
    for parse in tree.files.values():
        yield from parse.findings


def check_source_hashes(tree: EvidenceTree, options: EvidenceOptions) -> Iterator[Finding]:
    """An evidence file's source hashes equal those files at its recorded commit.

    Skipped for files without a commit or marked ``git_dirty``: their hashes are the anchor.
    """
    if not tree.git:
        return
    for parse in tree.files.values():
        evidence = parse.evidence
        if evidence is None or evidence.git_commit is None or evidence.git_dirty:
            continue
        commit = evidence.git_commit
        if tree.commits.get(commit) is None:
            yield Finding(
                evidence.path,
                1,
                EVIDENCE_SOURCE_HASHES,
                _missing_commit(tree, commit)
                if commit in tree.unreachable
                else f"the recorded commit {commit[:12]} is not in this repository; fetch it (a "
                "shallow clone needs `git fetch --unshallow`) or re-run the benchmark",
            )
            continue
        for source, digest in sorted(evidence.sources.items()):
            at_commit = tree.hashes_at.get((commit, source))
            if at_commit is None:
                yield Finding(
                    evidence.path,
                    evidence.line_of(source),
                    EVIDENCE_SOURCE_HASHES,
                    f"{source} does not exist at the recorded commit {commit[:12]}; the evidence "
                    "ran on uncommitted code - record `git_dirty: true` or re-run from a commit",
                )
            elif at_commit != digest:
                yield Finding(
                    evidence.path,
                    evidence.line_of(source),
                    EVIDENCE_SOURCE_HASHES,
                    f"{source}'s recorded sha256 differs from the file at the recorded commit "
                    f"{commit[:12]}; the benchmark ran on modified code - record `git_dirty: "
                    "true` or re-run it from a clean tree",
                )


def _missing_commit(tree: EvidenceTree, commit: str) -> str:
    """Why an evidence file's unreachable recorded commit fails, and the fix."""
    same = tree.unreachable.get(commit)
    fix = (
        f'{same[:12]} in history has the same tree: record `"git_commit": "{same}"` (keep '
        f'the old name as `"git_commit_reworded_from": "{commit}"`)'
        if same
        else "re-run the benchmark from a commit in history, or push the branch that holds it"
    )
    return (
        f"the recorded commit {commit[:12]} is here only as an unreachable object (an amend, a "
        f"rebase or a reset left it behind), so a clone will not have it; {fix}"
    )


def _rounded(value: Decimal, decimals: int) -> set[Decimal]:
    """``value`` rounded to ``decimals`` places, half-up and half-even."""
    quantum = Decimal(1).scaleb(-decimals)
    try:
        return {value.quantize(quantum, ROUND_HALF_UP), value.quantize(quantum, ROUND_HALF_EVEN)}
    except InvalidOperation:
        return set()


class _Index:
    """The numbers of the cited evidence files, rounded on demand and cached per file."""

    def __init__(self) -> None:
        self._values: dict[str, tuple[frozenset[Decimal], tuple[str, ...]]] = {}
        self._rounded: dict[tuple[str, int], frozenset[Decimal]] = {}
        self._versions: dict[str, frozenset[str]] = {}

    def _load(self, evidence: Evidence) -> tuple[frozenset[Decimal], tuple[str, ...]]:
        if evidence.path not in self._values:
            self._values[evidence.path] = evidence_numbers(evidence.document)
        return self._values[evidence.path]

    def rounded(self, evidence: Evidence, decimals: int) -> frozenset[Decimal]:
        """Every number of ``evidence`` rounded to ``decimals`` places."""
        key = (evidence.path, decimals)
        if key not in self._rounded:
            numbers, _ = self._load(evidence)
            out: set[Decimal] = set()
            for number in numbers:
                out |= _rounded(number, decimals)
            self._rounded[key] = frozenset(out)
        return self._rounded[key]

    def strings(self, evidence: Evidence) -> tuple[str, ...]:
        """The strings of ``evidence``."""
        return self._load(evidence)[1]

    def versions(self, evidence: Evidence) -> frozenset[str]:
        """The dotted versions of ``evidence``'s strings and their leading parts (``2.13.0+cpu``
        gives ``2.13`` and ``2.13.0``): a claim may name torch 2.13."""
        if evidence.path not in self._versions:
            self._versions[evidence.path] = version_prefixes(self.strings(evidence))
        return self._versions[evidence.path]

    def holds(self, cited: Iterable[Evidence], number: Number) -> bool:
        """Whether any cited file records ``number`` (to its written precision), names it as a
        version's leading parts, or (seven digits or more) it abbreviates the file's commit."""
        for evidence in cited:
            if number.value in self.rounded(evidence, number.decimals):
                return True
            # A percentage may be stored as a fraction (0.1001 for 10.01%).
            fraction = number.value / _HUNDRED
            if number.percent and fraction in self.rounded(evidence, number.decimals + 2):
                return True
            if number.decimals and number.text in self.versions(evidence):
                return True
            commit = evidence.git_commit or ""
            if len(number.text) >= _SHORT_COMMIT and commit.startswith(number.text):
                return True  # an abbreviated commit that happens to be all digits
        return False


def check_numbers(tree: EvidenceTree, options: EvidenceOptions) -> Iterator[Finding]:
    """Every number in a claim's prose is recorded in a file the claim cites.

    A number matches a recorded value rounded to the claim's decimals; a percentage also
    matches a fraction; dotted versions (``2.9.1``) match text in the file, and a number with
    decimals the leading parts of a recorded version (``2.13`` of ``2.13.0+cpu``). Numbers
    inside the file's strings count only as tokens of their own, not as digits of a hash, a
    word or a date. Inline code is exempt.
    """
    index = _Index()
    for context in tree.claims:
        cited = _cited(tree, context)
        if not cited:
            continue  # evidence-claim-cites, -citation-exists or -file-valid say why
        names = ", ".join(e.path for e in cited)
        for number in context.claim.numbers:
            if not index.holds(cited, number):
                yield Finding(
                    context.claim.path,
                    number.line,
                    EVIDENCE_NUMBERS,
                    f"{number.text}{'%' if number.percent else ''} is not recorded in {names} "
                    "(at that precision); quote the file's value, render it with a "
                    "`wpgate-evidence` block, or put a number that is not a measurement in "
                    "`code`",
                )
        for version in context.claim.versions:
            if not any(version.text in s for e in cited for s in index.strings(e)):
                yield Finding(
                    context.claim.path,
                    version.line,
                    EVIDENCE_NUMBERS,
                    f"{version.text} does not appear in {names}; quote the environment as the "
                    "file records it",
                )


def check_stale(tree: EvidenceTree, options: EvidenceOptions) -> Iterator[Finding]:
    """A claim whose evidence no longer matches the tree names the commit it covers."""
    for context in tree.claims:
        claim = context.claim
        for evidence in _cited(tree, context):
            changed = sorted(
                s for s, digest in evidence.sources.items() if tree.current_hashes.get(s) != digest
            )
            if not changed:
                continue
            if not claim.covers:
                yield Finding(
                    claim.path, claim.line, EVIDENCE_STALE, _stale(tree, evidence, changed)
                )
                continue
            if not any(_covers(tree, evidence, sha) for sha in claim.covers):
                yield Finding(
                    claim.path, claim.line, EVIDENCE_STALE, _uncovered(tree, claim, evidence)
                )


def _uncovered(tree: EvidenceTree, claim: Claim, evidence: Evidence) -> str:
    """Why none of the commits a claim names holds the files ``evidence`` measured."""
    lost = [sha for sha in claim.covers if sha in tree.unreachable]
    if lost:
        return (
            f"the claim says it covers {', '.join(lost)}, which is here only as an unreachable "
            "object (an amend, a rebase or a reset left it behind), so a clone will not have "
            f"it; {_same_tree_hint(tree, lost)}"
        )
    unknown = [sha for sha in claim.covers if tree.commits.get(sha) is None]
    if unknown:
        return (
            f"the claim says it covers {', '.join(unknown)}, which git does not know here; name "
            "a commit of this repository's history (`git log --oneline`), the one the "
            "benchmark ran on"
        )
    return (
        f"the claim says it covers {', '.join(claim.covers)}, but {evidence.path}'s source "
        "hashes do not match the files at that commit; name the commit the benchmark ran on"
    )


def _listed(paths: Sequence[str]) -> str:
    """Up to three paths, then how many more."""
    return ", ".join(paths[:3]) + (f" and {len(paths) - 3} more" if len(paths) > 3 else "")


def _stale(tree: EvidenceTree, evidence: Evidence, changed: Sequence[str]) -> str:
    """Why a claim is stale, and the fix: which of ``changed`` (the sources whose hash differs)
    were edited since, and which no longer exist in the working tree."""
    gone = [s for s in changed if tree.current_hashes.get(s) is None]
    edited = [s for s in changed if s not in gone]
    measured = [f"{_listed(edited)} as they no longer are"] if edited else []
    fix = "re-run the benchmark"
    if gone:
        one = len(gone) == 1
        measured.append(
            f"{_listed(gone)}, which {'does' if one else 'do'} not exist in the working tree"
        )
        fix = f"restore {'it' if one else 'them'}, re-run the benchmark to refresh the evidence"
    return (
        f"stale claim: {evidence.path} measured {', and '.join(measured)}; {fix}, or write "
        "`covers <commit>` naming the commit the measurement covers"
    )


def _same_tree_hint(tree: EvidenceTree, lost: Sequence[str]) -> str:
    """The commits in history with the same trees as the unreachable ``lost``, as a fix."""
    same = [f"{sha} -> {tree.unreachable[sha]}" for sha in lost if tree.unreachable.get(sha)]
    if same:
        return f"name the commit in history with the same tree ({', '.join(same)})"
    return "name the commit in history the benchmark ran on"


def _covers(tree: EvidenceTree, evidence: Evidence, sha: str) -> bool:
    """Whether commit ``sha`` holds exactly the sources ``evidence`` measured. Without git
    (``--no-git``) no commit's files can be read, so the claim's word is taken, as the
    ``identical`` marker's is: git-backed checks are skipped, not failed."""
    if not tree.git:
        return True
    full = tree.commits.get(sha)
    if full is None:
        return False
    return all(tree.hashes_at.get((full, s)) == d for s, d in evidence.sources.items())


_MARKER_FORMS = {
    "identical": (
        EVIDENCE_IDENTICAL_MARKER,
        "`identical A..B -- path ...` (two commits, then the paths after ` -- `)",
    ),
    "collected": (
        EVIDENCE_COUNT_MARKER,
        "`collected N -- path ...` (a whole number, then the paths after ` -- `)",
    ),
}


def _malformed(tree: EvidenceTree, kind: str) -> Iterator[Finding]:
    """A finding for each inline code of the claims that opens as a ``kind`` marker but is not
    one in form (it would otherwise be left unchecked)."""
    rule_id, form = _MARKER_FORMS[kind]
    for context in tree.claims:
        for marker in context.claim.malformed:
            if marker.kind == kind:
                yield Finding(
                    context.claim.path,
                    marker.line,
                    rule_id,
                    f"`{marker.text}` is not a marker: write it as {form}, or reword the code span",
                )


def check_identical(tree: EvidenceTree, options: EvidenceOptions) -> Iterator[Finding]:
    """``identical A..B -- paths`` holds: git sees no difference in those paths."""
    yield from _malformed(tree, "identical")
    if not tree.git:
        return
    for context in tree.claims:
        for marker in context.claim.identical:
            where = (context.claim.path, marker.line, EVIDENCE_IDENTICAL_MARKER)
            result = tree.identical.get(marker)
            unknown = [r for r in (marker.base, marker.head) if tree.commits.get(r) is None]
            if isinstance(result, str):
                yield Finding(*where, f"`identical {marker.base}..{marker.head}`: {result}")
            elif unknown:
                lost = [r for r in unknown if r in tree.unreachable]
                yield Finding(
                    *where,
                    f"`identical {marker.base}..{marker.head}` names {', '.join(lost)}, which is "
                    "here only as an unreachable object (an amend, a rebase or a reset left it "
                    f"behind), so a clone will not have it; {_same_tree_hint(tree, lost)}"
                    if lost
                    else f"`identical {marker.base}..{marker.head}` names {', '.join(unknown)}, "
                    "which git does not know; fix the commit or fetch it",
                )
            elif result is False:
                yield Finding(
                    *where,
                    f"{' '.join(marker.paths)} differ between {marker.base} and {marker.head} "
                    f"(`git diff {marker.base} {marker.head} -- {' '.join(marker.paths)}`); the "
                    "claim is false - drop it or name commits that match",
                )


def check_counts(tree: EvidenceTree, options: EvidenceOptions) -> Iterator[Finding]:
    """``collected N -- paths`` holds: pytest collects exactly N tests there."""
    yield from _malformed(tree, "collected")
    for context in tree.claims:
        for marker in context.claim.counts:
            result = tree.counts.get(marker)
            if result is None:
                continue  # collection was switched off
            where = (context.claim.path, marker.line, EVIDENCE_COUNT_MARKER)
            paths = " ".join(marker.paths)
            if isinstance(result, str):
                yield Finding(*where, f"`collected {marker.count} -- {paths}`: {result}")
            elif result != marker.count:
                yield Finding(
                    *where,
                    f"the claim says {marker.count} tests are collected from {paths}, pytest "
                    f"collects {result}; update the number (and the sentence around it)",
                )


#: The evidence rules, in rule-id order: each check reads the loaded evidence tree.
CHECKS: tuple[Rule[EvidenceTree, EvidenceOptions], ...] = register(
    declared(EVIDENCE_CLAIM_CITES, check_claim_cites),
    declared(EVIDENCE_CITATION_INSIDE, check_citations_inside),
    declared(EVIDENCE_CITATION_EXISTS, check_citations_exist),
    declared(EVIDENCE_FILE_VALID, check_files_valid),
    declared(EVIDENCE_SOURCE_HASHES, check_source_hashes),
    declared(EVIDENCE_NUMBERS, check_numbers),
    declared(EVIDENCE_STALE, check_stale),
    declared(EVIDENCE_IDENTICAL_MARKER, check_identical),
    declared(EVIDENCE_COUNT_MARKER, check_counts),
)
