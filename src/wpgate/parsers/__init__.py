"""Pure parsers for wpgate's documents: text in, frozen records and findings out."""

from __future__ import annotations

from wpgate.parsers.evidence import Claim, Evidence, EvidenceParse, parse_claims, parse_evidence
from wpgate.parsers.front_matter import FrontMatter, parse_front_matter
from wpgate.parsers.markdown import Document, Heading, Row, Table, parse_markdown
from wpgate.parsers.provenance import Provenance, expand_ids, parse_provenance
from wpgate.parsers.work_packages import WorkPackage, WorkPackageParse, parse_work_package

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
