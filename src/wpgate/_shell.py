"""What every ``wpgate`` command shares, whichever way its command line was read: the
configuration, the report on stdout, the exit statuses, the ``trailers`` command's work and the
one table of its options.

Neither this module nor :mod:`wpgate.cli`, which reads a plain ``trailers`` command line
itself, imports click; the click group (``wpgate._commands``) is made from the same table and
calls the same functions.
"""

from __future__ import annotations

import codecs
import io
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from itertools import chain, pairwise
from pathlib import Path
from typing import IO, NamedTuple

from wpgate._config import Config, find_config, load_config
from wpgate._model import MAX_MESSAGE, Finding, with_severity
from wpgate._output import LinterRun, Summary, format_report
from wpgate._record import replace
from wpgate.errors import ConfigError, GitError, InvocationError
from wpgate.options import OutputOptions

__all__ = [
    "CHECK_LINTERS",
    "SHARED_OPTIONS",
    "TRAILERS_OPTIONS",
    "Option",
    "command_config",
    "docs_linters",
    "echo",
    "emit",
    "failed",
    "lint_trailers",
    "repository_root",
    "stopped",
]

EXIT_CLEAN, EXIT_FINDINGS, EXIT_USAGE = 0, 1, 2
#: Ctrl-C: the shell's status for a process ended by SIGINT (128 + signal 2).
EXIT_INTERRUPTED = 130

#: ``check`` runs each of these: ``(name, linter(config) -> LinterRun)``.
Linter = Callable[[Config], LinterRun]


# --------------------------------------------------------------------------- output


def _plain_stream(stream: IO[str] | None) -> bool:
    """Whether ``click.echo`` writes to ``stream`` as it is: a text file (not a Windows
    console) whose encoding is not ASCII, which click would wrap to write UTF-8 instead."""
    if os.name == "nt" or not isinstance(stream, io.TextIOWrapper) or stream.errors is None:
        return False
    try:
        return codecs.lookup(stream.encoding).name != "ascii"
    except LookupError:
        return False


def echo(text: str, *, err: bool = False) -> None:
    """Write ``text`` (its own newline included) to stdout, or stderr with ``err``, as
    ``click.echo(text, nl=False)`` does: ANSI sequences stripped off a terminal, the stream
    flushed. Text without ESC on a plain stream is written without importing click."""
    stream = sys.stderr if err else sys.stdout
    escaped = "\x1b" in text
    if not escaped and _plain_stream(stream):
        stream.write(text)
        stream.flush()
        return
    import click

    # Without ESC there is nothing to strip: click's scan of every character is skipped.
    click.echo(text, nl=False, err=err, color=None if escaped else True)


def emit(runs: Sequence[LinterRun], fmt: str, config: Config | None = None) -> int:
    """Print the report of ``runs``; the exit status for their findings (warnings never fail)."""
    findings = list(chain.from_iterable(run.findings for run in runs))
    if config is not None and config.warnings:
        findings = [with_severity(f, config.severity(f.rule_id)) for f in findings]
    if config is not None and config.respells:
        findings = [_spelled(f, config) for f in findings]
    help_uri = OutputOptions.from_config(config).help_uri
    echo(format_report(findings, [run.summary for run in runs], fmt, help_uri=help_uri))
    return EXIT_FINDINGS if any(f.severity == "error" for f in findings) else EXIT_CLEAN


def _spelled(finding: Finding, config: Config) -> Finding:
    """``finding`` naming tables as the adopter's file writes them (``[gates]`` in a
    ``wpgate.toml``); a message already cut to its length limit is left as it is."""
    if len(finding.message) > MAX_MESSAGE:
        return finding
    message = config.spelled(finding.message)
    return finding if message == finding.message else replace(finding, message=message)


# --------------------------------------------------------------------------- configuration


def repository_root(path: str | None) -> Path:
    """The repository root: ``--root``; else, as git and ruff find theirs, the nearest folder
    at or above the current one whose configuration configures wpgate, up to the top of its
    git work tree (the root where nothing below it does); else the current directory."""
    if path:
        return Path(path).resolve()
    here = Path.cwd()
    for folder in (here, *here.parents):
        if _configures_wpgate(folder) or (folder / ".git").exists():
            return folder
    return here


def _configures_wpgate(folder: Path) -> bool:
    """Whether one of ``folder``'s configuration files configures wpgate (one that cannot be
    read counts: loading it there says what is wrong with it)."""
    try:
        return bool(find_config(folder)[0])
    except ConfigError:
        return True


def shown_path(root: Path, path: str) -> str:
    """``path`` (relative to ``root``) as the shell reaches it from the current folder where
    that lies inside ``root`` (a root found above it) or above it (a sub-project's
    ``--root``); else as it is, relative to the root."""
    here = Path.cwd()
    if here != root and root not in here.parents and here not in root.parents:
        return path
    return os.path.relpath(root / path, here)


def command_config(
    root: str | None, *, verbose: bool = False, ignored: tuple[str, ...] = ()
) -> Config:
    """The configuration of ``--root`` with this run's ``--ignore`` rules switched off; with
    ``--verbose``, the file it came from is said on stderr (stdout stays the report)."""
    config = load_config(repository_root(root))
    if verbose:
        echo(f"wpgate: root: {config.root}\n", err=True)
        for line in config.describe_source():
            echo(f"wpgate: {line}\n", err=True)
    return config.ignoring(ignored) if ignored else config


