"""The device loss against the installed Ultralytics criterion, as a black box, inside the real
trainer: every batch of a YOLO26n detection fit on the synthetic data is scored by both, and
their losses and their gradients with respect to the network's outputs must agree within
1e-5 relative (float32, CPU)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest
import torch

pytest.importorskip("ultralytics", reason="ultralytics is not installed: make test-ultralytics")
from yolo_loss_fakes import fresh_leaves

from musgd._yolo_loss import DeviceE2ELoss, device_loss_reason
from musgd.bench import _ul_plan
from musgd.bench._ul_runs import train_kwargs
from musgd.bench._yolo_data import write_synthetic_dataset
from musgd.ultralytics import main, musgd_trainer, task_trainer
from ultralytics import YOLO

TOLERANCE = 1e-5
BATCHES = 200


def _leaves(preds: Any) -> list[torch.Tensor]:
    return [preds[h][k] for h in ("one2many", "one2one") for k in ("boxes", "scores")]


def _relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm().clamp(min=1e-30))


def _args(data: Path, work: Path, *, batch: int, epochs: int) -> dict[str, Any]:
    parser = argparse.ArgumentParser()
    _ul_plan.add_arguments(parser)
    args = _ul_plan.configure(parser.parse_args(["--device", "cpu", "--quick", "--amp", "false"]))
    args.work = work
    return {**train_kwargs(args, data, batch=batch, epochs=epochs), "val": False}


def test_device_loss_matches_the_stock_criterion_on_every_trainer_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dataset = write_synthetic_dataset(tmp_path / "data", train_images=16, val_images=2, size=64)
    seen: list[tuple[float, float, float]] = []
    ours_call = DeviceE2ELoss.__call__

    def checked(self: DeviceE2ELoss, preds: Any, batch: Any) -> Any:
        out = ours_call(self, preds, batch)
        if "musgd_targets" in batch:
            twin = fresh_leaves(preds)
            mine, items = ours_call(self, twin, batch)
            theirs, their_items = self.stock(twin, batch)
            g_mine = torch.autograd.grad(mine.sum(), _leaves(twin))
            g_theirs = torch.autograd.grad(theirs.sum(), _leaves(twin))
            grad = max(_relative(a, b) for a, b in zip(g_mine, g_theirs, strict=True))
            item = max(_relative(items[k], their_items[k]) for k in their_items)
            seen.append((_relative(mine.detach(), theirs.detach()), item, grad))
        return out

    monkeypatch.setattr(DeviceE2ELoss, "__call__", checked)
    model = YOLO("yolo26n.yaml")
    # 16 images at batch 2: 8 batches an epoch, 25 epochs (the loss weights move each epoch).
    epochs = BATCHES // 8
    model.train(
        trainer=musgd_trainer(task_trainer("detect"), device_loss=True),
        **_args(dataset.data, tmp_path, batch=2, epochs=epochs),
    )
    trainer = model.trainer
    assert trainer.musgd_loss_reason is None
    assert len(seen) >= BATCHES
    worst = [max(column) for column in zip(*seen, strict=True)]
    print(
        f"device loss against stock over {len(seen)} batches: loss {worst[0]:.2e}, "
        f"items {worst[1]:.2e}, gradients {worst[2]:.2e}"
    )
    assert worst[0] <= TOLERANCE, f"loss differs by {worst[0]:.2e} relative"
    assert worst[1] <= TOLERANCE, f"loss items differ by {worst[1]:.2e} relative"
    assert worst[2] <= TOLERANCE, f"gradients differ by {worst[2]:.2e} relative"
    stock = trainer.model.criterion
    assert not isinstance(stock, DeviceE2ELoss), "the stock criterion is back after training"
    assert stock.o2m < 0.8, "the trainer moved the head weights, and ours read them"


@pytest.mark.parametrize("task", ["segment", "pose", "obb"])
def test_other_tasks_keep_the_stock_loss_with_the_reason(tmp_path: Path, task: str) -> None:
    dataset = write_synthetic_dataset(
        tmp_path / "data", train_images=4, val_images=2, size=64, task=task
    )
    model = YOLO(f"yolo26n-{'seg' if task == 'segment' else task}.yaml")
    model.train(
        trainer=musgd_trainer(task_trainer(task), device_loss=True),
        **_args(dataset.data, tmp_path, batch=4, epochs=1),
    )
    reason = model.trainer.musgd_loss_reason
    assert reason is not None
    assert "stay eager" in reason or "not YOLO26" in reason
    assert not isinstance(model.trainer.model.criterion, DeviceE2ELoss)


def test_the_stock_detection_criterion_is_covered() -> None:
    from ultralytics.cfg import get_cfg
    from ultralytics.nn.tasks import DetectionModel

    model = DetectionModel("yolo26n.yaml", nc=3, verbose=False)
    model.args = get_cfg()
    assert device_loss_reason(model.init_criterion()) is None


def test_musgd_yolo_refuses_a_device_loss_that_is_not_true_or_false(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["device_loss=maybe"]) == 2
    assert "device_loss= takes true or false" in capsys.readouterr().err


def test_with_the_network_captured_the_loss_is_recorded_where_cuda_is(tmp_path: Path) -> None:
    """On a CPU both stay eager, each training call counted with the reason."""
    dataset = write_synthetic_dataset(tmp_path / "data", train_images=8, val_images=2, size=64)
    model = YOLO("yolo26n.yaml")
    model.train(
        trainer=musgd_trainer(task_trainer("detect"), device_loss=True, capture_network=True),
        **_args(dataset.data, tmp_path, batch=4, epochs=1),
    )
    loss = model.trainer.musgd_loss
    assert isinstance(loss, DeviceE2ELoss)
    assert loss.capture is not None
    assert dict(loss.capture.stats.fallbacks) == {"device:cpu": 2}  # 8 images at batch 4
    assert loss.calls == 2
