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


def test_rounds_over_n_arms_rotate_so_each_arm_takes_each_place() -> None:
    arms = ("stock", "ours", "stock-channels-last")
    orders = [design.round_order(k, "ab", arms) for k in range(4)]
    assert orders[:3] == [
        ("stock", "ours", "stock-channels-last"),
        ("ours", "stock-channels-last", "stock"),
        ("stock-channels-last", "stock", "ours"),
    ]
    assert orders[3] == orders[0]  # round k starts at arm k mod N
    for arm in arms:
        assert sorted(order.index(arm) for order in orders[:3]) == [0, 1, 2]
    # abba: the rotated order and its reverse; an arm's two places add up alike for every arm.
    abba = design.round_order(1, "abba", arms)
    assert abba == ("ours", "stock-channels-last", "stock", "stock", "stock-channels-last", "ours")
    places = {arm: [i for i, a in enumerate(abba) if a == arm] for arm in arms}
    assert {sum(p) for p in places.values()} == {5}


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


def _arm_run(arm: str, iteration: float, run_s: float, peak: float | None) -> dict[str, Any]:
    entry = {"median": iteration, "min": iteration - 1.0, "max": iteration + 1.0, "count": 40}
    return {
        "arm": arm,
        "seed": 0,
        "iteration_ms": entry,
        "compute_ms": {**entry, "median": iteration - 2.0},
        "first_epoch_s": {"median": 9.0, "min": 9.0, "max": 9.0, "count": 1},
        "steady_epoch_s": None,
        "run_s": run_s,
        "process_s": run_s + 5.0,
        "memory_mib": None if peak is None else {"peak_allocated": peak, "peak_reserved": 2 * peak},
        "losses": [2.0, 1.0] if arm == "stock" else [2.5, 1.5],
    }


def test_n_arm_summaries_give_each_arm_its_medians_and_its_ratios_against_stock() -> None:
    arms = ("stock", "ours-network", "stock-channels-last")
    # Three rounds; stock 100, 120, 90 ms; ours-network twice as fast in every round.
    rounds = [
        {
            "seed": k,
            "stock": _arm_run("stock", it, 30.0 + k, 1000.0 + k),
            "ours-network": _arm_run("ours-network", it / 2, 20.0, 800.0),
            "stock-channels-last": _arm_run("stock-channels-last", it * 1.25, 40.0, 1100.0),
        }
        for k, it in enumerate((100.0, 120.0, 90.0))
    ]
    out = design.summarize_pairs(rounds, arms)
    assert (out["count"], out["arms"]) == (3, list(arms))
    stock = out["per_arm"]["stock"]
    assert stock["iteration_ms"] == {"median": 100.0, "min": 90.0, "max": 120.0, "count": 3}
    assert stock["run_s"] == {"median": 31.0, "min": 30.0, "max": 32.0, "count": 3}
    assert stock["process_s"]["median"] == 36.0
    assert stock["peak_allocated_mib"]["max"] == 1002.0
    assert stock["peak_reserved_mib"]["median"] == 2002.0
    assert stock["steady_epoch_s"] is None  # no round has it
    network = out["against_stock"]["ours-network"]
    assert network["iteration"]["stock_over_arm"]["per_round"] == [2.0, 2.0, 2.0]
    assert network["iteration"]["saving"]["median"] == pytest.approx(0.5)
    assert network["run"]["stock_over_arm"]["per_round"] == [1.5, 31.0 / 20.0, 1.6]
    assert network["process"]["stock_over_arm"]["median"] == pytest.approx(36.0 / 25.0)
    assert network["steady_epoch"] is None
    slower = out["against_stock"]["stock-channels-last"]["iteration"]["stock_over_arm"]
    assert slower["median"] == pytest.approx(0.8)
    assert set(out["against_stock"]) == {"ours-network", "stock-channels-last"}
    assert out["loss_gap_vs_stock"] == {
        "ours-network": pytest.approx(0.5),
        "stock-channels-last": pytest.approx(0.5),
    }
    # Without ours among the arms there is no two-arm entry to keep.
    assert "iteration" not in out
    assert "loss_gap_ours_vs_stock" not in out
    assert "against_base" not in out


def test_an_arm_beside_its_base_arm_is_compared_with_it_round_by_round() -> None:
    arms = ("stock", "ours-network-loss", "ours-network-loss@base")
    # The base musgd takes 15, 18, 12 ms; this one 12, 12, 12.
    rounds = [
        {
            "seed": k,
            "stock": _arm_run("stock", 100.0, 30.0, 1000.0),
            "ours-network-loss": _arm_run("ours-network-loss", 12.0, 20.0, 900.0),
            "ours-network-loss@base": _arm_run("ours-network-loss@base", base, 21.0, 950.0),
        }
        for k, base in enumerate((15.0, 18.0, 12.0))
    ]
    out = design.summarize_pairs(rounds, arms)
    against = out["against_base"]
    assert set(against) == {"ours-network-loss"}  # the base arm has no base of its own
    ratio = against["ours-network-loss"]["iteration"]["base_over_arm"]
    assert ratio["per_round"] == [1.25, 1.5, 1.0]
    assert ratio["median"] == pytest.approx(1.25)
    assert set(out["against_stock"]) == {"ours-network-loss", "ours-network-loss@base"}


def test_the_two_arm_summary_keeps_its_stock_over_ours_entries() -> None:
    rounds = [
        {
            "seed": 0,
            "stock": _arm_run("stock", 90.0, 30.0, None),
            "ours": _arm_run("ours", 60.0, 20.0, None),
        }
    ]
    out = design.summarize_pairs(rounds)
    assert out["iteration"]["stock_over_ours"]["per_round"] == [1.5]
    assert out["against_stock"]["ours"]["iteration"]["stock_over_arm"]["per_round"] == [1.5]
    assert out["loss_gap_ours_vs_stock"] == pytest.approx(0.5)
    assert out["per_arm"]["ours"]["peak_allocated_mib"] is None  # a CPU run has no peaks


def test_merged_runs_average_their_wall_times_and_keep_the_larger_peaks() -> None:
    first, second = _arm_run("ours", 80.0, 20.0, 500.0), _arm_run("ours", 90.0, 30.0, 700.0)
    merged = design.merge_runs([{**first, "phases": {}}, {**second, "phases": {}}])
    assert (merged["run_s"], merged["process_s"]) == (25.0, 30.0)
    assert merged["memory_mib"] == {"peak_allocated": 700.0, "peak_reserved": 1400.0}
    one_without = design.merge_runs(
        [{**first, "phases": {}}, {**second, "phases": {}, "memory_mib": None, "process_s": None}]
    )
    assert (one_without["memory_mib"], one_without["process_s"]) == (None, None)


def test_run_value_reads_medians_numbers_and_peaks() -> None:
    run = _arm_run("stock", 100.0, 30.0, 1000.0)
    assert design.run_value(run, "iteration_ms") == 100.0
    assert design.run_value(run, "run_s") == 30.0
    assert design.run_value(run, "peak_reserved_mib") == 2000.0
    assert design.run_value(run, "steady_epoch_s") is None
    assert design.run_value({}, "peak_allocated_mib") is None
