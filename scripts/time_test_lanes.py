"""Time the test lanes, and optionally CI itself on a clean clone.

Runs each lane's pytest command ``--runs`` times in this checkout, with the Makefile's xdist
options: `make test-fast` (no slow or CUDA tests), `make test`'s main lane (without
tests/ultralytics) and its Ultralytics lane (in ``.venv-ul``, where that venv exists). ``--ci``
also clones HEAD into a temporary folder and times ``bash .ci/run`` there, with the seconds of
each step it prints. Each entry records the wall seconds, the CPU seconds its processes used
(user and system, the children's), the exit codes and pytest's summary line; the file records
the machine's load before and after, since other work on the machine slows every lane.

    .venv/bin/python scripts/time_test_lanes.py [--runs 1] [--lanes ...] [--ci]
        [--out docs/evidence/test-lanes.json]
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wpgate import evidence

REPO = Path(__file__).resolve().parent.parent
UL_PYTHON = REPO / ".venv-ul" / "bin" / "python"
PYTEST = ["-m", "pytest", "-q", "-p", "no:cacheprovider"]


def makefile_options(name: str, makefile: Path = REPO / "Makefile") -> list[str]:
    """The words of the Makefile's ``name :=`` line, its ``$(VAR)`` references expanded: the
    options `make test` passes, so that each lane times what it runs."""
    lines = makefile.read_text(encoding="utf-8").splitlines()
    values = {
        line.partition(":=")[0].strip(): line.partition(":=")[2].split()
        for line in lines
        if ":=" in line and not line.startswith(("\t", "#"))
    }
    if name not in values:
        raise SystemExit(f"{makefile} has no `{name} :=` line: this script times what it names")
    words: list[str] = []
    for word in values[name]:
        inner = word.removeprefix("$(").removesuffix(")")
        words += makefile_options(inner, makefile) if word == f"$({inner})" else [word]
    return words


XDIST = makefile_options("XDIST")
XDIST_FILES = makefile_options("XDIST_FILES")
LANES: dict[str, tuple[Path, list[str]]] = {
    "test-fast": (
        Path(sys.executable),
        [*PYTEST, *XDIST_FILES, "--ignore=tests/ultralytics", "-m", "not slow and not cuda"],
    ),
    "test (without tests/ultralytics)": (
        Path(sys.executable),
        [*PYTEST, *XDIST_FILES, "--ignore=tests/ultralytics"],
    ),
    "test-ultralytics": (UL_PYTHON, [*PYTEST, *XDIST, "tests/ultralytics"]),
}
# What decides which tests each lane runs and how: the Makefile, the markers, the conftest that
# shares the cores, CI's script and this one.
MEASURED = (
    "Makefile",
    "pyproject.toml",
    "tests/conftest.py",
    ".ci/run",
    "scripts/time_test_lanes.py",
)
# The line .ci/run prints after each step.
STEP_LINE = re.compile(r"^ci: (?P<step>.+) took (?P<seconds>\d+) s$", re.MULTILINE)


@dataclass(frozen=True)
class Run:
    """One timed command: wall and CPU seconds, exit code and the last line it printed."""

    wall_seconds: float
    cpu_seconds: float
    exit_code: int
    last_line: str
    output: str


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_timed(command: list[str], cwd: Path, env: dict[str, str] | None = None) -> Run:
    """Run ``command`` in ``cwd`` to its end and time it."""
    cpu, started = _children_cpu(), time.perf_counter()
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, check=False, env=env)
    wall, used = time.perf_counter() - started, _children_cpu() - cpu
    lines = done.stdout.strip().splitlines() or ["no output"]
    return Run(wall, used, done.returncode, lines[-1], done.stdout + done.stderr)


def step_seconds(output: str) -> dict[str, int]:
    """The seconds of each step in ``output`` of ``.ci/run`` (its ``ci: <step> took N s`` lines)."""
    return {m["step"]: int(m["seconds"]) for m in STEP_LINE.finditer(output)}


def summary(runs: list[Run], command: list[str]) -> dict[str, Any]:
    """The evidence entry of ``runs`` of one ``command``."""
    return {
        "command": " ".join(command),
        "wall_seconds": [round(r.wall_seconds, 1) for r in runs],
        "cpu_seconds": [round(r.cpu_seconds, 1) for r in runs],
        "exit_codes": sorted({r.exit_code for r in runs}),
        "summary": runs[-1].last_line,
    }


def time_ci() -> dict[str, Any]:
    """``bash .ci/run`` on a clean clone of HEAD, in a temporary folder."""
    with tempfile.TemporaryDirectory(prefix="wpgate-ci-") as work:
        clone = Path(work) / "clone"
        subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
        env = {k: v for k, v in os.environ.items() if k not in {"VIRTUAL_ENV", "PYTHONPATH"}}
        run = run_timed(["bash", ".ci/run"], clone, env)
    if run.exit_code != 0:
        print(run.output[-4000:], file=sys.stderr)
    return {
        **summary([run], ["bash", ".ci/run"]),
        "steps_seconds": step_seconds(run.output),
        "target_seconds": 900,
    }


def main(argv: list[str] | None = None) -> int:
    """Time the chosen lanes ``--runs`` times (and CI with ``--ci``), then write the evidence."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--lanes", nargs="*", choices=sorted(LANES), default=sorted(LANES))
    parser.add_argument("--ci", action="store_true", help="also time bash .ci/run on a clone")
    parser.add_argument("--out", type=Path, default=REPO / "docs/evidence/test-lanes.json")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error(f"--runs must be at least 1, got {args.runs}")
    load_before = os.getloadavg()
    results: dict[str, object] = {}
    for name in args.lanes:
        python, command = LANES[name]
        if not python.is_file():
            print(f"{name}: skipped, {python} is missing (make setup-ultralytics builds it)")
            continue
        paths = [str(REPO / "src"), *filter(None, [os.environ.get("PYTHONPATH")])]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
        runs = [run_timed([str(python), *command], REPO, env) for _ in range(args.runs)]
        results[name] = summary(runs, ["python", *command])
        walls = [round(r.wall_seconds, 1) for r in runs]
        print(f"{name}: {walls} s; {runs[-1].last_line}")
    if args.ci:
        ci = time_ci()
        results["ci"] = ci
        print(f"ci: {ci['wall_seconds']} s (exit {ci['exit_codes']}); {ci['steps_seconds']}")
    results["target_fast_seconds"] = 90
    document = evidence.evidence_document(
        "test-lanes",
        results,
        command=["python", "scripts/time_test_lanes.py", *(argv or sys.argv[1:])],
        environment=evidence.host_environment(
            load_average_1_5_15_min_before=[round(x, 2) for x in load_before],
            load_average_1_5_15_min_after=[round(x, 2) for x in os.getloadavg()],
        ),
        git=evidence.git_state(REPO, MEASURED),
        sources=evidence.source_hashes(REPO, (REPO / rel for rel in MEASURED)),
    )
    print(f"wrote {evidence.write_evidence(document, args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
