"""Tests for the `wpgate` command line: inputs, formats, exit codes and error messages."""

from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from git_helpers import git, governed_repository

from wpgate import __version__
from wpgate.cli import main

GOOD = b"""feat(cli): lint commit trailers

The linter reads the message the commit-msg hook passes.

WP: 004
Provenance: R7
Assumptions: A1
Gate: tests/test_gate.py::test_gate
"""
BAD = b"Update things.\n\nWP: 999\n"
PR_STATEMENT = b"\n\nClean-room acknowledged: only the git documentation was used.\n"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A repository with this project's governance documents and one ungoverned commit."""
    return governed_repository(tmp_path)


def run(root: Path, *args: str, stdin: bytes = b"") -> tuple[int, str, str]:
    """``main([... , --root root])`` with captured output: (status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    old = sys.stdin, sys.stdout, sys.stderr
    sys.stdin = io.TextIOWrapper(io.BytesIO(stdin))
    sys.stdout, sys.stderr = out, err
    try:
        status = main([*args, "--root", str(root)] if args and args[0] != "explain" else list(args))
    finally:
        sys.stdin, sys.stdout, sys.stderr = old
    return status, out.getvalue(), err.getvalue()


def _run_bytes(argv: list[str], stdin: bytes) -> tuple[int, bytes, bytes]:
    """``main(argv)`` with the standard streams as UTF-8 text files over bytes, as a process
    has them: (status, stdout, stderr)."""
    out, err = io.BytesIO(), io.BytesIO()
    streams = [io.TextIOWrapper(b, encoding="utf-8", write_through=True) for b in (out, err)]
    old = sys.stdin, sys.stdout, sys.stderr
    sys.stdin = io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8")
    sys.stdout, sys.stderr = streams
    try:
        status = main(argv)
    finally:
        sys.stdin, sys.stdout, sys.stderr = old
    return status, out.getvalue(), err.getvalue()


def message_file(root: Path, data: bytes) -> str:
    path = root / ".git" / "COMMIT_EDITMSG"
    path.write_bytes(data)
    return str(path)


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"wpgate, version {__version__}\n"


def test_no_arguments_print_the_usage_with_no_traceback() -> None:
    status, out, err = _run_bytes([], b"")
    assert status == 2
    assert b"Usage: wpgate" in out + err
    assert b"Traceback" not in out + err
    assert b"Error" not in out + err


def test_the_cli_reads_package_metadata_only_for_version() -> None:
    # The commit-msg hook imports the CLI on every commit; importlib.metadata costs tens of ms.
    code = "import sys, wpgate.cli; print('importlib.metadata' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def test_unknown_module_attribute_is_an_attribute_error() -> None:
    import wpgate

    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = wpgate.nope


def test_module_entry_point() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "wpgate", "--version"], capture_output=True, text=True, check=False
    )
    assert (done.returncode, done.stdout) == (0, f"wpgate, version {__version__}\n")


def test_good_message_file_passes(repo: Path) -> None:
    status, out, _ = run(repo, "trailers", message_file(repo, GOOD))
    assert status == 0
    assert out == "trailers: 1 message checked; 0 findings\n"


def test_bad_message_file_fails_with_fixes(repo: Path) -> None:
    path = message_file(repo, BAD)
    status, out, _ = run(repo, "trailers", path)
    assert status == 1
    lines = out.splitlines()
    assert [line.split(" ", 2)[:2] for line in lines[:-1]] == [
        [f"{path}:1:", "WPG101"],
        [f"{path}:1:", "WPG103"],
        [f"{path}:3:", "WPG104"],
        [f"{path}:3:", "WPG105"],
        [f"{path}:3:", "WPG107"],
    ]
    assert lines[-1] == "trailers: 1 message checked; 5 findings"


def test_commit_msg_cleanup(repo: Path) -> None:
    scissors = b"# " + b"-" * 24 + b" >8 " + b"-" * 24 + b"\n"
    editor = GOOD + b"# Please enter the commit message.\n" + scissors + b"WP: oops\n"
    assert run(repo, "trailers", message_file(repo, b"# comment\n" + editor))[0] == 0


def test_stdin(repo: Path) -> None:
    status, out, _ = run(repo, "trailers", "-", stdin=BAD)
    assert status == 1
    assert out.startswith("<stdin>:1: WPG101 ")


def test_invalid_utf8_is_a_finding(repo: Path) -> None:
    status, out, _ = run(repo, "trailers", "-", stdin=GOOD.replace(b"reads", b"re\xffads"))
    assert status == 1
    assert out.startswith("<stdin>:3: WPG100 the message is not valid UTF-8")


def test_merge_in_progress_is_exempt(repo: Path) -> None:
    (repo / ".git" / "MERGE_HEAD").write_text(git(repo, "rev-parse", "HEAD") + "\n")
    status, out, _ = run(repo, "trailers", message_file(repo, b"Merge branch 'x'\n"))
    assert (status, out) == (0, "trailers: 0 messages checked, 1 exempt (merge 1); 0 findings\n")


def test_range_json_and_github(repo: Path) -> None:
    start = git(repo, "rev-parse", "HEAD")
    for data in (GOOD, BAD, b"fixup! feat(cli): lint commit trailers\n"):
        git(repo, "commit", "-q", "--allow-empty", "-F", "-", data=data)
    bad_sha = git(repo, "rev-parse", "HEAD~1")[:12]
    (repo / "pyproject.toml").write_text("[tool.wpgate.trailers]\nfixup_exempt_in_history = true\n")
    status, out, _ = run(repo, "trailers", "--range", f"{start}..HEAD", "--format", "json")
    assert status == 1
    report = json.loads(out)
    assert {f["path"] for f in report["findings"]} == {bad_sha}
    assert report["summary"]["linters"][0] == {
        "linter": "trailers",
        "kind": "commit",
        "checked": 2,
        "exempt": {"fixup": 1},
    }
    status, out, _ = run(repo, "trailers", "--range", f"{start}..HEAD", "--format", "github")
    assert status == 1
    assert out.splitlines()[0].startswith(f"::error title=WPG101::commit {bad_sha}: ")


def test_pr_mode_requires_the_clean_room_statement(repo: Path) -> None:
    pr = GOOD.replace(b"\n\nWP:", PR_STATEMENT + b"\nWP:")
    assert run(repo, "trailers", "--pr", "-", stdin=pr)[0] == 0
    status, out, _ = run(repo, "trailers", "--pr", "-", stdin=GOOD)
    assert status == 1
    assert " WPG109 " in out
    # A fixup! title is not exempt in PR mode.
    status, out, _ = run(repo, "trailers", "--pr", "-", stdin=b"fixup! x" + pr[pr.index(b"\n") :])
    assert status == 1
    assert " WPG101 " in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "pass exactly one input"),
        (("-", "--range", "HEAD"), "pass exactly one input: a MESSAGE_FILE (or - for stdin)"),
        (("--range", "nope..HEAD"), "unknown revision `nope`; check the name"),
        (("--range", "HEAD..HEAD"), "contains no commits"),
        (("--history",), "--history needs `history_start`"),
        (("missing.txt",), "cannot read missing.txt"),
        (("--format", "xml", "-"), "Invalid value for '--format'"),
    ],
)
def test_usage_errors_exit_2(repo: Path, args: tuple[str, ...], message: str) -> None:
    status, out, err = run(repo, "trailers", *args)
    assert status == 2
    assert out == ""
    assert message in err


def test_config_error_exits_2_naming_the_key(repo: Path) -> None:
    (repo / "pyproject.toml").write_text("[tool.wpgate.trailers]\nmax_subject_length = 0\n")
    status, _, err = run(repo, "trailers", "-", stdin=GOOD)
    assert status == 2
    assert "tool.wpgate.trailers.max_subject_length: must be a positive integer" in err


def test_history_and_check_use_history_start(repo: Path) -> None:
    git(repo, "commit", "-q", "--allow-empty", "-F", "-", data=GOOD)
    first_governed = git(repo, "rev-parse", "HEAD")
    git(repo, "commit", "-q", "--allow-empty", "-F", "-", data=GOOD)
    (repo / "pyproject.toml").write_text(f'[tool.wpgate]\nhistory_start = "{first_governed}"\n')
    status, out, _ = run(repo, "trailers", "--history")
    assert (status, out) == (0, "trailers: 2 commits checked; 0 findings\n")
    # `check` runs every linter; only the trailer part is this test's business.
    _, out, _ = run(repo, "check", "--format", "json")
    report = json.loads(out)
    assert {"linter": "trailers", "kind": "commit", "checked": 2, "exempt": {}} in (
        report["summary"]["linters"]
    )
    assert not [f for f in report["findings"] if f["rule_id"].startswith("WPG1")]
    git(repo, "commit", "-q", "--allow-empty", "-F", "-", data=BAD)
    status, out, _ = run(repo, "check", "--format", "json")
    assert status == 1
    assert [f for f in json.loads(out)["findings"] if f["rule_id"] == "WPG101"]


def test_a_history_start_off_heads_history_is_warned_about(repo: Path) -> None:
    """A commit of another branch as history_start makes `start^..HEAD` a different set of
    commits; the run says so on stderr (found by an outside audit: it passed silently)."""
    git(repo, "commit", "-q", "--allow-empty", "-F", "-", data=GOOD)
    governed = git(repo, "rev-parse", "HEAD")
    git(repo, "checkout", "-q", "-b", "side")
    git(repo, "commit", "-q", "--allow-empty", "-F", "-", data=GOOD)
    side = git(repo, "rev-parse", "HEAD")
    git(repo, "checkout", "-q", "-")
    (repo / "pyproject.toml").write_text(f'[tool.wpgate]\nhistory_start = "{side}"\n')
    for command in (("trailers", "--history"), ("check",)):
        _, _, err = run(repo, *command)
        assert (
            f"wpgate: warning: [tool.wpgate] history_start in pyproject.toml names `{side}`, "
            "which is not an ancestor of HEAD"
        ) in err, command
    (repo / "pyproject.toml").write_text(f'[tool.wpgate]\nhistory_start = "{governed}"\n')
    _, _, err = run(repo, "trailers", "--history")
    assert "not an ancestor" not in err


def test_explain_refuses_a_rule_with_list() -> None:
    status, out, err = run(Path("."), "explain", "--list", "WPG104")
    assert (status, out) == (2, "")
    assert "--list lists every rule and 'WPG104' asks for one; pass either" in err


def test_explain() -> None:
    status, out, _ = run(Path("."), "explain", "WPG104")
    assert status == 0
    assert out.splitlines()[:2] == [
        "WPG104 wp-trailer",
        "  `WP:` appears exactly once: `NNN`, `NNNx` or `none`, and the package exists.",
    ]
    # The switch is written where either kind of file holds it (init writes a wpgate.toml).
    # Every value the switch takes, as TOML writes it.
    assert (
        '  switch: wp-trailer = true|false|"error"|"warning"|"off", in [rules] of wpgate.toml or '
        "[tool.wpgate.rules] of pyproject.toml"
    ) in out.splitlines()
    # The check's docstring writes reST literals; the reader sees Markdown code.
    assert (
        "  checks: `WP:` appears once and names a registered work package (or `none`)."
    ) in out.splitlines()
    assert run(Path("."), "explain", "gate-trailer")[1].startswith("WPG107 gate-trailer")
    listing = run(Path("."), "explain", "--list")[1]
    assert "WPG108  signed-off-by" in listing
    assert "(off by default)" in listing
    # The longest names keep two spaces before their summary, as every other does.
    long = next(line for line in listing.splitlines() if "provenance-first-use-history" in line)
    assert "provenance-first-use-history  first-use rows" in long
    status, _, err = run(Path("."), "explain", "WPG999")
    assert status == 2
    assert "unknown rule 'WPG999'" in err


def test_invalid_utf8_in_a_range_is_a_finding(repo: Path) -> None:
    start = git(repo, "rev-parse", "HEAD")
    tree = git(repo, "rev-parse", "HEAD^{tree}")
    ident = "Ada Lovelace <ada@example.org> 1760000000 +0000"
    header = f"tree {tree}\nparent {start}\nauthor {ident}\ncommitter {ident}\n\n".encode()
    body = GOOD.replace(b"reads", b"re\xffads")
    sha = git(repo, "hash-object", "-t", "commit", "-w", "--stdin", data=header + body)
    git(repo, "update-ref", "HEAD", sha)
    status, out, _ = run(repo, "trailers", "--range", f"{start}..HEAD")
    assert status == 1
    assert out.splitlines()[0].startswith(f"{sha[:12]}:3: WPG100 the message is not valid UTF-8")


# --------------------------------------------------------------------------- the audit (#18)
# One test per finding of the outside audit: bad input exits 2 (or is a finding) with a message
# that says what is wrong, never a traceback.


def test_range_endpoints_cannot_inject_options(repo: Path, tmp_path: Path) -> None:
    target = tmp_path / "pwned"
    status, out, err = run(repo, "trailers", "--range", f"--output={target}..HEAD")
    assert (status, out) == (2, "")
    assert "starts with `-`, so git would read it as an option" in err
    assert not target.exists()
    status, _, err = run(repo, "trailers", "--range=--all")
    assert status == 2
    assert "revision `--all` starts with `-`" in err
    status, _, err = run(repo, "trailers", "--range", "HEAD..--not")
    assert status == 2
    assert "range end `--not`" in err


def test_history_start_cannot_inject_an_option(repo: Path, tmp_path: Path) -> None:
    target = tmp_path / "pwned"
    (repo / "pyproject.toml").write_text(f'[tool.wpgate]\nhistory_start = "--output={target}"\n')
    for command in ("trailers --history", "check", "provenance"):
        status, _, err = run(repo, *command.split())
        assert status == 2, command
        assert "tool.wpgate.history_start: history_start `--output=" in err
    assert not target.exists()


class _OverBudget(BaseException):
    """Raised from the profiler to stop a run past its call budget (not an ``Exception``)."""


def _calls_of(action: Callable[[], object], budget: int | None) -> int:
    """The Python and C function calls ``action()`` makes; stops it past ``budget`` calls."""
    count = 0

    def profile(_frame: object, event: str, _arg: object) -> None:
        nonlocal count
        if event in ("call", "c_call"):
            count += 1
            if budget is not None and count > budget:
                raise _OverBudget

    sys.setprofile(profile)
    try:
        action()
    except _OverBudget:
        pass
    finally:
        sys.setprofile(None)
    return count


def test_alias_bomb_in_a_work_package_is_one_short_finding(repo: Path) -> None:
    levels = ['a0: &a0 ["tests/test_gate.py::test_gate", "x", "x", "x", "x", "x", "x", "x"]']
    levels += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 8)}]" for i in range(1, 10)]
    page = (
        '---\nid: "005"\ntitle: "t"\nphase: 1\nstatus: done\ndepends_on: []\n'
        + "\n".join(levels)
        + "\ngate: *a9\n---\n# WP-005\n"
    )
    assert len(page) < 2048
    plain = page.replace("gate: *a9", 'gate: ["tests/test_gate.py::test_gate"]')
    for level in levels:
        plain = plain.replace(level + "\n", "")
    wp_005 = repo / "docs/work_packages/wp-005.md"
    wp_005.write_text(plain, encoding="utf-8")
    baseline = _calls_of(lambda: run(repo, "wp"), budget=None)
    wp_005.write_text(page, encoding="utf-8")
    # Counted, not timed: expanding the nine levels is 8**9 nodes, far past the budget.
    budget = 2 * baseline + 100_000
    result: list[tuple[int, str, str]] = []
    calls = _calls_of(lambda: result.append(run(repo, "wp")), budget=budget)
    assert calls <= budget, f"{calls} calls for the alias bomb, {baseline} without it"
    status, out, err = result[0]
    assert (status, err) == (1, "")
    assert "docs/work_packages/wp-005.md:8: WPG301 the front matter uses a YAML alias" in out
    assert max(len(line) for line in out.splitlines()) < 1200


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ("[tool.wpgate.docs]\nclaims = 5", "tool.wpgate.docs.claims: must be a string or a list"),
        ("[tool.wpgate.docs]\nprovenance = []", "tool.wpgate.docs.provenance: must be a string"),
        (
            "[tool.wpgate.provenance]\nlicences = 3",
            "tool.wpgate.provenance.licences: must be a string or a list of strings, not 3 (int)",
        ),
        (
            '[tool.wpgate.provenance]\nhistory = "false"',
            "tool.wpgate.provenance.history: must be true or false, not 'false' (str)",
        ),
        ("[tool.wpgate.wp]\nextra_keys = [1]", "tool.wpgate.wp.extra_keys: must be a string or"),
        ("[tool.wpgate.wp]\nextra = []", "tool.wpgate.wp.extra: is not a known key"),
        ("[tool.wpgate.evidence]\ncollect = 1", "tool.wpgate.evidence.collect: must be true or"),
        ("[tool.wpgate.trailer]\ntypes = []", "tool.wpgate.trailer: is not a known setting or"),
        (
            "[tool.wpgate.trailers]\ntypes = []",
            "tool.wpgate.trailers.types: is empty, but needs at least one commit type; list "
            'them, or remove the key to use the default (["feat", "fix",',
        ),
        ("[tool.wpgate]\nhistory_start = 7", "tool.wpgate.history_start: must be a string"),
        ("[tool.wpgate.rules]\nWPG102 = 'loud'", "tool.wpgate.rules.WPG102: must be true, false"),
    ],
)
def test_wrong_config_types_exit_2_naming_key_and_type(repo: Path, toml: str, message: str) -> None:
    (repo / "pyproject.toml").write_text(toml + "\n", encoding="utf-8")
    for command in ("check", "provenance", "wp", "docs"):
        status, out, err = run(repo, command)
        assert (status, out) == (2, ""), command
        assert message in err
        assert "Traceback" not in err


@pytest.mark.parametrize(
    ("number", "message"),
    [
        ("9" * 5000, "an integer of 5000 digits"),
        ("NaN", "`NaN` is not a JSON number"),
        ("Infinity", "`Infinity` is not a JSON number"),
        ("-Infinity", "`-Infinity` is not a JSON number"),
        ("1e999", "is too large to be a measurement"),
    ],
)
def test_evidence_numbers_must_be_finite_and_sized(repo: Path, number: str, message: str) -> None:
    evidence = repo / "docs/evidence/e.json"
    evidence.parent.mkdir(parents=True)
    evidence.write_text(
        '{"schema": "wpgate-evidence/1", "environment": {}, "git_commit": null, "sources": {},'
        f' "results": {{"ms": {number}}}}}\n'
    )
    (repo / "docs/claim.md").write_text("[MEASURED] 5 ms ([e](evidence/e.json)).\n")
    status, out, err = run(repo, "evidence", "--no-git", "--no-collect")
    assert (status, err) == (1, "")
    line = next(line for line in out.splitlines() if line.startswith("docs/evidence/e.json:"))
    assert line.startswith("docs/evidence/e.json:1: WPG404 not a valid evidence file: ")
    assert message in line


HOW_TO_FIX_HISTORY_START = (
    "is not a commit git knows here (`git rev-parse --verify v9.9.9^{commit}` fails); set "
    "history_start to the first governed commit (its sha, from `git log --oneline`), or fetch "
    "that commit (`git fetch origin`; `git fetch --unshallow` in a shallow clone)\n"
)


@pytest.mark.parametrize(
    ("name", "text", "where"),
    [
        ("pyproject.toml", "[tool.wpgate]\n", "pyproject.toml: tool.wpgate.history_start"),
        ("wpgate.toml", "", "wpgate.toml: history_start"),
        (".wpgate.toml", "", ".wpgate.toml: history_start"),
    ],
)
@pytest.mark.parametrize(
    "command", [("trailers", "--history"), ("trailers", "--pushed"), ("check",)]
)
def test_unknown_history_start_names_its_file_and_how_to_fix_it(
    repo: Path, name: str, text: str, where: str, command: tuple[str, ...]
) -> None:
    (repo / name).write_text(f'{text}history_start = "v9.9.9"\n')
    status, out, err = run(repo, *command)
    assert (status, out) == (2, "")
    assert err == f"wpgate: error: {where}: `v9.9.9` {HOW_TO_FIX_HISTORY_START}"


def test_a_bad_range_is_not_blamed_on_history_start(repo: Path) -> None:
    (repo / "pyproject.toml").write_text('[tool.wpgate]\nhistory_start = "v9.9.9"\n')
    status, _, err = run(repo, "trailers", "--range", "nope..HEAD")
    assert status == 2
    assert err.startswith("wpgate: error: unknown revision `nope`;")


def test_shallow_clone_history_checks_exit_2(repo: Path, tmp_path: Path) -> None:
    for _ in range(2):
        git(repo, "commit", "-q", "--allow-empty", "-F", "-", data=GOOD)
    clone = tmp_path / "shallow"
    git(tmp_path, "clone", "-q", "--depth", "1", f"file://{repo}", str(clone))
    status, out, err = run(clone, "provenance", "--history")
    assert (status, out) == (2, "")
    assert "clone is shallow" in err
    # What turns the check on, and how to skip it, since a plain run may ask for it too.
    assert "on with history_start or [tool.wpgate.provenance] history" in err
    assert "`--no-history` skips it" in err
    assert "git fetch --unshallow" in err
    first = git(repo, "rev-list", "--max-parents=0", "HEAD")
    (clone / "pyproject.toml").write_text(f'[tool.wpgate]\nhistory_start = "{first}"\n')
    status, out, err = run(clone, "check")
    assert (status, out) == (2, "")
    assert "git fetch --unshallow" in err


def test_paths_of_a_sub_project_are_shown_from_the_folder_above_it(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run from the top of the work tree with a sub-project's --root, new-wp names the pages
    it wrote as the shell reaches them from there, not relative to the sub-project."""
    sub = repo / "services" / "api"
    sub.mkdir(parents=True)
    monkeypatch.chdir(repo)
    status, out, _ = run(sub, "new-wp", "001", "--title", "T", "--phase", "1")
    assert status == 0
    assert out.splitlines()
    assert all(line.startswith("services/api/docs/") for line in out.splitlines()), out
    assert (repo / out.splitlines()[-1]).is_file()


