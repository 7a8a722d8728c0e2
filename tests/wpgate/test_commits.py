"""Tests for the commit-message linter's shell: any bytes in, findings out, never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from git_helpers import copy_governed_docs, git, governed_repository
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wpgate._commits import lint_message, lint_range
from wpgate._config import load_config
from wpgate._git import parse_range


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("repo")
    copy_governed_docs(path)
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


def _commit(root: Path, subject: str, gate: str, files: dict[str, str | None]) -> str:
    """Write (or delete, for None) ``files`` and commit them with governed trailers."""
    for rel, text in files.items():
        path = root / rel
        if text is None:
            path.unlink()
        else:
            path.write_text(text, encoding="utf-8")
    git(root, "add", "-A")
    message = f"{subject}\n\nWP: 004\nProvenance: R7\nAssumptions: none\nGate: {gate}\n"
    git(root, "commit", "-q", "--allow-empty", "-F", "-", data=message.encode())
    return git(root, "rev-parse", "HEAD")


def _gate_findings(root: Path, spec: str) -> list[tuple[str, str]]:
    run = lint_range(load_config(root), parse_range(spec))
    return [(f.path, f.message) for f in run.findings if f.rule_id == "WPG107"]


def test_a_gate_gone_from_the_working_tree_resolves_in_its_own_commit(tmp_path: Path) -> None:
    """A test renamed, or taken out with its code (``git revert``), after the commit it gated:
    that commit's gate still resolves in its own tree; a gate that never existed does not."""
    root = governed_repository(tmp_path)
    base = git(root, "rev-parse", "HEAD")
    feature = _commit(
        root,
        "feat(cli): a feature",
        "tests/test_feature.py::test_feature tests/test_gate.py::test_gate",
        {"tests/test_feature.py": "def test_feature():\n    pass\n"},
    )
    renamed = _commit(
        root,
        "test(cli): a clearer name",
        "tests/test_gate.py::test_gate_renamed",
        {"tests/test_gate.py": "def test_gate_renamed():\n    pass\n"},
    )
    git(root, "revert", "--no-edit", feature)  # git's own message: exempt as a revert
    wrong = _commit(root, "fix(cli): a typo", "tests/test_gate.py::test_never", {})
    assert not (root / "tests" / "test_feature.py").exists()
    findings = _gate_findings(root, f"{base}..HEAD")
    assert findings == [
        (
            wrong[:12],
            "gate `test_never` is not defined in `tests/test_gate.py`; fix the node id "
            "or add the test",
        ),
    ]
    assert all(path not in (feature[:12], renamed[:12]) for path, _ in findings)
    # A message being committed is checked against the working tree alone.
    text = b"feat(cli): x\n\nWP: 004\nProvenance: R7\nAssumptions: none\n"
    run = lint_message(
        text + b"Gate: tests/test_feature.py::test_feature\n", "msg", load_config(root)
    )
    assert [f.rule_id for f in run.findings] == ["WPG107"]


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="needs /dev/zero")
def test_a_device_as_the_message_file_is_refused_before_it_is_read(tmp_path: Path) -> None:
    # /dev/zero never ends: the old reader grew without bound. A deadline fails a hang, and
    # the child's address space is capped so that a regression fails fast instead of
    # taking the machine's memory.
    import resource

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))

    done = subprocess.run(
        [sys.executable, "-m", "wpgate", "trailers", "/dev/zero", "--root", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")},
        preexec_fn=cap,
        check=False,
    )
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (
        "wpgate: error: /dev/zero is a device, not a message file; pass the file git gives the "
        "commit-msg hook, or - to read stdin\n"
    )
