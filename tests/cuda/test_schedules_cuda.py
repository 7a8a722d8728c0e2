"""Every named Newton-Schulz schedule on the GPU: replay bit-identical to eager, both flavours,
and aol4 on a padded CUDA stack as each matrix alone (WP-023)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from musgd import MuSGD, NSConfig
from musgd.ultralytics import UltralyticsMuSGD

pytestmark = pytest.mark.cuda

DEVICE = torch.device("cuda")
# YOLO26n-like: conv kernels of several sizes (tall and wide views), a depthwise one, vectors.
SHAPES = [(32, 16, 3, 3), (64, 32, 1, 1), (16, 64, 1, 1), (48, 1, 3, 3), (80, 64), (32,), (64,)]


def make(flavour: str, config: NSConfig, **flags: Any) -> tuple[list[nn.Parameter], Any]:
    gen = torch.Generator(device=DEVICE).manual_seed(3)
    params = [nn.Parameter(torch.randn(s, generator=gen, device=DEVICE)) for s in SHAPES]
    matrices = [p for p in params if p.ndim >= 2]
    vectors = [p for p in params if p.ndim < 2]
    if flavour == "MuSGD":
        return params, MuSGD(
            [{"params": matrices}, {"params": vectors}], lr=0.02, ns=config, **flags
        )
    groups = [{"params": matrices, "use_muon": True}, {"params": vectors, "use_muon": False}]
    opt = UltralyticsMuSGD(groups, lr=0.01, momentum=0.9, nesterov=True, ns=config, **flags)
    return params, opt


@pytest.mark.parametrize("flavour", ["MuSGD", "UltralyticsMuSGD"])
@pytest.mark.parametrize("schedule", ["quintic", "polar_express", "aol4"])
@pytest.mark.parametrize("backend", ["auto", "torch", "gram"])
def test_each_schedule_replays_bit_identically(flavour: str, schedule: str, backend: str) -> None:
    # bf16 asked of the Gram iteration runs it in float16 (WP-023): replayed as eager too.
    config = NSConfig(coefficients=schedule, backend=backend, dtype=torch.bfloat16)
    ref_p, ref = make(flavour, config)
    rep_p, rep = make(flavour, config, capture_updates=True, capture_orthogonalization=True)
    for step in range(6):
        gen = torch.Generator(device=DEVICE).manual_seed(50 + step)
        for p, q in zip(ref_p, rep_p, strict=True):
            p.grad = torch.randn(p.shape, generator=gen, device=DEVICE)
            q.grad = p.grad.clone()
        ref.step()
        rep.step()
        torch.cuda.synchronize()
        for p, q in zip(ref_p, rep_p, strict=True):
            assert torch.equal(p, q), f"{schedule} step {step}"
    assert rep._replay.stats.replays > 0


def test_aol4_on_a_padded_cuda_stack_is_each_matrix_alone() -> None:
    """CUDA stacks mix tall and wide matrices (tall ones transposed): aol4 there must equal
    each matrix's own (float32, up to rounding)."""
    config = NSConfig(coefficients="aol4", backend="torch", dtype=torch.float32)
    alone_p, alone = make("MuSGD", config)
    alone._engine.pad_buckets = False
    stack_p, stacked = make("MuSGD", config)
    for step in range(3):
        gen = torch.Generator(device=DEVICE).manual_seed(70 + step)
        for p, q in zip(alone_p, stack_p, strict=True):
            p.grad = torch.randn(p.shape, generator=gen, device=DEVICE)
            q.grad = p.grad.clone()
        alone.step()
        stacked.step()
    for p, q in zip(alone_p, stack_p, strict=True):
        torch.testing.assert_close(q, p, rtol=1e-4, atol=1e-5)
