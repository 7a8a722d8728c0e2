"""wpgate's one evidence writer (src/wpgate/evidence.py): what it writes, what it refuses."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from git_helpers import git, new_repository

from wpgate.evidence import (
    SCHEMA,
    EvidenceError,
    GitState,
    evidence_document,
    find_repo_root,
    git_state,
    host_environment,
    source_hashes,
    write_evidence,
)
from wpgate.parsers.evidence import parse_evidence

HEAD = "0123456789abcdef0123456789abcdef01234567"


def _document(**changes: object) -> dict[str, object]:
    document = evidence_document(
        "unit",
        {"median_ms": 1.25},
        command=["python", "bench.py"],
        environment={"python": "3.12"},
        git=GitState(HEAD, False),
        sources={"src/a.py": "a" * 64},
        created="2026-12-01T00:00:00+00:00",
        extra={"git_commit_source": "git"},
    )
    document.update(changes)
    return document


def test_the_written_file_is_what_the_checker_reads(tmp_path: Path) -> None:
    path = write_evidence(_document(), tmp_path / "deep" / "e.json")
    text = path.read_text(encoding="utf-8")
    parsed = parse_evidence(text, "e.json", rule_id="WPG404")
    assert parsed.findings == ()
    assert parsed.evidence is not None
    assert (parsed.evidence.git_commit, parsed.evidence.results) == (HEAD, {"median_ms": 1.25})
    assert list(json.loads(text)) == [
        "schema",
        "kind",
        "created",
        "command",
        "environment",
        "git_commit",
        "git_dirty",
        "git_commit_source",
        "sources",
        "results",
    ]
    assert json.loads(text)["schema"] == SCHEMA == "wpgate-evidence/1"
    assert text.endswith("}\n")


@pytest.mark.parametrize(
    ("changes", "says"),
    [
        ({"git_commit": "abc"}, "`git_commit` must be a 40-hex commit or null"),
        ({"sources": {"../a.py": "a" * 64}}, "must be repository-relative"),
        ({"results": {"x": float("nan")}}, "not a valid evidence file"),
    ],
)
def test_an_invalid_document_is_refused_and_nothing_is_written(
    tmp_path: Path, changes: dict[str, object], says: str
) -> None:
    path = tmp_path / "e.json"
    with pytest.raises(EvidenceError, match=f"not writing {path}") as caught:
        write_evidence(_document(**changes), path)
    assert says in str(caught.value)
    assert not path.exists()


def test_source_hashes_are_keyed_by_posix_paths_relative_to_the_base(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "b.py").write_bytes(b"B = 1\n")
    (tmp_path / "a.py").write_bytes(b"A = 1\n")
    hashes = source_hashes(tmp_path, [tmp_path / "src" / "b.py", tmp_path / "a.py"])
    assert hashes == {
        "a.py": hashlib.sha256(b"A = 1\n").hexdigest(),
        "src/b.py": hashlib.sha256(b"B = 1\n").hexdigest(),
    }


def test_git_state_over_the_whole_tree_and_over_the_measured_paths(tmp_path: Path) -> None:
    root = new_repository(tmp_path)
    (root / "pyproject.toml").write_text("[project]\n")
    (root / "measured.py").write_text("M = 1\n")
    (root / "other.py").write_text("O = 1\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "init")
    head = git(root, "rev-parse", "HEAD")
    assert git_state(root) == GitState(head, False)
    (root / "other.py").write_text("O = 2\n")  # a change outside the measured files
    assert git_state(root) == GitState(head, True)
    assert git_state(root, ["measured.py"]) == GitState(head, False)
    (root / "new.py").write_text("N = 1\n")  # untracked: dirty only when it is measured
    git(root, "checkout", "-q", "--", "other.py")
    assert git_state(root) == GitState(head, False)
    assert git_state(root, ["measured.py", "new.py"]) == GitState(head, True)
    assert git_state(None) == GitState(None, None)
    assert git_state(tmp_path) == GitState(None, None)  # not a repository
    assert find_repo_root(root / "sub" / "dir") == root
    assert find_repo_root(tmp_path) is None


def test_host_environment_names_the_machine_and_keeps_the_extra_keys_last() -> None:
    environment = host_environment(gpu=None, load=[0.5])
    assert list(environment) == ["python", "platform", "machine", "cpu_count", "gpu", "load"]
    assert environment["python"].count(".") == 2
    assert environment["load"] == [0.5]
