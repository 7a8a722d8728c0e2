"""The docs I/O module: reads the governance documents and asks git, so the rules stay pure.

Every function here takes the repository root and the wpgate configuration (the
``[tool.wpgate]`` table, a ``Config`` object with ``section(name)``, or None for the defaults)
and returns the frozen records of :mod:`wpgate.parsers`; unreadable files become findings.
Document locations come from ``[tool.wpgate.docs]``::

    [tool.wpgate.docs]
    provenance = "docs/PROVENANCE.md"
    assumptions = "docs/ASSUMPTIONS.md"
    work_packages = "docs/work_packages"
    engineering = "docs/engineering"
    evidence = "docs/evidence"
    changelog = "CHANGELOG.md"
    claims = ["docs/**/*.md", "README.md"]     # pages scanned for [MEASURED] claims
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import posixpath
import re
import subprocess
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from wpgate._git import (
    blob_hashes_at,
    first_citing_commits,
    is_work_tree,
    paths_identical,
    require_full_history,
    resolve_commits,
)
from wpgate._model import Finding
from wpgate._output import LinterRun, Summary
from wpgate.parsers.front_matter import parse_front_matter
from wpgate.parsers.markdown import parse_markdown
from wpgate.parsers.provenance import Provenance, parse_provenance
from wpgate.parsers.work_packages import (
    WorkPackage,
    id_from_filename,
    parse_work_package,
    sort_key,
)

if TYPE_CHECKING:
    from wpgate._config import Config
    from wpgate.parsers.evidence import Claim, CountMarker, EvidenceParse, IdenticalMarker
    from wpgate.references import References

#: Rule id for a governance file that cannot be read (missing, not UTF-8).
READ_RULE_ID = "WPG201"
_PHASE_FILE_RE = re.compile(r"^phase-(\d+)(?:-[\w-]*)?\.md$")
_ASSUMPTION_ID_RE = re.compile(r"^A\d+$")
_PYTEST_TIMEOUT_S = 120
_COLLECT_RE = re.compile(r"(\d+) tests? collected|collected (\d+) items?")


@dataclass(frozen=True)
class DocsLayout:
    """Where the governance documents live, relative to the repository root."""

    provenance: str = "docs/PROVENANCE.md"
    assumptions: str = "docs/ASSUMPTIONS.md"
    work_packages: str = "docs/work_packages"
    engineering: str = "docs/engineering"
    evidence: str = "docs/evidence"
    changelog: str = "CHANGELOG.md"
    claims: tuple[str, ...] = ("docs/**/*.md", "README.md")


# Parsed documents shared by the linters of one run (`wpgate check`), keyed by what was read.
_SHARED: list[dict[tuple[Any, ...], Any]] = []


@contextlib.contextmanager
def parse_once() -> Iterator[None]:
    """Within the block, each governance document is read and parsed at most once.

    ``wpgate check`` reads the provenance table and the registry for the trailers' references
    and again for their own linters; the files do not change during one run, so the second
    reader gets the first one's records.
    """
    _SHARED.append({})
    try:
        yield
    finally:
        _SHARED.pop()


def _shared(key: tuple[Any, ...], load: Callable[[], Any]) -> Any:
    """``load()``, or inside :func:`parse_once` the value loaded for ``key`` before."""
    if not _SHARED:
        return load()
    cache = _SHARED[-1]
    if key not in cache:
        cache[key] = load()
    return cache[key]


def config_section(config: Any, name: str) -> Mapping[str, Any]:
    """The ``[tool.wpgate.<name>]`` options of ``config`` (a Config, a mapping, or None)."""
    if config is None:
        return {}
    section = getattr(config, "section", None)
    if callable(section):
        value = section(name)
    elif isinstance(config, Mapping):
        value = config.get(name)
    else:
        value = None
    return value if isinstance(value, Mapping) else {}


def docs_layout(config: Any = None) -> DocsLayout:
    """The document locations configured in ``[tool.wpgate.docs]`` (defaults otherwise)."""
    options = config_section(config, "docs")
    default = DocsLayout()
    values: dict[str, Any] = {}
    for key in ("provenance", "assumptions", "work_packages", "engineering", "evidence"):
        values[key] = str(options.get(key, getattr(default, key)))
    values["changelog"] = str(options.get("changelog", default.changelog))
    claims = options.get("claims", default.claims)
    values["claims"] = (claims,) if isinstance(claims, str) else tuple(str(c) for c in claims)
    return DocsLayout(**values)


def read_text(
    root: Path, rel: str, rule_id: str = READ_RULE_ID
) -> tuple[str | None, Finding | None]:
    """The UTF-8 text of ``root/rel``, or a finding saying why it cannot be read.

    Inside :func:`parse_once` each file is read once, whichever linters ask for it.
    """
    read: tuple[str | None, int, str] = _shared(("text", root, rel), lambda: _read(root, rel))
    text, line, problem = read
    if text is not None:
        return text, None
    return None, Finding(rel, line, rule_id, problem)


def _read(root: Path, rel: str) -> tuple[str | None, int, str]:
    """``(text, 0, "")``, or ``(None, line, why)`` when ``root/rel`` cannot be read."""
    try:
        data = (root / rel).read_bytes()
    except FileNotFoundError:
        return (
            None,
            0,
            f"{rel} does not exist; create it (`wpgate init` writes a start) or fix the path",
        )
    except OSError as exc:
        return None, 0, f"cannot read {rel}: {exc.strerror}"
    try:
        return data.decode("utf-8-sig"), 0, ""
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        return None, line, f"{rel} is not valid UTF-8 (byte {exc.start}); re-save it as UTF-8"


# --------------------------------------------------------------------------- provenance


def load_provenance(root: Path, config: Any = None) -> Provenance:
    """The parsed provenance document; a missing or unreadable file is one finding."""
    rel = docs_layout(config).provenance

    def load() -> Provenance:
        text, problem = read_text(root, rel)
        if text is None:
            return Provenance(rel, (), (), (), (problem,) if problem else ())
        return parse_provenance(text, rel)

    parsed: Provenance = _shared(("provenance", root, rel), load)
    return parsed


def load_assumption_ids(root: Path, config: Any = None) -> frozenset[str]:
    """The ids (``A<n>``) in the first column of the assumptions document's ID tables."""
    text, _ = read_text(root, docs_layout(config).assumptions)
    if text is None:
        return frozenset()
    ids: set[str] = set()
    for table in parse_markdown(text).tables:
        column = table.column("ID")
        if column is None:
            continue
        for row in table.rows:
            cell = row.cells[column].strip("` ") if column < len(row.cells) else ""
            if _ASSUMPTION_ID_RE.match(cell):
                ids.add(cell)
    return frozenset(ids)


