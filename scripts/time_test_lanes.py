"""Time the test lanes: `make test-fast` (no slow or CUDA tests) against the whole suite.

Runs each lane's pytest command ``--runs`` times in this checkout (the Ultralytics venv is not
part of either: `make test` runs it separately) and writes a ``wpgate-evidence/1`` file with the
wall seconds, pytest's summary line and the machine's load before and after.

    .venv/bin/python scripts/time_test_lanes.py [--runs 1] [--out docs/evidence/test-lanes.json]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

from wpgate import evidence

REPO = Path(__file__).resolve().parent.parent
PYTEST = [
    sys.executable,
    "-m",
    "pytest",
    "-q",
    "-p",
    "no:cacheprovider",
    "--ignore=tests/ultralytics",
]
LANES = {
    "test-fast": [*PYTEST, "-m", "not slow and not cuda"],
    "test (without tests/ultralytics)": PYTEST,
}
# What decides which tests each lane runs: the Makefile target, the markers, this script.
MEASURED = ("Makefile", "pyproject.toml", "scripts/time_test_lanes.py")


def run_lane(command: list[str]) -> tuple[float, int, str]:
    """Wall seconds, exit code and pytest's last line for one run of ``command``."""
    started = time.perf_counter()
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - started
    lines = done.stdout.strip().splitlines() or ["no output"]
    return elapsed, done.returncode, lines[-1]


def main(argv: list[str] | None = None) -> int:
    """Time every lane ``--runs`` times, then write the evidence file."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--out", type=Path, default=REPO / "docs/evidence/test-lanes.json")
    args = parser.parse_args(argv)
    load_before = os.getloadavg()
    results: dict[str, object] = {}
    for name, command in LANES.items():
        runs = [run_lane(command) for _ in range(args.runs)]
        results[name] = {
            "command": " ".join(["python", *command[1:]]),
            "wall_seconds": [round(seconds, 1) for seconds, _, _ in runs],
            "exit_codes": sorted({code for _, code, _ in runs}),
            "summary": runs[-1][2],
        }
        print(f"{name}: {[round(s, 1) for s, _, _ in runs]} s; {runs[-1][2]}")
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
