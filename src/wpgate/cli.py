"""The ``wpgate`` command line: a thin click shell over the linters.

Exit status: 0 clean, 1 findings, 2 usage, configuration or git error. Each command is a small
function returning its exit status; ``check`` runs every linter in :data:`CHECK_LINTERS`, so a
new linter is one function appended there. Linter modules are imported by the command that
runs them: the commit-msg hook (``wpgate trailers FILE``) never imports the docs linters.
"""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from itertools import chain
from pathlib import Path
from typing import NoReturn

import click

from wpgate._config import Config, load_config
from wpgate._model import MAX_MESSAGE, RULES, Finding, with_severity
from wpgate._output import FORMATS, LinterRun, Summary, format_report
from wpgate.errors import ConfigError, GitError, InvocationError
from wpgate.options import OutputOptions

__all__ = ["CHECK_LINTERS", "cli", "main", "run"]

EXIT_CLEAN, EXIT_FINDINGS, EXIT_USAGE = 0, 1, 2
#: Ctrl-C: the shell's status for a process ended by SIGINT (128 + signal 2).
EXIT_INTERRUPTED = 130

#: ``check`` runs each of these: ``(name, linter(config) -> LinterRun)``.
Linter = Callable[[Config], LinterRun]


def _emit(runs: Sequence[LinterRun], fmt: str, config: Config | None = None) -> int:
    """Print the report of ``runs``; the exit status for their findings (warnings never fail)."""
    findings = list(chain.from_iterable(run.findings for run in runs))
    if config is not None and config.warnings:
        findings = [with_severity(f, config.severity(f.rule_id)) for f in findings]
    if config is not None and config.respells:
        findings = [_spelled(f, config) for f in findings]
    help_uri = OutputOptions.from_config(config).help_uri
    report = format_report(findings, [run.summary for run in runs], fmt, help_uri=help_uri)
    # click strips ANSI sequences from output that is no terminal: a report without ESC has
    # none, and is written without that scan of every character (the same bytes).
    click.echo(report, nl=False, color=True if "\x1b" not in report else None)
    return EXIT_FINDINGS if any(f.severity == "error" for f in findings) else EXIT_CLEAN


def _spelled(finding: Finding, config: Config) -> Finding:
    """``finding`` naming tables as the adopter's file writes them (``[gates]`` in a
    ``wpgate.toml``); a message already cut to its length limit is left as it is."""
    if len(finding.message) > MAX_MESSAGE:
        return finding
    message = config.spelled(finding.message)
    return finding if message == finding.message else replace(finding, message=message)


def _store_ignored(ctx: click.Context, _param: click.Parameter, value: tuple[str, ...]) -> None:
    """``--ignore``: remembered for :func:`_config` of this invocation."""
    ctx.meta["wpgate.ignore"] = ctx.meta.get("wpgate.ignore", ()) + tuple(value)


def _config(root: str | None) -> Config:
    """The configuration of ``--root`` with this run's ``--ignore`` rules switched off; with
    ``--verbose``, the file it came from is said on stderr (stdout stays the report)."""
    config = load_config(_root(root))
    meta = click.get_current_context().meta
    if meta.get("wpgate.verbose"):
        for line in config.describe_source():
            click.echo(f"wpgate: {line}", err=True)
    ignored: tuple[str, ...] = meta.get("wpgate.ignore", ())
    return config.ignoring(ignored) if ignored else config


