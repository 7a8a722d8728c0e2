"""Tests for git access: ranges, one process per range, and range errors with their fix."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from collections.abc import Generator
from pathlib import Path
from typing import cast

import pytest
from git_helpers import git, new_repository

from wpgate import _git
from wpgate._git import (
    Commit,
    GitError,
    RevisionRange,
    history_range,
    parse_range,
    pushed_range,
    read_commit_fields,
    read_commits,
)


def commit(root: Path, message: bytes) -> str:
    """An empty commit with a raw message; its sha."""
    git(root, "commit", "-q", "--allow-empty", "--cleanup=verbatim", "-F", "-", data=message)
    return git(root, "rev-parse", "HEAD")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = new_repository(tmp_path)
    for index in range(4):
        commit(root, f"fix: change {index}\n\nWP: 004\n".encode())
    return root


def test_parse_range() -> None:
    assert parse_range("a..b") == RevisionRange("b", ("a",), label="a..b")
    assert parse_range("a..") == RevisionRange("HEAD", ("a",), label="a..")
    assert parse_range("HEAD") == RevisionRange("HEAD", (), label="HEAD")
    for bad, hint in [("", "pass `--range"), ("a...b", "two dots"), ("..b", "has no start")]:
        with pytest.raises(GitError, match=hint):
            parse_range(bad)


def test_reads_a_range_newest_first(repo: Path) -> None:
    first = git(repo, "rev-list", "--max-parents=0", "HEAD")
    commits = list(read_commits(repo, parse_range(f"{first}..HEAD")))
    assert [c.message for c in commits] == [
        f"fix: change {i}\n\nWP: 004\n".encode() for i in (3, 2, 1)
    ]
    assert commits[-1].parents == (first,)
    assert commits[0].author == "Ada Lovelace <ada@example.org>"


def test_commit_fields_are_the_bytes_read_commits_decodes(repo: Path) -> None:
    # The range lint reads git's fields undecoded; read_commits decodes the same records.
    merge_base = git(repo, "rev-parse", "HEAD")
    git(repo, "checkout", "-q", "-b", "side", "HEAD~1")
    commit(repo, "fix: sid\xe9\n\nWP: 004\n".encode())
    git(repo, "checkout", "-q", "-")
    git(repo, "merge", "-q", "--no-ff", "-m", "Merge side", "side")
    fields = list(read_commit_fields(repo, parse_range("HEAD")))
    commits = list(read_commits(repo, parse_range("HEAD")))
    assert len(fields) == len(commits) == 6
    assert commits[0].parents[0] == merge_base
    assert len(commits[0].parents) == 2
    assert [
        Commit(
            sha.decode("ascii"),
            tuple(parents.decode("ascii").split()),
            author.decode("utf-8", "replace"),
            message,
        )
        for sha, parents, author, message in fields
    ] == commits


def test_closing_read_commits_ends_git(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    processes: list[subprocess.Popen[bytes]] = []
    original = _git._open

    def recorded(root: Path, args: list[str]) -> subprocess.Popen[bytes]:
        processes.append(original(root, args))
        return processes[-1]

    monkeypatch.setattr(_git, "_open", recorded)
    commits = cast("Generator[Commit, None, None]", read_commits(repo, parse_range("HEAD")))
    assert next(commits).message.startswith(b"fix: change 3")
    commits.close()
    assert processes[0].returncode is not None  # killed and waited for, not left running


def test_history_range_includes_its_start(repo: Path) -> None:
    first = git(repo, "rev-list", "--max-parents=0", "HEAD")
    assert len(list(read_commits(repo, history_range(first)))) == 4
    second = git(repo, "rev-parse", "HEAD~2")
    assert len(list(read_commits(repo, history_range(second)))) == 3


def raw_commit(root: Path, message: bytes) -> str:
    """A commit object written byte for byte (git commit would re-encode invalid UTF-8)."""
    tree = git(root, "rev-parse", "HEAD^{tree}")
    parent = git(root, "rev-parse", "HEAD")
    ident = b"Ada Lovelace <ada@example.org> 1760000000 +0000"
    body = b"tree %s\nparent %s\nauthor %s\ncommitter %s\n\n" % (
        tree.encode(),
        parent.encode(),
        ident,
        ident,
    )
    sha = git(root, "hash-object", "-t", "commit", "-w", "--stdin", data=body + message)
    git(root, "update-ref", "HEAD", sha)
    return sha


def test_messages_stay_bytes(repo: Path) -> None:
    raw_commit(repo, b"fix: bad \xff byte\n\nWP: 004\n")
    (latest,) = list(read_commits(repo, parse_range("HEAD~1..HEAD")))
    assert latest.message == b"fix: bad \xff byte\n\nWP: 004\n"


def test_one_git_log_process_for_the_whole_range(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for index in range(30):
        commit(repo, f"fix: more {index}\n".encode())
    calls: list[list[str]] = []
    real_popen = subprocess.Popen

    # subprocess.run starts its process through Popen too, so this sees every git process.
    def spy_popen(args: list[str], **kwargs: object) -> subprocess.Popen[bytes]:
        calls.append(list(args))
        return real_popen(args, **kwargs)  # type: ignore[call-overload,no-any-return]

    first = git(repo, "rev-list", "--max-parents=0", "HEAD")
    monkeypatch.setattr("wpgate._git.subprocess.Popen", spy_popen)
    assert len(list(read_commits(repo, parse_range(f"{first}..HEAD")))) == 33
    assert sum("log" in call for call in calls) == 1
    assert len(calls) <= 3  # repository state, endpoint check, the log


def test_empty_range_is_an_error(repo: Path) -> None:
    with pytest.raises(GitError, match=r"contains no commits; write it OLDER\.\.NEWER"):
        list(read_commits(repo, parse_range("HEAD..HEAD~2")))


def test_unknown_revision_is_an_error(repo: Path) -> None:
    with pytest.raises(GitError, match=r"unknown revision `nope`; check the name"):
        list(read_commits(repo, parse_range("nope..HEAD")))


def test_a_tree_or_a_file_is_not_called_an_unknown_revision(repo: Path) -> None:
    """An audit's finding: `HEAD^{tree}..HEAD` was called an unknown revision."""
    with pytest.raises(GitError, match=r"`HEAD\^\{tree\}` names a tree, not a commit; name a"):
        list(read_commits(repo, parse_range("HEAD^{tree}..HEAD")))
    blob = git(repo, "hash-object", "-w", "--stdin", data=b"a file\n")
    with pytest.raises(GitError, match=rf"`{blob}` names a blob, not a commit"):
        list(read_commits(repo, parse_range(f"HEAD..{blob}")))
    # An unknown name among them is still said to be unknown, in its turn.
    with pytest.raises(GitError, match=r"unknown revision `nope`"):
        list(read_commits(repo, parse_range("nope..HEAD")))


