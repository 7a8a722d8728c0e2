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
