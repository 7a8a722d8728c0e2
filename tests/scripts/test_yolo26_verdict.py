"""``scripts/yolo26_verdict.py``: the peer/eager ratio per set and the 1.3x target."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from script_module import load_script


def _load() -> ModuleType:
    return load_script("yolo26_verdict")


verdict = _load()


def _results(peer_rounds: list[float] | None) -> dict[str, Any]:
    eager = {"variant": "bucketed eager", "median_ms": 8.0}
    rows: list[dict[str, Any]] = [eager]
    if peer_rounds is not None:
        # speedup_vs_bucketed_by_round holds eager/peer per round.
        per_round = [8.0 / p for p in peer_rounds]
        rows.append(
            {
                "variant": "ultralytics MuSGD",
                "median_ms": sorted(peer_rounds)[len(peer_rounds) // 2],
                "speedup_vs_bucketed_by_round": {"per_round": per_round},
            }
        )
    return {"sets": {"yolo26n": {"variants": rows}}}


def test_target_met_when_the_peer_is_1_3x_slower_by_round() -> None:
    lines, met = verdict.verdict_lines(_results([12.0, 12.5, 11.0]))
    assert met
    assert lines == [
        "yolo26n: eager 8.00 ms, peer 12.00 ms, peer/eager 1.50x (target >= 1.3x: yes)"
    ]


def test_target_missed_or_unmeasured() -> None:
    lines, met = verdict.verdict_lines(_results([9.0, 10.0, 10.0]))
    assert not met
    assert lines[0].endswith("peer/eager 1.25x (target >= 1.3x: NO)")
    lines, met = verdict.verdict_lines(_results(None))
    assert not met  # no peer row: nothing was shown
    assert lines == ["yolo26n: no 'bucketed eager' and 'ultralytics MuSGD' rows to compare"]


def test_main_reads_an_evidence_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "e.json"
    path.write_text(json.dumps({"results": _results([12.0])}))
    assert verdict.main([str(path)]) == 0
    assert "yolo26 target met: yes" in capsys.readouterr().out
    assert verdict.main([str(tmp_path / "missing.json")]) == 2
    assert verdict.main([]) == 2
