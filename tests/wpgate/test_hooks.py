"""End to end: the published hooks, installed by the real `pre-commit` in a consumer repository.

The hook repository is a fresh commit of this project's hook manifest, packaging and `wpgate`
sources (cloned by pre-commit over file://, never from the network; pre-commit builds the hook's
environment with pip). A bad `git commit` is rejected with the finding, a good one passes, and
the pre-push hook checks exactly the pushed range.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from git_helpers import copy_governed_docs

REPO = Path(__file__).resolve().parents[2]
PRE_COMMIT = Path(sys.executable).with_name("pre-commit")
GOOD = """feat(cli): lint commit trailers

WP: 004
Provenance: R7
Gate: tests/test_gate.py::test_gate
"""

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not PRE_COMMIT.exists() or shutil.which("git") is None, reason="needs pre-commit and git"
    ),
]


def git(
    root: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run git in ``root`` (not checked: hooks are expected to fail)."""
    return subprocess.run(
        ["git", "-C", str(root), *args], capture_output=True, text=True, env=env, check=False
    )


def _hook_repository(path: Path) -> str:
    """A git repository holding the hooks and the package they install; its HEAD sha."""
    path.mkdir()
    for rel in (".pre-commit-hooks.yaml", "pyproject.toml", "README.md"):
        shutil.copy(REPO / rel, path / rel)
    shutil.copytree(
        REPO / "src" / "wpgate",
        path / "src" / "wpgate",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    for args in (("init", "-q", "-b", "main"), ("add", "."), ("commit", "-q", "-m", "hooks")):
        assert git(path, *args).returncode == 0
    return git(path, "rev-parse", "HEAD").stdout.strip()


def test_pre_commit_hooks_end_to_end(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "PRE_COMMIT_HOME": str(tmp_path / "cache"),
        "GIT_AUTHOR_NAME": "Ada Lovelace",
        "GIT_AUTHOR_EMAIL": "ada@example.org",
        "GIT_COMMITTER_NAME": "Ada Lovelace",
        "GIT_COMMITTER_EMAIL": "ada@example.org",
        "PATH": f"{PRE_COMMIT.parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    rev = _hook_repository(tmp_path / "hooks")
    consumer = tmp_path / "consumer"
    remote = tmp_path / "remote.git"
    assert git(tmp_path, "init", "-q", "--bare", str(remote)).returncode == 0
    assert git(tmp_path, "init", "-q", "-b", "main", str(consumer)).returncode == 0
    copy_governed_docs(consumer)
    (consumer / "tests").mkdir()
    (consumer / "tests" / "test_gate.py").write_text("def test_gate():\n    pass\n")
    (consumer / ".pre-commit-config.yaml").write_text(
        "default_install_hook_types: [pre-commit, commit-msg, pre-push]\n"
        "repos:\n"
        f"  - repo: file://{tmp_path / 'hooks'}\n"
        f"    rev: {rev}\n"
        "    hooks:\n"
        "      - id: wpgate-trailers\n"
        "      - id: wpgate-history\n"
    )
    assert git(consumer, "add", ".", env=env).returncode == 0
    assert git(consumer, "commit", "-q", "-m", "initial import", env=env).returncode == 0
    assert git(consumer, "remote", "add", "origin", str(remote)).returncode == 0
    installed = subprocess.run(
        [str(PRE_COMMIT), "install"],
        cwd=consumer,
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert installed.returncode == 0, installed.stderr
    assert (consumer / ".git" / "hooks" / "commit-msg").exists()
    assert (consumer / ".git" / "hooks" / "pre-push").exists()

    bad = git(consumer, "commit", "--allow-empty", "-m", "Update things.", env=env)
    assert bad.returncode != 0
    # git relays the commit-msg hook's output on stderr.
    assert "WPG101 subject 'Update things.' is not `type(scope): summary`" in bad.stderr
    assert "WPG104 the `WP:` trailer is missing" in bad.stderr
    assert git(consumer, "rev-list", "--count", "HEAD").stdout.strip() == "1"

    good = git(consumer, "commit", "--allow-empty", "-m", GOOD, env=env)
    assert good.returncode == 0, good.stdout + good.stderr
    first_governed = git(consumer, "rev-parse", "HEAD").stdout.strip()
    # Untracked on purpose: the governed history starts at the good commit.
    (consumer / "pyproject.toml").write_text(f'[tool.wpgate]\nhistory_start = "{first_governed}"\n')

    pushed = git(consumer, "push", "-q", "origin", "main", env=env)
    assert pushed.returncode == 0, pushed.stdout + pushed.stderr

    sneaked = git(consumer, "commit", "--no-verify", "--allow-empty", "-m", "wip", env=env)
    assert sneaked.returncode == 0
    sneaked_sha = git(consumer, "rev-parse", "HEAD").stdout.strip()
    rejected = git(consumer, "push", "origin", "main", env=env)
    assert rejected.returncode != 0
    output = rejected.stdout + rejected.stderr
    assert f"{sneaked_sha[:12]}:1: WPG101" in output
    assert "trailers: 1 commit checked" in output
    assert git(remote, "rev-parse", "main").stdout.strip() == first_governed
