"""The trainer benchmark's options, sizes, plan and budget (no Ultralytics needed)."""

from __future__ import annotations

import argparse
import shutil
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from musgd.bench import _ul_plan as plan
from musgd.bench._ul_arms import ARM_TABLE
from musgd.ultralytics import TASKS


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    plan.add_arguments(parser)
    return plan.configure(parser.parse_args(list(argv)))


def _clock(ticks: list[float]) -> Any:
    it: Iterator[float] = iter(ticks)
    return lambda: next(it)


def test_budget_admits_what_fits_and_learns_from_runs() -> None:
    # start at 0; the admits read the clock at 10, 20, 380 and 450; used() at 500.
    budget = plan.Budget(400.0, clock=_clock([0.0, 10.0, 20.0, 380.0, 450.0, 500.0]))
    assert budget.admit("pair 0", "b4", default_s=50.0)  # 50 <= 390
    budget.record("b4", 30.0)
    budget.record("b4", 20.0)  # the longest run is kept
    assert budget.estimate("b4", default_s=50.0) == 30.0
    assert budget.admit("pair 1", "b4", default_s=50.0)  # 30 <= 380
    assert not budget.admit("pair 2", "b4", default_s=50.0)  # 30 > 20 left
    assert not budget.admit("phases", "b16", default_s=10.0)  # 10 > -50 left
    assert budget.skipped == [
        "pair 2: needs about 30 s, 20 s left",
        "phases: needs about 10 s, 0 s left",
    ]
    assert budget.as_dict()["used_s"] == 500.0
    unlimited = plan.Budget(None, clock=_clock([0.0, 1e9]))
    assert unlimited.admit("anything", "k", default_s=1e6)


def test_identity_epochs_leave_room_for_skipped_steps() -> None:
    # 200 steps + 20 for the scaler's skips at 40 iterations an epoch: 6 epochs (240).
    assert plan.identity_epochs(200, 40) == 6
    assert plan.identity_epochs(12, 4) == 4  # 12 + 4
    assert plan.epochs_for(60, 80) == 1
    assert plan.epochs_for(60, 20) == 3


def test_configure_and_plan() -> None:
    args = _args("--parts", "identity,train", "--pairs", "2", "--lowdata", "off")
    assert (args.imgsz, args.n_train, args.iters, args.identity_steps) == (640, 320, 60, 200)
    assert args.batch_sizes == [4, 16]
    lines = plan.plan_lines(args, plan.Budget(500.0))
    assert lines[0] == "plan: task detect, model yolo26n.yaml"
    assert lines[1] == "plan: identity 240 iterations, about 93 s"
    assert lines[2].startswith("plan: train 2 rounds of stock, ours (ab) x 2 batch sizes")
    assert lines[-1].endswith("budget 500 s")
    assert not any("phases" in line or "lowdata" in line for line in lines)
    quick = _args("--quick", "--iters", "5", "--identity-steps", "3")
    assert (quick.imgsz, quick.iters, quick.identity_steps) == (64, 5, 3)
    network = _args("--parts", "network")
    assert (network.network_iters, network.ours_network) == (120, False)
    assert plan.plan_lines(network, plan.Budget(None))[1].startswith(
        "plan: network 3 runs of 120 iterations"
    )
    assert _args("--quick", "--parts", "network").network_iters == 8
    assert args.workers == 8
    assert _args("--workers", "4").workers == 4
    assert _args("--quick", "--workers", "2").workers == 2
    assert (args.settle_s, args.isolation, args.design) == (0.0, "process", "ab")
    abba = _args("--design", "abba", "--parts", "train", "--pairs", "2", "--lowdata", "off")
    ab_lines = plan.plan_lines(args, plan.Budget(500.0))
    abba_lines = plan.plan_lines(abba, plan.Budget(500.0))
    ab_s = float(ab_lines[2].split("about ")[1].split(" s")[0])
    assert abba_lines[1] == (
        f"plan: train 2 rounds of stock, ours (abba) x 2 batch sizes, about {2 * ab_s:.0f} s"
    )
    assert _args("--settle-s", "8", "--isolation", "none").settle_s == 8.0
    fit = _args("--parts", "train", "--train-images", "2400", "--iters", "1500")
    assert (fit.n_train, fit.iters) == (2400, 1500)
    assert plan.epochs_for(fit.iters, -(-fit.n_train // 16)) == 10


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--parts", "identity,trian"], "unknown parts"),
        (["--network-iters", "0"], "--network-iters must be 1 or more"),
        (["--nbs", "0"], "--nbs must be 1 or more images"),
        (["--train-images", "0"], "--train-images must be 1 or more"),
        (["--workers", "-1"], "--workers must be 0 or more"),
        (["--settle-s", "-1"], "--settle-s must be 0 or more seconds"),
        (["--settle-s", "nan"], "--settle-s must be 0 or more seconds"),
        (["--settle-s", "inf"], "--settle-s must be 0 or more seconds"),
        (["--trace-iterations", "-1"], "--trace-iterations must be 0 or more"),
        (["--batch-sizes", "4,x"], "--batch-sizes takes whole numbers"),
        (["--arms", "stock,ours,stock-fast"], "unknown arms stock-fast: --arms takes names from"),
        (["--arms", "stock,ours,ours"], "--arms names ours more than once"),
        (["--arms", "ours,ours-network"], "--arms must include stock"),
        (["--arms", ","], "--arms must include stock"),
    ],
)
def test_bad_values_raise_a_usage_error_saying_what_to_pass(argv: list[str], message: str) -> None:
    with pytest.raises(plan.UsageError, match=message):
        _args(*argv)


