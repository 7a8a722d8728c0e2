"""Worker processes for tests/musgd/test_distributed.py (spawned; gloo on CPU).

Each rank trains a small model with DDP and with FSDP2 ``fully_shard`` for a few steps, records
the gradients each step actually used, saves a ``torch.distributed.checkpoint`` half-way and
resumes from it, and writes everything the parent test compares to ``<out>/rank<k>.pt``.
"""

from __future__ import annotations

import contextlib
import copy
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import Tensor, nn
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.nn.parallel import DistributedDataParallel

import musgd._distributed as distributed
import musgd._functional as functional
from musgd import MuSGD, param_groups

STEPS = 4
SAVE_AFTER = 2
LR = 0.05
WEIGHT_DECAY = 0.01


class Net(nn.Module):
    """Matrices of awkward shapes: rows below and not divisible by the world size, a bucket."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 5, 3)  # (5, 3, 3, 3) -> 5 x 27: 5 rows split 2/2/1 or 3/2
        self.conv2 = nn.Conv2d(5, 2, 1, bias=False)  # 2 x 5: an empty shard at world size 3
        self.gain = nn.Parameter(torch.ones(2, 1, 1))  # a vector
        self.proj = nn.Linear(32, 8)
        self.blocks = nn.ModuleList(nn.Linear(8, 8) for _ in range(3))  # one bucket of three
        self.head = nn.Linear(8, 4)

    def forward(self, x: Tensor) -> Tensor:
        h = self.conv2(torch.relu(self.conv1(x))) * self.gain
        h = self.proj(h.flatten(1))
        for block in self.blocks:
            h = torch.tanh(block(h))
        out: Tensor = self.head(h)
        return out


def first_difference(a: list[Tensor], b: list[Tensor]) -> str | None:
    """Where two lists of tensors first differ (for assertion messages), or None."""
    assert len(a) == len(b)
    for k, (x, y) in enumerate(zip(a, b, strict=True)):
        if not torch.equal(x, y):
            return f"tensor {k}: max |diff| {(x - y).abs().max().item():.3g}"
    return None


def batch(step: int, rank: int) -> tuple[Tensor, Tensor]:
    """This rank's data for ``step`` (the same on every run)."""
    gen = torch.Generator().manual_seed(1000 * step + rank)
    return torch.randn(4, 3, 6, 6, generator=gen), torch.randn(4, 4, generator=gen)


def make_optimizer(model: nn.Module, group: dist.ProcessGroup | None) -> MuSGD:
    return MuSGD(
        param_groups(model, weight_decay=WEIGHT_DECAY),
        lr=LR,
        process_group=group,
        capture_orthogonalization=True,  # CPU: the replay orthogonalizer runs eagerly
    )


def full(t: Tensor) -> Tensor:
    """The whole tensor of a DTensor (a collective), else a copy."""
    gather = getattr(t, "full_tensor", None)
    return (gather() if callable(gather) else t).detach().clone()


def train(model: nn.Module, opt: MuSGD, steps: range, grads_log: list[list[Tensor]] | None) -> None:
    """Run ``steps``; log the full gradients each step used when ``grads_log`` is given."""
    rank = dist.get_rank()
    device = next(iter(model.parameters())).device
    for step in steps:
        x, y = (t.to(device) for t in batch(step, rank))
        loss = (model(x) - y).square().mean()
        loss.backward()
        if grads_log is not None:
            grads_log.append([full(p.grad).cpu() for p in model.parameters() if p.grad is not None])
        opt.step()
        opt.zero_grad(set_to_none=True)


def replay(model: nn.Module, opt: MuSGD, grads_log: list[list[Tensor]]) -> None:
    """Step ``opt`` on recorded gradients (plain tensors: the DDP case)."""
    params = list(model.parameters())
    for grads in grads_log:
        for p, g in zip(params, grads, strict=True):
            p.grad = g.clone()
        opt.step()
        opt.zero_grad(set_to_none=True)


def reference(init: nn.Module, grads_log: list[list[Tensor]]) -> list[Tensor]:
    """Single-process MuSGD fed the recorded gradients; returns params then momentum buffers."""
    model = copy.deepcopy(init)
    opt = MuSGD(param_groups(model, weight_decay=WEIGHT_DECAY), lr=LR)
    # The sharded step stacks same-shape matrices only (no zero-padded stacks, whose rounding
    # differs in the last bits): the reference runs the single-process body with that layout.
    opt._engine.pad_buckets = False
    params = list(model.parameters())
    for grads in grads_log:
        for p, g in zip(params, grads, strict=True):
            p.grad = g.clone()
        opt.step()
    return [p.detach().clone() for p in params] + [
        opt.state[p]["momentum_buffer"].clone() for p in params
    ]


def snapshot(model: nn.Module, opt: MuSGD) -> list[Tensor]:
    params = list(model.parameters())
    return [full(p) for p in params] + [full(opt.state[p]["momentum_buffer"]) for p in params]


