"""Throughput of ``wpgate check`` on a generated docs tree: 1,000 work packages, 500 sources and
2,000 ``[MEASURED]`` claims.

Builds a temporary git repository: a provenance table of 500 sources (with first-use rows and a
history whose ``Provenance:`` trailers cite them), 1,000 work-package pages over 10 phases with
dependencies and gates, 50 evidence files bound to a commit by source hashes, and two claims per
page that quote the evidence's numbers (20 of them carry an ``identical A..B -- path`` marker).
The tree is clean by construction: the run must report 0 findings, so the benchmark also checks
the linters. Each run is the CLI as a subprocess (``python -m wpgate check``, interpreter start
included), history checks on. Writes ``docs/evidence/check-throughput.json``.

    .venv/bin/python scripts/bench_check.py [--runs 7] [--out docs/evidence/check-throughput.json]

``--scale 4`` multiplies the packages, sources and claims by four (the issue-#18 budget: 2 s);
``--src DIR`` times another source tree (an older wpgate) on the same generated tree.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from wpgate.evidence import (
    GitState,
    evidence_document,
    git_state,
    host_environment,
    source_hashes,
    write_evidence,
)

REPO = Path(__file__).resolve().parent.parent
PACKAGES, SOURCES, CLAIMS, EVIDENCE_FILES, PHASES = 1000, 500, 2000, 50, 10
IDENTICAL_MARKERS = 20
# The code the measurement runs on; their hashes go into the evidence file.
MEASURED = (
    "src/wpgate/_docs.py",
    "src/wpgate/_documents.py",
    "src/wpgate/_evidence_tree.py",
    "src/wpgate/project_index.py",
    "src/wpgate/records.py",
    "src/wpgate/_git.py",
    "src/wpgate/_config.py",
    "src/wpgate/_output.py",
    "src/wpgate/_model.py",
    "src/wpgate/cli.py",
    "src/wpgate/references.py",
    "src/wpgate/parsers/markdown.py",
    "src/wpgate/parsers/front_matter.py",
    "src/wpgate/parsers/provenance.py",
    "src/wpgate/parsers/work_packages.py",
    "src/wpgate/parsers/evidence.py",
    "src/wpgate/parsers/changelog.py",
    "src/wpgate/rules/provenance.py",
    "src/wpgate/rules/work_packages.py",
    "src/wpgate/rules/evidence.py",
    "src/wpgate/rules/changelog.py",
    "scripts/bench_check.py",
)


def _git(root: Path, *args: str) -> str:
    """Run git in the generated repository with a fixed identity and dates."""
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "bench",
        "GIT_AUTHOR_EMAIL": "bench@example.invalid",
        "GIT_COMMITTER_NAME": "bench",
        "GIT_COMMITTER_EMAIL": "bench@example.invalid",
        "GIT_AUTHOR_DATE": "2026-11-29T12:00:00+00:00",
        "GIT_COMMITTER_DATE": "2026-11-29T12:00:00+00:00",
    }
    done = subprocess.run(
        ["git", "-C", str(root), *args], env=env, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def _write(root: Path, rel: str, text: str) -> None:
    """Write ``text`` to ``root/rel``, creating folders."""
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def build_tree(
    root: Path,
    *,
    packages: int = PACKAGES,
    sources: int = SOURCES,
    evidence_files: int = EVIDENCE_FILES,
    phases: int = PHASES,
    markers: int = IDENTICAL_MARKERS,
) -> None:
    """Generate the repository: docs, sources, tests, evidence and two commits.

    Two claims per work package; the defaults are the benchmark's sizes.
    """
    _git(root, "init", "-q")
    _write(
        root,
        "pyproject.toml",
        '[project]\nname = "bench"\n\n[tool.wpgate.provenance]\nhistory = true\n',
    )
    _write(root, "CHANGELOG.md", "# Changelog\n\n## [Unreleased]\n\n- `src/pkg/m0.py`\n")
    _write(root, "tests/test_gate.py", "def test_gate():\n    pass\n")
    for n in range(20):
        _write(root, f"src/pkg/m{n}.py", f"VALUE = {n}\n")
    rows = "\n".join(f"| R{n} | Reference {n} | n/a | paper |" for n in range(1, sources + 1))
    uses = "\n".join(f"| 2026-11-29 | R{n} | use {n} |" for n in range(1, sources + 1))
    _write(
        root,
        "docs/PROVENANCE.md",
        "# Provenance\n\n## Sources\n\n| ID | Reference | Licence | Role |\n| --- | --- | --- "
        f"| --- |\n{rows}\n\n## Placeholders\n\n| ID | Status |\n| --- | --- |\n\n"
        f"## First-use log\n\n| Date | Source | Used for |\n| --- | --- | --- |\n{uses}\n",
    )
    for phase in range(1, phases + 1):
        _write(
            root,
            f"docs/engineering/phase-{phase:02d}-p.md",
            f'---\nphase: {phase}\ntitle: "Phase {phase}"\n---\n\n# Phase {phase}\n',
        )
    _git(root, "add", "-A")
    _git(root, "commit", "-q", "-m", f"feat: sources\n\nProvenance: R1-R{sources}")
    measured_commit = _git(root, "rev-parse", "HEAD")
    for index in range(evidence_files):
        hashes = source_hashes(
            root, (root / f"src/pkg/m{n}.py" for n in (index % 20, (index + 1) % 20))
        )
        document = {
            "schema": "wpgate-evidence/1",
            "environment": {"torch": "2.13.0+cpu", "gpu": None},
            "git_commit": measured_commit,
            "git_dirty": False,
            "sources": hashes,
            "results": {
                "step": {"median_ms": 10 + index + 0.1234, "min_ms": 9.5 + index, "max_ms": 12.25},
                "saved": 0.1001,
            },
        }
        write_evidence(document, root / f"docs/evidence/e{index:02d}.json")
    for index in range(packages):
        wp_id = f"{index + 1:04d}"
        depends = f'["{index:04d}"]' if index else "[]"
        status = "done" if index % 3 == 0 else "todo"
        evidence = index % evidence_files
        median = f"{10 + evidence + 0.1234:.1f}"
        minimum = f"{9.5 + evidence:.1f}"
        marker = ""
        if index < markers:
            marker = f" `identical {measured_commit[:10]}..HEAD -- src/pkg/m{evidence % 20}.py`"
        claims = (
            f"[MEASURED] The step takes {median} ms (from {minimum} to 12.25) on torch 2.13.0, "
            f"see [evidence](../evidence/e{evidence:02d}.json).{marker}\n\n"
            f"[MEASURED] It saves 10.01% per step "
            f"([evidence](../evidence/e{evidence:02d}.json)).\n"
        )
        _write(
            root,
            f"docs/work_packages/wp-{wp_id}.md",
            f'---\nid: "{wp_id}"\ntitle: "Package {wp_id}"\nphase: {index % phases + 1}\n'
            f"status: {status}\ndepends_on: {depends}\n"
            f'gate: ["tests/test_gate.py::test_gate"]\n---\n\n# WP-{wp_id}\n\n{claims}',
        )
    _git(root, "add", "-A")
    _git(root, "commit", "-q", "-m", "docs: registry and evidence\n\nProvenance: R1, R2")


def measure(root: Path, runs: int, src: Path = REPO / "src") -> tuple[list[float], str]:
    """Wall seconds of ``runs`` CLI runs (after one warm-up) and the last run's output."""
    command = [sys.executable, "-m", "wpgate", "check", "--root", str(root)]
    env = {**os.environ, "PYTHONPATH": str(src)}
    # Bytecode caching on, as for an installed package: the warm-up run writes the cache.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    output = ""
    times: list[float] = []
    for run in range(runs + 1):
        start = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
        elapsed = time.perf_counter() - start
        output = done.stdout + done.stderr
        if done.returncode != 0:
            raise SystemExit(f"wpgate check failed (exit {done.returncode}):\n{output}")
        if run:  # the first run warms the page cache and the bytecode cache
            times.append(elapsed)
    return times, output