# --------------------------------------------------------------------------- options

#: What an option takes: nothing (a flag), a text value, a rule (repeatable), a report format,
#: an existing directory.
FLAG, VALUE, RULES, FORMAT, DIRECTORY = "flag", "value", "rules", "format", "directory"


class Option(NamedTuple):
    """One option of a command: its flag, the parameter it fills, what it takes, its help."""

    flag: str
    dest: str
    takes: str
    metavar: str | None
    help: str


IGNORE_OPTION = Option(
    "--ignore",
    "ignore",
    RULES,
    "RULE",
    "Skip RULE (an id such as WPG102 or a name) for this run; repeat or comma-separate.",
)
FORMAT_OPTION = Option(
    "--format",
    "fmt",
    FORMAT,
    None,
    "Report format: text, json, GitHub workflow annotations, or SARIF 2.1.0 (code scanning).",
)
ROOT_OPTION = Option(
    "--root",
    "root",
    DIRECTORY,
    None,
    "Repository root (default: the nearest folder up from here with a wpgate configuration, "
    "else the top of the git work tree, else the current folder).",
)
#: The options of every linter's command, in the order their help lists them.
SHARED_OPTIONS = (IGNORE_OPTION, FORMAT_OPTION, ROOT_OPTION)
#: The ``trailers`` command's options (its one argument is ``MESSAGE_FILE``): the click
#: command is made from them, and :func:`plain_trailers` reads them.
TRAILERS_OPTIONS = (
    Option("--range", "rev_range", VALUE, "OLDER..NEWER", "Lint every commit of a range."),
    Option("--history", "history", FLAG, None, "Lint the governed history (history_start..HEAD)."),
    Option("--pushed", "pushed", FLAG, None, "Lint the range being pushed (pre-push hook)."),
    Option("--pr", "pr", VALUE, "FILE", "Lint a PR title + blank line + body (- for stdin)."),
    *SHARED_OPTIONS,
)
# --------------------------------------------------------------------------- trailers


def lint_trailers(
    *,
    message_file: str | None,
    rev_range: str | None = None,
    history: bool = False,
    pushed: bool = False,
    pr: str | None = None,
    fmt: str = "text",
    root: str | None = None,
    verbose: bool = False,
    ignored: tuple[str, ...] = (),
) -> int:
    """``wpgate trailers``: lint the message file, range, history, pushed range or PR text."""
    config = command_config(root, verbose=verbose, ignored=ignored)
    if pushed and not config.history_start and not (message_file or rev_range or history or pr):
        return emit([_history_not_set("--pushed")], fmt, config)
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
    return emit([run], fmt, config)


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


def _docs_linter(function: str) -> Linter:
    """``wpgate._docs.<function>`` as a linter; the module is imported when it first runs."""

    def run(config: Config) -> LinterRun:
        from wpgate import _docs

        linter: Linter = getattr(_docs, function)
        return linter(config)

    run.__name__ = run.__qualname__ = function
    return run


def docs_linters() -> list[tuple[str, Linter]]:
    """The provenance, work-package, evidence, changelog and Markdown linters (``wpgate._docs``)."""
    return [
        ("provenance", _docs_linter("run_provenance")),
        ("wp", _docs_linter("run_work_packages")),
        ("evidence", _docs_linter("run_evidence")),
        ("changelog", _docs_linter("run_changelog")),
        ("markdown", _docs_linter("run_markdown")),
    ]


CHECK_LINTERS.extend(docs_linters())


# --------------------------------------------------------------------------- exits


def stopped(exc: BaseException) -> int:
    """Ctrl-C: one line on stderr, no traceback, the shell's status for SIGINT.

    click turns a KeyboardInterrupt inside a command into Abort (the interrupt is its context);
    an Abort of another cause (a prompt's end of input) stays a usage error.
    """
    if isinstance(exc, KeyboardInterrupt) or isinstance(exc.__context__, KeyboardInterrupt):
        echo("wpgate: interrupted\n", err=True)
        return EXIT_INTERRUPTED
    echo("wpgate: aborted\n", err=True)
    return EXIT_USAGE


def _requested_format(args: Sequence[str]) -> str:
    """The ``--format`` the command line asks for (the last one, as click reads it), read from
    the arguments themselves: a usage error can come before click has parsed any option."""
    fmt = "text"
    for arg, following in pairwise([*args, ""]):
        if arg == "--":
            break
        if arg == "--format":
            fmt = following
        elif arg.startswith("--format="):
            fmt = arg.removeprefix("--format=")
    return fmt


def failed(args: Sequence[str], message: str) -> int:
    """Exit status 2; with ``--format sarif``, a SARIF log of the failed run on stdout as well,
    so that code scanning reads why there are no results instead of a missing file."""
    if _requested_format(args) == "sarif":
        from wpgate._output import format_sarif_failure

        echo(format_sarif_failure(message, EXIT_USAGE))
    return EXIT_USAGE
