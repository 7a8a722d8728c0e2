"""The test suite's own rules (issue #34, tests item; the xdist workers' threads of
tests/conftest.py).

No test module edits ``sys.path``: the helper folders are on pytest's ``pythonpath``
(``[tool.pytest.ini_options]`` in pyproject.toml, importlib mode), and a subprocess a test starts
gets ``PYTHONPATH`` in its environment. A ``sys.path`` edit in one test module leaks into every
module collected after it, so an import can pass or fail depending on collection order. Read with
``ast``: the test modules are not imported.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
EDITS = frozenset({"insert", "append", "extend"})


def sys_path_edits(source: str, filename: str = "<test>") -> list[str]:
    """``file:line: sys.path.<edit>`` for each call that edits ``sys.path`` in ``source``."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source, filename)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        target = node.func.value
        if (
            node.func.attr in EDITS
            and isinstance(target, ast.Attribute)
            and target.attr == "path"
            and isinstance(target.value, ast.Name)
            and target.value.id == "sys"
        ):
            found.append((node.lineno, f"{filename}:{node.lineno}: sys.path.{node.func.attr}"))
    return [hit for _, hit in sorted(found)]


def test_the_check_finds_each_sys_path_edit_and_nothing_else() -> None:
    planted = (
        "import sys\n"
        "sys.path.insert(0, 'here')\n"
        "def f():\n"
        "    sys.path.append('there')\n"
        "sys.path.extend(['a'])\n"
        "paths = []\n"
        "paths.insert(0, 'fine')\n"
        "print(sys.path)\n"
    )
    assert sys_path_edits(planted, "planted.py") == [
        "planted.py:2: sys.path.insert",
        "planted.py:4: sys.path.append",
        "planted.py:5: sys.path.extend",
    ]


def test_no_test_module_edits_sys_path() -> None:
    found = [
        hit
        for path in sorted(TESTS.rglob("*.py"))
        for hit in sys_path_edits(path.read_text(encoding="utf-8"), str(path.relative_to(TESTS)))
    ]
    assert not found, (
        "test modules edit sys.path; put the helper's folder on [tool.pytest.ini_options] "
        "pythonpath in pyproject.toml (or PYTHONPATH in a subprocess's env) instead:\n"
        + "\n".join(found)
    )


_THREADS_TEST = """
import os

def test_threads():
    cores = len(os.sched_getaffinity(0))
    assert os.environ["OMP_NUM_THREADS"] == os.environ["MKL_NUM_THREADS"] == str(max(1, cores // 2))

def test_other():
    assert os.environ["PYTEST_XDIST_WORKER_COUNT"] == "2"
"""


def test_two_xdist_workers_each_get_their_share_of_the_cores(tmp_path: Path) -> None:
    pytest.importorskip("xdist", reason="pytest-xdist is in the dev extra")
    shutil.copy(TESTS / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_threads.py").write_text(_THREADS_TEST, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k not in {"OMP_NUM_THREADS", "MKL_NUM_THREADS"}}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "2", "-p", "no:cacheprovider", str(tmp_path)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:]
    assert "2 passed" in done.stdout
