"""Lint rules, one module per governed document; :func:`register_all` registers them all.

Rule modules register into :data:`wpgate._model.RULES` at import. :func:`register_all` imports
every module in this package, so a new linter's rules are known (to ``wpgate explain`` and to
the ``[tool.wpgate.rules]`` switches) without editing this file. Importing the package alone
imports no rule module: the commit-msg hook loads only the commit rules it runs.
"""

from __future__ import annotations

import importlib
import pkgutil

from wpgate._model import RULES

__all__ = ["RULES", "register_all"]


def register_all() -> None:
    """Import every rule module, which registers its rules."""
    for module in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{module.name}")
