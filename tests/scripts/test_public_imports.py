"""Every ``scripts/*.py`` uses musgd and wpgate through their public API only.

A name or module that starts with ``_`` is private to its package and may change under a script
without notice; code that needs the internals belongs inside the package (``musgd.bench``'s
subcommands, ``wpgate.api``). Read with ``ast``: the scripts are never imported.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
PACKAGES = frozenset({"musgd", "wpgate"})


def _is_private(dotted: str) -> bool:
    return any(part.startswith("_") for part in dotted.split("."))


def private_uses(source: str, filename: str = "<script>") -> list[str]:
    """``file:line: what`` for each private musgd or wpgate module or name ``source`` uses."""
    tree = ast.parse(source, filename)
    found: list[str] = []
    aliases: set[str] = set()  # local names `import` binds to a musgd or wpgate module

    def report(node: ast.AST, what: str) -> None:
        found.append(f"{filename}:{getattr(node, 'lineno', 0)}: {what}")

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] not in PACKAGES:
                    continue
                if _is_private(alias.name):
                    report(node, f"import {alias.name}")
                aliases.add(alias.asname or alias.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] not in PACKAGES:
                continue
            for alias in node.names:
                if _is_private(node.module) or alias.name.startswith("_"):
                    report(node, f"from {node.module} import {alias.name}")
    for node in ast.walk(tree):
        # `import musgd` then `musgd._functional...`: a private attribute of a package's module.
        if (
            isinstance(node, ast.Attribute)
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
            and isinstance(node.value, ast.Name)
            and node.value.id in aliases
        ):
            report(node, f"{node.value.id}.{node.attr}")
    return found


def test_no_script_uses_a_private_musgd_or_wpgate_name() -> None:
    scripts = sorted(SCRIPTS.glob("*.py"))
    assert scripts, "no scripts found"
    found = [use for path in scripts for use in private_uses(path.read_text(), path.name)]
    assert found == [], (
        "private musgd/wpgate names in scripts/ (use the public API):\n" + "\n".join(found)
    )


@pytest.mark.parametrize(
    "source",
    [
        # What the scripts did before #20's last item (profile_replay, bench_triton_ns,
        # bench_distributed, bench_trailers, bench_trailers_git).
        "from musgd._functional import Hyper",
        "from musgd._optimizer import group_structure",
        "from musgd import _triton_ns as T",
        "from musgd.bench._evidence import build_evidence",
        "from wpgate._config import load_config  # noqa: E402",
        "import wpgate._git",
        "import wpgate._git as g",
        "from wpgate.evidence import _private_helper",
        "import musgd\nmusgd._replay.environment_key",
        "import musgd.bench as b\nb._cli.main([])",
        "def f():\n    from wpgate._commits import lint_range",
    ],
)
def test_a_private_use_is_caught(source: str) -> None:
    assert len(private_uses(source)) == 1


def test_public_uses_and_other_modules_pass() -> None:
    source = (
        "from __future__ import annotations\n"
        "import musgd\n"
        "from musgd import MuSGD\n"
        "from musgd.bench import PARAMETER_SETS\n"
        "from wpgate.api import lint_trailer_range\n"
        "from wpgate.evidence import write_evidence\n"
        "from bench_trailers import _summary\n"  # a sibling script, not a package
        "import torch._dynamo\n"
        "musgd.__version__\n"
        "MuSGD._private_of_a_class\n"  # a class's attribute, not a module's: not judged here
    )
    assert private_uses(source) == []
