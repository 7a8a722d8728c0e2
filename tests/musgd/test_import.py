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

# Put first on sys.meta_path by a sitecustomize: any import of torch fails as if not installed.
_BLOCK_TORCH = """\
import sys


class _NoTorch:
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ModuleNotFoundError("No module named 'torch'", name=name)
        return None


sys.meta_path.insert(0, _NoTorch())
"""
CPU_ROUTE = "pip install torch --index-url https://download.pytorch.org/whl/cpu"


def _python(*args: str, extra_path: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if extra_path is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(extra_path), env.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, env=env, check=False
    )


def _without_torch(tmp_path: Path) -> Path:
    (tmp_path / "sitecustomize.py").write_text(_BLOCK_TORCH)
    return tmp_path


def test_import_musgd_without_torch_says_how_to_install(tmp_path: Path) -> None:
    code = (
        "try:\n"
        "    import musgd\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
        "    print(exc.__cause__, exc.__suppress_context__)\n"
        "else:\n"
        "    raise SystemExit('import musgd succeeded without torch')\n"
    )
    result = _python("-c", code, extra_path=_without_torch(tmp_path))
    assert result.returncode == 0, result.stderr
    message, chain = result.stdout.splitlines()
    assert "PyTorch" in message
    # The CPU wheels first (a plain torch requirement pulls the CUDA build), then the extra.
    assert message.index(CPU_ROUTE) < message.index('pip install "wpgate[optim]"')
    assert chain == "None True"  # one line: no "during handling of the above exception"


def test_a_musgd_command_without_torch_prints_one_line_and_exits_2(tmp_path: Path) -> None:
    result = _python("-m", "musgd.bench", "--help", extra_path=_without_torch(tmp_path))
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: musgd needs PyTorch")
    assert CPU_ROUTE in lines[0]


def test_the_musgd_yolo_console_script_without_torch_prints_one_line_and_exits_2(
    tmp_path: Path,
) -> None:
    # A console script runs a wrapper named after the command (pip writes this one), not `-m`.
    script = tmp_path / "bin" / "musgd-yolo"
    script.parent.mkdir()
    script.write_text(
        "import sys\nfrom musgd.ultralytics import main\nsys.exit(main())\n", encoding="utf-8"
    )
    result = _python(str(script), "--help", extra_path=_without_torch(tmp_path))
    assert result.returncode == 2, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: musgd needs PyTorch")
    assert CPU_ROUTE in lines[0]


def test_the_fake_torch_is_what_made_the_import_fail(tmp_path: Path) -> None:
    # Control for the test above: the same subprocess without the fake imports musgd fine.
    result = _python("-c", "import musgd; print(musgd.MuSGD.__name__)")
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
