"""The commit-message linter's shell: reads messages (file, stdin, git range, PR text), parses
them and runs the WPG1xx rules with the repository's references loaded once.

The rules, the references and the gate resolver are imported by the function that runs them:
a range lint starts ``git log`` first, and git works while they load.
"""

from __future__ import annotations

import functools
import gc
import os
import stat
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from wpgate._config import Config, history_start_off_head, warn
from wpgate._git import (
    CommitFields,
    PushedRef,
    RevisionRange,
    blobs_at,
    commit_msg_context,
    git_trailers,
    history_range,
    in_index,
    is_commit,
    parse_pre_push,
    parse_range,
    pre_push_ranges,
    pushed_range,
    read_commit_fields,
    read_commits,
    reading_settings,
    require_full_history,
    resolve_commits,
    trailer_syntax,
)
from wpgate._output import LinterRun, Summary
from wpgate._record import replace
from wpgate.errors import InvocationError
from wpgate.options import GateOptions, TrailerOptions
from wpgate.trailers import TrailerSyntax, decode_message, parse_message

if TYPE_CHECKING:
    from wpgate.references import GateResolver, References
    from wpgate.rules.trailers import CommitMessage

__all__ = [
    "differences_from_git",
    "lint_message",
    "lint_range",
    "run_trailers",
]


def _run(
    messages: Iterable[CommitMessage | str],
    options: TrailerOptions,
    config: Config,
    kind: str,
    *,
    screened: bool = False,
) -> LinterRun:
    """Lint ``messages`` and summarise the run (``screened``: see ``lint_messages``)."""
    from wpgate.rules.trailers import lint_messages

    result = lint_messages(messages, options, config.enabled, screened=screened)
    summary = Summary("trailers", result.checked, kind, result.exempt)
    return LinterRun(result.findings, summary)


def lint_message(
    data: bytes,
    path: str,
    config: Config,
    *,
    comment_char: str | None = "#",
    pr_mode: bool = False,
    author: str | None = None,
    merging: bool = False,
    syntax: TrailerSyntax | None = None,
) -> LinterRun:
    """Lint one message: a commit-msg file (cleanup on) or, with ``pr_mode``, a PR text.

    ``syntax`` is git's ``trailer.*`` configuration (read from git when None).
    """
    from wpgate._citable import load_references
    from wpgate.references import GateResolver
    from wpgate.rules.trailers import CommitMessage, is_revert

    root = config.root
    decoded = decode_message(data)
    message = parse_message(
        decoded.text,
        comment_char=None if pr_mode else comment_char,
        cleanup=not pr_mode,
        encoding_error_line=decoded.error_line,
        nul_line=decoded.nul_line,
        syntax=trailer_syntax(root) if syntax is None else syntax,
    )
    resolve = GateResolver(root, options=GateOptions.from_config(config)).resolve
    parsed = CommitMessage(
        message=message,
        path=path,
        references=load_references(root, config),
        resolve_gate=resolve if pr_mode else _staged_gates(root, resolve),
        author=author,
        parents=2 if merging else 1,
        pr_mode=pr_mode,
    )
    options = TrailerOptions.from_config(config)
    if options.revert_exempt and is_revert(message) and not _reverts_a_known_commit(root, parsed):
        # As in a range: a made-up `This reverts commit ...` would otherwise skip every rule.
        options = replace(options, revert_exempt=False)
    return _run([parsed], options, config, "pull request" if pr_mode else "message")


def _staged_gates(root: Path, resolve: Callable[[str], str | None]) -> Callable[[str], str | None]:
    """``resolve`` for the commit being made: a gate's file must also be in git's index, or
    the commit would name a test it does not carry (the working tree's untracked file passes
    here and fails in every clone)."""
    from wpgate.references import gate_file

    def staged(node_id: str) -> str | None:
        why = resolve(node_id)
        rel = gate_file(node_id) if why is None else None
        if rel is None or in_index(root, rel) is not False:
            return why
        return (
            f"`{rel}` is not in git's index: `git add` it, so the commit carries the test it names"
        )

    return staged


def _reverts_a_known_commit(root: Path, parsed: CommitMessage) -> bool:
    """Whether the commit a revert's message names is one git knows (a made-up ``This reverts
    commit 000...`` would otherwise exempt any change)."""
    from wpgate.rules.trailers import reverted_commit

    named = reverted_commit(parsed.message)
    if named is None:
        return False
    if is_commit(root, named):
        return True
    # A shallow clone may lack a commit that exists: the revert cannot be told from a made-up
    # one here, and checking it as any commit would be a wrong answer, not a partial one.
    require_full_history(root, f"the revert {parsed.path} (of {named[:12]})")
    return False