# --------------------------------------------------------------------------- work packages


@dataclass(frozen=True)
class Phase:
    """A phase page ``docs/engineering/phase-NN[-slug].md``: number, title, path."""

    number: int
    title: str
    path: str


@dataclass(frozen=True)
class WorkPackageRegistry:
    """Every readable work package (registry order), the phases, and the parse problems."""

    packages: tuple[WorkPackage, ...]
    findings: tuple[Finding, ...]
    phases: Mapping[int, Phase] = field(default_factory=dict)
    directory: str = "docs/work_packages"

    def __iter__(self) -> Iterator[WorkPackage]:
        return iter(self.packages)

    def __len__(self) -> int:
        return len(self.packages)

    def by_id(self) -> dict[str, WorkPackage]:
        """The packages keyed by id (the first of duplicates)."""
        out: dict[str, WorkPackage] = {}
        for package in self.packages:
            out.setdefault(package.id, package)
        return out


def load_phases(root: Path, config: Any = None) -> dict[int, Phase]:
    """The phase pages under the engineering directory, keyed by phase number."""
    rel_dir = docs_layout(config).engineering
    phases: dict[int, Phase] = {}
    folder = root / rel_dir
    if not folder.is_dir():
        return phases
    for path in sorted(folder.iterdir()):
        match = _PHASE_FILE_RE.match(path.name)
        if match is None or not path.is_file():
            continue
        rel = f"{rel_dir}/{path.name}"
        number = int(match.group(1))
        title = ""
        text, _ = read_text(root, rel)
        if text is not None and text.startswith("---"):
            front = parse_front_matter(text, rel)
            if front.data is not None:
                title = str(front.data.get("title") or "")
                declared = front.data.get("phase")
                if isinstance(declared, int) and not isinstance(declared, bool):
                    number = declared
        phases.setdefault(number, Phase(number, title, rel))
    return phases


