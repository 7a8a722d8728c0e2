"""The published metadata: licence, its text, classifiers and the documented install routes."""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
CPU_INDEX = "pip install torch --index-url https://download.pytorch.org/whl/cpu"


def test_the_licence_text_ships_and_matches_the_declared_expression() -> None:
    assert PROJECT["license"] == "Apache-2.0"
    assert "LICENSE" in PROJECT["license-files"]
    text = (REPO / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in text
    assert "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text
    # PEP 639: an SPDX expression replaces the License classifiers; setuptools refuses both.
    assert not [c for c in PROJECT["classifiers"] if c.startswith("License ::")]


def test_classifiers_name_every_supported_python() -> None:
    minimum = PROJECT["requires-python"].removeprefix(">=")
    listed = {c.rsplit(" :: ", 1)[1] for c in PROJECT["classifiers"] if "Python :: 3." in c}
    assert minimum in listed
    assert "Typing :: Typed" in PROJECT["classifiers"]


def test_readme_and_guide_give_the_cpu_only_torch_route_before_the_extra() -> None:
    for page in ("README.md", "docs/adopting.md"):
        text = (REPO / page).read_text(encoding="utf-8")
        # The CPU build first, then the extra (which then finds torch satisfied).
        assert f'{CPU_INDEX}\npip install "wpgate[optim]"' in text, page


def _pinned_revs(text: str) -> list[str]:
    """The ``rev:`` values of the YAML blocks of a Markdown page (comments dropped)."""
    return re.findall(r"^\s*rev:\s*([^\s#]+)", text, flags=re.MULTILINE)


def test_pinned_revs_are_read_from_the_yaml_examples() -> None:
    text = "```yaml\n  - repo: x\n    rev: 0123abc  # a comment\n```\nrev: v1\n"
    assert _pinned_revs(text) == ["0123abc", "v1"]


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_the_readme_pre_commit_example_pins_a_revision_this_repository_has() -> None:
    # An adopter copies the example as it is: a `rev` that is no tag or commit of wpgate's
    # repository fails at `pre-commit install`, far from the README that caused it.
    probe = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--is-shallow-repository"],
        capture_output=True,
        text=True,
        check=False,
    )
    if probe.returncode != 0 or probe.stdout.strip() != "false":
        pytest.skip("needs the repository's full git history")
    revs = _pinned_revs((REPO / "README.md").read_text(encoding="utf-8"))
    assert revs, "the README's pre-commit example names no rev"
    for rev in revs:
        found = subprocess.run(
            ["git", "-C", str(REPO), "cat-file", "-e", f"{rev}^{{commit}}"],
            capture_output=True,
            check=False,
        )
        assert found.returncode == 0, f"README pins rev {rev}, which this repository lacks"


def test_the_optim_extra_brings_numpy() -> None:
    # Without numpy, torch warns "Failed to initialize NumPy" at every start (issue #36).
    names = [
        r.split(">")[0].split("=")[0].strip() for r in PROJECT["optional-dependencies"]["optim"]
    ]
    assert names[:1] == ["torch"]
    assert "numpy" in names


def test_the_ultralytics_guide_gives_a_cpu_route_without_cuda_wheels() -> None:
    text = (REPO / "docs/ultralytics.md").read_text(encoding="utf-8")
    # torchvision from the CPU index too: PyPI's torchvision pins PyPI's (CUDA) torch.
    route = CPU_INDEX.replace("install torch", "install torch torchvision")
    assert f'{route}\npip install "wpgate[ultralytics]"' in text
