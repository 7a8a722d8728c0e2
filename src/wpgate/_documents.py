"""Reading the governance documents: where they live, their text read once per run, paths.

The layer under every docs linter (``wpgate._docs``), the project index and the evidence tree:
document locations come from ``[tool.wpgate.docs]`` (:class:`~wpgate.options.DocsLayout`); inside
:func:`parse_once` each file is read and each document parsed at most once; citations are
resolved only inside the repository (:func:`resolve_inside`). Every file wpgate reads from the
repository (configuration, documents, gate targets, evidence) goes through :func:`read_bounded`:
a regular file inside the repository, at most :data:`MAX_FILE_BYTES` long.
"""

from __future__ import annotations

import contextlib
import errno
import os
import posixpath
import re
import stat
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

from wpgate._model import Problem
from wpgate.errors import ReadRefusedError

__all__ = [
    "MAX_FILE_BYTES",
    "ReadRefusedError",
    "glob_pages",
    "load_shared",
    "parse_once",
    "read_bounded",
    "read_text",
    "resolve_inside",
    "sha256_file",
]

#: The largest file wpgate reads from a repository: 16 MiB, a hundred times this project's
#: largest governance document; a larger one is refused rather than read into memory.
MAX_FILE_BYTES = 16 << 20

# Opening a FIFO for reading waits for a writer unless non-blocking; the final component is
# never followed (it was resolved just before, so a link there means the tree changed under us).
_OPEN_FLAGS = (
    os.O_RDONLY
    | getattr(os, "O_NONBLOCK", 0)
    | getattr(os, "O_NOFOLLOW", 0)
    | getattr(os, "O_CLOEXEC", 0)
    | getattr(os, "O_BINARY", 0)
)

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


def _kind(mode: int) -> str:
    """What a non-regular file is, as a message names it."""
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def read_bounded(root: Path, rel: str, *, limit: int = MAX_FILE_BYTES) -> bytes:
    """The bytes of ``root/rel``: a regular file inside ``root`` (after resolving symbolic
    links) of at most ``limit`` bytes.

    A missing file raises :class:`FileNotFoundError`; a file refused (a link out of the
    repository, a FIFO, a device, a directory, a file over ``limit``) raises
    :class:`ReadRefusedError` with a message that says what is wrong. A FIFO never blocks and a
    device such as ``/dev/zero`` is never read: the checks come before the first byte, and no
    more than ``limit + 1`` bytes are ever read.
    """
    loop = f"{rel} is a symbolic link loop; replace it with a file"
    try:
        real_root = root.resolve()
        resolved = (root / rel).resolve(strict=True)
    except RuntimeError as exc:  # a symbolic link loop (Python < 3.13)
        raise ReadRefusedError(loop) from exc
    except FileNotFoundError:
        raise
    except OSError as exc:
        unreadable = f"{rel} cannot be read ({exc.strerror}); check the path"
        raise ReadRefusedError(loop if exc.errno == errno.ELOOP else unreadable) from exc
    if not resolved.is_relative_to(real_root):
        raise ReadRefusedError(
            f"{rel} is a symbolic link that leads out of the repository (to {resolved}); "
            "replace it with the file itself"
        )
    too_large = f"{rel} is over wpgate's limit of {limit} bytes; split or shorten it"
    try:
        fd = os.open(resolved, _OPEN_FLAGS)
    except OSError as exc:
        why = f"{rel} cannot be opened ({exc.strerror}); check its permissions"
        raise ReadRefusedError(why) from exc
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ReadRefusedError(
                f"{rel} is {_kind(info.st_mode)}, not a regular file; replace it"
            )
        if info.st_size > limit:
            raise ReadRefusedError(too_large)
        chunks: list[bytes] = []
        total = 0
        while total <= limit and (chunk := os.read(fd, limit + 1 - total)):
            chunks.append(chunk)
            total += len(chunk)
    finally:
        os.close(fd)
    if total > limit:  # it grew after its size was taken
        raise ReadRefusedError(too_large)
    return b"".join(chunks)


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
    """``(text, 0, "")``, or ``(None, line, why)`` when ``root/rel`` cannot be read.

    A document holding a NUL byte is refused, as a commit message holding one is (WPG100):
    no text format wpgate reads allows one, and readers disagree on where it ends.
    """
    try:
        data = read_bounded(root, rel)
    except FileNotFoundError:
        return (
            None,
            0,
            f"{rel} does not exist; create it or fix the path",
        )
    except ReadRefusedError as exc:
        return None, 0, str(exc)
    except OSError as exc:
        return None, 0, f"cannot read {rel}: {exc.strerror}"
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        return None, line, f"{rel} is not valid UTF-8 (byte {exc.start}); re-save it as UTF-8"
    nul = data.find(b"\0")
    if nul >= 0:
        line = data.count(b"\n", 0, nul) + 1
        return None, line, f"{rel} holds a NUL byte on this line; a text file has none, remove it"
    return text, 0, ""


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


def sha256_file(root: Path, rel: str) -> str | None:
    """The sha256 hex of the file ``root/rel`` (:func:`read_bounded`), or None when it cannot be
    read."""
    import hashlib  # the evidence linter hashes; the commit linters never do

    try:
        return hashlib.sha256(read_bounded(root, rel)).hexdigest()
    except OSError:
        return None


def glob_pages(root: Path, patterns: Sequence[str]) -> list[str]:
    """The repository-relative files matching any glob in ``patterns``, sorted, no duplicates.

    A FIFO, device or socket that matches is listed too, so that reading it is a finding
    (:func:`read_bounded` refuses it) rather than a page silently missing.
    """
    seen: set[str] = set()
    for pattern in patterns:
        for path in root.glob(pattern):
            if path.exists() and not path.is_dir():
                seen.add(path.relative_to(root).as_posix())
    return sorted(seen)
