"""A portable cache of the compiled network: ``torch.compiler``'s cache artifacts in one file.

Inductor keeps its compilations on local disk (``TORCHINDUCTOR_CACHE_DIR``), so a second run on
the same machine already starts faster; a fresh machine or container compiles from scratch. With
``musgd_trainer(compile_network=True, compile_cache=PATH)`` the trainer loads the artifacts saved
in ``PATH`` (``torch.compiler.load_cache_artifacts``) before it first compiles, and writes them
again (``torch.compiler.save_cache_artifacts``) when training ends, so that the next run, on any
machine with the same PyTorch, Triton and GPU (PyTorch checks these), skips the compilation.

A cache that cannot be read or loaded is said in one warning and the run compiles as without
one: a cache is never a reason for a run to fail.
"""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path
from typing import Any

import torch

LOGGER = logging.getLogger("musgd")


def cache_path(value: object) -> Path | None:
    """``compile_cache``'s value checked: None, or the path of a regular file to read (if it
    exists) and write; ValueError saying what is wrong for another value."""
    if value is None:
        return None
    if not isinstance(value, str | os.PathLike) or not os.fspath(value):
        raise ValueError(
            f"compile_cache must be the path of a file (str or os.PathLike), got {value!r}"
        )
    path = Path(os.fspath(value)).expanduser()
    if path.exists() and not path.is_file():
        raise ValueError(
            f"compile_cache {str(path)!r} exists and is not a regular file: name a file (it is "
            "written when training ends)"
        )
    if not path.parent.is_dir():
        raise ValueError(
            f"compile_cache {str(path)!r}: its folder {str(path.parent)!r} does not exist; "
            "create it or name a file in an existing folder"
        )
    return path


def load(path: Path) -> dict[str, Any]:
    """Load the cache artifacts saved in ``path`` into this process's compilation caches; what
    happened: ``loaded_bytes`` (0: nothing loaded) and ``reason`` (None when it loaded)."""
    report: dict[str, Any] = {"path": str(path), "loaded_bytes": 0, "saved_bytes": 0}
    if not path.exists():
        report["reason"] = "no cache file yet: this run compiles and writes it when it ends"
        return report
    try:
        data = path.read_bytes()
        # None: PyTorch could not read the artifacts (it logs why) and loaded nothing.
        loaded = torch.compiler.load_cache_artifacts(data) is not None
        why = "PyTorch could not read it: a damaged file, or another version's"
    except Exception as exc:  # a stale or damaged cache must not stop a run
        loaded, why = False, f"{type(exc).__name__}: {exc}"
    if not loaded:
        report["reason"] = f"not loaded ({why}); compiling as without it"
        LOGGER.warning("musgd_trainer: compile_cache %s %s", path, report["reason"])
        return report
    report["loaded_bytes"], report["reason"] = len(data), None
    return report


def save(path: Path, report: dict[str, Any]) -> None:
    """Write this process's compilation cache artifacts to ``path`` (through a temporary file
    in its folder, so a reader never sees half a file), recording ``saved_bytes`` in
    ``report``; a failure is one warning."""
    try:
        artifacts = torch.compiler.save_cache_artifacts()
        if artifacts is None:
            report["save_reason"] = "nothing was compiled: no cache written"
            return
        data = artifacts[0]
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(data)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except Exception as exc:
        report["save_reason"] = f"not written ({type(exc).__name__}: {exc})"
        LOGGER.warning("musgd_trainer: compile_cache %s %s", path, report["save_reason"])
        return
    report["saved_bytes"] = len(data)
