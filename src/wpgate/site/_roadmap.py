"""The registry as the site shows it: headers, the roadmap and phase sections, as Markdown.

Pure functions over work-package records (``wpgate.parsers.work_packages.WorkPackage`` or any
object with the same attributes). Links are written to the pages' source files (``*.md``,
relative to the page that holds them), so mkdocs resolves them and ``--strict`` checks them.
"""

from __future__ import annotations

import functools
import posixpath
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from wpgate.parsers.work_packages import sort_key
from wpgate.site._escape import escape_markdown
from wpgate.site._icons import icon_svg, inline_icon, status_icon_name

#: Theme icons of the previous/next links in a work-package header.
PREVIOUS_ICON, NEXT_ICON = "arrow-left", "arrow-right"
#: Theme icon before the dependency line of a work-package header.
LINK_ICON = "link-variant"
STATUSES = ("todo", "in-progress", "done", "blocked", "deferred", "superseded")

# Icons travel through Markdown as short tokens of private-use characters and become inline SVG
# in the page's HTML (:func:`expand_icons`): Python-Markdown's inline-HTML handling of an SVG
# cost ten times the rest of a header, and a roadmap row carries one.
_ICON_TOKEN_RE = re.compile("\ue000([a-z0-9-]+)\ue001([a-z0-9-]+)\ue002")


def icon_token(name: str, fallback: str = "", css_class: str = "wpgate-icon") -> str:
    """A placeholder for the theme icon ``name`` that :func:`expand_icons` turns into inline
    SVG, or ``fallback`` text when the theme has no such icon."""
    return fallback if icon_svg(name) is None else f"\ue000{css_class}\ue001{name}\ue002"


def expand_icons(html: str) -> str:
    """``html`` with each :func:`icon_token` replaced by the icon's inline SVG."""
    if "\ue000" not in html:
        return html
    return _ICON_TOKEN_RE.sub(lambda m: inline_icon(m[2], css_class=m[1]), html)


class WorkPackageLike(Protocol):
    """The attributes of a work-package record the site reads."""

    @property
    def id(self) -> str: ...
    @property
    def title(self) -> str: ...
    @property
    def phase(self) -> int: ...
    @property
    def status(self) -> str: ...
    @property
    def depends_on(self) -> Sequence[str]: ...


@dataclass(frozen=True)
class Phase:
    """A phase: its number, its title and its page (docs-relative), when one exists."""

    number: int
    title: str
    src_uri: str | None


@dataclass(frozen=True)
class SiteModel:
    """Everything the site needs about the registry, computed once per build."""

    packages: tuple[WorkPackageLike, ...]
    phases: Mapping[int, Phase]
    pages: Mapping[str, str]
    needed_by: Mapping[str, tuple[str, ...]]
    roadmap_src: str

    @functools.cached_property
    def _positions(self) -> dict[str, int]:
        """Each id's index in :attr:`packages` (the first, should an id repeat)."""
        positions: dict[str, int] = {}
        for index, wp in enumerate(self.packages):
            positions.setdefault(wp.id, index)
        return positions

    @functools.cached_property
    def _by_phase(self) -> dict[int, tuple[WorkPackageLike, ...]]:
        """The records of each phase, in registry order."""
        members: dict[int, list[WorkPackageLike]] = {}
        for wp in self.packages:
            members.setdefault(wp.phase, []).append(wp)
        return {number: tuple(found) for number, found in members.items()}

    def package(self, wp_id: str) -> WorkPackageLike | None:
        """The record with id ``wp_id``, or None (a dictionary look-up: one per page)."""
        index = self._positions.get(wp_id)
        return None if index is None else self.packages[index]

    def members(self, number: int) -> tuple[WorkPackageLike, ...]:
        """The records of phase ``number``, in registry order."""
        return self._by_phase.get(number, ())

    def neighbours(self, wp_id: str) -> tuple[str | None, str | None]:
        """The previous and next work-package ids in registry order."""
        index = self._positions[wp_id]
        ids = self.packages
        return (
            ids[index - 1].id if index > 0 else None,
            ids[index + 1].id if index + 1 < len(ids) else None,
        )


