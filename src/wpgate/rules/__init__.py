"""Lint rules, one module per governed document, and the one declaration of every rule.

Each rule is declared here once, as a :class:`RuleInfo` of :data:`DECLARED`: its stable id, its
kebab-case name and its one-line summary. The id is written nowhere else: every module names it
by its constant (``SUBJECT_FORMAT``, the upper-case name), and ``wpgate explain``, the
``[tool.wpgate.rules]`` switches, the SARIF rules and the site's rule pages are made from the
registered rules. A rule module attaches each check to its declaration with :func:`declared`
and registers the results through :func:`wpgate._model.register`, which makes the module's one
typed tuple of rules, ``CHECKS`` (every check takes ``(subject, options)``).

:func:`register_all` imports every module in this package, so a new linter's rules are known
without editing a list. Importing the package alone imports no rule module: the commit-msg hook
loads only the commit rules it runs. The parsers and readers take the ids of the findings they
make as arguments (they name no rule themselves); the constants live here, so the commit-msg
hook reads the provenance table and the registry without importing the docs rule modules.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Any

from wpgate._model import RULES, Finding, Options, Rule, Subject
from wpgate._record import frozen

__all__ = [
    "ASSUMPTIONS_TRAILER",
    "CHANGELOG_NAMES_RESOLVE",
    "CHANGELOG_UNRELEASED",
    "CLEAN_ROOM_STATEMENT",
    "DECLARED",
    "EVIDENCE_CITATION_EXISTS",
    "EVIDENCE_CITATION_INSIDE",
    "EVIDENCE_CLAIM_CITES",
    "EVIDENCE_COUNT_MARKER",
    "EVIDENCE_FILE_VALID",
    "EVIDENCE_IDENTICAL_MARKER",
    "EVIDENCE_NUMBERS",
    "EVIDENCE_SOURCE_HASHES",
    "EVIDENCE_STALE",
    "GATE_TRAILER",
    "MARKDOWN_LIST_BLANK_LINE",
    "MESSAGE_ENCODING",
    "PROVENANCE_CODE_LICENCE",
    "PROVENANCE_FIRST_USE_DATES",
    "PROVENANCE_FIRST_USE_HISTORY",
    "PROVENANCE_FIRST_USE_ONCE",
    "PROVENANCE_ID_FORMAT",
    "PROVENANCE_SOURCE_CELLS",
    "PROVENANCE_TABLES",
    "PROVENANCE_TRAILER",
    "PROVENANCE_UNIQUE_IDS",
    "RULES",
    "SIGNED_OFF_BY",
    "SUBJECT_FORMAT",
    "SUBJECT_LENGTH",
    "SUBJECT_PERIOD",
    "WP_DEPENDENCIES_ACYCLIC",
    "WP_DEPENDENCIES_EXIST",
    "WP_DONE_GATES_RESOLVE",
    "WP_FRONT_MATTER",
    "WP_ID_MATCHES_FILE",
    "WP_PHASE_EXISTS",
    "WP_SCHEMA",
    "WP_STATUS_REASON",
    "WP_SUPERSEDED_BY",
    "WP_TRAILER",
    "RuleInfo",
    "declared",
    "register_all",
]

# Commit messages (``wpgate trailers``, :mod:`wpgate.rules.trailers`).
MESSAGE_ENCODING = "WPG100"
SUBJECT_FORMAT = "WPG101"
SUBJECT_LENGTH = "WPG102"
SUBJECT_PERIOD = "WPG103"
WP_TRAILER = "WPG104"
PROVENANCE_TRAILER = "WPG105"
ASSUMPTIONS_TRAILER = "WPG106"
GATE_TRAILER = "WPG107"
SIGNED_OFF_BY = "WPG108"
CLEAN_ROOM_STATEMENT = "WPG109"

# The provenance record (:mod:`wpgate.rules.provenance`).
PROVENANCE_TABLES = "WPG201"
PROVENANCE_ID_FORMAT = "WPG202"
PROVENANCE_UNIQUE_IDS = "WPG203"
PROVENANCE_CODE_LICENCE = "WPG204"
PROVENANCE_FIRST_USE_ONCE = "WPG205"
PROVENANCE_FIRST_USE_DATES = "WPG206"
PROVENANCE_FIRST_USE_HISTORY = "WPG207"
PROVENANCE_SOURCE_CELLS = "WPG208"

# The work-package registry (:mod:`wpgate.rules.work_packages`).
WP_FRONT_MATTER = "WPG301"
WP_SCHEMA = "WPG302"
WP_ID_MATCHES_FILE = "WPG303"
WP_DEPENDENCIES_EXIST = "WPG304"
WP_DEPENDENCIES_ACYCLIC = "WPG305"
WP_DONE_GATES_RESOLVE = "WPG306"
WP_PHASE_EXISTS = "WPG307"
WP_STATUS_REASON = "WPG308"
WP_SUPERSEDED_BY = "WPG309"

# Evidence claims and files (:mod:`wpgate.rules.evidence`).
EVIDENCE_CLAIM_CITES = "WPG401"
EVIDENCE_CITATION_INSIDE = "WPG402"
EVIDENCE_CITATION_EXISTS = "WPG403"
EVIDENCE_FILE_VALID = "WPG404"
EVIDENCE_SOURCE_HASHES = "WPG405"
EVIDENCE_NUMBERS = "WPG406"
EVIDENCE_STALE = "WPG407"
EVIDENCE_IDENTICAL_MARKER = "WPG408"
EVIDENCE_COUNT_MARKER = "WPG409"

# The changelog (:mod:`wpgate.rules.changelog`).
CHANGELOG_UNRELEASED = "WPG501"
CHANGELOG_NAMES_RESOLVE = "WPG502"

# The site's Markdown pages (:mod:`wpgate.rules.markdown`).
MARKDOWN_LIST_BLANK_LINE = "WPG601"


@frozen
class RuleInfo:
    """A rule's declaration: its stable id (``WPG101``), kebab-case name and one-line summary."""

    rule_id: str
    name: str
    summary: str


