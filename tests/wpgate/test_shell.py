"""Tests for the CLI's shared shell (``wpgate._shell``): where the repository root is found."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest
from git_helpers import governed_repository, new_repository
from test_cli import GOOD  # a governed message for the fixture repository

from wpgate._shell import repository_root
from wpgate.cli import main


def run_here(*args: str, stdin: bytes = b"") -> tuple[int, str, str]:
    """``main(args)`` run from the current folder, with no ``--root``: (status, out, err)."""
    out, err = io.StringIO(), io.StringIO()
    old = sys.stdin, sys.stdout, sys.stderr
    sys.stdin = io.TextIOWrapper(io.BytesIO(stdin))
    sys.stdout, sys.stderr = out, err
    try:
        status = main(list(args))
    finally:
        sys.stdin, sys.stdout, sys.stderr = old
    return status, out.getvalue(), err.getvalue()


def test_the_root_is_the_nearest_configured_folder_up_to_the_work_trees_top(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = new_repository(tmp_path)
    deep = repo / "docs" / "work_packages"
    deep.mkdir(parents=True)
    monkeypatch.chdir(deep)
    assert repository_root(None) == repo  # no configuration: the work tree's top
    (repo / "wpgate.toml").write_text("[trailers]\n", encoding="utf-8")
    assert repository_root(None) == repo
    # A sub-project with its own configuration is its own root, nearer than the top.
    sub = repo / "docs"
    (sub / "pyproject.toml").write_text("[tool.wpgate]\n", encoding="utf-8")
    assert repository_root(None) == sub
    # A pyproject.toml that does not configure wpgate is passed by; an unreadable one is not,
    # so that loading it says what is wrong with it.
    (sub / "pyproject.toml").write_text("[project]\nname = 'x'\n", encoding="utf-8")
    assert repository_root(None) == repo
    (sub / "pyproject.toml").write_text("[tool.wpgate\n", encoding="utf-8")
    assert repository_root(None) == sub
    assert repository_root(str(deep)) == deep  # --root is taken as it is


def test_outside_any_repository_the_root_is_the_current_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "plain" / "folder"
    folder.mkdir(parents=True)
    monkeypatch.chdir(folder)
    if any((p / ".git").exists() for p in (folder, *folder.parents)):
        pytest.skip("the temporary folder lies inside a git work tree")
    assert repository_root(None) == folder


def test_commands_run_from_a_subfolder_find_the_registry_and_write_at_the_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = governed_repository(tmp_path)
    monkeypatch.chdir(repo / "tests")
    status, out, err = run_here("trailers", "-", stdin=GOOD)
    assert (status, err) == (0, ""), out  # WP 004 is found in the root's registry
    # The registry linted is the root's, as --root names it (not "docs/work_packages does
    # not exist" under tests/).
    assert run_here("wp") == run_here("wp", "--root", str(repo))
    monkeypatch.chdir(repo / "docs")
    status, out, err = run_here("new-wp", "005", "--title", "From a subfolder", "--phase", "1")
    assert status == 0, err
    assert (repo / "docs" / "work_packages" / "wp-005.md").is_file()
    assert not (repo / "docs" / "docs").exists()
    # The paths written are said as the shell reaches them from here.
    assert "work_packages/wp-005.md" in out.splitlines()


def test_init_from_a_subfolder_writes_at_the_top_and_says_where(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = new_repository(tmp_path)
    (repo / "src").mkdir()
    monkeypatch.chdir(repo / "src")
    status, out, err = run_here("init", "--name", "sub")
    assert status == 0, err
    assert (repo / "mkdocs.yml").is_file()
    assert not (repo / "src" / "mkdocs.yml").exists()
    assert "wrote ../mkdocs.yml" in out.splitlines()
