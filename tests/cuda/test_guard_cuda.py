"""``skip_nonfinite`` on the GPU: eager, replayed and the whole step in one CUDA graph, bit for
bit against a run that simply is not stepped at the poisoned steps, with no host read."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import Tensor, nn

from musgd import MuSGD
from musgd.bench._syncs import PROTOTYPE_WARNING
from musgd.ultralytics import UltralyticsMuSGD

pytestmark = pytest.mark.cuda

DEVICE = torch.device("cuda")
# YOLO26-like: conv kernels, a depthwise one, a matrix, BatchNorm weights and biases.
SHAPES = [(32, 16, 3, 3), (64, 32, 1, 1), (48, 1, 3, 3), (80, 64), (32,), (64,), (48,)]
POISONED = {2: float("nan"), 5: float("inf"), 6: float("-inf")}
STEPS = 10


def make(flavour: str, backend: str, **options: Any) -> tuple[list[nn.Parameter], Any]:
    gen = torch.Generator(device=DEVICE).manual_seed(1)
    params = [nn.Parameter(torch.randn(s, generator=gen, device=DEVICE)) for s in SHAPES]
    matrices = [p for p in params if p.ndim >= 2]
    vectors = [p for p in params if p.ndim < 2]
    if flavour == "MuSGD":
        groups = [{"params": matrices}, {"params": vectors}]
        return params, MuSGD(groups, lr=0.02, ns_backend=backend, **options)
    ugroups = [{"params": matrices, "use_muon": True}, {"params": vectors, "use_muon": False}]
    opt = UltralyticsMuSGD(
        ugroups,
        lr=0.01,
        momentum=0.9,
        nesterov=True,
        weight_decay=5e-4,
        ns_backend=backend,
        **options,
    )
    return params, opt


def gradients(step: int) -> list[Tensor]:
    gen = torch.Generator(device=DEVICE).manual_seed(100 + step)
    grads = [torch.randn(s, generator=gen, device=DEVICE) for s in SHAPES]
    if step in POISONED:
        grads[step % len(grads)].view(-1)[7] = POISONED[step]
    return grads


def bits(t: Tensor) -> Tensor:
    return t.detach().reshape(-1).view(torch.uint8)


@pytest.mark.parametrize("flavour", ["MuSGD", "UltralyticsMuSGD"])
@pytest.mark.parametrize("backend", ["torch", "triton"])
@pytest.mark.parametrize("mode", ["eager", "replay-flags", "whole-step-graph"])
def test_guarded_steps_are_the_unpoisoned_run_bit_for_bit(
    flavour: str, backend: str, mode: str
) -> None:
    if backend == "triton":
        pytest.importorskip("triton")
    flags = {"capture_updates": True, "capture_orthogonalization": True}
    ref_p, ref = make(flavour, backend, **(flags if mode == "replay-flags" else {}))
    params, opt = make(
        flavour, backend, skip_nonfinite=True, **(flags if mode == "replay-flags" else {})
    )
    for p in params:  # static gradients, as a captured training step reads them
        p.grad = torch.zeros_like(p)
    graph = torch.cuda.CUDAGraph()
    step_fn: Callable[[], object] = opt.step
    for step in range(STEPS):
        grads = gradients(step)
        for p, g in zip(params, grads, strict=True):
            p.grad.copy_(g)  # type: ignore[union-attr]
        if step not in POISONED:
            for p, g in zip(ref_p, grads, strict=True):
                p.grad = g.clone()
            ref.step()
        if mode == "whole-step-graph" and step == 1:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                opt.step()  # the capture's warm-up runs one (finite) step
            torch.cuda.current_stream().wait_stream(side)
            # The warm-up took step 1; the reference took it too. Record without stepping:
            snapshot = [p.detach().clone() for p in params]
            state = {id(p): {k: v.clone() for k, v in opt.state[p].items()} for p in params}
            with torch.cuda.graph(graph):
                opt.step()
            # Capturing runs nothing: the state is the warm-up's.
            assert all(torch.equal(a, b) for a, b in zip(params, snapshot, strict=True))
            assert all(
                torch.equal(opt.state[p][k], v) for p in params for k, v in state[id(p)].items()
            )
            step_fn = graph.replay
            continue
        if step >= 3:  # steady state: any host synchronization is an error
            try:
                with warnings.catch_warnings():  # setting the mode warns that it is a prototype
                    warnings.filterwarnings("ignore", message=PROTOTYPE_WARNING)
                    torch.cuda.set_sync_debug_mode("error")
                step_fn()
            finally:
                torch.cuda.set_sync_debug_mode("default")
        else:
            step_fn()
    torch.cuda.synchronize()
    for p, q in zip(params, ref_p, strict=True):
        assert torch.equal(bits(p), bits(q))
        for key in ref.state[q]:
            assert torch.equal(bits(opt.state[p][key]), bits(ref.state[q][key])), key
    assert int(opt.skipped_steps) == len(POISONED)
