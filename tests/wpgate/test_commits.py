"""Tests for the commit-message linter's shell: any bytes in, findings out, never a traceback."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wpgate._commits import lint_message
from wpgate._config import load_config

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("repo")
    for rel in ("docs/PROVENANCE.md", "docs/ASSUMPTIONS.md", "docs/work_packages/wp-004.md"):
        (path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / rel, path / rel)
    return path


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.binary(max_size=400), st.booleans())
def test_any_bytes_give_findings_not_exceptions(root: Path, data: bytes, pr_mode: bool) -> None:
    run = lint_message(data, "msg", load_config(root), pr_mode=pr_mode)
    assert run.summary.checked + sum(run.summary.exempt.values()) == 1
    # git reads up to the first NUL and refuses a message holding one: both are WPG100.
    invalid = b"\0" in data
    try:
        data.split(b"\0", 1)[0].decode("utf-8")
    except UnicodeDecodeError:
        invalid = True
    assert invalid == any(f.rule_id == "WPG100" for f in run.findings)
    assert all(f.path == "msg" and f.line >= 1 for f in run.findings)


def test_references_come_from_the_repository(root: Path) -> None:
    text = b"feat(cli): x\n\nWP: 004\nProvenance: R7, R99\nAssumptions: A1\nGate: t.py\n"
    run = lint_message(text, "msg", load_config(root))
    assert [(f.rule_id, f.message.split(";")[0]) for f in run.findings] == [
        ("WPG105", "R99 is not in the Sources table of docs/PROVENANCE.md"),
        ("WPG107", "gate `t.py` does not exist"),
    ]
