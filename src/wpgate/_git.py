"""All of wpgate's git access for commit linting: ranges, commits and settings.

A revision range is read by ONE ``git log`` process however long it is: each commit is a
NUL-terminated record (``-z``) whose fields (sha, parents, author, raw message) are separated by
the unit separator. Messages stay bytes until the parser decodes them, so invalid UTF-8 becomes
a finding. A range that cannot be read (not a repository, an unknown revision, a shallow clone
that does not hold the range, an empty range) is a :class:`GitError` whose message says how to
fix it.
"""

from __future__ import annotations

import io
import os
import re
import subprocess
from collections.abc import Generator, Iterable, Iterator, Sequence
from pathlib import Path

from wpgate._record import frozen
from wpgate.errors import GitError
from wpgate.trailers import DEFAULT_SYNTAX, TrailerSyntax

__all__ = [
    "Commit",
    "CommitFields",
    "GitError",
    "PushedRef",
    "RevisionRange",
    "blob_hashes_at",
    "branch_ref",
    "comment_char",
    "first_citing_commits",
    "git_trailers",
    "is_work_tree",
    "parse_pre_push",
    "parse_range",
    "paths_identical",
    "pre_push_ranges",
    "pushed_range",
    "read_commit_fields",
    "read_commits",
    "reading_settings",
    "require_full_history",
    "resolve_commits",
    "trailer_syntax",
    "unreachable_commits",
    "validate_revision",
]

_FIELD = "\x1f"
# %B is the raw body; `%an <%ae>` is the author as `Name <email>` (what Signed-off-by holds).
_FORMAT = f"--format=%H{_FIELD}%P{_FIELD}%an <%ae>{_FIELD}%B"
_NULL_SHA = "0" * 40
# The one ref pattern a range may exclude (pre-push without a remote ref: commits on no remote).
_REMOTES = "--remotes"
# A full object name: SHA-1 or SHA-256.
_SHA = re.compile(r"^(?:[0-9a-f]{40}|[0-9a-f]{64})$")


@frozen
class Commit:
    """One commit of a range: sha, parent shas, ``Name <email>`` author and raw message."""

    sha: str
    parents: tuple[str, ...]
    author: str
    message: bytes

    def __init__(self, sha: str, parents: tuple[str, ...], author: str, message: bytes) -> None:
        # One per commit of a range: one dictionary update instead of the frozen __init__'s
        # object.__setattr__ per field (see wpgate._model.Finding). Still frozen.
        self.__dict__.update(sha=sha, parents=parents, author=author, message=message)


@frozen
class RevisionRange:
    """Commits reachable from ``include`` but not from any of ``exclude`` (git's ``A..B``)."""

    include: str
    exclude: tuple[str, ...] = ()
    label: str = ""
    allow_empty: bool = False

    def describe(self) -> str:
        """The range as the user wrote it."""
        return self.label or " ".join([self.include, *(f"^{e}" for e in self.exclude)])


def _run(
    root: Path, args: Sequence[str], data: bytes | None = None
) -> subprocess.CompletedProcess[bytes]:
    """Run git in ``root``; a missing git binary is a :class:`GitError`."""
    try:
        return subprocess.run(
            ["git", "-C", str(root), *args], input=data, capture_output=True, check=False
        )
    except OSError as exc:
        raise GitError(f"cannot run git ({exc.strerror}); install git and put it on PATH") from exc


def listed_files(root: Path) -> frozenset[str] | None:
    """The files of the work tree at ``root`` that git would take (tracked, and untracked but
    not ignored: ``git ls-files --cached --others --exclude-standard``), relative to ``root``;
    None where ``root`` is not in a work tree or git cannot run."""
    try:
        result = _run(root, ["ls-files", "-z", "--cached", "--others", "--exclude-standard"])
    except GitError:
        return None
    if result.returncode != 0:
        return None
    return frozenset(os.fsdecode(p) for p in result.stdout.split(b"\0") if p)


def _shown(name: str) -> str:
    """A revision name as messages quote it: at most 60 characters (names come from users)."""
    return name if len(name) <= 60 else f"{name[:60]}..."