def compute_needed_by(packages: Iterable[WorkPackageLike]) -> dict[str, tuple[str, ...]]:
    """For each id, the ids that list it in ``depends_on``, in registry order."""
    needed: dict[str, list[str]] = {}
    for wp in packages:
        for dep in wp.depends_on:
            needed.setdefault(str(dep), []).append(wp.id)
    return {k: tuple(sorted(set(v), key=sort_key)) for k, v in needed.items()}


def build_model(
    packages: Iterable[WorkPackageLike],
    phases: Iterable[Phase],
    pages: Mapping[str, str],
    roadmap_src: str,
) -> SiteModel:
    """The model of one build: records sorted, pages by id (docs-relative) and Needed-by."""
    ordered = tuple(sorted(packages, key=lambda wp: sort_key(wp.id)))
    return SiteModel(
        packages=ordered,
        phases={p.number: p for p in phases},
        pages=dict(pages),
        needed_by=compute_needed_by(ordered),
        roadmap_src=roadmap_src,
    )


def relative_link(from_src: str, to_src: str) -> str:
    """A Markdown link target from page ``from_src`` to file ``to_src`` (both docs-relative).

    ``posixpath.relpath``'s answer, computed from the two paths alone: relpath makes both
    absolute against the current directory (a ``getcwd`` call each time, and a registry's
    pages make tens of thousands of links), which cancels out for two paths inside it. A path
    that is absolute or climbs out with ``..`` is left to relpath itself.
    """
    start = _parts(posixpath.dirname(from_src))
    target = _parts(to_src)
    if start is None or target is None or not to_src:
        return posixpath.relpath(to_src, posixpath.dirname(from_src) or ".")
    common = 0
    for mine, theirs in zip(start, target, strict=False):
        if mine != theirs:
            break
        common += 1
    parts = [".."] * (len(start) - common) + list(target[common:])
    return "/".join(parts) if parts else "."


@functools.lru_cache(maxsize=1024)
def _parts(path: str) -> tuple[str, ...] | None:
    """The components of a relative path as ``posixpath.normpath`` leaves them, or None when
    the path is absolute or climbs above its start."""
    if path.startswith("/"):
        return None
    parts = tuple(part for part in posixpath.normpath(path).split("/") if part not in ("", "."))
    return None if ".." in parts else parts


def wp_label(wp_id: str) -> str:
    """``WP-197b``."""
    return f"WP-{escape_markdown(wp_id)}"


def _wp_link(model: SiteModel, wp_id: str, from_src: str) -> str:
    """A link to a work package's page, or its plain label when it has no page."""
    target = model.pages.get(wp_id)
    if target is None:
        return f"{wp_label(wp_id)} (no page)"
    return f"[{wp_label(wp_id)}]({relative_link(from_src, target)})"


def phase_title(number: int, title: str | None) -> str | None:
    """A phase page's own title after ``Phase N — ``, or None where it has none or only
    repeats ``Phase N`` (``wpgate new-wp`` writes that much into a new phase page)."""
    if not title or title.strip() == f"Phase {number}":
        return None
    return title


def phase_label(model: SiteModel, number: int) -> str:
    """``Phase 3 — title`` (escaped)."""
    phase = model.phases.get(number)
    title = phase_title(number, phase.title if phase is not None else None)
    return f"Phase {number}" + (f" — {escape_markdown(title)}" if title else "")


def _phase_link(model: SiteModel, number: int, from_src: str) -> str:
    """A link to a phase's page, or its plain label when it has none."""
    phase = model.phases.get(number)
    label = phase_label(model, number)
    if phase is None or phase.src_uri is None:
        return label
    return f"[{label}]({relative_link(from_src, phase.src_uri)})"


def status_badge(status: str) -> str:
    """The status after its theme icon (inline SVG once :func:`expand_icons` has run, no emoji
    font needed), e.g. ``<svg…> done``."""
    icon = icon_token(status_icon_name(status), css_class="wpgate-status")
    return f"{icon} {escape_markdown(status)}" if icon else escape_markdown(status)


