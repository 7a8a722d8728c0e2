"""Stand-ins for the stock YOLO26 criterion and a detector's outputs, for the device loss's
tests (CPU and CUDA)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import torch

from musgd._yolo_loss import BUCKET_MIN, TARGETS_KEY, VALID_KEY, padded_targets

STRIDES = (8.0, 16.0, 32.0)


class v8DetectionLoss:  # noqa: N801 - the stock head's class name, which the loss checks
    def __init__(self, topk: int, topk2: int) -> None:
        self.reg_max = 1
        self.class_weights: torch.Tensor | None = None
        self.assigner = SimpleNamespace(
            topk=topk, topk2=topk2, alpha=0.5, beta=6.0, eps=1e-9, stride_val=16.0
        )
        self.hyp = SimpleNamespace(box=7.5, cls=0.5, dfl=1.5)
        self.stride = torch.tensor(STRIDES)
        self.loss_names = ("box_loss", "cls_loss", "l1_loss")


class FakeE2ELoss:
    """The stock end-to-end criterion's attributes, as the device loss reads them."""

    def __init__(self) -> None:
        self.one2many = v8DetectionLoss(10, 10)
        self.one2one = v8DetectionLoss(7, 1)
        self.o2m, self.o2o = 0.8, 0.2
        self.updates = 0
        self.called = 0

    def update(self) -> None:
        self.updates += 1
        self.o2m, self.o2o = self.o2m - 0.1, self.o2o + 0.1

    def __call__(self, preds: Any, batch: Any) -> Any:
        self.called += 1
        return torch.zeros(3), {}


def predictions(
    batch: int, size: int, classes: int, seed: int, device: str | torch.device = "cpu"
) -> dict[str, Any]:
    """Both heads' outputs of a batch of ``size`` px images, as leaves that require grad."""
    g = torch.Generator().manual_seed(seed)
    feats = [torch.zeros(batch, 1, size // int(s), size // int(s), device=device) for s in STRIDES]
    anchors = sum(f.shape[2] * f.shape[3] for f in feats)
    heads = {}
    for name in ("one2many", "one2one"):
        boxes = (torch.rand(batch, 4, anchors, generator=g) * 3).to(device).requires_grad_()
        scores = (torch.randn(batch, classes, anchors, generator=g) - 2).to(device)
        scores.requires_grad_()
        heads[name] = {"boxes": boxes, "scores": scores, "feats": feats}
    return heads


def batch(counts: list[int], classes: int, seed: int) -> dict[str, torch.Tensor]:
    """A loader's detection targets (sorted by image), on the host."""
    g = torch.Generator().manual_seed(seed)
    n = sum(counts)
    index = torch.repeat_interleave(torch.arange(len(counts)), torch.tensor(counts)).float()
    xy = torch.rand(n, 2, generator=g) * 0.6 + 0.2
    wh = torch.rand(n, 2, generator=g) * 0.4 + 0.01
    cls = torch.randint(0, classes, (n, 1), generator=g).float()
    return {"batch_idx": index, "cls": cls, "bboxes": torch.cat((xy, wh), 1)}


def with_targets(
    batch: dict[str, torch.Tensor], size: int, bucket: int = BUCKET_MIN, device: str = "cpu"
) -> Any:
    """``batch`` with its padded targets, as the trainer adds them (then on ``device``)."""
    rows, valid = padded_targets(batch["batch_idx"], batch["cls"], batch["bboxes"], size, bucket)
    return {**batch, TARGETS_KEY: rows.to(device), VALID_KEY: valid.to(device)}


def fresh_leaves(preds: dict[str, Any]) -> dict[str, Any]:
    """Both heads' boxes and scores as new leaves that require grad (their feature maps kept)."""
    return {
        h: {
            "boxes": preds[h]["boxes"].detach().clone().requires_grad_(),
            "scores": preds[h]["scores"].detach().clone().requires_grad_(),
            "feats": preds[h]["feats"],
        }
        for h in ("one2many", "one2one")
    }
