"""The device loss's own logic, without Ultralytics: target padding, CIoU, static shapes and no
host reads. Its agreement with the installed criterion is in tests/ultralytics."""

from __future__ import annotations

import math

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from yolo_loss_fakes import FakeE2ELoss as _Stock
from yolo_loss_fakes import batch as _batch
from yolo_loss_fakes import predictions as _preds
from yolo_loss_fakes import v8DetectionLoss
from yolo_loss_fakes import with_targets as _with_targets

from musgd._yolo_loss import (
    BUCKET_MIN,
    DeviceE2ELoss,
    HostItems,
    ciou,
    device_loss_reason,
    padded_targets,
)


class _NoHostReads(TorchDispatchMode):
    """Fails on anything that reads a device value back or sizes a result by one."""

    REFUSED = frozenset(
        {
            torch.ops.aten._local_scalar_dense.default,
            torch.ops.aten.nonzero.default,
            torch.ops.aten.masked_select.default,
        }
    )

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.calls = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        if func in self.REFUSED:
            raise AssertionError(f"{func} reads the device back")
        self.calls += 1
        return func(*args, **(kwargs or {}))


def test_targets_are_padded_per_image_in_their_order_to_a_power_of_two() -> None:
    batch = _batch([3, 0, 9], classes=4, seed=0)
    rows, valid = padded_targets(batch["batch_idx"], batch["cls"], batch["bboxes"], 3)
    assert rows.shape == (3, 16, 5)  # 9 targets: the next power of two
    assert valid.sum(1).tolist() == [3, 0, 9]
    assert torch.equal(rows[0, :3, 1:], batch["bboxes"][:3])
    assert torch.equal(rows[2, :9, 0], batch["cls"][3:, 0])
    assert not rows[~valid].any(), "padding is zeros"
    empty = _batch([0, 0], classes=4, seed=0)
    rows, valid = padded_targets(empty["batch_idx"], empty["cls"], empty["bboxes"], 2)
    assert rows.shape == (2, BUCKET_MIN, 5)
    assert not valid.any()


def test_ciou_of_known_boxes() -> None:
    box = torch.tensor([0.0, 0.0, 4.0, 2.0])
    assert ciou(box, box).item() == pytest.approx(1.0, abs=1e-6)
    far = torch.tensor([10.0, 0.0, 14.0, 2.0])
    # Disjoint, same shape: IoU 0, centre distance 10 over the 14 x 2 enclosing box's diagonal.
    assert ciou(box, far).item() == pytest.approx(-(100 / (14**2 + 2**2)), rel=1e-5)
    square = torch.tensor([0.0, 0.0, 2.0, 2.0])
    v = 4 / math.pi**2 * (math.atan(1.0) - math.atan(2.0)) ** 2
    iou = 0.5
    want = iou - (1.0 / (4**2 + 2**2) + v * v / (v - iou + 1))
    assert ciou(box, square).item() == pytest.approx(want, rel=1e-4)


def test_the_loss_makes_no_host_read_and_its_bucket_does_not_change_a_bit() -> None:
    stock = _Stock()
    loss = DeviceE2ELoss(stock)
    preds = _preds(3, 64, classes=5, seed=1)
    batch = _batch([2, 0, 5], classes=5, seed=2)
    padded = _with_targets(batch, 3)  # on the host, as the trainer pads before the copy
    loss(preds, padded)  # the grid is made at the first call
    mode = _NoHostReads()
    with mode:
        total, items = loss(preds, padded)
        total.sum().backward()
    assert mode.calls > 0
    grads = [preds[h][k].grad.clone() for h in preds for k in ("boxes", "scores")]
    for h in preds:
        for k in ("boxes", "scores"):
            preds[h][k].grad = None
    wider, wider_items = loss(preds, _with_targets(batch, 3, bucket=32))
    wider.sum().backward()
    assert torch.equal(total, wider)
    assert all(torch.equal(items[k], wider_items[k]) for k in items)
    again = [preds[h][k].grad for h in preds for k in ("boxes", "scores")]
    assert all(torch.equal(a, b) for a, b in zip(grads, again, strict=True))
    assert set(items) == {"box_loss", "cls_loss", "l1_loss"}
    assert stock.called == 0


def test_the_head_weights_are_the_stock_criterions_at_each_call() -> None:
    stock = _Stock()
    loss = DeviceE2ELoss(stock)
    preds = _preds(2, 64, classes=3, seed=3)
    batch = _with_targets(_batch([3, 1], classes=3, seed=4), 2)
    before = loss(preds, batch)[0]
    loss.update()  # reaches the stock criterion, as the trainer's call does
    assert stock.updates == 1
    after = loss(preds, batch)[0]
    assert not torch.equal(before, after)
    many = loss(preds, {**batch})[0]
    assert torch.equal(after, many)


