"""The recorded guarded EMA with real CUDA graphs: the eager passes' bits, skips included."""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest
import torch

from musgd._ema import FusedEMA
from musgd._replay import CudaGraphRecorder, GraphPool
from musgd.bench import same_bits

pytestmark = pytest.mark.cuda

# The trainer's decay schedule at its first updates and later on, and skips among them.
DECAYS = [0.0, 0.3, 0.55, 0.9, 0.999, 0.9999 * (1 - 2.718281828**-0.5), 0.9998, 0.99]
SKIPS = [0.0, 0.0, 1.0, 0.0, 1.0, 0.0, 0.0, 1.0]


def _pair(memory_format: torch.memory_format) -> tuple[torch.nn.Module, torch.nn.Module]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 64, 3),
        torch.nn.BatchNorm2d(64),
        torch.nn.Conv2d(64, 128, 3),
        torch.nn.BatchNorm2d(128),
        torch.nn.Linear(10, 7),
    ).cuda()
    model.to(memory_format=memory_format)  # type: ignore[call-overload]
    ema = copy.deepcopy(model).eval().requires_grad_(False)
    return ema, model


def _flag(flag: torch.Tensor) -> Callable[[torch.device], torch.Tensor]:
    """The guard's skip flag as the EMA asks for it."""
    return lambda _: flag


def _train(fused: FusedEMA, memory_format: torch.memory_format) -> torch.nn.Module:
    ema, model = _pair(memory_format)
    gen = torch.Generator(device="cuda").manual_seed(1)
    for step, (decay, skip) in enumerate(zip(DECAYS, SKIPS, strict=True)):
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn(p.shape, generator=gen, device="cuda").to(p) * 0.1)
            first = next(model.parameters())
            if step == 4:  # a skipped step's model holding NaN: the EMA must not take it
                first[(0,) * first.dim()] = float("nan")
            if step == 5:
                first[(0,) * first.dim()] = -0.0
        fused.update(ema, model, decay, skip=_flag(torch.tensor(skip, device="cuda")))
    torch.cuda.synchronize()
    return ema


@pytest.mark.parametrize("memory_format", [torch.contiguous_format, torch.channels_last])
@pytest.mark.parametrize("shared", [False, True])
def test_the_recorded_guarded_ema_gives_the_eager_bits(
    memory_format: torch.memory_format, shared: bool
) -> None:
    eager = _train(FusedEMA(), memory_format)
    pool = GraphPool() if shared else None
    recorder = CudaGraphRecorder(branches=1, pool=pool)
    fused = FusedEMA(recorder)
    if pool is not None:
        recorder.drops_with(fused.drop_recording)
    recorded = _train(fused, memory_format)
    assert fused.stats.recordings == 1, dict(fused.stats.fallbacks)
    assert fused.stats.replays == len(DECAYS) - 1
    for (name, a), b in zip(
        eager.state_dict().items(), recorded.state_dict().values(), strict=True
    ):
        assert same_bits(a, b), name