def test_every_task_has_its_trainer_class_and_model() -> None:
    models = {task: _args("--task", task).model for task in TASKS}
    assert models == {
        "detect": "yolo26n.yaml",
        "segment": "yolo26n-seg.yaml",
        "pose": "yolo26n-pose.yaml",
        "obb": "yolo26n-obb.yaml",
        "classify": "yolo26n-cls.yaml",
    }
    assert _args("--task", "pose", "--model", "yolo26s-pose.yaml").model == "yolo26s-pose.yaml"
    assert _args().task == "detect"


def test_arms_are_parsed_in_their_order_and_default_to_stock_and_ours() -> None:
    assert _args().arms == ("stock", "ours")
    three = _args("--arms", "stock, ours,stock-channels-last")
    assert three.arms == ("stock", "ours", "stock-channels-last")
    assert _args("--rounds", "4").pairs == _args("--pairs", "4").pairs == 4
    assert _args("--lowdata-rounds", "1").lowdata_pairs == 1
    with pytest.raises(plan.UsageError) as refused:
        plan.parse_arms("stock,Ours")
    # The message lists every arm there is, so the fix is in it.
    for name in ("stock-compile", "stock-channels-last", "ours-network-compiled"):
        assert name in str(refused.value)


def test_the_plan_and_the_budget_count_every_arm_and_a_compilations_start() -> None:
    base = ["--parts", "phases,train", "--pairs", "2", "--lowdata", "off", "--batch-sizes", "4"]
    two = _args(*base)
    three = _args(*base, "--arms", "stock,ours,stock-channels-last")
    compiled = _args(*base, "--arms", "stock,ours-network-compiled")

    def about(lines: list[str], part: str) -> float:
        (line,) = [x for x in lines if x.startswith(f"plan: {part} ")]
        return float(line.split("about ")[1].split(" s")[0])

    lines2, lines3 = (
        plan.plan_lines(two, plan.Budget(None)),
        plan.plan_lines(three, plan.Budget(None)),
    )
    assert about(lines3, "train") == pytest.approx(1.5 * about(lines2, "train"), abs=1.0)
    assert about(lines3, "phases") == pytest.approx(1.5 * about(lines2, "phases"), abs=1.0)
    assert "plan: phases 3 runs x 1 batch sizes" in lines3[1]
    one = plan.run_estimate(two, 4, per_iteration_s=two.per_iteration_s)
    assert plan.round_estimate(two, 4, ["stock", "ours"], per_iteration_s=two.per_iteration_s) == (
        pytest.approx(2 * one)
    )
    start = ARM_TABLE["ours-network-compiled"].startup_s
    assert start > 0
    with_compile = plan.round_estimate(
        compiled, 4, ["stock", "ours-network-compiled"], per_iteration_s=two.per_iteration_s
    )
    assert with_compile == pytest.approx(2 * one + start)
    assert about(plan.plan_lines(compiled, plan.Budget(None)), "train") == pytest.approx(
        2 * (2 * one + start), abs=1.0
    )


def test_a_dataset_larger_than_the_free_disk_is_refused_before_it_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The free space is the test's, not the machine's: a CI disk once had 0.4 GiB left.
    asked: list[Path] = []

    def one_gib_free(path: Path) -> SimpleNamespace:
        asked.append(Path(path))
        return SimpleNamespace(total=2**30, used=0, free=2**30)

    monkeypatch.setattr(shutil, "disk_usage", one_gib_free)
    work = tmp_path / "not" / "made" / "yet"
    plan.dataset_fits(work, 2400, 640)  # about 0.7 GiB: fits in 1 GiB
    assert asked == [tmp_path]  # the nearest folder that exists is the one measured
    with pytest.raises(plan.UsageError, match=r"needs about 1\.1 GiB of disk.* 1\.0 GiB free"):
        plan.dataset_fits(work, 4000, 640)
    assert not (tmp_path / "not").exists()

    one_mib = SimpleNamespace(total=2**20, used=0, free=2**20)
    monkeypatch.setattr(shutil, "disk_usage", lambda path: one_mib)
    with pytest.raises(plan.UsageError, match=r"0\.0 GiB free: ask for fewer images"):
        plan.dataset_fits(tmp_path, 100, 640)
    plan.dataset_fits(tmp_path, 1, 64)  # 15 KiB of images in 1 MiB


def test_the_network_part_trains_with_the_trainers_own_nbs_unless_told() -> None:
    assert plan.network_nbs(_args()) == plan.TRAINER_NBS == 64
    assert plan.network_nbs(_args("--nbs", "8")) == 8
