"""The published metadata: licence, its text, classifiers and the documented install routes."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

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
        assert f'{CPU_INDEX}\npip install "./wpgate[optim]"' in text, page


def test_the_readme_hooks_are_the_ones_init_writes_and_the_repository_publishes() -> None:
    """An adopter copies the README's example: `repo: local` hooks (installing them clones
    nothing, as on machines that cannot reach a code host), with the ids and entries that
    `wpgate init` writes and `.pre-commit-hooks.yaml` publishes, the docs hook on every commit."""
    from wpgate._init import _PRE_COMMIT

    readme = (REPO / "README.md").read_text(encoding="utf-8")
    block = readme.split("default_install_hook_types:", 1)[1].split("```", 1)[0]
    assert "- repo: local" in block
    published = (REPO / ".pre-commit-hooks.yaml").read_text(encoding="utf-8")
    for hook, entry in (
        ("wpgate-docs", "wpgate docs"),
        ("wpgate-trailers", "wpgate trailers"),
        ("wpgate-history", "wpgate trailers --pushed"),
    ):
        for text in (block, _PRE_COMMIT, published):
            assert f"id: {hook}" in text
            assert f"entry: {entry}\n" in text
    docs = block.split("id: wpgate-docs", 1)[1].split("- id:", 1)[0]
    assert "always_run: true" in docs


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
    assert f'{route}\npip install "./wpgate[ultralytics]"' in text


def test_make_demo_writes_no_tracked_file() -> None:
    """Found by an audit: `make demo` rewrote the tracked docs/evidence/musgd-demo.json, so a
    fresh clone's tree was dirty after the README's first command."""
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    outputs = dict(re.findall(r"^(DEMO_\w+) := (\S+)$", makefile, flags=re.MULTILINE))
    assert set(outputs) == {"DEMO_EVIDENCE", "DEMO_PNG"}
    assert all(path.startswith("out/") for path in outputs.values()), outputs
    assert "/out/" in (REPO / ".gitignore").read_text(encoding="utf-8").splitlines()