def test_a_four_digit_work_package_is_one_grammar(repo: Path) -> None:
    (repo / "docs/engineering").mkdir()
    (repo / "docs/engineering/phase-01.md").write_text("# Phase 1\n", encoding="utf-8")
    status, out, _ = run(repo, "new-wp", "1000", "--title", "Big", "--phase", "1")
    assert (status, out) == (0, "docs/work_packages/wp-1000.md\n")
    assert "wp-1000.md" not in run(repo, "wp")[1]  # the new page itself passes `wpgate wp`
    message = GOOD.replace(b"WP: 004", b"WP: 1000")
    assert run(repo, "trailers", message_file(repo, message))[:2] == (
        0,
        "trailers: 1 message checked; 0 findings\n",
    )
    status, _, err = run(repo, "new-wp", "12", "--title", "Small", "--phase", "1")
    assert status == 2
    assert "three or more digits" in err


def test_git_revert_messages_are_exempt_like_merges(repo: Path) -> None:
    start = git(repo, "rev-parse", "HEAD")
    (repo / "f.txt").write_text("x\n")
    git(repo, "add", "f.txt")
    git(repo, "commit", "-q", "-F", "-", data=GOOD)
    git(repo, "revert", "--no-edit", "HEAD")
    status, out, _ = run(repo, "trailers", "--range", f"{start}..HEAD")
    assert (status, out) == (0, "trailers: 1 commit checked, 1 exempt (revert 1); 0 findings\n")
    (repo / "pyproject.toml").write_text("[tool.wpgate.trailers]\nrevert_exempt = false\n")
    status, out, _ = run(repo, "trailers", "--range", f"{start}..HEAD")
    assert status == 1
    assert {line.split()[1] for line in out.splitlines()[:-1]} == {
        "WPG101",
        "WPG104",
        "WPG105",
        "WPG107",
    }


