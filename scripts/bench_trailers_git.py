"""git-exact parsing and whole-process throughput of `wpgate trailers` on a real history.

Over every commit of ``--repo`` (a git directory, e.g. opencontainers/runc; keep it outside this
repository) it checks that wpgate reads the same trailers as git's own commit reader
(``git log --format=%(trailers:only,unfold)``; the spec's one difference, a ``Key://x`` URL line,
is counted apart), then times, interleaved run by run:

- ``python -m wpgate trailers --range HEAD --root REPO``: the whole process (interpreter start,
  imports, one ``git log``, parsing, every rule, the text report);
- ``git log`` alone with the format wpgate reads: the floor no reader of git's output can beat;
- ``git log --format=%B``: the messages alone, the yardstick of WP-020's target (wpgate within
  three times of it), reported as the median of the per-round ratios;
- optionally the same command from another source tree (``--baseline SRC``) and commitizen's
  ``cz check --rev-range HEAD`` (``--commitizen PATH``).

Writes a ``wpgate-evidence/1`` file with medians of ``--runs`` runs and every sample.

    .venv/bin/python scripts/bench_trailers_git.py --repo /work/.mirror/opencontainers+runc/repo \\
        --runs 7 --baseline /tmp/base/src --commitizen /tmp/czvenv/bin/cz
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))

from bench_trailers import _summary, evidence_document_for, reference_ms  # noqa: E402
from wpgate.api import git_trailers, trailer_differences_from_git  # noqa: E402
from wpgate.evidence import write_evidence  # noqa: E402

SOURCES = (
    "src/wpgate/api.py",
    "src/wpgate/cli.py",
    "src/wpgate/trailers.py",
    "src/wpgate/rules/trailers.py",
    "src/wpgate/_git.py",
    "src/wpgate/_commits.py",
    "src/wpgate/_citable.py",
    "src/wpgate/_config.py",
    "src/wpgate/_documents.py",
    "src/wpgate/_model.py",
    "src/wpgate/_output.py",
    "src/wpgate/_docs.py",
    "src/wpgate/options.py",
    "src/wpgate/references.py",
    "scripts/bench_trailers_git.py",
)
# The format wpgate's reader asks git for (wpgate._git._FORMAT).
GIT_FORMAT = "--format=%H%x1f%P%x1f%an <%ae>%x1f%B"


def timed(
    command: Sequence[str], env: dict[str, str] | None = None, cwd: str | None = None
) -> tuple[float, float, int]:
    """Wall seconds, CPU seconds (user + system, children) and exit status of one command."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=cwd, check=False
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, done.returncode


def _stats(values: Sequence[float], digits: int) -> dict[str, float]:
    """Median and range of ``values``, to ``digits`` decimals."""
    return {
        "median": round(statistics.median(values), digits),
        "min": round(min(values), digits),
        "max": round(max(values), digits),
    }


def wpgate_command(source: Path, repo: Path) -> tuple[list[str], dict[str, str]]:
    """``python -m wpgate trailers`` over the whole history, run from ``source`` (a src dir).

    Bytecode caching is on whatever the caller's environment says (``pip install`` compiles
    an installed package, as commitizen's was): the warm-up run writes the cache, so the timed
    runs do not recompile every module.
    """
    env = {**os.environ, "PYTHONPATH": str(source)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return [sys.executable, "-m", "wpgate", "trailers", "--range", "HEAD", "--root", str(repo)], env


def main(argv: list[str] | None = None) -> int:
    """Check the parse against git, time the commands, write the evidence JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", required=True, help="git directory of the measured history")
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--baseline", help="src directory of an older wpgate, timed beside")
    parser.add_argument("--commitizen", help="path of commitizen's `cz`, timed beside")
    parser.add_argument("--out", default=str(REPO / "docs/evidence/trailers-runc.json"))
    args = parser.parse_args(argv)
    if args.runs < 5:
        parser.error("--runs must be at least 5 (medians of fewer runs are noise)")
    repo = Path(args.repo).resolve()
    load_before = os.getloadavg()
    started = time.perf_counter()
    count, differ = trailer_differences_from_git(repo, "HEAD")
    check_s = time.perf_counter() - started
    url_lines = sum(
        1 for pairs in git_trailers(repo, "HEAD").values() for _, v in pairs if v.startswith("//")
    )
    head = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, check=True
    )
    commands: dict[str, tuple[list[str], dict[str, str] | None, str | None]] = {
        "wpgate": (*wpgate_command(REPO / "src", repo), None),
        "git_log": (["git", "-C", str(repo), "log", "-z", GIT_FORMAT, "HEAD"], None, None),
        "git_log_body": (["git", "-C", str(repo), "log", "--format=%B", "HEAD"], None, None),
    }
    if args.baseline:
        commands["wpgate_baseline"] = (*wpgate_command(Path(args.baseline).resolve(), repo), None)
    if args.commitizen:
        commands["commitizen"] = (
            [args.commitizen, "check", "--rev-range", "HEAD"],
            None,
            str(repo),
        )
    for command, env, cwd in commands.values():  # warm the page cache and the bytecode caches
        timed(command, env, cwd)
    samples: dict[str, list[tuple[float, float, int]]] = {name: [] for name in commands}
    loops = []
    for _ in range(args.runs):
        loops.append(reference_ms())
        for name, (command, env, cwd) in commands.items():
            samples[name].append(timed(command, env, cwd))
    results: dict[str, object] = {
        "repository": str(repo),
        "head": head.stdout.decode().strip(),
        "commits": count,
        "runs": args.runs,
        "git_exact": {
            "commits_compared": count,
            "commits_differing": len(differ),
            "differing_shas": differ[:20],
            "url_lines_not_trailers_by_spec": url_lines,
            "seconds": round(check_s, 2),
        },
        "reference_loop_ms": _summary(loops),
        "bytecode_cache": "written by the warm-up run, as `pip install` compiles a package",
        "target_commits_per_second": 20_000,
    }
    for name, runs in samples.items():
        walls = [w for w, _, _ in runs]
        cpus = [c for _, c, _ in runs]
        results[name] = {
            "seconds": _stats(walls, 3),
            "commits_per_second": _summary([count / w for w in walls]),
            "cpu_seconds": _stats(cpus, 3),
            "commits_per_cpu_second": _summary([count / c for c in cpus if c > 0]),
            "wall_samples": [round(w, 3) for w in walls],
            "exit_codes": sorted({rc for _, _, rc in runs}),
        }
    rounds = [
        w / g
        for (w, _, _), (g, _, _) in zip(samples["wpgate"], samples["git_log_body"], strict=True)
    ]
    results["wpgate_over_git_log_body"] = {
        "median_of_round_ratios": round(statistics.median(rounds), 2),
        "round_ratios": [round(r, 2) for r in rounds],
        "target": 3.0,
    }
    evidence = evidence_document_for(
        "trailers-git-exact-throughput",
        "python scripts/bench_trailers_git.py " + " ".join(argv or sys.argv[1:]),
        SOURCES,
        load_before,
        results,
    )
    out = Path(args.out)
    write_evidence(evidence, out)
    lines = [f"{count} commits, {len(differ)} differ from git ({url_lines} URL lines by spec)"]
    for name in samples:
        entry = results[name]
        assert isinstance(entry, dict)
        lines.append(
            f"{name}: {entry['commits_per_second']} commits/s, cpu {entry['cpu_seconds']} s"
        )
    lines.append(f"wpgate / git log --format=%B: {statistics.median(rounds):.2f} (round median)")
    print("\n".join(lines) + f"\nwrote {out}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
