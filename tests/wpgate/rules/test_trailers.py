"""One test per WPG1xx rule, with exact findings, on real-looking messages."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import FrozenInstanceError

import pytest

from wpgate._config import ConfigError
from wpgate._model import RULES, Finding
from wpgate._record import replace
from wpgate.references import References
from wpgate.rules.trailers import (
    CommitMessage,
    TrailerOptions,
    check_assumptions,
    check_clean_room,
    check_encoding,
    check_gate,
    check_provenance,
    check_sign_off,
    check_subject_format,
    check_subject_length,
    check_subject_period,
    check_wp,
    exemption,
    lint_messages,
    message_exemption,
)
from wpgate.trailers import decode_message, parse_message

REFS = References(
    wp_ids=frozenset({"004", "197b"}),
    provenance_ids=frozenset({"R1", "R12", "R40"}),
    placeholder_ids=frozenset({"R9"}),
    assumption_ids=frozenset({"A1", "A2"}),
)
KNOWN_GATES = {"tests/wpgate/test_cli.py::test_trailers", "tests/wpgate/test_cli.py"}
OPTIONS = TrailerOptions()

GOOD = """perf(optim): replay CUDA update preparation

MuSGD records its update preparation once and replays it on each new
gradient; the learning-rate reads stay outside the capture.

