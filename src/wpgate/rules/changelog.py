"""Changelog rules (WPG5xx): the names the unreleased section promises exist in the tree.

A backticked span is classified, then resolved against a :class:`ProjectIndex` built by
``wpgate.project_index.load_project_index``:

- ``--flag`` (or ``--a/--b``): the literal appears in the project's Python sources;
- ``wpgate check --format json``, ``make gate``, ``python -m pkg.mod``: the console script (or
  Makefile target, or module) exists, and so do its subcommands and flags;
- ``pkg.module`` / ``pkg.module.name`` / ``pkg.Class.method`` / ``name(...)``: the module is a
  Python file of the project and the attributes are defined in it (AST, never imported);
- a path (``src/x.py``, ``docs/evidence/``, ``tests/x.py::test_y``, globs): it exists;
- ``snake_case`` / ``CamelCase`` identifiers: they appear in the project's Python sources.

Anything else (prose in code, ``[tool.wpgate]``, ``WP:``) is not a name and is left alone.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterator

from wpgate._model import Finding, Rule, register
from wpgate.docs_options import ChangelogOptions
from wpgate.parsers.changelog import CodeName, Unreleased
from wpgate.records import ProjectIndex
from wpgate.rules import CHANGELOG_NAMES_RESOLVE, CHANGELOG_UNRELEASED, declared

_FLAG_RE = re.compile(r"^--[A-Za-z0-9][\w.-]*(?:=\S*)?(?:/--[A-Za-z0-9][\w.-]*)*$")
_DOTTED_RE = re.compile(r"^([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)(\(.*\))?$")
_PATH_RE = re.compile(r"^[\w.\-/*?\[\]]+(?:::[\w\[\]\-.:]+)?$")
_EXTENSIONS = (
    ".py",
    ".md",
    ".json",
    ".toml",
    ".yaml",
    ".yml",
    ".cfg",
    ".txt",
    ".sh",
    ".ini",
    ".lock",
    # The gate languages' files and other sources an entry may name (`web/app.ts`).
    ".go",
    ".rs",
    ".js",
    ".mjs",
    ".cjs",
    ".jsx",
    ".ts",
    ".tsx",
    ".bats",
    ".html",
    ".css",
    ".c",
    ".h",
    ".cc",
    ".cpp",
    ".hpp",
    ".cu",
    ".java",
    ".kt",
    ".rb",
    ".ipynb",
)
_KWARG_RE = re.compile(r"([A-Za-z_]\w*)\s*=")


def _path_exists(index: ProjectIndex, text: str) -> bool:
    """Whether a path (maybe a glob, a directory or a pytest node id) exists in the tree."""
    path = text.split("::", 1)[0].rstrip("/")
    if any(c in path for c in "*?["):
        return any(fnmatch.fnmatch(f, path) for f in index.files) or any(
            fnmatch.fnmatch(d, path) for d in index.directories
        )
    return path in index.files or path in index.directories


def _looks_like_path(index: ProjectIndex, text: str) -> bool:
    """Whether ``text`` is meant as a path: a known extension, or a first part that exists."""
    if not _PATH_RE.match(text) or text.startswith((".", "*")):
        return False  # a dotfile's name, or a pattern of names (`*_test.go`), not a path
    path = text.split("::", 1)[0]
    if path.endswith(_EXTENSIONS):
        return True
    first = path.split("/", 1)[0]
    return "/" in path and (first in index.directories or first in index.files)


def _resolve_dotted(index: ProjectIndex, dotted: str) -> str | None:
    """Why ``pkg.mod.attr`` does not resolve, None when it does or is not the project's."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        module = ".".join(parts[:cut])
        if module not in index.modules:
            continue
        rest = parts[cut:]
        if not rest:
            return None
        if rest[0] not in index.modules[module]:
            return f"`{module}` defines no `{rest[0]}`"
        owner = f"{module}.{rest[0]}"
        if len(rest) > 1 and owner in index.members and rest[1] not in index.members[owner]:
            return f"`{owner}` has no member `{rest[1]}`"
        return None
    if parts[0] in {m.split(".", 1)[0] for m in index.modules}:
        return f"no module of the project is called `{'.'.join(parts[:-1]) or dotted}`"
    return None  # another project's name (torch.optim.Muon): not ours to check


