"""``python -m musgd.bench ultralytics``: help, refusals and the curves of an evidence file,
without Ultralytics (its runs: ``tests/ultralytics/test_gpu_script.py``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

from musgd.bench import _ul_bench
from musgd.bench._cli import main
from musgd.bench._ul_runs import RunFailedError


def test_help_works_without_ultralytics(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "ultralytics", None)  # an import of it fails
    assert main(["ultralytics", "--help"]) == 0
    out = capsys.readouterr().out
    assert "--task {detect,segment,pose,obb,classify}" in out
    assert "--curves-from" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--settle-s", "-1"], "--settle-s must be 0 or more seconds"),
        (["--parts", "identity,trian"], "unknown parts"),
        (["--task", "depth"], "invalid choice: 'depth'"),
        (["--arms", "stock,ours,stok-compile"], "unknown arms stok-compile: --arms takes names"),
        (["--arms", "ours"], "--arms must include stock"),
        (["--curves-from", "{missing}"], "cannot read"),
        (["--curves-from", "{not_json}"], "is not JSON"),
        (["--curves-from", "{not_evidence}"], "is not an evidence file"),
        (
            ["--one-run", "{{bad", "--one-run-data", "d", "--one-run-out", "o", "--work", "w"],
            "--one-run must be a JSON object",
        ),
        (
            ["--one-run", "[1]", "--one-run-data", "d", "--one-run-out", "o", "--work", "w"],
            "--one-run must be a JSON object, got list",
        ),
    ],
)
def test_bad_input_exits_2_with_a_message_and_no_traceback(
    argv: list[str],
    message: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    (tmp_path / "not.json").write_bytes(b"\xff{results")
    (tmp_path / "other.json").write_text('{"results": [1, 2]}', encoding="utf-8")
    files = {
        "missing": tmp_path / "missing.json",
        "not_json": tmp_path / "not.json",
        "not_evidence": tmp_path / "other.json",
    }
    monkeypatch.setattr(_ul_bench, "require_ultralytics", lambda: None)  # not needed to refuse
    argv = [a.format(**files) for a in argv]
    assert main(["ultralytics", "--device", "cpu", "--out", str(tmp_path), *argv]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err


def test_a_missing_ultralytics_exits_2_saying_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "ultralytics", None)
    assert main(["ultralytics", "--device", "cpu", "--quick", "--task", "segment"]) == 2
    err = capsys.readouterr().err
    assert 'pip install "wpgate[ultralytics]"' in err
    assert "Traceback" not in err


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is there: cuda is no usage error")
def test_cuda_without_a_gpu_exits_2_saying_to_use_the_cpu(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["ultralytics", "--quick"]) == 2
    assert "use --device cpu" in capsys.readouterr().err


def test_a_failed_run_ends_the_command_with_a_message(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def failing(*_: object) -> int:
        raise RunFailedError("the training run {'arm': 'ours'} failed in its own process (exit 1)")

    monkeypatch.setattr(_ul_bench, "_run", failing)
    assert main(["ultralytics", "--device", "cpu", "--quick"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("ultralytics: the training run")
    assert "Traceback" not in err


def test_curves_from_an_evidence_file(tmp_path: Path) -> None:
    run = {"seed": 0, "losses": [3.0, 2.5], "trace_ms": {"iteration": [None, 9.0, 11.0]}}
    batches = {"4": {"pairs": [{"seed": 0, "stock": run, "ours": run}]}}
    source = tmp_path / "train.json"
    source.write_text(
        json.dumps({"results": {"variants": {"default": {"batches": batches}}}}), encoding="utf-8"
    )
    argv = ["ultralytics", "--device", "cpu", "--curves-from", str(source), "--out", str(tmp_path)]
    assert main(argv) == 0
    written = json.loads((tmp_path / "ultralytics-curves.json").read_text(encoding="utf-8"))
    assert written["curves"]["loss"]["series"] == {
        "stock seed 0": [3.0, 2.5],
        "ours seed 0": [3.0, 2.5],
    }
    assert written["curves"]["iteration_ms"]["series"]["ours seed 0"] == [10.0]


@pytest.mark.parametrize("given", [False, True], ids=["temporary", "given"])
def test_the_work_folder_of_a_command_without_work_is_removed_when_it_ends(
    given: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[Path] = []

    def measure(args: object, argv: list[str], budget: object) -> int:
        work = args.work  # type: ignore[attr-defined]
        (work / "data").mkdir()
        (work / "data" / "image.jpg").write_bytes(b"x" * 1024)
        seen.append(work)
        return 0

    monkeypatch.setattr(_ul_bench, "require_ultralytics", lambda: None)
    monkeypatch.setattr(_ul_bench, "model_builds", lambda model: None)
    monkeypatch.setattr(_ul_bench, "_measure", measure)
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    kept = tmp_path / "kept"
    kept.mkdir()
    argv = ["ultralytics", "--device", "cpu", "--quick", "--out", str(tmp_path / "out")]
    assert main([*argv, *(["--work", str(kept)] if given else [])]) == 0
    (work,) = seen
    if given:
        assert work == kept
        assert (kept / "data" / "image.jpg").is_file()
    else:
        assert work.name.startswith(_ul_bench.WORK_PREFIX)
        assert work.parent == tmp_path
        assert not work.exists()
