"""``python -m musgd.bench profile`` on the CPU with tiny settings: rows, phases, evidence."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from musgd.bench._cli import EXIT_OK, EXIT_USAGE, main

TINY = ["--device", "cpu", "--steps", "2", "--warmup", "1", "--top", "3", "--phase-repeats", "2"]


def test_profile_writes_replay_profile_evidence(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["profile", *TINY, "--variants", "bucketed eager", "--out", str(tmp_path)]
    assert main(argv) == EXIT_OK
    out = capsys.readouterr().out
    (path,) = tmp_path.glob("musgd-replay-profile-*.json")
    assert f"evidence: {path}" in out
    assert "phase bucket jobs, eager NS" in out
    doc = json.loads(path.read_text())
    assert doc["kind"] == "replay-profile"
    assert doc["command"][1:] == ["-m", "musgd.bench", *argv]
    results = doc["results"]
    assert (results["benchmark"], results["set"]) == ("replay-profile", "nano")
    (row,) = results["variants"]
    assert row["variant"] == "bucketed eager"
    assert row["device_busy_ms"] is None  # no torch.profiler device time on CPU
    assert len(row["host_top"]) == 3
    assert {p["phase"] for p in results["phases"]} >= {"gather gradients", "write (foreach)"}


def test_profile_without_evidence_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    argv = ["profile", *TINY, "--variants", "bucketed eager", "--no-evidence"]
    assert main(argv) == EXIT_OK
    assert "evidence:" not in capsys.readouterr().out
    assert list(tmp_path.iterdir()) == []


def test_profile_refuses_a_variant_this_device_lacks(capsys: pytest.CaptureFixture[str]) -> None:
    # The default list holds the replay variants, which need CUDA.
    assert main(["profile", *TINY, "--no-evidence"]) == EXIT_USAGE
    assert "capture_orthogonalization" in capsys.readouterr().err


@pytest.mark.skipif(
    torch.cuda.is_available(), reason="checks the message of a machine without CUDA"
)
@pytest.mark.parametrize("command", ["profile", "optimizer"])
def test_cuda_without_a_gpu_is_a_usage_error_before_any_work(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Tried as a stranger: ``profile --device cuda`` on a CPU machine ended in a traceback."""
    assert main([command, "--device", "cuda"]) == EXIT_USAGE
    assert "--device cuda was requested but this torch sees no CUDA GPU" in capsys.readouterr().err


def test_an_unknown_device_is_a_usage_error() -> None:
    assert main(["profile", "--device", "foo"]) == EXIT_USAGE
