"""Benchmark the sharded MuSGD step (DDP and FSDP2) against every rank doing all the NS work.

Two ways to run it:

* CPU, one machine: ``python -m musgd.bench distributed --worlds 1 2 3`` spawns each world
  size with gloo (one thread per rank) and writes one evidence file under ``docs/evidence/``.
* GPUs: ``torchrun --nproc-per-node N -m musgd.bench distributed`` (see
  scripts/gpu_distributed.sh) times the launched world size with NCCL; rank 0 writes the file.

Per world size it reports the median (min-max) step time of every arm (``ARMS``): *replicated*
(``process_group=None``: each rank orthogonalizes every matrix, the redundant baseline),
*sharded* (``MuSGD(..., process_group=WORLD)``, FLOP plan), *sharded_measured*
(``shard_balance="measured"``), *sharded_replay* and *replicated_replay*
(``capture_orthogonalization``) and *fsdp* (the same parameters sharded by FSDP2
``fully_shard``); each arm's speed-up over replicated, whether its ranks agree bitwise and
whether it equals the replicated arm bitwise; the plan each sharded arm used; and the plan's
Newton-Schulz FLOPs and exchange bytes per rank. ``--predict W`` prints the scaling model
(docs/engineering/distributed-scaling.md), calibrated on 1-GPU medians with ``--calibration``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import socket
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

from musgd import MuSGD
from musgd._distributed import WorkItem, plan_buckets, plan_stages
from musgd._functional import Layout, build_layout
from musgd.bench._evidence import build_evidence, find_repo_root, read_document, write_evidence
from musgd.bench._models import PARAMETER_SETS, ParamSpec, make_parameters, transformer_parameters

DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}


def vit_b_parameters() -> list[ParamSpec]:
    """ViT-B/16 (Dosovitskiy et al., 2020): 12 blocks, width 768, MLP 3072, 1000 classes."""
    return [
        ParamSpec("patch_embed.weight", (768, 3, 16, 16)),
        ParamSpec("patch_embed.bias", (768,)),
        *transformer_parameters(blocks=12, width=768),
        ParamSpec("head.weight", (1000, 768)),
        ParamSpec("head.bias", (1000,)),
    ]


def one_b_parameters() -> list[ParamSpec]:
    """A 1.2 B-parameter decoder: 24 blocks at width 2048 (embeddings excluded, as in SETS)."""
    return transformer_parameters(blocks=24, width=2048)


SETS = {**PARAMETER_SETS, "vit-b": vit_b_parameters, "1b": one_b_parameters}
NS_STEPS = 5

# Scaling-model assumptions (docs/engineering/distributed-scaling.md): stated, not measured here.
H200_BF16_FLOPS = 790e12  # measured dense bf16 GEMM peak on this project's H200
# Fraction of that peak a Newton-Schulz GEMM reaches: 0.53 measured for the 1 B set on one H200
# (57.7 TFLOP in 138 ms); width-768 GEMMs reach only about 0.25 (ViT-B: 1.55 TFLOP in 7.8 ms).
GEMM_EFFICIENCY = 0.5
# Eager floor of one batched NS call with its share of the step's host work; calibrated on the
# 1-GPU H200 run (nano: about 20 ms for 34 batched calls, docs/evidence/musgd-distributed-cuda-*).
CALL_FLOOR_S = 600e-6
COLLECTIVE_LATENCY_S = 30e-6  # one NCCL collective across 8 GPUs of one NVLink host
NVLINK_BYTES_PER_S = 300e9  # effective NCCL bus bandwidth per GPU on NVLink 4 (900 GB/s raw)
# The element-wise part of a step reads and writes about 128 bytes per float32 parameter (counted
# operation by operation in docs/engineering/distributed-scaling.md): 20 for the momentum update,
# which every rank runs on every parameter (the state stays whole), and 108 for the rest (the
# Nesterov input, the SGD term, the stack and casts around Newton-Schulz, the mix, decay and the
# write), which under DDP only the owner of a matrix runs; the other ranks copy the owner's new
# parameters in (8 bytes). Effective HBM bandwidth 3.5 TB/s (H200: 4.8 TB/s peak). FSDP2 runs
# all of it on its shard.
MOMENTUM_BYTES_PER_PARAM = 20
REST_BYTES_PER_PARAM = 108
COPY_BYTES_PER_PARAM = 8
HBM_BYTES_PER_S = 3.5e12
# The 1-GPU calibration the predictions start from (a screen: see the scaling model's page).
CALIBRATION = Path("docs/evidence/musgd-distributed-cuda-h200-1gpu-20261129.json")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``python -m musgd.bench distributed``."""
    parser.add_argument("--set", choices=sorted(SETS), default="nano")
    parser.add_argument(
        "--predict",
        type=int,
        metavar="WORLD",
        default=None,
        help="print the scaling model for every set at this world size and exit (no timing)",
    )
    parser.add_argument(
        "--calibration",
        type=Path,
        default=None,
        help="with --predict: an evidence file whose world-size-1 medians calibrate the model "
        f"(for example {CALIBRATION})",
    )
    parser.add_argument("--worlds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--steps", type=int, default=20, help="timed steps per arm")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--ns-dtype", choices=sorted(DTYPES), default="bf16")
    parser.add_argument(
        "--arms",
        nargs="+",
        choices=[a.name for a in ARMS],
        default=[a.name for a in ARMS],
        help="arms to time (the replicated baseline always runs)",
    )
    parser.add_argument("--out", type=Path, default=None, help="evidence file or directory")
    parser.add_argument(
        "--commit",
        default=None,
        help="the commit a copied tree came from, recorded when git cannot read it",
    )


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    dist.barrier()


