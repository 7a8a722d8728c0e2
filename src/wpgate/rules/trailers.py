"""Commit-message rules (WPG1xx): the subject line and the governance trailers.

Each rule is a pure ``check_x(parsed, options) -> Sequence[Finding]`` over a
:class:`CommitMessage` (the parsed message with what it is checked against) and
:class:`TrailerOptions` (``[tool.wpgate.trailers]``, declared in ``wpgate.options`` with the
other linters' records and re-exported here). :func:`lint_messages` runs the enabled rules over
many messages and counts the exemptions.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Mapping, Sequence

from wpgate._model import WP_ID_PATTERN, Finding, Rule, register, switched_on
from wpgate._record import field, frozen
from wpgate.options import DEFAULT_TYPES, GOVERNED_TRAILERS, TrailerOptions
from wpgate.references import References, split_node_ids
from wpgate.rules import (
    ASSUMPTIONS_TRAILER,
    CLEAN_ROOM_STATEMENT,
    GATE_TRAILER,
    MESSAGE_ENCODING,
    PROVENANCE_TRAILER,
    SIGNED_OFF_BY,
    SUBJECT_FORMAT,
    SUBJECT_LENGTH,
    SUBJECT_PERIOD,
    WP_TRAILER,
    declared,
)
from wpgate.trailers import Message, Trailer

__all__ = [
    "DEFAULT_TYPES",
    "CommitMessage",
    "LintResult",
    "TrailerOptions",
    "exemption",
    "is_revert",
    "lint_messages",
    "message_exemption",
    "metadata_exemption",
    "reverted_commit",
]

_SUBJECT = re.compile(r"^(?P<type>[A-Za-z][\w-]*)(?:\((?P<scope>[^()]*)\))?!?: (?P<text>\S.*)$")
_WP_ID = re.compile(rf"^(?:{WP_ID_PATTERN}|none)$")
_SOURCE_ITEM = re.compile(r"^(?P<id>R[0-9]+)(?:\s+(?P<locator>\S.*))?$")
# A source id written inside another's locator (`R1 R99`, `R1 and R3`, `R1 (R2-R9)`): checked
# as cited. A dash is no part of a word here, and \d takes any script's digits so that an id
# written in other digits is refused, not skipped (`R1 §2-R3`, `R1 R\uff13`).
_ID_IN_LOCATOR = re.compile(r"(?<!\w)R\d+(?!\w)")
_ASCII_SOURCE_ID = re.compile(r"^R[0-9]+$")
_NONE_WITH_REASON = re.compile(r"^none\s*\((?P<reason>.*)\)$", re.IGNORECASE)
_ASSUMPTION_ID = re.compile(r"^A[0-9]+$")
_SIGN_OFF = re.compile(r"^[^<>]*\S[^<>]* <[^<>\s@]+@[^<>\s]+>$")
_FIXUP_PREFIXES = ("fixup!", "squash!", "amend!")
# What `git revert` writes: `Revert "<subject>"`, a blank line, `This reverts commit <sha>.`
_REVERT_BODY = re.compile(r"^This reverts commit [0-9a-f]{7,64}\b")


def _resolves(_node: str) -> str | None:
    """The default gate resolver: every node id resolves."""
    return None


@frozen
class CommitMessage:
    """A parsed message with what it is checked against.

    ``path`` is the commit's 12-character sha or the message file; ``author`` is
    ``Name <email>`` when known; ``resolve_gate`` says why a node id does not resolve in the
    working tree (None when it does); for a commit read from git (full sha ``commit``),
    ``resolve_own_gate(commit, node_id)`` does the same in that commit's own tree, where a gate
    that no longer resolves in the working tree (a test renamed, moved or reverted since) still
    proves its commit.
    """

    message: Message
    path: str
    references: References = field(default_factory=References)
    resolve_gate: Callable[[str], str | None] = field(default=_resolves, compare=False)
    commit: str = ""
    resolve_own_gate: Callable[[str, str], str | None] | None = field(default=None, compare=False)
    author: str | None = None
    parents: int = 1
    pr_mode: bool = False

    def __init__(
        self,
        message: Message,
        path: str,
        references: References | None = None,
        resolve_gate: Callable[[str], str | None] = _resolves,
        commit: str = "",
        resolve_own_gate: Callable[[str, str], str | None] | None = None,
        author: str | None = None,
        parents: int = 1,
        pr_mode: bool = False,
    ) -> None:
        # One per commit of a range: one dictionary update instead of the frozen __init__'s
        # nine object.__setattr__ calls (see wpgate._model.Finding). Still frozen.
        self.__dict__.update(
            message=message,
            path=path,
            references=References() if references is None else references,
            resolve_gate=resolve_gate,
            commit=commit,
            resolve_own_gate=resolve_own_gate,
            author=author,
            parents=parents,
            pr_mode=pr_mode,
        )

    @property
    def last_line(self) -> int:
        """The line a missing trailer should be added after: the last non-blank, non-comment
        one (1 when there is none); found once (:func:`_line_to_add`)."""
        return _line_to_add(self)


def _line_to_add(parsed: CommitMessage) -> int:
    """What ``parsed.last_line`` answers, found once (a message without trailers asks once per
    missing trailer) and kept in the instance by hand: Python 3.11's
    ``functools.cached_property`` takes a lock on every first read, once per commit. The rules
    call this function rather than read the property: Python 3.11 runs a Python function called
    from Python in the same evaluation loop (R330), while a property's getter is called through
    C, which cost a range lint of runc six million instructions more."""
    cached: int | None = parsed.__dict__.get("_last_line")
    if cached is None:
        cached = parsed.__dict__["_last_line"] = _last_text_line(parsed.message)
    return cached


def _last_text_line(message: Message) -> int:
    """The 1-based number of ``message``'s last non-blank, non-comment line (1: none)."""
    lines, comment = message.lines, message.comment_char
    for index in range(len(lines) - 1, -1, -1):
        line = lines[index]
        if line.strip() and (comment is None or not line.startswith(comment)):
            return index + 1
    return 1


