"""Tests for the commit-message parser: git as an oracle, exact records, properties."""

from __future__ import annotations

import gc
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from wpgate._commits import differences_from_git
from wpgate._git import parse_range, parse_reading_settings, reading_settings
from wpgate.trailers import (
    DEFAULT_SYNTAX,
    Trailer,
    TrailerSyntax,
    _parse_general,
    _parse_plain,
    decode_message,
    parse_message,
    parse_trailers,
)

GOOD = """feat(cli): add the trailers command

Lints commit messages.

WP: 004
Provenance: R20 §2, R21
Gate: tests/wpgate/test_cli.py::test_trailers
"""

# Messages whose trailer block is hard to find; `git interpret-trailers --parse` is the judge.
ORACLE_CORPUS = [
    GOOD,
    "subject only\n",
    "subject\n\nWP: 004\n",
    "WP: 004\n",
    "subject\nWP: 004\n",
    "subject\n\nbody\n\nKey: value\n  continued here\n\tand here\nOther: x\n",
    "subject\n\nKey: value\n---\nNot: a trailer\n",
    "subject\n\nKey: value\n--- a/file\n+++ b/file\nX: y\n",
    "subject\n\nKey: value\n---",
    "subject\n\nKey: value\n\n---\nA: b\n",
    "subject\n\nsome prose line\nKey: value\n",
    "subject\n\nprose one\nprose two\nprose three\nSigned-off-by: A <a@b.c>\n",
    "subject\n\nprose one\nprose two\nprose three\nprose four\nSigned-off-by: A <a@b.c>\n",
    "subject\n\nKey: v\n# a comment: here\nOther: w\n",
    "subject\n\nKey: v\n\n# Please enter the commit message\n#\n",
    "subject\r\n\r\nKey: value\r\n continued\r\nOther: x\r\n",
    "subject\r\n\r\nbody\r\n\r\nKey: value\r\n",
    "subject\n\nKey: v\n# ------------------------ >8 ------------------------\nA: b\n",
    "subject\n\nbody\n\nKey: v\nConflicts:\n\tsrc/a.py\n",
    "subject\n\nKey : spaced\nKey\t: tabbed\nbad key: no\n",
    "subject\n\n  indented: not a key\nKey: v\n",
    "subject\n\nKey: v\n  \n",
    "subject\n\n\n\nKey:\nEmpty:   \n",
    "subject\n\n(cherry picked from commit abc)\nprose\n",
    "subject\n\nKey: v\n\n\n",
    "",
    "\n\n\n",
    "subject\n\nbody\n \nKey: v\n",
    "subject\n\nKey: ünïcödé välue\nSchlüssel: x\n",
]


def _git_parse(text: str) -> list[str]:
    """Trailers as `git interpret-trailers --parse` prints them."""
    out = subprocess.run(
        ["git", "-c", "core.commentChar=#", "interpret-trailers", "--parse"],
        input=text.encode(),
        capture_output=True,
        check=True,
    ).stdout.decode()
    # split("\n"), not splitlines(): a folded CRLF value keeps its "\r" in git's output.
    return out.split("\n")[:-1]


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
@pytest.mark.parametrize("text", ORACLE_CORPUS)
def test_parse_matches_git_interpret_trailers(text: str) -> None:
    ours = [f"{t.key}: {t.value}" for t in parse_trailers(text)]
    assert ours == _git_parse(text)


def test_url_is_not_a_trailer() -> None:
    # The spec's one deliberate difference from git 2.39, which would call `http` a key; the
    # line still counts towards the block, as in git, so `WP: 004` is found by both.
    assert parse_trailers("subject\n\nhttp://example.com\nWP: 004\n") == (Trailer("WP", "004", 4),)
    assert _git_parse("subject\n\nhttp://example.com\nWP: 004\n") == [
        "http: //example.com",
        "WP: 004",
    ]
    assert parse_trailers("subject\n\nprose\nmore prose\nhttp://x\n") == ()
    assert parse_trailers("subject\n\nWP: 004\n") == (Trailer("WP", "004", 3),)


