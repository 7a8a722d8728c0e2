"""The unscale-and-clip comparison shared by the CPU (fake recorder) and CUDA clip tests."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from musgd import GradClipReplay
from musgd.bench import same_bits


def same(a: Tensor, b: Tensor) -> bool:
    """The same strides and bytes."""
    return a.stride() == b.stride() and same_bits(a, b)


def compare_unscale_and_clip(
    clip: GradClipReplay,
    params: tuple[Sequence[torch.nn.Parameter], Sequence[torch.nn.Parameter]],
    grads_for: Callable[[int], list[Tensor]],
    steps: int,
    growth_interval: int = 2,
    first_elsewhere: bool = False,
) -> list[float]:
    """Step both parameter lists ``steps`` times with the scaled gradients ``grads_for(step)``
    (each step a plain SGD step through a GradScaler's step and update): the first's gradients
    at memory that stays put (handed over as new tensor objects on it, as a captured network
    hands them) through ``clip.unscale_and_clip``, the second's by ``GradScaler.unscale_`` and
    the eager clip. ``first_elsewhere``: the first step's gradients at memory of their own (as
    a trainer's first, eager batch gives them). Asserts the same bits every step (the total
    norm, the gradients, the parameters and the scale); returns the scale after each step."""
    ours, eager = params
    device = ours[0].device
    optimizers = [torch.optim.SGD(ps, lr=0.01) for ps in (ours, eager)]
    scalers = [
        torch.amp.GradScaler(device.type, init_scale=2.0**12, growth_interval=growth_interval)
        for _ in optimizers
    ]
    memory = [torch.empty_like(p, memory_format=torch.preserve_format) for p in grads_for(0)]
    scales = []
    for step in range(steps):
        grads = grads_for(step)
        for m, g in zip(memory, grads, strict=True):
            m.copy_(g)
        for p, q, m, g in zip(ours, eager, memory, grads, strict=True):
            p.grad = g.clone() if first_elsewhere and step == 0 else m.detach()
            q.grad = g.clone(memory_format=torch.preserve_format)
        for scaler in scalers:
            scaler.scale(torch.ones((), device=device))  # the scale made, as a loss makes it
        total = clip.unscale_and_clip(scalers[0], optimizers[0], ours)
        scalers[1].unscale_(optimizers[1])
        expected = torch.nn.utils.clip_grad_norm_(eager, clip.max_norm, clip.norm_type)
        assert same(total, expected), step
        for p, q in zip(ours, eager, strict=True):
            assert p.grad is not None
            assert q.grad is not None
            assert same(p.grad, q.grad), step
        for scaler, optimizer in zip(scalers, optimizers, strict=True):
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
        assert scalers[0].get_scale() == scalers[1].get_scale(), step
        assert all(same(p, q) for p, q in zip(ours, eager, strict=True)), step
        scales.append(scalers[0].get_scale())
    return scales
