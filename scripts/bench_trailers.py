"""Throughput of the commit-trailer linter on a synthetic 10,000-commit history.

Builds a temporary repository with ``git fast-import`` (the governance documents of this
repository plus a test file, then N commits whose messages carry WP / Provenance / Assumptions /
Gate trailers, with a few deliberate findings), then lints the whole range end to end: config,
references, ONE ``git log`` process, parsing, every WPG1xx rule with cross-reference and gate
checks, and the text report. Also times the installed CLI as a subprocess (interpreter start
included). Writes ``docs/evidence/trailers-throughput.json`` (schema ``wpgate-evidence/1``).

    .venv/bin/python scripts/bench_trailers.py [--commits 10000] [--runs 5]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))

from wpgate.api import lint_trailer_range  # noqa: E402
from wpgate.evidence import (  # noqa: E402
    evidence_document,
    git_state,
    host_environment,
    source_hashes,
    write_evidence,
)

# The code the measurement runs on; their hashes go into the evidence file.
SOURCES = (
    "src/wpgate/api.py",
    "src/wpgate/trailers.py",
    "src/wpgate/rules/trailers.py",
    "src/wpgate/_git.py",
    "src/wpgate/_commits.py",
    "src/wpgate/references.py",
    "src/wpgate/_config.py",
    "src/wpgate/_output.py",
    "src/wpgate/_docs.py",
    "scripts/bench_trailers.py",
)
DOCS = ("docs/PROVENANCE.md", "docs/ASSUMPTIONS.md", "pyproject.toml")
GATE_FILE = "tests/test_synthetic.py"
GATE_SOURCE = (
    "class TestLinter:\n    def test_range(self):\n        pass\n\n\ndef test_one():\n    pass\n"
)


def _docs_files() -> dict[str, bytes]:
    """This repository's governance documents, copied into the synthetic repository."""
    files = {rel: (REPO / rel).read_bytes() for rel in DOCS}
    for folder in ("docs/work_packages", "docs/engineering"):
        for path in sorted((REPO / folder).glob("*.md")):
            files[f"{folder}/{path.name}"] = path.read_bytes()
    files[GATE_FILE] = GATE_SOURCE.encode()
    return files


def _message(index: int, rng: random.Random) -> str:
    """A realistic governed message; about 1 in 50 carries a finding."""
    kind = rng.choice(["feat", "fix", "perf", "docs", "test", "refactor"])
    body = " ".join(
        rng.choice(["the", "optimizer", "step", "graph", "keeps", "bits"]) for _ in range(40)
    )
    wp = f"{rng.randint(1, 8):03d}" if index % 50 else "099"
    sources = ", ".join(f"R{rng.randint(1, 7)}" for _ in range(rng.randint(1, 3)))
    gate = f"{GATE_FILE}::TestLinter::test_range; {GATE_FILE}::test_one[case-{index % 7}]"
    return (
        f"{kind}(core): change number {index}\n\n{body}\n\n{body[:120]}\n\n"
        f"WP: {wp}\nProvenance: {sources} §2\nAssumptions: A1\nGate: {gate}\n"
    )


def build_repository(path: Path, commits: int, seed: int = 0) -> None:
    """A repository at ``path`` with the docs and ``commits`` governed commits on main."""
    rng = random.Random(seed)
    subprocess.run(["git", "init", "-q", "-b", "main", str(path)], check=True)
    chunks: list[bytes] = []
    stamp = 1_760_000_000

    def data(payload: bytes) -> bytes:
        return b"data %d\n" % len(payload) + payload + b"\n"

    files = _docs_files()
    chunks.append(b"commit refs/heads/main\nmark :1\n")
    chunks.append(b"committer Bench <bench@example.com> %d +0000\n" % stamp)
    chunks.append(data(b"chore: synthetic repository\n"))
    for rel, content in files.items():
        chunks.append(f"M 644 inline {rel}\n".encode() + data(content))
    for index in range(commits):
        chunks.append(b"commit refs/heads/main\nmark :%d\n" % (index + 2))
        chunks.append(b"author Dev <dev@example.com> %d +0000\n" % (stamp + index))
        chunks.append(b"committer Dev <dev@example.com> %d +0000\n" % (stamp + index))
        chunks.append(data(_message(index, rng).encode()))
        chunks.append(b"from :%d\n" % (index + 1))
    stream = b"".join(chunks)
    subprocess.run(["git", "-C", str(path), "fast-import", "--quiet"], input=stream, check=True)
    subprocess.run(["git", "-C", str(path), "reset", "-q", "--hard", "main"], check=True)