def validate_revision(name: str, what: str = "revision") -> str:
    """``name`` if it can only be read as a revision; a :class:`GitError` otherwise.

    A name that starts with ``-`` would reach git as an option (``--output=FILE`` writes a file,
    ``--all`` widens the range), and whitespace or control characters would split a request
    line of ``cat-file --batch``; neither is ever part of a ref or commit name.
    """
    shown = _shown(name)
    if not name:
        raise GitError(f"the {what} is empty; name a commit, branch or tag")
    if name.startswith("-"):
        raise GitError(
            f"{what} `{shown}` starts with `-`, so git would read it as an option; name a "
            "commit, branch or tag (e.g. `origin/main`)"
        )
    if any(ch.isspace() or ord(ch) < 32 or ord(ch) == 127 for ch in name):
        raise GitError(
            f"{what} {shown!r} contains whitespace or a control character; no commit, branch "
            "or tag name does, so fix the name"
        )
    return name


def parse_range(spec: str) -> RevisionRange:
    """``A..B`` (B defaults to HEAD) or a single revision (its whole history)."""
    text = spec.strip()
    if not text:
        raise GitError("the revision range is empty; pass `--range OLDER..NEWER`")
    if "..." in text:
        raise GitError(
            f"`{text}` is a symmetric difference; pass `OLDER..NEWER` (two dots) instead"
        )
    if ".." in text:
        older, newer = text.split("..", 1)
        if not older:
            raise GitError(f"`{text}` has no start; pass `OLDER..NEWER`, e.g. `origin/main..HEAD`")
        validate_revision(older, "range start")
        validate_revision(newer or "HEAD", "range end")
        return RevisionRange(newer or "HEAD", (older,), label=text)
    return RevisionRange(validate_revision(text), (), label=text)


def pushed_range(environ: dict[str, str] | None = None, history_start: str = "") -> RevisionRange:
    """The range a pre-push hook checks: pre-commit's ``PRE_COMMIT_FROM_REF..TO_REF``.

    Without those variables (pre-commit leaves them unset when a new branch shares no history
    with the remote) every commit not on any remote is checked. Commits before the first
    governed commit (``history_start``) are never checked.
    """
    env = os.environ if environ is None else environ
    from_ref = env.get("PRE_COMMIT_FROM_REF", "")
    to_ref = env.get("PRE_COMMIT_TO_REF", "")
    floor = (f"{validate_revision(history_start, 'history_start')}^@",) if history_start else ()
    if to_ref and to_ref != _NULL_SHA:
        validate_revision(to_ref, "PRE_COMMIT_TO_REF")
        if from_ref and from_ref != _NULL_SHA:
            validate_revision(from_ref, "PRE_COMMIT_FROM_REF")
        exclude = (from_ref,) if from_ref and from_ref != _NULL_SHA else ("--remotes",)
        label = f"{from_ref or '--remotes'}..{to_ref}"
        return RevisionRange(to_ref, exclude + floor, label=label, allow_empty=True)
    return RevisionRange("HEAD", ("--remotes", *floor), "HEAD ^--remotes", allow_empty=True)


@frozen
class PushedRef:
    """One line of git's pre-push input (githooks(5)): a ref the push updates."""

    local_ref: str
    local_sha: str
    remote_ref: str
    remote_sha: str


def parse_pre_push(text: str) -> tuple[PushedRef, ...]:
    """git's pre-push stdin, ``<local ref> SP <local sha> SP <remote ref> SP <remote sha>`` per
    line; a line of another shape is a :class:`GitError`."""
    refs: list[PushedRef] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split()
        if len(parts) != 4 or not all(_SHA.match(sha) for sha in (parts[1], parts[3])):
            raise GitError(
                f"pre-push input line {number} is not `<local ref> <local sha> <remote ref> "
                f"<remote sha>` ({_shown(line)}); run `wpgate trailers --pushed` from git's "
                "pre-push hook, or lint a range with --range"
            )
        refs.append(PushedRef(*parts))
    return tuple(refs)