# Each rule runs once per commit of a history, and most runs find nothing: a rule returns a
# tuple (empty, the usual answer, costs nothing to make) rather than being a generator.
_NONE: tuple[Finding, ...] = ()


def check_encoding(parsed: CommitMessage, options: TrailerOptions) -> tuple[Finding, ...]:
    """The message is valid UTF-8 and holds no NUL byte."""
    message = parsed.message
    if message.nul_line is None and message.encoding_error_line is None:
        return _NONE
    found = []
    if message.nul_line is not None:
        found.append(
            Finding(
                parsed.path,
                message.nul_line,
                MESSAGE_ENCODING,
                "the message holds a NUL byte on this line; git refuses such a message (and "
                "its readers stop at the NUL), so remove it",
            )
        )
    line = message.encoding_error_line
    if line is not None:
        found.append(
            Finding(
                parsed.path,
                line,
                MESSAGE_ENCODING,
                "the message is not valid UTF-8 (the first bad byte is on this line); re-encode "
                "it as UTF-8 (`git commit --amend`, with i18n.commitEncoding unset)",
            )
        )
    return tuple(found)


def check_subject_format(parsed: CommitMessage, options: TrailerOptions) -> tuple[Finding, ...]:
    """The subject reads ``type(scope): text`` with a configured type."""
    subject, line = parsed.message.subject, parsed.message.subject_line
    if not subject:
        return (
            Finding(
                parsed.path,
                line,
                SUBJECT_FORMAT,
                "the message is empty; write a subject `type(scope): summary`",
            ),
        )
    match = _SUBJECT.match(subject)
    if match is None:
        return (
            Finding(
                parsed.path,
                line,
                SUBJECT_FORMAT,
                f"subject {subject[:60]!r} is not `type(scope): summary`; start it with one of "
                f"{', '.join(options.types)}, e.g. `fix(cli): handle an empty range`",
            ),
        )
    kind = match["type"]
    if kind not in options.types:
        return (Finding(parsed.path, line, SUBJECT_FORMAT, _not_a_type(kind, options.types)),)
    if match["scope"] is not None and not match["scope"].strip():
        return (
            Finding(
                parsed.path, line, SUBJECT_FORMAT, "the scope `()` is empty; name it or drop it"
            ),
        )
    return _NONE


@functools.lru_cache(maxsize=256)
def _not_a_type(kind: str, types: tuple[str, ...]) -> str:
    """The message of a subject whose type is not one of ``types``: made once per type a
    history uses (runc's subjects name a few dozen, `libct:` thousands of times)."""
    return (
        f"`{kind}` is not a commit type; use one of {', '.join(types)} "
        "(configurable in [tool.wpgate.trailers] types)"
    )


