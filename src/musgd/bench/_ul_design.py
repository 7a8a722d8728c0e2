"""The trainer benchmark's design: rounds of stock and our runs, and what a round compares.

A round of ``--design ab`` is stock then ours (reversed in odd rounds); one of ``abba`` is that
order and then its reverse, so each arm takes both places in the round and the place effect (the
run second in its pair was measured slower, whichever arm it was) cancels out of its ratio.
Everything here is pure: run results (dicts of the evidence) in, summaries out.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from musgd.bench._timing import paired_ratios, summarize

__all__ = [
    "ARMS",
    "DATA_BOUND_SHARE",
    "MERGED_METRICS",
    "PAIR_METRICS",
    "PAIR_SUMMARIES",
    "SKIP_FIRST",
    "epoch_summaries",
    "lowdata_wanted",
    "mean_abs_gap",
    "merge_runs",
    "pair_summary",
    "round_order",
    "smooth",
    "summarize_pairs",
    "summary_dict",
]

ARMS = ("stock", "ours")
SKIP_FIRST = 10  # iterations left out of the timing medians: recording, cuDNN autotuning
# The loader's wait at which the low-data variant runs (--lowdata auto): a fifth of the iteration.
DATA_BOUND_SHARE = 0.2
# Per-run medians compared pair by pair (stock/ours): the iteration, the iteration less its data
# wait, the first epoch (with the run's start) and the epochs after it.
PAIR_METRICS = ("iteration_ms", "compute_ms", "first_epoch_s", "steady_epoch_s")
# Each one's name in a batch's pair summary: the metric without its unit.
PAIR_SUMMARIES = {metric: metric.rsplit("_", 1)[0] for metric in PAIR_METRICS}
# Per-run entries a merged arm (--design abba) combines; the rest comes from its first run.
MERGED_METRICS = (*PAIR_METRICS, "data_wait_ms")


def round_order(k: int, design: str) -> tuple[str, ...]:
    """The arms of round ``k`` in the order they run: ``ab`` alternates stock-ours and
    ours-stock from round to round; ``abba`` runs that order and then its reverse."""
    order = ARMS if k % 2 == 0 else ARMS[::-1]
    return (*order, *order[::-1]) if design == "abba" else order


def summary_dict(values: Sequence[float], *, skip: int = SKIP_FIRST) -> dict[str, float] | None:
    """Median, min, max and count of ``values`` after the first ``skip`` (all of them when few)."""
    kept = list(values[skip:]) if len(values) > skip + 2 else list(values)
    if not kept:
        return None
    s = summarize(kept)
    return {"median": s.median, "min": s.min, "max": s.max, "count": s.count}


def epoch_summaries(epoch_s: Sequence[float]) -> dict[str, dict[str, float] | None]:
    """A run's first epoch (with the run's one-time start: loader workers, autotuning,
    recordings) and its later epochs (median and range; None with one epoch), apart."""
    first = summary_dict(epoch_s[:1], skip=0)
    steady = summary_dict(epoch_s[1:], skip=0)
    return {"first_epoch_s": first, "steady_epoch_s": steady}


def pair_summary(pairs: Sequence[dict[str, Any]], metric: str) -> dict[str, Any] | None:
    """Per pair, stock/ours of the runs' ``metric`` medians: ratios (above 1: ours faster) and
    savings (1 - ours/stock), each with median and range; None where a pair lacks the metric."""
    stock, ours = [], []
    for pair in pairs:
        a, b = pair["stock"].get(metric), pair["ours"].get(metric)
        if not a or not b:
            return None
        stock.append(a["median"])
        ours.append(b["median"])
    if not stock:
        return None
    ratio = paired_ratios(stock, ours)
    savings = [1.0 - 1.0 / r for r in ratio["per_round"]]
    return {
        "stock_over_ours": ratio,
        "saving": {
            "median": float(statistics.median(savings)),
            "min": min(savings),
            "max": max(savings),
            "per_pair": savings,
        },
    }


def lowdata_wanted(mode: str, shares: Sequence[float | None]) -> bool:
    """Whether to run the low-data variant: ``on``, ``off``, or ``auto`` where any stock data
    wait share reaches :data:`DATA_BOUND_SHARE` (or none was measured)."""
    if mode != "auto":
        return mode == "on"
    measured = [s for s in shares if s is not None]
    return not measured or max(measured) >= DATA_BOUND_SHARE


def _merge_entries(entries: Sequence[dict[str, float] | None]) -> dict[str, float] | None:
    """One summary of several runs' summaries of a metric: the mean of their medians (the runs
    have equal weight), the extremes of their ranges, their counts added; None if any lacks it."""
    if not entries or any(e is None for e in entries):
        return None
    kept = [e for e in entries if e is not None]
    return {
        "median": statistics.fmean(e["median"] for e in kept),
        "min": min(e["min"] for e in kept),
        "max": max(e["max"] for e in kept),
        "count": sum(e["count"] for e in kept),
    }


def merge_runs(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """An arm's runs within one round (same arm, seed and batch) as one entry for the pair
    ratios: each metric and phase merged by :func:`_merge_entries`, losses and replay counts
    from the first run (same seed: the same training), ``merged_runs`` saying how many."""
    if len({(r["arm"], r["seed"]) for r in runs}) != 1:
        raise ValueError("merge_runs: the runs must share their arm and seed")
    merged = dict(runs[0])
    for metric in MERGED_METRICS:
        merged[metric] = _merge_entries([r.get(metric) for r in runs])
    phases: dict[str, Any] = {}
    for name in runs[0]["phases"]:
        entry = _merge_entries([r["phases"].get(name) for r in runs])
        if entry is not None:
            phases[name] = entry
    iteration = phases.get("iteration", {}).get("median")
    if iteration:
        for entry in phases.values():
            entry["share"] = entry["median"] / iteration
    merged["phases"] = phases
    merged["merged_runs"] = len(runs)
    return merged


def smooth(values: Sequence[float], width: int = 10) -> list[float]:
    """The running mean of the last ``width`` values at each position."""
    out: list[float] = []
    for i in range(len(values)):
        window = values[max(0, i - width + 1) : i + 1]
        out.append(statistics.fmean(window))
    return out


def mean_abs_gap(a: Sequence[float], b: Sequence[float]) -> float | None:
    """The mean absolute gap of the two smoothed curves over their common length."""
    n = min(len(a), len(b))
    if n == 0:
        return None
    sa, sb = smooth(a[:n]), smooth(b[:n])
    return statistics.fmean(abs(x - y) for x, y in zip(sa, sb, strict=True))


def summarize_pairs(pairs: list[dict[str, Any]]) -> dict[str, Any]:
    """A batch size's pairs with their pair summaries and the loss gaps: ours against stock at
    seed 0, and stock seed 1 against stock seed 0 (the seed-to-seed noise)."""
    out: dict[str, Any] = {"pairs": pairs, "count": len(pairs)}
    for metric, name in PAIR_SUMMARIES.items():
        out[name] = pair_summary(pairs, metric)
    if pairs:
        first = pairs[0]
        out["loss_gap_ours_vs_stock"] = mean_abs_gap(
            first["ours"]["losses"], first["stock"]["losses"]
        )
    if len(pairs) > 1:
        out["loss_gap_stock_seed1_vs_stock"] = mean_abs_gap(
            pairs[1]["stock"]["losses"], pairs[0]["stock"]["losses"]
        )
    return out