def test_a_made_up_revert_message_is_checked_in_the_hook_too(repo: Path) -> None:
    """A helper's finding: from stdin or the commit-msg hook a revert was exempt without asking
    git for the commit it names, so `This reverts commit 000...` skipped every rule there."""
    made_up = b'Revert "x"\n\nThis reverts commit ' + b"0" * 40 + b".\n"
    status, out, _ = run(repo, "trailers", message_file(repo, made_up))
    assert status == 1
    assert out.splitlines()[-1] == "trailers: 1 message checked; 4 findings"
    real = f'Revert "x"\n\nThis reverts commit {git(repo, "rev-parse", "HEAD")}.\n'.encode()
    status, out, _ = run(repo, "trailers", message_file(repo, real))
    assert (status, out) == (0, "trailers: 0 messages checked, 1 exempt (revert 1); 0 findings\n")


def test_a_revert_of_a_commit_past_a_shallow_clones_edge_exits_2(
    repo: Path, tmp_path: Path
) -> None:
    """An audit: in a clone too shallow to hold the reverted commit, a real revert was linted
    as any commit (WPG101...) where the full clone exempts it: a wrong answer, not a partial
    one. It is refused with the fetch hint, as other shallow answers are."""
    (repo / "f.txt").write_text("x\n")
    git(repo, "add", "f.txt")
    git(repo, "commit", "-q", "-F", "-", data=GOOD)
    git(repo, "commit", "-q", "--allow-empty", "-F", "-", data=GOOD)
    git(repo, "revert", "--no-edit", "HEAD~1")
    clone = tmp_path / "shallow"
    git(tmp_path, "clone", "-q", "--depth", "2", f"file://{repo}", str(clone))
    status, out, err = run(clone, "trailers", "--range", "HEAD~1..HEAD")
    assert (status, out) == (2, "")
    assert "needs the whole history, but this clone is shallow" in err
    assert "git fetch --unshallow" in err
    status, out, _ = run(repo, "trailers", "--range", "HEAD~1..HEAD")
    assert (status, out) == (0, "trailers: 0 commits checked, 1 exempt (revert 1); 0 findings\n")