def check_subject_length(parsed: CommitMessage, options: TrailerOptions) -> tuple[Finding, ...]:
    """The subject is at most ``max_subject_length`` characters."""
    subject = parsed.message.subject
    if len(subject) <= options.max_subject_length:
        return _NONE
    return (
        Finding(
            parsed.path,
            parsed.message.subject_line,
            SUBJECT_LENGTH,
            f"the subject is {len(subject)} characters; shorten it to at most "
            f"{options.max_subject_length} and move detail into the body",
        ),
    )


def check_subject_period(parsed: CommitMessage, options: TrailerOptions) -> tuple[Finding, ...]:
    """The subject does not end with a period."""
    if not parsed.message.subject.endswith("."):
        return _NONE
    return (
        Finding(
            parsed.path,
            parsed.message.subject_line,
            SUBJECT_PERIOD,
            "the subject ends with a period; remove it",
        ),
    )


class _Governed:
    """A governed trailer as its rule reads it: the key, the rule, the folded key
    (``Message.by_key``) and the message of its absence (the same text for every commit).

    A plain class, made three times at import: nothing here uses a frozen record's equality,
    hash or repr.
    """

    def __init__(self, key: str, rule_id: str, example: str, *, one_id: bool = False) -> None:
        self.key = key
        self.rule_id = rule_id
        self.folded = key.lower()
        # WP: names one work package; the lists (Provenance:, Assumptions:) take several ids.
        self.repeated = (
            "keep exactly one: a commit serves one work package (split a commit that serves two)"
            if one_id
            else "keep exactly one (separate several ids with commas)"
        )
        self.missing = (
            f"the `{key}:` trailer is missing; add `{example}` to the last paragraph of the "
            "message (trailers follow a blank line)"
        )


def _presence(
    parsed: CommitMessage,
    options: TrailerOptions,
    governed: _Governed,
    found: tuple[Trailer, ...],
) -> Sequence[Finding]:
    """Findings for a missing required trailer or a repeated one (``found``: its trailers)."""
    if not found:
        return _missing(parsed, options, governed)
    return [
        Finding(
            parsed.path,
            extra.line,
            governed.rule_id,
            f"`{governed.key}:` appears {len(found)} times; {governed.repeated}",
        )
        for extra in found[1:]
    ]


def _missing(
    parsed: CommitMessage, options: TrailerOptions, governed: _Governed
) -> tuple[Finding, ...]:
    """The finding of an absent trailer, when it is required."""
    if governed.key in options.required:
        return (Finding(parsed.path, _line_to_add(parsed), governed.rule_id, governed.missing),)
    return _NONE


_WP = _Governed("WP", WP_TRAILER, "WP: NNN", one_id=True)


def check_wp(parsed: CommitMessage, options: TrailerOptions) -> Sequence[Finding]:
    """``WP:`` appears once and names a registered work package (or ``none``)."""
    found = parsed.message.by_key.get(_WP.folded)
    if found is None:  # the usual case in an ungoverned history: answered without a call
        return _missing(parsed, options, _WP)
    if len(found) != 1:
        return _presence(parsed, options, _WP, found)
    trailer = found[0]
    value = trailer.value
    if not _WP_ID.match(value):
        parts = [p for p in re.split(r"[\s,;]+", value) if p]
        several = len(parts) > 1 and all(_WP_ID.match(p) for p in parts)
        return (
            Finding(
                parsed.path,
                trailer.line,
                WP_TRAILER,
                f"`WP: {value[:60]}` names {len(parts)} work packages; a commit serves one: "
                "keep the one it serves (split a commit that serves two)"
                if several
                else f"`WP: {value[:60]}` is not a work-package id; write three or more digits "
                "with an optional letter (`WP: 004`, `WP: 197b`, `WP: 1000`) or `WP: none`",
            ),
        )
    if value != "none" and value not in parsed.references.wp_ids:
        refused = parsed.references.wp_refused.get(value)
        return (
            Finding(
                parsed.path,
                trailer.line,
                WP_TRAILER,
                f"work package {value} is not in the registry (docs/work_packages/wp-{value}.md); "
                "fix the id or create the package with `wpgate new-wp`"
                if refused is None
                else f"work package {value} is not in the registry: {refused}",
            ),
        )
    return _NONE


# Real histories repeat the same trailer values, so each distinct value's verdict is computed
# once per run: these functions are pure in (value, references) and cached.
_VERDICT_CACHE = 4096


