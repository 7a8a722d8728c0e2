"""The trainer benchmark's report: the curves its evidence carries, read by the site's chart."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from musgd.bench import _ul_report as report
from musgd.bench._ul_plan import UsageError


def _run(seed: int, losses: list[float], trace: list[float | None]) -> dict[str, Any]:
    return {"seed": seed, "losses": losses, "trace_ms": {"iteration": trace}}


def _train(batches: dict[str, int]) -> dict[str, Any]:
    """A train result: per batch size, that many pairs of runs with recognisable numbers."""
    out: dict[str, Any] = {}
    for batch, count in batches.items():
        pairs = [
            {
                "seed": k,
                "stock": _run(k, [3.0 + k, 2.0 + k], [None, 100.0 + k, 102.0, None, 90.0]),
                "ours": _run(k, [3.5, 2.5], [None, 50.0, 60.0, 70.0]),
            }
            for k in range(count)
        ]
        out[batch] = {"pairs": pairs}
    return {"variants": {"default": {"batches": out}, "lowdata": {"batches": out}}}


def test_curves_take_the_agreed_line_series_form() -> None:
    curves = report.build_curves(_train({"4": 2}))
    assert set(curves) == {"loss", "iteration_ms"}
    loss, iteration = curves["loss"], curves["iteration_ms"]
    assert (loss["x_label"], loss["y_label"]) == ("iteration", "loss")
    assert (iteration["x_label"], iteration["y_label"]) == ("epoch", "iteration median (ms)")
    # Stock and ours at seed 0 and stock at seed 1 (the seed-to-seed noise), as trained.
    assert loss["series"] == {
        "stock seed 0": [3.0, 2.0],
        "ours seed 0": [3.5, 2.5],
        "stock seed 1": [4.0, 3.0],
    }
    # Each None of a trace starts an epoch; an epoch's median of its timed iterations.
    assert iteration["series"] == {
        "stock seed 0": [101.0, 90.0],
        "ours seed 0": [60.0],
        "stock seed 1": [101.5, 90.0],
        "ours seed 1": [60.0],
    }
    json.dumps(curves, allow_nan=False)  # plain JSON numbers only


def test_several_batch_sizes_name_the_batch_and_lowdata_stays_out() -> None:
    curves = report.build_curves(_train({"4": 1, "16": 1}))
    assert sorted(curves["loss"]["series"]) == [
        "ours b16 seed 0",
        "ours b4 seed 0",
        "stock b16 seed 0",
        "stock b4 seed 0",
    ]
    assert report.build_curves({"variants": {}})["loss"]["series"] == {}


def test_points_that_are_no_number_leave_explicit_x() -> None:
    train = _train({"4": 1})
    pair = train["variants"]["default"]["batches"]["4"]["pairs"][0]
    pair["stock"]["losses"] = [3.0, math.nan, 2.0]
    pair["ours"]["trace_ms"]["iteration"] = [None, None, 5.0]  # an epoch of one iteration
    curves = report.build_curves(train)
    assert curves["loss"]["series"]["stock seed 0"] == {"x": [1.0, 3.0], "y": [3.0, 2.0]}
    assert curves["iteration_ms"]["series"]["ours seed 0"] == {"x": [2.0], "y": [5.0]}
    json.dumps(curves, allow_nan=False)


def test_epoch_medians_split_at_each_untimed_first_iteration() -> None:
    assert report.epoch_medians([None, 1.0, 3.0, None, 5.0]) == [2.0, 5.0]
    assert report.epoch_medians([4.0, None]) == [4.0, None]
    assert report.epoch_medians([]) == []


def test_format_entry() -> None:
    assert report.format_entry({"median": 2.25, "min": 1.0, "max": 3.04}) == "2.2 (1.0-3.0)"
    assert report.format_entry(None) == "n/a"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "cannot read"),
        (b"\xff{results", "is not JSON"),
        (b'{"results": [1, 2]}', "is not an evidence file"),
        (b'{"results": {"floors": []}}', "not an ultralytics-train evidence file"),
    ],
)
def test_reading_a_file_that_is_no_train_evidence_says_why(
    tmp_path: Path, content: bytes | None, message: str
) -> None:
    path = tmp_path / "train.json"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(UsageError, match=message):
        report.read_train_results(path)


def test_every_arm_of_a_round_gets_its_curves() -> None:
    first = {
        "seed": 0,
        "order": ["stock", "ours-network", "stock-channels-last"],
        "stock": _run(0, [3.0], [None, 100.0]),
        "ours-network": _run(0, [3.25], [None, 40.0]),
        "stock-channels-last": _run(0, [3.5], [None, 90.0]),
    }
    second = {**first, "seed": 1, "order": ["ours-network", "stock-channels-last", "stock"]}
    second["stock"] = _run(1, [4.0], [None, 110.0])
    train = {"variants": {"default": {"batches": {"4": {"pairs": [first, second]}}}}}
    curves = report.build_curves(train)
    assert curves["loss"]["series"] == {
        "stock seed 0": [3.0],
        "ours-network seed 0": [3.25],
        "stock-channels-last seed 0": [3.5],
        "stock seed 1": [4.0],
    }
    assert curves["iteration_ms"]["series"]["ours-network seed 1"] == [40.0]
    assert curves["iteration_ms"]["series"]["stock seed 1"] == [110.0]
    assert len(curves["iteration_ms"]["series"]) == 6
