"""LossCapture's plumbing on the CPU, with a grapher that replays by running the loss on its
static copies (the CUDA recording itself: tests/cuda/test_loss_capture_cuda.py)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
import torch
from torch import Tensor

from musgd._loss_capture import LossCapture, LossFunction


class _Rerun:
    """A recording that runs ``fn`` again on static copies of the inputs at each replay."""

    def __init__(self, fn: LossFunction, inputs: Sequence[Tensor], wants: Sequence[bool]) -> None:
        self.fn = fn
        self.static = [
            x.detach().clone().requires_grad_(w) for x, w in zip(inputs, wants, strict=True)
        ]
        self.leaves = [x for x, w in zip(self.static, wants, strict=True) if w]
        self.total: Tensor | None = None

    def replay_forward(self, inputs: Sequence[Tensor]) -> tuple[Tensor, Tensor]:
        for s, x in zip(self.static, inputs, strict=True):
            s.detach().copy_(x)
        with torch.enable_grad():  # an autograd Function's forward runs without it
            self.total, items = self.fn(*self.static)
        return self.total.detach(), items.detach()

    def replay_backward(self, grad: Tensor | None) -> tuple[Tensor | None, ...]:
        assert self.total is not None
        g = torch.zeros_like(self.total) if grad is None else grad
        return torch.autograd.grad(self.total, self.leaves, g)


class _Grapher:
    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.recorded = 0

    def supports(self, device: torch.device) -> bool:
        return True

    def record(
        self, fn: LossFunction, inputs: Sequence[Tensor], wants_grad: Sequence[bool]
    ) -> _Rerun:
        if self.fail:
            raise RuntimeError("operation not permitted when stream is capturing")
        self.recorded += 1
        return _Rerun(fn, inputs, wants_grad)


def _loss(a: Tensor, b: Tensor, weights: Tensor) -> tuple[Tensor, Tensor]:
    parts = torch.stack(((a * b).sum(), a.pow(2).mean(), (b.sin() * weights[0]).sum()))
    return parts * weights[1], parts.detach()


def _inputs(seed: int) -> tuple[Tensor, Tensor, Tensor]:
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(3, 5, generator=g).requires_grad_()
    b = torch.randn(3, 5, generator=g).requires_grad_()
    return a, b, torch.tensor([0.8, 2.0])


def test_replayed_loss_and_gradients_are_the_eager_ones() -> None:
    grapher = _Grapher()
    capture = LossCapture(grapher)
    for seed in range(4):
        a, b, w = _inputs(seed)
        total, items = capture(_loss, (a, b, w))
        (total * torch.tensor([1.0, 2.0, 3.0])).sum().backward()
        ea, eb, ew = (x.detach().clone().requires_grad_(x.requires_grad) for x in (a, b, w))
        want, want_items = _loss(ea, eb, ew)
        (want * torch.tensor([1.0, 2.0, 3.0])).sum().backward()
        assert torch.equal(total, want)
        assert torch.equal(items, want_items)
        assert not items.requires_grad
        assert a.grad is not None
        assert ea.grad is not None
        assert torch.equal(a.grad, ea.grad)
        assert b.grad is not None
        assert eb.grad is not None
        assert torch.equal(b.grad, eb.grad)
        assert w.grad is None, "an input that needs no gradient gets none"
    # The first call runs eagerly, the second records, every later one replays.
    assert grapher.recorded == 1
    assert capture.stats.recordings == 1
    assert capture.stats.replays == 3
    assert dict(capture.stats.fallbacks) == {"first-call": 1}


def test_a_new_shape_records_its_own_and_no_grad_runs_eagerly() -> None:
    grapher = _Grapher()
    capture = LossCapture(grapher)
    a, b, w = _inputs(0)
    for _ in range(2):
        capture(_loss, (a, b, w))
    wide = (torch.randn(3, 7).requires_grad_(), torch.randn(3, 7).requires_grad_(), w)
    for _ in range(2):
        capture(_loss, wide)
    with torch.no_grad():
        total, _ = capture(_loss, (a, b, w))
    assert not total.requires_grad
    assert grapher.recorded == 2
    assert capture.stats.fallbacks["no-grad"] == 1


def test_a_failed_recording_warns_once_and_its_shape_stays_eager() -> None:
    capture = LossCapture(_Grapher(fail=True))
    a, b, w = _inputs(0)
    capture(_loss, (a, b, w))
    with pytest.warns(RuntimeWarning, match="LossCapture: recording the loss failed"):
        total, _ = capture(_loss, (a, b, w))
    assert torch.equal(total, _loss(a, b, w)[0])
    capture(_loss, (a, b, w))
    assert capture.stats.failures == 1
    assert capture.stats.replays == 0


def test_the_cuda_grapher_declines_other_devices() -> None:
    capture = LossCapture()
    a, b, w = _inputs(0)
    capture(_loss, (a, b, w))
    assert dict(capture.stats.fallbacks) == {"device:cpu": 1}
