"""Print WP-010's YOLO26 verdict from an optimizer-step evidence file.

    python scripts/yolo26_verdict.py EVIDENCE.json

For each set: MuSGD's default eager step (``bucketed eager``) and the Ultralytics MuSGD peer,
their medians and the median over rounds of ``peer round median / eager round median``; the
target is at least 1.3x on every YOLO26 set. Exit codes: 0 target met, 1 missed or no peer in
the file, 2 unreadable file.
"""

from __future__ import annotations

import json
import statistics
import sys
from collections.abc import Sequence
from typing import Any

EAGER = "bucketed eager"
PEER = "ultralytics MuSGD"
TARGET = 1.3


def verdict_lines(results: dict[str, Any]) -> tuple[list[str], bool]:
    """One line per set and whether every set with a peer row meets the target."""
    lines: list[str] = []
    met = True
    peer_seen = False
    for name, entry in results["sets"].items():
        rows = {row["variant"]: row for row in entry["variants"]}
        eager = rows.get(EAGER)
        peer = rows.get(PEER)
        if eager is None or peer is None:
            lines.append(f"{name}: no {EAGER!r} and {PEER!r} rows to compare")
            continue
        peer_seen = True
        paired = peer.get("speedup_vs_bucketed_by_round")
        # speedup_vs_bucketed is eager/peer per round; the target is its inverse, peer/eager.
        by_round = [1.0 / r for r in paired["per_round"]] if paired else []
        ratio = statistics.median(by_round) if by_round else peer["median_ms"] / eager["median_ms"]
        ok = ratio >= TARGET
        met = met and ok
        lines.append(
            f"{name}: eager {eager['median_ms']:.2f} ms, peer {peer['median_ms']:.2f} ms, "
            f"peer/eager {ratio:.2f}x (target >= {TARGET}x: {'yes' if ok else 'NO'})"
        )
    return lines, met and peer_seen


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        print("usage: python scripts/yolo26_verdict.py EVIDENCE.json", file=sys.stderr)
        return 2
    try:
        with open(args[0], encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError) as exc:
        print(f"error: cannot read {args[0]}: {exc}", file=sys.stderr)
        return 2
    lines, met = verdict_lines(doc["results"])
    print("\n".join(lines))
    print(f"yolo26 target met: {'yes' if met else 'NO'}")
    return 0 if met else 1


if __name__ == "__main__":
    raise SystemExit(main())
