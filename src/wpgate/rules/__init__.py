"""Lint rules, one module per governed document; importing this package registers them all.

Rule modules register into :data:`wpgate._model.RULES` at import. Every module in this package
is imported here, so a new linter's rules are known (to ``wpgate explain`` and to the
``[tool.wpgate.rules]`` switches) without editing this file.
"""

from __future__ import annotations

import importlib
import pkgutil

from wpgate._model import RULES

__all__ = ["RULES"]

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")
