"""``python -m musgd.bench ultralytics`` (what ``scripts/ultralytics_gpu.py`` launches) runs end
to end on CPU (``--quick``), as the GPU gate runs it."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("ultralytics", reason="ultralytics is not installed: make test-ultralytics")

from musgd.bench import _ul_plan, _ul_runs
from musgd.bench._cli import main
from musgd.bench._yolo_data import write_synthetic_dataset


def _main(argv: list[str]) -> int:
    return main(["ultralytics", *argv])


def _quick_cpu(tmp_path: Path, *options: str) -> dict[str, Any]:
    """Run the script on CPU (``--quick``) with ``options``; the results of each evidence file."""
    argv = ["--device", "cpu", "--quick", "--batch-sizes", "4", "--out", str(tmp_path)]
    assert _main([*argv, *options]) == 0
    return {
        path.stem.removeprefix("ultralytics-"): json.loads(path.read_text(encoding="utf-8"))
        for path in tmp_path.glob("ultralytics-*.json")
    }


def test_identity_part_runs_and_is_bit_identical(tmp_path: Path) -> None:
    rc = _main(["--device", "cpu", "--quick", "--parts", "identity", "--out", str(tmp_path)])
    assert rc == 0
    evidence = json.loads((tmp_path / "ultralytics-identity.json").read_text(encoding="utf-8"))
    assert evidence["schema"] == "wpgate-evidence/1"
    results = evidence["results"]
    assert (results["task"], results["model"]) == ("detect", "yolo26n.yaml")
    # 12 steps asked for, 4 more allowed for the scaler's skips: 4 epochs of 4 iterations.
    assert (results["iterations"], results["steps"], results["skipped_steps"]) == (16, 16, 0)
    assert results["target_met"] is True
    assert results["bit_identical"] is True
    # The trainer's clip was checked against the eager call at every step (eager on a CPU).
    assert results["clip_calls"] == 16
    assert results["clip_mismatched_calls"] == []
    assert results["clip_replay"]["fallbacks"] == {"device:cpu": 16}
    assert results["warmup_active"] is True
    assert 0 < results["warmup_steps"] < results["steps"]


def test_phases_and_pairs_run_and_split_the_iteration(tmp_path: Path) -> None:
    evidence = _quick_cpu(
        tmp_path,
        "--parts",
        "phases,train",
        "--pairs",
        "2",
        "--lowdata",
        "on",
        "--lowdata-pairs",
        "1",
    )
    arms = evidence["phases"]["results"]["batches"]["4"]["arms"]
    for arm, optimizer in (("stock", "MuSGD"), ("ours", "UltralyticsMuSGD")):
        run = arms[arm]
        assert run["optimizer"] == optimizer
        assert run["synchronized"] is True
        p = run["phases"]
        # Every phase the trainer lets one observe was marked, in every iteration after the
        # first of each epoch (16 images at batch 4: 4 an epoch, 2 epochs for 8 iterations).
        for name in (
            "forward_backward",
            "loss_backward",
            "optimizer_step",
            "zero_grad",
            "ema_update",
            "unscale",
        ):
            assert p[name]["count"] == 8, name
        assert p["iteration"]["count"] == p["data_wait"]["count"] == 6
        assert p["compute"]["median"] <= p["iteration"]["max"]
        inner = p["optimizer_step"]["median"] + p["ema_update"]["median"]
        assert inner < p["trainer_optimizer_step"]["max"]
    results = evidence["train"]["results"]
    # Each run ran in its own process (the default), and says so.
    assert results["isolation"] == evidence["phases"]["results"]["isolation"] == "process"
    default = results["variants"]["default"]["batches"]["4"]
    assert default["count"] == 2
    assert [p["order"] for p in default["pairs"]] == [["stock", "ours"], ["ours", "stock"]]
    assert [p["seed"] for p in default["pairs"]] == [0, 1]
    ratio = default["iteration"]["stock_over_ours"]
    assert len(ratio["per_round"]) == 2
    assert ratio["min"] <= ratio["median"] <= ratio["max"]
    assert all(p["stock"]["synchronized"] is False for p in default["pairs"])
    # Two epochs a run: the first (with the run's start) and the later one, compared apart.
    for metric in ("first_epoch", "steady_epoch"):
        assert len(default[metric]["stock_over_ours"]["per_round"]) == 2, metric
    assert default["pairs"][0]["ours"]["steady_epoch_s"]["count"] == 1
    # Every run keeps its iterations one by one, and the host's load and clock around it.
    run = default["pairs"][0]["ours"]
    assert len(run["trace_ms"]["forward_backward"]) == run["iterations"] == 8
    assert set(run["host"]) == {"before", "after"}
    assert results["lowdata_decision"]["ran"] is True
    low = results["variants"]["lowdata"]
    assert low["kwargs"]["mosaic"] == 0.0
    assert low["batches"]["4"]["count"] == 1
    assert results["budget"]["skipped"] == []
    # The curves the site draws: the losses as trained, an iteration median per epoch.
    curves = results["curves"]
    assert curves["loss"]["series"]["ours seed 0"] == default["pairs"][0]["ours"]["losses"]
    assert set(curves["loss"]["series"]) == {"stock seed 0", "ours seed 0", "stock seed 1"}
    assert len(curves["iteration_ms"]["series"]["stock seed 1"]) == 2  # two epochs
    assert not list(tmp_path.glob("*.png"))


def _isolation_args(tmp_path: Path, isolation: str) -> Any:
    parser = argparse.ArgumentParser()
    _ul_plan.add_arguments(parser)
    args = _ul_plan.configure(parser.parse_args(["--device", "cpu", "--quick"]))
    args.isolation, args.work = isolation, tmp_path
    data = write_synthetic_dataset(
        tmp_path / "data", train_images=args.n_train, val_images=4, size=args.imgsz, seed=0
    ).data
    return args, data


def test_a_run_in_its_own_process_trains_exactly_as_in_this_one(tmp_path: Path) -> None:
    args, data = _isolation_args(tmp_path, "process")
    run = {"arm": "ours", "batch": 4, "seed": 3, "synchronize": False}
    child = _ul_runs.train_run(args, data, **run)
    args.isolation = "none"
    here = _ul_runs.train_run(args, data, **run)
    assert (child["arm"], child["seed"], child["optimizer"]) == ("ours", 3, "UltralyticsMuSGD")
    assert child["iterations"] == here["iterations"] > 0
    # Same seed, same data, a CPU without loader workers: the same training, loss for loss.
    assert child["losses"] == here["losses"]


def test_a_failed_run_in_its_own_process_says_which_and_why(tmp_path: Path) -> None:
    args, _data = _isolation_args(tmp_path, "process")
    with pytest.raises(_ul_runs.RunFailedError, match=r"failed in its own process \(exit [1-9]"):
        _ul_runs.train_run(
            args, tmp_path / "missing.yaml", arm="ours", batch=4, seed=0, synchronize=False
        )


def test_an_abba_round_runs_each_arm_twice_and_merges_them(tmp_path: Path) -> None:
    options = ["--parts", "train", "--pairs", "1", "--lowdata", "off", "--design", "abba"]
    results = _quick_cpu(tmp_path, *options)["train"]["results"]
    assert results["design"] == "abba"
    (pair,) = results["variants"]["default"]["batches"]["4"]["pairs"]
    assert pair["order"] == ["stock", "ours", "ours", "stock"]
    assert [run["arm"] for run in pair["runs"]] == pair["order"]
    stocks = [run for run in pair["runs"] if run["arm"] == "stock"]
    # The same seed twice: the same training, loss for loss; the merged entry has both runs.
    assert stocks[0]["losses"] == stocks[1]["losses"] == pair["stock"]["losses"]
    assert pair["stock"]["merged_runs"] == pair["ours"]["merged_runs"] == 2
    medians = [run["iteration_ms"]["median"] for run in stocks]
    assert pair["stock"]["iteration_ms"]["median"] == pytest.approx(sum(medians) / 2)


def test_network_part_finds_the_captured_network_bit_identical(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The network part on a CPU, with the fake grapher standing in for CUDA graphs (warm-up
    and all): three runs, the captured one equal to the eager ones loss for loss."""
    from replay_fakes import FakeNetworkGrapher

    import musgd._network_capture as network_capture

    monkeypatch.setattr(network_capture, "CudaNetworkGrapher", FakeNetworkGrapher)
    results = _quick_cpu(tmp_path, "--parts", "network")["network"]["results"]
    assert results["nbs"] == 64  # the trainer's default: gradients accumulate between steps
    assert results["iterations"] == 8
    assert results["eager_reproducible"] is True
    assert results["bit_identical"] is True
    assert results["first_differing_iteration"] is None
    # 16 images at batch 4: one layout, its first call eager, every other one replayed.
    assert (results["recordings"], results["replays"]) == (1, 7)
    assert results["replayed_all"] is True
    assert results["target_met"] is True
    assert len(set(results["state_sha256"].values())) == 1


