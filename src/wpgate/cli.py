"""The ``wpgate`` command line: a thin shell over the linters.

Exit status: 0 clean, 1 findings, 2 usage, configuration or git error. Each command is a small
function returning its exit status; ``check`` runs every linter in :data:`CHECK_LINTERS`, so a
new linter is one function appended there. Linter modules are imported by the command that
runs them: the commit-msg hook (``wpgate trailers FILE``) never imports the docs linters.

The commands, their options and their help are a click group (:data:`cli`, made in
``wpgate._commands``). The hooks' and CI's command, a plain ``wpgate trailers ...`` whose every
argument is valid, is read here without importing click (:func:`plain_trailers`), from the one
table of its options (``wpgate._shell.TRAILERS_OPTIONS``) the click command is made from too;
anything else (help, a usage error, a group option, another command) goes to click.
"""

from __future__ import annotations

import errno
import gc
import os
import stat
import sys
from collections.abc import Sequence
from typing import IO, TYPE_CHECKING, Any, NoReturn

from wpgate._output import FORMATS
from wpgate._shell import (
    CHECK_LINTERS,
    DIRECTORY,
    EXIT_FINDINGS,
    FLAG,
    FORMAT,
    RULES,
    TRAILERS_OPTIONS,
    Option,
    echo,
    failed,
    lint_trailers,
    stopped,
)
from wpgate.errors import ConfigError, GitError, InvocationError

if TYPE_CHECKING:
    import click

__all__ = ["CHECK_LINTERS", "cli", "main", "plain_trailers", "run"]  # noqa: F822 - cli: __getattr__


def __getattr__(name: str) -> click.Group:
    """:data:`cli`, the click group, made when first asked for (click is not imported by a
    command line :func:`plain_trailers` reads)."""
    if name == "cli":
        from wpgate._commands import cli

        return cli
    raise AttributeError(f"module 'wpgate.cli' has no attribute {name!r}")


# --------------------------------------------------------------------------- plain trailers

_TRAILERS_BY_FLAG = {option.flag: option for option in TRAILERS_OPTIONS}
#: The variable that asks click for shell completion instead of a run.
_COMPLETION_VARIABLE = "_WPGATE_COMPLETE"


def _accepted(option: Option, value: str) -> bool:
    """Whether click takes ``value`` for ``option`` as it is (a format it lists, a directory
    that is there and readable, any text), so that it would not refuse the command line."""
    if option.takes == FORMAT:
        return value in FORMATS
    if option.takes != DIRECTORY:
        return True
    try:
        mode = os.stat(value).st_mode
    except (OSError, ValueError):
        return False
    return not stat.S_ISREG(mode) and os.access(value, os.R_OK)


def plain_trailers(args: Sequence[str]) -> dict[str, Any] | None:
    """The parameters of :func:`lint_trailers` for ``args``, a ``trailers`` command line click
    would run as it is; None for anything else (another command, a group option, help, an
    unknown option or one click would refuse, ``--``, a value that starts with ``-``), which
    click reads instead.

    Each option is read as click reads it: ``--opt value`` or ``--opt=value``, the last of a
    repeated option, every ``--ignore``; at most one ``MESSAGE_FILE``, anywhere.
    """
    if not args or args[0] != "trailers" or os.environ.get(_COMPLETION_VARIABLE):
        return None
    found: dict[str, Any] = {"message_file": None, "fmt": "text", "ignored": ()}
    rest = iter(args[1:])
    for arg in rest:
        if arg == "-" or not arg.startswith("-"):
            if found["message_file"] is not None:
                return None
            found["message_file"] = arg
            continue
        flag, equals, value = arg.partition("=")
        option = _TRAILERS_BY_FLAG.get(flag)
        if option is None:
            return None
        if option.takes == FLAG:
            if equals:
                return None
            found[option.dest] = True
            continue
        if not equals:
            value = next(rest, "--")
        if (value.startswith("-") and value != "-") or not _accepted(option, value):
            return None
        if option.takes == RULES:
            found["ignored"] += (value,)
        else:
            found[option.dest] = value
    return found


# --------------------------------------------------------------------------- entry point


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


class _ClosedPipe:
    """A stream whose ``flush`` ignores a closed pipe (EPIPE), as click leaves the standard
    streams after a command's output met one, so that the exit writes no second error."""

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError as exc:
            if exc.errno != errno.EPIPE:
                raise

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _plain_run(parameters: dict[str, Any]) -> int:
    """:func:`lint_trailers` as click runs a command: an interrupt ends the terminal's ``^C``
    line first, and output into a closed pipe exits 1 with the streams pacified."""
    try:
        return lint_trailers(**parameters)
    except KeyboardInterrupt:
        sys.stderr.write("\n")
        sys.stderr.flush()
        raise
    except OSError as exc:
        if exc.errno != errno.EPIPE:
            raise
        sys.stdout = _ClosedPipe(sys.stdout)
        sys.stderr = _ClosedPipe(sys.stderr)
        sys.exit(EXIT_FINDINGS)


def _main(argv: Sequence[str] | None) -> int:
    """:func:`main` without the collector's pause."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        parameters = plain_trailers(args)
        if parameters is not None:
            return _plain_run(parameters)
        from wpgate._commands import invoke

        return invoke(args)
    except KeyboardInterrupt as exc:
        return stopped(exc)
    except (ConfigError, GitError, InvocationError) as exc:
        echo(f"wpgate: error: {exc}\n", err=True)
        return failed(args, str(exc))


if __name__ == "__main__":  # pragma: no cover
    run()
