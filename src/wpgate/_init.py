"""``wpgate init``: bootstrap a repository so that ``wpgate check`` and ``mkdocs build --strict``
pass at once.

Writes only what is missing and never overwrites a file: the ``[tool.wpgate]`` table (appended
to ``pyproject.toml``, or a new ``pyproject.toml``), the provenance record, the changelog, the
work-package registry folder, the evidence folder's README, ``mkdocs.yml`` with the wpgate
plugin and a ``.pre-commit-config.yaml`` of ``repo: local`` hooks (installing them clones
nothing). Each planned file is a :class:`Scaffold`; :func:`init_repository` reports what it
wrote and what it kept.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wpgate._documents import read_bounded
from wpgate.options import DocsLayout

__all__ = ["InitResult", "Scaffold", "init_repository", "plan_scaffolds"]

_PYPROJECT_TABLE = """
[tool.wpgate]
# The first governed commit: set it once the repository has one, and `wpgate check` lints the
# trailers of every commit from it to HEAD.
# history_start = "<40-hex commit id>"

[tool.wpgate.trailers]
# The trailers every commit carries (WP, Provenance, Assumptions, Gate).
required = ["WP", "Provenance", "Gate"]
"""

_PROVENANCE = """# Provenance

Every outside source this project uses, and under what terms. A commit's `Provenance:` trailer
cites ids from the *Sources* table; `wpgate provenance` checks this file.

## Sources

| ID | Reference | Licence | Role |
| --- | --- | --- | --- |

## Placeholders

Ids reserved and withdrawn; a trailer that cites one is refused.

| ID | Status |
| --- | --- |

## First-use log

A source appears once, on the day it was first used.

| Date | Source | Used for |
| --- | --- | --- |
"""

_CHANGELOG = """# Changelog

All notable changes to this project are documented here. The format follows
[Keep a Changelog](https://keepachangelog.com/en/1.1.0/).

## [Unreleased]
"""

_WORK_PACKAGES_INDEX = """# Work packages

One page per work package, `wp-NNN.md`; `wpgate new-wp NNN --title "..." --phase N` writes a
new one that passes `wpgate wp`. The site's roadmap lists them all.
"""

_EVIDENCE_README = """# Evidence

Every measurement the documentation quotes lives here as one JSON file (`wpgate-evidence/1`:
`schema`, `environment`, `git_commit`, `sources`, `results`) written by the script that took
it. A paragraph that starts with the tag `[MEASURED]` is a claim: it cites a file here, and
`wpgate evidence` checks that its numbers are in that file.
"""

_INDEX = """# {name}

This site is built by mkdocs with the wpgate plugin: the [roadmap](ROADMAP.md) lists every work
package; evidence blocks render the measured numbers as tables and charts.
"""

_MKDOCS = """site_name: {name}
docs_dir: {docs_dir}
site_dir: site

theme:
  name: material
  # No Google Fonts: the built site makes no request to an outside host.
  font: false

plugins:
  - search
  - wpgate

markdown_extensions:
  - admonition
  - attr_list
  - tables

validation:
  links:
    not_found: warn
    anchors: warn
"""

_PRE_COMMIT = """# wpgate hooks as `repo: local`: installing them clones nothing. They run the
# `wpgate` on PATH, so commit from the environment where wpgate is installed.
default_install_hook_types: [pre-commit, commit-msg, pre-push]
repos:
  - repo: local
    hooks:
      - id: wpgate-docs
        name: wpgate docs (provenance, work packages, evidence claims, changelog)
        entry: wpgate docs
        language: system
        files: ^({docs_dir}/|{changelog}$)
        stages: [pre-commit]
        pass_filenames: false
      - id: wpgate-trailers
        name: wpgate commit message (subject and trailers)
        entry: wpgate trailers
        language: system
        stages: [commit-msg]
      - id: wpgate-history
        name: wpgate pushed history
        entry: wpgate trailers --pushed
        language: system
        stages: [pre-push]
        pass_filenames: false
        always_run: true
"""


@dataclass(frozen=True)
class Scaffold:
    """One file ``init`` writes: its repository path, its text, and whether it is appended."""

    path: str
    text: str
    append: bool = False


@dataclass(frozen=True)
class InitResult:
    """What ``init`` did: the files it wrote (or appended to) and those it left as they were."""

    written: tuple[str, ...]
    kept: tuple[str, ...]


def _has_wpgate_table(pyproject: Path) -> bool:
    """Whether ``pyproject`` already has ``[tool.wpgate]``; a malformed file is a ValueError."""
    try:
        data: dict[str, Any] = tomllib.loads(
            read_bounded(pyproject.parent, pyproject.name).decode("utf-8")
        )
    except FileNotFoundError:
        return False
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"pyproject.toml cannot be read ({exc}); fix it, then run init") from exc
    tool = data.get("tool")
    return isinstance(tool, dict) and "wpgate" in tool


def _docs_dir(layout: DocsLayout) -> str:
    """The folder that holds the documents (the first component of the provenance path)."""
    return layout.provenance.split("/", 1)[0] if "/" in layout.provenance else "docs"


def plan_scaffolds(root: Path, name: str, layout: DocsLayout) -> list[Scaffold]:
    """Every file ``init`` would write for a repository called ``name``, in writing order."""
    docs_dir = _docs_dir(layout)
    changelog = layout.changelog.replace(".", r"\.")
    pyproject = root / "pyproject.toml"
    return [
        Scaffold("pyproject.toml", _PYPROJECT_TABLE.lstrip("\n"), append=pyproject.exists()),
        Scaffold(layout.provenance, _PROVENANCE),
        Scaffold(layout.changelog, _CHANGELOG),
        Scaffold(f"{layout.work_packages}/index.md", _WORK_PACKAGES_INDEX),
        Scaffold(f"{layout.evidence}/README.md", _EVIDENCE_README),
        Scaffold(f"{docs_dir}/index.md", _INDEX.format(name=name)),
        Scaffold("mkdocs.yml", _MKDOCS.format(name=name, docs_dir=docs_dir)),
        Scaffold(
            ".pre-commit-config.yaml", _PRE_COMMIT.format(docs_dir=docs_dir, changelog=changelog)
        ),
    ]


def init_repository(root: Path, name: str | None = None) -> InitResult:
    """Write every missing scaffold under ``root``; raises ValueError saying why it cannot."""
    if not root.is_dir():
        raise ValueError(f"{root} is not a directory; create it or pass --root")
    from wpgate._config import load_config

    pyproject = root / "pyproject.toml"
    has_table = _has_wpgate_table(pyproject)
    # An existing [tool.wpgate.docs] decides where the documents go.
    layout = DocsLayout.from_config(load_config(root)) if has_table else DocsLayout()
    written: list[str] = []
    kept: list[str] = []
    for plan in plan_scaffolds(root, name or root.resolve().name, layout):
        target = root / plan.path
        if plan.path == "pyproject.toml" and has_table:
            kept.append(plan.path)
            continue
        if target.exists() and not plan.append:
            kept.append(plan.path)
            continue
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            if plan.append:
                existing = target.read_text(encoding="utf-8")
                separator = "" if existing.endswith("\n") or not existing else "\n"
                target.write_text(f"{existing}{separator}\n{plan.text}", encoding="utf-8")
            else:
                target.write_text(plan.text, encoding="utf-8")
        except OSError as exc:
            raise ValueError(
                f"cannot write {plan.path} ({exc.strerror}); check permissions"
            ) from exc
        written.append(plan.path)
    return InitResult(tuple(written), tuple(kept))
