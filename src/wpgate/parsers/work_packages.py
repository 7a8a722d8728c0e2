"""Work-package pages (``docs/work_packages/wp-NNN[x].md``) as records.

Front matter schema (governance spec §3)::

    id: "006"                 # NNN or NNNx, quoted (YAML reads 006 as the integer 6)
    title: "The documentation site"
    phase: 3                  # a phase with a page docs/engineering/phase-NN*.md
    status: in-progress       # todo | in-progress | done | blocked | deferred | superseded
    depends_on: ["005"]       # ids of other packages
    gate: []                  # pytest node ids; must resolve when status is done
    reason: "..."             # required when blocked or deferred
    superseded_by: "007"      # required when superseded

The parser checks the schema (types, required and unknown keys, the status vocabulary) and
reports each problem as a finding with the key's line; cross-package rules (ids and file names,
dependencies, cycles, gates, phases) live in :mod:`wpgate.rules.work_packages`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from wpgate._model import WP_ID_PATTERN, Finding
from wpgate.parsers.front_matter import parse_front_matter

STATUSES = ("todo", "in-progress", "done", "blocked", "deferred", "superseded")
REQUIRED_KEYS = ("id", "title", "phase", "status", "depends_on", "gate")
OPTIONAL_KEYS = ("reason", "superseded_by")
ID_RE = re.compile(rf"^{WP_ID_PATTERN}$")
FILE_RE = re.compile(rf"^wp-({WP_ID_PATTERN})\.md$")

#: Rule ids: front-matter syntax, and the schema of its keys.


@dataclass(frozen=True)
class WorkPackage:
    """One work package: its front-matter fields, its page and where each key sits.

    ``path`` is repository-relative (``docs/work_packages/wp-006.md``); ``key_lines`` maps each
    front-matter key to its 1-based line; ``body`` is the Markdown after the front matter.
    """

    id: str
    title: str
    phase: int
    status: str
    depends_on: tuple[str, ...]
    gate: tuple[str, ...]
    reason: str | None
    superseded_by: str | None
    path: str
    body: str = field(default="", repr=False)
    body_line: int = 1
    key_lines: Mapping[str, int] = field(default_factory=dict, compare=False, repr=False)

    def line_of(self, key: str) -> int:
        """The line of front-matter ``key``, or 1 (the opening ``---``) when it is absent."""
        return self.key_lines.get(key, 1)


@dataclass(frozen=True)
class WorkPackageParse:
    """A page's record (None when the front matter is unusable) and the problems found."""

    package: WorkPackage | None
    findings: tuple[Finding, ...]


def _id_problem(value: Any, key: str, written: str | None = None) -> str | None:
    """Why ``value`` is not a work-package id, or None when it is one (``written``: the id the
    value should be, where known: the page's file name's)."""
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        return f'`{key}` must be a work-package id such as "006" or "197b", not {value!r}'
    if isinstance(value, int):
        # YAML drops the leading zeros of an unquoted 006, and reads 010 as the octal 8: the
        # number cannot say what was written.
        quoted = f'"{written}"' if written else 'the id as written, e.g. "006"'
        return (
            f"`{key}` was read as the number {value} (YAML drops an unquoted id's leading zeros "
            f"and reads 010 as octal); quote it: {quoted}"
        )
    if not ID_RE.match(value):
        return f"`{key}` {value!r} is not NNN or NNNx (three or more digits, one optional letter)"
    return None


def _string_list(value: Any, key: str, *, ids: bool) -> tuple[tuple[str, ...], list[str]]:
    """``value`` as a tuple of strings and the problems with it."""
    kind = "ids" if ids else "pytest node ids"
    if value is None:  # `gate:` with nothing after it
        return (), [f"`{key}` is empty; write the list of {kind}, or `[]` for none"]
    if isinstance(value, str) and not ids:
        if not value.strip():
            return (), [f"`{key}` is an empty string; write the list of {kind}, or `[]` for none"]
        return (value,), []
    if not isinstance(value, list):
        return (), [f"`{key}` must be a list of {kind} (`[]` for none), not {value!r}"]
    items: list[str] = []
    problems: list[str] = []
    for item in value:
        if ids:
            problem = _id_problem(item, f"{key} entry")
            if problem:
                problems.append(problem)
                continue
        elif not isinstance(item, str) or not item.strip():
            problems.append(f"`{key}` entries must be non-empty strings, not {item!r}")
            continue
        items.append(str(item).strip())
    return tuple(items), problems