def main(argv: list[str] | None = None) -> int:
    """Build the tree, time the runs, write the evidence file."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--out", type=Path, default=REPO / "docs/evidence/check-throughput.json")
    parser.add_argument("--scale", type=int, default=1, help="multiply the workload")
    parser.add_argument("--src", type=Path, default=REPO / "src", help="wpgate source tree")
    args = parser.parse_args(argv)
    scale = args.scale
    with tempfile.TemporaryDirectory(prefix="wpgate-bench-") as folder:
        root = Path(folder)
        built = time.perf_counter()
        build_tree(root, packages=PACKAGES * scale, sources=SOURCES * scale)
        build_s = time.perf_counter() - built
        times, output = measure(root, args.runs, args.src.resolve())
    state = git_state(REPO, MEASURED)
    summary = output.strip().splitlines()[-1]
    document = evidence_document(
        "check-throughput",
        command=["python", "scripts/bench_check.py", *(argv or sys.argv[1:])],
        environment=host_environment(
            cpu=platform.processor() or platform.machine(),
            git=subprocess.run(
                ["git", "--version"], capture_output=True, text=True, check=False
            ).stdout.strip(),
        ),
        # A measured file that differs from HEAD makes the commit meaningless: record none.
        git=GitState(None if state.dirty else state.commit, state.dirty),
        sources=source_hashes(REPO, (REPO / rel for rel in MEASURED)),
        results={
            "workload": {
                "work_packages": PACKAGES * scale,
                "sources": SOURCES * scale,
                "claims": CLAIMS * scale,
                "scale": scale,
                "evidence_files": EVIDENCE_FILES,
                "phases": PHASES,
                "identical_markers": IDENTICAL_MARKERS,
            },
            "runs": len(times),
            "check_s": {
                "median": round(statistics.median(times), 3),
                "min": round(min(times), 3),
                "max": round(max(times), 3),
                "samples": [round(t, 4) for t in times],
            },
            "budget_s": 2.0,
            "within_budget": max(times) < 2.0,
            "findings": 0,
            "summary_line": summary,
            "build_tree_s": round(build_s, 2),
            "includes": "interpreter start, config, every docs linter, git (history, hashes, "
            "markers), report",
        },
    )
    write_evidence(document, args.out)
    print(
        f"wpgate check: median {document['results']['check_s']['median']} s "
        f"(min {min(times):.3f}, max {max(times):.3f}) over {len(times)} runs; {summary}"
    )
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