def test_ours_network_times_our_arm_with_the_network_captured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from replay_fakes import FakeNetworkGrapher

    import musgd._network_capture as network_capture

    monkeypatch.setattr(network_capture, "CudaNetworkGrapher", FakeNetworkGrapher)
    options = ["--parts", "train", "--pairs", "1", "--lowdata", "off", "--ours-network"]
    # In this process, where the fake grapher is patched in.
    results = _quick_cpu(tmp_path, *options, "--isolation", "none")["train"]["results"]
    assert results["ours"]["capture_network"] is True
    (pair,) = results["variants"]["default"]["batches"]["4"]["pairs"]
    assert pair["stock"]["network"] is None
    assert pair["ours"]["network"]["replays"] == pair["ours"]["iterations"] - 1


def test_network_part_fails_where_nothing_was_captured(tmp_path: Path) -> None:
    """Without a grapher for the CPU the network runs eagerly throughout: equal bits prove
    nothing then, and the part says its target was not met."""
    argv = ["--device", "cpu", "--quick", "--parts", "network", "--out", str(tmp_path)]
    assert _main(argv) == 1
    evidence = json.loads((tmp_path / "ultralytics-network.json").read_text(encoding="utf-8"))
    results = evidence["results"]
    assert results["network"]["fallbacks"] == {"device:cpu": 8}
    assert (results["replayed_all"], results["target_met"]) == (False, False)