@dataclass(frozen=True)
class Arm:
    """One way of stepping the same parameters: sharding and MuSGD options."""

    name: str
    sharded: bool  # process_group=WORLD (DDP mode); False: every rank does all NS work
    fsdp: bool = False  # the parameters under FSDP2 fully_shard instead
    replay: bool = False  # capture_orthogonalization (each rank replays its own share)
    balance: str = "flops"


# The baseline first; every other arm is compared against it (speed and bits).
ARMS = (
    Arm("replicated", sharded=False),
    Arm("sharded", sharded=True),
    Arm("sharded_measured", sharded=True, balance="measured"),
    Arm("sharded_replay", sharded=True, replay=True),
    Arm("replicated_replay", sharded=False, replay=True),
    Arm("fsdp", sharded=False, fsdp=True),
)


def _optimizer(
    args: argparse.Namespace, arm: Arm, params: list[torch.Tensor], grads: list[torch.Tensor]
) -> MuSGD:
    """MuSGD of ``arm`` over copies of ``params`` (the same on every rank) and ``grads``."""
    if arm.fsdp:
        return _fsdp_optimizer(args, params, grads)
    copies = [p.clone() for p in params]
    for p, g in zip(copies, grads, strict=True):
        p.grad = g  # never written by the optimizer: every plain arm shares one copy
    return MuSGD(
        copies,
        lr=1e-3,
        ns_dtype=DTYPES[args.ns_dtype],
        process_group=dist.group.WORLD if arm.sharded else None,
        capture_orthogonalization=arm.replay,
        shard_balance=arm.balance,
    )