def pre_push_ranges(
    refs: Sequence[PushedRef], history_start: str = "", unknown: frozenset[str] = frozenset()
) -> list[RevisionRange]:
    """The range each pushed ref adds to its remote: ``remote sha..local sha``.

    A deleted ref (local sha all zeros) adds nothing. A new branch (remote sha all zeros), or a
    remote sha this clone does not have (``unknown``: someone else's commits, a force push),
    adds every commit not on any remote-tracking ref. Commits before ``history_start`` are
    never checked.
    """
    floor = (f"{validate_revision(history_start, 'history_start')}^@",) if history_start else ()
    ranges: list[RevisionRange] = []
    for ref in refs:
        if not ref.local_sha.strip("0"):  # all zeros (SHA-1 or SHA-256): a deletion
            continue
        if not ref.remote_sha.strip("0") or ref.remote_sha in unknown:
            label = f"{ref.local_ref} ({ref.local_sha[:12]}) ^--remotes"
            ranges.append(RevisionRange(ref.local_sha, (_REMOTES, *floor), label, True))
        else:
            label = f"{ref.remote_sha[:12]}..{ref.local_sha[:12]} ({ref.local_ref})"
            ranges.append(RevisionRange(ref.local_sha, (ref.remote_sha, *floor), label, True))
    return ranges


def history_range(history_start: str) -> RevisionRange:
    """The governed history: ``history_start`` and every later commit up to HEAD."""
    # `^X^@` excludes X's parents, so X itself is included, and works for a root commit.
    validate_revision(history_start, "history_start")
    return RevisionRange("HEAD", (f"{history_start}^@",), label=f"{history_start}^..HEAD")


def comment_char(root: Path) -> str:
    """``core.commentChar`` (``#`` when unset or ``auto``)."""
    return reading_settings(root)[0]


def trailer_syntax(root: Path) -> TrailerSyntax:
    """git's ``trailer.separators`` and ``trailer.<name>.key`` settings for ``root``."""
    return reading_settings(root)[1]


def reading_settings(root: Path) -> tuple[str, TrailerSyntax]:
    """``core.commentChar`` and the ``trailer.*`` settings, read by one ``git config`` process.

    Defaults (``#``, git's reading without configuration) where git cannot run or ``root`` has
    no repository; only the user's and system configuration apply then, as for git itself.
    """
    done = _ask(root, ["config", "-z", "--get-regexp", r"^(core\.commentchar|trailer\..*)$"])
    if done is None or done.returncode not in (0, 1):
        return "#", DEFAULT_SYNTAX
    return parse_reading_settings(done.stdout)


def parse_reading_settings(output: bytes) -> tuple[str, TrailerSyntax]:
    """:func:`reading_settings` from ``git config -z --get-regexp`` output (``name\\nvalue\\0``).

    git lower-cases section and variable names, never the ``<name>`` of ``trailer.<name>.key``;
    a later value of a setting overrides an earlier one, and the trailers keep the order in
    which their names first appear.
    """
    char, separators = "#", ":"
    items: dict[str, str | None] = {}
    for entry in output.decode("utf-8", "replace").split("\0"):
        name, _, value = entry.partition("\n")
        if name == "core.commentchar":
            char = value[:1] if value and value != "auto" else "#"
        elif name == "trailer.separators":
            separators = value
        elif name.startswith("trailer.") and name.count(".") >= 2:
            alias, _, variable = name[len("trailer.") :].rpartition(".")
            key = items.get(alias)
            items[alias] = value if variable == "key" else key
    return char, TrailerSyntax(separators, tuple(items.items()))


def _repository_state(root: Path) -> tuple[bool, Path]:
    """Whether the clone is shallow, and the path of its ``shallow`` file."""
    done = _run(root, ["rev-parse", "--is-shallow-repository", "--git-path", "shallow"])
    if done.returncode != 0:
        raise GitError(
            f"{root} is not inside a git repository, and reading commits needs one: run "
            "wpgate in a clone (outside one, `wpgate trailers FILE` lints a message file, and "
            "`wpgate check` lints the documents alone once history_start is unset)"
        )
    lines = done.stdout.decode().splitlines()
    shallow_file = Path(lines[1]) if len(lines) > 1 else Path(".git/shallow")
    return lines[
        0
    ].strip() == "true", shallow_file if shallow_file.is_absolute() else root / shallow_file


def require_full_history(root: Path, check: str) -> None:
    """A :class:`GitError` when ``root`` is a shallow clone: ``check`` needs every commit."""
    if is_work_tree(root) and _repository_state(root)[0]:
        raise GitError(
            f"{check} needs the whole history, but this clone is shallow, so its answer would "
            "be partial; fetch the history first (`git fetch --unshallow`, or `fetch-depth: 0` "
            "in actions/checkout)"
        )


