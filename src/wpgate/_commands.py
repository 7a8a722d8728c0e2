"""The ``wpgate`` click group: every command, its options and its help.

:mod:`wpgate.cli` imports this module only for a command line it does not read itself (see
:func:`wpgate.cli.plain_trailers`): help, a usage error, a group option, any command but a
plain ``trailers``. The commands' work, their reports and their exit statuses are
:mod:`wpgate.cli`'s, so both ways of reading a command line run the same code.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import click

from wpgate import _shell as shell
from wpgate._config import Config, load_config
from wpgate._model import RULES
from wpgate._output import FORMATS, describe_rule
from wpgate.errors import InvocationError
from wpgate.options import RULE_SWITCH_VALUES

__all__ = ["cli", "invoke"]

_Command = TypeVar("_Command", bound=Callable[..., Any])


def _store_ignored(ctx: click.Context, _param: click.Parameter, value: tuple[str, ...]) -> None:
    """``--ignore``: remembered for :func:`_config` of this invocation."""
    ctx.meta["wpgate.ignore"] = ctx.meta.get("wpgate.ignore", ()) + tuple(value)


def _store_verbose(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    """``--verbose``: remembered for :func:`_config` of this invocation."""
    ctx.meta["wpgate.verbose"] = value


def _invocation() -> tuple[bool, tuple[str, ...]]:
    """This invocation's ``--verbose`` and ``--ignore`` values."""
    meta = click.get_current_context().meta
    return bool(meta.get("wpgate.verbose")), meta.get("wpgate.ignore", ())


def _config(root: str | None) -> Config:
    """The configuration of ``--root`` with this invocation's ``--verbose`` and ``--ignore``."""
    verbose, ignored = _invocation()
    return shell.command_config(root, verbose=verbose, ignored=ignored)


def _option(option: shell.Option) -> Callable[[_Command], _Command]:
    """The click option of one entry of :data:`wpgate._shell.TRAILERS_OPTIONS`."""
    if option.takes == shell.FLAG:
        return click.option(option.flag, option.dest, is_flag=True, help=option.help)
    if option.takes == shell.RULES:
        return click.option(
            option.flag,
            metavar=option.metavar,
            multiple=True,
            expose_value=False,
            callback=_store_ignored,
            help=option.help,
        )
    if option.takes == shell.FORMAT:
        return click.option(
            option.flag,
            option.dest,
            type=click.Choice(FORMATS),
            default="text",
            show_default=True,
            help=option.help,
        )
    if option.takes == shell.DIRECTORY:
        return click.option(
            option.flag,
            option.dest,
            type=click.Path(file_okay=False, exists=True),
            default=None,
            help=option.help,
        )
    return click.option(option.flag, option.dest, metavar=option.metavar, help=option.help)


def _options(*options: shell.Option) -> Callable[[_Command], _Command]:
    """The click options of ``options``, listed in their order."""

    def decorate(command: _Command) -> _Command:
        for option in reversed(options):
            command = _option(option)(command)
        return command

    return decorate


#: ``--ignore``, ``--format`` and ``--root``, the options of every linter's command.
_shared_options = _options(*shell.SHARED_OPTIONS)
_root_option = _option(shell.ROOT_OPTION)


def _print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    """``--version``: the version is looked up only when asked for (see ``wpgate.__getattr__``)."""
    if not value or ctx.resilient_parsing:
        return
    import wpgate

    click.echo(f"wpgate, version {wpgate.__version__}")
    ctx.exit()


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_print_version,
    help="Show the version and exit.",
)
@click.option(
    "--verbose",
    "-v",
    is_flag=True,
    expose_value=False,
    callback=_store_verbose,
    help="Say on stderr which configuration file is read (and which are not).",
)
def cli() -> None:
    """Evidence-gated governance linters for research repositories."""


# --------------------------------------------------------------------------- trailers


