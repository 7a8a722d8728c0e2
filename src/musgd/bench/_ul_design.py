"""The trainer benchmark's design: rounds over the arms, and what a round compares.

A round runs every arm of ``--arms`` once (``--design ab``), in an order that rotates from round
to round: round k starts at arm k mod N and goes on in the given order, so over N rounds each arm
takes each place (with the default ``stock,ours``: stock then ours, ours then stock, ...). A round
of ``abba`` is that order and then its reverse, so an arm's two places in the round add up to the
same for every arm and a place effect that grows with the place (the run second in its pair was
measured slower, whichever arm it was) cancels out of its ratios. The entries of a batch size's
rounds are still called ``pairs`` in the evidence (two arms was the first design).
Everything here is pure: run results (dicts of the evidence) in, summaries out.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from musgd.bench._timing import paired_ratios, summarize
from musgd.bench._ul_arms import BASE_SUFFIX, DEFAULT_ARMS, STOCK

__all__ = [
    "ARM_METRICS",
    "DATA_BOUND_SHARE",
    "MERGED_METRICS",
    "PAIR_METRICS",
    "PAIR_SUMMARIES",
    "RATIO_METRICS",
    "SKIP_FIRST",
    "arm_ratio",
    "arm_summary",
    "epoch_summaries",
    "lowdata_wanted",
    "mean_abs_gap",
    "merge_runs",
    "pair_summary",
    "round_order",
    "run_value",
    "smooth",
    "summarize_pairs",
    "summary_dict",
]

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
# Per-run numbers a merged arm averages: model.train's wall time and its process's (start-up,
# imports, model build, compilation and recordings included).
MERGED_SCALARS = ("run_s", "process_s")
# Compared with stock round by round, every arm: the pair metrics and the complete fit.
RATIO_METRICS = (*PAIR_METRICS, *MERGED_SCALARS)
# Summarized per arm over its rounds (median and range of the runs' values): the ratio metrics
# and the CUDA allocator's peaks (None on a CPU).
ARM_METRICS = (*RATIO_METRICS, "peak_allocated_mib", "peak_reserved_mib")


def round_order(k: int, design: str, arms: Sequence[str] = DEFAULT_ARMS) -> tuple[str, ...]:
    """The arms of round ``k`` in the order they run: ``arms`` rotated to start at arm
    ``k mod N`` (``ab``); ``abba`` runs that order and then its reverse."""
    start = k % len(arms)
    order = (*arms[start:], *arms[:start])
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


def run_value(run: dict[str, Any], metric: str) -> float | None:
    """A run's number for ``metric``: the median of a summary entry (``iteration_ms``), a plain
    number (``run_s``), or a CUDA peak (``peak_allocated_mib`` from ``memory_mib``); None where
    the run lacks it."""
    if metric.startswith("peak_"):
        memory = run.get("memory_mib") or {}
        value = memory.get(metric.removesuffix("_mib"))
    else:
        value = run.get(metric)
        if isinstance(value, dict):
            value = value.get("median")
    return float(value) if isinstance(value, int | float) else None


def _against(pairs: Sequence[dict[str, Any]], arm: str, base: str, key: str) -> dict[str, Any]:
    """Per :data:`RATIO_METRICS` metric (its name without the unit), :func:`arm_ratio` of
    ``arm`` against ``base`` as ``key`` and ``saving`` (None where a round lacks a value)."""
    entries: dict[str, Any] = {}
    for metric in RATIO_METRICS:
        summary = arm_ratio(pairs, metric, arm, base)
        entries[metric.rsplit("_", 1)[0]] = (
            None if summary is None else {key: summary["ratio"], "saving": summary["saving"]}
        )
    return entries


def arm_ratio(
    pairs: Sequence[dict[str, Any]], metric: str, arm: str, base: str = STOCK
) -> dict[str, Any] | None:
    """Per round, base/arm of the runs' ``metric`` values: the ratios (above 1: ``arm`` faster)
    and the savings (1 - arm/base), each with median and range; None where a round lacks a
    positive value of either."""
    bases, arms = [], []
    for pair in pairs:
        a, b = run_value(pair[base], metric), run_value(pair[arm], metric)
        if not a or not b or a <= 0 or b <= 0:
            return None
        bases.append(a)
        arms.append(b)
    if not bases:
        return None
    ratio = paired_ratios(bases, arms)
    savings = [1.0 - 1.0 / r for r in ratio["per_round"]]
    return {
        "ratio": ratio,
        "saving": {
            "median": float(statistics.median(savings)),
            "min": min(savings),
            "max": max(savings),
            "per_pair": savings,
        },
    }


def pair_summary(pairs: Sequence[dict[str, Any]], metric: str) -> dict[str, Any] | None:
    """:func:`arm_ratio` of ``ours``, its ratio under the name ``stock_over_ours`` (the
    two-arm evidence's form)."""
    summary = arm_ratio(pairs, metric, "ours")
    if summary is None:
        return None
    return {"stock_over_ours": summary["ratio"], "saving": summary["saving"]}


def arm_summary(pairs: Sequence[dict[str, Any]], arm: str) -> dict[str, dict[str, float] | None]:
    """Per :data:`ARM_METRICS` metric, the median, range and count of ``arm``'s run values over
    the rounds (a round's value: its run's median, or the merged runs' mean); None where no
    round has one."""
    out: dict[str, dict[str, float] | None] = {}
    for metric in ARM_METRICS:
        values = [v for pair in pairs if (v := run_value(pair[arm], metric)) is not None]
        out[metric] = summary_dict(values, skip=0)
    return out


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
    ratios: each metric and phase merged by :func:`_merge_entries`, the wall times
    (:data:`MERGED_SCALARS`) averaged and the CUDA peaks the larger (None where a run lacks
    one), losses and replay counts from the first run (same seed: the same training),
    ``merged_runs`` saying how many."""
    if len({(r["arm"], r["seed"]) for r in runs}) != 1:
        raise ValueError("merge_runs: the runs must share their arm and seed")
    merged = dict(runs[0])
    for metric in MERGED_METRICS:
        merged[metric] = _merge_entries([r.get(metric) for r in runs])
    for metric in MERGED_SCALARS:
        values = [run_value(r, metric) for r in runs]
        kept = [v for v in values if v is not None]
        merged[metric] = statistics.fmean(kept) if kept and len(kept) == len(values) else None
    peaks = [r.get("memory_mib") for r in runs]
    kept_peaks = [p for p in peaks if p]
    merged["memory_mib"] = (
        {key: max(p[key] for p in kept_peaks) for key in kept_peaks[0]}
        if kept_peaks and len(kept_peaks) == len(peaks)
        else None
    )
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


def summarize_pairs(
    pairs: list[dict[str, Any]], arms: Sequence[str] = DEFAULT_ARMS
) -> dict[str, Any]:
    """A batch size's rounds (``pairs``, each holding a run of every arm) with their summaries:

    * ``per_arm``: each arm's :func:`arm_summary` (median and range over the rounds);
    * ``against_stock``: per arm other than stock, per :data:`RATIO_METRICS` metric (its name
      without the unit), :func:`arm_ratio` as ``stock_over_arm`` and ``saving``;
    * ``against_base``: the same for each arm run beside its ``@base`` arm (another musgd), as
      ``base_over_arm`` (above 1: this musgd faster);
    * ``loss_gap_vs_stock``: per arm, its losses against stock's at seed 0, and
      ``loss_gap_stock_seed1_vs_stock`` (the seed-to-seed noise);
    * with ``ours`` among the arms, the two-arm evidence's entries as well: per pair metric
      (``iteration``, ...) ``stock_over_ours`` and ``saving``, and ``loss_gap_ours_vs_stock``.
    """
    out: dict[str, Any] = {"pairs": pairs, "count": len(pairs), "arms": list(arms)}
    out["per_arm"] = {arm: arm_summary(pairs, arm) for arm in arms}
    out["against_stock"] = {
        arm: _against(pairs, arm, STOCK, "stock_over_arm") for arm in arms if arm != STOCK
    }
    # An arm beside its own @base arm (the same arm with another musgd): the two compared.
    based = [arm for arm in arms if f"{arm}{BASE_SUFFIX}" in arms]
    if based:
        out["against_base"] = {
            arm: _against(pairs, arm, f"{arm}{BASE_SUFFIX}", "base_over_arm") for arm in based
        }
    if "ours" in arms:
        for metric, name in PAIR_SUMMARIES.items():
            out[name] = pair_summary(pairs, metric)
    if pairs:
        first = pairs[0]
        gaps = {
            arm: mean_abs_gap(first[arm]["losses"], first[STOCK]["losses"])
            for arm in arms
            if arm != STOCK
        }
        out["loss_gap_vs_stock"] = gaps
        if "ours" in gaps:
            out["loss_gap_ours_vs_stock"] = gaps["ours"]
    if len(pairs) > 1:
        out["loss_gap_stock_seed1_vs_stock"] = mean_abs_gap(
            pairs[1][STOCK]["losses"], pairs[0][STOCK]["losses"]
        )
    return out
