"""scripts/ultralytics_gpu.py runs end to end on CPU (``--quick``), as the GPU gate will run it."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest
from script_module import load_script

pytest.importorskip("ultralytics", reason="ultralytics is not installed: make test-ultralytics")


def _load() -> ModuleType:
    return load_script("ultralytics_gpu")


def test_identity_part_runs_and_is_bit_identical(tmp_path: Path) -> None:
    script = _load()
    rc = script.main(["--device", "cpu", "--quick", "--parts", "identity", "--out", str(tmp_path)])
    assert rc == 0
    evidence = json.loads((tmp_path / "ultralytics-identity.json").read_text(encoding="utf-8"))
    assert evidence["schema"] == "wpgate-evidence/1"
    results = evidence["results"]
    assert results["steps"] == 12
    assert results["bit_identical"] is True
    assert results["warmup_active"] is True


def test_loss_chart_from_evidence(tmp_path: Path) -> None:
    script = _load()
    arms = {arm: {"losses": [3.0, 2.5, 2.4, 2.2]} for arm in ("stock", "ours", "stock_seed1")}
    evidence = {"results": {"imgsz": 64, "batches": {"4": {"arms": arms}}}}
    source = tmp_path / "train.json"
    source.write_text(json.dumps(evidence), encoding="utf-8")
    assert script.main(["--chart-from", str(source), "--out", str(tmp_path)]) == 0
    assert (tmp_path / "ultralytics-loss.png").stat().st_size > 1000


def test_mismatch_is_reported_when_replay_differs() -> None:
    """The shadow check fails a step whose parameters differ from the eager twin's."""
    import torch

    from musgd.ultralytics import UltralyticsMuSGD

    script = _load()
    w = torch.nn.Parameter(torch.randn(8, 4))
    opt = UltralyticsMuSGD([{"params": [w], "use_muon": True}], lr=0.1, momentum=0.9)
    check = script.ShadowCheck(opt)
    w.grad = torch.randn(8, 4)
    opt.step()
    assert check.mismatched == []
    w.grad = torch.randn(8, 4)
    with torch.no_grad():
        check.shadow[0].add_(1e-3)  # the eager twin drifts: the next step must be flagged
    opt.step()
    assert check.mismatched == [1]
