"""Changelog rules: backticked names of the unreleased section resolve in the tree."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from wpgate._docs import lint_changelog
from wpgate.docs_options import ChangelogOptions
from wpgate.parsers.changelog import parse_unreleased
from wpgate.project_index import load_project_index
from wpgate.records import ProjectIndex
from wpgate.rules.changelog import check_names, resolve_name

CLI = """import click

@click.group()
def main():
    pass

@main.command("check")
@click.option("--format", "fmt")
def check(fmt):
    pass

@main.command()
def new_wp():
    pass
"""

PKG = """from pkg._core import Engine

class Engine2:
    capture_updates: bool = False

    def step(self):
        pass

def orthogonalize(x, *, steps=5):
    return x
"""


@pytest.fixture
def index(tmp_path: Path) -> ProjectIndex:
    (tmp_path / "src/pkg").mkdir(parents=True)
    (tmp_path / "src/pkg/__init__.py").write_text(PKG, encoding="utf-8")
    (tmp_path / "src/pkg/_core.py").write_text("class Engine:\n    pass\n", encoding="utf-8")
    (tmp_path / "src/pkg/cli.py").write_text(CLI, encoding="utf-8")
    (tmp_path / "docs/evidence").mkdir(parents=True)
    (tmp_path / "src/pkg/site").mkdir()  # a package named like a build output
    (tmp_path / "src/pkg/site/render.py").write_text("def page():\n    pass\n", encoding="utf-8")
    (tmp_path / "site").mkdir()  # the build output itself is not the tree
    (tmp_path / "site/built.py").write_text("", encoding="utf-8")
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "pkg"\n[project.scripts]\npkg = "pkg.cli:main"\n', encoding="utf-8"
    )
    (tmp_path / "Makefile").write_text("gate: lint\n\tpytest\nlint:\n\truff\n", encoding="utf-8")
    return load_project_index(tmp_path)


@pytest.mark.parametrize(
    "name",
    [
        "pkg",
        "pkg.Engine",
        "pkg._core.Engine",
        "pkg.Engine2.step",
        "pkg.orthogonalize",
        "orthogonalize(x, steps=3)",
        "capture_updates",
        "Engine2",
        "--format",
        "pkg check --format json",
        "pkg new-wp",
        "make gate",
        "python -m pkg.cli",
        "src/pkg/cli.py",
        "docs/evidence/",
        "src/pkg/*.py",
        "pyproject.toml",
        "pkg.site.render.page",
        "src/pkg/site/render.py",
        # not names: prose, other projects, tables, schema strings
        "[tool.wpgate]",
        "WP:",
        "torch.optim.Muon",
        "none (reason)",
        "wpgate-evidence/1",
        "R1-R20",
        "git log --oneline",
        "pkgx.y",
        "*_test.go",  # a pattern of names, not a path
    ],
)
def test_resolving_names(index: ProjectIndex, name: str) -> None:
    assert resolve_name(index, name) is None


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("pkg.missing", "`pkg` defines no `missing`"),
        ("pkg.Engine2.run", "`pkg.Engine2` has no member `run`"),
        ("pkg.nomod.x", "`pkg` defines no `nomod`"),
        ("--colour", "no option --colour is defined in the sources"),
        ("pkg check --colour", "`pkg` has no option --colour"),
        ("pkg explain", "`pkg` has no subcommand `explain`"),
        ("make docs", "the Makefile has no target docs"),
        ("python -m pkg.gone", "no module `pkg.gone` in the project"),
        ("src/pkg/gone.py", "the path `src/pkg/gone.py` does not exist"),
        ("site/built.py", "the path `site/built.py` does not exist"),
        ("capture_everything", "`capture_everything` is not defined in the sources"),
        ("orthogonalize(x, iters=3)", "`orthogonalize` takes no argument iters"),
        # Found by an audit: other languages' files passed unchecked outside a known folder.
        ("pkg/nothere.go", "the path `pkg/nothere.go` does not exist"),
        ("nothere.rs", "the path `nothere.rs` does not exist"),
        ("web/app.ts", "the path `web/app.ts` does not exist"),
    ],
)
def test_unresolved_names(index: ProjectIndex, name: str, problem: str) -> None:
    assert resolve_name(index, name) == problem


def test_wpg502_findings_carry_line_and_fix(index: ProjectIndex) -> None:
    section = parse_unreleased("## [Unreleased]\n- `pkg.Engine`\n- `pkg.gone` and `pkg.gone`\n")
    (finding,) = check_names(replace(section, index=index), ChangelogOptions())
    assert (finding.path, finding.line, finding.rule_id) == ("CHANGELOG.md", 3, "WPG502")
    assert finding.message.startswith("the changelog promises `pkg.gone` but `pkg` defines no")
    assert (
        list(check_names(replace(section, index=index), ChangelogOptions(ignore=("pkg.gone",))))
        == []
    )


def test_wpg501_and_lint_changelog(tmp_path: Path) -> None:
    (tmp_path / "CHANGELOG.md").write_text("# Changelog\n\n## 1.0\n", encoding="utf-8")
    assert [(f.line, f.rule_id) for f in lint_changelog(tmp_path)] == [(0, "WPG501")]
    (tmp_path / "CHANGELOG.md").write_bytes(b"## [Unreleased]\n- \xff\n")
    assert [(f.line, f.rule_id) for f in lint_changelog(tmp_path)] == [(2, "WPG501")]