def test_budget_skips_runs_that_do_not_fit(tmp_path: Path) -> None:
    options = ["--parts", "train", "--pairs", "3", "--lowdata", "off", "--budget-s", "0.001"]
    results = _quick_cpu(tmp_path, *options)["train"]["results"]
    assert results["variants"]["default"]["batches"] == {}
    assert len(results["budget"]["skipped"]) == 3
    assert results["curves"]["loss"]["series"] == {}


def test_three_arms_each_train_as_their_name_says_in_rotating_rounds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    arms = "stock,ours,stock-channels-last"
    options = ["--parts", "train", "--rounds", "2", "--lowdata", "off", "--arms", arms]
    results = _quick_cpu(tmp_path, *options)["train"]["results"]
    assert list(results["arms"]) == arms.split(",")
    entry = results["variants"]["default"]["batches"]["4"]
    assert [p["order"] for p in entry["pairs"]] == [
        ["stock", "ours", "stock-channels-last"],
        ["ours", "stock-channels-last", "stock"],
    ]
    first = entry["pairs"][0]
    optimizers = {arm: first[arm]["optimizer"] for arm in first["order"]}
    assert optimizers == {
        "stock": "MuSGD",
        "ours": "UltralyticsMuSGD",
        "stock-channels-last": "MuSGD",
    }
    # The callback made the stock model and its EMA channels-last; plain stock stayed NCHW.
    assert first["stock-channels-last"]["layout_callback"] == {"model": True, "ema": True}
    converted, plain = first["stock-channels-last"]["layout"], first["stock"]["layout"]
    assert converted["four_d"] == plain["four_d"] > 0
    assert (converted["contiguous"], plain["channels_last"]) == (0, 0)
    assert converted["channels_last"] == plain["contiguous"] > 0
    for arm in first["order"]:  # the fit in its own process: start-up and all
        assert first[arm]["process_s"] > first[arm]["run_s"] > 0
    assert entry["per_arm"]["stock-channels-last"]["process_s"]["count"] == 2
    ratio = entry["against_stock"]["stock-channels-last"]["iteration"]["stock_over_arm"]
    assert len(ratio["per_round"]) == 2
    assert (
        entry["iteration"]["stock_over_ours"]["per_round"]
        == (entry["against_stock"]["ours"]["iteration"]["stock_over_arm"]["per_round"])
    )
    lines = [x for x in capsys.readouterr().out.splitlines() if x.startswith("round default")]
    assert len(lines) == 6
    assert set(results["curves"]["loss"]["series"]) == {
        "stock seed 0",
        "ours seed 0",
        "stock-channels-last seed 0",
        "stock seed 1",
    }