def test_an_unknown_revision_of_any_length_is_quoted_short(repo: Path) -> None:
    """A 100,000-character name is not echoed whole into the message."""
    with pytest.raises(GitError) as caught:
        list(read_commits(repo, parse_range("a" * 100_000 + "..HEAD")))
    assert f"unknown revision `{'a' * 60}...`;" in str(caught.value)
    assert len(str(caught.value)) < 300


def test_not_a_repository(tmp_path: Path) -> None:
    with pytest.raises(GitError, match="is not inside a git repository"):
        list(read_commits(tmp_path, parse_range("HEAD")))


def test_shallow_clone_errors_say_how_to_fetch(repo: Path, tmp_path: Path) -> None:
    first = git(repo, "rev-list", "--max-parents=0", "HEAD")
    shallow = tmp_path / "shallow"
    git(tmp_path, "clone", "-q", "--depth", "2", f"file://{repo}", str(shallow))
    with pytest.raises(GitError, match=r"not in this shallow clone; fetch .*--unshallow"):
        list(read_commits(shallow, parse_range(f"{first}..HEAD")))
    with pytest.raises(GitError, match=r"reaches the shallow-clone boundary .*--unshallow"):
        list(read_commits(shallow, parse_range("HEAD")))
    assert len(list(read_commits(shallow, parse_range("HEAD~1..HEAD")))) == 1


def test_pushed_range_from_pre_commit_environment() -> None:
    env = {"PRE_COMMIT_FROM_REF": "a" * 40, "PRE_COMMIT_TO_REF": "b" * 40}
    assert pushed_range(env) == RevisionRange(
        "b" * 40, ("a" * 40,), label=f"{'a' * 40}..{'b' * 40}", allow_empty=True
    )
    new_branch = pushed_range({"PRE_COMMIT_TO_REF": "b" * 40}, history_start="abc")
    assert new_branch.exclude == ("--remotes", "abc^@")
    assert pushed_range({}).exclude == ("--remotes",)


