"""A Griffe extension that turns the reST leftovers of Google-style docstrings into Markdown.

mkdocstrings renders a docstring as Markdown. Docstrings written for Sphinx as well keep two
reST habits that Markdown shows literally: cross-reference roles (``:func:`musgd.orthogonalize```
reads ":func:" before the name) and the ``::`` that introduces a literal block. Enable it in
``mkdocs.yml``::

    plugins:
      - mkdocstrings:
          handlers:
            python:
              options:
                extensions: [wpgate.site.griffe_rst]

Only the docstring text mkdocstrings renders changes; the source stays as it is. Needs Griffe
(installed with ``mkdocstrings[python]``, part of the ``docs`` extra).
"""

from __future__ import annotations

import re
from typing import Any

from griffe import Extension, Object

__all__ = ["RstLeftovers", "rst_to_markdown"]

# :func:`name`, :py:class:`~pkg.Name`, :meth:`text <target>`; Sphinx's domain prefix optional.
_ROLE_RE = re.compile(
    r":(?:py:)?(?:func|class|meth|mod|attr|data|exc|obj|const|type):`~?(?P<body>[^`]+)`"
)
_TITLED_RE = re.compile(r"^(?P<title>.+?)\s*<[^<>]+>$")
# A paragraph's last line ending in `::` before an indented block: "buffer ``m``::".
_LITERAL_MARK_RE = re.compile(r"(?<=\S)::$", re.MULTILINE)
_BARE_MARK_RE = re.compile(r"^[ \t]*::[ \t]*$\n?", re.MULTILINE)


def _role(match: re.Match[str]) -> str:
    """One role as a code span of its text: the title of ``text <target>``, else the name."""
    body = match.group("body")
    titled = _TITLED_RE.match(body)
    return f"`{titled.group('title') if titled else body}`"


def rst_to_markdown(text: str) -> str:
    """``text`` with reST roles as code spans and the ``::`` literal-block marks dropped.

    ``x::`` becomes ``x:`` and a line holding only ``::`` goes; the indented block after either
    is already a Markdown code block. Everything else is left as written.
    """
    text = _ROLE_RE.sub(_role, text)
    text = _LITERAL_MARK_RE.sub(":", text)
    return _BARE_MARK_RE.sub("", text)


class RstLeftovers(Extension):
    """Rewrites each object's docstring with :func:`rst_to_markdown` as Griffe loads it."""

    def on_instance(self, *, obj: Object, **kwargs: Any) -> None:
        """Griffe calls this for every object it creates, before any docstring is parsed."""
        if obj.docstring is not None:
            obj.docstring.value = rst_to_markdown(obj.docstring.value)
