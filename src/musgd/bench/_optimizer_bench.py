"""Optimizer-step benchmark: every variant, side by side, on the same parameters and gradients."""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor

from musgd._functional import matrix_shape
from musgd.bench._models import ParamSpec, make_parameters
from musgd.bench._timing import Timing, paired_ratios, time_steps
from musgd.bench._variants import LR, MOMENTUM, NS_STEPS, Variant

BASELINE = "per-matrix eager"
# The replay variants' comparator (spec §3 targets): paired with each of them round by round.
PAIRED_BASELINE = "bucketed eager"


def _operands(variant: Variant, params: Sequence[Tensor], grads: Sequence[Tensor]) -> list[Tensor]:
    """Fresh copies of the parameters with their gradients attached, shaped as ``variant`` takes.

    A matrices-only peer gets the matrix parameters viewed as ``(rows, cols)``.
    """
    out = []
    for p, g in zip(params, grads, strict=True):
        shape = p.shape
        if variant.matrices_only:
            rc = matrix_shape(p.shape)
            if rc is None:
                continue
            shape = torch.Size(rc)
        q = p.detach().reshape(shape).clone()
        q.grad = g.detach().reshape(shape).clone()
        out.append(q)
    return out


def time_variant(
    variant: Variant,
    params: Sequence[Tensor],
    grads: Sequence[Tensor],
    *,
    steps: int,
    warmup: int,
    device: torch.device,
) -> tuple[Timing, int, dict[str, Any]]:
    """Time ``variant``'s ``step()``; returns the timing, how many tensors it stepped, and extras.

    The extras are the first step's wall time (``setup_ms``: it makes any replay recordings, so
    it is timed apart from the steady state) and, on CUDA, the peak allocated and reserved
    memory over the whole run in MiB, with what was allocated and reserved when it started:
    memory an earlier variant of the same process left behind (library workspaces of the
    streams it used, say) is in both, so the difference is this variant's own (``None``
    elsewhere); and ``stepper``, what a stepper with a ``describe()`` says it ran.
    """
    operands = _operands(variant, params, grads)
    start: dict[str, Any] = {"allocated_at_start_mib": None, "reserved_at_start_mib": None}
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        start["allocated_at_start_mib"] = torch.cuda.memory_allocated(device) / 2**20
        start["reserved_at_start_mib"] = torch.cuda.memory_reserved(device) / 2**20
    optimizer = variant.stepper(variant.build(operands))
    setup_ms = _wall_ms(optimizer.step, device)
    timing = time_steps(optimizer.step, steps=steps, warmup=warmup, device=device)
    extras: dict[str, Any] = {
        "setup_ms": setup_ms,
        "peak_allocated_mib": None,
        "peak_reserved_mib": None,
        **start,
    }
    if device.type == "cuda":
        extras["peak_allocated_mib"] = torch.cuda.max_memory_allocated(device) / 2**20
        extras["peak_reserved_mib"] = torch.cuda.max_memory_reserved(device) / 2**20
    describe = getattr(optimizer, "describe", None)
    if callable(describe):  # a stepper that says what it ran (NSOnlyStep)
        extras["stepper"] = describe()
    count = len(operands)
    del optimizer, operands
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return timing, count, extras