def _verify(root: Path, revisions: Sequence[str], shallow: bool) -> None:
    """Every named endpoint is a commit (one ``cat-file`` process for all of them)."""
    names = [r.removesuffix("^@") for r in revisions if r != _REMOTES]
    if not names:
        return
    # Each name asked twice: as a commit, and as whatever object it names (for the message).
    request = "".join(f"{name}^{{commit}}\n{name}\n" for name in names).encode()
    done = _run(root, ["cat-file", "--batch-check=%(objectname) %(objecttype)"], request)
    answers = done.stdout.decode("utf-8", "replace").splitlines()
    answers += [""] * (2 * len(names) - len(answers))
    for name, answer, named in zip(names, answers[::2], answers[1::2], strict=False):
        if _found(answer):
            continue
        kind = named.rpartition(" ")[2] if _found(named) else ""
        if kind in ("tree", "blob", "tag"):
            raise GitError(
                f"`{_shown(name)}` names a {kind}, not a commit; name a commit (a branch, a tag "
                "of a commit, a commit's hash)"
            )
        if shallow:
            raise GitError(
                f"revision `{_shown(name)}` is not in this shallow clone; fetch the history first "
                "(`git fetch --unshallow`, or `fetch-depth: 0` in actions/checkout)"
            )
        if name.startswith("HEAD") and not _has_commits(root):
            raise GitError(
                f"`{_shown(name)}` names no commit: this repository has no commits yet; commit "
                "first (the commit-msg hook checks each message as it is made)"
            )
        raise GitError(
            f"unknown revision `{_shown(name)}`; check the name (`git log --oneline`), or fetch it "
            "(`git fetch origin`)"
        )


def _found(answer: str) -> bool:
    """Whether a ``cat-file --batch-check`` answer names an object (not missing, not
    ambiguous)."""
    return bool(answer.strip()) and not answer.endswith("missing") and "ambiguous" not in answer


def _has_commits(root: Path) -> bool:
    """Whether HEAD names a commit (an unborn branch's does not), asked on an error path only."""
    done = _ask(root, ["rev-parse", "--verify", "--quiet", "HEAD^{commit}"])
    return done is None or done.returncode == 0


def _revision_args(revisions: RevisionRange) -> list[str]:
    """git log's revision arguments for ``revisions``, every name validated first.

    ``--remotes`` (the one ref pattern) is negated by the ``--not`` pair around it; every name
    comes after ``--end-of-options``, so none can be read as an option.
    """
    for name in (revisions.include, *revisions.exclude):
        if name != _REMOTES:
            validate_revision(name.removesuffix("^@"))
    args = ["--not", _REMOTES, "--not"] if _REMOTES in revisions.exclude else []
    args += ["--end-of-options", revisions.include]
    return args + [f"^{e}" for e in revisions.exclude if e != _REMOTES]


def read_commits(root: Path, revisions: RevisionRange) -> Iterator[Commit]:
    """The commits of ``revisions``, newest first, read by one ``git log`` process.

    git starts at this call, before the first commit is asked for, so that it works while the
    caller loads what it checks the commits against; commits are yielded while git is still
    writing, so that git's work on one core overlaps the caller's parsing on another. Errors
    are raised when they are known: a name git would misread at this call; a shallow-clone
    boundary, an empty range or git failing at the first commit, the boundary commit or the
    end. Read the iterator to its end or close it: that ends git.
    """
    return _commits(_start_log(root, revisions))


def _commits(records: Generator[CommitFields, None, None]) -> Iterator[Commit]:
    """Each of ``records`` as a :class:`Commit`; closing this closes ``records`` (ends git)."""
    try:
        for fields in records:
            yield _commit(fields)
    finally:
        records.close()


#: One commit as ``git log -z`` wrote it: sha, parents (space-separated), ``Name <email>``
#: author and raw message, each the bytes git wrote.
CommitFields = list[bytes]


def read_commit_fields(root: Path, revisions: RevisionRange) -> Iterator[CommitFields]:
    """What :func:`read_commits` reads, each commit as its four fields of bytes
    (:data:`CommitFields`), decoded by the caller as far as it needs them.

    The range lint's reader: a merge needs only its parents counted, and no :class:`Commit`
    is made for a commit that is linted once and dropped (one per commit of a history).
    Started, checked and ended as :func:`read_commits` is.
    """
    return _start_log(root, revisions)


def _start_log(root: Path, revisions: RevisionRange) -> Generator[CommitFields, None, None]:
    """``git log`` of ``revisions`` started now, and the generator that reads it."""
    args = ["log", "-z", _FORMAT, *_revision_args(revisions)]
    return _log_records(_open(root, [*args, "--"]), root, revisions)


