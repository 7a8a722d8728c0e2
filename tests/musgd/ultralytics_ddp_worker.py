"""Spawned gloo ranks for tests/musgd/test_ultralytics_distributed.py: UltralyticsMuSGD with
``process_group`` (DDP), fed the same gradients on every rank, as DDP's all-reduce leaves them."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from distributed_worker import exit_now, gloo_rank
from torch import Tensor

from musgd.ultralytics import UltralyticsMuSGD

# Conv kernels of two shapes (the larger bucket splits across ranks), a tall matrix (its own
# Muon scale), a wide one, and vectors in an SGD group.
SHAPES = [(8, 3, 3, 3), (16, 8, 3, 3), (16, 8, 3, 3), (16, 8, 3, 3), (24, 6), (12, 20), (16,), (8,)]
MUON = 5  # the first five are matrices
STEPS = 4
KW: dict[str, Any] = {"lr": 0.05, "momentum": 0.9, "nesterov": True, "muon": 0.2, "sgd": 1.0}


def make(group: dist.ProcessGroup | None) -> tuple[list[torch.nn.Parameter], UltralyticsMuSGD]:
    gen = torch.Generator().manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(s, generator=gen)) for s in SHAPES]
    groups = [
        {"params": params[:MUON], "use_muon": True, "weight_decay": 5e-4},
        {"params": params[MUON:], "weight_decay": 0.0},
    ]
    return params, UltralyticsMuSGD(groups, process_group=group, **KW)


def train(params: Sequence[Tensor], opt: UltralyticsMuSGD) -> list[Tensor]:
    """``STEPS`` steps on seeded gradients; parameters, then both buffers of every parameter."""
    for step in range(STEPS):
        gen = torch.Generator().manual_seed(100 + step)
        for p in params:
            p.grad = torch.randn(p.shape, generator=gen)
        opt.step()
    state = [t.clone() for p in params for _, t in sorted(opt.state[p].items())]
    return [p.detach().clone() for p in params] + state


def main(rank: int, world: int, port: int, out: str) -> None:
    """Spawn target: results, and the items this rank orthogonalized, to ``<out>/rank<rank>.pt``."""
    with gloo_rank(rank, world, port):
        params, opt = make(dist.group.WORLD)
        final = train(params, opt)
        (plan,) = opt._sharded.plans()
        owned = [(i.bucket, i.start, i.stop) for i in plan.owned(rank)]
        torch.save({"final": final, "owned": owned}, Path(out) / f"rank{rank}.pt")
    exit_now()