@functools.lru_cache(maxsize=_VERDICT_CACHE)
def provenance_problems(value: str, references: References) -> tuple[str, ...]:
    """What is wrong with a ``Provenance:`` value, one message per problem."""
    if value.lower().startswith("none"):
        match = _NONE_WITH_REASON.match(value)
        if match is None or not match["reason"].strip():
            return (
                "`Provenance: none` needs a reason; write `Provenance: none (why no outside "
                "source was used)`",
            )
        return ()
    problems: list[str] = []
    table = references.provenance_path
    for item in (part.strip() for part in value.split(",")):
        source = _SOURCE_ITEM.match(item)
        if source is None:
            problems.append(
                f"`{item}` is not a source id; cite ids from {table} such as `R12` "
                "(a locator may follow: `R12 §3.2`), or write `none (reason)`"
            )
            continue
        # Every id the item names is cited, the locator's too (`R1 and R3`, `R1 (R99)`).
        for source_id in (source["id"], *_ID_IN_LOCATOR.findall(source["locator"] or "")):
            problem = (
                _source_problem(source_id, references)
                if _ASCII_SOURCE_ID.match(source_id)
                else f"`{source_id}` is not a source id: write its digits as 0-9 (`R12`)"
            )
            if problem is not None and problem not in problems:
                problems.append(problem)
    return tuple(problems)


def _source_problem(source_id: str, references: References) -> str | None:
    """What is wrong with citing ``source_id``, or None."""
    table = references.provenance_path
    if references.provenance_unread is not None:
        return (
            f"{source_id} cannot be looked up: {references.provenance_unread} (the provenance "
            "table, `wpgate init` writes one)"
        )
    if source_id in references.placeholder_ids:
        return (
            f"{source_id} is a withdrawn placeholder id; cite the source's real id from the "
            "Sources table"
        )
    if source_id not in references.provenance_ids:
        return (
            f"{source_id} is not in the Sources table of {table}; add the source (with its "
            "first-use row) or fix the id"
        )
    return None


# No example id: a newcomer's provenance table is empty, and `R12` would be refused.
_PROVENANCE = _Governed(
    "Provenance",
    PROVENANCE_TRAILER,
    "Provenance: R<n>` (a source id of the provenance table) or `Provenance: none (reason)",
)


def check_provenance(parsed: CommitMessage, options: TrailerOptions) -> Sequence[Finding]:
    """``Provenance:`` cites allowlisted source ids (with locators) or says ``none (reason)``."""
    found = parsed.message.by_key.get(_PROVENANCE.folded)
    if found is None:  # absent, as in check_wp: answered with one call fewer
        return _missing(parsed, options, _PROVENANCE)
    return _check_once(parsed, options, _PROVENANCE, found, provenance_problems)


def _check_once(
    parsed: CommitMessage,
    options: TrailerOptions,
    governed: _Governed,
    found: tuple[Trailer, ...],
    problems: Callable[[str, References], tuple[str, ...]],
) -> Sequence[Finding]:
    """A trailer that must appear once, present as ``found``: one, then ``problems`` of its
    value."""
    if len(found) != 1:
        return _presence(parsed, options, governed, found)
    trailer = found[0]
    return [
        Finding(parsed.path, trailer.line, governed.rule_id, problem)
        for problem in problems(trailer.value, parsed.references)
    ]


@functools.lru_cache(maxsize=_VERDICT_CACHE)
def assumption_problems(value: str, references: References) -> tuple[str, ...]:
    """What is wrong with an ``Assumptions:`` value, one message per problem."""
    if value == "none":
        return ()
    problems: list[str] = []
    for item in (part.strip() for part in value.split(",")):
        if not _ASSUMPTION_ID.match(item):
            problems.append(
                f"`{item}` is not an assumption id; write `none` or ids such as `A1, A2`"
            )
        elif references.assumptions_unread is not None:
            problems.append(
                f"{item} cannot be looked up: {references.assumptions_unread} (the assumptions, "
                f"a table whose first column is `ID`: `wpgate init` writes one), or write "
                "`Assumptions: none`"
            )
        elif item not in references.assumption_ids:
            problems.append(
                f"{item} is not in {references.assumptions_path}; add the assumption to its "
                f"table (a row `| {item} | ... |`) or fix the id"
            )
    return tuple(problems)


