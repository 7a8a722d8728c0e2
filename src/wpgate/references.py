"""What a trailer may cite, and the static resolver for pytest node ids.

:class:`References` holds the ids read from the repository's governance documents (the reading
itself lives in :mod:`wpgate._docs`). :class:`GateResolver` checks ``Gate:`` node ids without
importing or running anything: the file must exist inside the repository and the named test
function, class or method must be defined in it (by AST). Parametrized ids (``test_x[a-b]``)
resolve to their function.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from wpgate._documents import ReadRefusedError, read_bounded

__all__ = ["GateResolver", "References", "resolve_node_id", "split_node_ids"]

# A node id: anything but separators, where a [parameter part] may hold separators too.
_NODE_ID = re.compile(r"(?:[^\s;,\[]+|\[[^\]]*\])+")
_PARAMETERS = re.compile(r"\[[^\]]*\]")


@dataclass(frozen=True, eq=False)
class References:
    """Ids that exist in the repository: work packages, sources, placeholders, assumptions.

    Compared and hashed by identity: the rules cache their verdicts per value and per
    ``References`` object, so a process that lints again with freshly loaded documents starts
    new cache entries instead of comparing four sets on every lookup (or reusing a verdict
    that the new documents might change).
    """

    wp_ids: frozenset[str] = field(default_factory=frozenset)
    provenance_ids: frozenset[str] = field(default_factory=frozenset)
    placeholder_ids: frozenset[str] = field(default_factory=frozenset)
    assumption_ids: frozenset[str] = field(default_factory=frozenset)


def split_node_ids(value: str) -> list[str]:
    """The node ids of a ``Gate:`` value, separated by ``;``, ``,`` or spaces outside ``[...]``."""
    return _NODE_ID.findall(value)


def _names(body: list[ast.stmt]) -> dict[str, list[ast.stmt]]:
    """Functions and classes defined directly in ``body``, with each class's own body."""
    found: dict[str, list[ast.stmt]] = {}
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            found[node.name] = []
        elif isinstance(node, ast.ClassDef):
            found[node.name] = node.body
        elif isinstance(node, ast.If | ast.Try):
            # Tests defined under `if sys.version_info...:` or `try:` are still collected.
            for block in (node.body, node.orelse, *getattr(node, "handlers", ())):
                inner = block.body if isinstance(block, ast.ExceptHandler) else block
                found.update(_names(inner))
    return found


class GateResolver:
    """Resolves pytest node ids against the files under ``root``; each file is parsed once.

    ``read`` replaces the working tree as the source of a file's bytes (e.g. one commit's tree,
    read from git): it raises ``FileNotFoundError`` for a file that is not there.
    """

    def __init__(self, root: Path, read: Callable[[str], bytes] | None = None) -> None:
        self._root = root.resolve()
        self._read = self._read_file if read is None else read
        self._trees: dict[str, dict[str, list[ast.stmt]] | str] = {}
        self._answers: dict[str, str | None] = {}

    def _read_file(self, rel: str) -> bytes:
        """A file of the working tree, read by :func:`~wpgate._documents.read_bounded` (refused
        when it leads out of the repository, is no regular file, or is too large)."""
        return read_bounded(self._root, rel)

    def _module(self, rel: str) -> dict[str, list[ast.stmt]] | str:
        """The top-level names of a test file, or why it cannot be read."""
        cached = self._trees.get(rel)
        if cached is not None:
            return cached
        result: dict[str, list[ast.stmt]] | str
        try:
            result = _names(ast.parse(self._read(rel), filename=rel).body)
        except FileNotFoundError:
            result = f"`{rel}` does not exist; fix the path or add the test file"
        except ReadRefusedError as exc:
            result = str(exc)
        except (OSError, SyntaxError, ValueError) as exc:
            result = f"`{rel}` cannot be parsed ({exc.__class__.__name__}); fix the file"
        self._trees[rel] = result
        return result

    def resolve(self, node_id: str) -> str | None:
        """Why ``node_id`` does not resolve, or None when it does."""
        # Parameters do not change what a node id resolves to, so the answer is shared.
        key = _PARAMETERS.sub("", node_id) if "[" in node_id else node_id
        if key not in self._answers:
            self._answers[key] = self._resolve(node_id)
        return self._answers[key]

    def _resolve(self, node_id: str) -> str | None:
        """Resolve one node id (uncached)."""
        path, *parts = node_id.split("::")
        pure = PurePosixPath(path)
        if not path or pure.is_absolute() or ".." in pure.parts:
            return f"`{node_id}` must start with a repository-relative file path"
        if pure.suffix != ".py":
            return f"`{node_id}` must name a Python test file (`tests/test_x.py::test_y`)"
        scope = self._module(pure.as_posix())
        if isinstance(scope, str):
            return scope
        walked = [path]
        for part in parts:
            name = part.split("[", 1)[0]
            if not name:
                return f"`{node_id}` has an empty part after `::`; remove it"
            if name not in scope:
                where = "::".join(walked)
                return f"`{name}` is not defined in `{where}`; fix the node id or add the test"
            scope = _names(scope[name])
            walked.append(name)
        return None


def resolve_node_id(root: Path, node_id: str) -> str | None:
    """Why ``node_id`` does not resolve under ``root`` (None when it does); one-off helper."""
    return GateResolver(root).resolve(node_id)
