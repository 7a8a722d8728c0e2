"""Every Ultralytics task trains with our optimizer: ``musgd_trainer(<the task's trainer>)``
on the task's synthetic data, 1 epoch of a few 64-px images on CPU, checkpoints saved."""

from __future__ import annotations

import argparse
import copy
import json
from pathlib import Path
from typing import Any

import pytest
import torch

pytest.importorskip("ultralytics", reason="ultralytics is not installed: make test-ultralytics")
from musgd._network_capture import flatten
from musgd.bench import _ul_plan
from musgd.bench._cli import main as bench_main
from musgd.bench._ul_runs import train_kwargs
from musgd.bench._yolo_data import write_synthetic_dataset
from musgd.ultralytics import (
    TASK_TRAINERS,
    TASKS,
    UltralyticsMuSGD,
    main,
    musgd_trainer,
    task_trainer,
)
from ultralytics import YOLO

NON_DETECT = [task for task in TASKS if task != "detect"]


def _train_args(data: Path, work: Path, name: str) -> dict[str, Any]:
    """The benchmark's own train arguments of a ``--quick`` CPU run (64 px, no loader workers,
    AMP off), 1 epoch at batch 4, checkpoints saved under ``work``."""
    parser = argparse.ArgumentParser()
    _ul_plan.add_arguments(parser)
    args = _ul_plan.configure(parser.parse_args(["--device", "cpu", "--quick", "--amp", "false"]))
    args.work = work
    return {**train_kwargs(args, data, batch=4, epochs=1), "save": True, "name": name}


@pytest.mark.parametrize("task", TASKS)
def test_each_task_trains_with_ours_and_saves_checkpoints(tmp_path: Path, task: str) -> None:
    dataset = write_synthetic_dataset(
        tmp_path / "data", train_images=8, val_images=4, size=64, task=task
    )
    base = task_trainer(task)
    assert base.__name__ == TASK_TRAINERS[task][1]
    model = YOLO(TASK_TRAINERS[task][2])
    assert model.task == task
    model.train(
        trainer=musgd_trainer(base, capture_network=True, channels_last=True),
        **_train_args(dataset.data, tmp_path, task),
    )
    trainer = model.trainer
    assert isinstance(trainer, base)
    opt = trainer.optimizer
    assert isinstance(opt, UltralyticsMuSGD)
    assert any("momentum_buffer_SGD" in s for s in opt.state.values()), "it stepped"
    # On a CPU the network stays eager: each training forward counted, with its reason.
    capture = trainer.musgd_network
    assert capture is not None
    assert trainer.musgd_network_reason is None
    assert dict(capture.stats.fallbacks) == {"device:cpu": 2}  # 8 images at batch 4
    weights = Path(trainer.save_dir) / "weights"
    assert (weights / "last.pt").is_file()
    # Trained channels-last, and its checkpoint loads into the stock YOLO as it is: the network
    # gives what its NCHW copy gives.
    assert trainer.musgd_channels_last is True
    conv = next(p for p in trainer.model.parameters() if p.dim() == 4)
    assert conv.is_contiguous(memory_format=torch.channels_last)
    stock = YOLO(weights / "last.pt").model.float().eval()
    nchw = copy.deepcopy(stock).to(memory_format=torch.contiguous_format)
    img = torch.rand(1, 3, 64, 64)
    with torch.no_grad():
        got, want = flatten(stock(img))[0], flatten(nchw(img))[0]
    assert len(got) == len(want) > 0
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_the_command_line_trains_a_task_named_by_task(tmp_path: Path) -> None:
    dataset = write_synthetic_dataset(
        tmp_path / "data", train_images=8, val_images=4, size=64, task="classify"
    )
    args = [f"{k}={v}" for k, v in _train_args(dataset.data, tmp_path, "cli").items()]
    assert main(["task=classify", *args]) == 0
    assert (tmp_path / "runs" / "cli" / "weights" / "last.pt").is_file()


@pytest.mark.parametrize("task", NON_DETECT)
def test_the_benchmark_pairs_stock_and_ours_on_each_task(tmp_path: Path, task: str) -> None:
    argv = ["ultralytics", "--device", "cpu", "--quick", "--task", task, "--batch-sizes", "4"]
    argv += ["--parts", "train", "--pairs", "1", "--lowdata", "off", "--iters", "4"]
    argv += ["--isolation", "none", "--amp", "false", "--out", str(tmp_path)]
    assert bench_main(argv) == 0
    document = json.loads((tmp_path / "ultralytics-train.json").read_text(encoding="utf-8"))
    results = document["results"]
    assert (results["task"], results["model"]) == (task, TASK_TRAINERS[task][2])
    (pair,) = results["variants"]["default"]["batches"]["4"]["pairs"]
    assert (pair["stock"]["optimizer"], pair["ours"]["optimizer"]) == ("MuSGD", "UltralyticsMuSGD")
    assert pair["ours"]["iterations"] == pair["stock"]["iterations"] == 4
    assert set(results["curves"]["loss"]["series"]) == {"stock seed 0", "ours seed 0"}


@pytest.mark.parametrize(
    ("argument", "message"),
    [
        ("epochs=0", "'epochs=0' is an invalid value. 'epochs' must be >= 1."),
        ("epochs=x", "'epochs=x' is of invalid type str."),
        ("bogus_key=1", "'bogus_key' is not a valid YOLO argument."),
        ("model=nope.yaml", "model=nope.yaml: 'nope.yaml' does not exist; name a model"),
    ],
)
def test_the_command_line_refuses_bad_train_arguments_in_one_line(
    argument: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # Ultralytics' own argument check, run first: exit 2 and its message, not a traceback
    # from inside training (the installed package answered so in a stranger's test).
    assert main([argument, "imgsz=64"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("musgd-yolo: ")
    assert message in err