def wrap(
    kind: str, init: nn.Module, device_type: str = "cpu"
) -> tuple[nn.Module, nn.Module, dist.ProcessGroup | None]:
    """(training module, module holding the parameters, process group for MuSGD)."""
    model = copy.deepcopy(init)
    if kind == "ddp":
        return DistributedDataParallel(model), model, dist.group.WORLD
    # An explicit mesh: on a machine with a GPU, fully_shard would otherwise pick CUDA.
    mesh = init_device_mesh(device_type, (dist.get_world_size(),))
    for block in model.blocks:  # type: ignore[union-attr]
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model, model, None


def run_case(kind: str, init: nn.Module, ckpt: Path) -> dict[str, Any]:
    """Train, checkpoint half-way, resume; return the snapshots and the reference."""
    trained, inner, group = wrap(kind, init)
    opt = make_optimizer(inner, group)
    grads_log: list[list[Tensor]] = []
    counts_before = COUNTS["matrices"]
    written_before = COUNTS["written"]
    nesterov_before = COUNTS["nesterov"]
    train(trained, opt, range(SAVE_AFTER), grads_log)
    model_sd, optim_sd = get_state_dict(inner, opt)
    dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=str(ckpt))  # type: ignore[attr-defined]
    train(trained, opt, range(SAVE_AFTER, STEPS), grads_log)
    orthogonalized = COUNTS["matrices"] - counts_before
    written = COUNTS["written"] - written_before
    nesterov = COUNTS["nesterov"] - nesterov_before
    final = snapshot(inner, opt)

    resumed, inner2, group2 = wrap(kind, init)
    opt2 = make_optimizer(inner2, group2)
    model_sd, optim_sd = get_state_dict(inner2, opt2)
    state: dict[str, Any] = {"model": model_sd, "optim": optim_sd}
    dcp.load(state, checkpoint_id=str(ckpt))  # type: ignore[attr-defined]
    set_state_dict(inner2, opt2, model_state_dict=state["model"], optim_state_dict=state["optim"])
    if kind == "ddp":
        # A fresh DDP wrapper rebuilds its gradient buckets after its first iteration, so at
        # world size 3 gloo's ring all-reduce sums in another order and the gradients differ in
        # the last bit. The optimizer is what is under test: replay the gradients it was given.
        replay(inner2, opt2, grads_log[SAVE_AFTER:])
    else:
        train(resumed, opt2, range(SAVE_AFTER, STEPS), None)
    return {
        "final": final,
        "resumed": snapshot(inner2, opt2),
        "reference": reference(init, grads_log),
        "orthogonalized": orthogonalized,
        "written": written,
        "nesterov": nesterov,
    }


COUNTS = {"matrices": 0, "written": 0, "nesterov": 0}


def count_matrices() -> None:
    """Count the matrices this rank orthogonalizes (every path ends in the eager batched call)."""
    original = functional.EagerOrthogonalizer.batched

    def counted(self: functional.EagerOrthogonalizer, G: Tensor, ns: Any) -> Tensor:
        COUNTS["matrices"] += G.shape[0]
        return original(self, G, ns)

    functional.EagerOrthogonalizer.batched = counted  # type: ignore[method-assign]


def count_written() -> None:
    """Count the parameter elements this rank's distributed step writes (step 5) and those it
    computes a Nesterov input for (step 2)."""
    original = distributed.apply_updates  # type: ignore[attr-defined]
    momentum = distributed.momentum_foreach  # type: ignore[attr-defined]

    def counted(params: Any, updates: Any, lr: float) -> None:
        COUNTS["written"] += sum(p.numel() for p in params)
        original(params, updates, lr)

    def counted_momentum(bufs: Any, grads: Any, hyper: Any, structure: Any) -> list[Tensor]:
        if structure.nesterov:
            COUNTS["nesterov"] += sum(b.numel() for b in bufs)
        return momentum(bufs, grads, hyper, structure)

    distributed.apply_updates = counted  # type: ignore[assignment,attr-defined]
    distributed.momentum_foreach = counted_momentum  # type: ignore[attr-defined]


def exit_now() -> None:
    """End a worker whose results are saved without the interpreter's finalization.

    On the 2-core CI machine a spawned gloo worker sometimes aborted after its last line
    ("terminate called without an active exception", SIGABRT) while its C++ threads were torn
    down at interpreter exit, after the results had been written and the group destroyed. The
    results are what the tests compare, bit for bit; the exit code stays 0 only on this path
    (an exception in the worker still fails the spawn).
    """
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


@contextlib.contextmanager
def gloo_rank(rank: int, world: int, port: int) -> Iterator[None]:
    """This spawned process as rank ``rank`` of a local gloo group of ``world``, one thread;
    on a clean exit every rank meets before the group is torn down."""
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        yield
        dist.barrier()  # no rank tears the group down while another still uses it
    finally:
        dist.destroy_process_group()


def main(rank: int, world: int, port: int, out: str) -> None:
    """Spawn target: both cases on this rank, results to ``<out>/rank<rank>.pt``."""
    with gloo_rank(rank, world, port):
        # Every bucket its own stage: the overlapped exchange runs with several stages in flight.
        distributed.STAGE_BYTES = 1
        count_matrices()
        count_written()
        torch.manual_seed(0)
        init = Net()
        results = {
            kind: run_case(kind, init, Path(out) / f"ckpt-{kind}") for kind in ("ddp", "fsdp")
        }
        torch.save(results, Path(out) / f"rank{rank}.pt")
    exit_now()