def _log_records(
    process: subprocess.Popen[bytes], root: Path, revisions: RevisionRange
) -> Generator[CommitFields, None, None]:
    """The commits ``git log`` (``process``) writes, checked against the range as they come."""
    count = 0
    # git log works while the range is checked (two short git processes): when the check
    # fails, it is killed below and the check's error is raised.
    with process:
        stdout = process.stdout
        if not isinstance(stdout, io.BufferedIOBase):  # pragma: no cover - Popen gave a pipe
            process.kill()
            raise GitError("git log gave no output stream")
        _widen(stdout)
        try:
            shallow, shallow_file = _repository_state(root)
            _verify(root, [revisions.include, *revisions.exclude], shallow)
            boundary = _shallow_boundary(shallow_file) if shallow else frozenset()
            for batch in _record_batches(stdout):
                for record in batch:
                    fields = record.split(_FIELD_BYTE, 3)
                    if boundary and (sha := fields[0].decode("ascii").strip()) in boundary:
                        raise GitError(
                            f"range {revisions.describe()} reaches the shallow-clone boundary "
                            f"at {sha[:12]}, so older commits are missing; fetch the "
                            "history (`git fetch --unshallow`, or `fetch-depth: 0` in "
                            "actions/checkout)"
                        )
                    yield fields
                count += len(batch)
        except BaseException:  # an error, or a caller that stopped early: git need not finish
            process.kill()
            raise
        stderr = process.stderr.read() if process.stderr is not None else b""
        if process.wait() != 0:
            detail = stderr.decode("utf-8", "replace").strip().splitlines()
            raise GitError(
                f"git log {revisions.describe()} failed "
                f"({detail[-1] if detail else 'no detail'}); check the range"
            )
    if not count and not revisions.allow_empty:
        raise GitError(
            f"range {revisions.describe()} contains no commits; write it OLDER..NEWER "
            "(e.g. `origin/main..HEAD`) and check that NEWER has commits OLDER lacks"
        )


def _open(root: Path, args: Sequence[str]) -> subprocess.Popen[bytes]:
    """Start git in ``root`` with piped output; a missing git binary is a :class:`GitError`.

    ``GIT_FLUSH=0`` (git(1)): git's output is fully buffered. Into a pipe git log otherwise
    flushes after every commit, so the reader woke once per commit (runc: 8,142 reads of a few
    hundred bytes) instead of once per buffer.
    """
    try:
        return subprocess.Popen(
            ["git", "-C", str(root), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**os.environ, "GIT_FLUSH": "0"},
        )
    except OSError as exc:
        raise GitError(f"cannot run git ({exc.strerror}); install git and put it on PATH") from exc


#: The pipe capacity asked for git log's output (Linux's default is 64 KiB, and the most an
#: unprivileged process may ask for by default is 1 MiB): git writes a history's messages
#: without waiting for the reader, which each read then takes in one piece.
_PIPE_BYTES = 1 << 20


def _widen(stream: io.BufferedIOBase) -> None:
    """Ask for a :data:`_PIPE_BYTES` pipe under ``stream`` where the system allows it."""
    try:
        import fcntl  # POSIX; subprocess has imported it already

        fcntl.fcntl(stream.fileno(), fcntl.F_SETPIPE_SZ, _PIPE_BYTES)
    except (ImportError, AttributeError, OSError, ValueError):  # not Linux, or refused: 64 KiB
        pass


def _records(stream: io.BufferedIOBase, chunk: int = _PIPE_BYTES) -> Iterator[bytes]:
    """NUL-terminated records of ``stream`` as they arrive (``git log -z``), one by one."""
    for batch in _record_batches(stream, chunk):
        yield from batch