def test_pushed_range_without_remotes_lints_local_commits(repo: Path) -> None:
    assert len(list(read_commits(repo, pushed_range({})))) == 4
    start = git(repo, "rev-parse", "HEAD~1")
    assert len(list(read_commits(repo, pushed_range({}, history_start=start)))) == 2


def test_parse_pre_push_and_its_ranges() -> None:
    a, b, zero = "a" * 40, "b" * 40, "0" * 40
    text = (
        f"refs/heads/main {a} refs/heads/main {b}\n"
        f"refs/heads/new {b} refs/heads/new {zero}\n"
        f"(delete) {zero} refs/heads/old {a}\n\n"
    )
    refs = _git.parse_pre_push(text)
    assert [ref.local_ref for ref in refs] == ["refs/heads/main", "refs/heads/new", "(delete)"]
    ranges = _git.pre_push_ranges(refs, history_start="abc")
    assert [(r.include, r.exclude) for r in ranges] == [
        (a, (b, "abc^@")),
        (b, ("--remotes", "abc^@")),
    ]
    # A remote sha this clone lacks (a force push over others' commits): commits on no remote.
    unknown = _git.pre_push_ranges(refs[:1], unknown=frozenset({b}))
    assert unknown[0].exclude == ("--remotes",)
    assert _git.parse_pre_push("") == ()
    with pytest.raises(GitError, match="pre-push input line 1 is not `<local ref>"):
        _git.parse_pre_push("refs/heads/main HEAD\n")


def test_comment_char(repo: Path) -> None:
    assert _git.comment_char(repo) == "#"
    git(repo, "config", "core.commentChar", ";")
    assert _git.comment_char(repo) == ";"


def test_a_caller_that_stops_early_ends_git_without_error(repo: Path) -> None:
    for index in range(30):
        commit(repo, f"fix: more {index}\n".encode())
    # read_commits is a generator (typed as the Iterator it returns): close() ends it early.
    commits = cast("Generator[Commit, None, None]", read_commits(repo, parse_range("HEAD")))
    first = next(commits)
    commits.close()  # kills git and lets the reader thread finish; must not raise or hang
    assert len(first.sha) == 40


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("--output=/tmp/x", "starts with `-`"),
        ("-n1", "starts with `-`"),
        ("HEAD\nHEAD", "whitespace or a control character"),
        ("a b", "whitespace or a control character"),
        ("", "is empty"),
    ],
)
def test_validate_revision_refuses_what_git_would_misread(name: str, problem: str) -> None:
    with pytest.raises(GitError, match=re.escape(problem)):
        _git.validate_revision(name)
    assert _git.validate_revision("origin/main~2^{commit}") == "origin/main~2^{commit}"


def test_no_name_reaches_git_before_end_of_options(repo: Path) -> None:
    for spec in ("--all", "HEAD..--all", "--not..HEAD"):
        with pytest.raises(GitError, match="starts with `-`"):
            list(_git.read_commits(repo, _git.parse_range(spec)))
    evil = _git.RevisionRange("HEAD", ("--all",))
    with pytest.raises(GitError, match="starts with `-`"):
        list(_git.read_commits(repo, evil))


def test_commit_msg_context_reads_comment_char_author_and_a_merge(tmp_path: Path) -> None:
    root = new_repository(tmp_path)
    git(root, "config", "core.commentChar", ";")
    assert _git.commit_msg_context(root) == (";", "Ada Lovelace <ada@example.org>", False)
    (root / ".git" / "MERGE_HEAD").write_text("0" * 40 + "\n")
    assert _git.commit_msg_context(root)[2] is True


def test_commit_msg_context_outside_a_repository_falls_back(tmp_path: Path) -> None:
    char, _author, merging = _git.commit_msg_context(tmp_path)
    assert (char, merging) == ("#", False)


def test_blobs_at_reads_files_of_any_commit_and_nothing_else(tmp_path: Path) -> None:
    """Files come back as their bytes; a missing path, a directory and a path that
    ``cat-file``'s line input cannot carry come back as None, and so hash to None."""
    root = new_repository(tmp_path)
    (root / "d").mkdir()
    (root / "d" / "a.py").write_bytes(b"x = 1\n\0binary")
    git(root, "add", ".")
    git(root, "commit", "-q", "-m", "one")
    first = git(root, "rev-parse", "HEAD")
    (root / "d" / "a.py").write_bytes(b"x = 2\n")
    git(root, "commit", "-q", "-am", "two")
    asked = [(first, "d/a.py"), ("HEAD", "d/a.py"), (first, "d"), (first, "no.py"), (first, "a\nb")]
    found = _git.blobs_at(root, asked)
    assert found == {
        (first, "d/a.py"): b"x = 1\n\0binary",
        ("HEAD", "d/a.py"): b"x = 2\n",
        (first, "d"): None,
        (first, "no.py"): None,
        (first, "a\nb"): None,
    }
    hashes = _git.blob_hashes_at(root, asked)
    assert hashes[(first, "no.py")] is None
    assert hashes[("HEAD", "d/a.py")] is not None


