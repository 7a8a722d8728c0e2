"""The Triton Newton-Schulz backend on the GPU: YOLO26 step times, kernels per step, NS throughput.

For each YOLO26 parameter set (``musgd/bench/data/yolo26{n,s,m}_shapes.json``: matrices,
norm weights and biases, float32 on the GPU, one fixed random gradient each) and each variant
(``ns_backend`` torch or triton, with and without the replay flags) this times ``step()`` with
CUDA events (median and min-max after a warm-up that makes any recordings), and on yolo26n counts
the GPU kernels and copies of one step with ``torch.profiler``. It then times Newton-Schulz alone
on large bf16 stacks, the torch backend (``orthogonalize_batched``) against the Triton table
(``run_plan`` on the packed stack), and reports nominal TFLOP/s (``4·m²·n + 2·m³`` per matrix
and iteration, ``m <= n``, the work of the unsymmetric iteration, for both).

Writes ``musgd-triton-ns-<gpu>-<commit>.json`` evidence under ``--out``.

    python -m musgd.bench triton --out out/ --commit $(git rev-parse HEAD)

``python -m musgd.bench triton-tiles`` (:func:`run_tiles`) asks which tile configurations of the
Triton Newton-Schulz kernels capture in a CUDA graph, and how fast each runs: on the YOLO26
tables (five iterations, replayed from a graph) and on the large bf16 stacks 24x1024x4096 and
8x4096x4096 (eager). It prints one line per configuration and table and writes
``musgd-triton-tiles-<gpu>-<commit>.json`` evidence under ``--out`` (:func:`gpu_label`).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import gc
import hashlib
import json
import math
import re
import sys
import warnings
from pathlib import Path
from typing import Any

import torch

from musgd import MuSGD, orthogonalize_batched
from musgd import _triton_ns as T
from musgd._newton_schulz import DEFAULT_COEFFICIENTS
from musgd.bench._evidence import build_evidence, write_evidence
from musgd.bench._models import YOLO26_MODELS, yolo26_parameters
from musgd.bench._profile import device_kernels
from musgd.bench._timing import _event, time_steps

SETS = YOLO26_MODELS
TRIPLES = (DEFAULT_COEFFICIENTS,) * 5
VARIANTS: dict[str, dict[str, Any]] = {
    "torch eager": {"ns_backend": "torch"},
    "torch both": {
        "ns_backend": "torch",
        "capture_orthogonalization": True,
        "capture_updates": True,
    },
    "triton eager": {"ns_backend": "triton"},
    "triton capture_orthogonalization": {"ns_backend": "triton", "capture_orthogonalization": True},
    "triton capture_updates": {"ns_backend": "triton", "capture_updates": True},
    "triton both": {
        "ns_backend": "triton",
        "capture_orthogonalization": True,
        "capture_updates": True,
    },
}
NS_STACKS = ((24, 1024, 4096), (8, 4096, 4096))
# The tile configurations `triton-tiles` tries, named block/block_k/warps/stages.
CONFIGS = {
    "32/32/w2/s3": T.TileConfig(32, 32, 2, 3),
    "32/32/w4/s3": T.TileConfig(32, 32, 4, 3),
    "64/32/w4/s3": T.TileConfig(64, 32, 4, 3),
    "64/64/w4/s3": T.TileConfig(64, 64, 4, 3),
    "64/64/w4/s4": T.TileConfig(64, 64, 4, 4),
    "128/32/w4/s3": T.TileConfig(128, 32, 4, 3),
    "128/64/w4/s3": T.TileConfig(128, 64, 4, 3),
    "128/64/w8/s3": T.TileConfig(128, 64, 8, 3),
    "128/64/w8/s4": T.TileConfig(128, 64, 8, 4),
    "128/128/w8/s3": T.TileConfig(128, 128, 8, 3),
    # Wider column tiles for the rectangular kernels (block_n), and the update's own warps (uN).
    "64/64/w4/s3/u8": T.TileConfig(64, 64, 4, 3, 0, 8),
    "64x128/64/w4/s3": T.TileConfig(64, 64, 4, 3, 128),
    "64x128/64/w4/s4": T.TileConfig(64, 64, 4, 4, 128),
    "64x128/64/w4/s3/u8": T.TileConfig(64, 64, 4, 3, 128, 8),
    "64x256/64/w4/s3/u8": T.TileConfig(64, 64, 4, 3, 256, 8),
    "128x256/64/w8/s3": T.TileConfig(128, 64, 8, 3, 256),
    # The chain launched plainly, without programmatic dependent launch (the default uses it
    # where it applies).
    "64/64/w4/s3/nopdl": T.TileConfig(64, 64, 4, 3, pdl=False),
    "128/64/w8/s4/nopdl": T.TileConfig(128, 64, 8, 4, pdl=False),
    # The Gram product's reduction dealt to kN programs per tile (issue #35's K-split).
    "64/64/w4/s3/k2": T.TileConfig(64, 64, 4, 3, split_k=2),
    "64/64/w4/s3/k4": T.TileConfig(64, 64, 4, 3, split_k=4),
    "64/64/w4/s3/k8": T.TileConfig(64, 64, 4, 3, split_k=8),
    "128/64/w8/s4/k2": T.TileConfig(128, 64, 8, 4, split_k=2),
    "128/64/w8/s4/k4": T.TileConfig(128, 64, 8, 4, split_k=4),
    # Matrices of one row of tiles run whole in one program each, the chain the rest (issue
    # #35's fused small-matrix kernel; the chain's bits, see result_sha256).
    "64/64/w4/s3/f": T.TileConfig(64, 64, 4, 3, fuse_small=True),
    "128/64/w8/s4/f": T.TileConfig(128, 64, 8, 4, fuse_small=True),
}


def yolo_shapes(name: str) -> list[tuple[int, ...]]:
    """Every parameter shape of one YOLO26 set: matrices, then norm weights, then biases."""
    return [spec.shape for spec in yolo26_parameters(name)]


def _optimizer(name: str, options: dict[str, Any], device: torch.device) -> MuSGD:
    gen = torch.Generator(device=device).manual_seed(0)
    params = []
    for shape in yolo_shapes(name):
        p = torch.randn(shape, generator=gen, device=device).requires_grad_()
        p.grad = torch.randn(shape, generator=gen, device=device) * 1e-2
        params.append(p)
    return MuSGD(params, lr=0.02, momentum=0.95, weight_decay=5e-4, **options)


def _ns_flops(batch: int, rows: int, cols: int, steps: int) -> float:
    m, n = min(rows, cols), max(rows, cols)
    return float(batch * steps * (4 * m * m * n + 2 * m**3))


def ns_throughput(device: torch.device, steps: int, warmup: int) -> dict[str, Any]:
    """Newton-Schulz alone on the large bf16 stacks: the torch backend against the Triton table."""
    out: dict[str, Any] = {}
    for batch, rows, cols in NS_STACKS:
        G = torch.randn(batch, rows, cols, device=device, dtype=torch.bfloat16)
        plan = T.plan_for(((rows, cols),) * batch, device)
        src = G.reshape(-1)
        torch_t = time_steps(
            functools.partial(orthogonalize_batched, G), steps=steps, warmup=warmup, device=device
        )
        triton_t = time_steps(
            functools.partial(T.run_plan, plan, src, TRIPLES, 1e-7, torch.bfloat16),
            steps=steps,
            warmup=warmup,
            device=device,
        )
        flops = _ns_flops(batch, rows, cols, 5)
        t_ms, r_ms = torch_t.summary.median, triton_t.summary.median
        out[f"{batch}x{rows}x{cols}"] = {
            "tiles": dataclasses.asdict(plan.tiles),
            "nominal_gflop": flops / 1e9,
            "torch_ms": t_ms,
            "triton_ms": r_ms,
            "torch_tflops": flops / t_ms / 1e9,
            "triton_tflops": flops / r_ms / 1e9,
            "triton_over_torch": t_ms / r_ms,
        }
        print(f"NS {batch}x{rows}x{cols}: torch {t_ms:.3f} ms, triton {r_ms:.3f} ms", flush=True)
    return out


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``python -m musgd.bench triton``."""
    parser.add_argument("--sets", default=",".join(SETS))
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--ns-steps", type=int, default=10, help="timed calls per NS stack")
    parser.add_argument("--out", type=Path, default=Path("out"))
    parser.add_argument("--commit", default=None)
    parser.add_argument(
        "--small-tiles",
        type=tile_config,
        help="block,block_k,warps,stages[,block_n[,update_warps[,split_k]]] of small tables",
    )
    parser.add_argument(
        "--large-tiles",
        type=tile_config,
        help="block,block_k,warps,stages[,block_n[,update_warps[,split_k]]] of large tables",
    )