class OwnTreeGates:
    """Resolves node ids in the tree of the commit that names them, read from git (one
    ``cat-file`` per file asked for; asked only for a gate that does not resolve in the working
    tree, see ``CommitMessage.resolve_own_gate``)."""

    def __init__(self, root: Path, options: GateOptions | None = None) -> None:
        self.root = root
        self._options = options
        self._resolvers: dict[str, GateResolver] = {}

    def resolve(self, sha: str, node_id: str) -> str | None:
        """Why ``node_id`` does not resolve in commit ``sha``'s tree (None when it does)."""
        resolver = self._resolvers.get(sha)
        if resolver is None:
            from wpgate.references import GateResolver

            read = functools.partial(self._read, sha)
            resolver = GateResolver(self.root, read=read, options=self._options)
            self._resolvers = {sha: resolver}  # commits come one at a time: keep the last
        return resolver.resolve(node_id)

    def _read(self, sha: str, rel: str) -> bytes:
        data = blobs_at(self.root, [(sha, rel)])[(sha, rel)]
        if data is None:
            raise FileNotFoundError(rel)
        return data


def _commit_messages(
    commits: Iterable[CommitFields],
    references: References,
    resolve: Callable[[str], str | None],
    own: OwnTreeGates,
    comment_char: str,
    options: TrailerOptions,
    syntax: TrailerSyntax,
) -> Iterator[CommitMessage | str]:
    """Each commit parsed as git stores it (no commit-msg cleanup), or why it is exempt.

    Merges and bot commits are exempt whatever they say (a third of a busy history's commits):
    their messages are not parsed, and the reason stands for the commit (see
    :func:`~wpgate.rules.trailers.lint_messages`); a revert (and a fixup, where
    ``fixup_exempt_in_history`` says so: a fixup that landed was not squashed) is found exempt
    here too, so every message yielded is one to check (``screened``).
    """
    from wpgate.rules.trailers import CommitMessage, message_exemption, metadata_exemption

    resolve_own = own.resolve
    # git's fields, decoded as wpgate._git.Commit decodes them, each only when it is read.
    for raw_sha, raw_parents, raw_author, raw_message in commits:
        parents = len(raw_parents.split())
        author = raw_author.decode("utf-8", "replace")
        reason = metadata_exemption(parents, author, options)
        if reason is not None:
            yield reason  # counted, never read
            continue
        try:
            text, error_line = raw_message.decode("utf-8"), None
        except UnicodeDecodeError:
            decoded = decode_message(raw_message)
            text, error_line = decoded.text, decoded.error_line
        message = parse_message(
            text, comment_char=comment_char, encoding_error_line=error_line, syntax=syntax
        )
        # Positional: one per commit, and a call with keywords costs a dictionary more.
        sha = raw_sha.decode("ascii").strip()
        parsed = CommitMessage(
            message, sha[:12], references, resolve, sha, resolve_own, author, parents
        )
        reason = message_exemption(parsed, options, history=True)
        if reason == "revert" and not _reverts_a_known_commit(own.root, parsed):
            reason = None  # a revert's message with no commit behind it: checked as any
        yield reason or parsed


