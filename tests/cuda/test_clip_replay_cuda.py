"""GradClipReplay with real CUDA graphs: the eager ``clip_grad_norm_`` bits on YOLO26n shapes."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from clip_common import compare_unscale_and_clip
from torch import Tensor

from musgd import GradClipReplay
from musgd.bench import same_bits

pytestmark = pytest.mark.cuda

_DATA = Path(__file__).resolve().parents[1] / "ultralytics" / "data"
SHAPES = json.loads((_DATA / "yolo26n_shapes.json").read_text(encoding="utf-8"))
ALL = [tuple(s) for key in ("matrices", "norm_weights", "biases") for s in SHAPES[key]]


def _params() -> list[torch.nn.Parameter]:
    return [torch.nn.Parameter(torch.zeros(s, device="cuda")) for s in ALL]


def _grads(step: int) -> list[Tensor]:
    gen = torch.Generator(device="cuda").manual_seed(step)
    scale = 0.001 if step % 3 == 0 else 1.0  # some steps below the bound: coefficient 1
    out = []
    for s in ALL:
        g = torch.randn(s, generator=gen, device="cuda") * scale
        # The Ultralytics trainer's conv gradients are channels-last.
        out.append(g.contiguous(memory_format=torch.channels_last) if len(s) == 4 else g)
    if step == 4:
        out[7].view(-1)[3] = math.inf
    return out


def _same(a: Tensor, b: Tensor) -> bool:
    return a.stride() == b.stride() and same_bits(a, b)


@pytest.mark.parametrize("norm_type", [2.0, math.inf])
def test_replayed_clip_matches_the_eager_call_bit_for_bit(norm_type: float) -> None:
    clip = GradClipReplay(10.0, norm_type)
    ours, eager = _params(), _params()
    for step in range(8):
        grads = _grads(step)
        for p, q, g in zip(ours, eager, grads, strict=True):
            p.grad = g.clone(memory_format=torch.preserve_format)
            q.grad = g.clone(memory_format=torch.preserve_format)
        held = [p.grad for p in ours]
        total = clip(ours)
        expected = torch.nn.utils.clip_grad_norm_(eager, 10.0, norm_type)
        assert _same(total, expected), step
        for p, q, g in zip(ours, eager, held, strict=True):  # type: ignore[assignment]
            assert p.grad is g
            assert q.grad is not None
            assert _same(g, q.grad), step
    assert clip.stats.recordings == 1
    assert clip.stats.replays == 7
    assert clip.stats.fallbacks == {"first-call": 1}


def test_replayed_clip_launches_no_per_gradient_kernels() -> None:
    """A replay is three launches (copy in, the graph, copy out) and a clone of the norm."""
    clip = GradClipReplay(10.0)
    params = _params()
    for step in range(3):
        for p, g in zip(params, _grads(step), strict=True):
            p.grad = g
        clip(params)
    for p, g in zip(params, _grads(5), strict=True):
        p.grad = g
    torch.cuda.synchronize()
    # acc_events: torch 2.11 warns (an error here) that events() without it sees one cycle.
    cpu = [torch.profiler.ProfilerActivity.CPU]
    with torch.profiler.profile(activities=cpu, acc_events=True) as prof:
        clip(params)
        torch.cuda.synchronize()
    names = [e.name for e in prof.events()]
    assert names.count("cudaGraphLaunch") == 1
    assert "aten::linalg_vector_norm" not in names
    assert "aten::_foreach_norm" not in names


def test_unscale_and_clip_in_place_matches_the_scaler_and_the_eager_clip_bit_for_bit() -> None:
    """YOLO26n's gradients at fixed memory (a captured network's): one CUDA graph, captured
    without a warm-up, unscales and clips them as ``GradScaler.unscale_`` and the eager clip
    do; the scaler's step skips the non-finite step and its update halves the scale alike."""
    clip = GradClipReplay(10.0)
    scales = compare_unscale_and_clip(
        clip, (_params(), _params()), lambda step: [g * 2.0**12 for g in _grads(step)], 8, 3
    )
    assert scales[4] < scales[3]  # step 4's inf halved the scale
    assert clip.stats.recordings == 1
    assert clip.stats.replays == 7
    assert clip.stats.failures == 0
