"""UltralyticsMuSGD replay with real CUDA graphs: bit-identical to eager over 200 warm-up steps."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from musgd.ultralytics import UltralyticsMuSGD

pytestmark = pytest.mark.cuda

_DATA = Path(__file__).resolve().parents[1] / "ultralytics" / "data"
SHAPES = json.loads((_DATA / "yolo26n_shapes.json").read_text(encoding="utf-8"))
KW: dict[str, Any] = {"lr": 0.01, "momentum": 0.937, "nesterov": True, "muon": 0.2, "sgd": 1.0}


def _params() -> list[torch.nn.Parameter]:
    gen = torch.Generator().manual_seed(0)
    return [
        torch.nn.Parameter((torch.randn(s, generator=gen) * 0.1).cuda())
        for key in ("matrices", "norm_weights", "biases")
        for s in SHAPES[key]
    ]


def _groups(params: list[torch.nn.Parameter]) -> list[dict[str, Any]]:
    m, n = len(SHAPES["matrices"]), len(SHAPES["norm_weights"])
    half = m // 2  # two muon groups, as the trainer's lr x 3 head groups make
    return [
        {"params": params[:half], "use_muon": True, "weight_decay": 5e-4, "param_group": "muon"},
        {"params": params[half:m], "use_muon": True, "weight_decay": 5e-4, "param_group": "muon"},
        {"params": params[m : m + n], "weight_decay": 0.0, "param_group": "bn"},
        {"params": params[m + n :], "weight_decay": 0.0, "param_group": "bias"},
    ]


@pytest.mark.parametrize("both", [False, True])
def test_replay_matches_eager_bit_for_bit_over_200_warmup_steps(both: bool) -> None:
    pe, pr = _params(), _params()
    eager = UltralyticsMuSGD(_groups(pe), **KW)
    replay = UltralyticsMuSGD(
        _groups(pr), capture_updates=True, capture_orthogonalization=both, **KW
    )
    gen = torch.Generator(device="cuda").manual_seed(1)
    for step in range(200):
        warm = min(1.0, (step + 1) / 100)
        for opt in (eager, replay):
            for i, group in enumerate(opt.param_groups):
                group["lr"] = KW["lr"] * warm * (3.0 if i == 1 else 1.0)
                group["momentum"] = 0.8 + (KW["momentum"] - 0.8) * warm
        for a, b in zip(pe, pr, strict=True):
            g = torch.randn(a.shape, device="cuda", generator=gen)
            a.grad, b.grad = g, g.clone()
        eager.step()
        replay.step()
        # One host sync per step: every parameter and buffer compared on the device.
        pairs = list(zip(pe, pr, strict=True))
        for a, b in zip(pe, pr, strict=True):
            pairs += [(t, replay.state[b][name]) for name, t in eager.state[a].items()]
        differs = torch.stack([torch.ne(x, y).any() for x, y in pairs]).any()
        assert not bool(differs), f"replay differs from eager at step {step}"
    stats = replay._replay.stats
    assert stats.recordings == 1, "one recording of the four groups; warm-up re-records nothing"
    assert stats.replays == 200 * 4  # counted per group prepared
    assert stats.failures == 0


# Relative error (of the parameter change, of a buffer) allowed between the Newton-Schulz
# backends: a few bf16 ulps, as tests/ultralytics/test_parity.py allows against the stock
# optimizer (the two backends round the same iteration at different points).
BF16_TOL = 5 * 2.0**-8


def _rel(a: torch.Tensor, b: torch.Tensor, scale: torch.Tensor) -> float:
    # Detached: parameters require grad, and float() of such a tensor warns.
    a, b, scale = a.detach(), b.detach(), scale.detach()
    return float((a.double() - b.double()).norm() / scale.double().norm().clamp_min(1e-30))


def test_triton_table_agrees_with_the_torch_backend_over_20_steps() -> None:
    """The default ``ns_backend="auto"`` runs each ``use_muon`` group as one Triton table with
    this flavour's Muon scales; ``"torch"`` runs batched cuBLAS products per bucket."""
    init = _params()
    pt = [torch.nn.Parameter(p.detach().clone()) for p in init]
    pc = [torch.nn.Parameter(p.detach().clone()) for p in init]
    triton_opt = UltralyticsMuSGD(_groups(pt), ns_backend="triton", **KW)
    torch_opt = UltralyticsMuSGD(_groups(pc), ns_backend="torch", **KW)
    gen = torch.Generator(device="cuda").manual_seed(2)
    for _ in range(20):
        for a, b in zip(pt, pc, strict=True):
            g = torch.randn(a.shape, device="cuda", generator=gen)
            a.grad, b.grad = g, g.clone()
        triton_opt.step()
        torch_opt.step()
    worst = {"param": 0.0, "momentum_buffer": 0.0, "momentum_buffer_SGD": 0.0}
    for a, b, p0 in zip(pt, pc, init, strict=True):
        worst["param"] = max(worst["param"], _rel(a, b, b.detach() - p0.detach()))
        for name, t in torch_opt.state[b].items():
            worst[name] = max(worst[name], _rel(triton_opt.state[a][name], t, t))
    assert worst["momentum_buffer"] == 0.0, worst  # Newton-Schulz never reads into it
    assert worst["param"] < BF16_TOL, worst
    assert worst["momentum_buffer_SGD"] < BF16_TOL, worst