@cli.command()
@click.argument("message_file", required=False)
@_options(*shell.TRAILERS_OPTIONS)
def trailers(
    *,
    message_file: str | None,
    rev_range: str | None,
    history: bool,
    pushed: bool,
    pr: str | None,
    fmt: str,
    root: str | None,
) -> int:
    """Lint commit messages: subject and the WP/Provenance/Assumptions/Gate trailers.

    MESSAGE_FILE is the commit-msg hook's file (comments and the scissors part are dropped);
    `-` reads stdin.
    """
    verbose, ignored = _invocation()
    return shell.lint_trailers(
        message_file=message_file,
        rev_range=rev_range,
        history=history,
        pushed=pushed,
        pr=pr,
        fmt=fmt,
        root=root,
        verbose=verbose,
        ignored=ignored,
    )


# --------------------------------------------------------------------------- explain


@cli.command()
@click.argument("rule", required=False)
@click.option("--list", "list_all", is_flag=True, help="List every rule.")
def explain(rule: str | None, list_all: bool) -> int:
    """Explain RULE (an id such as WPG104 or a name such as wp-trailer)."""
    from wpgate.rules import register_all

    register_all()

    if list_all and rule is not None:
        raise InvocationError(
            f"--list lists every rule and {rule!r} asks for one; pass either (`wpgate explain "
            f"{rule}` or `wpgate explain --list`)"
        )
    if list_all or rule is None:
        width = max(len(known.name) for known in RULES)  # the longest name still has a gap
        for known in RULES:
            state = "" if known.enabled_by_default else "  (off by default)"
            click.echo(f"{known.rule_id}  {known.name:<{width}}  {known.summary}{state}")
        return shell.EXIT_CLEAN
    found = RULES.get(rule)
    if found is None:
        raise InvocationError(f"unknown rule {rule!r}; `wpgate explain --list` lists every rule")
    click.echo(f"{found.rule_id} {found.name}")
    click.echo(f"  {found.summary}")
    click.echo(f"  enabled by default: {'yes' if found.enabled_by_default else 'no'}")
    click.echo(
        f"  switch: {found.name} = {'|'.join(RULE_SWITCH_VALUES)}, in [rules] of wpgate.toml or "
        "[tool.wpgate.rules] of pyproject.toml"
    )
    for key, value in found.options.items():
        click.echo(f"  option: {key} = {value!r}")
    description = describe_rule(found)
    if description:
        click.echo(f"  checks: {description}")
    return shell.EXIT_CLEAN


# --------------------------------------------------------------------------- docs linters


_history_option = click.option(
    "--history/--no-history",
    default=None,
    help="Check first-use dates against the first commit citing each source "
    "(default: on when [tool.wpgate] history_start or [tool.wpgate.provenance] history is set).",
)


@cli.command()
@_history_option
@_shared_options
def provenance(history: bool | None, fmt: str, root: str | None) -> int:
    """Lint docs/PROVENANCE.md: ids, licences, the first-use log."""
    from wpgate._docs import run_provenance

    config = _config(root)
    return shell.emit([run_provenance(config, history=history)], fmt, config)


@cli.command()
@_shared_options
def wp(fmt: str, root: str | None) -> int:
    """Lint the work-package registry (docs/work_packages/wp-*.md)."""
    from wpgate._docs import run_work_packages

    config = _config(root)
    return shell.emit([run_work_packages(config)], fmt, config)


@cli.command()
@click.option(
    "--git/--no-git",
    default=True,
    show_default=True,
    help="Check with git: each file's recorded commit and hashes, and the claims' `covers` and "
    "`identical` markers. --no-git skips those (a tree without its history).",
)
@click.option(
    "--collect/--no-collect",
    default=True,
    show_default=True,
    help="Check `collected N` markers by collecting the named tests with pytest.",
)
@_shared_options
def evidence(git: bool, collect: bool, fmt: str, root: str | None) -> int:
    """Lint [MEASURED] claims and the evidence files under docs/evidence/."""
    from wpgate._docs import run_evidence

    config = _config(root)
    return shell.emit([run_evidence(config, git=git, collect=collect)], fmt, config)