def lint_in_process(root: Path, spec: str) -> tuple[float, int, int]:
    """Seconds for one end-to-end lint of ``spec``; commits checked and findings."""
    start = time.perf_counter()
    report = lint_trailer_range(root, spec)
    elapsed = time.perf_counter() - start
    return elapsed, report.checked, len(report.findings)


def lint_cli(root: Path, spec: str) -> tuple[float, int]:
    """Seconds for ``python -m wpgate trailers --range`` as a subprocess; its exit status."""
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "wpgate", "trailers", "--range", spec, "--root", str(root)],
        capture_output=True,
        env=env,
        check=False,
    )
    return time.perf_counter() - start, done.returncode


def reference_ms(iterations: int = 300_000) -> float:
    """Milliseconds of a fixed pure-Python loop: how fast the machine runs Python right now.

    On a shared virtual machine the same work can take twice as long from one minute to the
    next; recorded beside each lint, it tells a slow machine from a slow linter.
    """
    start = time.perf_counter()
    total = 0
    for i in range(iterations):
        total += i * i
    return (time.perf_counter() - start) * 1e3


def _summary(values: list[float]) -> dict[str, float]:
    """Median and range, rounded for the report."""
    return {
        "median": round(statistics.median(values), 1),
        "min": round(min(values), 1),
        "max": round(max(values), 1),
    }


def evidence_document_for(
    kind: str,
    command: str,
    sources: Sequence[str],
    load_before: Sequence[float],
    results: dict[str, Any],
) -> dict[str, Any]:
    """The ``wpgate-evidence/1`` document: where, when and on what code it ran, and ``results``.

    The commit is HEAD; the run counts as dirty when a measured source differs from it or is not
    committed (then the source hashes, not the commit, bind the numbers to code).
    """
    return evidence_document(
        kind,
        results,
        command=command,
        environment=host_environment(
            load_average_1_5_15_min_before=[round(x, 2) for x in load_before],
            load_average_1_5_15_min_after=[round(x, 2) for x in os.getloadavg()],
            git=subprocess.run(["git", "--version"], capture_output=True, check=False)
            .stdout.decode()
            .strip(),
        ),
        git=git_state(REPO, sources),
        sources=source_hashes(REPO, (REPO / rel for rel in sources)),
    )


def main(argv: list[str] | None = None) -> int:
    """Build the repository, time the lint ``--runs`` times, write the evidence JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commits", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--out", default=str(REPO / "docs/evidence/trailers-throughput.json"))
    args = parser.parse_args(argv)
    # Other work on the machine slows every run; the load average is recorded with the numbers.
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="wpgate-bench-") as tmp:
        root = Path(tmp) / "repo"
        started = time.perf_counter()
        build_repository(root, args.commits)
        build_s = time.perf_counter() - started
        first = (
            subprocess.run(
                ["git", "-C", str(root), "rev-list", "--max-parents=0", "HEAD"],
                capture_output=True,
                check=True,
            )
            .stdout.decode()
            .strip()
        )
        spec = f"{first}..HEAD"
        lint_in_process(root, spec)  # warm the page cache and imports
        in_process = []
        references_ms = []
        for _ in range(args.runs):
            references_ms.append(reference_ms())
            in_process.append(lint_in_process(root, spec))
        cli = [lint_cli(root, spec) for _ in range(args.runs)]
    checked = {c for _, c, _ in in_process}
    findings = {f for _, _, f in in_process}
    rates = [args.commits / s for s, _, _ in in_process]
    cli_rates = [args.commits / s for s, _ in cli]
    evidence = evidence_document_for(
        "trailers-throughput",
        "python scripts/bench_trailers.py " + " ".join(argv or sys.argv[1:]),
        SOURCES,
        load_before,
        {
            "commits": args.commits,
            "runs": args.runs,
            "build_seconds": round(build_s, 2),
            "commits_checked": sorted(checked),
            "findings": sorted(findings),
            "in_process_commits_per_second": _summary(rates),
            "in_process_seconds": [round(s, 3) for s, _, _ in in_process],
            "reference_loop_ms_before_each_run": [round(r, 1) for r in references_ms],
            "reference_loop_ms": _summary(references_ms),
            "cli_commits_per_second": _summary(cli_rates),
            "cli_seconds": [round(s, 3) for s, _ in cli],
            "cli_exit_codes": sorted({rc for _, rc in cli}),
            "target_commits_per_second": 20_000,
        },
    )
    out = Path(args.out)
    write_evidence(evidence, out)
    rate = _summary(rates)
    print(
        f"{args.commits} commits: {rate['median']} commits/s in process "
        f"({rate['min']}–{rate['max']}); reference loop {_summary(references_ms)} ms; "
        f"CLI {_summary(cli_rates)}; wrote {out}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