_ASSUMPTIONS = _Governed("Assumptions", ASSUMPTIONS_TRAILER, "Assumptions: none")


def check_assumptions(parsed: CommitMessage, options: TrailerOptions) -> Sequence[Finding]:
    """``Assumptions:`` is ``none`` or ids from docs/ASSUMPTIONS.md."""
    found = parsed.message.by_key.get(_ASSUMPTIONS.folded)
    if found is None:
        return _missing(parsed, options, _ASSUMPTIONS)
    return _check_once(parsed, options, _ASSUMPTIONS, found, assumption_problems)


@functools.lru_cache(maxsize=_VERDICT_CACHE)
def gate_problems(value: str, resolve: Callable[[str], str | None]) -> tuple[str, ...]:
    """What is wrong with a ``Gate:`` value, one message per problem."""
    node_ids = split_node_ids(value)
    if not node_ids:
        return ("`Gate:` is empty; name at least one test (`path::name`), test file or `ci:<job>`",)
    return tuple(f"gate {why}" for why in map(resolve, node_ids) if why is not None)


_GATE_MISSING = (
    "the `Gate:` trailer is missing; add `Gate: <test file>::<test name>` (e.g. "
    "`tests/test_x.py::test_y`, `pkg/x_test.go::TestY`) naming the tests that prove the change"
)


def check_gate(parsed: CommitMessage, options: TrailerOptions) -> Sequence[Finding]:
    """``Gate:`` names tests that resolve statically (``path::name`` in any configured
    language, a whole test file, or ``ci:<job>``)."""
    found = parsed.message.by_key.get("gate", ())
    if not found:
        if "Gate" in options.required:
            return (Finding(parsed.path, _line_to_add(parsed), GATE_TRAILER, _GATE_MISSING),)
        return _NONE
    findings: list[Finding] = []
    for trailer in found:
        problems = gate_problems(trailer.value, parsed.resolve_gate)
        if not problems:
            continue
        own = parsed.resolve_own_gate
        node_ids = split_node_ids(trailer.value)
        if own is not None and node_ids:
            # Rare (a gate gone from the working tree): asked per commit, never cached.
            problems = tuple(
                f"gate {why}"
                for node in node_ids
                if (why := parsed.resolve_gate(node)) is not None
                and own(parsed.commit, node) is not None
            )
        findings.extend(Finding(parsed.path, trailer.line, GATE_TRAILER, p) for p in problems)
    return findings


def check_sign_off(parsed: CommitMessage, options: TrailerOptions) -> Sequence[Finding]:
    """``Signed-off-by: Name <email>`` is present (and matches the author when configured)."""
    found = parsed.message.values("Signed-off-by")
    if not found:
        return (
            Finding(
                parsed.path,
                _line_to_add(parsed),
                SIGNED_OFF_BY,
                "the `Signed-off-by:` trailer is missing; commit with `git commit -s`",
            ),
        )
    findings = [
        Finding(
            parsed.path,
            trailer.line,
            SIGNED_OFF_BY,
            f"`Signed-off-by: {trailer.value}` is not `Name <email>`; fix it or use "
            "`git commit -s`",
        )
        for trailer in found
        if not _SIGN_OFF.match(trailer.value)
    ]
    values = {t.value for t in found}
    if options.signoff_matches_author and parsed.author and parsed.author not in values:
        findings.append(
            Finding(
                parsed.path,
                found[-1].line,
                SIGNED_OFF_BY,
                f"no sign-off matches the author `{parsed.author}`; add `Signed-off-by: "
                f"{parsed.author}` (`git commit -s`)",
            )
        )
    return findings


def check_clean_room(parsed: CommitMessage, options: TrailerOptions) -> tuple[Finding, ...]:
    """PR mode: the description keeps the clean-room statement."""
    if not parsed.pr_mode:
        return _NONE
    marker = options.clean_room_statement
    for _, line in parsed.message.text_lines():
        if line.startswith(marker) and line[len(marker) :].strip():
            return _NONE
    return (
        Finding(
            parsed.path,
            _line_to_add(parsed),
            CLEAN_ROOM_STATEMENT,
            f"the PR description must keep the `{marker}` statement; restore it from the "
            "template and say which sources went into the change",
        ),
    )


_TRAILER_RULES = dict(
    zip(
        GOVERNED_TRAILERS,
        (WP_TRAILER, PROVENANCE_TRAILER, ASSUMPTIONS_TRAILER, GATE_TRAILER),
        strict=True,
    )
)