def tile_config(text: str) -> T.TileConfig:
    """An argparse type: ``block,block_k,warps,stages[,block_n[,update_warps[,split_k]]]``,
    integers (``split_k`` 1 or more)."""
    try:
        values = [int(part) for part in text.split(",")]
    except ValueError:
        values = []
    if not 4 <= len(values) <= 7 or min(values) < 0 or (len(values) == 7 and values[6] < 1):
        raise argparse.ArgumentTypeError(
            "expected block,block_k,warps,stages[,block_n[,update_warps[,split_k]]] as "
            f"non-negative integers, split_k 1 or more, e.g. 64,64,4,3; got {text!r}"
        )
    block, block_k, warps, stages, *rest = values
    return T.TileConfig(
        block,
        block_k,
        warps,
        stages,
        block_n=rest[0] if rest else 0,
        update_warps=rest[1] if len(rest) > 1 else 0,
        split_k=rest[2] if len(rest) > 2 else 1,
    )


def _needs_cuda(command: str) -> bool:
    """True (after saying so on stderr) when this torch sees no CUDA GPU."""
    if torch.cuda.is_available():
        return False
    print(f"python -m musgd.bench {command} needs a CUDA GPU", file=sys.stderr)
    return True


def run(args: argparse.Namespace, argv: list[str]) -> int:
    """Time every variant on every set, and Newton-Schulz alone; write the evidence JSON."""
    # Module constants read when a plan is first built: set before any is.
    if args.small_tiles:
        T.SMALL_TILES = args.small_tiles
    if args.large_tiles:
        T.LARGE_TILES = args.large_tiles
    device = torch.device("cuda")
    if _needs_cuda("triton"):
        return 2
    results: dict[str, Any] = {
        "steps": args.steps,
        "warmup": args.warmup,
        "tiles": {
            "small": dataclasses.asdict(T.SMALL_TILES),
            "large": dataclasses.asdict(T.LARGE_TILES),
        },
        "sets": {},
    }
    # First, before any torch.profiler session: at d844cf2 the Triton NS measured after the
    # profiled yolo26n variants ran about 4x slower than the same tables timed alone
    # (docs/evidence/musgd-triton-tiles-h200-d844cf2.json).
    results["ns_throughput"] = ns_throughput(device, args.ns_steps, 3)
    for name in args.sets.split(","):
        rows: dict[str, Any] = {}
        for variant, options in VARIANTS.items():
            # Free the previous variant's graphs and pools now, not during this one's capture
            # (suspected cause of the one failed recording at b4ed20a, yolo26m "triton both").
            gc.collect()
            torch.cuda.synchronize(device)
            opt = _optimizer(name, options, device)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                opt.step()
            timing = time_steps(opt.step, steps=args.steps, warmup=args.warmup, device=device)
            s = timing.summary
            row: dict[str, Any] = {"median_ms": s.median, "min_ms": s.min, "max_ms": s.max}
            stats = opt._replay.stats
            row["replay"] = {
                "recordings": stats.recordings,
                "replays": stats.replays,
                "failures": stats.failures,
                "fallbacks": dict(stats.fallbacks),
            }
            if name == "yolo26n":
                kernels = device_kernels(opt.step, 5, device)
                assert kernels is not None  # this benchmark runs on CUDA only
                row["kernels_per_step"] = kernels["kernels"]
                row["device_busy_ms"] = kernels["busy_ms"]
            row["warnings"] = [str(w.message)[:300] for w in caught]
            rows[variant] = row
            print(
                f"{name} {variant:34s} {s.median:8.3f} ms ({s.min:.3f}-{s.max:.3f}) "
                f"{row.get('kernels_per_step', '')}",
                flush=True,
            )
        results["sets"][name] = rows
    print("wrote", _write(args, "musgd-triton-ns", results, device, argv))
    return 0