def _by_id(*infos: RuleInfo) -> Mapping[str, RuleInfo]:
    """The declarations keyed by id; a repeated id or name is a programming error."""
    table = {info.rule_id: info for info in infos}
    if len(table) != len(infos) or len({info.name for info in infos}) != len(infos):
        raise ValueError("a rule id or name is declared twice")
    return MappingProxyType(table)


#: Every rule wpgate has, by id: the one place a rule id, name and summary are written.
DECLARED: Mapping[str, RuleInfo] = _by_id(
    # Commit messages (``wpgate trailers``, :mod:`wpgate.rules.trailers`).
    RuleInfo(
        MESSAGE_ENCODING, "message-encoding", "The message is valid UTF-8 and holds no NUL byte."
    ),
    RuleInfo(
        SUBJECT_FORMAT,
        "subject-format",
        "The subject reads `type(scope): summary` with a configured type.",
    ),
    RuleInfo(
        SUBJECT_LENGTH,
        "subject-length",
        "The subject is at most `max_subject_length` (72) characters.",
    ),
    RuleInfo(SUBJECT_PERIOD, "subject-period", "The subject has no trailing period."),
    RuleInfo(
        WP_TRAILER,
        "wp-trailer",
        "`WP:` appears exactly once: `NNN`, `NNNx` or `none`, and the package exists.",
    ),
    RuleInfo(
        PROVENANCE_TRAILER,
        "provenance-trailer",
        "`Provenance:` cites allowlisted source ids (placeholders refused) or `none (reason)`.",
    ),
    RuleInfo(
        ASSUMPTIONS_TRAILER,
        "assumptions-trailer",
        "`Assumptions:` is `none` or ids that exist in docs/ASSUMPTIONS.md.",
    ),
    RuleInfo(
        GATE_TRAILER,
        "gate-trailer",
        "`Gate:` names tests whose file and test exist (read statically: Python, Go, Rust, "
        "JavaScript/TypeScript, bats, configured patterns), a test file or a `ci:` job; in a git "
        "range, in the working tree or the commit's own tree.",
    ),
    RuleInfo(
        SIGNED_OFF_BY,
        "signed-off-by",
        "`Signed-off-by: Name <email>` is present; optionally it matches the author.",
    ),
    RuleInfo(
        CLEAN_ROOM_STATEMENT,
        "clean-room-statement",
        "PR mode: the description keeps the `Clean-room acknowledged:` statement.",
    ),
    # The provenance record (:mod:`wpgate.rules.provenance`).
    RuleInfo(
        PROVENANCE_TABLES, "provenance-tables", "the provenance tables exist and are well formed"
    ),
    RuleInfo(PROVENANCE_ID_FORMAT, "provenance-id-format", "source ids are R<n>, ranges or lists"),
    RuleInfo(
        PROVENANCE_UNIQUE_IDS,
        "provenance-unique-ids",
        "each source id is listed once across tables",
    ),
    RuleInfo(
        PROVENANCE_CODE_LICENCE,
        "provenance-code-licence",
        "code sources carry a permissive licence",
    ),
    RuleInfo(
        PROVENANCE_FIRST_USE_ONCE,
        "provenance-first-use-once",
        "each source has exactly one first-use row",
    ),
    RuleInfo(
        PROVENANCE_FIRST_USE_DATES,
        "provenance-first-use-dates",
        "first-use dates are ISO and in order",
    ),
    RuleInfo(
        PROVENANCE_FIRST_USE_HISTORY,
        "provenance-first-use-history",
        "first-use rows predate the first commit citing the source",
    ),
    RuleInfo(
        PROVENANCE_SOURCE_CELLS,
        "provenance-source-cells",
        "each source names its reference, licence and role",
    ),
    # The work-package registry (:mod:`wpgate.rules.work_packages`).
    RuleInfo(WP_FRONT_MATTER, "wp-front-matter", "pages open with valid YAML front matter"),
    RuleInfo(WP_SCHEMA, "wp-schema", "front matter keys, types and status vocabulary"),
    RuleInfo(WP_ID_MATCHES_FILE, "wp-id-matches-file", "ids match file names and are unique"),
    RuleInfo(WP_DEPENDENCIES_EXIST, "wp-dependencies-exist", "depends_on names existing packages"),
    RuleInfo(WP_DEPENDENCIES_ACYCLIC, "wp-dependencies-acyclic", "dependencies form no cycle"),
    RuleInfo(
        WP_DONE_GATES_RESOLVE, "wp-done-gates-resolve", "done packages name gates that resolve"
    ),
    RuleInfo(WP_PHASE_EXISTS, "wp-phase-exists", "each phase has an engineering page"),
    RuleInfo(WP_STATUS_REASON, "wp-status-reason", "blocked and deferred packages give a reason"),
    RuleInfo(WP_SUPERSEDED_BY, "wp-superseded-by", "superseded packages name their replacement"),
    # Evidence claims and files (:mod:`wpgate.rules.evidence`).
    RuleInfo(
        EVIDENCE_CLAIM_CITES, "evidence-claim-cites", "[MEASURED] claims cite an evidence file"
    ),
    RuleInfo(
        EVIDENCE_CITATION_INSIDE, "evidence-citation-inside", "citations stay inside the repository"
    ),
    RuleInfo(EVIDENCE_CITATION_EXISTS, "evidence-citation-exists", "cited files exist"),
    RuleInfo(EVIDENCE_FILE_VALID, "evidence-file-valid", "evidence files follow wpgate-evidence/1"),
    RuleInfo(
        EVIDENCE_SOURCE_HASHES,
        "evidence-source-hashes",
        "recorded hashes match the recorded commit",
    ),
    RuleInfo(
        EVIDENCE_NUMBERS, "evidence-numbers", "numbers in claims are recorded in the evidence"
    ),
    RuleInfo(EVIDENCE_STALE, "evidence-stale", "claims on changed code name the commit they cover"),
    RuleInfo(
        EVIDENCE_IDENTICAL_MARKER,
        "evidence-identical-marker",
        "`identical A..B -- paths` holds in git",
    ),
    RuleInfo(
        EVIDENCE_COUNT_MARKER, "evidence-count-marker", "`collected N -- paths` matches pytest"
    ),
    # The changelog (:mod:`wpgate.rules.changelog`).
    RuleInfo(
        CHANGELOG_UNRELEASED, "changelog-unreleased", "the changelog has an Unreleased section"
    ),
    RuleInfo(
        CHANGELOG_NAMES_RESOLVE, "changelog-names-resolve", "backticked names in Unreleased exist"
    ),
    # The site's Markdown pages (:mod:`wpgate.rules.markdown`).
    RuleInfo(
        MARKDOWN_LIST_BLANK_LINE,
        "markdown-list-blank-line",
        "a list after a paragraph has a blank line before it",
    ),
)


def declared(
    rule_id: str,
    check: Callable[[Subject, Options], Iterable[Finding]],
    *,
    enabled_by_default: bool = True,
    options: dict[str, Any] | None = None,
) -> Rule[Subject, Options]:
    """The rule declared as ``rule_id`` in :data:`DECLARED`, checked by ``check``."""
    info = DECLARED[rule_id]
    return Rule(
        info.rule_id,
        info.name,
        info.summary,
        check,
        enabled_by_default=enabled_by_default,
        options=dict(options or {}),
    )


def register_all() -> None:
    """Import every rule module, which registers its rules."""
    import importlib  # the commit linters import one rule module by name, never this walk
    import pkgutil

    for module in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{module.name}")