def load_work_packages(root: Path, config: Any = None) -> WorkPackageRegistry:
    """Every ``wp-*.md`` page of the registry, parsed and schema-checked, in registry order."""
    layout = docs_layout(config)
    raw = config_section(config, "wp").get("extra_keys", ())
    extra = (str(raw),) if isinstance(raw, str) else tuple(str(k) for k in raw)
    registry: WorkPackageRegistry = _shared(
        ("wp", root, layout, extra), lambda: _read_registry(root, config, layout, extra)
    )
    return registry


def load_wp_ids(root: Path, config: Any = None) -> frozenset[str]:
    """The ids of the registry's pages, read from their file names (no page is parsed).

    A commit's ``WP:`` trailer needs only which packages exist; ``wpgate wp`` checks that each
    page's front matter agrees with its file name.
    """
    folder = root / docs_layout(config).work_packages
    try:
        names = os.listdir(folder)
    except OSError:
        return frozenset()
    return frozenset(wp_id for name in names if (wp_id := id_from_filename(name)) is not None)


def _read_registry(
    root: Path, config: Any, layout: DocsLayout, extra: tuple[str, ...]
) -> WorkPackageRegistry:
    """The registry as :func:`load_work_packages` returns it, read from disk."""
    folder = root / layout.work_packages
    packages: list[WorkPackage] = []
    findings: list[Finding] = []
    if not folder.is_dir():
        findings.append(
            Finding(
                layout.work_packages,
                0,
                "WPG303",
                f"the work-package directory {layout.work_packages} does not exist; create it "
                "with `wpgate new-wp`",
            )
        )
        return WorkPackageRegistry((), tuple(findings), {}, layout.work_packages)
    for path in sorted(folder.glob("*.md")):
        rel = f"{layout.work_packages}/{path.name}"
        if id_from_filename(path.name) is None and not path.name.startswith("wp-"):
            continue  # index pages and other prose live beside the registry
        text, problem = read_text(root, rel, "WPG301")
        if text is None:
            findings.extend([problem] if problem else [])
            continue
        parsed = parse_work_package(text, rel, extra)
        findings.extend(parsed.findings)
        if parsed.package is not None:
            packages.append(parsed.package)
    packages.sort(key=lambda p: (sort_key(p.id), p.path))
    return WorkPackageRegistry(
        tuple(packages), tuple(findings), load_phases(root, config), layout.work_packages
    )


def load_references(root: Path, config: Any = None) -> References:
    """The ids a trailer may cite: work packages, sources, placeholders and assumptions."""
    from wpgate.references import References

    provenance = load_provenance(root, config)
    return References(
        wp_ids=load_wp_ids(root, config),
        provenance_ids=provenance.source_ids,
        placeholder_ids=provenance.placeholder_ids,
        assumption_ids=load_assumption_ids(root, config),
    )


# --------------------------------------------------------------------------- paths


def resolve_inside(  # noqa: PLR0911 - one early answer per kind of refusal
    root: Path, base: str, target: str, *, allow_parent: bool = False
) -> tuple[str | None, str | None]:
    """``target`` (relative to repository-relative directory ``base``) as a repository path.

    Returns ``(path, None)`` or ``(None, why)``. Refused: absolute paths; ``..`` components
    (with ``allow_parent``, the page-relative links of Markdown, only those that climb above
    the repository root); symbolic links that lead out of the repository.
    """
    if not target:
        return None, "the citation is empty"
    if target.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:[\\/]", target) or "\\" in target:
        return None, f"`{target}` is an absolute path; cite a path inside the repository"
    if not allow_parent and ".." in PurePosixPath(target).parts:
        return None, f"`{target}` uses `..`; cite the file without leaving its directory tree"
    rel = posixpath.normpath(posixpath.join(base, target) if base else target)
    if rel == ".." or rel.startswith("../"):
        return None, f"`{target}` leads out of the repository; cite a file inside it"
    real_root = root.resolve()
    try:
        resolved = (root / rel).resolve()
    except (OSError, RuntimeError):
        return None, f"`{target}` cannot be resolved (a symbolic link loop?)"
    if not resolved.is_relative_to(real_root):
        return None, f"`{target}` is a link that leads out of the repository; cite a real file"
    return rel, None