def test_assigned_targets_pull_the_boxes_toward_them() -> None:
    """The gradient points where the losses say: a step against it lowers the loss."""
    loss = DeviceE2ELoss(_Stock())
    preds = _preds(2, 64, classes=3, seed=5)
    batch = _with_targets(_batch([4, 2], classes=3, seed=6), 2)
    total = loss(preds, batch)[0].sum()
    total.backward()
    with torch.no_grad():
        for head in preds.values():
            for key in ("boxes", "scores"):
                head[key] -= 1e-3 * head[key].grad
    assert loss(preds, batch)[0].sum() < total


def test_a_batch_without_padded_targets_goes_to_the_stock_criterion() -> None:
    stock = _Stock()
    loss = DeviceE2ELoss(stock)
    loss(_preds(1, 64, classes=3, seed=7), _batch([1], classes=3, seed=8))
    assert stock.called == 1


def test_losses_it_does_not_cover_are_refused_with_the_reason() -> None:
    assert device_loss_reason(object()) == (
        "the loss is object, not YOLO26's end-to-end detection loss"
    )
    stock = _Stock()
    stock.one2many.reg_max = 16
    assert "DFL" in (device_loss_reason(stock) or "")
    stock = _Stock()
    stock.one2one.class_weights = torch.ones(3)
    assert "class weights" in (device_loss_reason(stock) or "")

    class v8SegmentationLoss(v8DetectionLoss):  # noqa: N801
        pass

    stock = _Stock()
    stock.one2many = v8SegmentationLoss(10, 10)
    assert "v8SegmentationLoss" in (device_loss_reason(stock) or "")
    with pytest.raises(TypeError, match="DeviceE2ELoss: a head's loss is v8SegmentationLoss"):
        DeviceE2ELoss(stock)


class _Event:
    """A stand-in CUDA event whose completion the test decides."""

    def __init__(self, log: list[str]) -> None:
        self.log = log
        self.done = False

    def record(self) -> None:
        self.done = False

    def query(self) -> bool:
        return self.done

    def synchronize(self) -> None:
        self.log.append("wait")
        self.done = True


def test_host_items_answer_the_newest_finished_copy_and_wait_only_once() -> None:
    log: list[str] = []
    events: list[_Event] = []

    def make() -> _Event:
        events.append(_Event(log))
        return events[-1]

    items = HostItems(slots=3, event=make)
    first = items.push(torch.tensor([1.0, 2.0, 3.0]))
    assert first.tolist() == [1.0, 2.0, 3.0]
    assert log == ["wait"], "the first call waits, once"
    # Nothing newer has finished: the last answer stands, and nothing waits.
    assert items.push(torch.tensor([4.0, 5.0, 6.0])).tolist() == [1.0, 2.0, 3.0]
    third = items.push(torch.tensor([7.0, 8.0, 9.0]))
    assert third.tolist() == [1.0, 2.0, 3.0]
    events[1].done = events[2].done = True  # the device finished the second and third copies
    fourth = items.push(torch.tensor([10.0, 11.0, 12.0]))  # reuses the first slot
    assert fourth.tolist() == [7.0, 8.0, 9.0]
    assert log == ["wait"]
    assert first.tolist() == [1.0, 2.0, 3.0], "an answer is the caller's own copy"
    with pytest.raises(ValueError, match="2 or more slots"):
        HostItems(slots=1)


def test_float16_outputs_give_the_float32_loss_finite() -> None:
    """Autocast hands the loss float16 outputs; computed in float16 the loss was NaN here
    (CIoU's eps of 1e-7 rounds away) and on the H200 at batch 16. It is the loss of float32
    copies, bit for bit, and its gradients come back in float16."""
    loss = DeviceE2ELoss(_Stock())
    for seed in range(4):
        preds = _preds(4, 128, classes=5, seed=seed)
        half = {
            h: {
                "boxes": preds[h]["boxes"].detach().half().requires_grad_(),
                "scores": preds[h]["scores"].detach().half().requires_grad_(),
                "feats": preds[h]["feats"],
            }
            for h in preds
        }
        full = {
            h: {
                "boxes": half[h]["boxes"].detach().float(),
                "scores": half[h]["scores"].detach().float(),
                "feats": preds[h]["feats"],
            }
            for h in preds
        }
        padded = _with_targets(_batch([3, 0, 7, 30], classes=5, seed=seed), 4)
        total, _ = loss(half, padded)
        assert torch.equal(total, loss(full, padded)[0])
        total.sum().backward()
        for head in half.values():
            for key in ("boxes", "scores"):
                grad = head[key].grad
                assert grad is not None
                assert grad.dtype == torch.float16
                assert torch.isfinite(grad).all()
