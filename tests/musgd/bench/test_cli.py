"""``python -m musgd.bench`` on the CPU with tiny sizes: tables, evidence files, usage errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from musgd.bench._cli import EXIT_OK, EXIT_USAGE, main

# End-to-end runs of the benchmark harness CLI (make test-fast skips them, make test runs them).
pytestmark = pytest.mark.slow


def test_demo_quick_shows_loss_going_down(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--quick", "--device", "cpu"]) == EXIT_OK
    out = capsys.readouterr().out
    assert "per-matrix eager" in out
    assert "bucketed eager" in out
    assert "optimizer step with MuSGD's defaults (bucketed eager): " in out
    assert "loss went down for every variant: yes" in out


@pytest.mark.parametrize(
    ("option", "name", "message"),
    [
        ("--png", "chart.json", "the file is written as PNG; name a path ending in .png"),
        ("--png", "file/chart.png", "cannot write there"),
        ("--out", "file/run.json", "cannot write there"),
    ],
)
def test_demo_refuses_an_output_it_could_not_write_before_it_trains(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    option: str,
    name: str,
    message: str,
) -> None:
    """Found by an audit: a chart path ending in .json, or a folder nothing can be made in,
    failed only after every variant had trained."""
    (tmp_path / "file").write_text("a file, not a folder")
    import musgd.bench._cli as cli

    def trained(*_: object, **__: object) -> None:
        raise AssertionError("the demo trained before refusing its output")

    monkeypatch.setattr(cli, "run_demo", trained)
    assert main(["demo", "--quick", "--device", "cpu", option, str(tmp_path / name)]) == (
        EXIT_USAGE
    )
    assert message in capsys.readouterr().err


def test_optimizer_quick_writes_evidence(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["optimizer", "--quick", "--device", "cpu", "--steps", "1", "--out", str(tmp_path)])
    assert code == EXIT_OK
    out = capsys.readouterr().out
    (path,) = tmp_path.glob("musgd-optimizer-step-*.json")
    assert f"evidence: {path}" in out
    doc = json.loads(path.read_text())
    assert doc["schema"] == "wpgate-evidence/1"
    assert doc["kind"] == "optimizer-step"
    assert list(doc["results"]["sets"]) == ["nano"]
    rows = doc["results"]["sets"]["nano"]["variants"]
    assert [r["variant"] for r in rows][:2] == ["per-matrix eager", "bucketed eager"]
    assert all(r["steps"] == 1 for r in rows)
    assert any(k.endswith("musgd/_optimizer.py") for k in doc["sources"])


def test_train_quick_writes_evidence_with_hashes(tmp_path: Path) -> None:
    out = tmp_path / "train.json"
    argv = ["train", "--quick", "--device", "cpu", "--image-size", "32", "--steps", "1"]
    assert main([*argv, "--out", str(out)]) == EXIT_OK
    doc = json.loads(out.read_text())
    entry = doc["results"]["batch_sizes"]["2"]
    assert [a["arm"] for a in entry["arms"]][:2] == ["per-matrix eager", "bucketed eager"]
    assert all(len(r["sha256"]) == 64 for a in entry["arms"] for r in a["runs"])


def test_no_evidence_flag(tmp_path: Path) -> None:
    argv = ["optimizer", "--quick", "--device", "cpu", "--steps", "1", "--warmup", "0"]
    assert (
        main([*argv, "--variants", "bucketed eager", "--no-evidence", "--out", str(tmp_path)]) == 0
    )
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["optimizer", "--steps", "0"], "expected a number >= 1"),
        (["optimizer", "--steps", "many"], "expected a whole number"),
        (["demo", "--image-size", "100"], "multiple of 32"),
        (["optimizer", "--sets", "huge", "--device", "cpu"], "unknown parameter set 'huge'"),
        (["optimizer", "--variants", "fast", "--device", "cpu"], "unknown or unavailable variant"),
        # An empty list ran nothing and wrote an empty evidence file (an audit's finding).
        (["optimizer", "--variants", ",", "--device", "cpu"], "--variants: names none"),
        (["optimizer", "--sets", "", "--device", "cpu"], "--sets: names none"),
        (["train", "--arms", "torch.optim.Muon", "--device", "cpu"], "unknown or unavailable"),
        (["train", "--device", "cpu", "--batch-sizes", "1", "--image-size", "32"], "BatchNorm"),
        (["demo", "--commit", "not-a-sha"], "hex git sha"),
        (["bogus"], "invalid choice"),
    ],
)
def test_usage_errors_exit_2_with_a_fix(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == EXIT_USAGE
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err


def test_no_command_prints_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == EXIT_USAGE
    assert "demo" in capsys.readouterr().out


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_cuda_requested_without_gpu(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--device", "cuda"]) == EXIT_USAGE
    assert "use --device cpu" in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_cuda_by_default_without_gpu_says_it_is_the_default(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # `ultralytics` defaults to --device cuda: the stranger who gave no --device is told so.
    assert main(["ultralytics"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "--device cuda is this command's default but this torch sees no CUDA GPU" in err
    assert "use --device cpu" in err


def test_unwritable_out_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    argv = ["optimizer", "--quick", "--device", "cpu", "--steps", "1", "--warmup", "0"]
    assert main([*argv, "--variants", "bucketed eager", "--out", str(blocker / "x.json")]) == 2
    assert "pass --out with a writable" in capsys.readouterr().err


def test_module_entry_point_runs() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "musgd.bench", "--help"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0
    assert "optimizer" in done.stdout


def test_yolo26_set_runs_by_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["optimizer", "--device", "cpu", "--sets", "yolo26n", "--steps", "1", "--warmup", "0"]
    assert main([*argv, "--variants", "bucketed eager", "--out", str(tmp_path)]) == EXIT_OK
    (path,) = tmp_path.glob("musgd-optimizer-step-*.json")
    entry = json.loads(path.read_text())["results"]["sets"]["yolo26n"]
    assert (entry["parameters"], entry["matrices"]) == (366, 126)
    assert "yolo26n" in capsys.readouterr().out


def test_peer_that_does_not_import_is_a_usage_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from musgd.bench import _variants

    monkeypatch.setattr(_variants, "_module_found", lambda name: name == "ultralytics")
    monkeypatch.setitem(sys.modules, _variants.ULTRALYTICS_MODULE, None)
    argv = ["optimizer", "--device", "cpu", "--quick", "--no-evidence"]
    assert main([*argv, "--variants", _variants.ULTRALYTICS_NAME]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "leave the peer out with --variants" in err
    assert "Traceback" not in err
