"""Import contracts: ``musgd`` without torch says what to install.

That ``wpgate`` and its command line never pull in torch is tests/wpgate/test_import.py.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import musgd


def _python(code: str, extra_path: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if extra_path is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(extra_path), env.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False
    )


def test_import_musgd_without_torch_says_how_to_install(tmp_path: Path) -> None:
    # A `torch` module that fails to import, first on sys.path, stands in for "not installed".
    (tmp_path / "torch.py").write_text("raise ImportError('No module named torch')\n")
    code = (
        "try:\n"
        "    import musgd\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
        "else:\n"
        "    raise SystemExit('import musgd succeeded without torch')\n"
    )
    result = _python(code, extra_path=tmp_path)
    assert result.returncode == 0, result.stderr
    assert 'pip install "wpgate[optim]"' in result.stdout
    assert "PyTorch" in result.stdout


def test_the_fake_torch_is_what_made_the_import_fail(tmp_path: Path) -> None:
    # Control for the test above: the same subprocess without the fake imports musgd fine.
    result = _python("import musgd; print(musgd.MuSGD.__name__)")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "MuSGD"


def test_public_api() -> None:
    assert set(musgd.__all__) >= {"MuSGD", "orthogonalize", "orthogonalize_batched", "param_groups"}
    for name in musgd.__all__:
        assert getattr(musgd, name) is not None


ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "src" / "musgd"


def _musgd_imports(path: Path, name: str) -> set[str]:
    """Every musgd module ``path`` (module ``name``) imports: at module level, under ``if
    TYPE_CHECKING:`` and inside functions (a lazy import that closes a loop is a cycle all the
    same); relative imports resolved against ``name``'s package."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                module = f"{base}.{module}" if module else base
            if module.split(".")[0] == "musgd":
                found.add(module)
                found.update(f"{module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "musgd")
    return found


def musgd_import_graph() -> dict[str, set[str]]:
    """Module -> the musgd modules it names in an import (the package ``musgd`` itself left out:
    every module is imported through it, so its edges are not the modules' own)."""
    modules = {
        ".".join(("musgd", *path.relative_to(PACKAGE).with_suffix("").parts)).removesuffix(
            ".__init__"
        ): path
        for path in PACKAGE.rglob("*.py")
    }
    # A sub-module's implicit import of its package (``musgd.bench``, whose __init__ imports
    # the sub-modules) is no edge: only what a module names itself.
    return {
        name: {m for m in _musgd_imports(path, name) if m in modules and m not in (name, "musgd")}
        for name, path in modules.items()
        if name != "musgd"
    }


def import_cycles(graph: dict[str, set[str]]) -> list[tuple[str, ...]]:
    """Each import cycle found by a depth-first walk, as the trail that closes it."""
    state: dict[str, int] = {}
    cycles: list[tuple[str, ...]] = []

    def visit(name: str, trail: tuple[str, ...]) -> None:
        if state.get(name) == 2:
            return
        if state.get(name) == 1:
            cycles.append((*trail[trail.index(name) :], name))
            return
        state[name] = 1
        for target in sorted(graph.get(name, ())):
            visit(target, (*trail, name))
        state[name] = 2

    for name in sorted(graph):
        visit(name, ())
    return cycles


def test_import_cycles_finds_a_planted_loop() -> None:
    # Control for the test below: the walk reports a lazy loop of two modules.
    graph = {"musgd.a": {"musgd.b"}, "musgd.b": {"musgd.a"}, "musgd.c": set()}
    assert import_cycles(graph) == [("musgd.a", "musgd.b", "musgd.a")]
    assert import_cycles({"musgd.a": {"musgd.b"}, "musgd.b": set()}) == []


def test_musgd_modules_import_each_other_without_a_cycle() -> None:
    graph = musgd_import_graph()
    # The graph sees the lazy (in-function) imports of the Triton backend.
    assert "musgd._triton_ns" in graph["musgd._functional"]
    assert "musgd._device" in graph["musgd._triton_ns"]
    assert import_cycles(graph) == []
