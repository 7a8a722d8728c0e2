"""Same findings before and after a change: ``wpgate trailers --range`` from two source trees.

Runs ``python -m wpgate trailers --range HEAD --root REPO --format F`` for every format (text,
json, github, sarif) from this tree's ``src`` and from ``--baseline`` (the ``src`` directory of
the code before the change, e.g. ``git archive <commit> src | tar -x -C /tmp/base``) over a
synthetic history and over each ``--repo``, and compares the reports byte for byte (and the
exit statuses). The synthetic history (``git fast-import``, this repository's governance
documents and a test file) mixes the messages a lint meets: governed ones, missing, repeated
and malformed trailers, unknown ids and gates, fixups, reverts, merges, bot authors, CRLF line
ends, leading blank lines, comments, continuation lines, URL values, an old ``Conflicts:``
block, long subjects and invalid UTF-8. Prints each report's sha256; exits 1 on a difference.

    .venv/bin/python scripts/compare_trailer_findings.py --baseline /tmp/base/src \\
        --repo /tmp/runc --commits 3000
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))

from bench_trailers import GATE_FILE, _docs_files  # noqa: E402

FORMATS = ("text", "json", "github", "sarif")
_AUTHORS = (b"Dev <dev@example.com>", b"dependabot[bot] <bot@example.com>", b"Ada <ada@e.org>")


def _trailers(rng: random.Random) -> list[str]:
    """A trailer paragraph's lines, right or wrong in one of the ways a history is."""
    wp = rng.choice(["004", "006", "099", "none", "4", "", "004, 006"])
    prov = rng.choice(["R1", "R1 §2", "R9999", "none", "none (own code)", "X1", "R1, R2"])
    gate = rng.choice(
        [
            f"{GATE_FILE}::TestLinter::test_range",
            f"{GATE_FILE}::test_missing",
            "tests/absent.py::test_x",
            "ci:lint",
            "",
        ]
    )
    lines = [f"WP: {wp}", f"Provenance: {prov}", "Assumptions: " + rng.choice(["none", "A1", "B"])]
    lines.append(f"Gate: {gate}")
    rng.shuffle(lines)
    drop = rng.randint(0, len(lines))
    kept = [line for i, line in enumerate(lines) if i != drop]
    extra = rng.choice(
        ["", "WP: 004", "Signed-off-by: Ada <ada@e.org>", "Link: https://example.org/x", "See://x"]
    )
    if extra:
        kept.append(extra)
    if rng.random() < 0.1:
        kept.insert(1, "  continued value")
    return kept


def _message(index: int, rng: random.Random) -> bytes:
    """One commit message of the synthetic history."""
    kind = rng.choice(["feat", "fix", "docs", "perf", "Feat", "wip", ""])
    scope = rng.choice(["", "(core)", "()", "(a b)"])
    text = rng.choice(["change number", "a much longer subject " * rng.randint(1, 5), "end."])
    subject = f"{kind}{scope}: {text} {index}" if kind else f"Update thing {index}"
    special = rng.random()
    if special < 0.04:
        subject = f"fixup! {subject}"
    elif special < 0.07:
        return f'Revert "{subject}"\n\nThis reverts commit {index:040x}.\n'.encode()
    body = " ".join(rng.choice(["the", "step", "graph", "keeps", "bits"]) for _ in range(30))
    paragraphs = [subject, body]
    if rng.random() < 0.05:
        paragraphs.append("Conflicts:\n\tsrc/a.py")
    paragraphs.append("\n".join(_trailers(rng)))
    text = "\n\n".join(paragraphs) + "\n"
    if rng.random() < 0.05:
        text = "\n\n" + text
    if rng.random() < 0.05:
        text += "# a comment line\n"
    if rng.random() < 0.03:
        text = text.replace("\n", "\r\n")
    data = text.encode()
    if rng.random() < 0.02:
        data = data.replace(b"the", b"th\xff", 1)
    return data


def build_history(path: Path, commits: int, seed: int) -> None:
    """A repository at ``path``: the governance documents, then ``commits`` varied commits
    (every 25th a merge of a side commit)."""
    rng = random.Random(seed)
    subprocess.run(["git", "init", "-q", "-b", "main", str(path)], check=True)

    def data(payload: bytes) -> bytes:
        return b"data %d\n" % len(payload) + payload + b"\n"

    stamp = 1_760_000_000
    out = [b"commit refs/heads/main\nmark :1\n", b"committer D <d@e> %d +0000\n" % stamp]
    out.append(data(b"chore: synthetic repository\n"))
    for rel, content in _docs_files().items():
        out.append(f"M 644 inline {rel}\n".encode() + data(content))
    mark = 1
    for index in range(commits):
        author = _AUTHORS[0] if rng.random() < 0.9 else rng.choice(_AUTHORS[1:])
        parent = mark
        if index % 25 == 24:  # a side commit, merged by the next one
            mark += 1
            out += [b"commit refs/heads/side\nmark :%d\n" % mark]
            out += [b"committer D <d@e> %d +0000\n" % (stamp + index)]
            out += [data(_message(index, rng)), b"from :%d\n" % parent]
        mark += 1
        out.append(b"commit refs/heads/main\nmark :%d\n" % mark)
        out.append(b"author " + author + b" %d +0000\n" % (stamp + index))
        out.append(b"committer D <d@e> %d +0000\n" % (stamp + index))
        out.append(data(_message(index, rng)))
        out.append(b"from :%d\n" % parent)
        if index % 25 == 24:
            out.append(b"merge :%d\n" % (mark - 1))
    subprocess.run(
        ["git", "-C", str(path), "fast-import", "--quiet"], input=b"".join(out), check=True
    )
    subprocess.run(["git", "-C", str(path), "reset", "-q", "--hard", "main"], check=True)


def report(source: Path, repo: Path, fmt: str) -> tuple[int, bytes]:
    """Exit status and stdout of the range lint of ``repo`` run from the ``source`` tree."""
    env = {**os.environ, "PYTHONPATH": str(source)}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "wpgate",
            "trailers",
            "--range",
            "HEAD",
            "--format",
            fmt,
            "--root",
            str(repo),
        ],
        capture_output=True,
        env=env,
        check=False,
    )
    return done.returncode, done.stdout


def compare(baseline: Path, repo: Path, label: str) -> int:
    """Print each format's digests for ``repo``; the number of formats that differ."""
    differ = 0
    for fmt in FORMATS:
        ours, theirs = report(REPO / "src", repo, fmt), report(baseline, repo, fmt)
        same = ours == theirs
        differ += not same
        digest = hashlib.sha256(ours[1]).hexdigest()
        lines = ours[1].count(b"\n")
        verdict = "identical" if same else "DIFFERENT"
        print(f"{label} {fmt}: {verdict}, exit {ours[0]}, {lines} lines, sha256 {digest}")
    return differ


def main(argv: list[str] | None = None) -> int:
    """Compare the reports of both trees over the synthetic history and every ``--repo``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", required=True, help="src directory of the code before")
    parser.add_argument("--repo", action="append", default=[], help="a git directory to lint")
    parser.add_argument("--commits", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    baseline = Path(args.baseline).resolve()
    differ = 0
    with tempfile.TemporaryDirectory(prefix="wpgate-compare-") as tmp:
        synthetic = Path(tmp) / "history"
        build_history(synthetic, args.commits, args.seed)
        differ += compare(baseline, synthetic, f"synthetic({args.commits}, seed {args.seed})")
    for repo in args.repo:
        differ += compare(baseline, Path(repo).resolve(), repo)
    print("every report identical" if not differ else f"{differ} reports differ")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
