"""The trainer benchmark's report: the curves its evidence carries, and the lines it prints.

The loss and iteration-time curves go into the ``ultralytics-train`` evidence as
``results.curves``, in the line-series form the site's ``wpgate-evidence`` block renders (no
image is drawn): ``{name: {"x_label", "y_label", "series": {label: values}}}``, each series a
list of numbers (x = 1..n) or ``{"x": [...], "y": [...]}`` where some x has no value.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from musgd.bench._evidence import read_document
from musgd.bench._ul_plan import UsageError

__all__ = ["build_curves", "epoch_medians", "format_entry", "read_train_results"]

Series = list[float] | dict[str, list[float]]


def format_entry(entry: dict[str, float] | None) -> str:
    """``median (min-max)`` of a summary, one decimal; ``n/a`` without one."""
    if not entry:
        return "n/a"
    return f"{entry['median']:.1f} ({entry['min']:.1f}-{entry['max']:.1f})"


def _series(values: Sequence[float | None], x: Sequence[float] | None = None) -> Series:
    """``values`` as a series: a plain list when every value is a finite number at x = 1..n,
    else the finite points with their x (evidence numbers must be finite)."""
    xs = list(x) if x is not None else [float(i) for i in range(1, len(values) + 1)]
    kept = [
        (xi, float(v))
        for xi, v in zip(xs, values, strict=True)
        if v is not None and math.isfinite(v)
    ]
    if x is None and len(kept) == len(values):
        return [v for _, v in kept]
    return {"x": [xi for xi, _ in kept], "y": [v for _, v in kept]}


def epoch_medians(iteration_trace: Sequence[float | None]) -> list[float | None]:
    """The median iteration (ms) of each epoch of a run's ``trace_ms["iteration"]``.

    An epoch's first iteration has no time (its wait includes the loader's restart: the trace
    holds None there), so each None starts an epoch; an epoch without a timed iteration is None.
    """
    epochs: list[list[float]] = []
    for value in iteration_trace:
        if value is None or not epochs:
            epochs.append([])
        if value is not None:
            epochs[-1].append(value)
    return [float(statistics.median(e)) if e else None for e in epochs]


def _label(arm: str, seed: int, batch: str, several: bool) -> str:
    return f"{arm} b{batch} seed {seed}" if several else f"{arm} seed {seed}"


def _pair_arms(pair: dict[str, Any]) -> list[str]:
    """The arms a round holds, in their first order (a round without ``order``: stock, ours)."""
    return [arm for arm in dict.fromkeys(pair.get("order", ("stock", "ours"))) if arm in pair]


def build_curves(train: dict[str, Any]) -> dict[str, Any]:
    """The curves of an ``ultralytics-train`` result's default variant, per batch size.

    ``loss``: each iteration's training loss of every arm at seed 0 and of stock at seed 1
    (the seed-to-seed noise); ``iteration_ms``: each epoch's median iteration of every round's
    run of every arm (an ``abba`` round: each arm's first run). Labels name the batch when the
    result holds several.
    """
    batches = train.get("variants", {}).get("default", {}).get("batches", {})
    several = len(batches) > 1
    loss: dict[str, Series] = {}
    iteration: dict[str, Series] = {}
    for batch, result in batches.items():
        pairs = result.get("pairs", [])
        picked = [(pairs[0], arm) for arm in _pair_arms(pairs[0])] if pairs else []
        if len(pairs) > 1:
            picked.append((pairs[1], "stock"))
        for pair, arm in picked:
            run = pair[arm]
            loss[_label(arm, run.get("seed", pair["seed"]), batch, several)] = _series(
                run.get("losses", [])
            )
        for pair in pairs:
            for arm in _pair_arms(pair):
                trace = pair[arm].get("trace_ms", {}).get("iteration")
                if trace:
                    medians = epoch_medians(trace)
                    iteration[_label(arm, pair["seed"], batch, several)] = _series(medians)
    return {
        "loss": {"x_label": "iteration", "y_label": "loss", "series": loss},
        "iteration_ms": {
            "x_label": "epoch",
            "y_label": "iteration median (ms)",
            "series": iteration,
        },
    }


def read_train_results(path: Path) -> dict[str, Any]:
    """The ``results`` of an ``ultralytics-train`` evidence file, or a UsageError saying why
    the file cannot be one."""
    try:
        results: dict[str, Any] = read_document(path)["results"]
    except ValueError as exc:
        raise UsageError(
            f"--curves-from: {exc}; pass the ultralytics-train.json the benchmark wrote"
        ) from exc
    if not isinstance(results.get("variants"), dict):
        raise UsageError(
            f"--curves-from: {path} is not an ultralytics-train evidence file (no "
            "results.variants); pass the ultralytics-train.json the benchmark wrote"
        )
    return results
