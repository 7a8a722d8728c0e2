"""Git in throwaway repositories for the wpgate tests: one checked runner, two set-ups."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
#: The frozen governance documents of a small governed repository (see fixtures/README.md).
GOVERNED_DOCS = Path(__file__).resolve().parent / "fixtures" / "governed"


def git(
    root: Path, *args: str, data: bytes | None = None, env: Mapping[str, str] | None = None
) -> str:
    """Run git in ``root`` (failing the test if git fails) and return its stdout, stripped."""
    done = subprocess.run(
        ["git", "-C", str(root), *args], input=data, capture_output=True, check=True, env=env
    )
    return done.stdout.decode().strip()


def isolated_git(root: Path, *args: str, date: str | None = None) -> str:
    """:func:`git` with a fixed author and committer, no user configuration (``HOME`` is
    ``root``) and, when given, a fixed author and commit date."""
    env = {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@e",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@e",
        "HOME": str(root),
        "PATH": os.environ["PATH"],
    }
    if date is not None:
        env["GIT_AUTHOR_DATE"] = env["GIT_COMMITTER_DATE"] = date
    return git(root, *args, env=env)


def new_repository(parent: Path) -> Path:
    """An empty repository ``parent/repo`` on branch main, committing as Ada Lovelace."""
    root = parent / "repo"
    git(parent, "init", "-q", "-b", "main", str(root))
    git(root, "config", "user.name", "Ada Lovelace")
    git(root, "config", "user.email", "ada@example.org")
    return root


def copy_governed_docs(root: Path) -> None:
    """Copy the fixture governance documents (``docs/PROVENANCE.md``, ``docs/ASSUMPTIONS.md``,
    ``docs/work_packages/wp-004.md``) into ``root``."""
    shutil.copytree(GOVERNED_DOCS, root, dirs_exist_ok=True)


def governed_repository(parent: Path) -> Path:
    """:func:`new_repository` holding the fixture governance documents and the gate
    ``tests/test_gate.py::test_gate``, in one ungoverned commit."""
    root = new_repository(parent)
    copy_governed_docs(root)
    (root / "tests").mkdir()
    (root / "tests" / "test_gate.py").write_text("def test_gate():\n    pass\n", encoding="utf-8")
    git(root, "add", ".")
    git(root, "commit", "-q", "-m", "initial import")
    return root
