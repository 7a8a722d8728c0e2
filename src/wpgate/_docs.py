"""The docs I/O module: reads the governance documents and asks git, so the rules stay pure.

Every function here takes the repository root and the loaded configuration
(:class:`~wpgate._config.Config`, or None for the defaults) and returns the frozen records of
:mod:`wpgate.parsers`; unreadable files become findings. Each linter reads its typed options
record (:mod:`wpgate.options`), built once per configuration. Document locations come from
``[tool.wpgate.docs]`` (:class:`~wpgate.options.DocsLayout`)::

    [tool.wpgate.docs]
    provenance = "docs/PROVENANCE.md"
    assumptions = "docs/ASSUMPTIONS.md"
    work_packages = "docs/work_packages"
    engineering = "docs/engineering"
    evidence = "docs/evidence"
    changelog = "CHANGELOG.md"
    claims = ["docs/**/*.md", "README.md"]     # pages scanned for [MEASURED] claims
    pages = ["docs/**/*.md"]                   # pages the Markdown rules read (the site)
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from wpgate._citable import load_provenance
from wpgate._config import Config
from wpgate._documents import glob_pages, load_shared, read_text
from wpgate._git import first_citing_commits, is_work_tree, require_full_history
from wpgate._model import Finding, Options, Rule, Subject, switched_on
from wpgate._output import LinterRun, Summary
from wpgate.docs_options import (
    ChangelogOptions,
    EvidenceOptions,
    ProvenanceOptions,
    WorkPackageOptions,
)
from wpgate.options import DocsLayout, GateOptions
from wpgate.parsers.front_matter import parse_front_matter
from wpgate.parsers.markdown import MarkdownPage, MarkdownPages
from wpgate.parsers.work_packages import (
    WorkPackage,
    id_from_filename,
    parse_work_package,
    sort_key,
)
from wpgate.rules import (
    CHANGELOG_NAMES_RESOLVE,
    CHANGELOG_UNRELEASED,
    EVIDENCE_COUNT_MARKER,
    EVIDENCE_IDENTICAL_MARKER,
    MARKDOWN_LIST_BLANK_LINE,
    PROVENANCE_FIRST_USE_HISTORY,
    WP_DONE_GATES_RESOLVE,
    WP_FRONT_MATTER,
    WP_ID_MATCHES_FILE,
    WP_SCHEMA,
)

if TYPE_CHECKING:
    pass

_PHASE_FILE_RE = re.compile(r"^phase-([0-9]+)(?:-[\w-]*)?\.md$")
# A name meant for a work-package page but misspelled (`WP-006.md`, `wp_006.md`, `wp-6.md`): it
# is read, and its name is reported (WPG303), rather than skipped as prose beside the registry.
_LOOKS_LIKE_A_PAGE = re.compile(r"^wp(?:-|_| |[0-9])", re.IGNORECASE)


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
    #: Where the phase pages live (``[tool.wpgate.docs] engineering``).
    engineering: str = "docs/engineering"
    #: Why a gate does not resolve (None when it does), when the rule wp-done-gates-resolve
    #: checks gates.
    resolve_gate: Callable[[str], str | None] | None = field(default=None, compare=False)

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


def load_phases(root: Path, config: Config | None = None) -> dict[int, Phase]:
    """The phase pages under the engineering directory, keyed by phase number."""
    rel_dir = DocsLayout.from_config(config).engineering
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
            front = parse_front_matter(text, rel, WP_FRONT_MATTER)
            if front.data is not None:
                title = str(front.data.get("title") or "")
                declared = front.data.get("phase")
                if isinstance(declared, int) and not isinstance(declared, bool):
                    number = declared
        phases.setdefault(number, Phase(number, title, rel))
    return phases


def load_work_packages(root: Path, config: Config | None = None) -> WorkPackageRegistry:
    """Every ``wp-*.md`` page of the registry, parsed and schema-checked, in registry order."""
    layout = DocsLayout.from_config(config)
    extra = WorkPackageOptions.from_config(config).extra_keys
    registry: WorkPackageRegistry = load_shared(
        ("wp", root, layout, extra), lambda: _read_registry(root, config, layout, extra)
    )
    return registry


def _read_registry(
    root: Path, config: Config | None, layout: DocsLayout, extra: tuple[str, ...]
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
                WP_ID_MATCHES_FILE,
                f"the work-package directory {layout.work_packages} does not exist; create it "
                "with `wpgate new-wp`",
            )
        )
        return WorkPackageRegistry(
            (), tuple(findings), {}, layout.work_packages, layout.engineering
        )
    for path in sorted(folder.glob("*.md")):
        rel = f"{layout.work_packages}/{path.name}"
        if id_from_filename(path.name) is None and not _LOOKS_LIKE_A_PAGE.match(path.name):
            continue  # index pages and other prose live beside the registry
        text, problem = read_text(root, rel)
        if text is None:
            findings.extend([problem.finding(WP_FRONT_MATTER)] if problem else [])
            continue
        parsed = parse_work_package(
            text, rel, extra, syntax_rule=WP_FRONT_MATTER, schema_rule=WP_SCHEMA
        )
        findings.extend(parsed.findings)
        if parsed.package is not None:
            packages.append(parsed.package)
    packages.sort(key=lambda p: (sort_key(p.id), p.path))
    return WorkPackageRegistry(
        tuple(packages),
        tuple(findings),
        load_phases(root, config),
        layout.work_packages,
        layout.engineering,
    )


# --------------------------------------------------------------------------- runners


def rule_enabled(config: Config | None, rule_id: str) -> bool:
    """Whether ``config`` leaves ``rule_id`` on (every rule is, without a configuration)."""
    return config is None or config.enabled(rule_id)


def enabled_checks(
    config: Config | None, rules: Iterable[Rule[Subject, Options]]
) -> list[Rule[Subject, Options]]:
    """The ``rules`` that ``config`` leaves on; the runners call no other rule's check."""
    return switched_on(rules, lambda rule_id: rule_enabled(config, rule_id))