_SRC = Path(__file__).resolve().parents[2] / "src"


def _run_python(code: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """``code`` in a fresh interpreter importing this tree's wpgate, killed after ``timeout``."""
    env = {**os.environ, "PYTHONPATH": str(_SRC)}
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )


def test_one_huge_record_is_read_in_linear_time() -> None:
    # 64 MiB without a NUL, in 1 KiB chunks: re-joining the pending bytes for every chunk
    # copied ~2 TB (many minutes); a linear reader copies the record a few times (about 1 s).
    code = (
        "import io\n"
        "from wpgate._git import _records\n"
        "data = b'x' * (64 << 20) + b'\\0' + b'second'\n"
        "out = list(_records(io.BytesIO(data), chunk=1024))\n"
        "assert [len(r) for r in out] == [64 << 20, 6], [len(r) for r in out]\n"
        "print('ok')\n"
    )
    done = _run_python(code, timeout=60)  # a generous bound, not a timing assertion
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_records_split_exactly_at_nul_bytes_whatever_the_chunking() -> None:
    data = b"a\0\0bb\0 \n\0" + b"c" * 10 + b"\0d"
    for chunk in (1, 2, 3, 7, 64):
        assert list(_git._records(io.BytesIO(data), chunk=chunk)) == [b"a", b"bb", b"c" * 10, b"d"]


def test_a_huge_message_lints_through_a_range(repo: Path) -> None:
    body = b"fix: one huge message\n\n" + b"line of text\n" * (8 << 20 >> 4) + b"\nWP: 004\n"
    sha = commit(repo, body)
    code = (
        "import sys\nfrom pathlib import Path\n"
        "from wpgate._git import parse_range, read_commits\n"
        f"(c,) = list(read_commits(Path({str(repo)!r}), parse_range('HEAD~1..HEAD')))\n"
        "print(c.sha, len(c.message))\n"
    )
    done = _run_python(code, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [sha, str(len(body))]


def test_git_logs_pipe_is_widened_where_the_system_allows() -> None:
    fcntl = pytest.importorskip("fcntl")
    if not hasattr(fcntl, "F_GETPIPE_SZ"):
        pytest.skip("pipe sizes are Linux's")
    read_end, write_end = os.pipe()
    try:
        with open(read_end, "rb", closefd=False) as stream:
            before = fcntl.fcntl(read_end, fcntl.F_GETPIPE_SZ)
            _git._widen(stream)
            after = fcntl.fcntl(read_end, fcntl.F_GETPIPE_SZ)
        limit = int(Path("/proc/sys/fs/pipe-max-size").read_text(encoding="ascii"))
        assert after == (_git._PIPE_BYTES if limit >= _git._PIPE_BYTES else before)
    finally:
        os.close(read_end)
        os.close(write_end)


def test_git_log_runs_with_fully_buffered_output(tmp_path: Path) -> None:
    # Into a pipe git flushes after every commit unless GIT_FLUSH=0 (git(1)): the reader would
    # wake once per commit. A shell alias shows the environment the reader's git runs in.
    root = new_repository(tmp_path)
    with _git._open(root, ["-c", "alias.environment=!env", "environment"]) as process:
        out, _ = process.communicate()
    assert "GIT_FLUSH=0" in out.decode().splitlines()


def test_git_log_starts_before_the_first_commit_is_asked_for(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The range lint loads its rules and documents while git writes the history.
    started: list[list[str]] = []
    original = _git._open

    def recorded(root: Path, args: list[str]) -> subprocess.Popen[bytes]:
        started.append(list(args))
        return original(root, args)

    monkeypatch.setattr(_git, "_open", recorded)
    commits = read_commits(repo, parse_range("HEAD"))
    assert [args[0] for args in started] == ["log"]
    assert len(list(commits)) == 4
    with pytest.raises(GitError, match="starts with `-`"):
        read_commits(repo, parse_range("--all"))  # refused at the call, before git runs
    assert len(started) == 1
