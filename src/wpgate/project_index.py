"""The project index: what exists in a repository, for the changelog rules (WPG5xx).

Files and directories (caches, virtual environments and build outputs left out; in a git work
tree, only what git would take: tracked files and untracked ones it does not ignore, so that a
checkout's generated outputs judge nothing a fresh clone would not), the Python
modules under ``src/`` with their top-level and class-member names (read with ``ast``, never
imported), identifiers, ``--flag`` literals and click commands of ``src/``, ``scripts/`` and
``tests/``, console scripts from ``pyproject.toml`` and Makefile targets.
"""

from __future__ import annotations

import ast
import os
import re
import tomllib
from pathlib import Path, PurePosixPath

from wpgate._config import Config
from wpgate._documents import read_bounded, read_text
from wpgate._git import listed_files
from wpgate.records import ProjectIndex

__all__ = ["load_project_index"]

_SKIP_DIRS = frozenset(
    {
        ".git",
        ".venv",
        "venv",
        "node_modules",
        "__pycache__",
        ".mypy_cache",
        ".ruff_cache",
        ".pytest_cache",
        ".hypothesis",
        ".tox",
        ".nox",
    }
)
# Build outputs, skipped only at the top (``src/wpgate/site/`` is a package, ``site/`` a build).
_SKIP_TOP_DIRS = frozenset({"site", "build", "dist"})
_PY_ROOTS = ("src", "scripts", "tests")
# A click command: its decorator, then (past any other decorators, which may span lines, as a
# formatter writes a long `@click.option(...)`) the first function defined.
_COMMAND_RE = re.compile(
    r"@[\w.]+\.(?:command|group)\(\s*(?:name\s*=\s*)?(?:\"([\w-]+)\")?[^)]*\)[\s\S]*?"
    r"^[ \t]*(?:async[ \t]+)?def\s+(\w+)",
    re.MULTILINE,
)
_FLAG_LITERAL_RE = re.compile(r"[\"'\s(/](--[A-Za-z0-9][\w.-]*)")
_IDENTIFIER_RE = re.compile(r"\b[A-Za-z_]\w*\b")
_MAKE_TARGET_RE = re.compile(r"^([A-Za-z0-9_.-]+)\s*:(?!=)", re.MULTILINE)


def _walk(root: Path) -> tuple[set[str], set[str]]:
    """Every file and directory of the tree (repository-relative), caches and venvs left out."""
    files: set[str] = set()
    directories: set[str] = set()
    for current, dirs, names in os.walk(root):
        rel = Path(current).relative_to(root).as_posix()
        dirs[:] = [
            d
            for d in dirs
            if d not in _SKIP_DIRS
            and not d.endswith(".egg-info")
            and not (rel == "." and d in _SKIP_TOP_DIRS)
        ]
        prefix = "" if rel == "." else f"{rel}/"
        directories.update(prefix + d for d in dirs)
        files.update(prefix + n for n in names)
    return files, directories


def _module_names(source: str) -> tuple[set[str], dict[str, set[str]]]:
    """A module's top-level names and each top-level class's member names (AST, no import)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return set(), {}
    names: set[str] = set()
    members: dict[str, set[str]] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
            if isinstance(node, ast.ClassDef):
                members[node.name] = _class_members(node)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names, members


def _class_members(node: ast.ClassDef) -> set[str]:
    """The methods, attributes and dataclass fields of a class body."""
    out: set[str] = set()
    for item in node.body:
        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(item.name)
        elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
            out.add(item.target.id)
        elif isinstance(item, ast.Assign):
            out.update(t.id for t in item.targets if isinstance(t, ast.Name))
    return out


def _in_repository(root: Path, files: set[str], directories: set[str]) -> None:
    """Keep, in place, the files git would take (tracked, or untracked and not ignored) and the
    directories that hold one; nothing changes where ``root`` is not in a git work tree."""
    listed = listed_files(root)
    if listed is None:
        return
    files.intersection_update(listed)
    holding = {parent.as_posix() for f in files for parent in PurePosixPath(f).parents}
    directories.intersection_update(holding)


def load_project_index(root: Path, config: Config | None = None) -> ProjectIndex:
    """The :class:`~wpgate.records.ProjectIndex` of the tree at ``root`` (``config`` unused)."""
    files, directories = _walk(root)
    _in_repository(root, files, directories)
    modules: dict[str, frozenset[str]] = {}
    members: dict[str, frozenset[str]] = {}
    identifiers: set[str] = set()
    flags: set[str] = set()
    commands: set[str] = set()
    for rel in sorted(files):
        top = rel.split("/", 1)[0]
        if not rel.endswith(".py") or top not in _PY_ROOTS:
            continue
        text, _ = read_text(root, rel)
        if text is None:
            continue
        identifiers.update(_IDENTIFIER_RE.findall(text))
        flags.update(_FLAG_LITERAL_RE.findall(text))
        for name, function in _COMMAND_RE.findall(text):
            commands.add(name or function.replace("_", "-"))
        if top != "src":
            continue
        parts = rel[len("src/") : -len(".py")].split("/")
        if parts[-1] == "__init__":
            parts = parts[:-1]
        dotted = ".".join(parts)
        names, classes = _module_names(text)
        for package in (".".join(parts[:i]) for i in range(1, len(parts))):
            modules.setdefault(package, frozenset())
        modules[dotted] = frozenset(modules.get(dotted, frozenset()) | names)
        for cls, cls_members in classes.items():
            members[f"{dotted}.{cls}"] = frozenset(cls_members)
    # A package re-exports its sub-modules as attributes.
    for dotted in list(modules):
        parent, _, child = dotted.rpartition(".")
        if parent in modules:
            modules[parent] = modules[parent] | {child}
    scripts: set[str] = set()
    try:
        project = tomllib.loads(read_bounded(root, "pyproject.toml").decode("utf-8"))
        scripts.update(project.get("project", {}).get("scripts", {}))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        pass
    make_text, _ = read_text(root, "Makefile")
    targets = set(_MAKE_TARGET_RE.findall(make_text or ""))
    return ProjectIndex(
        files=frozenset(files),
        directories=frozenset(directories),
        modules=modules,
        members=members,
        identifiers=frozenset(identifiers),
        flags=frozenset(flags),
        commands=frozenset(commands),
        scripts=frozenset(scripts),
        make_targets=frozenset(targets),
    )