def _write(
    args: argparse.Namespace, kind: str, results: dict[str, Any], device: Any, argv: list[str]
) -> Path:
    """The evidence of ``kind``, written as ``<kind>-<gpu>-<commit>.json`` under ``--out``."""
    evidence = build_evidence(kind, results, device=device, argv=argv, commit=args.commit)
    sha = (evidence["git_commit"] or "nocommit")[:7]
    label = gpu_label(torch.cuda.get_device_name(device))
    return write_evidence(evidence, args.out / f"{kind}-{label}-{sha}.json")


def tables() -> dict[str, tuple[tuple[int, int], ...]]:
    """The problem tables `triton-tiles` times: each YOLO26 set's matrices and two large stacks."""
    out: dict[str, tuple[tuple[int, int], ...]] = {}
    for name in YOLO26_MODELS:
        matrices = [s.shape for s in yolo26_parameters(name) if s.name.startswith("matrices.")]
        out[name] = tuple((s[0], math.prod(s) // s[0]) for s in matrices)
    out["24x1024x4096"] = ((1024, 4096),) * 24
    out["8x4096x4096"] = ((4096, 4096),) * 8
    return out


def _time(fn: Any, reps: int) -> float:
    start, end = _event(), _event()
    fn()
    torch.cuda.synchronize()
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    torch.cuda.synchronize()
    return float(start.elapsed_time(end)) / reps


def _captures(results: dict[str, Any], name: str, tables: tuple[str, ...]) -> bool:
    return all(
        results[t][name].get("captures") and results[t][name].get("replay_equal") for t in tables
    )


def pick(results: dict[str, Any]) -> dict[str, str]:
    """The small-table configuration with the fastest yolo26n replay and the large-table one
    with the best throughput on the large stacks, each among those that capture bit-identically
    (``block,block_k,warps,stages``)."""
    names = list(results["yolo26n"])
    small = [n for n in names if _captures(results, n, ("yolo26n",))]
    large = [n for n in names if _captures(results, n, ("yolo26s", "yolo26m"))]
    best_small = min(small, key=lambda n: results["yolo26n"][n]["replay_ms"])
    best_large = max(
        large,
        key=lambda n: sum(
            results[t][n].get("tflops", 0.0) for t in ("24x1024x4096", "8x4096x4096")
        ),
    )

    def spec(name: str) -> str:
        cfg = CONFIGS[name]
        return (
            f"{cfg.block},{cfg.block_k},{cfg.num_warps},{cfg.num_stages},"
            f"{cfg.block_n},{cfg.update_warps},{cfg.split_k}"
        )

    return {"small": spec(best_small), "large": spec(best_large)}


def add_tiles_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``python -m musgd.bench triton-tiles``."""
    parser.add_argument("--out", type=Path, default=Path("out"))
    parser.add_argument("--commit", default=None)
    parser.add_argument(
        "--configs",
        type=config_names,
        default=",".join(CONFIGS),
        help="comma-separated names of CONFIGS (default: all)",
    )


def config_names(text: str) -> list[str]:
    """An argparse type: comma-separated names of :data:`CONFIGS`, each known."""
    names = [name for name in text.split(",") if name]
    unknown = [name for name in names if name not in CONFIGS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown tile configuration(s) {', '.join(map(repr, unknown)) or 'none given'}; "
            f"the names are {', '.join(CONFIGS)}"
        )
    return names


def gpu_label(name: str) -> str:
    """A short label of a GPU for evidence file names: ``h100`` for "NVIDIA H100 80GB HBM3",
    else ``cuda``."""
    found = re.search(r"\b([A-Z])(\d{2,4})\b", name)
    return f"{found.group(1).lower()}{found.group(2)}" if found else "cuda"


def _tile_row(
    shapes: tuple[tuple[int, int], ...], src: torch.Tensor, name: str, device: torch.device
) -> dict[str, Any]:
    """Eager time and throughput of one configuration; for YOLO26 tables, its CUDA-graph replay."""
    big = src.dtype == torch.bfloat16  # the large stacks: eager only
    m, n = zip(*((min(s), max(s)) for s in shapes), strict=True)
    flops = 5 * sum(4 * a * a * b + 2 * a**3 for a, b in zip(m, n, strict=True))
    # A plan of its own per configuration: its tile tables depend on the block size.
    plan = T.build_plan(shapes, device, CONFIGS[name])
    row: dict[str, Any] = {}

    def run(plan: T.TablePlan = plan, src: torch.Tensor = src) -> torch.Tensor:
        return T.run_plan(plan, src, TRIPLES, 1e-7, torch.bfloat16)

    try:
        eager = run()
        # The result's bytes: configurations that keep the chain's bits show the same hash.
        row["result_sha256"] = hashlib.sha256(
            eager.contiguous().view(torch.uint8).cpu().numpy().tobytes()
        ).hexdigest()
        row["eager_ms"] = _time(run, 3 if big else 20)
        row["tflops"] = flops / row["eager_ms"] / 1e9
        if not big:
            side = torch.cuda.Stream()  # type: ignore[no-untyped-call]
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                run()
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            try:
                with torch.cuda.graph(graph):
                    captured = run()
                graph.replay()
                torch.cuda.synchronize()
                row["captures"] = True
                row["replay_equal"] = bool(torch.equal(captured, eager))
                row["replay_ms"] = _time(graph.replay, 20)
            except Exception as exc:  # the point: record why a capture fails
                row["captures"] = False
                row["capture_error"] = f"{type(exc).__name__}: {exc}"[:400]
                torch.cuda.synchronize()
    except Exception as exc:
        row["error"] = f"{type(exc).__name__}: {exc}"[:400]
    return row


def run_tiles(args: argparse.Namespace, argv: list[str]) -> int:
    """Try every tile configuration on every table; print the pick and write the evidence."""
    device = torch.device("cuda")
    if _needs_cuda("triton-tiles"):
        return 2
    results: dict[str, Any] = {}
    for table, shapes in tables().items():
        big = table.startswith(("24x", "8x"))
        src = torch.randn(sum(r * c for r, c in shapes), device=device)
        if big:
            src = src.to(torch.bfloat16)
        rows: dict[str, Any] = {}
        for name in args.configs:
            rows[name] = _tile_row(shapes, src, name, device)
            print(table, name, json.dumps(rows[name]), flush=True)
        results[table] = rows
    results["pick"] = pick(results)
    print("PICK", " ".join(f"--{k}-tiles {v}" for k, v in results["pick"].items()), flush=True)
    print("wrote", _write(args, "musgd-triton-tiles", results, device, argv))
    return 0
