"""A tiny network shaped like an Ultralytics detector's, and an eager training loop, for the
network-capture tests on the CPU (tests/musgd) and on the GPU (tests/cuda)."""

from __future__ import annotations

import copy
from typing import Any, TypeVar

import torch
from torch import Tensor, nn

from musgd._network_capture import NetworkCapture, NetworkGrapher
from musgd.bench import same_bits


class TinyDetector(nn.Module):
    """A network with the Ultralytics shape of output: nested dicts, a shared and a detached
    tensor, BatchNorm statistics, and a parameter the output does not use.

    The one-to-one head is a head of its own, as in YOLO26, or with ``share_head`` the
    one-to-many head used a second time (a weight used twice in one forward).
    """

    def __init__(self, *, share_head: bool = False) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.head = nn.Conv2d(4, 2, 1)
        self.head_one2one = self.head if share_head else nn.Conv2d(4, 2, 1)
        self.unused = nn.Parameter(torch.ones(3))

    def predict(self, img: Tensor, *args: Any, **kwargs: Any) -> Any:
        feats = torch.relu(self.bn(self.conv(img)))
        boxes = self.head(feats)
        return {
            "one2many": {"boxes": boxes, "feats": [feats]},
            "one2one": {"boxes": self.head_one2one(feats.detach()), "feats": [feats.detach()]},
        }

    def forward(self, img: Tensor) -> Any:
        return self.predict(img)


def detector_loss(out: Any) -> Tensor:
    loss: Tensor = (
        out["one2many"]["boxes"].square().mean()
        + out["one2one"]["boxes"].abs().mean()
        + out["one2many"]["feats"][0].mean()
    )
    return loss


def train_detector(
    model: TinyDetector, imgs: list[Tensor], *, amp: bool = False, accumulate: int = 1
) -> list[float]:
    """SGD on ``imgs``, a step every ``accumulate`` backwards (gradients summed in between),
    under float16 autocast with ``amp`` (CUDA); the losses.

    Each iteration's loss, and the autograd graph with it, stays alive into the next forward,
    as in the Ultralytics trainer (a recording must not depend on that graph's being gone).
    """
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for i, img in enumerate(imgs, start=1):
        with torch.autocast(img.device.type, dtype=torch.float16, enabled=amp):
            loss = detector_loss(model(img))
        loss.backward()
        if i % accumulate == 0:
            opt.step()
            opt.zero_grad()
        losses.append(loss.item())
    return losses


def detector_inputs(n: int, batch: int = 2) -> list[Tensor]:
    g = torch.Generator().manual_seed(0)
    return [torch.randn(batch, 3, 8, 8, generator=g) for _ in range(n)]


def module_state(model: nn.Module) -> list[Tensor]:
    return [t.detach().clone() for t in (*model.parameters(), *model.buffers())]


def same_tensors(a: list[Tensor], b: list[Tensor]) -> bool:
    """Every pair the same bits (:func:`musgd.bench.same_bits`)."""
    return len(a) == len(b) and all(map(same_bits, a, b))


_M = TypeVar("_M", bound=nn.Module)


def captured_copy(model: _M, grapher: NetworkGrapher | None = None) -> tuple[_M, NetworkCapture]:
    """A deep copy of ``model`` with a :class:`NetworkCapture` installed (the CUDA grapher
    unless ``grapher`` is given), and the capture."""
    captured = copy.deepcopy(model)
    return captured, NetworkCapture(captured, grapher=grapher).install()