WP: 197b
Provenance: R12 §3.2, R40
Assumptions: A1
Gate: tests/wpgate/test_cli.py::test_trailers; tests/wpgate/test_cli.py
"""


def _gate(node_id: str) -> str | None:
    """A stand-in resolver: the known ids resolve, anything else names the missing test."""
    base = node_id.split("[", 1)[0]
    return None if base in KNOWN_GATES else f"`{node_id}` does not resolve"


def _commit(text: str, **kwargs: object) -> CommitMessage:
    """A message as the range linter builds it, path `abc123def456`."""
    cleanup = bool(kwargs.pop("cleanup", False))
    return CommitMessage(
        message=parse_message(text, cleanup=cleanup),
        path="abc123def456",
        references=kwargs.pop("references", REFS),  # type: ignore[arg-type]
        resolve_gate=_gate,
        **kwargs,  # type: ignore[arg-type]
    )


def _run(
    check: Callable[[CommitMessage, TrailerOptions], Iterable[Finding]],
    text: str,
    options: TrailerOptions = OPTIONS,
    **kwargs: object,
) -> list[tuple[int, str, str]]:
    """(line, rule id, message) of each finding."""
    return [(f.line, f.rule_id, f.message) for f in check(_commit(text, **kwargs), options)]


def test_good_message_has_no_findings() -> None:
    result = lint_messages([_commit(GOOD)], OPTIONS)
    assert result.findings == ()
    assert result.checked == 1


def test_the_line_of_a_missing_trailer_is_kept_without_changing_the_record() -> None:
    text = "feat(x): add y\n\nWhy y.\n# a comment\n\n"
    parsed, twin = _commit(text, cleanup=True), _commit(text, cleanup=True)
    assert parsed.last_line == 3
    assert parsed.last_line == 3  # the second read is the kept answer
    assert parsed == twin
    assert repr(parsed) == repr(twin)
    assert replace(parsed, path="0123456789ab").last_line == 3
    assert _commit("").last_line == 1
    with pytest.raises(FrozenInstanceError):
        parsed.path = "changed"  # type: ignore[misc]


def test_registry_has_stable_ids_and_names() -> None:
    wanted = {
        "WPG100": "message-encoding",
        "WPG101": "subject-format",
        "WPG102": "subject-length",
        "WPG103": "subject-period",
        "WPG104": "wp-trailer",
        "WPG105": "provenance-trailer",
        "WPG106": "assumptions-trailer",
        "WPG107": "gate-trailer",
        "WPG108": "signed-off-by",
        "WPG109": "clean-room-statement",
    }
    for rule_id, name in wanted.items():
        rule = RULES.get(rule_id)
        assert rule is not None
        assert (rule.name, RULES.get(name)) == (name, rule)
    sign_off = RULES.get("WPG108")
    assert sign_off is not None
    assert not sign_off.enabled_by_default


def test_invalid_utf8() -> None:
    decoded = decode_message(GOOD.encode().replace(b"records", b"rec\xffords"))
    parsed = CommitMessage(
        parse_message(decoded.text, encoding_error_line=decoded.error_line), "f.txt", REFS, _gate
    )
    assert [(f.line, f.rule_id) for f in check_encoding(parsed, OPTIONS)] == [(3, "WPG100")]
    assert list(check_encoding(_commit(GOOD), OPTIONS)) == []


@pytest.mark.parametrize(
    ("subject", "expected"),
    [
        ("feat(cli): add the trailers command", []),
        ("fix: handle an empty range", []),
        ("refactor(core)!: drop the legacy flag", []),
        ("build(deps): pin click below 9", []),
        ("style: wrap the long lines", []),
        ("revert: the trailer cache, it leaked", []),
        (
            "Add the trailers command",
            "subject 'Add the trailers command' is not `type(scope): summary`; start it with one "
            "of feat, fix, perf, refactor, refine, test, docs, ci, chore, exp, release, build, "
            "style, revert, e.g. `fix(cli): handle an empty range`",
        ),
        (
            "feature(cli): add it",
            "`feature` is not a commit type; use one of feat, fix, perf, refactor, refine, test, "
            "docs, ci, chore, exp, release, build, style, revert (configurable in "
            "[tool.wpgate.trailers] types)",
        ),
        ("fix(): x", "the scope `()` is empty; name it or drop it"),
        ("fix:no space", "subject 'fix:no space' is not `type(scope): summary`; start it"),
    ],
)
def test_subject_format(subject: str, expected: str | list[object]) -> None:
    found = _run(check_subject_format, GOOD.replace(GOOD.splitlines()[0], subject, 1))
    if expected == []:
        assert found == []
    else:
        assert len(found) == 1
        assert found[0][:2] == (1, "WPG101")
        assert found[0][2].startswith(str(expected))


def test_subject_format_empty_message() -> None:
    assert _run(check_subject_format, "\n\n") == [
        (1, "WPG101", "the message is empty; write a subject `type(scope): summary`")
    ]


def test_subject_types_are_configurable() -> None:
    options = TrailerOptions(types=("feature",))
    assert _run(check_subject_format, "feature(x): y\n", options) == []


def test_subject_length() -> None:
    subject = "feat(cli): " + "x" * 62
    assert len(subject) == 73
    assert _run(check_subject_length, subject + "\n") == [
        (
            1,
            "WPG102",
            "the subject is 73 characters; shorten it to at most 72 and move detail into the body",
        )
    ]
    assert _run(check_subject_length, subject[:-1] + "\n") == []


def test_subject_period() -> None:
    assert _run(check_subject_period, "fix: handle it.\n") == [
        (1, "WPG103", "the subject ends with a period; remove it")
    ]
    assert _run(check_subject_period, "fix: handle it\n") == []


def test_wp_missing_repeated_malformed_unknown() -> None:
    base = "fix: x\n\nBody.\n\n"
    assert _run(check_wp, base + "Gate: t.py\n") == [
        (
            5,
            "WPG104",
            "the `WP:` trailer is missing; add `WP: NNN` to the last paragraph of the message "
            "(trailers follow a blank line)",
        )
    ]
    assert _run(check_wp, base + "WP: 004\nWP: 197b\n") == [
        (
            6,
            "WPG104",
            "`WP:` appears 2 times; keep exactly one: a commit serves one work package (split a "
            "commit that serves two)",
        )
    ]
    assert _run(check_wp, base + "WP: 001, 002\n") == [
        (
            5,
            "WPG104",
            "`WP: 001, 002` names 2 work packages; a commit serves one: keep the one it serves "
            "(split a commit that serves two)",
        )
    ]
    assert _run(check_wp, base + "WP: 4\n") == [
        (
            5,
            "WPG104",
            "`WP: 4` is not a work-package id; write three or more digits with an optional "
            "letter (`WP: 004`, `WP: 197b`, `WP: 1000`) or `WP: none`",
        )
    ]
    assert _run(check_wp, base + "WP: 009\n") == [
        (
            5,
            "WPG104",
            "work package 009 is not in the registry (docs/work_packages/wp-009.md); fix the id "
            "or create the package with `wpgate new-wp`",
        )
    ]
    assert _run(check_wp, base + "WP: none\n") == []
    assert _run(check_wp, base + "wp: 197b\n") == []


def test_wp_naming_a_page_that_is_no_regular_file_says_why() -> None:
    why = "docs/work_packages/wp-009.md is a FIFO (named pipe), not a regular file; replace it"
    refs = replace(REFS, wp_refused={"009": why})
    parsed = replace(_commit("fix: x\n\nBody.\n\nWP: 009\n"), references=refs)
    assert [(f.line, f.rule_id, f.message) for f in check_wp(parsed, OPTIONS)] == [
        (5, "WPG104", f"work package 009 is not in the registry: {why}")
    ]


def test_wp_trailer_in_prose_is_not_a_trailer() -> None:
    # "WP: 004" inside a prose paragraph does not count: the block is the last paragraph only.
    text = "fix: x\n\nWP: 004 is what this changes.\nIt also fixes a typo.\n"
    assert [f[1] for f in _run(check_wp, text)] == ["WPG104"]


def test_provenance() -> None:
    base = "fix: x\n\nBody.\n\nWP: 004\n"
    assert _run(check_provenance, base) == [
        (
            5,
            "WPG105",
            "the `Provenance:` trailer is missing; add `Provenance: R<n>` (a source id of the "
            "provenance table) or `Provenance: none (reason)` to the last paragraph of the "
            "message (trailers follow a blank line)",
        )
    ]
    assert _run(check_provenance, base + "Provenance: R12 §3.2, R40\n") == []
    assert _run(check_provenance, base + "Provenance: none (our own measurement)\n") == []
    assert _run(check_provenance, base + "Provenance: none\n") == [
        (
            6,
            "WPG105",
            "`Provenance: none` needs a reason; write `Provenance: none (why no outside source "
            "was used)`",
        )
    ]
    assert _run(check_provenance, base + "Provenance: R9, R77, the docs\n") == [
        (
            6,
            "WPG105",
            "R9 is a withdrawn placeholder id; cite the source's real id from the Sources table",
        ),
        (
            6,
            "WPG105",
            "R77 is not in the Sources table of docs/PROVENANCE.md; add the source (with its "
            "first-use row) or fix the id",
        ),
        (
            6,
            "WPG105",
            "`the docs` is not a source id; cite ids from docs/PROVENANCE.md such as `R12` (a "
            "locator may follow: `R12 §3.2`), or write `none (reason)`",
        ),
    ]
    assert [f[:2] for f in _run(check_provenance, base)] == [(5, "WPG105")]


@pytest.mark.parametrize("value", ["R12 R77", "R12 and R9", "R12 §2 R77", "R12 (R9)"])
def test_an_id_inside_a_locator_is_cited_too(value: str) -> None:
    """An audit: the text after the first id was taken as its locator unchecked, so unknown and
    withdrawn ids passed where a comma would have made them fail."""
    found = _run(check_provenance, f"fix: x\n\nBody.\n\nWP: 004\nProvenance: {value}\n")
    assert [f[1] for f in found] == ["WPG105"]
    assert "R77 is not in the Sources table" in found[0][2] or "R9 is a withdrawn" in found[0][2]
    for fine in ("R12 §3.2", "R12 p. 7", "R12 table R-3", "R12 FR12"):
        assert _run(check_provenance, f"fix: x\n\nWP: 004\nProvenance: {fine}\n") == [], fine


@pytest.mark.parametrize(
    ("value", "named"),
    [
        ("R12 R40-R77", "R77"),
        ("R12 (R77-R40)", "R77"),
        ("R12 \u00a72-R9", "R9"),
        ("R12 (R\uff17\uff17)", "R\uff17\uff17"),
    ],
)
def test_an_id_beside_a_dash_in_a_locator_is_cited_too(value: str, named: str) -> None:
    """An audit: `R1 R99-R100` passed where `R1 R99` failed (a dash beside an id hid it), and
    an id in another script's digits passed in a locator, where it fails as the first id."""
    found = _run(check_provenance, f"fix: x\n\nWP: 004\nProvenance: {value}\n")
    assert [f[1] for f in found] == ["WPG105"]
    assert found[0][2].startswith((f"{named} is", f"`{named}` is")), found[0][2]


