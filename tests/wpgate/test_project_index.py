"""The project index in a git work tree: what git would take, not what a checkout generated."""

from __future__ import annotations

from pathlib import Path

from git_helpers import isolated_git

from wpgate._docs import lint_changelog
from wpgate.project_index import load_project_index

CHANGELOG = """# Changelog

## [Unreleased]

### Added
- `make demo` writes `out/demo.png`; the engine is `src/pkg/engine.py`.
"""


def _tree(root: Path) -> None:
    (root / "src/pkg").mkdir(parents=True)
    (root / "src/pkg/engine.py").write_text("def run():\n    pass\n", encoding="utf-8")
    (root / "Makefile").write_text("demo:\n\tpython -m pkg\n", encoding="utf-8")
    (root / "CHANGELOG.md").write_text(CHANGELOG, encoding="utf-8")
    (root / ".gitignore").write_text("/out/\n*.log\n", encoding="utf-8")


def test_ignored_outputs_are_not_in_the_index_of_a_work_tree(tmp_path: Path) -> None:
    _tree(tmp_path)
    isolated_git(tmp_path, "init", "-q")
    isolated_git(tmp_path, "add", "-A")
    isolated_git(tmp_path, "commit", "-q", "-m", "start")
    (tmp_path / "out").mkdir()
    (tmp_path / "out/other.png").write_bytes(b"")
    (tmp_path / "src/pkg/run.log").write_text("", encoding="utf-8")
    (tmp_path / "src/pkg/new.py").write_text("", encoding="utf-8")  # untracked, not ignored
    (tmp_path / "src/pkg/engine.py").rename(tmp_path / "src/pkg/moved.py")  # gone from disk
    index = load_project_index(tmp_path)
    assert "out" not in index.directories
    assert "out/other.png" not in index.files
    assert "src/pkg/run.log" not in index.files
    assert {"src/pkg/new.py", "src/pkg/moved.py"} <= index.files
    assert "src/pkg/engine.py" not in index.files
    assert {"src", "src/pkg"} <= index.directories


def test_outside_a_work_tree_every_file_on_disk_counts(tmp_path: Path) -> None:
    _tree(tmp_path)
    (tmp_path / "out").mkdir()
    (tmp_path / "out/other.png").write_bytes(b"")
    index = load_project_index(tmp_path)
    assert "out/other.png" in index.files
    assert "out" in index.directories


def test_a_changelog_verdict_does_not_depend_on_a_checkouts_outputs(tmp_path: Path) -> None:
    """A fresh clone has no `out/`; a working checkout may have it, with or without the file
    the changelog names. The verdict is the fresh clone's either way."""
    _tree(tmp_path)
    isolated_git(tmp_path, "init", "-q")
    isolated_git(tmp_path, "add", "-A")
    isolated_git(tmp_path, "commit", "-q", "-m", "start")
    fresh = [(f.rule_id, f.message) for f in lint_changelog(tmp_path)]
    (tmp_path / "out").mkdir()
    (tmp_path / "out/other.png").write_bytes(b"")
    assert [(f.rule_id, f.message) for f in lint_changelog(tmp_path)] == fresh
    (tmp_path / "out/demo.png").write_bytes(b"")
    assert [(f.rule_id, f.message) for f in lint_changelog(tmp_path)] == fresh
    (tmp_path / "src/pkg/engine.py").unlink()  # a promised file that really went
    assert any("src/pkg/engine.py" in f.message for f in lint_changelog(tmp_path))


def test_click_commands_are_found_past_decorators_that_span_lines(tmp_path: Path) -> None:
    """A formatter writes a long `@click.option(...)` over several lines; the command under it
    is still a command (this project's own `wpgate evidence` went missing so)."""
    (tmp_path / "src/pkg").mkdir(parents=True)
    (tmp_path / "src/pkg/cli.py").write_text(
        "import click\n\n\n@click.group()\ndef cli():\n    pass\n\n\n"
        '@cli.command()\n@click.option(\n    "--git/--no-git",\n    default=True,\n'
        '    help="Check with git (the claims\' markers).",\n)\n'
        '@click.option("--collect", is_flag=True)\n'
        "def evidence_check(git, collect):\n    pass\n\n\n"
        '@cli.command(name="new-wp")\nasync def new(\n    x,\n):\n    pass\n\n\n'
        "def helper():\n    pass\n",
        encoding="utf-8",
    )
    commands = load_project_index(tmp_path).commands
    assert {"cli", "evidence-check", "new-wp"} <= commands
    assert "helper" not in commands