def _store_verbose(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    """``--verbose``: remembered for :func:`_config` of this invocation."""
    ctx.meta["wpgate.verbose"] = value


def _root(path: str | None) -> Path:
    """The repository root: ``--root``, else the current directory."""
    return Path(path).resolve() if path else Path.cwd()


_root_option = click.option(
    "--root",
    type=click.Path(file_okay=False, exists=True),
    default=None,
    help="Repository root (default: the current directory).",
)
_ignore_option = click.option(
    "--ignore",
    metavar="RULE",
    multiple=True,
    expose_value=False,
    callback=_store_ignored,
    help="Skip RULE (an id such as WPG102 or a name) for this run; repeat or comma-separate.",
)
_format_option = click.option(
    "--format",
    "fmt",
    type=click.Choice(FORMATS),
    default="text",
    show_default=True,
    help="Report format: text, json, GitHub workflow annotations, or SARIF 2.1.0 (code scanning).",
)


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
@click.option("--range", "rev_range", metavar="OLDER..NEWER", help="Lint every commit of a range.")
@click.option("--history", is_flag=True, help="Lint the governed history (history_start..HEAD).")
@click.option("--pushed", is_flag=True, help="Lint the range being pushed (pre-push hook).")
@click.option("--pr", metavar="FILE", help="Lint a PR title + blank line + body (- for stdin).")
@_ignore_option
@_format_option
@_root_option
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
    config = _config(root)
    if pushed and not config.history_start and not (message_file or rev_range or history or pr):
        return _emit([_history_not_set("--pushed")], fmt, config)
    from wpgate._commits import run_trailers

    with _naming_history_start(config, history or pushed):
        run = run_trailers(
            config,
            message_file=message_file,
            rev_range=rev_range,
            history=history,
            pushed=pushed,
            pr=pr,
            pre_push=_pre_push_input() if pushed else None,
        )
    return _emit([run], fmt, config)


#: pre-commit's pre-push variables: when one is set, pre-commit read git's input itself.
_PRE_COMMIT_VARIABLES = ("PRE_COMMIT_FROM_REF", "PRE_COMMIT_TO_REF", "PRE_COMMIT_REMOTE_NAME")


def _pre_push_input() -> str | None:
    """git's pre-push stdin (githooks(5)), when wpgate is the hook itself: not under pre-commit
    (which reads it and sets its variables) and not a terminal (a command typed by hand)."""
    if any(os.environ.get(name) for name in _PRE_COMMIT_VARIABLES):
        return None
    stream = sys.stdin
    if stream is None or stream.isatty():
        return None
    try:
        return stream.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise InvocationError(
            f"cannot read git's pre-push input ({exc}); run --pushed from git's pre-push hook"
        ) from exc


@contextmanager
def _naming_history_start(config: Config, reads_history: bool) -> Iterator[None]:
    """A git error of a run that reads the governed history becomes, when ``history_start``
    names no commit git knows, a configuration error naming that setting and its file."""
    try:
        yield
    except GitError as exc:
        from wpgate._config import unknown_history_start

        error = unknown_history_start(config) if reads_history else None
        if error is None:
            raise
        raise error from exc


def _history_not_set(what: str) -> LinterRun:
    """The trailer lint skipped for want of ``history_start``, with how to turn it on."""
    return LinterRun(
        (),
        Summary(
            f"trailers ({what} skipped: history_start is not set; set it to the first governed "
            "commit to lint the trailers)",
            0,
            "commit",
        ),
    )


# --------------------------------------------------------------------------- explain


@cli.command()
@click.argument("rule", required=False)
@click.option("--list", "list_all", is_flag=True, help="List every rule.")
def explain(rule: str | None, list_all: bool) -> int:
    """Explain RULE (an id such as WPG104 or a name such as wp-trailer)."""
    from wpgate.rules import register_all

    register_all()

    if list_all or rule is None:
        for known in RULES:
            state = "" if known.enabled_by_default else "  (off by default)"
            click.echo(f"{known.rule_id}  {known.name:<24} {known.summary}{state}")
        return EXIT_CLEAN
    found = RULES.get(rule)
    if found is None:
        raise InvocationError(f"unknown rule {rule!r}; `wpgate explain --list` lists every rule")
    click.echo(f"{found.rule_id} {found.name}")
    click.echo(f"  {found.summary}")
    click.echo(f"  enabled by default: {'yes' if found.enabled_by_default else 'no'}")
    click.echo(
        f'  switch: {found.name} = true|false|"warning", in [rules] of wpgate.toml or '
        "[tool.wpgate.rules] of pyproject.toml"
    )
    for key, value in found.options.items():
        click.echo(f"  option: {key} = {value!r}")
    doc = (found.check.__doc__ or "").strip()
    if doc:
        click.echo(f"  checks: {doc.splitlines()[0]}")
    return EXIT_CLEAN


# --------------------------------------------------------------------------- check


def _check_trailers(config: Config) -> LinterRun:
    """The governed history, when ``history_start`` is configured."""
    from wpgate._commits import run_trailers

    if not config.history_start:
        return _history_not_set("history")
    with _naming_history_start(config, reads_history=True):
        return run_trailers(
            config, message_file=None, rev_range=None, history=True, pushed=False, pr=None
        )


CHECK_LINTERS: list[tuple[str, Linter]] = [("trailers", _check_trailers)]


# --------------------------------------------------------------------------- docs linters


def _docs_linter(function: str) -> Linter:
    """``wpgate._docs.<function>`` as a linter; the module is imported when it first runs."""

    def run(config: Config) -> LinterRun:
        from wpgate import _docs

        linter: Linter = getattr(_docs, function)
        return linter(config)

    run.__name__ = run.__qualname__ = function
    return run


def _docs_linters() -> list[tuple[str, Linter]]:
    """The provenance, work-package, evidence, changelog and Markdown linters (``wpgate._docs``)."""
    return [
        ("provenance", _docs_linter("run_provenance")),
        ("wp", _docs_linter("run_work_packages")),
        ("evidence", _docs_linter("run_evidence")),
        ("changelog", _docs_linter("run_changelog")),
        ("markdown", _docs_linter("run_markdown")),
    ]


CHECK_LINTERS.extend(_docs_linters())
_history_option = click.option(
    "--history/--no-history",
    default=None,
    help="Check first-use dates against the first commit citing each source "
    "(default: on when [tool.wpgate] history_start or [tool.wpgate.provenance] history is set).",
)


@cli.command()
@_history_option
@_ignore_option
@_format_option
@_root_option
def provenance(history: bool | None, fmt: str, root: str | None) -> int:
    """Lint docs/PROVENANCE.md: ids, licences, the first-use log."""
    from wpgate._docs import run_provenance

    config = _config(root)
    return _emit([run_provenance(config, history=history)], fmt, config)


@cli.command()
@_ignore_option
@_format_option
@_root_option
def wp(fmt: str, root: str | None) -> int:
    """Lint the work-package registry (docs/work_packages/wp-*.md)."""
    from wpgate._docs import run_work_packages

    config = _config(root)
    return _emit([run_work_packages(config)], fmt, config)


@cli.command()
@click.option("--git/--no-git", default=True, help="Verify commits, hashes and markers with git.")
@click.option("--collect/--no-collect", default=True, help="Verify `collected N` markers.")
@_ignore_option
@_format_option
@_root_option
def evidence(git: bool, collect: bool, fmt: str, root: str | None) -> int:
    """Lint [MEASURED] claims and the evidence files under docs/evidence/."""
    from wpgate._docs import run_evidence

    config = _config(root)
    return _emit([run_evidence(config, git=git, collect=collect)], fmt, config)


@cli.command()
@_ignore_option
@_format_option
@_root_option
def changelog(fmt: str, root: str | None) -> int:
    """Check that the backticked names of CHANGELOG.md's Unreleased section exist."""
    from wpgate._docs import run_changelog

    config = _config(root)
    return _emit([run_changelog(config)], fmt, config)


@cli.command()
@_ignore_option
@_format_option
@_root_option
def markdown(fmt: str, root: str | None) -> int:
    """Lint the site's Markdown pages for what Python-Markdown renders unlike CommonMark."""
    from wpgate._docs import run_markdown

    config = _config(root)
    return _emit([run_markdown(config)], fmt, config)


@cli.command()
@_ignore_option
@_format_option
@_root_option
def docs(fmt: str, root: str | None) -> int:
    """Run the docs linters (provenance, wp, evidence, changelog, markdown): the wpgate-docs
    hook."""
    from wpgate._documents import parse_once

    config = _config(root)
    with parse_once():
        return _emit([linter(config) for _, linter in _docs_linters()], fmt, config)


@cli.command("new-wp")
@click.argument("wp_id", metavar="ID")
@click.option("--title", required=True, help="One-line title.")
@click.option("--phase", type=click.IntRange(min=0), required=True, help="Phase number.")
@_root_option
def new_wp(wp_id: str, title: str, phase: int, root: str | None) -> int:
    """Scaffold docs/work_packages/wp-ID.md (status todo) that passes `wpgate wp`."""
    from wpgate._docs import new_work_package

    base = _root(root)
    try:
        paths = new_work_package(base, load_config(base), wp_id, title, phase)
    except ValueError as exc:
        raise InvocationError(str(exc)) from exc
    click.echo("\n".join(paths))
    return EXIT_CLEAN


@cli.command()
@click.option("--name", help="Site name for mkdocs.yml (default: the folder's name).")
@_root_option
def init(name: str | None, root: str | None) -> int:
    """Bootstrap wpgate here: config, governance documents, mkdocs.yml, pre-commit hooks."""
    from wpgate._init import init_repository

    try:
        result = init_repository(_root(root), name)
    except ValueError as exc:
        raise InvocationError(str(exc)) from exc
    for path in result.written:
        click.echo(f"wrote {path}")
    for path in result.kept:
        click.echo(f"kept  {path} (exists)")
    click.echo("next: wpgate new-wp 001 --title TITLE --phase 1; pre-commit install; wpgate check")
    return EXIT_CLEAN


@cli.command()
@_ignore_option
@_format_option
@_root_option
def check(fmt: str, root: str | None) -> int:
    """Run every linter the configuration enables."""
    from wpgate._documents import parse_once

    config = _config(root)
    with parse_once():  # the trailers' references and the docs linters share each document
        return _emit([linter(config) for _, linter in CHECK_LINTERS], fmt, config)


# --------------------------------------------------------------------------- entry point


def _stopped(exc: BaseException) -> int:
    """Ctrl-C: one line on stderr, no traceback, the shell's status for SIGINT.

    click turns a KeyboardInterrupt inside a command into Abort (the interrupt is its context);
    an Abort of another cause (a prompt's end of input) stays a usage error.
    """
    if isinstance(exc, KeyboardInterrupt) or isinstance(exc.__context__, KeyboardInterrupt):
        click.echo("wpgate: interrupted", err=True)
        return EXIT_INTERRUPTED
    click.echo("wpgate: aborted", err=True)
    return EXIT_USAGE


def _requested_format(args: Sequence[str]) -> str:
    """The ``--format`` the command line asks for (the last one, as click reads it), read from
    the arguments themselves: a usage error can come before click has parsed any option."""
    fmt = "text"
    for arg, following in zip(args, [*args[1:], ""], strict=True):
        if arg == "--":
            break
        if arg == "--format":
            fmt = following
        elif arg.startswith("--format="):
            fmt = arg.removeprefix("--format=")
    return fmt


def _failed(args: Sequence[str], message: str) -> int:
    """Exit status 2; with ``--format sarif``, a SARIF log of the failed run on stdout as well,
    so that code scanning reads why there are no results instead of a missing file."""
    if _requested_format(args) == "sarif":
        from wpgate._output import format_sarif_failure

        click.echo(format_sarif_failure(message, EXIT_USAGE), nl=False)
    return EXIT_USAGE


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit status (0 clean, 1 findings, 2 usage or git error, 130
    interrupted by Ctrl-C).

    The cyclic garbage collector is paused while the command runs and restored after: a
    command's records form no reference cycles and are freed by reference counting, while the
    collector would rescan the live ones (a history's parsed commits and findings) every few
    hundred allocations.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _main(argv)
    finally:
        if enabled:
            gc.enable()


def run() -> NoReturn:
    """The process entry point (the ``wpgate`` script, ``python -m wpgate``): exit with
    :func:`main`'s status.

    What the process still holds is frozen out of the collector's reach first
    (``gc.freeze``): the interpreter's last collection at exit would otherwise scan every
    live object for cycles, memory the exit gives back anyway.
    """
    status = main()
    gc.freeze()
    sys.exit(status)


def _main(argv: Sequence[str] | None) -> int:
    """:func:`main` without the collector's pause."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        result = cli.main(args=args, prog_name="wpgate", standalone_mode=False)
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        return _failed(args, exc.format_message())
    except (click.exceptions.Abort, KeyboardInterrupt) as exc:
        status = _stopped(exc)
        return _failed(args, "aborted") if status == EXIT_USAGE else status
    except (ConfigError, GitError, InvocationError) as exc:
        click.echo(f"wpgate: error: {exc}", err=True)
        return _failed(args, str(exc))
    return int(result) if isinstance(result, int) else EXIT_CLEAN


if __name__ == "__main__":  # pragma: no cover
    run()