def resolve_name(index: ProjectIndex, text: str) -> str | None:  # noqa: PLR0911 - a classifier
    """Why the backticked ``text`` does not resolve in the tree, or None (resolves, or no name)."""
    text = text.strip()
    if not text or text.startswith(("[", "#", "<", "{", '"', "'")):
        return None
    if text.startswith("--"):
        if not _FLAG_RE.match(text):
            return None
        missing = [f for f in (p.split("=", 1)[0] for p in text.split("/")) if f not in index.flags]
        return f"no option {', '.join(missing)} is defined in the sources" if missing else None
    if " " not in text and _looks_like_path(index, text):
        return None if _path_exists(index, text) else f"the path `{text}` does not exist"
    match = _DOTTED_RE.match(text)
    if match is None or (" " in text and not match.group(2)):
        return _resolve_command(index, text.split()) if " " in text else None
    name, call = match.group(1), match.group(2)
    if "." in name:
        problem = _resolve_dotted(index, name)
    elif "_" in name.strip("_") or re.match(r"^[A-Z][a-z]+[A-Z]", name) or call:
        problem = None if name in index.identifiers else f"`{name}` is not defined in the sources"
    else:
        return None
    if problem is None and call:
        unknown = [k for k in _KWARG_RE.findall(call) if k not in index.identifiers]
        if unknown:
            problem = f"`{name}` takes no argument {', '.join(unknown)}"
    return problem


def _resolve_command(  # noqa: PLR0911 - one answer per command kind
    index: ProjectIndex, words: list[str]
) -> str | None:
    """Why a command line (console script, ``make``, ``python -m``) does not resolve."""
    head = words[0]
    if head == "make":
        missing = [w for w in words[1:] if not w.startswith("-") and "=" not in w]
        missing = [w for w in missing if w not in index.make_targets]
        return f"the Makefile has no target {', '.join(missing)}" if missing else None
    if head.startswith("python") and len(words) > 2 and words[1] == "-m":
        module = words[2]
        if module.split(".", 1)[0] not in {m.split(".", 1)[0] for m in index.modules}:
            return None
        return None if module in index.modules else f"no module `{module}` in the project"
    if head not in index.scripts:
        return None
    options_started = False  # subcommands come first; later words are options and values
    for word in words[1:]:
        if word.startswith("--"):
            options_started = True
            flag = word.split("=", 1)[0]
            if flag not in index.flags:
                return f"`{head}` has no option {flag}"
        elif word.startswith("-") or not re.match(r"^[a-z][\w-]*$", word):
            options_started = True
        elif not options_started and word not in index.commands:
            return f"`{head}` has no subcommand `{word}`"
    return None


def check_unreleased_section(section: Unreleased, options: ChangelogOptions) -> Iterator[Finding]:
    """The changelog has an ``## [Unreleased]`` section (Keep a Changelog)."""
    if section.line == 0:
        yield Finding(
            section.path,
            0,
            CHANGELOG_UNRELEASED,
            "no `## [Unreleased]` section; add one above the latest release (Keep a Changelog)",
        )


def check_names(section: Unreleased, options: ChangelogOptions) -> Iterator[Finding]:
    """Every backticked name in the unreleased section resolves in the tree.

    The tree is ``section.index``; a section without one is not checked.
    """
    index = section.index
    if index is None:
        return
    ignored = frozenset(options.ignore)
    seen: set[tuple[str, int]] = set()
    for name in section.names:
        if name.text in ignored or (name.text, name.line) in seen:
            continue
        seen.add((name.text, name.line))
        problem = resolve_name(index, name.text)
        if problem is not None:
            yield _finding(section, name, problem)


def _finding(section: Unreleased, name: CodeName, problem: str) -> Finding:
    """The finding for an unresolved changelog name."""
    return Finding(
        section.path,
        name.line,
        CHANGELOG_NAMES_RESOLVE,
        f"the changelog promises `{name.text}` but {problem}; fix the entry or ship the name "
        "(list deliberate exceptions in `[tool.wpgate.changelog] ignore`)",
    )


#: The changelog rules: each check reads the unreleased section (and, for
#: changelog-names-resolve, the project index the runner put on it).
CHECKS: tuple[Rule[Unreleased, ChangelogOptions], ...] = register(
    declared(CHANGELOG_UNRELEASED, check_unreleased_section),
    declared(CHANGELOG_NAMES_RESOLVE, check_names),
)
