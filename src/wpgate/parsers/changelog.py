"""The unreleased section of a Keep a Changelog file and the names it puts in backticks."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from wpgate.parsers.markdown import code_spans

if TYPE_CHECKING:
    from wpgate.records import ProjectIndex

_SECTION_RE = re.compile(r"^##\s+\[?unreleased\]?\s*$", re.IGNORECASE)
_NEXT_SECTION_RE = re.compile(r"^##\s")
_FENCE_RE = re.compile(r"^ {0,3}(`{3,}|~{3,})")


@dataclass(frozen=True)
class CodeName:
    """One backticked span of the unreleased section: its text and its line."""

    text: str
    line: int


@dataclass(frozen=True)
class Unreleased:
    """The unreleased section: its heading line (0 when absent) and its backticked names."""

    path: str
    line: int
    names: tuple[CodeName, ...]
    #: What the tree defines, when the names are checked against it (WPG502); None otherwise.
    #: The docs runner adds it (``wpgate.project_index``).
    index: ProjectIndex | None = field(default=None, compare=False)


def parse_unreleased(text: str, path: str = "CHANGELOG.md") -> Unreleased:
    """The ``## [Unreleased]`` section of ``text`` (Keep a Changelog 1.1.0) and its code spans."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if _SECTION_RE.match(line.strip())), None)
    if start is None:
        return Unreleased(path, 0, ())
    names: list[CodeName] = []
    fence: str | None = None
    for number in range(start + 1, len(lines)):
        line = lines[number]
        match = _FENCE_RE.match(line)
        if fence is not None:
            if match and match.group(1)[0] == fence[0]:
                fence = None
            continue
        if match:
            fence = match.group(1)
            continue
        if _NEXT_SECTION_RE.match(line):
            break
        names.extend(
            CodeName(line[span.content_start : span.content_end].strip(), number + 1)
            for span in code_spans(line)
        )
    return Unreleased(path, start + 1, tuple(names))