def test_a_fixup_that_landed_is_checked_unless_the_history_exempts_it(repo: Path) -> None:
    """Found by an outside audit: a `fixup!` subject skipped every rule in --range, --pushed
    and check, so any change could land with it. The commit-msg hook still lets one through."""
    start = git(repo, "rev-parse", "HEAD")
    (repo / "f.txt").write_text("x\n")
    git(repo, "add", "f.txt")
    git(repo, "commit", "-q", "--no-verify", "-m", "fixup! anything at all")
    status, out, _ = run(repo, "trailers", "--range", f"{start}..HEAD")
    assert status == 1
    assert out.splitlines()[-1] == "trailers: 1 commit checked; 4 findings"
    status, out, _ = run(repo, "trailers", message_file(repo, b"fixup! anything at all\n"))
    assert (status, out) == (0, "trailers: 0 messages checked, 1 exempt (fixup 1); 0 findings\n")
    (repo / "pyproject.toml").write_text("[tool.wpgate.trailers]\nfixup_exempt_in_history = true\n")
    status, out, _ = run(repo, "trailers", "--range", f"{start}..HEAD")
    assert (status, out) == (0, "trailers: 0 commits checked, 1 exempt (fixup 1); 0 findings\n")


def test_a_cited_source_with_no_provenance_table_says_the_table_is_missing(repo: Path) -> None:
    """Found by an outside audit: with the provenance table gone, `Provenance: R7` was said
    not to be in its Sources table, as if the table were there."""
    (repo / "docs/PROVENANCE.md").unlink()
    status, out, _ = run(repo, "trailers", message_file(repo, GOOD))
    assert status == 1
    assert (
        "WPG105 R7 cannot be looked up: docs/PROVENANCE.md does not exist; create it or fix the "
        "path (the provenance table, `wpgate init` writes one)"
    ) in out
    (repo / "docs/PROVENANCE.md").write_bytes(b"\xff\xfe not text")
    status, out, _ = run(repo, "trailers", message_file(repo, GOOD))
    assert status == 1
    assert "WPG105 R7 cannot be looked up: " in out
    assert "is not in the Sources table" not in out