def run_checks(
    config: Config | None,
    rules: Iterable[Rule[Subject, Options]],
    subject: Subject,
    options: Options,
) -> list[Finding]:
    """The findings of the enabled ``rules`` over ``subject``; the others are not called."""
    return [f for rule in enabled_checks(config, rules) for f in rule.check(subject, options)]


def _keep(config: Config | None, findings: Iterable[Finding]) -> list[Finding]:
    """The findings of enabled rules, sorted by file, line and rule."""
    return sorted(f for f in findings if rule_enabled(config, f.rule_id))


def _provenance(root: Path, config: Config | None, history: bool) -> tuple[list[Finding], int]:
    """Provenance findings and the number of sources checked."""
    from wpgate.rules import provenance as rules

    parsed = load_provenance(root, config)
    # The git history serves provenance-first-use-history alone: read only when it runs.
    if history and rule_enabled(config, PROVENANCE_FIRST_USE_HISTORY) and is_work_tree(root):
        require_full_history(
            root,
            "the first-use history check (on with history_start or [tool.wpgate.provenance] "
            "history, or --history; `--no-history` skips it)",
        )
        parsed = replace(parsed, citations=first_citing_commits(root))
    findings = run_checks(config, rules.CHECKS, parsed, ProvenanceOptions.from_config(config))
    return _keep(config, findings), len(parsed.sources)


def lint_provenance(
    root: Path, config: Config | None = None, *, history: bool = False
) -> list[Finding]:
    """Every provenance finding (WPG2xx); ``history`` also checks first-use dates against git."""
    return _provenance(root, config, history)[0]


def _work_packages(root: Path, config: Config | None) -> tuple[list[Finding], int]:
    """Work-package findings and the number of pages checked."""
    from wpgate.references import GateResolver
    from wpgate.rules import work_packages as rules

    registry = load_work_packages(root, config)
    if rule_enabled(config, WP_DONE_GATES_RESOLVE):  # gate resolution serves that rule alone
        gates = GateResolver(root, options=GateOptions.from_config(config))
        registry = replace(registry, resolve_gate=gates.resolve)
    findings = run_checks(config, rules.CHECKS, registry, WorkPackageOptions.from_config(config))
    # Findings about the folder itself (wp-id-matches-file: it does not exist) are not pages.
    folder = registry.directory
    pages = len(
        {f.path for f in registry.findings if f.path != folder}
        | {p.path for p in registry.packages}
    )
    return _keep(config, findings), pages


def lint_work_packages(root: Path, config: Config | None = None) -> list[Finding]:
    """Every work-package finding (WPG3xx)."""
    return _work_packages(root, config)[0]