def _record_batches(stream: io.BufferedIOBase, chunk: int = _PIPE_BYTES) -> Iterator[list[bytes]]:
    """The NUL-terminated records of ``stream``, as the list of those each read completes.

    Each read takes what the pipe holds, up to ``chunk`` bytes: git keeps writing into the
    widened pipe (:func:`_widen`) while the caller parses, so git's work and the parsing still
    run on two cores at once. (A reader thread that drained the pipe into a queue cost more
    CPU in handing chunks and the interpreter lock over than it saved.) A list per read, not a
    generator per record: the caller walks a read's records in one loop.
    """
    # The bytes after the last NUL seen, as the chunks that hold them: joined once, when the
    # record's NUL arrives, so a record of any size is copied a bounded number of times (joining
    # the pending bytes to every chunk made one huge message quadratic).
    pending: list[bytes] = []
    while data := stream.read1(chunk):
        if b"\0" not in data:
            pending.append(data)
            continue
        parts = data.split(b"\0")
        if pending:
            pending.append(parts[0])
            parts[0] = b"".join(pending)
        tail = parts.pop()
        pending = [tail] if tail else []
        # A record of whitespace only (or nothing) is no commit; isspace() stops at the first
        # other byte instead of copying the record as strip() would.
        yield [part for part in parts if part and not part.isspace()]
    last = b"".join(pending)
    if last and not last.isspace():
        yield [last]


def _shallow_boundary(path: Path) -> frozenset[str]:
    """The commits a shallow clone was cut at (``.git/shallow``)."""
    try:
        return frozenset(path.read_text(encoding="ascii").split())
    except OSError:
        return frozenset()


_FIELD_BYTE = _FIELD.encode()


def _commit(fields: CommitFields) -> Commit:
    """One ``git log -z`` record's fields (:data:`CommitFields`) as a :class:`Commit`."""
    sha, parents, author, message = fields
    # Positional: one per commit of a range.
    return Commit(
        sha.decode("ascii").strip(),
        tuple(parents.decode("ascii").split()),
        author.decode("utf-8", "replace"),
        message,
    )


# --------------------------------------------------------------------------- docs linters
# Read-only questions the provenance and evidence linters ask. They answer "unknown" (None, an
# empty result) rather than raise: a docs check without git degrades to the checks it can do.


def _ask(
    root: Path, args: Sequence[str], data: bytes | None = None
) -> subprocess.CompletedProcess[bytes] | None:
    """Run git; None when git itself cannot run."""
    try:
        return _run(root, args, data)
    except GitError:
        return None


def is_commit(root: Path, name: str) -> bool:
    """Whether git knows ``name`` as a commit of this repository (False where git cannot run)."""
    done = _ask(root, ["cat-file", "-e", f"{name}^{{commit}}"])
    return done is not None and done.returncode == 0


def in_index(root: Path, rel: str) -> bool | None:
    """Whether the file ``rel`` is in git's index, which the commit being made takes (the
    index of ``git commit -a`` too: git points its hooks at it), or None where git cannot tell
    (no repository, no git)."""
    done = _ask(root, ["ls-files", "--error-unmatch", "--", f":(literal){rel}"])
    if done is None or done.returncode not in (0, 1):
        return None
    return done.returncode == 0


def commit_msg_context(root: Path) -> tuple[str, str | None, bool]:
    """Comment character, author ident and whether a merge is in progress, for commit-msg."""
    ident = _ask(root, ["var", "GIT_AUTHOR_IDENT"])
    text = ident.stdout.decode("utf-8", "replace").strip() if ident and not ident.returncode else ""
    # "Name <email> 1700000000 +0000": the author is everything before the timestamp.
    author = text.rsplit(" ", 2)[0] if text.count(" ") >= 2 else None
    merge = _ask(root, ["rev-parse", "--git-path", "MERGE_HEAD"])
    merge_head = (
        merge.stdout.decode("utf-8", "replace").strip() if merge and not merge.returncode else ""
    )
    merging = bool(merge_head) and (root / merge_head).exists()
    return comment_char(root), author, merging


def head_state(root: Path, paths: Sequence[str] = ()) -> tuple[str | None, bool | None]:
    """HEAD's sha and whether the tree differs from it.

    Without ``paths``: whether any tracked file differs (untracked files do not count). With
    ``paths``: whether any of them differs from HEAD or is not committed at all (untracked).
    ``(None, None)`` when git is missing or ``root`` is no repository; the dirtiness is None when
    ``git status`` fails. ``safe.directory`` lets a copied or mounted checkout owned by another
    user still be read (git refuses it otherwise, and evidence would lose its commit).
    """
    safe = ["-c", f"safe.directory={root}"]
    head = _ask(root, [*safe, "rev-parse", "--verify", "-q", "HEAD"])
    if head is None or head.returncode != 0:
        return None, None
    scope = ["--", *paths] if paths else ["--untracked-files=no"]
    status = _ask(root, [*safe, "status", "--porcelain", *scope])
    dirty = None if status is None or status.returncode != 0 else bool(status.stdout.strip())
    return head.stdout.decode().strip(), dirty


