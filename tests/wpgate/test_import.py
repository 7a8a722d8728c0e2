"""Import contracts of the governance toolkit: its command line loads neither torch nor yaml.

Each probe runs in a fresh interpreter, so nothing this test process imported can hide a leak;
the control shows the probe does see a module that an import pulls in.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest
from git_helpers import git, new_repository

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "yaml")


def _loaded_after(statement: str) -> list[str]:
    """The heavy top-level modules in ``sys.modules`` after ``statement``, in a new process."""
    code = (
        f"import sys\n{statement}\n"
        f"print(sorted({{m.split('.')[0] for m in sys.modules}} & {set(HEAVY)!r}))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    return ast.literal_eval(done.stdout.strip())  # type: ignore[no-any-return]


@pytest.mark.parametrize("module", ["wpgate", "wpgate.cli"])
def test_the_command_line_loads_neither_torch_nor_yaml(module: str) -> None:
    assert _loaded_after(f"import {module}") == []


def test_the_probe_sees_a_module_an_import_pulls_in() -> None:
    # Control: the site's evidence renderer imports yaml at module level, so the probe must say so.
    assert _loaded_after("import wpgate.site._evidence") == ["yaml"]


# What the range lint of a history with no governance documents and no configuration file does
# not need: the TOML reader, JSON (a text report), hashing (no evidence), the docs linters,
# the parsers of the documents that are not there, the test-file scanners (no gate named), the
# docs linters' option records, click (a plain command line), dataclasses with the inspect
# module it imports (the records on the way are wpgate._record's) and Python's parser (no gate
# names a Python file).
NOT_FOR_A_RANGE = (
    "ast",
    "click",
    "dataclasses",
    "inspect",
    "tomllib",
    "json",
    "hashlib",
    "wpgate._docs",
    "wpgate._gate_languages",
    "wpgate.docs_options",
    "wpgate.parsers.markdown",
    "wpgate.parsers.provenance",
)


def _after_a_range_lint(
    tmp_path: Path, options: list[str], expression: str, message: str = "add a feature"
) -> list[str]:
    """The exit status of ``wpgate trailers --range HEAD`` over a one-commit history (its
    ``message``) with no documents or configuration, and ``expression`` after it, printed by a
    new process."""
    root = new_repository(tmp_path)
    git(root, "commit", "-q", "--allow-empty", "-m", message)
    arguments = ["trailers", "--range", "HEAD", *options, "--root", str(root)]
    code = f"import sys\nfrom wpgate.cli import main\nstatus = main({arguments!r})\n"
    code += f"print(status)\nprint({expression})"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-2:]


def test_a_range_lint_of_a_bare_history_loads_only_what_it_reads(tmp_path: Path) -> None:
    loaded = f"sorted(set(sys.modules) & {set(NOT_FOR_A_RANGE)!r})"
    status, modules = _after_a_range_lint(tmp_path, [], loaded)
    assert status == "1"  # the message carries no trailers: the lint ran
    assert ast.literal_eval(modules) == []


def test_the_json_report_still_loads_json(tmp_path: Path) -> None:
    # Control for the test above: the probe sees a lazily imported module once it is used.
    status, loaded = _after_a_range_lint(tmp_path, ["--format", "json"], "'json' in sys.modules")
    assert (status, loaded) == ("1", "True")


def test_a_gate_naming_a_test_file_loads_the_scanners(tmp_path: Path) -> None:
    # Control for the bare history above: the test-file scanners load once a gate names a file.
    message = "fix: handle x\n\nGate: pkg/x_test.go::TestX\n"
    expression = "'wpgate._gate_languages' in sys.modules"
    status, loaded = _after_a_range_lint(tmp_path, [], expression, message)
    assert (status, loaded) == ("1", "True")


def _imported_top_levels(package: Path) -> set[str]:
    names: set[str] = set()
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names.add(node.module.split(".")[0])
    return names


def test_every_declared_base_dependency_is_imported_by_wpgate() -> None:
    """A declared dependency nothing imports is dead weight on every install (DECISIONS D1)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    # A requirement starts with its distribution name (PEP 508): letters, digits, `.`, `_`, `-`.
    names = (re.match(r"[A-Za-z0-9._-]+", dep) for dep in project["dependencies"])
    declared = {name[0].lower() for name in names if name}
    providers = packages_distributions()
    used = {
        dist.lower()
        for name in _imported_top_levels(ROOT / "src" / "wpgate")
        for dist in providers.get(name, [])
    }
    assert declared, "pyproject.toml declares no base dependencies"
    assert declared <= used, f"declared but never imported by src/wpgate: {sorted(declared - used)}"


def _wpgate_imports(path: Path) -> set[str]:
    """Every wpgate module ``path`` imports: at module level, under ``if TYPE_CHECKING:`` and
    inside functions (a lazy import that closes a loop is a cycle all the same)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("wpgate"):
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("wpgate"))
    return found


# Edges a cycle may use, by name. Empty: the last loop (the configuration validates rule names
# against the registry, whose trailer rules took the configuration's types) was cut when each
# linter's options moved to `wpgate.options`, which imports no wpgate module (WP-015).
KNOWN_LAZY_EDGES: set[tuple[str, str]] = set()


def test_wpgate_modules_import_each_other_without_a_cycle() -> None:
    package = ROOT / "src" / "wpgate"
    modules = {
        ".".join(("wpgate", *path.relative_to(package).with_suffix("").parts)).removesuffix(
            ".__init__"
        ): path
        for path in package.rglob("*.py")
    }
    graph = {
        name: {
            m
            for m in _wpgate_imports(path)
            if m in modules and m != name and (name, m) not in KNOWN_LAZY_EDGES
        }
        for name, path in modules.items()
    }
    # A package's __init__ runs before its sub-modules: importing `wpgate.rules.x` imports
    # `wpgate.rules` first, so that edge counts too.
    for name in modules:
        parent = name.rpartition(".")[0]
        if parent in modules and parent != "wpgate":
            graph[name].add(parent)
    # `wpgate.rules.register_all` imports every rule module by name (importlib): who calls it
    # imports them all.
    rule_modules = {m for m in modules if m.startswith("wpgate.rules.")}
    for name, path in modules.items():
        if "wpgate.rules.register_all" in _wpgate_imports(path):
            graph[name] |= rule_modules
    state: dict[str, int] = {}

    def visit(name: str, trail: tuple[str, ...]) -> None:
        if state.get(name) == 2:
            return
        assert state.get(name) != 1, f"import cycle: {' -> '.join((*trail, name))}"
        state[name] = 1
        for target in sorted(graph[name]):
            visit(target, (*trail, name))
        state[name] = 2

    assert "wpgate.records" in graph["wpgate.rules.evidence"]
    for name in sorted(graph):
        visit(name, ())
