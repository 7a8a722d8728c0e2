"""Build time of a synthetic wpgate site against the size of its work-package registry.

For each size in ``--sizes`` it writes a repository of that many work packages (spread over
``--phases`` phase pages, each depending on the one before) under a temporary folder, then
builds its site with mkdocs and the Material theme in a fresh interpreter: the total build
time (wall and CPU: on a shared machine the CPU seconds are the steadier figure), and the
plugin's own share (the time spent inside its mkdocs events: reading the
registry, generating the roadmap and phase pages, the headers, the navigation trim, the icons
expanded in each page's HTML). With
``--all-in-nav N`` it also builds a site of N packages with every one in the navigation
(``nav_limit`` above N), the layout that made a 10,000-package build quadratic.

Writes a ``wpgate-evidence/1`` file.

    .venv/bin/python scripts/bench_site.py --sizes 1000,2000,5000,10000 --all-in-nav 1000 \\
        --out docs/evidence/site-scale-<commit>.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))

from bench_trailers import evidence_document_for  # noqa: E402
from wpgate.evidence import write_evidence  # noqa: E402

SOURCES = (
    "src/wpgate/site/plugin.py",
    "src/wpgate/site/_roadmap.py",
    "src/wpgate/site/_icons.py",
    "src/wpgate/_docs.py",
    "src/wpgate/_documents.py",
    "scripts/bench_site.py",
)
_STATUSES = ("todo", "in-progress", "blocked")
_EVENTS = ("on_config", "on_files", "on_nav", "on_page_markdown", "on_page_content")


def write_site(root: Path, packages: int, phases: int, nav_limit: int) -> None:
    """A repository of ``packages`` work packages in ``phases`` phases, with its mkdocs.yml."""
    docs = root / "docs"
    (docs / "engineering").mkdir(parents=True)
    (docs / "work_packages").mkdir()
    (root / "pyproject.toml").write_text('[project]\nname = "synthetic"\n', encoding="utf-8")
    (docs / "index.md").write_text("# Synthetic\n\nA generated registry.\n", encoding="utf-8")
    for number in range(1, phases + 1):
        (docs / "engineering" / f"phase-{number:02d}-p{number}.md").write_text(
            f'---\nphase: {number}\ntitle: "Phase {number}"\n---\n# Phase {number}\n',
            encoding="utf-8",
        )
    for index in range(1, packages + 1):
        status = _STATUSES[index % len(_STATUSES)]
        reason = '\nreason: "waiting"' if status == "blocked" else ""
        depends = f'["{index - 1:05d}"]' if index > 1 else "[]"
        (docs / "work_packages" / f"wp-{index:05d}.md").write_text(
            f'---\nid: "{index:05d}"\ntitle: "Package {index}"\nphase: {1 + index % phases}\n'
            f"status: {status}{reason}\ndepends_on: {depends}\ngate: []\n---\n\n"
            f"# WP-{index:05d} — Package {index}\n\nWhat it builds, in a paragraph.\n",
            encoding="utf-8",
        )
    (root / "mkdocs.yml").write_text(
        "site_name: synthetic\ndocs_dir: docs\nsite_dir: site\n"
        "theme:\n  name: material\n  font: false\n  features:\n    - navigation.sections\n"
        f"plugins:\n  - search\n  - wpgate:\n      nav_limit: {nav_limit}\n",
        encoding="utf-8",
    )


def build_and_time(root: Path) -> dict[str, Any]:
    """Build ``root``'s site in this process: total seconds and seconds in the plugin."""
    import logging

    from mkdocs.commands.build import build
    from mkdocs.config import load_config

    from wpgate.site import plugin

    spent = dict.fromkeys(_EVENTS, 0.0)

    def timed(name: str, method: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                spent[name] += time.perf_counter() - start

        return wrapper

    for name in _EVENTS:
        setattr(plugin.WpgatePlugin, name, timed(name, getattr(plugin.WpgatePlugin, name)))
    warnings = 0

    class Count(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            nonlocal warnings
            warnings += record.levelno >= logging.WARNING

    logging.getLogger("mkdocs").addHandler(Count())
    logging.getLogger("mkdocs").setLevel(logging.WARNING)
    os.chdir(root)
    start, cpu_start = time.perf_counter(), time.process_time()
    build(load_config(str(root / "mkdocs.yml")))
    total, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    pages = sum(1 for _ in (root / "site").rglob("index.html"))
    return {
        "build_s": round(total, 3),
        "build_cpu_s": round(cpu, 3),
        "plugin_s": round(sum(spent.values()), 3),
        "plugin_events_s": {name: round(value, 3) for name, value in spent.items()},
        "html_pages": pages,
        "warnings": warnings,
    }


def measure(packages: int, phases: int, nav_limit: int) -> dict[str, Any]:
    """One size, generated and built in a fresh interpreter (nothing cached between sizes)."""
    with tempfile.TemporaryDirectory(prefix="wpgate-site-") as tmp:
        root = Path(tmp)
        write_site(root, packages, phases, nav_limit)
        done = subprocess.run(
            [sys.executable, __file__, "--build-one", str(root)],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise SystemExit(f"build of {packages} packages failed:\n{done.stderr[-2000:]}")
        result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    result["work_packages"] = packages
    result["plugin_ms_per_package"] = round(1000 * result["plugin_s"] / packages, 3)
    result["build_ms_per_package"] = round(1000 * result["build_s"] / packages, 3)
    return result


def main(argv: list[str] | None = None) -> int:
    """Build each size, write the evidence JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,2000,5000,10000")
    parser.add_argument("--phases", type=int, default=10)
    parser.add_argument("--nav-limit", type=int, default=100)
    parser.add_argument("--all-in-nav", type=int, default=0, help="also build N, all in nav")
    parser.add_argument("--out", default=str(REPO / "docs/evidence/site-scale.json"))
    parser.add_argument("--build-one", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.build_one:
        print(json.dumps(build_and_time(Path(args.build_one))))
        return 0
    if shutil.which("git") is None:
        parser.error("needs git (the evidence records the commit)")
    sizes = [int(size) for size in args.sizes.split(",")]
    load_before = os.getloadavg()
    runs = []
    for size in sizes:
        runs.append(measure(size, args.phases, args.nav_limit))
        print(json.dumps(runs[-1]), flush=True)
    results: dict[str, Any] = {
        "phases": args.phases,
        "nav_limit": args.nav_limit,
        "theme": "material (navigation.sections), search plugin on",
        "sizes": runs,
        "target_build_s_at_10000": 120,
    }
    first, last = runs[0], runs[-1]
    scale = last["work_packages"] / first["work_packages"]
    results["linearity"] = {
        "size_ratio": round(scale, 2),
        "build_time_ratio": round(last["build_s"] / first["build_s"], 2),
        "build_cpu_ratio": round(last["build_cpu_s"] / first["build_cpu_s"], 2),
        "plugin_time_ratio": round(last["plugin_s"] / first["plugin_s"], 2),
    }
    if args.all_in_nav:
        every = measure(args.all_in_nav, args.phases, args.all_in_nav + 1)
        print(json.dumps(every), flush=True)
        results["all_in_nav"] = every
    evidence = evidence_document_for(
        "site-scale",
        "python scripts/bench_site.py " + " ".join(argv or sys.argv[1:]),
        SOURCES,
        load_before,
        results,
    )
    out = Path(args.out)
    write_evidence(evidence, out)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
