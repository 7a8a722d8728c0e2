"""Which tile configurations of the Triton Newton-Schulz kernels capture in a CUDA graph, and how
fast each runs: on the YOLO26 tables (five iterations, replayed from a graph) and on the large
bf16 stacks 24x1024x4096 and 8x4096x4096 (eager). Prints one line per configuration and table and
writes ``musgd-triton-tiles-<commit>.json`` evidence under ``--out``.

    PYTHONPATH=src python scripts/tune_triton_ns.py --out out/ --commit $(git rev-parse HEAD)
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

import torch

from musgd import _triton_ns as T
from musgd._newton_schulz import DEFAULT_COEFFICIENTS
from musgd.bench._evidence import build_evidence, write_evidence

DATA = Path(__file__).resolve().parents[1] / "src" / "musgd" / "bench" / "data"
TRIPLES = (DEFAULT_COEFFICIENTS,) * 5
CONFIGS = {
    "64/32/w4/s3": T.TileConfig(64, 32, 4, 3),
    "64/64/w4/s3": T.TileConfig(64, 64, 4, 3),
    "128/32/w4/s3": T.TileConfig(128, 32, 4, 3),
    "128/64/w4/s3": T.TileConfig(128, 64, 4, 3),
    "128/64/w8/s3": T.TileConfig(128, 64, 8, 3),
}


def tables() -> dict[str, tuple[tuple[int, int], ...]]:
    out: dict[str, tuple[tuple[int, int], ...]] = {}
    for name in ("yolo26n", "yolo26s", "yolo26m"):
        shapes = json.loads((DATA / f"{name}_shapes.json").read_text())["matrices"]
        out[name] = tuple((s[0], math.prod(s) // s[0]) for s in shapes)
    out["24x1024x4096"] = ((1024, 4096),) * 24
    out["8x4096x4096"] = ((4096, 4096),) * 8
    return out


def _time(fn: Any, reps: int) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
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
        return f"{cfg.block},{cfg.block_k},{cfg.num_warps},{cfg.num_stages}"

    return {"small": spec(best_small), "large": spec(best_large)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=Path("out"))
    parser.add_argument("--commit", default=None)
    parser.add_argument("--configs", default=",".join(CONFIGS))
    args = parser.parse_args(argv)
    device = torch.device("cuda")
    results: dict[str, Any] = {}
    for table, shapes in tables().items():
        big = table.startswith(("24x", "8x"))
        src = torch.randn(sum(r * c for r, c in shapes), device=device)
        if big:
            src = src.to(torch.bfloat16)
        m, n = zip(*((min(s), max(s)) for s in shapes), strict=True)
        flops = 5 * sum(4 * a * a * b + 2 * a**3 for a, b in zip(m, n, strict=True))
        rows: dict[str, Any] = {}
        for name in args.configs.split(","):
            # A plan of its own per configuration: its tile tables depend on the block size.
            plan = T.build_plan(shapes, device, CONFIGS[name])
            row: dict[str, Any] = {}

            def run(plan: T.TablePlan = plan, src: torch.Tensor = src) -> torch.Tensor:
                return T.run_plan(plan, src, TRIPLES, 1e-7, torch.bfloat16)

            try:
                eager = run()
                row["eager_ms"] = _time(run, 3 if big else 20)
                row["tflops"] = flops / row["eager_ms"] / 1e9
                if not big:
                    side = torch.cuda.Stream()
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
            rows[name] = row
            print(table, name, json.dumps(row), flush=True)
        results[table] = rows
    results["pick"] = pick(results)
    print("PICK", " ".join(f"--{k}-tiles {v}" for k, v in results["pick"].items()), flush=True)
    evidence = build_evidence(
        "musgd-triton-tiles", results, device=device, argv=sys.argv[1:], commit=args.commit
    )
    sha = (evidence["git_commit"] or "nocommit")[:7]
    print("wrote", write_evidence(evidence, args.out / f"musgd-triton-tiles-h200-{sha}.json"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