def is_work_tree(root: Path) -> bool:
    """Whether ``root`` is inside a git work tree."""
    done = _ask(root, ["rev-parse", "--is-inside-work-tree"])
    return done is not None and done.returncode == 0 and done.stdout.strip() == b"true"


def work_tree_prefix(root: Path) -> str | None:
    """Where ``root`` lies below the top of its git work tree (``services/api/``; ``""`` at
    the top), or None outside a work tree. One git process."""
    done = _ask(root, ["rev-parse", "--show-prefix"])
    if done is None or done.returncode != 0:
        return None
    return done.stdout.decode("utf-8", "surrogateescape").strip("\n")


def is_ancestor(root: Path, older: str, newer: str = "HEAD") -> bool | None:
    """Whether commit ``older`` is an ancestor of ``newer`` (or the same commit); None when git
    cannot tell (no repository, an unknown name: said elsewhere). One git process."""
    done = _ask(
        root,
        ["merge-base", "--is-ancestor", validate_revision(older), validate_revision(newer)],
    )
    if done is None or done.returncode not in (0, 1):
        return None
    return done.returncode == 0


def branch_ref(root: Path, name: str) -> str | None:
    """The branch ``name`` is (``refs/heads/main``, ``refs/remotes/origin/main``), or None when
    it names no branch: a tag, a commit, nothing git knows, or no repository (one git process).
    """
    done = _ask(root, ["rev-parse", "--symbolic-full-name", validate_revision(name)])
    if done is None or done.returncode != 0:
        return None
    ref = done.stdout.decode("utf-8", "replace").strip()
    return ref if ref.startswith(("refs/heads/", "refs/remotes/")) else None


def resolve_commits(root: Path, revisions: Iterable[str]) -> dict[str, str | None]:
    """Each revision's full commit sha, or None when git does not know it (one git process)."""
    revs = sorted(set(revisions))
    out: dict[str, str | None] = dict.fromkeys(revs)
    if not revs:
        return out
    request = "".join(f"{rev}^{{commit}}\n" for rev in revs).encode()
    done = _ask(root, ["cat-file", "--batch-check=%(objectname) %(objecttype)"], request)
    if done is None or done.returncode != 0:
        return out
    for rev, line in zip(revs, done.stdout.decode().splitlines(), strict=False):
        parts = line.split()
        out[rev] = parts[0] if len(parts) == 2 and parts[1] == "commit" else None
    return out


# The refs a clone carries: what a commit must be reachable from to exist in a fresh checkout.
_PUBLISHED = ("HEAD", "--branches", "--tags", _REMOTES)


def unreachable_commits(root: Path, commits: Iterable[str]) -> dict[str, str | None]:
    """The full shas among ``commits`` that no branch, tag, remote-tracking ref or HEAD reaches
    (objects left behind by an amend, a rebase or a reset: a clone will not have them), each
    mapped to a reachable commit with the same tree, or None when history has none.

    Two git processes when every commit is reachable (the usual answer), three otherwise.
    """
    wanted = sorted(set(commits))
    if not wanted:
        return {}
    done = _ask(root, ["rev-list", *wanted, "--not", *_PUBLISHED])
    if done is None or done.returncode != 0:
        return {}
    outside = set(done.stdout.decode().split())
    lost = [sha for sha in wanted if sha in outside]
    if not lost:
        return {}
    request = "".join(f"{sha}^{{tree}}\n" for sha in lost).encode()
    trees = _ask(root, ["cat-file", "--batch-check=%(objectname)"], request)
    tree_of = dict(zip(lost, trees.stdout.decode().split(), strict=False)) if trees else {}
    log = _ask(root, ["log", "--format=%H %T", *_PUBLISHED])
    same_tree: dict[str, str] = {}
    for line in log.stdout.decode().splitlines() if log and log.returncode == 0 else []:
        sha, _, tree = line.partition(" ")
        same_tree.setdefault(tree, sha)  # newest first: the newest commit with that tree
    return {sha: same_tree.get(tree_of.get(sha, "")) for sha in lost}


