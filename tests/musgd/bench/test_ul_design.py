"""The trainer benchmark's design: rounds, per-pair ratios, merged ``abba`` arms, epoch splits."""

from __future__ import annotations

from typing import Any

import pytest

from musgd.bench import _ul_design as design


def _run(iteration: float | None, compute: float | None = None) -> dict[str, Any]:
    def entry(v: float | None) -> dict[str, float] | None:
        return None if v is None else {"median": v, "min": v, "max": v, "count": 5}

    return {"iteration_ms": entry(iteration), "compute_ms": entry(compute)}


def test_pair_summary_is_per_pair_stock_over_ours() -> None:
    pairs = [
        {"stock": _run(120.0, 100.0), "ours": _run(80.0, 50.0)},
        {"stock": _run(150.0, 100.0), "ours": _run(100.0, 80.0)},  # a slow pair: both slower
        {"stock": _run(90.0, 100.0), "ours": _run(90.0, 100.0)},
    ]
    summary = design.pair_summary(pairs, "iteration_ms")
    assert summary is not None
    ratio, saving = summary["stock_over_ours"], summary["saving"]
    assert ratio["per_round"] == [1.5, 1.5, 1.0]
    assert (ratio["median"], ratio["min"], ratio["max"]) == (1.5, 1.0, 1.5)
    assert saving["per_pair"] == pytest.approx([1 / 3, 1 / 3, 0.0])
    assert saving["median"] == pytest.approx(1 / 3)
    compute = design.pair_summary(pairs, "compute_ms")
    assert compute is not None
    assert compute["stock_over_ours"]["per_round"] == [2.0, 1.25, 1.0]


def test_pair_summary_needs_the_metric_in_every_pair() -> None:
    pairs = [{"stock": _run(120.0), "ours": _run(80.0)}, {"stock": _run(None), "ours": _run(1.0)}]
    assert design.pair_summary(pairs, "iteration_ms") is None
    assert design.pair_summary([], "iteration_ms") is None


def test_epoch_summaries_keep_the_first_epoch_apart() -> None:
    three = design.epoch_summaries([9.0, 2.0, 3.0])
    assert three["first_epoch_s"] == {"median": 9.0, "min": 9.0, "max": 9.0, "count": 1}
    assert three["steady_epoch_s"] == {"median": 2.5, "min": 2.0, "max": 3.0, "count": 2}
    assert design.epoch_summaries([9.0])["steady_epoch_s"] is None
    assert design.epoch_summaries([]) == {"first_epoch_s": None, "steady_epoch_s": None}


def test_summary_dict_skips_the_first_iterations_when_there_are_enough() -> None:
    values = [100.0] * design.SKIP_FIRST + [1.0, 2.0, 3.0]
    assert design.summary_dict(values) == {"median": 2.0, "min": 1.0, "max": 3.0, "count": 3}
    assert design.summary_dict([5.0, 7.0]) == {"median": 6.0, "min": 5.0, "max": 7.0, "count": 2}
    assert design.summary_dict([]) is None


def test_pairs_compare_epochs_where_every_run_has_them() -> None:
    def run(epochs: list[float]) -> dict[str, Any]:
        return {**_run(100.0, 90.0), **design.epoch_summaries(epochs), "losses": []}

    pairs = [{"stock": run([9.0, 3.0, 3.0]), "ours": run([8.0, 2.0, 2.0])}]
    out = design.summarize_pairs(pairs)
    assert out["steady_epoch"]["stock_over_ours"]["per_round"] == [1.5]
    assert out["first_epoch"]["stock_over_ours"]["per_round"] == [9.0 / 8.0]
    one_epoch = [{"stock": run([9.0]), "ours": run([8.0])}]
    assert design.summarize_pairs(one_epoch)["steady_epoch"] is None


