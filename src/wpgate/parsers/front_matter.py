"""YAML front matter: a ``---`` line, a YAML mapping, and a closing ``---`` (or ``...``) line.

Parsed with PyYAML's safe loader (YAML 1.1, as PyYAML implements it), plus two strictness
checks the loader lacks: a duplicate key is an error (YAML 1.2 §3.2.1.1 requires unique keys;
PyYAML keeps the last one silently) and the document must be a mapping. Aliases (``*name``,
merge keys ``<<: *name`` included) are refused before anything is constructed: a page of two
kilobytes with nested aliases would otherwise expand into gigabytes (a "billion laughs"), and
front matter has no use for them. Every problem becomes a finding with the file and the line in
the file, never an exception. PyYAML is imported on first use, so reading only file names (the
commit-msg hook) never pays for it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from wpgate._model import Finding

if TYPE_CHECKING:
    import yaml


def _loader() -> type[yaml.SafeLoader]:
    """libyaml's parser when PyYAML was built with it: the same YAML and marks, ~10x faster,
    which matters for a registry of a thousand pages; the pure-Python loader otherwise."""
    import yaml

    found: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return found


@dataclass(frozen=True)
class FrontMatter:
    """A page's front matter, where each top-level key sits, and the body after it.

    ``data`` is None when the page has no front matter or it does not parse; ``body_line`` is
    the 1-based line the body starts on.
    """

    data: dict[str, Any] | None
    key_lines: dict[str, int] = field(default_factory=dict, compare=False)
    body: str = ""
    body_line: int = 1
    findings: tuple[Finding, ...] = ()


def _failed(finding: Finding, body: str, body_line: int) -> FrontMatter:
    """No usable front matter: the one finding that says why, and the body as far as known."""
    return FrontMatter(None, body=body, body_line=body_line, findings=(finding,))


def _split(text: str) -> tuple[list[str], int] | None:
    """The front-matter lines and the index of the closing line, or None when there is none."""
    lines = text.splitlines()
    if not lines or lines[0].rstrip() != "---":
        return None
    for index in range(1, len(lines)):
        if lines[index].rstrip() in ("---", "..."):
            return lines, index
    return lines, -1


def parse_front_matter(  # noqa: PLR0911 - one early return per malformed shape
    text: str, path: str, rule_id: str
) -> FrontMatter:
    """Parse the front matter at the top of ``text`` (a file at repository-relative ``path``)."""
    if text.startswith("\ufeff"):
        text = text[1:]
    split = _split(text)
    if split is None:
        return _failed(
            Finding(
                path,
                1,
                rule_id,
                "no YAML front matter; start the file with a `---` line, the keys, and a "
                "closing `---` line",
            ),
            text,
            1,
        )
    lines, end = split
    if end < 0:
        return _failed(
            Finding(
                path,
                1,
                rule_id,
                "the front matter opened on line 1 is never closed; add a `---` line after "
                "the last key",
            ),
            text,
            1,
        )
    source = "\n".join(lines[1:end]) + "\n"
    body = "\n".join(lines[end + 1 :])
    body_line = end + 2
    import yaml

    try:
        loader = _loader()(source)
        try:
            node = loader.get_single_node()
            problem = _structure_problem(node, "*" in source) if node is not None else None
            if problem is not None:
                message, line = problem
                return _failed(Finding(path, line + 2, rule_id, message), body, body_line)
            data = loader.construct_document(node) if node is not None else None
        finally:
            loader.dispose()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 2 if mark is not None else 1
        reason = exc.problem or exc.context or "invalid YAML"
        return _failed(
            Finding(
                path,
                line,
                rule_id,
                f"the front matter is not valid YAML ({reason}); fix the syntax, quoting "
                "values that contain `:` or start with a special character",
            ),
            body,
            body_line,
        )
    except (yaml.YAMLError, RecursionError) as exc:
        return _failed(
            Finding(path, 1, rule_id, f"the front matter is not valid YAML ({exc})"),
            body,
            body_line,
        )
    if not isinstance(data, dict):
        return _failed(
            Finding(
                path,
                2,
                rule_id,
                "the front matter must be a YAML mapping of `key: value` lines, not "
                f"{type(data).__name__ if data is not None else 'empty'}",
            ),
            body,
            body_line,
        )
    key_lines = {
        str(k.value): k.start_mark.line + 2
        for k, _ in node.value  # type: ignore[union-attr]
        if isinstance(k, yaml.ScalarNode)
    }
    return FrontMatter(
        {str(k): v for k, v in data.items()}, key_lines, body=body, body_line=body_line
    )


def _structure_problem(node: yaml.Node, aliases: bool = True) -> tuple[str, int] | None:
    """What makes the composed ``node`` unusable (an alias, a repeated key) and its 0-based line.

    The composer shares one node object between an anchor and each of its aliases, so a node
    reached twice is an alias: it is refused before the constructor could expand it. Without
    ``aliases`` (the source holds no ``*``, so it can hold no alias) only collections are
    visited, each once.
    """
    import yaml

    stack: list[tuple[yaml.Node, yaml.Node | None]] = [(node, None)]
    seen_nodes: set[int] = set()
    while stack:
        current, via = stack.pop()
        if aliases:
            if id(current) in seen_nodes:
                return (
                    "the front matter uses a YAML alias (`*name` or `<<: *name`); write the "
                    "value out in full (aliases are refused: nested ones expand without bound)",
                    (via or current).start_mark.line,
                )
            seen_nodes.add(id(current))
        if isinstance(current, yaml.MappingNode):
            problem = _repeated_key(current)
            if problem is not None:
                return problem
            children = [
                pair
                for key, value in current.value
                for pair in ((key, key), (value, key))
                if aliases or not isinstance(pair[0], yaml.ScalarNode)
            ]
            stack.extend(reversed(children))  # document order: an anchor before its aliases
        elif isinstance(current, yaml.SequenceNode):
            stack.extend(
                (item, via)
                for item in reversed(current.value)
                if aliases or not isinstance(item, yaml.ScalarNode)
            )
    return None


def _repeated_key(mapping: yaml.MappingNode) -> tuple[str, int] | None:
    """The first key ``mapping`` repeats, with its 0-based line, or None."""
    import yaml

    seen: set[str] = set()
    for key, _ in mapping.value:
        if isinstance(key, yaml.ScalarNode):
            if key.value in seen:
                return (
                    f"the key `{key.value[:60]}` appears twice in the front matter; keep one",
                    key.start_mark.line,
                )
            seen.add(key.value)
    return None