def test_a_source_id_is_ascii_digits() -> None:
    text = "fix: x\n\nWP: 004\nProvenance: R\uff11\uff12\n"  # full-width digits
    assert [f[1] for f in _run(check_provenance, text)] == ["WPG105"]


def test_assumptions() -> None:
    base = "fix: x\n\nBody.\n\nWP: 004\n"
    assert _run(check_assumptions, base) == []  # optional by default
    assert _run(check_assumptions, base + "Assumptions: none\n") == []
    assert _run(check_assumptions, base + "Assumptions: A1, A2\n") == []
    assert _run(check_assumptions, base + "Assumptions: A3, maybe\n") == [
        (
            6,
            "WPG106",
            "A3 is not in docs/ASSUMPTIONS.md; add the assumption to its table (a row `| A3 | "
            "... |`) or fix the id",
        ),
        (6, "WPG106", "`maybe` is not an assumption id; write `none` or ids such as `A1, A2`"),
    ]
    # Where the file cannot be read (an adopter who never made it, a file not in UTF-8), the
    # finding says why, not that the id is missing from it.
    missing = References(
        assumption_ids=frozenset({"A2"}),
        assumptions_path="notes/assumed.md",
        assumptions_unread="notes/assumed.md does not exist; create it or fix the path",
    )
    assert _run(check_assumptions, base + "Assumptions: A1\n", references=missing) == [
        (
            6,
            "WPG106",
            "A1 cannot be looked up: notes/assumed.md does not exist; create it or fix the path "
            "(the assumptions, a table whose first column is `ID`: `wpgate init` writes one), "
            "or write `Assumptions: none`",
        )
    ]
    required = TrailerOptions(required=("Assumptions",))
    assert [f[:2] for f in _run(check_assumptions, base, required)] == [(5, "WPG106")]