def test_exact_records_with_lines() -> None:
    message = parse_message(GOOD)
    assert message.subject == "feat(cli): add the trailers command"
    assert message.subject_line == 1
    assert message.trailers == (
        Trailer("WP", "004", 5),
        Trailer("Provenance", "R20 §2, R21", 6),
        Trailer("Gate", "tests/wpgate/test_cli.py::test_trailers", 7),
    )
    assert message.values("wp") == (Trailer("WP", "004", 5),)


def test_commit_msg_cleanup_drops_comments_and_scissors() -> None:
    text = (
        "# leading comment\nfix: x\n\n# note\nWP: 004\n"
        "# ------------------------ >8 ------------------------\ndiff --git a b\nGate: t.py\n"
    )
    message = parse_message(text, cleanup=True)
    assert message.subject == "fix: x"
    assert message.subject_line == 2
    assert message.trailers == (Trailer("WP", "004", 5),)
    assert [line for _, line in message.text_lines()] == ["fix: x", "", "WP: 004"]


def test_comment_char_is_configurable() -> None:
    text = "fix: x\n\n; note: here\nWP: 004\n"
    assert parse_message(text, comment_char=";", cleanup=True).trailers == (
        Trailer("WP", "004", 4),
    )


def test_invalid_utf8_reports_the_line() -> None:
    decoded = decode_message(b"fix: x\n\nbad \xff byte\n")
    assert decoded.error_line == 3
    assert "\ufffd" in decoded.text
    assert decode_message("fix: ü\n".encode()).error_line is None


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_arbitrary_text_never_raises(text: str) -> None:
    message = parse_message(text, cleanup=True)
    assert all(t.line >= 1 for t in message.trailers)
    parse_message(text, comment_char=None)


@settings(max_examples=200, deadline=None)
@given(st.binary())
def test_arbitrary_bytes_never_raise(data: bytes) -> None:
    decoded = decode_message(data)
    parse_message(decoded.text, encoding_error_line=decoded.error_line)


_LINE = st.sampled_from(
    ["", " ", "  cont", "Key: v", "# c", "---", "prose words", "Signed-off-by: A <a@b>", "\r"]
)


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
@settings(max_examples=60, deadline=None)
@given(st.lists(_LINE, max_size=12), st.sampled_from(["\n", "\r\n"]))
def test_generated_messages_match_git(lines: list[str], eol: str) -> None:
    text = "subject" + eol + eol + eol.join(lines) + eol
    assert [f"{t.key}: {t.value}" for t in parse_trailers(text)] == _git_parse(text)


