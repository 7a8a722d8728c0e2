"""scripts/_gpu_env.sh: the set-up the GPU scripts share, and its check of GATE_COMMIT."""

from __future__ import annotations

import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PROBE = (
    f"source {REPO}/scripts/_gpu_env.sh"
    ' && echo "$PWD|$OUT|$PYTHONPATH|${commit[*]}|${GIT_DIR:-}"'
)


def _source(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", PROBE],
        cwd=tmp_path,  # sourced from elsewhere, it moves to the repository root itself
        env={"PATH": "/usr/bin:/bin", "OUT": str(tmp_path / "out"), **env},
        capture_output=True,
        text=True,
        check=False,
    )


def test_the_environment_runs_from_the_root_with_src_first(tmp_path: Path) -> None:
    done = _source(tmp_path, PYTHONPATH="/tmp/ul-site")
    assert done.returncode == 0, done.stderr
    root, out, path, commit, git_dir = done.stdout.strip().split("|")
    assert Path(root) == REPO
    assert Path(out).is_dir()
    assert path == "src:/tmp/ul-site"
    assert (commit, git_dir) == ("", "")


def test_a_full_gate_commit_is_recorded_and_hides_the_stale_git(tmp_path: Path) -> None:
    sha = "0123456789abcdef0123456789abcdef01234567"
    done = _source(tmp_path, GATE_COMMIT=sha)
    assert done.returncode == 0, done.stderr
    _, _, _, commit, git_dir = done.stdout.strip().split("|")
    assert commit == f"--commit {sha}"
    assert git_dir == str(REPO / ".gate-no-git")


def test_a_short_or_padded_gate_commit_is_refused(tmp_path: Path) -> None:
    for bad in ("abe4188", "abe4188" + "0" * 34, "ABE4188" + "0" * 33):
        done = _source(tmp_path, GATE_COMMIT=bad)
        assert done.returncode == 2
        assert "40 hex digits" in done.stderr
        assert done.stdout == ""


def test_gpu_distributed_refuses_a_short_gate_commit(tmp_path: Path) -> None:
    # It sources _gpu_env.sh, so its GATE_COMMIT is checked before any GPU or torch is asked.
    done = subprocess.run(
        ["bash", str(REPO / "scripts/gpu_distributed.sh"), "1"],
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "OUT": str(tmp_path / "out"), "GATE_COMMIT": "abe4188"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2
    assert "40 hex digits" in done.stderr


def test_a_gate_commit_that_is_a_stale_local_head_is_refused(tmp_path: Path) -> None:
    """GATE_COMMIT=$(git rev-parse HEAD) evaluated on the lent machine names its stale .git's
    HEAD: when that HEAD is the named commit but the tree differs from it, the script stops."""
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    (repo / "scripts" / "_gpu_env.sh").write_text((REPO / "scripts" / "_gpu_env.sh").read_text())
    (repo / "f.txt").write_text("committed\n")

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()

    git("init", "-q")
    git("add", "-A")
    git("commit", "-qm", "base")
    head = git("rev-parse", "HEAD")
    probe = f'source {repo}/scripts/_gpu_env.sh && echo "${{commit[*]}}"'
    env = {"PATH": "/usr/bin:/bin", "OUT": str(tmp_path / "out"), "GATE_COMMIT": head}

    def run() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", "-c", probe], env=env, capture_output=True, text=True, check=False
        )

    clean = run()
    assert clean.returncode == 0, clean.stderr
    assert clean.stdout.strip() == f"--commit {head}"
    (repo / "f.txt").write_text("the tree sent to the machine\n")
    stale = run()
    assert stale.returncode == 2
    assert "the .git here is stale" in stale.stderr
