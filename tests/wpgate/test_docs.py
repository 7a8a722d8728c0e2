"""The docs I/O module and the docs linters' command-line shells, end to end."""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from wpgate import _docs, _documents
from wpgate._config import Config, load_config
from wpgate.cli import main
from wpgate.options import DocsLayout

ROOT = Path(__file__).resolve().parents[2]


def test_the_projects_own_docs_pass() -> None:
    config = load_config(ROOT)
    for run in (
        _docs.run_provenance(config, history=False),
        _docs.run_work_packages(config),
        _docs.run_evidence(config, collect=False),
        _docs.run_changelog(config),
    ):
        assert run.findings == (), run.summary.describe()
    assert _docs.run_work_packages(config).summary.checked >= 8


def test_layout_from_config_section() -> None:
    layout = DocsLayout.from_section({"evidence": "ev", "claims": "x/*.md"})
    assert (layout.evidence, layout.claims, layout.provenance) == (
        "ev",
        ("x/*.md",),
        "docs/PROVENANCE.md",
    )


def test_resolve_inside_refuses_escapes(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs/up").symlink_to(tmp_path.parent)
    assert _documents.resolve_inside(tmp_path, "docs", "a/b.json") == ("docs/a/b.json", None)
    assert _documents.resolve_inside(tmp_path, "docs/x", "../a.json", allow_parent=True) == (
        "docs/a.json",
        None,
    )
    assert _documents.resolve_inside(tmp_path, "docs", "../../a.json", allow_parent=True)[0] is None
    for target in ("../../etc/passwd", "/etc/passwd", "C:\\x", "up/x.json"):
        path, why = _documents.resolve_inside(tmp_path, "docs", target)
        assert path is None
        assert why is not None


def _repo(tmp_path: Path) -> Path:
    (tmp_path / "docs/engineering").mkdir(parents=True)
    (tmp_path / "docs/engineering/phase-01-one.md").write_text(
        '---\nphase: 1\ntitle: "One"\n---\n# One\n', encoding="utf-8"
    )
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n', encoding="utf-8")
    return tmp_path


def test_new_wp_scaffolds_a_page_that_passes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _repo(tmp_path)
    args = [
        "new-wp",
        "007",
        "--title",
        'A title: with "quotes"',
        "--phase",
        "1",
        "--root",
        str(root),
    ]
    assert main(args) == 0
    assert capsys.readouterr().out.strip() == "docs/work_packages/wp-007.md"
    assert main(["wp", "--root", str(root)]) == 0
    assert main(args) == 2  # exists already
    assert "already exists" in capsys.readouterr().err
    assert main(["new-wp", "008", "--title", "t", "--phase", "4", "--root", str(root)]) == 2
    assert "phase 4 has no page" in capsys.readouterr().err


def test_malformed_documents_are_findings_not_tracebacks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _repo(tmp_path)
    (root / "docs/PROVENANCE.md").write_text(
        "## Sources\n\n| ID | Reference |\n| --- |\n", encoding="utf-8"
    )
    (root / "docs/work_packages").mkdir()
    (root / "docs/work_packages/wp-001.md").write_text("---\nid: [\n---\n", encoding="utf-8")
    assert main(["provenance", "--root", str(root), "--format", "json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert {(f["path"], f["rule_id"]) for f in report["findings"]} == {
        ("docs/PROVENANCE.md", "WPG201")
    }
    assert main(["wp", "--root", str(root), "--format", "github"]) == 1
    out = capsys.readouterr().out
    assert "file=docs/work_packages/wp-001.md,line=3" in out
    assert "WPG301" in out


def test_docs_command_and_rule_switches(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = _repo(tmp_path)
    (root / "CHANGELOG.md").write_text("# Changelog\n", encoding="utf-8")
    assert main(["docs", "--root", str(root)]) == 1
    out = capsys.readouterr().out
    assert "CHANGELOG.md:0: WPG501" in out
    (root / "pyproject.toml").write_text(
        '[project]\nname = "x"\n[tool.wpgate.rules]\nWPG501 = false\nWPG201 = false\n'
        "WPG303 = false\n",
        encoding="utf-8",
    )
    assert main(["docs", "--root", str(root)]) == 0


def test_check_is_clean_on_a_small_generated_tree(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The benchmark's generator at a small size: every docs linter and git check, 0 findings."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_check", ROOT / "scripts/bench_check.py")
    assert spec is not None
    assert spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    bench.build_tree(tmp_path, packages=12, sources=6, evidence_files=3, phases=2, markers=2)
    assert main(["check", "--root", str(tmp_path)]) == 0
    assert "work packages: 12 pages checked; evidence: 24 claims checked" in capsys.readouterr().out
    (tmp_path / "src/pkg/m0.py").write_text("VALUE = -1\n", encoding="utf-8")
    assert main(["evidence", "--root", str(tmp_path), "--format", "json"]) == 1
    stale = {f["path"] for f in json.loads(capsys.readouterr().out)["findings"]}
    # Evidence file e0 measured m0; pages 0, 3, 6, 9 (ids 1, 4, 7, 10) cite it.
    assert stale == {f"docs/work_packages/wp-{n:04d}.md" for n in (1, 4, 7, 10)}


def test_evidence_commits_beyond_a_shallow_cut_exit_2(tmp_path: Path) -> None:
    from git_helpers import git, new_repository

    from wpgate._git import GitError

    root = new_repository(tmp_path)
    (root / "a.txt").write_text("a\n")
    git(root, "add", "a.txt")
    git(root, "commit", "-q", "-m", "first")
    old = git(root, "rev-parse", "HEAD")
    evidence = root / "docs/evidence/e.json"
    evidence.parent.mkdir(parents=True)
    evidence.write_text(
        '{"schema": "wpgate-evidence/1", "environment": {}, "git_commit": "'
        + old
        + '", "sources": {}, "results": {"ms": 5}}\n'
    )
    (root / "docs/claim.md").write_text("[MEASURED] 5 ms ([e](evidence/e.json)).\n")
    git(root, "add", ".")
    git(root, "commit", "-q", "-m", "second")
    clone = tmp_path / "shallow"
    git(tmp_path, "clone", "-q", "--depth", "1", f"file://{root}", str(clone))
    assert _docs.lint_evidence(root, collect=False) == []
    with pytest.raises(GitError, match=r"clone is shallow.*git fetch --unshallow"):
        _docs.lint_evidence(clone, collect=False)


def test_a_switched_off_rules_check_is_never_called() -> None:
    from wpgate.rules import provenance as rules

    kept = _docs.enabled_checks(Config(ROOT).ignoring(["WPG203"]), rules.CHECKS)
    assert rules.check_unique_ids not in [rule.check for rule in kept]
    assert kept == [rule for rule in rules.CHECKS if rule.rule_id != "WPG203"]


@pytest.mark.parametrize(
    ("linter", "rule_id", "module", "name"),
    [
        ("provenance", "WPG207", "wpgate._docs", "first_citing_commits"),
        ("wp", "WPG306", "wpgate.references", "GateResolver"),
        ("changelog", "WPG502", "wpgate.project_index", "load_project_index"),
    ],
)
def test_switched_off_rules_skip_their_expensive_inputs(
    monkeypatch: pytest.MonkeyPatch, linter: str, rule_id: str, module: str, name: str
) -> None:
    """History reads, gate resolution and the project index serve one rule each."""

    def refuse(*_args: object, **_kwargs: object) -> None:
        raise AssertionError(f"{name} ran")

    monkeypatch.setattr(importlib.import_module(module), name, refuse)
    lint: Callable[[Config], object] = {
        "provenance": lambda config: _docs.lint_provenance(ROOT, config, history=True),
        "wp": lambda config: _docs.lint_work_packages(ROOT, config),
        "changelog": lambda config: _docs.lint_changelog(ROOT, config),
    }[linter]
    lint(Config(ROOT).ignoring([rule_id]))
    with pytest.raises(AssertionError, match=f"{name} ran"):  # control: on, it runs
        lint(Config(ROOT))