@cli.command()
@_shared_options
def changelog(fmt: str, root: str | None) -> int:
    """Check that the backticked names of CHANGELOG.md's Unreleased section exist."""
    from wpgate._docs import run_changelog

    config = _config(root)
    return shell.emit([run_changelog(config)], fmt, config)


@cli.command()
@_shared_options
def markdown(fmt: str, root: str | None) -> int:
    """Lint the site's Markdown pages for what Python-Markdown renders unlike CommonMark."""
    from wpgate._docs import run_markdown

    config = _config(root)
    return shell.emit([run_markdown(config)], fmt, config)


@cli.command()
@_shared_options
def docs(fmt: str, root: str | None) -> int:
    """Run the docs linters (provenance, wp, evidence, changelog, markdown): the wpgate-docs
    hook."""
    from wpgate._documents import parse_once

    config = _config(root)
    with parse_once():
        return shell.emit([linter(config) for _, linter in shell.docs_linters()], fmt, config)


@cli.command("new-wp")
@click.argument("wp_id", metavar="ID")
@click.option("--title", required=True, help="One-line title.")
@click.option("--phase", type=click.IntRange(min=0), required=True, help="Phase number.")
@_root_option
def new_wp(wp_id: str, title: str, phase: int, root: str | None) -> int:
    """Scaffold docs/work_packages/wp-ID.md (status todo) that passes `wpgate wp`."""
    from wpgate._docs import new_work_package

    base = shell.repository_root(root)
    try:
        paths = new_work_package(base, load_config(base), wp_id, title, phase)
    except ValueError as exc:
        raise InvocationError(str(exc)) from exc
    click.echo("\n".join(shell.shown_path(base, path) for path in paths))
    return shell.EXIT_CLEAN


@cli.command()
@click.option("--name", help="Site name for mkdocs.yml (default: the folder's name).")
@_root_option
def init(name: str | None, root: str | None) -> int:
    """Bootstrap wpgate here: config, governance documents, mkdocs.yml, pre-commit hooks."""
    from wpgate._init import init_repository

    base = shell.repository_root(root)
    try:
        result = init_repository(base, name)
    except ValueError as exc:
        raise InvocationError(str(exc)) from exc
    for path, added in result.appended:
        click.echo(f"appended {added} to {shell.shown_path(base, path)}")
    for path in result.written:
        click.echo(f"wrote {shell.shown_path(base, path)}")
    for path in result.kept:
        click.echo(f"kept  {shell.shown_path(base, path)} (exists)")
    if result.advice:
        click.echo(result.advice)
    click.echo("next: wpgate new-wp 001 --title TITLE --phase 1; pre-commit install; wpgate check")
    return shell.EXIT_CLEAN


@cli.command()
@_shared_options
def check(fmt: str, root: str | None) -> int:
    """Run every linter the configuration enables."""
    from wpgate._documents import parse_once

    config = _config(root)
    if not config.source and fmt == "text":
        # Nothing configures wpgate here: the findings below are of documents never made.
        click.echo(
            f"wpgate: no configuration at {config.root} (no [tool.wpgate] in pyproject.toml, no "
            "wpgate.toml); `wpgate init` writes one with the documents checked below",
            err=True,
        )
    with parse_once():  # the trailers' references and the docs linters share each document
        return shell.emit([linter(config) for _, linter in shell.CHECK_LINTERS], fmt, config)


# --------------------------------------------------------------------------- entry point


def invoke(args: Sequence[str]) -> int:
    """Run ``args`` through click; click's own exits, usage errors and aborts become exit
    statuses here (the commands' errors are :func:`wpgate.cli.main`'s to report)."""
    try:
        result = cli.main(args=list(args), prog_name="wpgate", standalone_mode=False)
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        return shell.failed(args, exc.format_message())
    except click.exceptions.Abort as exc:
        status = shell.stopped(exc)
        return shell.failed(args, "aborted") if status == shell.EXIT_USAGE else status
    return int(result) if isinstance(result, int) else shell.EXIT_CLEAN
