"""Worker processes for the cross-world-size checkpoint tests (spawned; gloo on CPU or NCCL).

``save`` runs at world size 2: each case (DDP, FSDP2) trains ``SAVE_AFTER`` steps, writes a
``torch.distributed.checkpoint``, trains on to ``STEPS`` and records the gradients those last
steps used and the final state. ``resume`` runs at any world size: it loads the checkpoint into a
fresh model and optimizer (``torch.distributed.checkpoint`` reshards it) and steps on the recorded
gradients. Both write ``<out>/<phase>-w<world>-rank<k>.pt`` for the parent test to compare.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from distributed_worker import SAVE_AFTER, STEPS, Net, exit_now, snapshot, train, wrap
from torch import Tensor, nn
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.tensor import DTensor, Shard, distribute_tensor

from musgd import MuSGD, param_groups
from musgd._distributed import BALANCES

LR = 0.05
WEIGHT_DECAY = 0.01
# DDP balances measured seconds, FSDP2 FLOPs: the plan must not matter to the bits on resume.
BALANCE = {"ddp": BALANCES[1], "fsdp": BALANCES[0]}


def make_optimizer(kind: str, model: nn.Module, group: dist.ProcessGroup | None) -> MuSGD:
    return MuSGD(
        param_groups(model, weight_decay=WEIGHT_DECAY),
        lr=LR,
        process_group=group,
        capture_orthogonalization=True,
        shard_balance=BALANCE[kind],
    )


def step_on(model: nn.Module, opt: MuSGD, grads_log: list[list[Tensor]]) -> None:
    """Step ``opt`` on recorded full gradients, sharded like each parameter."""
    params = list(model.parameters())
    for grads in grads_log:
        for p, g in zip(params, grads, strict=True):
            if isinstance(p, DTensor):
                p.grad = distribute_tensor(g.to(p.device), p.device_mesh, [Shard(0)])
            else:
                p.grad = g.to(p.device).clone()
        opt.step()
        opt.zero_grad(set_to_none=True)


def save_case(kind: str, init: nn.Module, ckpt: Path) -> dict[str, Any]:
    trained, inner, group = wrap(kind, init, device_type())
    opt = make_optimizer(kind, inner, group)
    train(trained, opt, range(SAVE_AFTER), None)
    model_sd, optim_sd = get_state_dict(inner, opt)
    dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=str(ckpt))  # type: ignore[attr-defined]
    grads_log: list[list[Tensor]] = []
    train(trained, opt, range(SAVE_AFTER, STEPS), grads_log)
    return {"final": [t.cpu() for t in snapshot(inner, opt)], "grads": grads_log}


def resume_case(kind: str, init: nn.Module, ckpt: Path, grads: list[list[Tensor]]) -> list[Tensor]:
    _, inner, group = wrap(kind, init, device_type())
    opt = make_optimizer(kind, inner, group)
    model_sd, optim_sd = get_state_dict(inner, opt)
    state: dict[str, Any] = {"model": model_sd, "optim": optim_sd}
    dcp.load(state, checkpoint_id=str(ckpt))  # type: ignore[attr-defined]
    set_state_dict(inner, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
    # DDP's fresh wrapper would reduce in another order (distributed_worker.run_case): feed
    # both cases the very gradients the saving run used.
    step_on(inner, opt, grads)
    return [t.cpu() for t in snapshot(inner, opt)]


def device_type() -> str:
    return "cuda" if dist.get_backend() == "nccl" else "cpu"


def main(rank: int, world: int, port: int, out: str, phase: str, backend: str) -> None:
    """Spawn target: ``phase`` is ``save`` or ``resume``; ``backend`` ``gloo`` or ``nccl``."""
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    if backend == "nccl":
        device = torch.device("cuda", rank)
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", rank=rank, world_size=world, device_id=device)
    else:
        dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        torch.manual_seed(0)
        init = Net().to(device_type())
        folder = Path(out)
        results: dict[str, Any] = {}
        for kind in ("ddp", "fsdp"):
            ckpt = folder / f"ckpt-{kind}"
            if phase == "save":
                results[kind] = save_case(kind, init, ckpt)
            else:
                saved = torch.load(folder / "save-w2-rank0.pt")
                results[kind] = resume_case(kind, init, ckpt, saved[kind]["grads"])
        torch.save(results, folder / f"{phase}-w{world}-rank{rank}.pt")
        dist.barrier()  # no rank tears the group down while another still uses it
    finally:
        dist.destroy_process_group()
    exit_now()
