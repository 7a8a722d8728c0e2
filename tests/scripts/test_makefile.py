"""The Makefile's setup pins: each must satisfy what the project's extras ask for."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]


def _make_variable(name: str) -> str:
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    found = re.search(rf"^{name} := (\S+)$", text, re.MULTILINE)
    assert found, f"the Makefile sets no {name}"
    return found.group(1)


def _extra_requirement(extra: str, package: str) -> Requirement:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    wanted = [Requirement(text) for text in project["optional-dependencies"][extra]]
    return next(req for req in wanted if req.name == package)


@pytest.mark.parametrize(
    ("variable", "extra", "package"),
    [("TORCH_VERSION", "optim", "torch"), ("TRITON_VERSION", "dev", "triton")],
)
def test_the_release_setup_installs_first_is_one_the_extras_accept(
    variable: str, extra: str, package: str
) -> None:
    # Installed before the project, a pin the extra refused would be replaced by a download.
    assert _extra_requirement(extra, package).specifier.contains(_make_variable(variable))