def test_gate() -> None:
    base = "fix: x\n\nBody.\n\nWP: 004\n"
    assert _run(check_gate, base + "Gate: tests/wpgate/test_cli.py::test_trailers[a, b]\n") == []
    assert _run(check_gate, base + "Gate: tests/x.py::test_y, tests/wpgate/test_cli.py\n") == [
        (6, "WPG107", "gate `tests/x.py::test_y` does not resolve")
    ]
    assert _run(check_gate, base + "Gate:\n") == [
        (
            6,
            "WPG107",
            "`Gate:` is empty; name at least one test (`path::name`), test file or `ci:<job>`",
        )
    ]
    assert _run(check_gate, base) == [
        (
            5,
            "WPG107",
            "the `Gate:` trailer is missing; add `Gate: <test file>::<test name>` (e.g. "
            "`tests/test_x.py::test_y`, `pkg/x_test.go::TestY`) naming the tests that prove the "
            "change",
        )
    ]


def test_sign_off() -> None:
    base = "fix: x\n\nBody.\n\nWP: 004\n"
    author = "Ada Lovelace <ada@example.org>"
    assert _run(check_sign_off, base + f"Signed-off-by: {author}\n", author=author) == []
    assert _run(check_sign_off, base + "Signed-off-by: ada\n") == [
        (6, "WPG108", "`Signed-off-by: ada` is not `Name <email>`; fix it or use `git commit -s`")
    ]
    assert _run(check_sign_off, base) == [
        (5, "WPG108", "the `Signed-off-by:` trailer is missing; commit with `git commit -s`")
    ]
    matching = TrailerOptions(signoff_matches_author=True)
    other = "Signed-off-by: Bob <bob@example.org>\n"
    assert _run(check_sign_off, base + other, matching, author=author) == [
        (
            6,
            "WPG108",
            f"no sign-off matches the author `{author}`; add `Signed-off-by: {author}` "
            "(`git commit -s`)",
        )
    ]