def test_a_gate_on_a_file_the_commit_does_not_carry_is_refused_at_commit(repo: Path) -> None:
    """Found by an outside audit: a gate naming a test file never `git add`ed passed the
    commit-msg hook (the working tree has it), then failed in every clone."""
    (repo / "tests").mkdir(exist_ok=True)
    (repo / "tests/test_new.py").write_text("def test_new():\n    pass\n")
    message = GOOD.replace(b"\nAssumptions: A1", b"").split(b"\nGate:")[0]
    message += b"\nGate: tests/test_new.py::test_new\n"
    status, out, _ = run(repo, "trailers", message_file(repo, message))
    assert status == 1
    assert "`tests/test_new.py` is not in git's index: `git add` it" in out
    git(repo, "add", "tests/test_new.py")
    status, out, _ = run(repo, "trailers", message_file(repo, message))
    assert (status, out) == (0, "trailers: 1 message checked; 0 findings\n")


def test_a_range_in_a_repository_without_commits_says_there_are_none(tmp_path: Path) -> None:
    """Found by an outside audit: an empty repository's `HEAD~1..HEAD` was an unknown revision
    to check the name of, or to fetch."""
    git(tmp_path, "init", "-q")
    status, _, err = run(tmp_path, "trailers", "--range", "HEAD~1..HEAD")
    assert status == 2
    assert "this repository has no commits yet" in err


def test_check_where_nothing_configures_wpgate_says_init_would(tmp_path: Path) -> None:
    """Found by an outside audit: outside any adopting repository, `check` listed missing
    documents without a word that nothing there had adopted wpgate."""
    status, out, err = run(tmp_path, "check")
    assert status == 1
    assert "WPG201 docs/PROVENANCE.md does not exist" in out
    assert f"wpgate: no configuration at {tmp_path}" in err
    assert "`wpgate init` writes one" in err


def test_a_revert_message_naming_no_commit_is_not_exempt(repo: Path) -> None:
    """Found by an outside audit: a made-up `This reverts commit 000...` exempted any change."""
    start = git(repo, "rev-parse", "HEAD")
    (repo / "f.txt").write_text("x\n")
    git(repo, "add", "f.txt")
    fake = b'Revert "something"\n\nThis reverts commit ' + b"0" * 40 + b".\n"
    git(repo, "commit", "-q", "--no-verify", "-F", "-", data=fake)
    status, out, _ = run(repo, "trailers", "--range", f"{start}..HEAD")
    assert status == 1
    assert out.splitlines()[-1].startswith("trailers: 1 commit checked;")


def test_ignore_and_warning_severity(repo: Path) -> None:
    path = message_file(repo, BAD)
    status, out, _ = run(
        repo, "trailers", "--ignore", "WPG101", "--ignore", "subject-period,WPG105", path
    )
    assert status == 1
    assert [line.split()[1] for line in out.splitlines()[:-1]] == ["WPG104", "WPG107"]
    status, _, err = run(repo, "trailers", "--ignore", "no-such-rule", path)
    assert status == 2
    # An option, not a file: the message names no configuration file.
    assert err == (
        "wpgate: error: --ignore no-such-rule: is not a known rule; `wpgate explain --list` "
        "lists them\n"
    )
    for empty in ("", " , "):  # an --ignore that names nothing is a mistake, not a no-op
        status, _, err = run(repo, "trailers", "--ignore", empty, path)
        assert status == 2
        assert f"--ignore {empty!r} names no rule; pass a rule id such as WPG102" in err
    (repo / "pyproject.toml").write_text(
        '[tool.wpgate.rules]\nWPG101 = "warning"\nsubject-period = "off"\nWPG104 = "warning"\n'
        'WPG105 = "warning"\nWPG107 = "warning"\n'
    )
    status, out, _ = run(repo, "trailers", path)
    assert status == 0
    assert f"{path}:1: WPG101 (warning) " in out
    assert " WPG103 " not in out
    assert out.splitlines()[-1].endswith("4 findings (4 warnings, not failing)")
    status, out, _ = run(repo, "trailers", "--format", "github", path)
    assert out.startswith("::warning file=")


def test_unknown_rule_ids_run_with_a_warning_on_stderr_only(repo: Path) -> None:
    (repo / "wpgate.toml").write_text("[rules]\nWPG999 = false\n", encoding="utf-8")
    path = message_file(repo, GOOD)
    unknown = f"which this wpgate (version {__version__}) does not know; it is ignored"
    # The commit-msg hook's own reading of the command line, and click's.
    for args in (("trailers", "--ignore", "WPG998", path), ("provenance", "--ignore", "WPG998")):
        status, out, err = run(repo, *args)
        assert status == 0, args
        assert "warning" not in out
        assert err.splitlines() == [
            f"wpgate: warning: [rules] in wpgate.toml names WPG999, {unknown}: check for a typo "
            "(`wpgate explain --list` lists the rules), or upgrade wpgate if the rule is newer",
            f"wpgate: warning: --ignore names WPG998, {unknown}: check for a typo (`wpgate "
            "explain --list` lists the rules), or upgrade wpgate if the rule is newer",
        ]


