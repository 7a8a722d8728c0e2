"""Status icons as inline SVG from the theme's own icon set, so they need no emoji font.

mkdocs-material ships the Material Design Icons as SVG files (``templates/.icons/material``);
each status is drawn with one of them, inlined in a ``<span class="twemoji">`` that the theme
sizes and colours like its own icons. Without the theme installed, a badge is its text alone.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

__all__ = ["STATUS_ICONS", "icon_svg", "inline_icon", "status_icon", "status_icon_name"]

#: The theme icon (``material/<name>.svg``) drawn for each work-package status.
STATUS_ICONS = {
    "todo": "circle-outline",
    "in-progress": "progress-clock",
    "done": "check-circle",
    "blocked": "cancel",
    "deferred": "pause-circle",
    "superseded": "swap-horizontal-circle",
}
_UNKNOWN_ICON = "help-circle"
_ICON_NAME_RE = re.compile(r"^[a-z0-9-]+$")
_SVG_OPEN_RE = re.compile(r"^<svg\b")


def _icons_dir() -> Path | None:
    """The theme's ``material`` icon folder, or None when mkdocs-material is not installed."""
    import importlib.util

    spec = importlib.util.find_spec("material")
    if spec is None or spec.origin is None:
        return None
    folder = Path(spec.origin).resolve().parent / "templates" / ".icons" / "material"
    return folder if folder.is_dir() else None


@functools.cache
def icon_svg(name: str) -> str | None:
    """The theme icon ``name`` as one line of SVG sized to the text, or None when unavailable."""
    folder = _icons_dir()
    if folder is None or not _ICON_NAME_RE.match(name):
        return None
    try:
        svg = (folder / f"{name}.svg").read_text(encoding="utf-8").strip()
    except OSError:
        return None
    if not _SVG_OPEN_RE.match(svg):
        return None
    # Sized and coloured without the theme's CSS too; the theme's `.twemoji svg` rule agrees.
    attributes = 'width="1.125em" height="1.125em" fill="currentColor" aria-hidden="true"'
    return " ".join(_SVG_OPEN_RE.sub(f"<svg {attributes}", svg, count=1).split())


def inline_icon(name: str, fallback: str = "", css_class: str = "wpgate-icon") -> str:
    """The theme icon ``name`` as inline HTML, or ``fallback`` text without the theme."""
    svg = icon_svg(name)
    return fallback if svg is None else f'<span class="twemoji {css_class}">{svg}</span>'


def status_icon_name(status: str) -> str:
    """The theme icon drawn for ``status`` (an unknown status gets a question mark)."""
    return STATUS_ICONS.get(status, _UNKNOWN_ICON)


def status_icon(status: str) -> str:
    """The inline icon of ``status`` (an unknown status gets a question mark), or ``""``."""
    return inline_icon(status_icon_name(status), css_class="wpgate-status")