def test_loss_gaps_compare_ours_and_the_next_seed_with_stock() -> None:
    def run(losses: list[float]) -> dict[str, Any]:
        return {**_run(1.0, 1.0), "losses": losses}

    pairs = [
        {"stock": run([2.0, 2.0]), "ours": run([2.5, 2.5])},
        {"stock": run([3.0, 3.0, 9.0]), "ours": run([1.0])},
    ]
    out = design.summarize_pairs(pairs)
    assert out["loss_gap_ours_vs_stock"] == pytest.approx(0.5)
    assert out["loss_gap_stock_seed1_vs_stock"] == pytest.approx(1.0)  # common length only
    assert design.mean_abs_gap([], [1.0]) is None
    assert design.smooth([1.0, 3.0, 5.0], width=2) == [1.0, 2.0, 4.0]


def test_round_order_alternates_and_abba_puts_each_arm_in_both_places() -> None:
    assert design.round_order(0, "ab") == ("stock", "ours")
    assert design.round_order(1, "ab") == ("ours", "stock")
    assert design.round_order(0, "abba") == ("stock", "ours", "ours", "stock")
    assert design.round_order(3, "abba") == ("ours", "stock", "stock", "ours")


def _timed(arm: str, iteration: float, spread: float, losses: list[float]) -> dict[str, Any]:
    entry = {"median": iteration, "min": iteration - spread, "max": iteration + spread, "count": 50}
    return {
        "arm": arm,
        "seed": 2,
        "iteration_ms": entry,
        "compute_ms": entry,
        "data_wait_ms": {"median": 0.2, "min": 0.1, "max": 0.5, "count": 50},
        "first_epoch_s": None,
        "steady_epoch_s": None,
        "phases": {"iteration": entry, "forward_backward": {**entry, "median": iteration / 2}},
        "losses": losses,
    }


def test_merge_runs_weighs_an_arms_runs_equally() -> None:
    merged = design.merge_runs([_timed("ours", 80.0, 5.0, [3.0]), _timed("ours", 90.0, 1.0, [9.0])])
    assert merged["iteration_ms"] == {"median": 85.0, "min": 75.0, "max": 91.0, "count": 100}
    assert merged["phases"]["forward_backward"]["median"] == 42.5
    assert merged["phases"]["forward_backward"]["share"] == 0.5
    assert merged["first_epoch_s"] is None  # one run lacks it: no merged value
    assert (merged["losses"], merged["merged_runs"]) == ([3.0], 2)
    with pytest.raises(ValueError, match="share their arm and seed"):
        design.merge_runs([_timed("ours", 80.0, 1.0, []), _timed("stock", 80.0, 1.0, [])])


def test_an_abba_round_cancels_a_place_effect() -> None:
    # Second place costs 10% whichever arm holds it; ours is truly 1.5x faster.
    s1, o1 = _timed("stock", 120.0, 1.0, []), _timed("ours", 88.0, 1.0, [])
    o2, s2 = _timed("ours", 80.0, 1.0, []), _timed("stock", 132.0, 1.0, [])
    ab = [{"stock": s1, "ours": o1}]
    abba = [{"stock": design.merge_runs([s1, s2]), "ours": design.merge_runs([o1, o2])}]
    ab_summary = design.pair_summary(ab, "iteration_ms")
    abba_summary = design.pair_summary(abba, "iteration_ms")
    assert ab_summary is not None
    assert abba_summary is not None
    assert ab_summary["stock_over_ours"]["median"] == pytest.approx(120.0 / 88.0)
    assert abba_summary["stock_over_ours"]["median"] == pytest.approx(1.5)


def test_lowdata_wanted() -> None:
    assert design.lowdata_wanted("on", [0.0])
    assert not design.lowdata_wanted("off", [0.9])
    assert design.lowdata_wanted("auto", [0.05, design.DATA_BOUND_SHARE])
    assert not design.lowdata_wanted("auto", [0.05, None, 0.1])
    assert design.lowdata_wanted("auto", [None])  # nothing measured: measure both