def render_header(model: SiteModel, wp_id: str, page_src: str) -> str:
    """The header of a work-package page: phase, status, dependencies, neighbours, roadmap."""
    wp = model.package(wp_id)
    if wp is None:
        raise KeyError(wp_id)
    deps = ", ".join(_wp_link(model, str(d), page_src) for d in wp.depends_on) or "nothing"
    needed = ", ".join(_wp_link(model, n, page_src) for n in model.needed_by.get(wp_id, ()))
    status_line = f"Status: **{status_badge(wp.status)}**"
    superseded_by = getattr(wp, "superseded_by", None)
    if wp.status == "superseded" and superseded_by:
        status_line += f" · Superseded by {_wp_link(model, str(superseded_by), page_src)}"
    reason = getattr(wp, "reason", None)
    if reason:
        status_line += f" · Reason: {escape_markdown(str(reason))}"
    previous, following = model.neighbours(wp_id)
    nav = (
        [f"{icon_token(PREVIOUS_ICON, '←')} {_wp_link(model, previous, page_src)}"]
        if previous
        else []
    )
    nav.append(f"[Roadmap]({relative_link(page_src, model.roadmap_src)})")
    if following:
        nav.append(f"{_wp_link(model, following, page_src)} {icon_token(NEXT_ICON, '→')}")
    lines = [
        f"> Engineering log · {_phase_link(model, wp.phase, page_src)} · {status_line}",
        f"> {icon_token(LINK_ICON)} Depends on {deps} · Needed by {needed or 'nothing yet'}",
        f"> {' · '.join(nav)}",
    ]
    return "\n>\n".join(lines) + "\n"


def _packages_table(model: SiteModel, packages: Sequence[WorkPackageLike], page_src: str) -> str:
    """A table of work packages: link, title, status, dependencies and dependants."""
    rows = [
        "| Work package | Title | Status | Depends on | Needed by |",
        "| --- | --- | --- | --- | --- |",
    ]
    for wp in packages:
        deps = ", ".join(_wp_link(model, str(d), page_src) for d in wp.depends_on) or "—"
        needed = ", ".join(_wp_link(model, n, page_src) for n in model.needed_by.get(wp.id, ()))
        rows.append(
            f"| {_wp_link(model, wp.id, page_src)} | {escape_markdown(wp.title)} "
            f"| {status_badge(wp.status)} | {deps} | {needed or '—'} |"
        )
    return "\n".join(rows)


def render_roadmap(model: SiteModel, page_src: str, intro: str = "") -> str:
    """The roadmap: counts by status, then each phase with its work packages."""
    tally = Counter(wp.status for wp in model.packages)
    counts = {s: tally[s] for s in STATUSES}
    extra = sorted(set(tally) - set(STATUSES))
    summary = " · ".join(f"{status_badge(s)}: {n}" for s, n in counts.items() if n)
    summary += "".join(f" · {status_badge(s)}: {tally[s]}" for s in extra)
    parts = [intro.rstrip() or "# Roadmap", ""]
    parts.append(
        "Generated from the work-package registry at build time; edit the work packages' "
        "front matter, not this page.\n"
    )
    parts.append(f"{len(model.packages)} work packages: {summary or 'none yet'}.\n")
    numbers = sorted({wp.phase for wp in model.packages} | set(model.phases))
    for number in numbers:
        members = model.members(number)
        parts.append(f"## {_phase_link(model, number, page_src)}\n")
        parts.append(
            _packages_table(model, members, page_src) if members else "No work package yet."
        )
        parts.append("")
    return "\n".join(parts)


def render_phase_section(model: SiteModel, number: int, page_src: str) -> str:
    """The work packages of one phase, appended to the phase's page."""
    members = model.members(number)
    table = _packages_table(model, members, page_src) if members else "No work package yet."
    roadmap = relative_link(page_src, model.roadmap_src)
    return f"## Work packages in this phase\n\n{table}\n\nSee also the [roadmap]({roadmap}).\n"


def render_phase_page(model: SiteModel, number: int, page_src: str) -> str:
    """A generated page for a phase that has no page of its own."""
    return f"# {phase_label(model, number)}\n\n{render_phase_section(model, number, page_src)}"
