"""Shared pieces of the CUDA replay tests: comparisons, determinism, a recording and a detector
training run."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar, Unpack

import torch
from replay_common import CaptureFlags
from torch import Tensor

from musgd import MuSGD, param_groups

T = TypeVar("T")
DEVICE = torch.device("cuda")

# The replay flag sets the CUDA tests run: each flag alone and both, with their test ids.
BOTH_FLAGS: CaptureFlags = {"capture_orthogonalization": True, "capture_updates": True}
REPLAY_FLAGS: list[CaptureFlags] = [
    {"capture_orthogonalization": True},
    {"capture_updates": True},
    BOTH_FLAGS,
]
REPLAY_FLAG_IDS = ["orth", "updates", "both"]
# The sets that record a group's whole update preparation.
UPDATE_FLAGS: list[CaptureFlags] = [{"capture_updates": True}, BOTH_FLAGS]


def recorded(run: Callable[[], T]) -> tuple[torch.cuda.CUDAGraph, T]:
    """``run`` warmed up once on a side stream, then captured: the graph and its output."""
    side = torch.cuda.Stream()  # type: ignore[no-untyped-call,unused-ignore]
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        run()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = run()
    return graph, captured


def deterministic(fn: Callable[[], T]) -> T:
    """Run ``fn`` with deterministic cuDNN and deterministic algorithms (warn-only for cuBLAS).

    The detector's loss indexes boxes by grid cell; two boxes in one cell make the backward an
    accumulating ``index_put_``, whose default CUDA kernel uses atomics (run-to-run bit noise).
    """
    saved = (
        torch.backends.cudnn.deterministic,
        torch.backends.cudnn.benchmark,
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
    )
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            return fn()
    finally:
        torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = saved[:2]
        torch.use_deterministic_algorithms(saved[2], warn_only=saved[3])


@dataclass(frozen=True)
class DetectorRun:
    """What a training run ends with: parameters, momentum buffers, the loss of every step."""

    params: list[Tensor]
    momentum: list[Tensor]
    losses: list[Tensor]
    stats: Any


def train_detector(
    *,
    steps: int,
    image_size: int,
    batch: int,
    warmup_schedule: bool = False,
    **flags: Unpack[CaptureFlags],
) -> DetectorRun:
    """Train the built-in nano detector with MuSGD under bf16 autocast; ``flags`` pick replay.

    ``warmup_schedule`` ramps momentum every step (as detector warm-ups do) and decays the
    learning rate with a scheduler, so replay must honour changing hyperparameters.
    """
    from musgd.bench import NanoDetector, detection_loss, synthetic_batch

    torch.manual_seed(0)
    model = NanoDetector().to(DEVICE).train()
    opt = MuSGD(param_groups(model, weight_decay=5e-4), lr=0.01, momentum=0.9, **flags)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (1.0 + 0.01 * s))
    gen = torch.Generator().manual_seed(0)
    batches = [synthetic_batch(batch, image_size, generator=gen, device=DEVICE) for _ in range(4)]
    losses = []
    for i in range(steps):
        if warmup_schedule:
            for group in opt.param_groups:
                group["momentum"] = 0.8 + 0.15 * min(1.0, i / max(1, steps // 2))
        b = batches[i % len(batches)]
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            predictions = model(b.images)
        loss = detection_loss(predictions, b.boxes)
        loss.backward()
        opt.step()
        if warmup_schedule:
            sched.step()
        losses.append(loss.detach())
    params = [p.detach().clone() for p in model.parameters()]
    momentum = [opt.state[p]["momentum_buffer"].clone() for p in model.parameters()]
    return DetectorRun(params, momentum, losses, opt._replay.stats)


def assert_runs_identical(a: DetectorRun, b: DetectorRun) -> None:
    """Byte-identical parameters, momentum buffers and losses."""
    for xs, ys in ((a.params, b.params), (a.momentum, b.momentum), (a.losses, b.losses)):
        assert len(xs) == len(ys)
        for x, y in zip(xs, ys, strict=True):
            assert torch.equal(x, y)
