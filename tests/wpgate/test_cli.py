"""Tests for the `wpgate` command line: inputs, formats, exit codes and error messages."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from git_helpers import git, new_repository

from wpgate import __version__
from wpgate.cli import main

REPO = Path(__file__).resolve().parents[2]
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
    root = new_repository(tmp_path)
    for rel in ("docs/PROVENANCE.md", "docs/ASSUMPTIONS.md", "docs/work_packages/wp-004.md"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / rel, root / rel)
    (root / "tests").mkdir()
    (root / "tests" / "test_gate.py").write_text("def test_gate():\n    pass\n", encoding="utf-8")
    git(root, "add", ".")
    git(root, "commit", "-q", "-m", "initial import")
    return root


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


def message_file(root: Path, data: bytes) -> str:
    path = root / ".git" / "COMMIT_EDITMSG"
    path.write_bytes(data)
    return str(path)


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"wpgate, version {__version__}\n"


def test_the_cli_reads_package_metadata_only_for_version() -> None:
    # The commit-msg hook imports the CLI on every commit; importlib.metadata costs tens of ms.
    code = "import sys, wpgate.cli; print('importlib.metadata' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def test_unknown_module_attribute_is_an_attribute_error() -> None:
    import wpgate

    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = wpgate.nope  # type: ignore[attr-defined]


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


def test_explain() -> None:
    status, out, _ = run(Path("."), "explain", "WPG104")
    assert status == 0
    assert out.splitlines()[:2] == [
        "WPG104 wp-trailer",
        "  `WP:` appears exactly once: `NNN`, `NNNx` or `none`, and the package exists.",
    ]
    assert run(Path("."), "explain", "gate-trailer")[1].startswith("WPG107 gate-trailer")
    listing = run(Path("."), "explain", "--list")[1]
    assert "WPG108  signed-off-by" in listing
    assert "(off by default)" in listing
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
