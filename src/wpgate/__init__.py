"""wpgate: evidence-gated governance for research repositories.

Linters for commit trailers, the provenance table, the work-package registry and ``[MEASURED]``
claims, a click CLI, pre-commit hooks and an mkdocs plugin. Never imports torch.
"""

from __future__ import annotations

__all__ = ["__version__"]


def __getattr__(name: str) -> str:
    """``__version__``, read from the installed metadata when first asked for.

    ``importlib.metadata`` costs tens of milliseconds to import, and the commit-msg hook runs on
    every commit without ever needing the version.
    """
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("wpgate")
        except PackageNotFoundError:  # pragma: no cover - a source tree without install
            return "0.0.0"
    raise AttributeError(f"module 'wpgate' has no attribute {name!r}")