MIB = 1 << 20
BODY = "A paragraph of prose that explains the change and why it was made.\n"
# Realistic shapes of a 1 MiB message: each must take work linear in its length.
LARGE_SHAPES = {
    "prose": "fix: x\n\n" + BODY * (MIB // len(BODY)) + "\nWP: 004\nGate: t.py\n",
    "paragraphs": "fix: x\n\n" + (BODY * 4 + "\n") * (MIB // (4 * len(BODY) + 1)),
    "newlines": "\n" * MIB,
    "one-line": "x" * MIB,
    "dashes": "---\n" * (MIB // 4),
    "log-paste": "fix: x\n\n" + ("    at frame (file.py:12)\n" * (MIB // 27)) + "\nWP: 004\n",
}
# Adversarial shapes: every line is a trailer, a continuation or a comment. These are bound to
# be linear too: four times the text may make at most four times the calls.
ADVERSARIAL_SHAPES = {
    "trailers": "fix: x\n\n" + "Key: value\n" * (MIB // 11),
    "continuations": "fix: x\n\nKey: v\n" + " c\n" * (MIB // 3),
    "comments": "fix: x\n\n" + "#\n" * (MIB // 2),
    "prose-then-trailer": "fix: x\n\n" + "word\n" * (MIB // 5) + "Key: v\n",
    "leading-comments": "#\n" * (MIB // 2) + "fix: x\n",
}


@pytest.mark.slow  # parses megabyte inputs under a profiler (make test-fast skips it)
@pytest.mark.parametrize("shape", sorted({**LARGE_SHAPES, **ADVERSARIAL_SHAPES}))
def test_one_mebibyte_parses_fast(shape: str) -> None:
    """Four times the text costs at most four times the function calls (plus a constant).

    Counted, not timed: the count is the same on any machine and under any load, so the bound
    can be exact. A parser that rescans earlier lines per line shows up as a ratio near 16.
    """
    text = {**LARGE_SHAPES, **ADVERSARIAL_SHAPES}[shape]
    assert len(text) >= 0.95 * MIB
    quarter = text[: len(text) // 4]
    small, large = _calls(quarter), _calls(text)
    assert large <= 4 * small + 64, f"{shape}: {small} calls -> {large} calls"


@pytest.mark.slow  # times megabyte inputs (make test-fast skips it)
@pytest.mark.parametrize("shape", sorted(ADVERSARIAL_SHAPES))
def test_adversarial_shapes_are_linear(shape: str) -> None:
    """Sixteen times the text takes far less than 256 times as long (quadratic would).

    Both sizes are timed in this one run, best of seven, so a slow or busy machine slows both;
    the bound (100 times, where linear work measures about 16 to 25) leaves room for caches
    and noise while still failing work that is quadratic in the C code the call count misses.
    """
    text = ADVERSARIAL_SHAPES[shape]
    piece = text[: len(text) // 16]
    small = min(_timed(piece) for _ in range(7))
    large = min(_timed(text) for _ in range(7))
    assert large < 100 * small, f"{shape}: {small * 1e3:.2f} ms -> {large * 1e3:.2f} ms"


def _calls(text: str) -> int:
    """The Python and C function calls one commit-msg parse of ``text`` makes."""
    count = 0

    def profile(_frame: object, event: str, _arg: object) -> None:
        nonlocal count
        if event in ("call", "c_call"):
            count += 1

    sys.setprofile(profile)
    try:
        parse_message(text, cleanup=True)
    finally:
        sys.setprofile(None)
    return count


def _timed(text: str) -> float:
    """Seconds to parse ``text`` in commit-msg mode, with the cyclic collector paused.

    The scaling bound is about the parser's algorithm: a collection pass that the interpreter
    starts in the middle of a parse of 95,000 trailers scans every object then alive, and made
    one run take ten times its quarter-size run (seen in CI-like conditions). Range linting
    pauses the collector the same way (``wpgate._commits``).
    """
    gc.collect()
    gc.disable()
    try:
        start = time.perf_counter()
        parse_message(text, cleanup=True)
        return time.perf_counter() - start
    finally:
        gc.enable()


_PLAIN_LINE = st.sampled_from(
    [
        "Key: v",
        "Signed-off-by: A <a@b>",
        "(cherry picked from commit 1)",
        "prose",
        "a:b",
        "Conflicts:",
    ]
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_PLAIN_LINE, min_size=1, max_size=8), st.booleans())
def test_plain_fast_path_agrees_with_the_general_algorithm(lines: list[str], cleanup: bool) -> None:
    text = "feat: x\n\nbody\n\n" + "\n".join(lines) + "\n"
    core = text.rstrip("\n")
    fast = _parse_plain(core, "#", "#" if cleanup else None, None)
    # A last line "Conflicts:" is git's old conflict list (ignored): the general path handles it.
    assert (fast is None) == (lines[-1] == "Conflicts:")
    assume(fast is not None)
    assert fast == _parse_general(text, core, "#", cleanup, None)


# Lines a generated history draws from: dividers, patch headers, URLs, comments, continuations,
# git-generated trailers, CRs and prose, in every order.
_HISTORY_LINES = [
    "",
    "---",
    "--- a/file.py",
    "Key: value",
    "Other-Key : spaced",
    "  continued",
    "\tcontinued",
    "# comment: here",
    "prose words",
    "Signed-off-by: A U Thor <a@example.org>",
    "(cherry picked from commit 0123abc)",
    "Conflicts:",
    "See: https://example.org/x",
    "https://example.org/y",
    "Key:",
    "WP: 004\r",
    "# ------------------------ >8 ------------------------",
]


def _generated_messages(count: int, seed: int = 18) -> list[bytes]:
    """Commit messages for a history: the oracle corpus, then ``count`` random ones."""
    rng = random.Random(seed)
    messages = [text.encode() for text in ORACLE_CORPUS]
    messages.append(b"fix: x\n\nBody\n\nWP: 001\0\nGate: t.py\n")  # git stops at the NUL
    messages.append(b"fix: y\n\nbody\n\nWP: 001\n---\nnotes\n")  # above a divider: no block
    messages.append(b"fix: z\n\nbody\n---\nWP: 001\nGate: t.py\n")  # below it: a block to git
    for _ in range(count):
        lines = [rng.choice(_HISTORY_LINES) for _ in range(rng.randint(0, 10))]
        messages.append(("subject\n\n" + "\n".join(lines) + "\n").encode())
    return messages


def _history(root: Path, messages: list[bytes]) -> None:
    """One commit per message on main, written verbatim by `git fast-import`."""
    subprocess.run(["git", "init", "-q", "-b", "main", str(root)], check=True)
    chunks = []
    for index, message in enumerate(messages, 1):
        chunks.append(b"commit refs/heads/main\nmark :%d\n" % index)
        chunks.append(b"committer T <t@example.org> %d +0000\n" % (1_700_000_000 + index))
        chunks.append(b"data %d\n%s\n" % (len(message), message))
        if index > 1:
            chunks.append(b"from :%d\n" % (index - 1))
    subprocess.run(
        ["git", "-C", str(root), "fast-import", "--quiet"], input=b"".join(chunks), check=True
    )


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_stored_messages_parse_as_git_log_reads_them(tmp_path: Path) -> None:
    messages = _generated_messages(400)
    _history(tmp_path / "repo", messages)
    count, differ = differences_from_git(tmp_path / "repo", parse_range("main"))
    assert count == len(messages)
    assert differ == []


def test_divider_applies_only_to_patch_mode() -> None:
    above = "fix: y\n\nbody\n\nWP: 001\n---\nnotes\n"
    below = "fix: z\n\nbody\n---\nWP: 001\nGate: t.py\n"
    assert parse_message(above).trailers == ()
    assert [t.key for t in parse_trailers(above)] == ["WP"]  # git interpret-trailers: a patch
    assert parse_message(below).trailers == ()  # one paragraph, mostly prose, as git log sees it
    assert parse_message(below, divider=True).trailers == ()


def test_nul_ends_the_message() -> None:
    decoded = decode_message(b"fix: x\n\nWP: 001\0\nGate: t.py\n")
    assert (decoded.text, decoded.nul_line) == ("fix: x\n\nWP: 001", 3)
    message = parse_message("fix: x\n\nWP: 001\0\nGate: t.py\n")
    assert [t.key for t in message.trailers] == ["WP"]
    assert message.nul_line == 3


# git's reading with configuration, case by case as git-interpret-trailers(1) documents it
# (`trailer.separators`, `trailer.<key-alias>.key`, "user-configured trailers" counting as
# git-generated ones) and the commit readers' own rules (blank lines before the title skipped;
# `Conflicts:` ignored only as a whole line with its newline). Each is checked against the git
# binary, both as `git interpret-trailers --parse` reads a file and as `git log` reads a commit.
_ACK = ("-c", "trailer.ack.key=Acked-by")
_PERCENT = ("-c", "trailer.separators=%=")
FIDELITY_CASES: list[tuple[str, tuple[str, ...], TrailerSyntax, str]] = [
    ("blank-lines-before-title", (), DEFAULT_SYNTAX, "\n\nKey: v\n"),
    ("spaces-before-title", (), DEFAULT_SYNTAX, "  \n\ntitle\n\nKey: v\n"),
    ("blank-lines-then-title-block", (), DEFAULT_SYNTAX, "\n\ntitle\n\nKey: v\n\nA: b\n"),
    ("final-conflicts-unterminated", (), DEFAULT_SYNTAX, "title\n\nKey: v\nConflicts:"),
    ("final-conflicts-terminated", (), DEFAULT_SYNTAX, "title\n\nKey: v\nConflicts:\n"),
    ("conflicts-block-unterminated", (), DEFAULT_SYNTAX, "t\n\nKey: v\nConflicts:\n\ta.c"),
    ("separators-percent", _PERCENT, TrailerSyntax("%="), "title\n\nKey% v\nA = b\n"),
    ("separators-drop-colon", _PERCENT, TrailerSyntax("%="), "title\n\nKey: v\n"),
    ("separators-mixed", _PERCENT, TrailerSyntax("%="), "title\n\nKey% v\nA: b\n"),
    ("separators-empty", ("-c", "trailer.separators="), TrailerSyntax(""), "t\n\nKey: v\n"),
    (
        "alias-replaced-by-key",
        _ACK,
        TrailerSyntax(":", (("ack", "Acked-by"),)),
        "title\n\nack: x\nACK : y\nacked: z\nAcked-by-me: w\n",
    ),
    (
        "configured-key-is-recognized",
        _ACK,
        TrailerSyntax(":", (("ack", "Acked-by"),)),
        "title\n\nAcked-by: x\nprose\nprose\nprose\n",
    ),
    (
        "alias-with-spaces-is-not-recognized",
        _ACK,
        TrailerSyntax(":", (("ack", "Acked-by"),)),
        "title\n\nack : x\nprose\nprose\nprose\n",
    ),
    (
        "alias-without-key-is-recognized",
        ("-c", "trailer.sob.command=true"),
        TrailerSyntax(":", (("sob", None),)),
        "title\n\nsob: x\nprose\nprose\nprose\n",
    ),
    (
        "first-configured-alias-wins",
        (*_ACK, "-c", "trailer.acc.key=Accepted"),
        TrailerSyntax(":", (("ack", "Acked-by"), ("acc", "Accepted"))),
        "title\n\nAc: x\nacc: y\n",
    ),
    (
        "key-ending-in-a-separator",
        (*_PERCENT, "-c", "trailer.ack.key=Acked-by%"),
        TrailerSyntax("%=", (("ack", "Acked-by%"),)),
        "title\n\nack= x\nprose\nprose\nprose\n",
    ),
]


def _config_args(case: tuple[str, tuple[str, ...], TrailerSyntax, str]) -> list[str]:
    return ["git", "-c", "core.commentChar=#", *case[1]]


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
@pytest.mark.parametrize("case", FIDELITY_CASES, ids=[case[0] for case in FIDELITY_CASES])
def test_configured_reading_matches_git_interpret_trailers(
    case: tuple[str, tuple[str, ...], TrailerSyntax, str],
) -> None:
    _name, _args, syntax, text = case
    done = subprocess.run(
        [*_config_args(case), "interpret-trailers", "--parse", "--no-divider"],
        input=text.encode(),
        capture_output=True,
        check=True,
    )
    # --parse writes `key<first separator> value`, or `keyvalue` when the key ends in one.
    sep = syntax.separators[:1] or ":"
    ours = [
        f"{t.key}{t.value}" if t.key[-1:] in syntax.separators else f"{t.key}{sep} {t.value}"
        for t in parse_trailers(text, divider=False, syntax=syntax)
    ]
    assert ours == done.stdout.decode().split("\n")[:-1]


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_configured_reading_matches_git_log(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    _history(root, [case[3].encode() for case in FIDELITY_CASES])
    fmt = "--format=%(trailers:only,unfold,separator=%x1d,key_value_separator=%x1c)%x1e"
    differ = []
    for index, case in enumerate(FIDELITY_CASES):
        revision = f"main~{len(FIDELITY_CASES) - 1 - index}"
        done = subprocess.run(
            [*_config_args(case), "-C", str(root), "log", "-1", fmt, revision],
            capture_output=True,
            check=True,
        )
        block = done.stdout.decode().strip("\n\x1e")
        theirs = [tuple(item.split("\x1c", 1)) for item in block.split("\x1d") if item]
        ours = [(t.key, t.value) for t in parse_message(case[3], syntax=case[2]).trailers]
        if ours != theirs:
            differ.append((case[0], ours, theirs))
    assert differ == []


def test_leading_blank_lines_are_skipped_only_for_commits() -> None:
    text = "\n\nKey: v\n"
    assert parse_message(text).trailers == ()  # git log: "Key: v" is the title
    assert [t.key for t in parse_trailers(text, divider=False)] == ["Key"]  # a file: a block
    message = parse_message("\n \ntitle\n\nKey: v\n")
    assert (message.subject, message.subject_line) == ("title", 3)
    assert [(t.key, t.line) for t in message.trailers] == [("Key", 5)]


def test_reading_settings_parse_git_config_output() -> None:
    output = (
        b"core.commentchar\n;\0trailer.separators\n%=\0trailer.ack.where\nend\0"
        b"trailer.Sob.key\nSigned-off-by\0trailer.ack.key\nAcked\0trailer.ack.key\nAcked-by\0"
        b"trailer.a.b.cmd\ntrue\0"
    )
    assert parse_reading_settings(output) == (
        ";",
        TrailerSyntax("%=", (("ack", "Acked-by"), ("Sob", "Signed-off-by"), ("a.b", None))),
    )
    assert parse_reading_settings(b"") == ("#", DEFAULT_SYNTAX)
    assert parse_reading_settings(b"core.commentchar\nauto\0") == ("#", DEFAULT_SYNTAX)


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_a_repository_configuration_is_read_and_matches_git_log(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    _history(root, [case[3].encode() for case in FIDELITY_CASES[6:]])
    for key, value in (
        ("trailer.separators", "%=:"),
        ("trailer.ack.key", "Acked-by"),
        ("trailer.sob.command", "true"),
    ):
        subprocess.run(["git", "-C", str(root), "config", key, value], check=True)
    assert reading_settings(root) == (
        "#",
        TrailerSyntax("%=:", (("ack", "Acked-by"), ("sob", None))),
    )
    count, differ = differences_from_git(root, parse_range("main"))
    assert (count, differ) == (len(FIDELITY_CASES) - 6, [])
    assert reading_settings(tmp_path) == ("#", DEFAULT_SYNTAX)  # no repository: defaults


def test_the_index_of_a_trailer_block_groups_a_repeated_key_in_message_order() -> None:
    # The common reading builds the trailers and their index in one loop; a key seen twice
    # (in any case) groups its trailers, and a URL line is in neither.
    message = parse_message("fix: x\n\nBody.\n\nWP: 004\nGate: a\nwp: 005\nSee://x\nGATE: b\n")
    assert message.trailers == (
        Trailer("WP", "004", 5),
        Trailer("Gate", "a", 6),
        Trailer("wp", "005", 7),
        Trailer("GATE", "b", 9),
    )
    assert dict(message.by_key) == {
        "wp": (Trailer("WP", "004", 5), Trailer("wp", "005", 7)),
        "gate": (Trailer("Gate", "a", 6), Trailer("GATE", "b", 9)),
    }
    single = parse_message("fix: x\n\nWP: 004\nSee://x\n")
    assert dict(single.by_key) == {"wp": (Trailer("WP", "004", 3),)}


def test_a_repeated_last_paragraph_is_numbered_where_each_message_has_it() -> None:
    # Each distinct last paragraph is matched once per run: its trailers' lines still come from
    # the message that holds it, and a URL line still counts.
    block = "See://x\nSigned-off-by: A <a@e.org>\nwp: 004"
    short = parse_message(f"fix: x\n\n{block}\n")
    long = parse_message(f"fix: y\n\nBody.\nMore.\n\n{block}\n")
    assert short.trailers == (Trailer("Signed-off-by", "A <a@e.org>", 4), Trailer("wp", "004", 5))
    assert long.trailers == (Trailer("Signed-off-by", "A <a@e.org>", 7), Trailer("wp", "004", 8))
    assert dict(long.by_key) == {
        "signed-off-by": (Trailer("Signed-off-by", "A <a@e.org>", 7),),
        "wp": (Trailer("wp", "004", 8),),
    }
    mixed = "Not a trailer\nSigned-off-by: A <a@e.org>"
    assert parse_message(f"fix: z\n\n{mixed}\n").trailers == (
        Trailer("Signed-off-by", "A <a@e.org>", 4),
    )
    assert parse_message(f"fix: z\n\nText.\n\n{mixed}\n").trailers == (
        Trailer("Signed-off-by", "A <a@e.org>", 6),
    )


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_a_configured_key_ending_in_a_separator_reads_as_git_log_shows_it(tmp_path: Path) -> None:
    # git 2.39 reads `Ref=x` under `trailer.ref.key = Ref=` as key `Ref=`, value `x` both
    # ways, but prints it differently: `git log --format=%(trailers)` writes `Ref=: x` (key,
    # ": ", value), `git interpret-trailers --parse` writes `Ref=x` (no separator after a key
    # that ends in one) and `Key= y` (its first separator). wpgate follows git log, for a range
    # and for a message file alike: the commit-msg hook reads what git log will show.
    root = tmp_path / "repo"
    message = "title\n\nRef=x\nKey=y\n"
    _history(root, [message.encode()])
    for key, value in (("trailer.separators", "="), ("trailer.ref.key", "Ref=")):
        subprocess.run(["git", "-C", str(root), "config", key, value], check=True)

    def git(*args: str, stdin: str | None = None) -> str:
        done = subprocess.run(
            ["git", "-C", str(root), *args],
            input=stdin,
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert git("log", "-1", "--format=%(trailers:only,unfold)") == "Ref=: x\nKey: y\n\n"
    assert git("interpret-trailers", "--parse", stdin=message) == "Ref=x\nKey= y\n"
    pairs = git(
        "log", "-1", "--format=%(trailers:only,unfold,separator=%x1d,key_value_separator=%x1c)"
    )
    theirs = [tuple(item.split("\x1c", 1)) for item in pairs.strip("\n").split("\x1d")]
    assert theirs == [("Ref=", "x"), ("Key", "y")]
    _comment, syntax = reading_settings(root)
    ours = [(t.key, t.value) for t in parse_message(message, syntax=syntax).trailers]
    assert ours == theirs  # the message file, as the commit-msg hook reads it
    assert differences_from_git(root, parse_range("main")) == (1, [])  # the range


# Python memory of reading one huge all-trailer last paragraph, per byte of the message: about
# 30 after the change (one Trailer record, its strings, its line and its index entry per line of
# ~25 bytes), 35 before it. The bound leaves room for allocator and version differences.
_PEAK_PER_BYTE = 40


def test_a_huge_trailer_paragraph_is_read_without_copies_and_not_kept() -> None:
    import tracemalloc

    lines = [f"Key-{index}: value {index}" for index in range(40_000)]
    text = "fix: title\n\n" + "\n".join(lines) + "\n"
    gc.collect()
    tracemalloc.start()
    try:
        message = parse_message(text)
        assert len(message.trailers) == len(lines)
        assert message.trailers[-1] == Trailer("Key-39999", "value 39999", len(lines) + 2)
        _, peak = tracemalloc.get_traced_memory()
        del message
        gc.collect()
        left, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak / len(text) <= _PEAK_PER_BYTE
    # The paragraph cache (meant for the sign-off blocks a history repeats) keeps neither the
    # paragraph nor its trailers once the message is gone.
    assert left / len(text) < 1