def parse_work_package(
    text: str,
    path: str,
    extra_keys: tuple[str, ...] = (),
    *,
    syntax_rule: str,
    schema_rule: str,
) -> WorkPackageParse:
    """Parse one work-package page (at repository-relative ``path``) and check its schema."""
    front = parse_front_matter(text, path, syntax_rule)
    if front.data is None:
        return WorkPackageParse(None, front.findings)
    data = front.data
    findings: list[Finding] = []
    bad: set[str] = set()

    def report(key: str, message: str) -> None:
        bad.add(key)
        findings.append(Finding(path, front.key_lines.get(key, 1), schema_rule, message))

    for key in REQUIRED_KEYS:
        if key not in data:
            report(key, f"the front matter has no `{key}`; add `{key}:` ({_HINTS[key]})")
    for key in data:
        if key not in REQUIRED_KEYS and key not in OPTIONAL_KEYS and key not in extra_keys:
            known = ", ".join((*REQUIRED_KEYS, *OPTIONAL_KEYS))
            report(key, f"unknown front-matter key `{key}`; the keys are {known}")

    wp_id = data.get("id")
    written = id_from_filename(PurePosixPath(path).name)
    problem = _id_problem(wp_id, "id", written) if "id" in data else None
    if problem:
        report("id", problem)
    title = data.get("title")
    if "title" in data and (not isinstance(title, str) or not title.strip()):
        report("title", f"`title` must be a non-empty string, not {title!r}")
    phase = data.get("phase")
    if "phase" in data and (isinstance(phase, bool) or not isinstance(phase, int) or phase < 0):
        report("phase", f"`phase` must be a phase number such as 3, not {phase!r}")
    status = data.get("status")
    if "status" in data and status not in STATUSES:
        report("status", f"`status` {status!r} is not one of {', '.join(STATUSES)}")
    lists: dict[str, tuple[str, ...]] = {}
    for key in ("depends_on", "gate"):  # a missing one is reported above
        lists[key], problems = (
            _string_list(data[key], key, ids=key == "depends_on") if key in data else ((), [])
        )
        for message in problems:
            report(key, message)
    depends_on, gate = lists["depends_on"], lists["gate"]
    reason = data.get("reason")
    if reason is not None and (not isinstance(reason, str) or not reason.strip()):
        report("reason", f"`reason` must be a non-empty sentence, not {reason!r}")
        reason = None
    superseded_by = data.get("superseded_by")
    if superseded_by is not None:
        problem = _id_problem(superseded_by, "superseded_by")
        if problem:
            report("superseded_by", problem)
            superseded_by = None

    # Without these four the record cannot take part in the registry-wide rules.
    if bad & {"id", "title", "phase", "status"}:
        return WorkPackageParse(None, tuple(findings))
    return WorkPackageParse(
        WorkPackage(
            id=str(wp_id),
            title=str(title).strip(),
            phase=int(phase),  # type: ignore[arg-type]
            status=str(status),
            depends_on=depends_on,
            gate=gate,
            reason=str(reason).strip() if reason is not None else None,
            superseded_by=str(superseded_by) if superseded_by is not None else None,
            path=path,
            body=front.body,
            body_line=front.body_line,
            key_lines=dict(front.key_lines),
        ),
        tuple(findings),
    )


_HINTS = {
    "id": 'the id from the file name, quoted: `"006"`',
    "title": "a one-line title",
    "phase": "the phase number",
    "status": "one of " + ", ".join(STATUSES),
    "depends_on": "a list of ids, `[]` for none",
    "gate": "a list of pytest node ids, `[]` for none",
}


def id_from_filename(name: str) -> str | None:
    """The id a page file name carries (``wp-197b.md`` -> ``197b``), or None."""
    match = FILE_RE.match(name)
    return match.group(1) if match else None


def iter_ids(packages: Mapping[str, WorkPackage]) -> Iterator[str]:
    """The ids of ``packages`` in registry order (number, then letter suffix)."""
    yield from sorted(packages, key=sort_key)


def sort_key(wp_id: str) -> tuple[int, str]:
    """Registry order: by number, then letter suffix (``197 < 197b < 198``)."""
    digits = wp_id.rstrip("abcdefghijklmnopqrstuvwxyz")
    return (int(digits) if digits.isdigit() else 1 << 30, wp_id[len(digits) :])


def format_work_package(wp_id: str, title: str, phase: int) -> str:
    """A new page for ``wp_id`` (status ``todo``) that passes the work-package rules.

    Strings are written as JSON strings, which YAML reads as double-quoted scalars, so any
    title (quotes, colons, ``#``) survives the round trip.
    """
    import json

    if not ID_RE.match(wp_id):
        raise ValueError(
            f"{wp_id[:40]!r} is not a work-package id (three or more digits and an optional "
            "letter, e.g. 012, 197b or 1000)"
        )
    if not title.strip() or "\n" in title:
        raise ValueError("the title must be one non-empty line")
    if phase < 0:
        raise ValueError(f"the phase must be a non-negative number, not {phase}")
    quoted = json.dumps(title.strip(), ensure_ascii=False)
    return (
        "---\n"
        f'id: "{wp_id}"\n'
        f"title: {quoted}\n"
        f"phase: {phase}\n"
        "status: todo\n"
        "depends_on: []\n"
        "gate: []\n"
        "---\n\n"
        f"# WP-{wp_id} — {title.strip()}\n\n"
        "What this package delivers, how it is checked, and what it leaves out.\n"
    )
