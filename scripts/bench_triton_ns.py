"""The Triton Newton-Schulz backend on the GPU: YOLO26 step times, kernels per step, NS throughput.

For each YOLO26 parameter set (``src/musgd/bench/data/yolo26{n,s,m}_shapes.json``: matrices,
norm weights and biases, float32 on the GPU, one fixed random gradient each) and each variant
(``ns_backend`` torch or triton, with and without the replay flags) this times ``step()`` with
CUDA events (median and min-max after a warm-up that makes any recordings), and on yolo26n counts
the GPU kernels and copies of one step with ``torch.profiler``. It then times Newton-Schulz alone
on large bf16 stacks, the torch backend (``orthogonalize_batched``) against the Triton table
(``run_plan`` on the packed stack), and reports nominal TFLOP/s (``4·m²·n + 2·m³`` per matrix
and iteration, ``m <= n``, the work of the unsymmetric iteration, for both).

Writes ``musgd-triton-ns-<gpu>-<commit>.json`` evidence under ``--out``.

    PYTHONPATH=src python scripts/bench_triton_ns.py --out out/ --commit $(git rev-parse HEAD)
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import sys
import warnings
from pathlib import Path
from typing import Any

import torch

from musgd import MuSGD, orthogonalize_batched
from musgd import _triton_ns as T
from musgd._newton_schulz import DEFAULT_COEFFICIENTS
from musgd.bench._evidence import build_evidence, write_evidence
from musgd.bench._timing import time_steps

DATA = Path(__file__).resolve().parents[1] / "src" / "musgd" / "bench" / "data"
SETS = ("yolo26n", "yolo26s", "yolo26m")
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


def yolo_shapes(name: str) -> list[list[int]]:
    """Every parameter shape of one YOLO26 set: matrices, then norm weights, then biases."""
    data = json.loads((DATA / f"{name}_shapes.json").read_text())
    return [*data["matrices"], *data["norm_weights"], *data["biases"]]


def _optimizer(name: str, options: dict[str, Any], device: torch.device) -> MuSGD:
    gen = torch.Generator(device=device).manual_seed(0)
    params = []
    for shape in yolo_shapes(name):
        p = torch.randn(shape, generator=gen, device=device).requires_grad_()
        p.grad = torch.randn(shape, generator=gen, device=device) * 1e-2
        params.append(p)
    return MuSGD(params, lr=0.02, momentum=0.95, weight_decay=5e-4, **options)


def _kernels_per_step(opt: MuSGD, device: torch.device, steps: int = 5) -> dict[str, float]:
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize(device)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            opt.step()
        torch.cuda.synchronize(device)
    busy_us, count = 0.0, 0
    for event in prof.key_averages():
        busy = float(getattr(event, "self_device_time_total", 0.0) or 0.0)
        if busy > 0:
            busy_us += busy
            count += int(event.count)
    return {"kernels_per_step": count / steps, "device_busy_ms": busy_us / 1e3 / steps}


def _ns_flops(batch: int, rows: int, cols: int, steps: int) -> float:
    m, n = min(rows, cols), max(rows, cols)
    return float(batch * steps * (4 * m * m * n + 2 * m**3))


def ns_throughput(device: torch.device, steps: int, warmup: int) -> dict[str, Any]:
    triples = (DEFAULT_COEFFICIENTS,) * 5
    out: dict[str, Any] = {}
    for batch, rows, cols in NS_STACKS:
        G = torch.randn(batch, rows, cols, device=device, dtype=torch.bfloat16)
        plan = T.plan_for(((rows, cols),) * batch, device)
        src = G.reshape(-1)
        torch_t = time_steps(
            lambda G=G: orthogonalize_batched(G), steps=steps, warmup=warmup, device=device
        )
        triton_t = time_steps(
            lambda src=src, plan=plan: T.run_plan(plan, src, triples, 1e-7, torch.bfloat16),
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sets", default=",".join(SETS))
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--ns-steps", type=int, default=10, help="timed calls per NS stack")
    parser.add_argument("--out", type=Path, default=Path("out"))
    parser.add_argument("--commit", default=None)
    parser.add_argument("--small-tiles", help="block,block_k,warps,stages of small tables")
    parser.add_argument("--large-tiles", help="block,block_k,warps,stages of large tables")
    args = parser.parse_args(argv)
    # Module constants read when a plan is first built: set before any is.
    if args.small_tiles:
        T.SMALL_TILES = T.TileConfig(*map(int, args.small_tiles.split(",")))
    if args.large_tiles:
        T.LARGE_TILES = T.TileConfig(*map(int, args.large_tiles.split(",")))
    device = torch.device("cuda")
    if not torch.cuda.is_available():
        print("bench_triton_ns needs a CUDA GPU", file=sys.stderr)
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
                row.update(_kernels_per_step(opt, device))
            row["warnings"] = [str(w.message)[:300] for w in caught]
            rows[variant] = row
            print(
                f"{name} {variant:34s} {s.median:8.3f} ms ({s.min:.3f}-{s.max:.3f}) "
                f"{row.get('kernels_per_step', '')}",
                flush=True,
            )
        results["sets"][name] = rows
    evidence = build_evidence(
        "musgd-triton-ns", results, device=device, argv=sys.argv[1:], commit=args.commit
    )
    sha = (evidence["git_commit"] or "nocommit")[:7]
    path = write_evidence(evidence, args.out / f"musgd-triton-ns-h200-{sha}.json")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