def test_sign_off_is_off_by_default() -> None:
    result = lint_messages([_commit(GOOD)], OPTIONS)
    assert all(f.rule_id != "WPG108" for f in result.findings)
    result = lint_messages([_commit(GOOD)], OPTIONS, lambda rule_id: True)
    assert [f.rule_id for f in result.findings] == ["WPG108"]


def test_clean_room_statement_in_pr_mode_only() -> None:
    pr_body = GOOD.replace("\n\nWP:", "\n\nClean-room acknowledged: docs only.\n\nWP:")
    assert _run(check_clean_room, pr_body, pr_mode=True) == []
    assert _run(check_clean_room, GOOD) == []
    assert _run(check_clean_room, GOOD, pr_mode=True) == [
        (
            9,
            "WPG109",
            "the PR description must keep the `Clean-room acknowledged:` statement; restore it "
            "from the template and say which sources went into the change",
        )
    ]
    empty = GOOD.replace("\n\nWP:", "\n\nClean-room acknowledged:\n\nWP:")
    assert [f[1] for f in _run(check_clean_room, empty, pr_mode=True)] == ["WPG109"]


def test_exemptions_are_counted() -> None:
    bad = "Update stuff\n"
    messages = [
        _commit(bad, parents=2),
        _commit(bad, author="dependabot[bot] <support@github.com>"),
        _commit("fixup! feat(cli): add it\n"),
        _commit("squash! feat(cli): add it\n"),
        _commit(GOOD),
    ]
    result = lint_messages(messages, OPTIONS)
    assert result.findings == ()
    assert result.checked == 1
    assert result.exempt == {"bot": 1, "fixup": 2, "merge": 1}
    assert exemption(_commit("fixup! x\n", pr_mode=True), OPTIONS) is None
    # A human whose name merely contains b, o or t is not a bot.
    assert exemption(_commit(bad, author="Tom <tom@example.org>"), OPTIONS) is None


def test_a_commit_exempt_before_it_is_read_is_counted_by_its_reason() -> None:
    # A range's merges and bot commits reach the rules as their reason alone, unparsed.
    result = lint_messages(["merge", _commit("Update stuff\n"), "bot", "merge"], OPTIONS)
    assert result.checked == 1
    assert result.exempt == {"bot": 1, "merge": 2}
    assert [f.rule_id for f in result.findings] == ["WPG101", "WPG104", "WPG105", "WPG107"]


def test_screened_messages_are_checked_without_asking_their_exemption_again() -> None:
    # A range's reader asks exemption() of each commit itself, once, and passes only the
    # reason of an exempt one; screened, the rules run on every message item they are given.
    fixup = _commit("fixup! feat: x\n")
    assert message_exemption(fixup, OPTIONS) == exemption(fixup, OPTIONS) == "fixup"
    merge = _commit("Update stuff\n", parents=2)
    assert (message_exemption(merge, OPTIONS), exemption(merge, OPTIONS)) == (None, "merge")
    asked = lint_messages([fixup, merge], OPTIONS)
    assert (asked.checked, asked.exempt, asked.findings) == (0, {"fixup": 1, "merge": 1}, ())
    screened = lint_messages(["fixup", merge], OPTIONS, screened=True)
    assert (screened.checked, screened.exempt) == (1, {"fixup": 1})
    assert [f.rule_id for f in screened.findings] == ["WPG101", "WPG104", "WPG105", "WPG107"]


def test_options_from_section_errors_name_the_key() -> None:
    assert TrailerOptions.from_section({"types": ["feat"], "max_subject_length": 50}) == (
        TrailerOptions(types=("feat",), max_subject_length=50)
    )
    cases = {
        "types": ("feat", "tool.wpgate.trailers.types"),
        "max_subject_length": (0, "tool.wpgate.trailers.max_subject_length"),
        "signoff_matches_author": ("yes", "tool.wpgate.trailers.signoff_matches_author"),
        "bot_authors": (["[bot"], "tool.wpgate.trailers.bot_authors"),
        "required": (["Reviewed-by"], "tool.wpgate.trailers.required"),
        "colour": ("red", "tool.wpgate.trailers.colour"),
    }
    for key, (value, where) in cases.items():
        with pytest.raises(ConfigError) as error:
            TrailerOptions.from_section({key: value})
        assert error.value.key == where