def sha256_file(path: Path) -> str | None:
    """The sha256 hex of a regular file, or None when it cannot be read."""
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def _glob_pages(root: Path, patterns: Sequence[str]) -> list[str]:
    """The repository-relative files matching any glob in ``patterns``, sorted, no duplicates."""
    seen: set[str] = set()
    for pattern in patterns:
        for path in root.glob(pattern):
            if path.is_file():
                seen.add(path.relative_to(root).as_posix())
    return sorted(seen)


# --------------------------------------------------------------------------- pytest


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
        tail = (done.stdout + done.stderr).strip().splitlines()[-1:] or ["no output"]
        return f"pytest collection failed ({tail[0]})"
    for line in reversed(done.stdout.splitlines()):
        match = _COLLECT_RE.search(line)
        if match:
            return int(match.group(1) or match.group(2))
    return 0


# --------------------------------------------------------------------------- evidence


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
    commit-bound facts are empty and the rules that need them say so.
    """

    evidence_dir: str
    files: Mapping[str, EvidenceParse]
    claims: tuple[ClaimContext, ...]
    current_hashes: Mapping[str, str | None]
    git: bool = False
    commits: Mapping[str, str | None] = field(default_factory=dict)
    hashes_at: Mapping[tuple[str, str], str | None] = field(default_factory=dict)
    identical: Mapping[IdenticalMarker, bool | str] = field(default_factory=dict)
    counts: Mapping[CountMarker, int | str] = field(default_factory=dict)
    findings: tuple[Finding, ...] = ()


def load_evidence(
    root: Path, config: Any = None, *, git: bool = True, collect: bool = True
) -> EvidenceTree:
    """Read every evidence file and claim, and ask git (and pytest) what the rules must verify.

    ``git=False`` skips every git question; ``collect=False`` skips running pytest for
    ``collected N -- paths`` markers.
    """
    from wpgate.parsers.evidence import EvidenceParse, parse_claims, parse_evidence

    layout = docs_layout(config)
    evidence_dir = layout.evidence.rstrip("/")
    findings: list[Finding] = []
    files: dict[str, EvidenceParse] = {}

    def load_file(rel: str) -> None:
        if rel in files:
            return
        text, problem = read_text(root, rel, "WPG404")
        if text is None:
            files[rel] = EvidenceParse(rel, None, (problem,) if problem else ())
        else:
            files[rel] = parse_evidence(text, rel)

    folder = root / evidence_dir
    if folder.is_dir():
        for found in sorted(folder.rglob("*.json")):
            name = found.relative_to(root).as_posix()
            if resolve_inside(root, "", name)[1] is None:
                load_file(name)

    contexts: list[ClaimContext] = []
    seen: dict[tuple[str, str, bool], tuple[str | None, str | None, bool]] = {}

    def resolve(start: str, target: str, relative: bool) -> tuple[str | None, str | None, bool]:
        # Many claims cite the same file: resolve (and stat) each distinct citation once.
        key = (start, target, relative)
        if key not in seen:
            rel, why = resolve_inside(root, start, target, allow_parent=relative)
            seen[key] = (rel, why, rel is not None and (root / rel).exists())
        return seen[key]

    for page in _glob_pages(root, layout.claims):
        page_text, unreadable = read_text(root, page, "WPG401")
        if page_text is None:
            findings.extend([unreadable] if unreadable else [])
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
                    load_file(rel)  # a JSON elsewhere is not evidence: WPG401 says so
                resolved.append(
                    ResolvedCitation(citation.target, citation.line, rel, why, exists, is_evidence)
                )
            contexts.append(ClaimContext(claim, tuple(resolved)))

    sources = {s for parse in files.values() if parse.evidence for s in parse.evidence.sources}
    current: dict[str, str | None] = {}
    for source in sorted(sources):
        rel, why = resolve_inside(root, "", source)
        current[source] = sha256_file(root / rel) if rel is not None and why is None else None

    if not git or not is_work_tree(root):
        return EvidenceTree(evidence_dir, files, tuple(contexts), current, findings=tuple(findings))

    markers = [m for c in contexts for m in c.claim.identical]
    revisions = {
        p.evidence.git_commit for p in files.values() if p.evidence and p.evidence.git_commit
    }
    revisions |= {sha for c in contexts for sha in c.claim.covers}
    revisions |= {m.base for m in markers} | {m.head for m in markers}
    commits = resolve_commits(root, revisions)
    if any(sha is None for sha in commits.values()):
        # A commit a claim or an evidence file names may lie beyond a shallow clone's cut:
        # then "unknown commit" would be a wrong answer, so ask for the whole history instead.
        require_full_history(root, "the evidence check of recorded commits (wpgate evidence)")
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
    identical: dict[IdenticalMarker, bool | str] = {}
    for marker in markers:
        refused = [why for p in marker.paths if (why := resolve_inside(root, "", p)[1])]
        if refused:
            identical[marker] = f"the marker path {refused[0]}"
        elif commits.get(marker.base) and commits.get(marker.head):
            same = paths_identical(root, marker.base, marker.head, marker.paths)
            identical[marker] = "git diff failed; check the paths" if same is None else same
    counts: dict[CountMarker, int | str] = {}
    for context in contexts:
        for count in context.claim.counts:
            for marker_path in count.paths:
                why = resolve_inside(root, "", marker_path)[1]
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
    return EvidenceTree(
        evidence_dir,
        files,
        tuple(contexts),
        current,
        git=True,
        commits=commits,
        hashes_at=blob_hashes_at(root, requests),
        identical=identical,
        counts=counts,
        findings=tuple(findings),
    )


# --------------------------------------------------------------------------- changelog

_SKIP_DIRS = frozenset(
    {
        ".git",
        ".venv",
        "venv",
        "node_modules",
        "__pycache__",
        ".mypy_cache",
        ".ruff_cache",
        ".pytest_cache",
        ".hypothesis",
        ".tox",
        ".nox",
    }
)
# Build outputs, skipped only at the top (``src/wpgate/site/`` is a package, ``site/`` a build).
_SKIP_TOP_DIRS = frozenset({"site", "build", "dist"})
_PY_ROOTS = ("src", "scripts", "tests")
_COMMAND_RE = re.compile(
    r"@[\w.]+\.(?:command|group)\(\s*(?:name\s*=\s*)?(?:\"([\w-]+)\")?[^)]*\)\s*(?:@[^\n]*\n\s*)*"
    r"def\s+(\w+)"
)
_FLAG_LITERAL_RE = re.compile(r"[\"'\s(/](--[A-Za-z0-9][\w.-]*)")
_IDENTIFIER_RE = re.compile(r"\b[A-Za-z_]\w*\b")
_MAKE_TARGET_RE = re.compile(r"^([A-Za-z0-9_.-]+)\s*:(?!=)", re.MULTILINE)


def _walk(root: Path) -> tuple[set[str], set[str]]:
    """Every file and directory of the tree (repository-relative), caches and venvs left out."""
    files: set[str] = set()
    directories: set[str] = set()
    for current, dirs, names in os.walk(root):
        rel = Path(current).relative_to(root).as_posix()
        dirs[:] = [
            d
            for d in dirs
            if d not in _SKIP_DIRS
            and not d.endswith(".egg-info")
            and not (rel == "." and d in _SKIP_TOP_DIRS)
        ]
        prefix = "" if rel == "." else f"{rel}/"
        directories.update(prefix + d for d in dirs)
        files.update(prefix + n for n in names)
    return files, directories


def _module_names(source: str) -> tuple[set[str], dict[str, set[str]]]:
    """A module's top-level names and each top-level class's member names (AST, no import)."""
    import ast

    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return set(), {}
    names: set[str] = set()
    members: dict[str, set[str]] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
            if isinstance(node, ast.ClassDef):
                members[node.name] = _class_members(node)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names, members


def _class_members(node: Any) -> set[str]:
    """The methods, attributes and dataclass fields of a class body."""
    import ast

    out: set[str] = set()
    for item in node.body:
        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(item.name)
        elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
            out.add(item.target.id)
        elif isinstance(item, ast.Assign):
            out.update(t.id for t in item.targets if isinstance(t, ast.Name))
    return out


def load_project_index(root: Path, config: Any = None) -> Any:
    """The :class:`wpgate.rules.changelog.ProjectIndex` of the tree at ``root``."""
    import tomllib

    from wpgate.rules.changelog import ProjectIndex

    files, directories = _walk(root)
    modules: dict[str, frozenset[str]] = {}
    members: dict[str, frozenset[str]] = {}
    identifiers: set[str] = set()
    flags: set[str] = set()
    commands: set[str] = set()
    for rel in sorted(files):
        top = rel.split("/", 1)[0]
        if not rel.endswith(".py") or top not in _PY_ROOTS:
            continue
        text, _ = read_text(root, rel)
        if text is None:
            continue
        identifiers.update(_IDENTIFIER_RE.findall(text))
        flags.update(_FLAG_LITERAL_RE.findall(text))
        for name, function in _COMMAND_RE.findall(text):
            commands.add(name or function.replace("_", "-"))
        if top != "src":
            continue
        parts = rel[len("src/") : -len(".py")].split("/")
        if parts[-1] == "__init__":
            parts = parts[:-1]
        dotted = ".".join(parts)
        names, classes = _module_names(text)
        for package in (".".join(parts[:i]) for i in range(1, len(parts))):
            modules.setdefault(package, frozenset())
        modules[dotted] = frozenset(modules.get(dotted, frozenset()) | names)
        for cls, cls_members in classes.items():
            members[f"{dotted}.{cls}"] = frozenset(cls_members)
    # A package re-exports its sub-modules as attributes.
    for dotted in list(modules):
        parent, _, child = dotted.rpartition(".")
        if parent in modules:
            modules[parent] = modules[parent] | {child}
    scripts: set[str] = set()
    try:
        project = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
        scripts.update(project.get("project", {}).get("scripts", {}))
    except (OSError, tomllib.TOMLDecodeError):
        pass
    make_text, _ = read_text(root, "Makefile")
    targets = set(_MAKE_TARGET_RE.findall(make_text or ""))
    return ProjectIndex(
        files=frozenset(files),
        directories=frozenset(directories),
        modules=modules,
        members=members,
        identifiers=frozenset(identifiers),
        flags=frozenset(flags),
        commands=frozenset(commands),
        scripts=frozenset(scripts),
        make_targets=frozenset(targets),
    )


# --------------------------------------------------------------------------- runners


def rule_enabled(config: Any, rule_id: str) -> bool:
    """Whether ``config`` leaves ``rule_id`` on (``config.enabled(id)``, else ``disable`` list)."""
    enabled = getattr(config, "enabled", None)
    if callable(enabled):
        return bool(enabled(rule_id))
    disabled: Any = config.get("disable", ()) if isinstance(config, Mapping) else ()
    return rule_id not in {str(d).upper() for d in disabled}


def _keep(config: Any, findings: Iterable[Finding]) -> list[Finding]:
    """The findings of enabled rules, sorted by file, line and rule."""
    return sorted(f for f in findings if rule_enabled(config, f.rule_id))


def _provenance(root: Path, config: Any, history: bool) -> tuple[list[Finding], int]:
    """Provenance findings and the number of sources checked."""
    from wpgate.rules import provenance as rules

    parsed = load_provenance(root, config)
    options = config_section(config, "provenance")
    findings = [f for check in rules.CHECKS for f in check(parsed, options)]
    if history and is_work_tree(root):
        require_full_history(root, "the first-use history check (wpgate provenance --history)")
        citations = first_citing_commits(root)
        findings.extend(rules.check_first_use_history(parsed, citations, options))
    return _keep(config, findings), len(parsed.sources)


def lint_provenance(root: Path, config: Any = None, *, history: bool = False) -> list[Finding]:
    """Every provenance finding (WPG2xx); ``history`` also checks first-use dates against git."""
    return _provenance(root, config, history)[0]


def _work_packages(root: Path, config: Any) -> tuple[list[Finding], int]:
    """Work-package findings and the number of pages checked."""
    from wpgate.references import GateResolver
    from wpgate.rules import work_packages as rules

    registry = load_work_packages(root, config)
    options = config_section(config, "wp")
    findings = [f for check in rules.CHECKS for f in check(registry, options)]
    findings.extend(rules.check_gates(registry, GateResolver(root).resolve, options))
    # Findings about the folder itself (WPG303: it does not exist) are not pages.
    folder = registry.directory
    pages = len(
        {f.path for f in registry.findings if f.path != folder}
        | {p.path for p in registry.packages}
    )
    return _keep(config, findings), pages


def lint_work_packages(root: Path, config: Any = None) -> list[Finding]:
    """Every work-package finding (WPG3xx)."""
    return _work_packages(root, config)[0]


def _evidence(root: Path, config: Any, git: bool, collect: bool) -> tuple[list[Finding], int]:
    """Evidence findings and the number of claims checked."""
    from wpgate.rules import evidence as rules

    options = config_section(config, "evidence")
    tree = load_evidence(
        root, config, git=git, collect=collect and bool(options.get("collect", True))
    )
    findings = [f for check in rules.CHECKS for f in check(tree, options)]
    return _keep(config, findings), len(tree.claims)


def lint_evidence(
    root: Path, config: Any = None, *, git: bool = True, collect: bool = True
) -> list[Finding]:
    """Every evidence finding (WPG4xx); ``git``/``collect`` switch the git and pytest checks."""
    return _evidence(root, config, git, collect)[0]


def _changelog(root: Path, config: Any) -> tuple[list[Finding], int]:
    """Changelog findings and the number of backticked names checked."""
    from wpgate.parsers.changelog import parse_unreleased
    from wpgate.rules import changelog as rules

    rel = docs_layout(config).changelog
    text, problem = read_text(root, rel, "WPG501")
    if text is None:
        return _keep(config, [problem] if problem else []), 0
    section = parse_unreleased(text, rel)
    options = config_section(config, "changelog")
    findings = list(rules.check_unreleased_section(section, options))
    if section.names:
        findings.extend(rules.check_names(section, load_project_index(root, config), options))
    return _keep(config, findings), len(section.names)


def lint_changelog(root: Path, config: Any = None) -> list[Finding]:
    """Every changelog finding (WPG5xx)."""
    return _changelog(root, config)[0]


# --------------------------------------------------------------------------- linter runs
# The CLI's view: each linter's findings with a summary line (``wpgate._output``).


def run_provenance(config: Config, *, history: bool | None = None) -> LinterRun:
    """``wpgate provenance``; history is on when asked, or configured, or history_start is set."""
    if history is None:
        options = config_section(config, "provenance")
        history = bool(options.get("history", bool(config.history_start)))
    findings, count = _provenance(config.root, config, history)
    return LinterRun(tuple(findings), Summary("provenance", count, "source"))


def run_work_packages(config: Config) -> LinterRun:
    """``wpgate wp``."""
    findings, count = _work_packages(config.root, config)
    return LinterRun(tuple(findings), Summary("work packages", count, "page"))


def run_evidence(config: Config, *, git: bool = True, collect: bool = True) -> LinterRun:
    """``wpgate evidence``."""
    findings, count = _evidence(config.root, config, git, collect)
    return LinterRun(tuple(findings), Summary("evidence", count, "claim"))


def run_changelog(config: Config) -> LinterRun:
    """``wpgate changelog``."""
    findings, count = _changelog(config.root, config)
    return LinterRun(tuple(findings), Summary("changelog", count, "name"))


def new_work_package(
    root: Path, config: Any, wp_id: str, title: str, phase: int
) -> tuple[str, ...]:
    """Write a scaffolded page for ``wp_id``; returns the paths written (the page first).

    In a registry with no phase page yet, the phase's page is written too, so the new package
    passes WPG307 at once. Raises ValueError saying why not.
    """
    from wpgate.parsers.work_packages import format_work_package

    layout = docs_layout(config)
    text = format_work_package(wp_id, title, phase)
    rel = f"{layout.work_packages}/wp-{wp_id}.md"
    target = root / rel
    if target.exists():
        raise ValueError(f"{rel} already exists; pick another id or edit that page")
    phases = load_phases(root, config)
    phase_rel = f"{layout.engineering}/phase-{phase:02d}.md"
    if phases and phase not in phases:
        known = ", ".join(str(n) for n in sorted(phases))
        raise ValueError(
            f"phase {phase} has no page under {layout.engineering} (phases: {known}); "
            f"pick one of them or write {phase_rel} first"
        )
    written = [rel]
    if not phases:
        phase_page = root / phase_rel
        phase_page.parent.mkdir(parents=True, exist_ok=True)
        phase_page.write_text(
            f'---\nphase: {phase}\ntitle: "Phase {phase}"\n---\n\n# Phase {phase}\n\n'
            "What this phase delivers; the site lists its work packages below.\n",
            encoding="utf-8",
        )
        written.append(phase_rel)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text, encoding="utf-8")
    return tuple(written)
