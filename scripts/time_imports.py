"""Import cost of GitPython against wpgate's command line (DECISIONS D7).

Each sample is a fresh interpreter run with ``-X importtime``: the cumulative microseconds of
the top-level module's import (``git`` for GitPython, ``wpgate.cli``). Writes a
``wpgate-evidence/1`` file with the medians and every sample.

    .venv/bin/python scripts/time_imports.py [--runs 7] [--out docs/evidence/import-times.json]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

from wpgate import evidence

REPO = Path(__file__).resolve().parent.parent
MODULES = ("git", "wpgate.cli")
MEASURED = ("src/wpgate/cli.py", "scripts/time_imports.py")


def cumulative_us(module: str) -> int:
    """The cumulative import time of ``module`` in a fresh interpreter, in microseconds."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", f"import {module}"],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"`import {module}` failed; install it to time it:\n{done.stderr[-500:]}")
    for line in done.stderr.splitlines():
        parts = [p.strip() for p in line.removeprefix("import time:").split("|")]
        if len(parts) == 3 and parts[2] == module:
            return int(parts[1])
    raise SystemExit(f"no import time for {module} in:\n{done.stderr[-2000:]}")


def main(argv: list[str] | None = None) -> int:
    """Sample each module ``--runs`` times (interleaved), then write the evidence file."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--out", type=Path, default=REPO / "docs/evidence/import-times.json")
    args = parser.parse_args(argv)
    cumulative_us(MODULES[0])  # warm the bytecode and page caches
    samples: dict[str, list[int]] = {m: [] for m in MODULES}
    for _ in range(args.runs):
        for module in MODULES:
            samples[module].append(cumulative_us(module))
    results = {
        module: {
            "median_ms": round(statistics.median(values) / 1000, 1),
            "min_ms": round(min(values) / 1000, 1),
            "max_ms": round(max(values) / 1000, 1),
            "samples_us": values,
        }
        for module, values in samples.items()
    }
    document = evidence.evidence_document(
        "import-times",
        results,
        command=["python", "scripts/time_imports.py", *(argv or sys.argv[1:])],
        environment=evidence.host_environment(
            load_average_1_5_15_min=[round(x, 2) for x in os.getloadavg()]
        ),
        git=evidence.git_state(REPO, MEASURED),
        sources=evidence.source_hashes(REPO, (REPO / rel for rel in MEASURED)),
    )
    for module, entry in results.items():
        print(f"import {module}: median {entry['median_ms']} ms")
    print(f"wrote {evidence.write_evidence(document, args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
