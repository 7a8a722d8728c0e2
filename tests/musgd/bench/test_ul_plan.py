"""The trainer benchmark's options, sizes, plan and budget (no Ultralytics needed)."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from typing import Any

import pytest

from musgd.bench import _ul_plan as plan
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
    assert lines[2].startswith("plan: train 2 pairs x 2 batch sizes")
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
    assert abba_lines[1] == f"plan: train 2 pairs x 2 batch sizes, about {2 * ab_s:.0f} s"
    assert _args("--settle-s", "8", "--isolation", "none").settle_s == 8.0


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--parts", "identity,trian"], "unknown parts"),
        (["--network-iters", "0"], "--network-iters must be 1 or more"),
        (["--workers", "-1"], "--workers must be 0 or more"),
        (["--settle-s", "-1"], "--settle-s must be 0 or more seconds"),
        (["--settle-s", "nan"], "--settle-s must be 0 or more seconds"),
        (["--settle-s", "inf"], "--settle-s must be 0 or more seconds"),
        (["--batch-sizes", "4,x"], "--batch-sizes takes whole numbers"),
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
