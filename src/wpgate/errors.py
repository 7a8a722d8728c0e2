"""Every error wpgate raises to its callers, in one module.

Each is a :class:`WpgateError`, so a tool that embeds wpgate can catch them all at once; each
keeps the built-in base it had before (``ValueError``, ``RuntimeError``), so existing ``except``
clauses still match. A message says what is wrong and how to fix it. The command line turns
:class:`ConfigError`, :class:`GitError` and :class:`InvocationError` into exit status 2.

Exceptions private to one module (raised and caught inside it, never seen by a caller) stay in
that module, named with a leading underscore.
"""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "EvidenceBlockError",
    "EvidenceError",
    "GitError",
    "InvocationError",
    "ReadRefusedError",
    "ReferenceBuildError",
    "WpgateError",
]


class WpgateError(Exception):
    """The base of every error wpgate raises to its callers."""


class InvocationError(WpgateError):
    """A wrong invocation detected after the command line was parsed (exit 2)."""


class ConfigError(WpgateError):
    """A wrong ``[tool.wpgate]`` setting; ``key`` is its dotted name, ``source`` the file."""

    def __init__(self, key: str, message: str, *, source: str = "pyproject.toml") -> None:
        where = source if key == source else f"{source}: {key}"
        super().__init__(f"{where}: {message}")
        self.key = key
        self.detail = message
        self.source = source


class GitError(WpgateError):
    """git could not answer; the message says what is wrong and how to fix it."""


class EvidenceError(WpgateError, ValueError):
    """A document that is not valid ``wpgate-evidence/1``; the message lists what to fix."""


class EvidenceBlockError(WpgateError, ValueError):
    """A ``wpgate-evidence`` block or the file it cites cannot be rendered; says how to fix it."""


class ReferenceBuildError(WpgateError, RuntimeError):
    """A reference target (``module:attribute``) cannot be imported; the message says why."""


class ReadRefusedError(WpgateError, OSError):
    """A repository file wpgate will not read (a link out of the repository, a FIFO, a device,
    a directory, a file over the size limit); the message says why and how to fix it."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "the file cannot be read"