#: The commit-message rules: each check reads one parsed message.
CHECKS: tuple[Rule[CommitMessage, TrailerOptions], ...] = register(
    declared(MESSAGE_ENCODING, check_encoding),
    declared(SUBJECT_FORMAT, check_subject_format),
    declared(SUBJECT_LENGTH, check_subject_length, options={"max_subject_length": 72}),
    declared(SUBJECT_PERIOD, check_subject_period),
    declared(WP_TRAILER, check_wp),
    declared(PROVENANCE_TRAILER, check_provenance),
    declared(ASSUMPTIONS_TRAILER, check_assumptions),
    declared(GATE_TRAILER, check_gate),
    declared(
        SIGNED_OFF_BY,
        check_sign_off,
        enabled_by_default=False,
        options={"signoff_matches_author": False},
    ),
    declared(CLEAN_ROOM_STATEMENT, check_clean_room),
)


def metadata_exemption(parents: int, author: str | None, options: TrailerOptions) -> str | None:
    """``merge`` or ``bot`` when the commit is exempt whatever its message says, else None."""
    if parents > 1:
        return "merge"
    if author and options.bot_pattern.search(author):
        return "bot"
    return None


def exemption(parsed: CommitMessage, options: TrailerOptions) -> str | None:
    """Why this message is not checked (``merge``, ``bot``, ``fixup``, ``revert``), or None."""
    reason = metadata_exemption(parsed.parents, parsed.author, options)
    return reason if reason is not None else message_exemption(parsed, options)


def message_exemption(
    parsed: CommitMessage, options: TrailerOptions, *, history: bool = False
) -> str | None:
    """``fixup`` or ``revert`` when what the message says exempts it, else None (the part of
    :func:`exemption` that reads the message). A fixup is exempt in the commit-msg hook; in a
    ``history`` range (commits that landed) only with ``fixup_exempt_in_history``."""
    fixups = options.fixup_exempt_in_history or not history
    if fixups and not parsed.pr_mode and parsed.message.subject.startswith(_FIXUP_PREFIXES):
        return "fixup"
    if options.revert_exempt and is_revert(parsed.message):
        return "revert"
    return None


def is_revert(message: Message) -> bool:
    """Whether ``message`` is ``git revert``'s: a ``Revert "..."`` subject and its body line."""
    return reverted_commit(message) is not None


def reverted_commit(message: Message) -> str | None:
    """The commit a ``git revert`` message names (``This reverts commit X.``), or None where
    the message is not one."""
    if not message.subject.startswith('Revert "'):
        return None
    for _, line in message.text_lines():
        match = _REVERT_BODY.match(line)
        if match:
            return match.group(0).rsplit(" ", 1)[-1]
    return None


@frozen
class LintResult:
    """Findings of many messages, how many were checked, and the exemptions by reason."""

    findings: tuple[Finding, ...]
    checked: int
    exempt: Mapping[str, int]


def lint_messages(
    messages: Iterable[CommitMessage | str],
    options: TrailerOptions,
    enabled: Callable[[str], bool] | None = None,
    *,
    screened: bool = False,
) -> LintResult:
    """Run every enabled WPG1xx rule over ``messages``; exempt messages are only counted.

    An item that is a string is a commit already found exempt for that reason (a range's
    merges and bot commits, unread, :func:`metadata_exemption`; with ``screened``, its fixups
    and reverts too). ``screened`` says the caller asked :func:`exemption` of every message it
    hands over, so each one is checked without being asked again (a range's reader does, once
    per commit). ``enabled`` says whether a rule id is on (``Config.enabled``); by default each
    rule's own default applies.
    """
    checks = [rule.check for rule in switched_on(CHECKS, enabled)]
    findings: list[Finding] = []
    extend = findings.extend
    exempt: dict[str, int] = {}
    checked = 0
    for item in messages:
        if isinstance(item, str):
            reason = item
        else:
            found = None if screened else exemption(item, options)
            if found is None:
                checked += 1
                for check in checks:
                    # Most checks find nothing: an empty answer is not handed to extend.
                    if result := check(item, options):
                        extend(result)
                continue
            reason = found
        exempt[reason] = exempt.get(reason, 0) + 1
    return LintResult(tuple(findings), checked, dict(sorted(exempt.items())))
