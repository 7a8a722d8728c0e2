"""``scripts/ultralytics_gpu.py`` is a launcher of ``python -m musgd.bench ultralytics``: the
benchmark lives in the package (``tests/musgd/bench/test_ul_*.py``)."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "ultralytics_gpu.py"


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    return subprocess.run(
        [sys.executable, str(SCRIPT), *argv],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=120,
    )


def test_the_launcher_runs_the_package_subcommand() -> None:
    done = _run("--help")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: python -m musgd.bench ultralytics")
    bad = _run("--device", "cpu", "--task", "depth")
    assert bad.returncode == 2
    assert "invalid choice: 'depth'" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_the_launcher_is_a_few_lines_of_no_logic_of_its_own() -> None:
    tree = ast.parse(SCRIPT.read_text(encoding="utf-8"))
    functions = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.ClassDef)]
    assert functions == []
    code_lines = [
        line
        for line in SCRIPT.read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    assert len(code_lines) < 20
