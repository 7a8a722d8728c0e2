"""wpgate: evidence-gated governance for research repositories.

Linters for commit trailers, the provenance table, the work-package registry and ``[MEASURED]``
claims, a click CLI, pre-commit hooks and an mkdocs plugin. Never imports torch.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("wpgate")
except PackageNotFoundError:  # pragma: no cover - running from a source tree without install
    __version__ = "0.0.0"

__all__ = ["__version__"]