def _wall_ms(step: Callable[[], object], device: torch.device) -> float:
    """Wall-clock milliseconds of one call, device work included."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    step()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return (time.perf_counter() - start) * 1e3


def run_optimizer_benchmark(
    sets: dict[str, list[ParamSpec]],
    variants: Sequence[Variant],
    *,
    device: torch.device,
    steps: int,
    warmup: int,
    seed: int = 0,
    rounds: int = 1,
) -> dict[str, Any]:
    """Time each variant's step on each parameter set; JSON-ready results.

    Every variant of a set starts from the same seeded parameters and gradients. With
    ``rounds`` above one the variants take turns: each round builds every variant afresh, warms
    it up and times its share of the ``steps``, so a slow phase of a shared, noisy host falls on
    all variants alike instead of on whichever ran then. Samples pool across rounds; setup time
    and memory are the first round's. Speed-ups are
    ``baseline median / variant median`` against ``per-matrix eager`` when it ran. With two or
    more rounds each row also records its per-round medians and, against ``bucketed eager``,
    the per-round ratio of medians (:func:`paired_speedups`): a host that slows down for a
    while moves both sides of a round's ratio, not just one variant's pooled median.
    """
    if not 1 <= rounds <= steps:
        raise ValueError(f"rounds must be in 1..steps ({steps}), got {rounds}")
    shares = [steps // rounds + (r < steps % rounds) for r in range(rounds)]
    out: dict[str, Any] = {
        "benchmark": "optimizer-step",
        "hyperparameters": {"lr": LR, "momentum": MOMENTUM, "ns_steps": NS_STEPS},
        "seed": seed,
        "sets": {},
    }
    for set_name, specs in sets.items():
        params, grads = make_parameters(specs, device=device, seed=seed)
        matrices = sum(matrix_shape(s.shape) is not None for s in specs)
        runs: dict[str, list[tuple[Timing, int, dict[str, Any]]]] = {v.name: [] for v in variants}
        for share in shares:
            for variant in variants:
                runs[variant.name].append(
                    time_variant(variant, params, grads, steps=share, warmup=warmup, device=device)
                )
        rows = [_pooled_row(v, runs[v.name], rounds) for v in variants]
        base = next((r["median_ms"] for r in rows if r["variant"] == BASELINE), None)
        for row in rows:
            row["speedup_vs_per_matrix"] = None if base is None else base / row["median_ms"]
        if rounds > 1 and PAIRED_BASELINE in runs:
            paired = runs[PAIRED_BASELINE]
            for variant, row in zip(variants, rows, strict=True):
                row["speedup_vs_bucketed_by_round"] = paired_speedups(paired, runs[variant.name])
        out["sets"][set_name] = {
            "parameters": len(specs),
            "matrices": matrices,
            "numel": sum(torch.Size(s.shape).numel() for s in specs),
            "distinct_matrix_shapes": len({matrix_shape(s.shape) for s in specs} - {None}),
            "variants": rows,
        }
        del params, grads
    return out


def _round_median(run: tuple[Timing, int, dict[str, Any]]) -> float:
    return statistics.median(run[0].samples_ms)


def paired_speedups(
    baseline: Sequence[tuple[Timing, int, dict[str, Any]]],
    variant: Sequence[tuple[Timing, int, dict[str, Any]]],
) -> dict[str, Any]:
    """``baseline round median / variant round median`` for each round: median, range, values."""
    return paired_ratios([_round_median(b) for b in baseline], [_round_median(v) for v in variant])


def _pooled_row(
    variant: Variant, runs: list[tuple[Timing, int, dict[str, Any]]], rounds: int
) -> dict[str, Any]:
    """One variant's row from its runs of every round: samples pooled, the first round's extras.

    Setup time and memory come from the first round, the one closest to a fresh process: later
    rounds start with whatever every variant of the rounds before left behind.
    """
    first, count, extras = runs[0]
    pooled = Timing(
        samples_ms=tuple(x for timing, _, _ in runs for x in timing.samples_ms),
        warmup=first.warmup,
        clock=first.clock,
    )
    return {
        "variant": variant.name,
        "tensors": count,
        "matrices_only": variant.matrices_only,
        **pooled.as_dict(),
        "rounds": rounds,
        "round_medians_ms": [_round_median(run) for run in runs],
        **extras,
    }


def format_optimizer_table(results: dict[str, Any]) -> str:
    """A table: set, variant, tensors, median (min-max) ms, speed-up, and, with rounds, the
    median (range) of the per-round speed-ups over bucketed eager."""
    lines = [
        f"{'set':<12} {'variant':<26} {'tensors':>7}  {'step ms, median (range)':<28} speed-up"
        "  vs bucketed, by round"
    ]
    for set_name, entry in results["sets"].items():
        for row in entry["variants"]:
            stats = f"{row['median_ms']:.3f} ({row['min_ms']:.3f}\u2013{row['max_ms']:.3f})"
            speed = row["speedup_vs_per_matrix"]
            speed_text = "-" if speed is None else f"{speed:.2f}x"
            paired = row.get("speedup_vs_bucketed_by_round")
            paired_text = (
                "-"
                if paired is None
                else f"{paired['median']:.2f}x ({paired['min']:.2f}\u2013{paired['max']:.2f})"
            )
            lines.append(
                f"{set_name:<12} {row['variant']:<26} {row['tensors']:>7}  {stats:<28} "
                f"{speed_text:<8}  {paired_text}"
            )
    return "\n".join(lines)
