"""Headers, Needed-by, the roadmap and phase sections, from plain records."""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass

import pytest

from wpgate.site import _roadmap
from wpgate.site._icons import STATUS_ICONS, icon_svg, inline_icon
from wpgate.site._roadmap import (
    Phase,
    build_model,
    compute_needed_by,
    expand_icons,
    render_header,
    status_badge,
)

_PREVIOUS = _roadmap.icon_token(_roadmap.PREVIOUS_ICON)
_NEXT = _roadmap.icon_token(_roadmap.NEXT_ICON)
_ICON_RE = re.compile(r'<span class="twemoji wpgate-status">(<svg.*?</svg>)</span>')


def _icon_names(cell: str) -> list[str]:
    """The theme icons drawn in ``cell``, by name."""
    by_svg = {icon_svg(name): name for name in [*STATUS_ICONS.values(), "help-circle"]}
    return [by_svg.get(svg, "?") for svg in _ICON_RE.findall(expand_icons(cell))]


def _plain(cell: str) -> str:
    """``cell`` without its icons."""
    return _ICON_RE.sub("", expand_icons(cell)).strip()


@dataclass(frozen=True)
class WP:
    id: str
    title: str
    phase: int
    status: str
    depends_on: tuple[str, ...] = ()
    reason: str | None = None
    superseded_by: str | None = None


PACKAGES = [
    WP("002", "Second", 1, "in-progress", ("001",)),
    WP("001", "First", 1, "done"),
    WP("003", "Third <b>", 2, "blocked", ("001", "002"), reason="waits for a GPU"),
    WP("003b", "Third, part b", 2, "superseded", ("003",), superseded_by="004"),
    WP("004", "Fourth", 3, "todo", ("003",)),
]
PHASES = [
    Phase(1, "Foundation", "engineering/phase-01-foundation.md"),
    Phase(2, "Replay", "engineering/phase-02-replay.md"),
]
PAGES = {wp.id: f"work_packages/wp-{wp.id}.md" for wp in PACKAGES}


def _model() -> _roadmap.SiteModel:
    return build_model(PACKAGES, PHASES, PAGES, "ROADMAP.md")


def _links(markdown: str) -> list[tuple[str, str]]:
    return re.findall(r"\[([^\]]+)\]\(([^)]+)\)", markdown)


def test_packages_are_in_registry_order() -> None:
    assert [wp.id for wp in _model().packages] == ["001", "002", "003", "003b", "004"]


def test_needed_by_is_the_inverse_of_depends_on() -> None:
    needed = compute_needed_by(PACKAGES)
    assert needed == {"001": ("002", "003"), "002": ("003",), "003": ("003b", "004")}
    # Both ways: every dependency edge shows up once on each side.
    edges = {(d, wp.id) for wp in PACKAGES for d in wp.depends_on}
    assert edges == {(k, v) for k, vs in needed.items() for v in vs}


def test_header_of_a_dependency_lists_its_dependants() -> None:
    header = render_header(_model(), "001", "work_packages/wp-001.md")
    needed_part = header.split("Needed by", 1)[1].split("\n", 1)[0]
    assert _links(needed_part) == [("WP-002", "wp-002.md"), ("WP-003", "wp-003.md")]
    assert "Depends on nothing" in header


def test_header_of_a_dependant_links_its_dependencies() -> None:
    header = render_header(_model(), "003", "work_packages/wp-003.md")
    depends_part = header.split("Depends on", 1)[1].split("Needed by", 1)[0]
    assert _links(depends_part) == [("WP-001", "wp-001.md"), ("WP-002", "wp-002.md")]
    assert "Reason: waits for a GPU" in header
    assert f"**{status_badge('blocked')}**" in header


def test_header_links_phase_neighbours_and_roadmap() -> None:
    header = render_header(_model(), "003", "work_packages/wp-003.md")
    links = _links(header)
    assert links[0] == ("Phase 2 — Replay", "../engineering/phase-02-replay.md")
    nav = header.strip().splitlines()[-1]
    assert _links(nav) == [
        ("WP-002", "wp-002.md"),
        ("Roadmap", "../ROADMAP.md"),
        ("WP-003b", "wp-003b.md"),
    ]
    assert nav.index(_PREVIOUS) < nav.index("Roadmap") < nav.index(_NEXT)


def test_first_and_last_have_one_neighbour() -> None:
    first = render_header(_model(), "001", "work_packages/wp-001.md").strip().splitlines()[-1]
    last = render_header(_model(), "004", "work_packages/wp-004.md").strip().splitlines()[-1]
    assert _PREVIOUS not in first
    assert _NEXT in first
    assert _PREVIOUS in last
    assert _NEXT not in last
    # Phase 3 has no page: the header names it without a link.
    assert "Engineering log · Phase 3 ·" in render_header(
        _model(), "004", "work_packages/wp-004.md"
    )


def test_superseded_header_links_its_successor() -> None:
    header = render_header(_model(), "003b", "work_packages/wp-003b.md")
    assert "Superseded by [WP-004](wp-004.md)" in header


def test_unknown_id_is_a_key_error() -> None:
    with pytest.raises(KeyError):
        render_header(_model(), "999", "work_packages/wp-999.md")


