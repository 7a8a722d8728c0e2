"""The docs linters' options records: ``[tool.wpgate.provenance]``, ``wp``, ``evidence`` and
``changelog``, declared as :mod:`wpgate.options` declares the others (each field one key, made
with :func:`~wpgate.options.option`).

Apart from :mod:`wpgate.options` because only the docs linters, ``wpgate._config`` when a file
configures a table, and the published reference read them: the commit linters (the commit-msg
hook, a range lint) never make these classes.
"""

from __future__ import annotations

from typing import ClassVar

from wpgate._record import frozen
from wpgate.options import LinterOptions, option

__all__ = ["ChangelogOptions", "EvidenceOptions", "ProvenanceOptions", "WorkPackageOptions"]


@frozen
class ProvenanceOptions(LinterOptions):
    """``[tool.wpgate.provenance]``: the licences a code source may carry, and the history."""

    TABLE: ClassVar[str] = "provenance"

    licences: tuple[str, ...] = option(
        ("MIT", "Apache-2.0", "BSD-2-Clause", "BSD-3-Clause", "ISC", "PSF-2.0"),
        "str_or_list",
        "The licences a code source may carry.",
        at_least_one="licence",
    )
    code_roles: tuple[str, ...] = option(
        ("code", "library", "software", "source code"),
        "str_or_list",
        "The roles that make a source code (and so subject to `licences`).",
        at_least_one="role",
    )
    #: None: on when ``history_start`` is set.
    history: bool | None = option(
        None,
        "bool",
        "Check first-use dates against the first commit citing each source.",
        shown_default="true when history_start is set",
    )


@frozen
class WorkPackageOptions(LinterOptions):
    """``[tool.wpgate.wp]``: front-matter keys a page may carry beyond the schema."""

    TABLE: ClassVar[str] = "wp"

    extra_keys: tuple[str, ...] = option(
        (), "str_or_list", "Front-matter keys a work-package page may carry beyond the schema."
    )


@frozen
class EvidenceOptions(LinterOptions):
    """``[tool.wpgate.evidence]``: whether pytest collection verifies the markers."""

    TABLE: ClassVar[str] = "evidence"

    collect: bool = option(True, "bool", "Run pytest to verify `collected N -- paths` markers.")


@frozen
class ChangelogOptions(LinterOptions):
    """``[tool.wpgate.changelog]``: backticked names of ``[Unreleased]`` that are not checked."""

    TABLE: ClassVar[str] = "changelog"

    ignore: tuple[str, ...] = option(
        (), "str_or_list", "Backticked names of the `[Unreleased]` section that are not checked."
    )
