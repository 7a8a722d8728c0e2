"""Evidence files: what ran, on what, from which source, with which numbers.

A benchmark writes one JSON document (``"schema": "wpgate-evidence/1"``) holding the
environment, the git commit and whether the tree was dirty, the sha256 of each optimizer source
file (``src/musgd/*.py``) and the results. The format and its one writer belong to wpgate
(:mod:`wpgate.evidence`); this module says what a musgd benchmark records.
Documentation claims cite these files; the governance checker (``wpgate evidence``) compares
the recorded hashes with the files at the recorded commit.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from wpgate import evidence
from wpgate.evidence import SCHEMA, GitState, git_state

__all__ = [
    "SCHEMA",
    "GitState",
    "build_evidence",
    "check_commit",
    "collect_environment",
    "default_evidence_path",
    "find_repo_root",
    "git_state",
    "source_hashes",
    "write_evidence",
]

_PACKAGE_DIR = Path(__file__).resolve().parent.parent  # src/musgd
_TOOL_TIMEOUT_S = 30


def find_repo_root(start: Path = _PACKAGE_DIR) -> Path | None:
    """The nearest directory at or above ``start`` holding both ``.git`` and ``pyproject.toml``."""
    return evidence.find_repo_root(start)


def _output(argv: list[str]) -> str | None:
    """Standard output of a read-only tool run; None when it is missing, fails or hangs."""
    if shutil.which(argv[0]) is None:
        return None
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=_TOOL_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def source_hashes(root: Path | None = None, package_dir: Path = _PACKAGE_DIR) -> dict[str, str]:
    """sha256 of each optimizer source file ``<package_dir>/*.py``, keyed by relative path.

    Paths are relative to the repository root (``src/musgd/_functional.py``) when the package
    lives inside it, else to the package's parent (``musgd/_functional.py``, an installed copy).
    The benchmark sub-package is not an optimizer source and is not hashed.
    """
    base = root if root is not None and package_dir.is_relative_to(root) else package_dir.parent
    return evidence.source_hashes(base, package_dir.glob("*.py"))


def _driver_version() -> str | None:
    """The NVIDIA driver version from ``nvidia-smi``, when it is installed."""
    out = _output(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
    lines = (out or "").strip().splitlines()
    return lines[0].strip() if lines else None


def _cpu_name() -> str:
    """The CPU model name (``/proc/cpuinfo`` on Linux, else ``platform.processor()``)."""
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def collect_environment(device: torch.device) -> dict[str, Any]:
    """Python, torch, CUDA, GPU, driver, CPU and platform of this run."""
    on_cuda = device.type == "cuda"
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if on_cuda else None,  # type: ignore[no-untyped-call]
        "device": str(device),
        "gpu": torch.cuda.get_device_name(device) if on_cuda else None,
        "driver": _driver_version() if on_cuda else None,
        "cpu": _cpu_name(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "platform": platform.platform(),
    }


def is_full_commit(text: str) -> bool:
    """Whether ``text`` is a full git object name: 40 lowercase hex digits (SHA-1) or 64
    (SHA-256), as ``git rev-parse`` prints it."""
    return re.fullmatch(r"[0-9a-f]{40}|[0-9a-f]{64}", text) is not None


def check_commit(commit: str, state: GitState | None = None) -> None:
    """Raise ValueError unless ``commit`` is a hex sha that agrees with a readable HEAD."""
    if not re.fullmatch(r"[0-9a-f]{7,64}", commit):
        raise ValueError(f"commit must be a hex git sha (7-64 digits), got {commit!r}")
    head = (state if state is not None else git_state(find_repo_root())).commit
    if head is not None and not head.startswith(commit):
        raise ValueError(
            f"commit {commit} disagrees with this checkout's HEAD {head}; "
            "drop the option or run from the named commit"
        )


def build_evidence(
    kind: str,
    results: Mapping[str, Any],
    *,
    device: torch.device,
    argv: list[str],
    commit: str | None = None,
    program: Sequence[str] = ("-m", "musgd.bench"),
) -> dict[str, Any]:
    """The evidence document for one benchmark run.

    Its ``command`` is the Python executable's name, ``program`` (what it ran: ``-m
    musgd.bench`` unless a script says otherwise) and ``argv``.

    ``commit`` names the commit a copied tree came from when git cannot tell (a checkout
    without its ``.git`` history, e.g. on a remote GPU machine); ``git_commit_source`` records
    which of the two it is, and ``git_dirty`` is then unknown (None).
    """
    root = find_repo_root()
    state = git_state(root)
    source = "git" if state.commit is not None else None
    if commit is not None:
        check_commit(commit, state)
        if state.commit is None:
            if not is_full_commit(commit):
                raise ValueError(
                    f"commit {commit!r} must be the full sha (`git rev-parse HEAD`) when git "
                    "cannot read this checkout: evidence files record full commits"
                )
            state, source = GitState(commit, None), "argument"
    return evidence.evidence_document(
        kind,
        dict(results),
        command=[Path(sys.executable).name, *program, *argv],
        environment=collect_environment(device),
        git=state,
        sources=source_hashes(root),
        extra={"git_commit_source": source},
    )


def _slug(text: str) -> str:
    """Lower-case ``text`` with runs of other characters turned into one ``-``."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "unknown"


def default_evidence_path(document: Mapping[str, Any]) -> Path:
    """``docs/evidence/musgd-<kind>-<device>-<timestamp>[-<commit8>].json`` in the repository.

    Outside a repository the file goes to ``./evidence/`` under the working directory.
    """
    root = find_repo_root()
    folder = root / "docs" / "evidence" if root is not None else Path.cwd() / "evidence"
    env = document["environment"]
    device = env["gpu"] or f"cpu-{env['cpu']}"
    stamp = str(document["created"]).replace(":", "").replace("-", "")[:15]
    commit = document.get("git_commit")
    tail = f"-{str(commit)[:8]}" if commit else ""
    return folder / f"musgd-{_slug(document['kind'])}-{_slug(device)[:40]}-{stamp}{tail}.json"


def write_evidence(document: Mapping[str, Any], out: Path | None = None) -> Path:
    """Write ``document`` with wpgate's evidence writer to ``out`` (a file or a directory).

    Without ``out`` it goes to :func:`default_evidence_path`. Returns the path written. Raises
    OSError when the location cannot be written and ``wpgate.evidence.EvidenceError`` when the
    document is not valid ``wpgate-evidence/1``.
    """
    path = default_evidence_path(document)
    if out is not None:
        path = out / path.name if out.is_dir() or str(out).endswith(("/", os.sep)) else out
    return evidence.write_evidence(document, path)


def read_document(path: Path, data: bytes | None = None) -> dict[str, Any]:
    """The JSON document of an evidence file that has ``results`` (``data``: the file's bytes,
    already read); a ValueError saying why ``path`` cannot be one (unreadable, not JSON, no
    ``results``)."""
    try:
        document = json.loads((path.read_bytes() if data is None else data).decode("utf-8"))
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror or exc}") from exc
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path} is not JSON: {exc}") from exc
    if not isinstance(document, dict) or not isinstance(document.get("results"), dict):
        raise ValueError(f"{path} is not an evidence file (no results)")
    return document