@contextmanager
def _no_cycle_collection() -> Iterator[None]:
    """Pause the cyclic garbage collector for a batch that makes no reference cycles.

    Each commit's records are freed by reference counting as soon as it is linted; the cyclic
    collector would only rescan them every few hundred allocations, which costs a measurable
    share of a long range's time and makes it vary from run to run.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def lint_range(
    config: Config,
    revisions: RevisionRange,
    *,
    comment_char: str | None = "#",
    syntax: TrailerSyntax | None = None,
) -> LinterRun:
    """Lint every commit of ``revisions`` (one git process reads them all).

    ``syntax`` is git's ``trailer.*`` configuration (read from git when None); a None
    ``comment_char`` reads it from git too, with the syntax, in one call made while git log
    already runs.
    """
    options = TrailerOptions.from_config(config)
    gates = GateOptions.from_config(config)
    # git starts now and writes the history into its pipe while the rest is read and loaded.
    commits = read_commit_fields(config.root, revisions)
    from wpgate._citable import load_references
    from wpgate.references import GateResolver

    if comment_char is None:
        comment_char, syntax = reading_settings(config.root)
    syntax = trailer_syntax(config.root) if syntax is None else syntax
    references = load_references(config.root, config)
    resolve = GateResolver(config.root, options=gates).resolve
    own = OwnTreeGates(config.root, gates)
    messages = _commit_messages(commits, references, resolve, own, comment_char, options, syntax)
    with _no_cycle_collection():
        return _run(messages, options, config, "commit", screened=True)


def differences_from_git(
    root: Path,
    revisions: RevisionRange,
    *,
    comment_char: str = "#",
    syntax: TrailerSyntax | None = None,
) -> tuple[int, list[str]]:
    """Commits of ``revisions`` read, and the shas whose trailers wpgate reads differently.

    git's own reading (``%(trailers:only,unfold)``, :func:`wpgate._git.git_trailers`) is the
    judge; the one difference the spec requires (a ``Key://x`` URL line is not a trailer) is
    taken out of git's answer first. Both read ``root``'s ``trailer.*`` configuration.
    """
    syntax = trailer_syntax(root) if syntax is None else syntax
    oracle = git_trailers(root, revisions)
    differ: list[str] = []
    count = 0
    for commit in read_commits(root, revisions):
        count += 1
        text = decode_message(commit.message).text
        message = parse_message(text, comment_char=comment_char, syntax=syntax)
        ours = [(t.key, t.value) for t in message.trailers]
        theirs = [(k, v) for k, v in oracle.get(commit.sha, []) if not v.startswith("//")]
        if ours != theirs:
            differ.append(commit.sha)
    return count, differ


def _read_input(source: str) -> bytes:
    """The bytes of a file, or of stdin for ``-``.

    A pipe is read (``wpgate trailers <(git log -1 --format=%B)``); a device such as
    ``/dev/zero`` is refused before it is read, as it may never end.
    """
    if source == "-":
        return sys.stdin.buffer.read()
    try:
        mode = os.stat(source).st_mode
        if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) or stat.S_ISSOCK(mode):
            raise InvocationError(
                f"{source} is a device, not a message file; pass the file git gives the "
                "commit-msg hook, or - to read stdin"
            )
        return Path(source).read_bytes()
    except OSError as exc:
        raise InvocationError(f"cannot read {source} ({exc.strerror}); check the path") from exc


def _lint_pushed_refs(
    config: Config, refs: tuple[PushedRef, ...], char: str, syntax: TrailerSyntax
) -> LinterRun:
    """Lint what each ref of git's pre-push input adds to its remote, as one run."""
    remote = [ref.remote_sha for ref in refs if ref.remote_sha.strip("0")]
    unknown = frozenset(
        sha for sha, full in resolve_commits(config.root, remote).items() if not full
    )
    runs = [
        lint_range(config, revisions, comment_char=char, syntax=syntax)
        for revisions in pre_push_ranges(refs, config.history_start, unknown)
    ]
    exempt: dict[str, int] = {}
    for run in runs:
        for reason, count in run.summary.exempt.items():
            exempt[reason] = exempt.get(reason, 0) + count
    checked = sum(run.summary.checked for run in runs)
    findings = tuple(finding for run in runs for finding in run.findings)
    return LinterRun(findings, Summary("trailers", checked, "commit", exempt))


def run_trailers(
    config: Config,
    *,
    message_file: str | None,
    rev_range: str | None,
    history: bool,
    pushed: bool,
    pr: str | None,
    pre_push: str | None = None,
) -> LinterRun:
    """Lint the one input the options select (the use case behind ``wpgate trailers``).

    ``pre_push`` is git's pre-push input (with ``pushed``), when the hook was given it and
    pre-commit's variables are absent.
    """
    chosen = [
        name
        for name, on in (
            ("MESSAGE_FILE", message_file is not None),
            ("--range", rev_range is not None),
            ("--history", history),
            ("--pushed", pushed),
            ("--pr", pr is not None),
        )
        if on
    ]
    if len(chosen) != 1:
        given = f" (got {', '.join(chosen)})" if chosen else ""
        raise InvocationError(
            "pass exactly one input: a MESSAGE_FILE (or - for stdin), --range OLDER..NEWER, "
            f"--history, --pushed or --pr FILE{given}"
        )
    root = config.root
    if pr is not None:
        label = "<pr>" if pr == "-" else pr
        return lint_message(_read_input(pr), label, config, pr_mode=True)
    if message_file is not None:
        data = _read_input(message_file)
        char, author, merging = commit_msg_context(root)
        label = "<stdin>" if message_file == "-" else message_file
        return lint_message(data, label, config, comment_char=char, author=author, merging=merging)
    revisions: RevisionRange
    if rev_range is not None:
        revisions = parse_range(rev_range)
    elif pushed:
        refs = parse_pre_push(pre_push or "")
        if refs:
            return _lint_pushed_refs(config, refs, *reading_settings(root))
        revisions = pushed_range(history_start=config.history_start)
    else:
        if not config.history_start:
            raise InvocationError(
                "--history needs `history_start` (the first governed commit) in the "
                "configuration: wpgate.toml, or [tool.wpgate] of pyproject.toml"
            )
        revisions = history_range(config.history_start)
        off_head = history_start_off_head(config)
        if off_head:
            warn(off_head)
    return lint_range(config, revisions, comment_char=None)
