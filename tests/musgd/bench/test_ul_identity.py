"""The trainer benchmark's identity checks on their own (the trainer runs are in
``tests/ultralytics/test_gpu_script.py``): each must pass the eager bits and flag a difference."""

from __future__ import annotations

from typing import Any

import torch

from musgd import GradClipReplay
from musgd.bench import _ul_identity as identity
from musgd.ultralytics import UltralyticsMuSGD


def test_warmup_span() -> None:
    assert identity.warmup_span([0.8, 0.85, 0.9, 0.937, 0.937]) == 3
    assert identity.warmup_span([0.937, 0.937]) == 0
    assert identity.warmup_span([0.8, 0.9]) == 1
    assert identity.warmup_span([]) == 0


def test_clip_check_passes_the_eager_bits_and_flags_a_wrong_clip() -> None:
    params = [torch.nn.Parameter(torch.zeros(4, 3, 3, 3)), torch.nn.Parameter(torch.zeros(4))]

    def set_grads(nan: bool) -> None:
        gen = torch.Generator().manual_seed(1)
        for p in params:
            p.grad = torch.randn(p.shape, generator=gen) * 50
        if nan:
            params[1].grad[0] = float("nan")  # type: ignore[index]  # an overflowed AMP step: the total norm is NaN

    check = identity.ClipCheck(GradClipReplay(10.0))
    for nan in (False, True, False):
        set_grads(nan)
        check(params)
    assert (check.calls, check.mismatched) == (3, [])

    class Wrong(GradClipReplay):
        def __call__(self, parameters: Any) -> torch.Tensor:
            return torch.nn.utils.clip_grad_norm_(list(parameters), 9.0)

    wrong = identity.ClipCheck(Wrong(10.0))
    set_grads(False)
    wrong(params)
    assert wrong.mismatched == [0]


def test_shadow_check_flags_a_step_that_differs_from_the_eager_twin() -> None:
    w = torch.nn.Parameter(torch.randn(8, 4))
    opt = UltralyticsMuSGD([{"params": [w], "use_muon": True}], lr=0.1, momentum=0.9)
    check = identity.ShadowCheck(opt)
    w.grad = torch.randn(8, 4)
    opt.step()
    assert check.mismatched == []
    w.grad = torch.randn(8, 4)
    with torch.no_grad():
        check.shadow[0].add_(1e-3)  # the eager twin drifts: the next step must be flagged
    opt.step()
    assert check.mismatched == [1]
    assert check.lr_trace == [0.1, 0.1]
