"""``wpgate init``: a fresh repository passes ``wpgate check``, ``mkdocs build --strict`` and a
commit through the installed pre-commit hooks."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from git_helpers import git, new_repository

from wpgate._init import plan_scaffolds
from wpgate.cli import main
from wpgate.options import DocsLayout

_IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}
_BIN = Path(sys.executable).parent


def _tool_missing(module: str) -> bool:
    done = subprocess.run(
        [sys.executable, "-c", f"import {module}"], capture_output=True, check=False
    )
    return done.returncode != 0


def test_init_writes_every_scaffold_then_keeps_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["init", "--root", str(tmp_path), "--name", "Demo"]) == 0
    out = capsys.readouterr().out
    planned = [s.path for s in plan_scaffolds(tmp_path, "Demo", DocsLayout())]
    for path in planned:
        assert f"wrote {path}" in out
        assert (tmp_path / path).is_file()
    assert "site_name: Demo" in (tmp_path / "mkdocs.yml").read_text(encoding="utf-8")
    (tmp_path / "CHANGELOG.md").write_text("# mine\n\n## [Unreleased]\n", encoding="utf-8")
    # A second run writes nothing: it keeps every file, edits included.
    assert main(["init", "--root", str(tmp_path)]) == 0
    again = capsys.readouterr().out
    assert "wrote" not in again
    assert all(f"kept  {path}" in again for path in planned)
    assert (tmp_path / "CHANGELOG.md").read_text(encoding="utf-8").startswith("# mine")


def test_init_appends_to_a_pyproject_without_a_wpgate_table(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"', encoding="utf-8")
    assert main(["init", "--root", str(tmp_path)]) == 0
    data = tomllib.loads((tmp_path / "pyproject.toml").read_text(encoding="utf-8"))
    assert data["project"] == {"name": "x"}
    assert data["tool"]["wpgate"]["trailers"]["required"] == ["WP", "Provenance", "Gate"]


def test_init_follows_an_existing_docs_layout(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[tool.wpgate.docs]\nprovenance = "notes/PROVENANCE.md"\n'
        'work_packages = "notes/wp"\nengineering = "notes/eng"\nevidence = "notes/ev"\n'
        'claims = ["notes/**/*.md"]\n',
        encoding="utf-8",
    )
    before = (tmp_path / "pyproject.toml").read_text(encoding="utf-8")
    assert main(["init", "--root", str(tmp_path)]) == 0
    assert (tmp_path / "pyproject.toml").read_text(encoding="utf-8") == before
    for path in ("notes/PROVENANCE.md", "notes/wp/index.md", "notes/ev/README.md"):
        assert (tmp_path / path).is_file(), path
    assert "docs_dir: notes" in (tmp_path / "mkdocs.yml").read_text(encoding="utf-8")
    assert main(["check", "--root", str(tmp_path)]) == 0


def test_init_refuses_a_malformed_pyproject(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "pyproject.toml").write_text("[tool\n", encoding="utf-8")
    assert main(["init", "--root", str(tmp_path)]) == 2
    assert "pyproject.toml cannot be read" in capsys.readouterr().err
    assert not (tmp_path / "mkdocs.yml").exists()


def test_new_wp_in_a_fresh_repository_writes_its_phase_page(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["init", "--root", str(tmp_path)]) == 0
    capsys.readouterr()
    assert main(["new-wp", "001", "--title", "One", "--phase", "2", "--root", str(tmp_path)]) == 0
    written = capsys.readouterr().out.split()
    assert written == ["docs/work_packages/wp-001.md", "docs/engineering/phase-02.md"]
    assert main(["wp", "--root", str(tmp_path)]) == 0
    # Once a phase page exists, a typo in the phase is refused instead of a second page.
    assert main(["new-wp", "002", "--title", "Two", "--phase", "3", "--root", str(tmp_path)]) == 2
    assert "write docs/engineering/phase-03.md first" in capsys.readouterr().err


def test_check_counts_no_page_when_the_registry_folder_is_missing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["wp", "--root", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "WPG303" in out
    assert "0 pages checked" in out


@pytest.mark.slow
def test_fresh_repository_checks_builds_and_commits_through_the_hooks(tmp_path: Path) -> None:
    missing = [m for m in ("mkdocs", "material", "pre_commit") if _tool_missing(m)]
    if missing and not _IN_CI:
        pytest.skip(f"needs {', '.join(missing)} (pip install -e '.[docs,dev]')")
    root = new_repository(tmp_path)
    env = {
        **os.environ,
        "PATH": f"{_BIN}{os.pathsep}{os.environ['PATH']}",
        "PRE_COMMIT_HOME": str(tmp_path / "pre-commit-cache"),
        "NO_MKDOCS_2_WARNING": "1",
    }

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(args, cwd=root, env=env, capture_output=True, text=True, check=False)

    assert run(sys.executable, "-m", "wpgate", "init").returncode == 0
    done = run(sys.executable, "-m", "wpgate", "check")
    assert done.returncode == 0, done.stdout + done.stderr
    new_wp = run(sys.executable, "-m", "wpgate", "new-wp", "001", "--title", "T", "--phase", "1")
    assert new_wp.returncode == 0, new_wp.stderr
    done = run(sys.executable, "-m", "wpgate", "check")
    assert done.returncode == 0, done.stdout + done.stderr
    build = run(sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", "../site")
    assert build.returncode == 0, build.stderr
    assert (tmp_path / "site" / "roadmap" / "index.html").is_file()

    install = run(sys.executable, "-m", "pre_commit", "install")
    assert install.returncode == 0, install.stdout + install.stderr
    (root / "tests").mkdir()
    (root / "tests/test_smoke.py").write_text("def test_smoke():\n    pass\n", encoding="utf-8")
    git(root, "add", "-A")
    # The commit-msg hook refuses a message without trailers...
    bad = run("git", "commit", "-q", "-m", "chore: bootstrap wpgate")
    assert bad.returncode != 0
    assert "WPG104" in bad.stdout + bad.stderr
    # ...and lets a governed one through, after the docs hook ran on the new pages.
    message = (
        "chore: bootstrap wpgate\n\nWP: 001\nProvenance: none (scaffold from wpgate init)\n"
        "Gate: tests/test_smoke.py::test_smoke\n"
    )
    good = run("git", "commit", "-q", "-m", message)
    assert good.returncode == 0, good.stdout + good.stderr
    assert "wpgate docs" in good.stdout + good.stderr
    assert git(root, "log", "--format=%s") == "chore: bootstrap wpgate"