def test_the_commit_msg_path_imports_no_docs_linter(repo: Path) -> None:
    path = message_file(repo, GOOD)
    code = (
        "import sys\nfrom wpgate.cli import main\n"
        f"status = main(['trailers', {path!r}, '--root', {str(repo)!r}])\n"
        "heavy = ['yaml', 'decimal', 'wpgate.parsers.evidence', 'wpgate.rules.evidence',"
        " 'wpgate.rules.provenance', 'wpgate.rules.work_packages', 'wpgate.rules.changelog']\n"
        "print(status, [name for name in heavy if name in sys.modules])\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.splitlines()[-1] == "0 []"


def test_check_parses_each_document_once(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from wpgate import _docs
    from wpgate.parsers import provenance

    calls: list[str] = []
    # The provenance parser is imported where the document is read (wpgate._citable).
    for module, name in ((provenance, "parse_provenance"), (_docs, "parse_work_package")):
        original = getattr(module, name)

        def counted(
            text: str, rel: str, *args: object, _original: object = original, **kwargs: object
        ) -> object:
            calls.append(rel)
            return _original(text, rel, *args, **kwargs)  # type: ignore[operator]

        monkeypatch.setattr(module, name, counted)
    first = git(repo, "rev-parse", "HEAD")
    (repo / "pyproject.toml").write_text(f'[tool.wpgate]\nhistory_start = "{first}"\n')
    run(repo, "check")
    assert sorted(calls) == ["docs/PROVENANCE.md", "docs/work_packages/wp-004.md"]


def test_pushed_without_history_start_skips_with_how_to_enable_it(repo: Path) -> None:
    git(repo, "commit", "-q", "--allow-empty", "-F", "-", data=BAD)
    status, out, _ = run(repo, "trailers", "--pushed")
    assert status == 0
    assert out.startswith(
        "trailers (--pushed skipped: history_start is not set; set it to the first governed "
        "commit to lint the trailers): 0 commits checked"
    )


def test_pushed_reads_git_pre_push_input(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("PRE_COMMIT_FROM_REF", "PRE_COMMIT_TO_REF", "PRE_COMMIT_REMOTE_NAME"):
        monkeypatch.delenv(name, raising=False)
    first = git(repo, "rev-parse", "HEAD")
    git(repo, "commit", "-q", "--allow-empty", "-F", "-", data=GOOD)
    governed = git(repo, "rev-parse", "HEAD")
    (repo / "pyproject.toml").write_text(f'[tool.wpgate]\nhistory_start = "{governed}"\n')
    git(repo, "commit", "-q", "--allow-empty", "-F", "-", data=BAD)
    bad = git(repo, "rev-parse", "HEAD")
    # Pushing `bad` onto a remote that has `governed`: one commit, the bad one.
    line = f"refs/heads/main {bad} refs/heads/main {governed}\n".encode()
    status, out, _ = run(repo, "trailers", "--pushed", stdin=line)
    assert status == 1
    assert f"{bad[:12]}:1: WPG101" in out
    assert "trailers: 1 commit checked" in out
    # A new branch: every commit on no remote-tracking ref, from history_start on.
    new = f"refs/heads/topic {governed} refs/heads/topic {'0' * 40}\n".encode()
    assert run(repo, "trailers", "--pushed", stdin=new)[:2] == (
        0,
        "trailers: 1 commit checked; 0 findings\n",
    )
    # A deletion pushes nothing; a remote sha this clone lacks falls back to the remotes.
    deletion = f"(delete) {'0' * 40} refs/heads/old {first}\n".encode()
    assert run(repo, "trailers", "--pushed", stdin=deletion)[:2] == (
        0,
        "trailers: 0 commits checked; 0 findings\n",
    )
    lacking = f"refs/heads/main {bad} refs/heads/main {'c' * 40}\n".encode()
    assert "trailers: 2 commits checked" in run(repo, "trailers", "--pushed", stdin=lacking)[1]
    status, _, err = run(repo, "trailers", "--pushed", stdin=b"garbage\n")
    assert status == 2
    assert "pre-push input line 1 is not" in err
    # Under pre-commit (its variables set) the input is pre-commit's, not wpgate's.
    monkeypatch.setenv("PRE_COMMIT_TO_REF", governed)
    monkeypatch.setenv("PRE_COMMIT_FROM_REF", first)
    assert run(repo, "trailers", "--pushed", stdin=b"garbage\n")[:2] == (
        0,
        "trailers: 1 commit checked; 0 findings\n",
    )


def test_verbose_says_which_configuration_file_is_read(repo: Path) -> None:
    (repo / "pyproject.toml").write_text('[tool.wpgate.trailers]\nrequired = ["WP"]\n')
    (repo / "wpgate.toml").write_text('[trailers]\nrequired = ["WP", "Gate"]\n')
    _, out, err = run_verbose(repo, "wp")
    assert f"wpgate: root: {repo.resolve()}\n" in err  # found, or given with --root
    assert "wpgate: configuration: wpgate.toml\n" in err
    assert "pyproject.toml also configures wpgate and is not read (wpgate.toml comes first)" in err
    assert "configuration" not in out  # the report alone on stdout
    # Without --verbose the file read is not named, but the one not read is warned of: what
    # it sets (here, a required trailer) silently stops applying.
    assert run(repo, "wp")[2] == (
        "wpgate: warning: pyproject.toml also configures wpgate and is not read (wpgate.toml "
        "comes first); keep one of them\n"
    )


def run_verbose(root: Path, *args: str) -> tuple[int, str, str]:
    """:func:`run` with the global ``-v`` before the command."""
    out, err = io.StringIO(), io.StringIO()
    old = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = out, err
    try:
        status = main(["-v", *args, "--root", str(root)])
    finally:
        sys.stdout, sys.stderr = old
    return status, out.getvalue(), err.getvalue()


def test_ctrl_c_inside_a_command_exits_130_without_a_traceback(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import wpgate.cli
    from wpgate import _commits

    def interrupted(*_args: object, **_kwargs: object) -> object:
        raise KeyboardInterrupt

    monkeypatch.setattr(_commits, "run_trailers", interrupted)
    argv = ["trailers", "-", "--format", "sarif", "--root", str(repo)]
    read_plainly = _run_bytes(argv, GOOD)
    monkeypatch.setattr(wpgate.cli, "plain_trailers", lambda _args: None)
    # click ends the terminal's `^C` line first; then one line, and no traceback (read with
    # click or without).
    assert read_plainly == _run_bytes(argv, GOOD) == (130, b"", b"\nwpgate: interrupted\n")


def test_ctrl_c_outside_click_exits_130(monkeypatch: pytest.MonkeyPatch) -> None:
    from wpgate import cli

    def interrupted(**_kwargs: object) -> object:
        raise KeyboardInterrupt

    monkeypatch.setattr(cli.cli, "main", interrupted)
    assert cli.main(["--version"]) == 130


# The number of read(2) per machine, for /proc/<pid>/syscall (x86_64, aarch64).
_READ_SYSCALL = {"x86_64": "0", "aarch64": "63"}


def _blocked_on_a_read(pid: int) -> bool:
    """Whether process ``pid`` sleeps in a pipe read of its stdin (Linux ``/proc``).

    ``wchan`` says a pipe read; ``syscall`` (where this machine's read number is known) says
    it is ``read(0, ...)``: the process also reads git's pipes, and a signal sent during one
    of those reads is not the case this test makes."""
    try:
        if "pipe" not in Path(f"/proc/{pid}/wchan").read_text(encoding="ascii"):
            return False
        number = _READ_SYSCALL.get(os.uname().machine)
        if number is None:
            return True
        fields = Path(f"/proc/{pid}/syscall").read_text(encoding="ascii").split()
    except OSError:
        return False
    return fields[:2] == [number, "0x0"]


@pytest.fixture
def sigint_handled() -> Iterator[None]:
    """SIGINT handled in this process while the test runs, so that its children start with
    SIGINT's default action, as a terminal's foreground process does. A test run started in the
    background by a non-interactive shell inherits SIGINT ignored (bash ignores it in
    asynchronous commands), an exec keeps an ignored signal ignored, and Python then leaves it
    so: the child would never see the interrupt."""
    saved = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, saved)


@pytest.mark.skipif(not Path("/proc/self/wchan").exists(), reason="needs Linux /proc wchan")
@pytest.mark.usefixtures("sigint_handled")
def test_sigint_while_reading_stdin_exits_130(repo: Path) -> None:
    # The real thing: `wpgate trailers -` waits on a stdin pipe that never closes, and the
    # user presses Ctrl-C (SIGINT once it is blocked in that read, as the terminal sends it).
    child = subprocess.Popen(
        [sys.executable, "-m", "wpgate", "trailers", "-", "--root", str(repo)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        deadline = time.monotonic() + 60
        while not _blocked_on_a_read(child.pid):
            assert child.poll() is None, child.communicate()
            assert time.monotonic() < deadline, "wpgate never blocked on its stdin"
            time.sleep(0.05)
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()
    assert (child.returncode, out, err.lstrip(b"\n")) == (130, b"", b"wpgate: interrupted\n")


def test_sarif_from_the_command_line_links_the_configured_rule_pages(repo: Path) -> None:
    (repo / "pyproject.toml").write_text(
        '[tool.wpgate.output]\nhelp_uri = "https://example.org/rules/{id}/"\n'
    )
    status, out, err = run(repo, "trailers", "-", "--format", "sarif", stdin=BAD)
    assert (status, err) == (1, "")
    log = json.loads(out)
    rules = {r["id"]: r for r in log["runs"][0]["tool"]["driver"]["rules"]}
    assert rules["WPG101"]["helpUri"] == "https://example.org/rules/wpg101/"
    assert {r["ruleId"] for r in log["runs"][0]["results"]} >= {"WPG101", "WPG104"}


@pytest.mark.parametrize(
    ("config", "args", "error"),
    [
        ("[tool.wpgate\n", ("check", "--format", "sarif"), "pyproject.toml: is not valid TOML"),
        ("", ("trailers", "--range", "nope..HEAD", "--format=sarif"), "unknown revision `nope`"),
        ("", ("wp", "--format", "sarif", "--bogus"), "--bogus"),
        ("", ("wp", "--format", "text", "--format", "sarif", "--bogus"), "No such option"),
    ],
)
def test_sarif_is_written_when_the_run_exits_2(
    repo: Path, config: str, args: tuple[str, ...], error: str
) -> None:
    if config:
        (repo / "pyproject.toml").write_text(config)
    status, out, err = run(repo, *args)
    assert status == 2
    assert error in err  # people still read the error on stderr
    (sarif_run,) = json.loads(out)["runs"]
    assert "results" not in sarif_run
    (invocation,) = sarif_run["invocations"]
    assert (invocation["executionSuccessful"], invocation["exitCode"]) == (False, 2)
    (notification,) = invocation["toolExecutionNotifications"]
    assert notification["level"] == "error"
    assert error in notification["message"]["text"]


def test_other_formats_write_nothing_on_stdout_when_the_run_exits_2(repo: Path) -> None:
    (repo / "pyproject.toml").write_text("[tool.wpgate\n")
    for fmt in ("text", "json", "github"):
        assert run(repo, "check", "--format", fmt)[:2] == (2, "")
    # `--format` after `--` is an argument, not the option.
    assert run(repo, "trailers", "--bogus", "--", "--format", "sarif")[:2] == (2, "")


def test_a_bad_help_uri_template_exits_2(repo: Path) -> None:
    (repo / "pyproject.toml").write_text('[tool.wpgate.output]\nhelp_uri = "https://x/{rule}"\n')
    status, _, err = run(repo, "wp", "--format", "sarif")
    assert status == 2
    assert "tool.wpgate.output.help_uri: 'https://x/{rule}' is not a URL template" in err


def test_markdown_reports_a_list_after_a_paragraph(repo: Path) -> None:
    (repo / "docs" / "guide.md").write_text("# Guide\n\nSteps:\n- install\n- run\n")
    status, out, err = run(repo, "markdown")
    assert (status, err) == (1, "")
    assert out.startswith("docs/guide.md:4: WPG601 this list follows a paragraph line")
    (repo / "docs" / "guide.md").write_text("# Guide\n\nSteps:\n\n- install\n- run\n")
    status, out, _ = run(repo, "markdown")
    assert status == 0
    assert re.fullmatch(r"markdown: \d+ pages checked; 0 findings\n", out)


def test_findings_name_the_tables_as_the_configuration_file_writes_them(repo: Path) -> None:
    message = b"feat(x): y\n\nWP: 004\nProvenance: none (ours)\nGate: src/lib.rs::adds\n"
    (repo / "wpgate.toml").write_text('[gates]\nlanguages = ["python"]\n')
    status, out, _ = run(repo, "trailers", "-", stdin=message)
    assert status == 1
    # A wpgate.toml holds its tables at the top level: the fix names `[gates]`, as written there.
    assert "rust is not among the [gates] languages; add it there" in out
    assert "tool.wpgate" not in out
    (repo / "wpgate.toml").unlink()
    (repo / "pyproject.toml").write_text('[tool.wpgate.gates]\nlanguages = ["python"]\n')
    out = run(repo, "trailers", "-", stdin=message)[1]
    assert "rust is not among the [tool.wpgate.gates] languages; add it there" in out


def test_the_collector_is_paused_for_a_command_and_restored_after(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import gc

    import wpgate.cli

    seen: list[bool] = []

    def command(argv: object) -> int:
        seen.append(gc.isenabled())
        return 0

    monkeypatch.setattr(wpgate.cli, "_main", command)
    was = gc.isenabled()
    try:
        gc.enable()
        assert main([]) == 0
        assert gc.isenabled()
        gc.disable()
        assert main([]) == 0
        assert not gc.isenabled()  # a caller's own setting is kept
    finally:
        (gc.enable if was else gc.disable)()
    assert seen == [False, False]


def test_run_exits_with_the_status_of_main_after_freezing_what_is_left(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import gc

    import wpgate.cli

    calls: list[str] = []

    def command() -> int:
        calls.append("main")
        return 1

    monkeypatch.setattr(wpgate.cli, "main", command)
    monkeypatch.setattr(gc, "freeze", lambda: calls.append("freeze"))
    with pytest.raises(SystemExit) as exit_info:
        wpgate.cli.run()
    assert (exit_info.value.code, calls) == (1, ["main", "freeze"])


def test_an_escape_sequence_in_a_report_is_stripped_off_a_terminal(repo: Path) -> None:
    # The report is written with click's stripping of ANSI sequences skipped only when it
    # holds no ESC; one that does is still stripped on output that is no terminal.
    status, out, _ = run(repo, "trailers", "-", stdin=b"fix: x\n\nWP: \x1b[31m12\n")
    assert status == 1
    assert "\x1b" not in out
    assert "`WP: 12` is not a work-package id" in out


# --------------------------------------------------------------------------- plain trailers


def _trailer_command_lines(repo: Path) -> tuple[list[list[str]], list[list[str]]]:
    """``trailers`` command lines over ``repo``: valid ones in every spelling (read without
    click), and ones click refuses, helps with or reads as something else."""
    message = message_file(repo, BAD)
    pr = repo / "pr.txt"
    pr.write_bytes(b"feat: a change" + PR_STATEMENT)
    root = ["--root", str(repo)]
    plain = [
        [message],
        ["-"],
        ["--range", "HEAD"],
        ["--range=HEAD"],
        ["--range", "HEAD~1..HEAD"],
        ["--range", "HEAD", "--range", "HEAD~1..HEAD"],
        ["--range", "HEAD", "--format", "json"],
        ["--range=HEAD", "--format=sarif"],
        ["--format", "github", "--range", "HEAD"],
        ["--format", "json", "--format", "text", message],
        ["--range", "HEAD", "--ignore", "WPG101", "--ignore=wp-trailer"],
        ["--ignore", "WPG101,WPG104", message],
        ["--ignore", "no-such-rule", message],
        ["--history"],
        ["--history", "--history", "--format", "sarif"],
        ["--pushed"],
        ["--pr", str(pr)],
        ["--pr=-"],
        ["-", "--pr", "-", "--format", "json"],
        [message, "--range", "HEAD"],
        [],
        ["--range", ""],
        [""],
        ["--range", "no-such-revision"],
        ["--range", "HEAD", "--format=sarif", "--root", str(repo / "tests")],
        [message, "--root", str(repo / "tests")],
    ]
    other = [
        ["--range", "HEAD", "--root", str(repo / "no-such-folder")],
        ["--range", "HEAD", "--root", str(repo / "tests" / "test_gate.py")],
        ["--range", "HEAD", "--root="],
        ["--format", "xml", message],
        ["--format=sarif", "--format"],
        ["--range"],
        ["--range", "-x"],
        ["--range=-x"],
        ["--ran", "HEAD"],
        ["--bogus", message],
        ["--format=sarif", "--bogus"],
        ["--history=yes"],
        [message, message],
        ["-h"],
        ["--help"],
        ["--", "-"],
    ]
    return (
        [["trailers", *args, *root] for args in plain] + [["trailers", "--range", "HEAD"]],
        [["trailers", *args, *root] for args in other]
        + [["-v", "trailers", "--range", "HEAD", *root], ["trailer", message, *root]],
    )


def test_a_plain_trailers_command_line_runs_as_click_runs_it(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import wpgate.cli

    git(repo, "commit", "-q", "--allow-empty", "-m", BAD.decode())
    git(repo, "commit", "-q", "--allow-empty", "-m", "fix: x\n\nWP: \x1b[31m12\n")
    monkeypatch.chdir(repo)
    plain, other = _trailer_command_lines(repo)
    for argv in plain + other:
        assert (wpgate.cli.plain_trailers(argv) is not None) == (argv in plain), argv
        read_plainly = _run_bytes(argv, BAD)
        with monkeypatch.context() as patched:
            patched.setattr(wpgate.cli, "plain_trailers", lambda _args: None)
            read_by_click = _run_bytes(argv, BAD)
        assert read_plainly == read_by_click, argv


def test_a_plain_trailers_command_line_is_read_as_click_reads_it(repo: Path) -> None:
    from wpgate.cli import plain_trailers

    message = message_file(repo, BAD)
    argv = ["trailers", "--ignore", "A", message, "--ignore=B", "--pr", "-", "--range", "x"]
    assert plain_trailers([*argv, "--range=y", "--format", "json", "--root", str(repo)]) == {
        "message_file": message,
        "fmt": "json",
        "ignored": ("A", "B"),
        "pr": "-",
        "rev_range": "y",
        "root": str(repo),
    }


def test_the_trailers_command_line_loads_no_click(repo: Path) -> None:
    code = (
        "import sys\nfrom wpgate.cli import main\n"
        f"status = main(['trailers', '--range', 'HEAD', '--root', {str(repo)!r}])\n"
        "print(status, sorted({m.split('.')[0] for m in sys.modules} & {'click'}))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.stdout.splitlines()[-1] == "1 []", done.stderr
    # Control: help goes to click.
    code = code.replace("'--range', 'HEAD'", "'--help'")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.stdout.splitlines()[-1] == "0 ['click']", done.stderr


@pytest.mark.parametrize("read_by", ["wpgate.cli", "click"])
def test_a_report_into_a_closed_pipe_exits_1_without_a_traceback(repo: Path, read_by: str) -> None:
    code = "import sys, wpgate.cli\n"
    if read_by == "click":
        code += "wpgate.cli.plain_trailers = lambda args: None\n"
    code += "wpgate.cli.run()\n"
    argv = ["trailers", "--range", "HEAD", "--root", str(repo)]
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before wpgate writes its report
    try:
        done = subprocess.run(
            [sys.executable, "-c", code, *argv],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            check=False,
        )
    finally:
        os.close(write_end)
    assert (done.returncode, done.stderr) == (1, "")