def blobs_at(
    root: Path, requests: Iterable[tuple[str, str]]
) -> dict[tuple[str, str], bytes | None]:
    """The bytes of each ``(commit, path)`` file (None when absent or not a file), read by one
    ``cat-file --batch``; paths holding a newline (which its input cannot carry) are absent."""
    wanted = sorted(set(requests))
    out: dict[tuple[str, str], bytes | None] = dict.fromkeys(wanted)
    asked = [key for key in wanted if "\n" not in key[1] and "\r" not in key[1]]
    if not asked:
        return out
    request = "".join(f"{commit}:{path}\n" for commit, path in asked).encode()
    done = _ask(root, ["cat-file", "--batch"], request)
    if done is None or done.returncode != 0:
        return out
    stream, position = done.stdout, 0
    for key in asked:
        end = stream.find(b"\n", position)
        if end < 0:
            break
        header = stream[position:end].split()
        position = end + 1
        if len(header) == 3:  # "<sha> <type> <size>", then the body and a newline
            size = int(header[2])
            if header[1] == b"blob":
                out[key] = stream[position : position + size]
            position += size + 1
    return out


def blob_hashes_at(
    root: Path, requests: Iterable[tuple[str, str]]
) -> dict[tuple[str, str], str | None]:
    """sha256 of each ``(commit, path)`` file (None when absent), read by one ``cat-file``."""
    import hashlib  # the evidence linter hashes; the commit linters never do

    return {
        key: None if data is None else hashlib.sha256(data).hexdigest()
        for key, data in blobs_at(root, requests).items()
    }


def paths_identical(root: Path, base: str, head: str, paths: Sequence[str]) -> bool | None:
    """Whether ``paths`` do not differ between commits ``base`` and ``head`` (None: git error)."""
    try:
        validate_revision(base)
        validate_revision(head)
    except GitError:
        return None
    args = ["diff", "--quiet", "--no-ext-diff", "--end-of-options", base, head, "--", *paths]
    done = _ask(root, args)
    if done is None or done.returncode not in (0, 1):
        return None
    return done.returncode == 0


def first_citing_commits(
    root: Path, revision: str = "HEAD", key: str = "Provenance"
) -> dict[str, tuple[str, str]]:
    """For each source id cited in a ``key:`` trailer on ``revision``: first commit and its date.

    Dates are committer dates (``YYYY-MM-DD`` in the committer's zone); git itself finds the
    trailer block (``%(trailers:key=...)``), so its trailer rules apply.
    """
    from wpgate.parsers.provenance import expand_ids

    fmt = f"--format=%H{_FIELD}%cs{_FIELD}%(trailers:key={key},valueonly,separator=%x2C)%x1e"
    validate_revision(revision)
    done = _ask(root, ["log", "--reverse", fmt, "--end-of-options", revision, "--"])
    out: dict[str, tuple[str, str]] = {}
    if done is None or done.returncode != 0:
        return out
    for record in done.stdout.decode("utf-8", "replace").split("\x1e"):
        fields = record.strip("\n").split(_FIELD)
        if len(fields) != 3:
            continue
        sha, date, value = fields
        for part in re.findall(r"R[0-9]+(?:\s*[\u2013\u2014-]\s*R?[0-9]+)?", value):
            for source_id in expand_ids(part)[0]:
                out.setdefault(source_id, (sha, date))
    return out


def git_trailers(root: Path, revisions: RevisionRange) -> dict[str, list[tuple[str, str]]]:
    """Each commit's trailers as git itself reads them (``%(trailers:only,unfold)``).

    The oracle for :mod:`wpgate.trailers`: one ``git log`` process, ``(key, value)`` pairs in
    message order, keyed by full sha. Control characters separate the fields, so keys and
    values come back exactly.
    """
    fmt = "--format=%H%x1f%(trailers:only,unfold,separator=%x1d,key_value_separator=%x1c)%x1e"
    done = _run(root, ["log", fmt, *_revision_args(revisions), "--"])
    if done.returncode != 0:
        detail = done.stderr.decode("utf-8", "replace").strip()
        raise GitError(f"git log {revisions.describe()} failed ({detail}); check the range")
    out: dict[str, list[tuple[str, str]]] = {}
    for record in done.stdout.decode("utf-8", "replace").split("\x1e"):
        sha, _, block = record.lstrip("\n").partition(_FIELD)
        if not sha:
            continue
        pairs = [item.partition("\x1c") for item in block.split("\x1d") if item]
        out[sha] = [(key, value) for key, _, value in pairs]
    return out