def _fsdp_optimizer(
    args: argparse.Namespace, params: list[torch.Tensor], grads: list[torch.Tensor]
) -> MuSGD:
    """The same parameters and gradients, sharded on dim 0 by FSDP2 ``fully_shard``."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import Shard, distribute_tensor

    device = params[0].device
    holder = nn.Module()
    holder.params = nn.ParameterList([nn.Parameter(p.clone()) for p in params])
    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    fully_shard(holder, mesh=mesh)
    sharded = list(holder.parameters())
    for p, g in zip(sharded, grads, strict=True):
        p.grad = distribute_tensor(g, mesh, [Shard(0)])
    return MuSGD(sharded, lr=1e-3, ns_dtype=DTYPES[args.ns_dtype])


def _time_arms(
    args: argparse.Namespace, device: torch.device
) -> tuple[dict[str, list[float]], dict[str, MuSGD]]:
    """Seconds per step (this rank's view, between barriers) for every arm, interleaved.

    Arms: :data:`ARMS` (``--arms`` picks some; the replicated baseline always runs).
    Alternating them step by step spreads any outside load over all of them. The parameters
    and gradients are drawn once and copied per arm.
    """
    params, grads = make_parameters(SETS[args.set](), device=device, seed=0)
    chosen = [a for a in ARMS if a.name == "replicated" or a.name in args.arms]
    arms = {arm.name: _optimizer(args, arm, params, grads) for arm in chosen}
    del params
    times: dict[str, list[float]] = {name: [] for name in arms}
    for k in range(args.warmup + args.steps):
        for name, opt in arms.items():
            _sync(device)
            start = time.perf_counter()
            opt.step()
            _sync(device)
            if k >= args.warmup:
                times[name].append(time.perf_counter() - start)
    return times, arms


def _flat(opt: MuSGD) -> list[torch.Tensor]:
    """The optimizer's parameters as whole plain tensors (FSDP2 shards gathered)."""
    out = []
    for group in opt.param_groups:
        for p in group["params"]:
            full = getattr(p, "full_tensor", None)
            out.append((full() if callable(full) else p).detach())
    return out


def _agreement(arms: dict[str, MuSGD], device: torch.device) -> dict[str, Any]:
    """Per arm: do ranks hold the same parameters, and how far are they from the replicated arm?"""
    replicated = _flat(arms["replicated"])
    out: dict[str, Any] = {}
    for name, opt in arms.items():
        params = _flat(opt)
        flat = torch.cat([p.reshape(-1) for p in params])
        # Ranks agree bitwise when the element-wise max and min over ranks coincide everywhere.
        high, low = flat.clone(), flat.clone()
        dist.all_reduce(high, op=dist.ReduceOp.MAX)
        dist.all_reduce(low, op=dist.ReduceOp.MIN)
        agree = torch.tensor(float(torch.equal(high, low)), device=device)
        dist.all_reduce(agree, op=dist.ReduceOp.MIN)
        pairs = list(zip(params, replicated, strict=True))
        out[name] = {
            "ranks_agree_bitwise": bool(agree.item()),
            "equals_replicated_bitwise": all(torch.equal(a, b) for a, b in pairs),
            "max_abs_diff_vs_replicated": max(float((a - b).abs().max()) for a, b in pairs),
        }
    sharded = out.get("sharded", out["replicated"])
    fsdp = out.get("fsdp", out["replicated"])
    return {
        # The keys of the first benchmark files, kept for comparison across runs.
        "ranks_agree_bitwise": all(v["ranks_agree_bitwise"] for v in out.values()),
        "sharded_equals_replicated_bitwise": sharded["equals_replicated_bitwise"],
        "max_abs_diff_vs_replicated": sharded["max_abs_diff_vs_replicated"],
        "fsdp_equals_replicated_bitwise": fsdp["equals_replicated_bitwise"],
        "fsdp_max_abs_diff_vs_replicated": fsdp["max_abs_diff_vs_replicated"],
        "arms": out,
    }


def _used_plans(arms: dict[str, MuSGD]) -> dict[str, Any]:
    """The plan each sharded arm actually used: FLOPs and balanced cost per rank."""
    out: dict[str, Any] = {}
    for name, opt in arms.items():
        plans = opt._sharded.plans()
        if plans:
            plan = plans[0]
            out[name] = {
                "work_items": len(plan.items),
                "ns_flops_per_rank": [NS_STEPS * f for f in plan.loads],
                "balanced_cost_per_rank": list(plan.cost_loads),
            }
    return out


def _plan_numbers(args: argparse.Namespace, world: int) -> dict[str, Any]:
    """FLOPs per rank and all_gather bytes per rank and step, from the plan alone."""
    specs = SETS[args.set]()
    params = [torch.empty(s.shape, device="meta") for s in specs]
    layout = build_layout(params, None)
    plan = plan_buckets(layout.buckets, world)
    steps = 5
    per_rank = [0] * world
    for item in plan.items:
        b = layout.buckets[item.bucket]
        per_rank[item.owner] += (item.stop - item.start) * b.rows * b.cols
    width = max(per_rank)
    # The owners' new float32 parameters travel (4 bytes each).
    itemsize = torch.float32.itemsize
    return {
        "matrices": len(layout.matrices),
        "buckets": len(layout.buckets),
        "work_items": len(plan.items),
        "ns_flops_per_rank": [steps * f for f in plan.loads],
        "ns_flops_total": steps * sum(plan.loads),
        "all_gather_bytes_received_per_rank": (world - 1) * width * itemsize,
    }


def _summary(times: list[float]) -> dict[str, float]:
    return {
        "median_ms": 1e3 * statistics.median(times),
        "min_ms": 1e3 * min(times),
        "max_ms": 1e3 * max(times),
    }


def run_rank(args: argparse.Namespace, device: torch.device) -> dict[str, Any] | None:
    """Every arm on this rank; rank 0 returns the world's results (max over ranks per step)."""
    world = dist.get_world_size()
    arms: dict[str, Any] = {}
    times, optimizers = _time_arms(args, device)
    agreement = _agreement(optimizers, device)
    for name, seconds in times.items():
        local = torch.tensor(seconds, dtype=torch.float64)
        # A step is as slow as its slowest rank.
        slowest = local.to(device)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        arms[name] = _summary(slowest.cpu().tolist())
    if dist.get_rank() != 0:
        return None
    base = arms["replicated"]["median_ms"]
    speedups = {name: base / arm["median_ms"] for name, arm in arms.items()}
    return {
        "world_size": world,
        **arms,
        "speedups_vs_replicated": speedups,
        "speedup_median": speedups.get("sharded"),
        "fsdp_speedup_median": speedups.get("fsdp"),
        "plan": _plan_numbers(args, world),
        "plans_used": _used_plans(optimizers),
        **agreement,
    }


def _spawned(rank: int, world: int, port: int, args: argparse.Namespace, out: str) -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        result = run_rank(args, torch.device("cpu"))
        if result is not None:
            Path(out).write_text(json.dumps(result), encoding="utf-8")
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def write(doc: dict[str, Any], out: Path | None) -> Path:
    root = find_repo_root()
    folder = root / "docs" / "evidence" if root is not None else Path.cwd()
    env = doc["environment"]
    where = "cuda" if env["gpu"] else "cpu"
    stamp = str(doc["created"]).replace(":", "").replace("-", "")[:15]
    name = f"musgd-distributed-{where}-{stamp}.json"
    path = folder / name if out is None else (out / name if out.is_dir() else out)
    return write_evidence(doc, path)


def _call_seconds(flops: int) -> float:
    return max(flops / (H200_BF16_FLOPS * GEMM_EFFICIENCY), CALL_FLOOR_S)


def predict(name: str, world: int) -> dict[str, Any]:
    """The scaling model of one parameter set at ``world`` ranks (pure arithmetic)."""
    specs = SETS[name]()
    params = [torch.empty(s.shape, device="meta") for s in specs]
    layout = build_layout(params, None)
    plan = plan_buckets(layout.buckets, world)
    whole = plan_buckets(layout.buckets, 1)
    numel = sum(math.prod(s.shape) for s in specs)
    matrix_numel = sum(math.prod(params[i].shape) for i in layout.matrices)
    ns_rank = [0.0] * world
    for item in plan.items:
        ns_rank[item.owner] += _call_seconds(NS_STEPS * item.flops)
    ns_replicated = sum(_call_seconds(NS_STEPS * i.flops) for i in whole.items)
    owned = [0] * world
    fsdp = [0] * world  # elements a rank receives: gathered inputs plus its rows of results
    for item in plan.items:
        b = layout.buckets[item.bucket]
        count = item.stop - item.start
        owned[item.owner] += count * b.rows * b.cols
        size = -(-b.rows // world)
        for r in range(world):
            rows = max(0, min(size, b.rows - r * size))
            if r == item.owner:
                fsdp[r] += count * (b.rows - rows) * b.cols
            else:
                fsdp[r] += count * rows * b.cols
    # DDP moves the owners' new float32 parameters (4 bytes); FSDP2 moves matrices in bf16 (the
    # NS input and result, lossless for bf16 Newton-Schulz).
    wire, fsdp_wire = 4, 2
    dtypes = [torch.float32] * len(layout.buckets)
    stages = plan_stages(plan, layout, dtypes, [wire] * len(layout.buckets))
    stage_elements = [
        sum(math.prod(_item_dims(layout, plan.items[k])) for k in st.keys) for st in stages
    ]
    ddp_bytes = wire * (world - 1) * max(owned)
    fsdp_bytes = fsdp_wire * max(fsdp)
    bw = NVLINK_BYTES_PER_S
    return {
        "set": name,
        "world": world,
        "params": numel,
        "matrix_params": matrix_numel,
        "matrices": len(layout.matrices),
        "buckets": len(layout.buckets),
        "ns_gflop_step": NS_STEPS * sum(i.flops for i in whole.items) / 1e9,
        "ns_gflop_max_rank": NS_STEPS * max(plan.loads) / 1e9,
        "ns_ms_replicated": 1e3 * ns_replicated,
        "ns_ms_sharded_max_rank": 1e3 * max(ns_rank),
        "ddp_result_mb_per_rank": ddp_bytes / 1e6,
        "ddp_exchange_ms": 1e3 * (COLLECTIVE_LATENCY_S + ddp_bytes / bw),
        "fsdp_mb_per_rank": fsdp_bytes / 1e6,
        "fsdp_exchange_ms": 1e3 * (2 * COLLECTIVE_LATENCY_S + fsdp_bytes / bw),
        "grad_allreduce_mb_per_rank": 2 * 4 * numel * (world - 1) / world / 1e6,
        "stages": len(stages),
        "last_stage_fraction": stage_elements[-1] / max(1, sum(stage_elements)),
    }


def _item_dims(layout: Layout, item: WorkItem) -> tuple[int, int, int]:
    bucket = layout.buckets[item.bucket]
    return (item.stop - item.start, bucket.rows, bucket.cols)


def world1_medians(path: Path) -> dict[str, dict[str, float]]:
    """``{set: {arm: median ms}}`` of the world-size-1 runs in a benchmark evidence file.

    Reads both layouts the benchmark writes: one file per set (``results.worlds``) and the merged
    file of scripts/gpu_distributed.sh (``results.runs[*].worlds``).
    """
    results = read_document(path)["results"]
    runs = results.get("runs", [results])
    out: dict[str, dict[str, float]] = {}
    try:
        for run in runs:
            one = run.get("worlds", {}).get("1")
            if one is not None:
                out[run["set"]] = {
                    arm: float(v["median_ms"])
                    for arm, v in one.items()
                    if isinstance(v, dict) and "median_ms" in v
                }
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise ValueError(
            f"{path}: not a distributed benchmark's evidence ({type(exc).__name__}: {exc}); "
            "pass a file `python -m musgd.bench distributed` wrote"
        ) from exc
    if not out:
        raise ValueError(f"{path}: no world-size-1 run to calibrate from; pass another file")
    return out


def calibrated(name: str, world: int, medians: dict[str, float]) -> dict[str, Any]:
    """Step times at ``world`` ranks from the measured 1-GPU medians of one set (ms).

    ``T1`` (replicated, measured) = ``E`` (element-wise, from bytes) + ``N1`` (Newton-Schulz,
    the rest). Sharded: ``E_W + N1·s + x``, with ``E_W`` the DDP rank's element-wise work
    (momentum on all, the rest on its own matrices, copies of the others'), ``s`` the busiest
    rank's share of the NS model's time and ``x`` the exchange left exposed by the overlap (the
    last stage's bytes, plus one latency per stage). FSDP2: ``E/W + N1·s + c/W + x'``, with
    ``c`` the copies the 1-GPU FSDP2 arm paid over replicated (gather and scatter through
    itself) spread over ``W`` ranks.
    """
    model = predict(name, world)
    t1 = medians["replicated"]
    per_param_ms = 1e3 * model["params"] / HBM_BYTES_PER_S
    update = min(per_param_ms * (MOMENTUM_BYTES_PER_PARAM + REST_BYTES_PER_PARAM), t1 / 2)
    ns1 = t1 - update
    # DDP: momentum everywhere, the rest on the owner, a copy of the others' new parameters.
    # (Vectors, a negligible share, are counted as matrices.)
    scale = update / (per_param_ms * (MOMENTUM_BYTES_PER_PARAM + REST_BYTES_PER_PARAM))
    update_ddp = (
        scale
        * per_param_ms
        * (
            MOMENTUM_BYTES_PER_PARAM
            + REST_BYTES_PER_PARAM / world
            + COPY_BYTES_PER_PARAM * (world - 1) / world
        )
    )
    share = model["ns_ms_sharded_max_rank"] / model["ns_ms_replicated"]
    stages = model["stages"]
    last = model["last_stage_fraction"]
    latency = 1e3 * COLLECTIVE_LATENCY_S * stages
    exposed_ddp = last * (model["ddp_exchange_ms"] - 1e3 * COLLECTIVE_LATENCY_S) + latency
    exposed_fsdp = last * (model["fsdp_exchange_ms"] - 2e3 * COLLECTIVE_LATENCY_S) + 2 * latency
    copies = max(0.0, medians.get("fsdp", t1) - t1)
    sharded = update_ddp + ns1 * share + exposed_ddp
    fsdp = update / world + ns1 * share + copies / world + exposed_fsdp
    if world == 1:  # both run the single-process body
        sharded = fsdp = t1
    return {
        "set": name,
        "world": world,
        "replicated_ms (measured at 1 GPU)": t1,
        "update_ms (element-wise, model)": update,
        "ddp_update_ms_per_rank": update_ddp,
        "ns_ms at 1 GPU (T1 - update)": ns1,
        "busiest rank's NS share": share,
        "stages": stages,
        "sharded_ms": sharded,
        "sharded_speedup": t1 / sharded,
        "fsdp_ms": fsdp,
        "fsdp_speedup": t1 / fsdp,
    }


def _table(rows: list[dict[str, Any]], skip: int) -> None:
    keys = list(rows[0])[skip:]
    print("| quantity | " + " | ".join(str(r["set"]) for r in rows) + " |")
    print("| --- |" + " --- |" * len(rows))
    for key in keys:
        cells = [f"{r[key]:,.3g}" if isinstance(r[key], float) else f"{r[key]:,}" for r in rows]
        print(f"| {key} | " + " | ".join(cells) + " |")


def print_predictions(world: int, calibration: Path | None) -> None:
    """Markdown tables of :func:`predict` and, given a 1-GPU file, :func:`calibrated`."""
    names = ("nano", "vit-b", "1b")
    _table([predict(name, world) for name in names], 2)
    if calibration is None:
        return
    medians = world1_medians(calibration)
    rows = [calibrated(name, world, medians[name]) for name in names if name in medians]
    print(f"\nFrom the 1-GPU medians of {calibration}:\n")
    _table(rows, 2)


def run(args: argparse.Namespace, argv: list[str]) -> int:
    """Print the scaling model (``--predict``) or time every arm; write the evidence JSON."""
    if args.steps < 1 or args.warmup < 0 or any(w < 1 for w in args.worlds):
        raise ValueError("--steps must be >= 1, --warmup >= 0 and every world size >= 1")
    if args.predict is not None:
        print_predictions(args.predict, args.calibration)
        return 0
    common = {"set": args.set, "ns_dtype": args.ns_dtype, "steps": args.steps}
    if "RANK" in os.environ:  # launched by torchrun: time this world size only
        cuda = torch.cuda.is_available()
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
        if cuda:
            torch.cuda.set_device(device)
        if cuda:
            dist.init_process_group("nccl", device_id=device)
        else:
            dist.init_process_group("gloo")
        try:
            result = run_rank(args, device)
        finally:
            dist.destroy_process_group()
        if result is None:
            return 0
        print(f"{args.set} world {result['world_size']}: {_line(result)}", flush=True)
        results = {**common, "worlds": {str(result["world_size"]): result}}
    else:
        worlds: dict[str, Any] = {}
        with tempfile.TemporaryDirectory() as tmp:
            for world in args.worlds:
                out = Path(tmp) / f"world{world}.json"
                spawn_args = (world, _free_port(), args, str(out))
                mp.spawn(_spawned, args=spawn_args, nprocs=world)  # type: ignore[attr-defined,no-untyped-call]
                worlds[str(world)] = json.loads(out.read_text(encoding="utf-8"))
                w = worlds[str(world)]
                print(f"world {world}: {_line(w)}")
        device = torch.device("cpu")
        results = {**common, "worlds": worlds, "note": _cpu_note()}
    doc = build_evidence("distributed", results, device=device, argv=argv, commit=args.commit)
    print(f"wrote {write(doc, args.out)}")
    return 0


def _line(result: dict[str, Any]) -> str:
    """Median step time and speed-up over replicated of every arm, on one line."""
    return ", ".join(
        f"{name} {result[name]['median_ms']:.1f} ms ({ratio:.2f}x)"
        for name, ratio in result["speedups_vs_replicated"].items()
    )


def _cpu_note() -> str:
    cores = os.cpu_count() or 1
    return (
        f"gloo on {cores} CPU core(s), one thread per rank: world sizes above {cores} "
        "oversubscribe the cores, so their times measure contention, not scaling"
    )
