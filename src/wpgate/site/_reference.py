"""Reference pages generated from code: a click CLI, a module's public API, the lint rules.

Each function returns Markdown. Click help and rule docstrings go into fenced blocks, so
reST markup and ``*`` in equations render literally rather than as Markdown. The API page is
left to mkdocstrings: it holds one ``::: module.member`` directive per member.
"""

from __future__ import annotations

import importlib
import inspect
import re
from collections.abc import Iterable, Sequence
from typing import Any

from wpgate.errors import ReferenceBuildError
from wpgate.site._escape import escape_markdown, escape_markdown_keep_code

_DOTTED = r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*"


def _fence(text: str, lang: str = "text") -> str:
    """``text`` in a fenced block longer than any backtick run inside it."""
    ticks = "`" * max(3, _longest_backticks(text) + 1)
    return f"{ticks}{lang}\n{text.rstrip()}\n{ticks}"


def _longest_backticks(text: str) -> int:
    """Length of the longest run of backticks in ``text``."""
    best = run = 0
    for char in text:
        run = run + 1 if char == "`" else 0
        best = max(best, run)
    return best


def import_target(spec: str) -> Any:
    """The object named by ``module:attribute`` (or a module, without ``:``)."""
    module_name, _, attribute = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ReferenceBuildError(
            f"cannot import {module_name!r} for the reference pages: {exc}"
        ) from None
    if not attribute:
        return module
    try:
        return getattr(module, attribute)
    except AttributeError:
        raise ReferenceBuildError(
            f"module {module_name!r} has no attribute {attribute!r}"
        ) from None


def _click_sections(
    command: Any, path: Sequence[str], level: int, parent: Any = None
) -> Iterable[str]:
    """One section per command, depth-first, with the help exactly as the terminal shows it."""
    import click

    name = " ".join(path)
    # The command's own context settings, inherited by subcommands as at the terminal.
    ctx = click.Context(command, info_name=path[-1], parent=parent, **command.context_settings)
    with ctx:
        help_text = command.get_help(ctx)
        yield f"{'#' * level} `{name}`\n\n{_fence(help_text)}\n"
        if isinstance(command, click.Group):
            for sub_name in command.list_commands(ctx):
                sub = command.get_command(ctx, sub_name)
                if sub is not None and not sub.hidden:
                    yield from _click_sections(sub, [*path, sub_name], min(level + 1, 4), ctx)


def render_cli_page(group: Any, prog: str) -> str:
    """The CLI reference: the group's help, then every subcommand's help."""
    intro = (
        f"# Command-line reference: `{prog}`\n\n"
        "Generated at build time from the click commands, so it always matches the installed "
        "version. The same text is printed by `--help`.\n"
    )
    return "\n".join([intro, *_click_sections(group, [prog], 2)])


def render_api_page(module_name: str, members: Sequence[str]) -> str:
    """The API reference of ``members`` of ``module_name`` as mkdocstrings directives.

    mkdocstrings' Python handler reads the source without importing it, so the page builds
    where the module's own dependencies (PyTorch for ``musgd``) are not installed. With no
    ``members`` the module is documented whole (its public names).
    """
    if not re.fullmatch(_DOTTED, module_name):
        raise ReferenceBuildError(f"api_module {module_name!r} is not a dotted module name")
    bad = [m for m in members if not re.fullmatch(_DOTTED, m)]
    if bad:
        raise ReferenceBuildError(f"api_members {', '.join(map(repr, bad))} are not names")
    title = f"# API reference: `{module_name}`\n"
    if not members:
        return f"{title}\n::: {module_name}\n"
    # The module's docstring as the introduction, then one section per member.
    intro = (
        f"::: {module_name}\n    options:\n      members: false\n      show_root_heading: false\n"
    )
    return "\n".join([title, intro, *(f"::: {module_name}.{name}\n" for name in members)])


def rule_page_name(rule: Any) -> str:
    """The file name of one rule's page, e.g. ``wpg101.md``."""
    return f"{str(rule.rule_id).lower()}.md"


def render_rule_page(rule: Any) -> str:
    """One rule: id, name, summary, default state, options and the check's docstring."""
    lines = [
        f"# {escape_markdown(rule.rule_id)} {escape_markdown(rule.name)}\n",
        f"{escape_markdown_keep_code(rule.summary)}\n",
        f"- Enabled by default: {'yes' if rule.enabled_by_default else 'no'}",
        f"- Explain in the terminal: `wpgate explain {rule.rule_id}`",
    ]
    options = dict(getattr(rule, "options", {}) or {})
    if options:
        lines.append("- Options (`[tool.wpgate]` in `pyproject.toml`), with defaults:")
        lines.extend(f"    - `{k}`: `{v!r}`" for k, v in sorted(options.items()))
    doc = inspect.getdoc(rule.check)
    if doc:
        lines.extend(["", _fence(doc)])
    return "\n".join(lines) + "\n"


def render_rules_index(rules: Sequence[Any]) -> str:
    """The table of every rule, linking to each rule's page."""
    lines = [
        "# Lint rules\n",
        "Generated from the rule registry; `wpgate explain RULE-ID` prints the same text.\n",
        "| ID | Name | Summary | Default |",
        "| --- | --- | --- | --- |",
    ]
    lines.extend(
        f"| [{escape_markdown(rule.rule_id)}]({rule_page_name(rule)}) "
        f"| {escape_markdown(rule.name)} | {escape_markdown_keep_code(rule.summary)} "
        f"| {'on' if rule.enabled_by_default else 'off'} |"
        for rule in rules
    )
    if not rules:
        lines.append("| — | — | No rule is registered. | — |")
    return "\n".join(lines) + "\n"
