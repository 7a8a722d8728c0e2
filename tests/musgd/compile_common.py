"""Shared by the CPU and CUDA compile tests: eager and ``torch.compile``-d steps side by side."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from musgd import MuSGD


def compiled_and_eager(
    shapes: list[tuple[int, ...]], device: torch.device, steps: int = 3, **options: Any
) -> tuple[list[Tensor], list[Tensor], MuSGD]:
    """Parameters after ``steps`` eager steps and after as many ``torch.compile(opt.step)``
    steps on the same gradients, and the compiled run's optimizer."""

    def make() -> list[nn.Parameter]:
        gen = torch.Generator().manual_seed(0)
        return [nn.Parameter(torch.randn(s, generator=gen).to(device)) for s in shapes]

    eager_p, compiled_p = make(), make()
    eager = MuSGD(eager_p, lr=0.05, weight_decay=0.01, **options)
    compiled = MuSGD(compiled_p, lr=0.05, weight_decay=0.01, **options)
    step = torch.compile(compiled.step)
    for k in range(steps):
        gen = torch.Generator().manual_seed(10 + k)
        grads = [torch.randn(s, generator=gen).to(device) for s in shapes]
        for a, b, g in zip(eager_p, compiled_p, grads, strict=True):
            a.grad, b.grad = g.clone(), g.clone()
        eager.step()
        step()
    return [p.detach() for p in eager_p], [p.detach() for p in compiled_p], compiled
