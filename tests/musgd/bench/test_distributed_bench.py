"""``python -m musgd.bench distributed``: the scaling model, its calibration and a gloo world."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from musgd.bench import _distributed_bench as db
from musgd.bench._cli import EXIT_OK, EXIT_USAGE, main


def test_predict_prints_the_model_for_every_set(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["distributed", "--predict", "2"]) == EXIT_OK
    out = capsys.readouterr().out
    assert out.startswith("| quantity | nano | vit-b | 1b |")
    assert "| ns_gflop_step |" in out
    assert "From the 1-GPU medians" not in out


def test_predict_with_a_calibration_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    medians = {"replicated": {"median_ms": 20.0}, "fsdp": {"median_ms": 24.0}}
    doc = {"results": {"runs": [{"set": "nano", "worlds": {"1": medians}}]}}
    path = tmp_path / "calibration.json"
    path.write_text(json.dumps(doc))
    assert db.world1_medians(path) == {"nano": {"replicated": 20.0, "fsdp": 24.0}}
    assert main(["distributed", "--predict", "4", "--calibration", str(path)]) == EXIT_OK
    out = capsys.readouterr().out
    assert f"From the 1-GPU medians of {path}:" in out
    assert "| sharded_speedup |" in out


def test_a_calibration_without_a_world_of_one_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "calibration.json"
    path.write_text(json.dumps({"results": {"set": "nano", "worlds": {"2": {}}}}))
    assert main(["distributed", "--predict", "2", "--calibration", str(path)]) == EXIT_USAGE
    assert "no world-size-1 run to calibrate from" in capsys.readouterr().err


def test_a_calibration_without_predict_is_refused_before_any_timing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Found by an audit: --calibration alone was ignored and the arms were timed instead."""

    def timed(*_: object) -> None:
        raise AssertionError("the arms were timed")

    monkeypatch.setattr(db, "run_rank", timed)
    monkeypatch.setattr(torch.multiprocessing, "spawn", timed)  # the module db spawns with
    path = tmp_path / "calibration.json"
    assert main(["distributed", "--calibration", str(path)]) == EXIT_USAGE
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        "error: --calibration calibrates the scaling model that --predict WORLD prints, and "
        "without --predict this run times the arms instead; add --predict WORLD (e.g. "
        "--predict 8) or drop --calibration\n"
    )


def test_bad_sizes_are_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["distributed", "--steps", "0"]) == EXIT_USAGE
    assert "--steps must be >= 1" in capsys.readouterr().err


@pytest.mark.slow  # spawns a gloo world: several seconds
def test_a_spawned_world_writes_distributed_evidence(tmp_path: Path) -> None:
    out = tmp_path / "d.json"
    argv = ["distributed", "--worlds", "1", "--steps", "1", "--warmup", "0", "--arms", "sharded"]
    assert main([*argv, "--out", str(out)]) == EXIT_OK
    doc = json.loads(out.read_text())
    assert doc["kind"] == "distributed"
    assert doc["command"][1:] == ["-m", "musgd.bench", *argv, "--out", str(out)]
    world = doc["results"]["worlds"]["1"]
    assert set(world["speedups_vs_replicated"]) == {"replicated", "sharded"}
    assert world["ranks_agree_bitwise"] is True


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (None, "cannot read"),
        ("{", "is not JSON"),
        ('{"kind": "x"}', "is not an evidence file"),
        ('{"results": {"runs": [{"worlds": {"1": {}}}]}}', "not a distributed benchmark's"),
        ('{"results": {"runs": [3]}}', "not a distributed benchmark's"),
    ],
    ids=["missing", "not-json", "no-results", "no-set", "not-a-run"],
)
def test_a_calibration_file_that_is_not_one_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str | None, message: str
) -> None:
    path = tmp_path / "calibration.json"
    if text is not None:
        path.write_text(text)
    assert main(["distributed", "--predict", "2", "--calibration", str(path)]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err
