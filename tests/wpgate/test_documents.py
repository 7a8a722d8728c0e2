"""Tests for the bounded reads every repository file goes through (``wpgate._documents``).

Links out of the repository, FIFOs, devices and oversized files are refused before a byte is
read; the cases that used to hang or exhaust memory run in a subprocess under a generous
timeout, so a regression fails the test instead of stalling the suite.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from git_helpers import REPO

from wpgate._config import ConfigError, load_config
from wpgate._documents import MAX_FILE_BYTES, ReadRefusedError, read_bounded, read_text
from wpgate.references import resolve_node_id

needs_fifo = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
needs_dev_zero = pytest.mark.skipif(not Path("/dev/zero").exists(), reason="needs /dev/zero")


def _python(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Python with this tree's wpgate, killed (failing the test) after a generous 60 s."""
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    return subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=cwd,
        check=False,
    )


def _wpgate(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``python -m wpgate ARGS --root CWD``."""
    return _python("-m", "wpgate", *args, "--root", str(cwd), cwd=cwd)


def test_a_regular_file_inside_the_repository_is_read(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_bytes(b"text\n")
    (tmp_path / "link.md").symlink_to("docs/a.md")
    assert read_bounded(tmp_path, "docs/a.md") == b"text\n"
    assert read_bounded(tmp_path, "link.md") == b"text\n"  # a link inside the tree is fine


def test_a_missing_file_is_file_not_found(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_bounded(tmp_path, "none.md")


@pytest.mark.parametrize(
    ("make", "why"),
    [
        (lambda p: p.mkdir(), "a.md is a directory, not a regular file; replace it"),
        (lambda p: p.symlink_to(p), "a.md is a symbolic link loop; replace it with a file"),
    ],
)
def test_what_is_not_a_regular_file_is_refused(tmp_path: Path, make: object, why: str) -> None:
    assert callable(make)
    make(tmp_path / "a.md")
    with pytest.raises(ReadRefusedError) as error:
        read_bounded(tmp_path, "a.md")
    assert str(error.value) == why


def test_a_link_out_of_the_repository_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    root.mkdir()
    (tmp_path / "secret.md").write_text("outside\n", encoding="utf-8")
    (root / "a.md").symlink_to(tmp_path / "secret.md")
    with pytest.raises(ReadRefusedError, match="leads out of the repository"):
        read_bounded(root, "a.md")


def test_a_file_over_the_limit_is_refused_and_the_limit_itself_is_read(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_bytes(b"x" * 10)
    assert read_bounded(tmp_path, "a.md", limit=10) == b"x" * 10
    with pytest.raises(ReadRefusedError, match="over wpgate's limit of 9 bytes"):
        read_bounded(tmp_path, "a.md", limit=9)
    assert MAX_FILE_BYTES == 16 << 20


@needs_fifo
def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "a.md")
    code = (
        "import sys\nfrom pathlib import Path\n"
        "from wpgate._documents import ReadRefusedError, read_bounded\n"
        "try:\n"
        f"    read_bounded(Path({str(tmp_path)!r}), 'a.md')\n"
        "except ReadRefusedError as exc:\n"
        "    print(exc)\n"
    )
    done = _python("-c", code)
    assert done.stdout.strip() == "a.md is a FIFO (named pipe), not a regular file; replace it"


def test_a_nul_byte_in_a_document_is_a_problem_on_its_line(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_bytes(b"# Title\n\nsome\0text\n")
    text, problem = read_text(tmp_path, "a.md")
    assert text is None
    assert problem is not None
    assert (problem.path, problem.line) == ("a.md", 3)
    assert "holds a NUL byte" in problem.message


@needs_dev_zero
def test_pyproject_linked_to_dev_zero_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").symlink_to("/dev/zero")
    with pytest.raises(ConfigError) as error:
        load_config(tmp_path)
    assert str(error.value) == (
        "pyproject.toml: is a symbolic link that leads out of the repository (to /dev/zero); "
        "replace it with the file itself"
    )
    done = _wpgate("docs", cwd=tmp_path)  # used to grow memory until the process was killed
    assert done.returncode == 2
    assert "leads out of the repository (to /dev/zero)" in done.stderr
    assert "Traceback" not in done.stderr


@needs_fifo
def test_a_fifo_at_a_gate_path_is_a_finding_not_a_hang(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    os.mkfifo(tmp_path / "tests" / "test_pipe.py")
    assert resolve_node_id(tmp_path, "tests/test_pipe.py::test_x") == (
        "tests/test_pipe.py is a FIFO (named pipe), not a regular file; replace it"
    )
    message = tmp_path / "message.txt"
    message.write_text(
        "fix(x): a change\n\nBody.\n\nGate: tests/test_pipe.py::test_x\n", encoding="utf-8"
    )
    done = _wpgate("trailers", str(message), cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    assert "tests/test_pipe.py is a FIFO (named pipe)" in done.stdout


@needs_fifo
def test_a_fifo_at_a_work_package_path_is_a_finding_not_a_hang(tmp_path: Path) -> None:
    (tmp_path / "docs" / "work_packages").mkdir(parents=True)
    os.mkfifo(tmp_path / "docs" / "work_packages" / "wp-001.md")
    done = _wpgate("wp", cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    assert "docs/work_packages/wp-001.md is a FIFO (named pipe)" in done.stdout


def test_a_nul_byte_in_a_work_package_is_a_finding(tmp_path: Path) -> None:
    (tmp_path / "docs" / "work_packages").mkdir(parents=True)
    page = tmp_path / "docs" / "work_packages" / "wp-001.md"
    page.write_bytes(b'---\nid: "001"\n---\n\n# WP-001 \0\n')
    done = _wpgate("wp", cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    assert "docs/work_packages/wp-001.md" in done.stdout
    assert "holds a NUL byte" in done.stdout