def test_a_model_ultralytics_cannot_build_exits_2_before_any_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--device", "cpu", "--quick", "--parts", "train", "--out", str(tmp_path)]
    assert _main([*argv, "--model", "nope.yaml"]) == 2
    err = capsys.readouterr().err
    assert "--model nope.yaml: Ultralytics cannot build it" in err
    assert "Traceback" not in err
    assert not list(tmp_path.glob("ultralytics-*.json"))


def test_nbs_makes_the_trainer_accumulate_between_its_steps(tmp_path: Path) -> None:
    evidence = _quick_cpu(tmp_path, "--parts", "phases", "--nbs", "64")
    results = evidence["phases"]["results"]
    assert results["nbs"] == 64
    for arm in ("stock", "ours"):
        p = results["batches"]["4"]["arms"][arm]["phases"]
        # Every iteration runs the network and the loss; with nbs 64 at batch 4 the trainer
        # accumulates gradients over iterations, so fewer of them step (without --nbs all 8 do,
        # test_phases_and_pairs_run_and_split_the_iteration).
        assert p["forward"]["count"] == p["loss"]["count"] == p["loss_backward"]["count"] == 8
        assert 1 <= p["trainer_optimizer_step"]["count"] < 8, arm


def test_the_kernels_part_profiles_a_window_of_each_arms_run(tmp_path: Path) -> None:
    results = _quick_cpu(tmp_path, "--parts", "kernels")["kernels"]["results"]
    for arm in ("stock", "ours"):
        window = results["batches"]["4"]["arms"][arm]["kernels"]
        # 8 iterations in all: the window is the run's second half; on a CPU, host operators.
        assert window["iterations"] == 4, arm
        assert window["timed"] == "host operators"
        assert window["busy_ms"] > 0
        assert window["table"], arm


def test_the_host_part_profiles_a_window_of_each_arms_run(tmp_path: Path) -> None:
    results = _quick_cpu(tmp_path, "--parts", "host")["host"]["results"]
    for arm in ("stock", "ours"):
        window = results["batches"]["4"]["arms"][arm]["host_profile"]
        assert results["batches"]["4"]["arms"][arm]["kernels"] is None
        assert window["iterations"] == 4, arm  # the second half of 8 iterations
        names = [row["name"] for row in window["by_cumulative"]]
        # The trainer's step is in the window, named by its package path.
        assert any(n.endswith("(optimizer_step)") and "/" in n for n in names), names
        assert window["by_self"][0]["self_ms"] > 0
