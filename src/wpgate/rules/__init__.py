"""Lint rules, one module per governed document; :func:`register_all` registers them all.

Rule modules register into :data:`wpgate._model.RULES` at import, each through
:func:`wpgate._model.register`, which also makes the module's one typed tuple of rules,
``CHECKS`` (every check takes ``(subject, options)``). :func:`register_all` imports
every module in this package, so a new linter's rules are known (to ``wpgate explain`` and to
the ``[tool.wpgate.rules]`` switches) without editing this file. Importing the package alone
imports no rule module: the commit-msg hook loads only the commit rules it runs.
"""

from __future__ import annotations

import importlib
import pkgutil

from wpgate._model import RULES

__all__ = [
    "CHANGELOG_UNRELEASED",
    "EVIDENCE_CLAIM_CITES",
    "EVIDENCE_FILE_VALID",
    "MARKDOWN_LIST_BLANK_LINE",
    "PROVENANCE_ID_FORMAT",
    "PROVENANCE_TABLES",
    "RULES",
    "WP_FRONT_MATTER",
    "WP_IDS",
    "WP_SCHEMA",
    "register_all",
]

# The ids of the rules whose findings are made where a document is read or parsed. The parsers
# and readers take them as arguments (they name no rule themselves); they live here, not in
# their rule modules, because the commit-msg hook reads the provenance table and the registry
# without importing the docs rule modules. Each rule module declares its rule with its id.
PROVENANCE_TABLES = "WPG201"
PROVENANCE_ID_FORMAT = "WPG202"
WP_FRONT_MATTER = "WPG301"
WP_SCHEMA = "WPG302"
WP_IDS = "WPG303"
EVIDENCE_CLAIM_CITES = "WPG401"
EVIDENCE_FILE_VALID = "WPG404"
CHANGELOG_UNRELEASED = "WPG501"
MARKDOWN_LIST_BLANK_LINE = "WPG601"


def register_all() -> None:
    """Import every rule module, which registers its rules."""
    for module in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{module.name}")
