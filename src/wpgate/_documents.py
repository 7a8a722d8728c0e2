"""Reading the governance documents: where they live, their text read once per run, paths.

The layer under every docs linter (``wpgate._docs``), the project index and the evidence tree:
document locations come from ``[tool.wpgate.docs]`` (:class:`~wpgate.options.DocsLayout`); inside
:func:`parse_once` each file is read and each document parsed at most once; citations are
resolved only inside the repository (:func:`resolve_inside`).
"""

from __future__ import annotations

import contextlib
import hashlib
import posixpath
import re
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

from wpgate._model import Problem

# Parsed documents shared by the linters of one run (`wpgate check`), keyed by what was read.
_SHARED: list[dict[tuple[Any, ...], Any]] = []


@contextlib.contextmanager
def parse_once() -> Iterator[None]:
    """Within the block, each governance document is read and parsed at most once.

    ``wpgate check`` reads the provenance table and the registry for the trailers' references
    and again for their own linters; the files do not change during one run, so the second
    reader gets the first one's records.
    """
    _SHARED.append({})
    try:
        yield
    finally:
        _SHARED.pop()


def load_shared(key: tuple[Any, ...], load: Callable[[], Any]) -> Any:
    """``load()``, or inside :func:`parse_once` the value loaded for ``key`` before."""
    if not _SHARED:
        return load()
    cache = _SHARED[-1]
    if key not in cache:
        cache[key] = load()
    return cache[key]


def read_text(root: Path, rel: str) -> tuple[str | None, Problem | None]:
    """The UTF-8 text of ``root/rel``, or the problem saying why it cannot be read.

    Inside :func:`parse_once` each file is read once, whichever linters ask for it.
    """
    read: tuple[str | None, int, str] = load_shared(("text", root, rel), lambda: _read(root, rel))
    text, line, problem = read
    if text is not None:
        return text, None
    return None, Problem(rel, line, problem)


def _read(root: Path, rel: str) -> tuple[str | None, int, str]:
    """``(text, 0, "")``, or ``(None, line, why)`` when ``root/rel`` cannot be read."""
    try:
        data = (root / rel).read_bytes()
    except FileNotFoundError:
        return (
            None,
            0,
            f"{rel} does not exist; create it (`wpgate init` writes a start) or fix the path",
        )
    except OSError as exc:
        return None, 0, f"cannot read {rel}: {exc.strerror}"
    try:
        return data.decode("utf-8-sig"), 0, ""
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        return None, line, f"{rel} is not valid UTF-8 (byte {exc.start}); re-save it as UTF-8"


# --------------------------------------------------------------------------- paths


def resolve_inside(  # noqa: PLR0911 - one early answer per kind of refusal
    root: Path, base: str, target: str, *, allow_parent: bool = False
) -> tuple[str | None, str | None]:
    """``target`` (relative to repository-relative directory ``base``) as a repository path.

    Returns ``(path, None)`` or ``(None, why)``. Refused: absolute paths; ``..`` components
    (with ``allow_parent``, the page-relative links of Markdown, only those that climb above
    the repository root); symbolic links that lead out of the repository.
    """
    if not target:
        return None, "the citation is empty"
    if target.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:[\\/]", target) or "\\" in target:
        return None, f"`{target}` is an absolute path; cite a path inside the repository"
    if not allow_parent and ".." in PurePosixPath(target).parts:
        return None, f"`{target}` uses `..`; cite the file without leaving its directory tree"
    rel = posixpath.normpath(posixpath.join(base, target) if base else target)
    if rel == ".." or rel.startswith("../"):
        return None, f"`{target}` leads out of the repository; cite a file inside it"
    real_root = root.resolve()
    try:
        resolved = (root / rel).resolve()
    except (OSError, RuntimeError):
        return None, f"`{target}` cannot be resolved (a symbolic link loop?)"
    if not resolved.is_relative_to(real_root):
        return None, f"`{target}` is a link that leads out of the repository; cite a real file"
    return rel, None


def sha256_file(path: Path) -> str | None:
    """The sha256 hex of a regular file, or None when it cannot be read."""
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def glob_pages(root: Path, patterns: Sequence[str]) -> list[str]:
    """The repository-relative files matching any glob in ``patterns``, sorted, no duplicates."""
    seen: set[str] = set()
    for pattern in patterns:
        for path in root.glob(pattern):
            if path.is_file():
                seen.add(path.relative_to(root).as_posix())
    return sorted(seen)