def _evidence(
    root: Path, config: Config | None, git: bool, collect: bool
) -> tuple[list[Finding], int]:
    """Evidence findings and the number of claims checked."""
    # Imported here, not at the top: the commit-msg hook reads _docs and must not load these.
    from wpgate._evidence_tree import load_evidence
    from wpgate.rules import evidence as rules

    options = EvidenceOptions.from_config(config)
    # The git diffs and the pytest collection serve one rule each: off, they are not run.
    tree = load_evidence(
        root,
        config,
        git=git,
        collect=collect and options.collect and rule_enabled(config, EVIDENCE_COUNT_MARKER),
        identical=rule_enabled(config, EVIDENCE_IDENTICAL_MARKER),
    )
    findings = run_checks(config, rules.CHECKS, tree, options)
    return _keep(config, findings), len(tree.claims)


def lint_evidence(
    root: Path, config: Config | None = None, *, git: bool = True, collect: bool = True
) -> list[Finding]:
    """Every evidence finding (WPG4xx); ``git``/``collect`` switch the git and pytest checks."""
    return _evidence(root, config, git, collect)[0]


def _changelog(root: Path, config: Config | None) -> tuple[list[Finding], int]:
    """Changelog findings and the number of backticked names checked."""
    from wpgate.parsers.changelog import parse_unreleased
    from wpgate.project_index import load_project_index
    from wpgate.rules import changelog as rules

    rel = DocsLayout.from_config(config).changelog
    text, problem = read_text(root, rel)
    if text is None:
        return _keep(config, [problem.finding(CHANGELOG_UNRELEASED)] if problem else []), 0
    section = parse_unreleased(text, rel)
    # The project index serves changelog-names-resolve alone.
    if section.names and rule_enabled(config, CHANGELOG_NAMES_RESOLVE):
        section = replace(section, index=load_project_index(root, config))
    findings = run_checks(config, rules.CHECKS, section, ChangelogOptions.from_config(config))
    return _keep(config, findings), len(section.names)


def lint_changelog(root: Path, config: Config | None = None) -> list[Finding]:
    """Every changelog finding (WPG5xx)."""
    return _changelog(root, config)[0]


def load_markdown_pages(root: Path, config: Config | None = None) -> MarkdownPages:
    """The pages of ``[tool.wpgate.docs] pages``; one that cannot be read is a finding."""
    pages: list[MarkdownPage] = []
    problems: list[Finding] = []
    for rel in glob_pages(root, DocsLayout.from_config(config).pages):
        text, problem = read_text(root, rel)
        if text is not None:
            pages.append(MarkdownPage(rel, text))
        elif problem is not None:
            problems.append(problem.finding(MARKDOWN_LIST_BLANK_LINE))
    return MarkdownPages(tuple(pages), tuple(problems))


def _markdown(root: Path, config: Config | None) -> tuple[list[Finding], int]:
    """Markdown findings and the number of pages checked."""
    from wpgate.rules import markdown as rules

    pages = load_markdown_pages(root, config)
    findings = run_checks(config, rules.CHECKS, pages, DocsLayout.from_config(config))
    return _keep(config, findings), len(pages.pages)


def lint_markdown(root: Path, config: Config | None = None) -> list[Finding]:
    """Every Markdown finding (WPG6xx)."""
    return _markdown(root, config)[0]


# --------------------------------------------------------------------------- linter runs
# The CLI's view: each linter's findings with a summary line (``wpgate._output``).


def run_provenance(config: Config, *, history: bool | None = None) -> LinterRun:
    """``wpgate provenance``; history is on when asked, or configured, or history_start is set."""
    if history is None:
        configured = ProvenanceOptions.from_config(config).history
        history = bool(config.history_start) if configured is None else configured
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


def run_markdown(config: Config) -> LinterRun:
    """``wpgate markdown``."""
    findings, count = _markdown(config.root, config)
    return LinterRun(tuple(findings), Summary("markdown", count, "page"))


def new_work_package(
    root: Path, config: Config | None, wp_id: str, title: str, phase: int
) -> tuple[str, ...]:
    """Write a scaffolded page for ``wp_id``; returns the paths written (the page first).

    In a registry with no phase page yet, the phase's page is written too, so the new package
    passes wp-phase-exists at once. Raises ValueError saying why not.
    """
    from wpgate.parsers.work_packages import format_work_package

    layout = DocsLayout.from_config(config)
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
