"""Pure parsers for wpgate's documents: text in, frozen records and findings out.

The names below are imported from their modules on first use (PEP 562), so importing one
parser (the provenance table, for the commit-msg hook) does not import the others.
"""

from __future__ import annotations

import importlib
from typing import Any

_HOMES = {
    "Claim": "evidence",
    "Evidence": "evidence",
    "EvidenceParse": "evidence",
    "parse_claims": "evidence",
    "parse_evidence": "evidence",
    "FrontMatter": "front_matter",
    "parse_front_matter": "front_matter",
    "Document": "markdown",
    "Heading": "markdown",
    "Row": "markdown",
    "Table": "markdown",
    "parse_markdown": "markdown",
    "Provenance": "provenance",
    "expand_ids": "provenance",
    "parse_provenance": "provenance",
    "WorkPackage": "work_packages",
    "WorkPackageParse": "work_packages",
    "parse_work_package": "work_packages",
}

__all__ = [
    "Claim",
    "Document",
    "Evidence",
    "EvidenceParse",
    "FrontMatter",
    "Heading",
    "Provenance",
    "Row",
    "Table",
    "WorkPackage",
    "WorkPackageParse",
    "expand_ids",
    "parse_claims",
    "parse_evidence",
    "parse_front_matter",
    "parse_markdown",
    "parse_provenance",
    "parse_work_package",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{home}"), name)
