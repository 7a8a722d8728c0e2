"""GPU tests: skipped cleanly on a machine without a CUDA device (or without torch at all)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

_HERE = Path(__file__).resolve().parent

# The test modules import torch at module level; without torch (a governance-only install) they
# would fail at collection, so they are not collected at all.
collect_ignore_glob = [] if importlib.util.find_spec("torch") else ["*.py"]


def _cuda_available() -> bool:
    """True when torch is importable and reports a usable CUDA device."""
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip this folder's tests, and any ``cuda``-marked test, when no CUDA device is available."""
    if _cuda_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (torch.cuda.is_available() is False)")
    for item in items:
        if "cuda" in item.keywords or _HERE in Path(str(item.path)).resolve().parents:
            item.add_marker(skip)
