"""Evidence JSON: schema, environment, git state and the optimizer source hashes."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import pytest
import torch

import musgd
from musgd.bench import _evidence
from musgd.bench._evidence import (
    SCHEMA,
    build_evidence,
    check_commit,
    default_evidence_path,
    find_repo_root,
    git_state,
    is_full_commit,
    source_hashes,
    write_evidence,
)

CPU = torch.device("cpu")
PACKAGE = Path(musgd.__file__).resolve().parent


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    pkg = root / "src" / "musgd"
    (pkg / "bench").mkdir(parents=True)
    (root / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    (pkg / "_a.py").write_text("A = 1\n")
    (pkg / "_b.py").write_text("B = 2\n")
    (pkg / "bench" / "_c.py").write_text("C = 3\n")  # not an optimizer source
    _git(root, "init", "-q")
    _git(root, "add", ".")
    _git(root, "-c", "user.name=t", "-c", "user.email=t@e", "commit", "-qm", "init")
    return root


def test_source_hashes_cover_only_top_level_optimizer_files(repo: Path) -> None:
    hashes = source_hashes(repo, repo / "src" / "musgd")
    assert hashes == {
        "src/musgd/_a.py": hashlib.sha256(b"A = 1\n").hexdigest(),
        "src/musgd/_b.py": hashlib.sha256(b"B = 2\n").hexdigest(),
    }
    # Outside a repository the paths are relative to the package's parent.
    assert set(source_hashes(None, repo / "src" / "musgd")) == {"musgd/_a.py", "musgd/_b.py"}


def test_source_hashes_of_this_package() -> None:
    hashes = source_hashes(find_repo_root())
    assert any(k.endswith("musgd/_optimizer.py") for k in hashes)
    assert not any("bench" in k for k in hashes)
    for key, digest in hashes.items():
        path = PACKAGE / Path(key).name
        assert digest == hashlib.sha256(path.read_bytes()).hexdigest()


def test_git_state_commit_and_dirty(repo: Path) -> None:
    head = _git(repo, "rev-parse", "HEAD")
    assert git_state(repo) == _evidence.GitState(head, False)
    (repo / "untracked.txt").write_text("x")  # untracked files do not make the tree dirty
    assert git_state(repo).dirty is False
    (repo / "src" / "musgd" / "_a.py").write_text("A = 9\n")
    assert git_state(repo) == _evidence.GitState(head, True)
    assert git_state(None) == _evidence.GitState(None, None)
    assert find_repo_root(repo / "src" / "musgd") == repo
    assert find_repo_root(repo.parent) is None


def test_build_evidence_fields(monkeypatch: pytest.MonkeyPatch, repo: Path) -> None:
    monkeypatch.setattr(_evidence, "_PACKAGE_DIR", repo / "src" / "musgd")
    monkeypatch.setattr(_evidence, "find_repo_root", lambda start=None: repo)
    doc = build_evidence("optimizer-step", {"x": 1}, device=CPU, argv=["optimizer"])
    assert doc["schema"] == SCHEMA == "wpgate-evidence/1"
    assert doc["git_commit"] == _git(repo, "rev-parse", "HEAD")
    assert doc["git_dirty"] is False
    assert doc["results"] == {"x": 1}
    env = doc["environment"]
    assert set(env) >= {"python", "torch", "cuda", "gpu", "driver", "cpu", "platform"}
    assert env["torch"] == torch.__version__
    assert env["gpu"] is None  # a CPU run names no GPU
    assert doc["command"][1:] == ["-m", "musgd.bench", "optimizer"]
    script = build_evidence("x", {}, device=CPU, argv=["--a"], program=("scripts/s.py",))
    assert script["command"][1:] == ["scripts/s.py", "--a"]  # a script names itself


def test_write_evidence_default_name_and_explicit_paths(tmp_path: Path) -> None:
    doc = build_evidence("training-step", {"n": 2}, device=CPU, argv=[])
    name = default_evidence_path(doc).name
    assert name.startswith("musgd-training-step-cpu-")
    assert name.endswith(".json")
    written = write_evidence(doc, tmp_path)  # an existing directory
    assert written.parent == tmp_path
    assert written.name == name
    assert json.loads(written.read_text()) == doc
    file = write_evidence(doc, tmp_path / "sub" / "e.json")  # a file path, parents made
    assert file == tmp_path / "sub" / "e.json"
    assert file.is_file()


def test_write_evidence_unwritable_raises_oserror(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    doc = build_evidence("demo", {}, device=CPU, argv=[])
    with pytest.raises(OSError, match=r"file"):  # the blocking file's path
        write_evidence(doc, blocker / "e.json")


def test_commit_argument_fills_in_only_when_git_cannot(
    monkeypatch: pytest.MonkeyPatch, repo: Path
) -> None:
    head = _git(repo, "rev-parse", "HEAD")
    monkeypatch.setattr(_evidence, "find_repo_root", lambda start=None: repo)
    doc = build_evidence("demo", {}, device=CPU, argv=[], commit=head[:12])
    assert (doc["git_commit"], doc["git_commit_source"]) == (head, "git")
    with pytest.raises(ValueError, match="disagrees with this checkout's HEAD"):
        build_evidence("demo", {}, device=CPU, argv=[], commit="0" * 40)
    monkeypatch.setattr(_evidence, "find_repo_root", lambda start=None: None)
    doc = build_evidence("demo", {}, device=CPU, argv=[], commit="abc1234" * 5 + "abcde")
    assert (doc["git_commit"], doc["git_dirty"], doc["git_commit_source"]) == (
        "abc1234" * 5 + "abcde",
        None,
        "argument",
    )
    with pytest.raises(ValueError, match="must be the full sha"):
        build_evidence("demo", {}, device=CPU, argv=[], commit="abc1234")
    with pytest.raises(ValueError, match="hex git sha"):
        check_commit("HEAD")


@pytest.mark.parametrize(
    ("text", "full"),
    [
        ("a" * 40, True),  # SHA-1
        ("0" * 64, True),  # SHA-256
        ("a" * 39, False),
        ("a" * 41, False),
        ("A" * 40, False),  # git prints lowercase
        ("HEAD~1", False),
        ("g" * 40, False),
    ],
)
def test_a_full_commit_is_40_or_64_lowercase_hex_digits(text: str, full: bool) -> None:
    assert is_full_commit(text) is full