def test_roadmap_groups_rows_by_phase_with_statuses() -> None:
    text = _roadmap.render_roadmap(_model(), "ROADMAP.md")
    sections = re.split(r"^## ", text, flags=re.MULTILINE)[1:]
    assert [s.splitlines()[0] for s in sections] == [
        "[Phase 1 — Foundation](engineering/phase-01-foundation.md)",
        "[Phase 2 — Replay](engineering/phase-02-replay.md)",
        "Phase 3",
    ]
    rows = [
        [cell.strip() for cell in line.strip("|").split("|")]
        for line in text.splitlines()
        if line.startswith("| [WP-")
    ]
    assert [(r[0], _icon_names(r[2]), _plain(r[2])) for r in rows] == [
        ("[WP-001](work_packages/wp-001.md)", ["check-circle"], "done"),
        ("[WP-002](work_packages/wp-002.md)", ["progress-clock"], "in-progress"),
        ("[WP-003](work_packages/wp-003.md)", ["cancel"], "blocked"),
        ("[WP-003b](work_packages/wp-003b.md)", ["swap-horizontal-circle"], "superseded"),
        ("[WP-004](work_packages/wp-004.md)", ["circle-outline"], "todo"),
    ]
    # The title's HTML is escaped, and the Needed-by column agrees with the headers.
    assert rows[2][1] == "Third &#60;b&#62;"
    assert rows[0][4] == "[WP-002](work_packages/wp-002.md), [WP-003](work_packages/wp-003.md)"
    assert "5 work packages:" in text
    assert f"{status_badge('done')}: 1" in text


def test_roadmap_keeps_a_hand_written_intro() -> None:
    text = _roadmap.render_roadmap(_model(), "ROADMAP.md", intro="# Our plan\n\nWhy we go.")
    assert text.startswith("# Our plan\n\nWhy we go.")


def test_phase_section_lists_only_its_packages() -> None:
    text = _roadmap.render_phase_section(_model(), 2, "engineering/phase-02-replay.md")
    assert [label for label, _ in _links(text) if label.startswith("WP-")][:2] == [
        "WP-003",
        "WP-001",
    ]
    ids = re.findall(r"^\| \[WP-(\w+)\]", text, flags=re.MULTILINE)
    assert ids == ["003", "003b"]
    assert "[roadmap](../ROADMAP.md)" in text


def test_generated_phase_page_has_a_title() -> None:
    text = _roadmap.render_phase_page(_model(), 3, "engineering/phase-03.md")
    assert text.startswith("# Phase 3\n")
    assert re.findall(r"^\| \[WP-(\w+)\]", text, flags=re.MULTILINE) == ["004"]


def test_missing_page_is_named_not_linked() -> None:
    model = build_model(PACKAGES, PHASES, {"001": "work_packages/wp-001.md"}, "ROADMAP.md")
    header = render_header(model, "001", "work_packages/wp-001.md")
    assert "WP-002 (no page)" in header


def test_status_badges_draw_theme_svg_icons_and_need_no_emoji_font() -> None:
    for status, name in STATUS_ICONS.items():
        badge = status_badge(status)
        assert _icon_names(badge) == [name]
        assert _plain(badge) == status
        # Every character outside the SVG markup is ASCII: nothing needs an emoji font.
        assert _plain(badge).isascii()
    assert _icon_names(status_badge("someday")) == ["help-circle"]
    assert icon_svg("../../etc/passwd") is None
    assert icon_svg("no-such-icon-anywhere") is None


def test_generated_pages_use_no_emoji() -> None:
    # An emoji renders as an empty box without an emoji font; the theme's SVG icons do not.
    emoji = re.compile("[\U0001f000-\U0001ffff\u2600-\u27bf\u2b00-\u2bff\ufe0f]")
    model = _model()
    texts = [render_header(model, wp, f"work_packages/wp-{wp}.md") for wp in ("001", "003")]
    texts.append(_roadmap.render_roadmap(model, "ROADMAP.md"))
    for text in texts:
        assert not emoji.findall(text), emoji.findall(text)
    assert inline_icon(_roadmap.LINK_ICON) in expand_icons(texts[0])


def test_icons_cross_markdown_as_tokens_and_expand_to_theme_svg() -> None:
    token = _roadmap.icon_token("cancel", css_class="wpgate-status")
    assert "<" not in token  # nothing for Markdown's inline-HTML handling to parse
    assert expand_icons(f"<td>{token} blocked</td>") == (
        f'<td><span class="twemoji wpgate-status">{icon_svg("cancel")}</span> blocked</td>'
    )
    assert _roadmap.icon_token("no-such-icon-anywhere", "->") == "->"
    assert expand_icons("<p>no icon</p>") == "<p>no icon</p>"


_LINK_PATHS = (
    "ROADMAP.md",
    "work_packages/wp-001.md",
    "work_packages/wp-002.md",
    "engineering/phase-01.md",
    "a/b/c.md",
    "a/./b//d.md",
    "a/b/../e.md",
    "../out.md",
    "/abs/x.md",
    "x.md/",
    ".",
)


@pytest.mark.parametrize("from_src", _LINK_PATHS)
def test_a_relative_link_is_the_one_posixpath_relpath_gives(from_src: str) -> None:
    # The pages' links are computed without the current directory, with the same answers.
    for to_src in _LINK_PATHS:
        expected = posixpath.relpath(to_src, posixpath.dirname(from_src) or ".")
        assert _roadmap.relative_link(from_src, to_src) == expected, (from_src, to_src)


def test_a_phase_title_that_only_repeats_phase_n_is_not_said_twice() -> None:
    """`wpgate new-wp` writes `title: "Phase 1"` into a new phase page; the site showed
    "Phase 1 — Phase 1" (an outside audit)."""
    assert _roadmap.phase_title(1, "Phase 1") is None
    assert _roadmap.phase_title(1, " Phase 1 ") is None
    assert _roadmap.phase_title(1, None) is None
    assert _roadmap.phase_title(1, "Phase 2") == "Phase 2"
    assert _roadmap.phase_title(3, "Foundation") == "Foundation"
