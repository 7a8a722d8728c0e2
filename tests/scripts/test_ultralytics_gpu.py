"""``scripts/ultralytics_gpu.py``'s pure parts: budget, pair ratios, warm-up span, planning.

The runs themselves need ultralytics (``tests/ultralytics/test_gpu_script.py`` runs them on CPU).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from script_module import load_script


def _load() -> ModuleType:
    return load_script("ultralytics_gpu")


script = _load()


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
    summary = script.pair_summary(pairs, "iteration_ms")
    ratio, saving = summary["stock_over_ours"], summary["saving"]
    assert ratio["per_round"] == [1.5, 1.5, 1.0]
    assert (ratio["median"], ratio["min"], ratio["max"]) == (1.5, 1.0, 1.5)
    assert saving["per_pair"] == pytest.approx([1 / 3, 1 / 3, 0.0])
    assert saving["median"] == pytest.approx(1 / 3)
    compute = script.pair_summary(pairs, "compute_ms")
    assert compute["stock_over_ours"]["per_round"] == [2.0, 1.25, 1.0]


def test_pair_summary_needs_the_metric_in_every_pair() -> None:
    pairs = [{"stock": _run(120.0), "ours": _run(80.0)}, {"stock": _run(None), "ours": _run(1.0)}]
    assert script.pair_summary(pairs, "iteration_ms") is None
    assert script.pair_summary([], "iteration_ms") is None


def test_epoch_summaries_keep_the_first_epoch_apart() -> None:
    three = script.epoch_summaries([9.0, 2.0, 3.0])
    assert three["first_epoch_s"] == {"median": 9.0, "min": 9.0, "max": 9.0, "count": 1}
    assert three["steady_epoch_s"] == {"median": 2.5, "min": 2.0, "max": 3.0, "count": 2}
    assert script.epoch_summaries([9.0])["steady_epoch_s"] is None
    assert script.epoch_summaries([]) == {"first_epoch_s": None, "steady_epoch_s": None}


def test_pairs_compare_epochs_where_every_run_has_them() -> None:
    def run(epochs: list[float]) -> dict[str, Any]:
        return {**_run(100.0, 90.0), **script.epoch_summaries(epochs), "losses": []}

    pairs = [{"stock": run([9.0, 3.0, 3.0]), "ours": run([8.0, 2.0, 2.0])}]
    out = script._summarize_pairs(pairs)
    assert out["steady_epoch"]["stock_over_ours"]["per_round"] == [1.5]
    assert out["first_epoch"]["stock_over_ours"]["per_round"] == [9.0 / 8.0]
    one_epoch = [{"stock": run([9.0]), "ours": run([8.0])}]
    assert script._summarize_pairs(one_epoch)["steady_epoch"] is None


def test_host_snapshot_reads_load_and_clock_where_the_system_says() -> None:
    snap = script.host_snapshot()
    assert set(snap) == {"loadavg_1m", "cpu_mhz"}
    assert snap["loadavg_1m"] is None or snap["loadavg_1m"] >= 0.0
    assert snap["cpu_mhz"] is None or snap["cpu_mhz"] > 0.0


def test_round_order_alternates_and_abba_puts_each_arm_in_both_places() -> None:
    assert script.round_order(0, "ab") == ("stock", "ours")
    assert script.round_order(1, "ab") == ("ours", "stock")
    assert script.round_order(0, "abba") == ("stock", "ours", "ours", "stock")
    assert script.round_order(3, "abba") == ("ours", "stock", "stock", "ours")


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
    merged = script.merge_runs([_timed("ours", 80.0, 5.0, [3.0]), _timed("ours", 90.0, 1.0, [9.0])])
    assert merged["iteration_ms"] == {"median": 85.0, "min": 75.0, "max": 91.0, "count": 100}
    assert merged["phases"]["forward_backward"]["median"] == 42.5
    assert merged["phases"]["forward_backward"]["share"] == 0.5
    assert merged["first_epoch_s"] is None  # one run lacks it: no merged value
    assert (merged["losses"], merged["merged_runs"]) == ([3.0], 2)
    with pytest.raises(ValueError, match="share their arm and seed"):
        script.merge_runs([_timed("ours", 80.0, 1.0, []), _timed("stock", 80.0, 1.0, [])])


def test_an_abba_round_cancels_a_place_effect() -> None:
    # Second place costs 10% whichever arm holds it; ours is truly 1.5x faster.
    s1, o1 = _timed("stock", 120.0, 1.0, []), _timed("ours", 88.0, 1.0, [])
    o2, s2 = _timed("ours", 80.0, 1.0, []), _timed("stock", 132.0, 1.0, [])
    ab = [{"stock": s1, "ours": o1}]
    abba = [{"stock": script.merge_runs([s1, s2]), "ours": script.merge_runs([o1, o2])}]
    ab_ratio = script.pair_summary(ab, "iteration_ms")["stock_over_ours"]["median"]
    abba_ratio = script.pair_summary(abba, "iteration_ms")["stock_over_ours"]["median"]
    assert ab_ratio == pytest.approx(120.0 / 88.0)
    assert abba_ratio == pytest.approx(1.5)


def test_a_failed_run_ends_the_command_with_a_message(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def failing() -> int:
        raise script.RunFailedError(
            "the training run {'arm': 'ours'} failed in its own process (exit 1)"
        )

    monkeypatch.setattr(script, "main", failing)
    assert script.cli() == 1
    err = capsys.readouterr().err
    assert err.startswith("ultralytics_gpu: the training run")
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--settle-s", "-1"], "--settle-s must be 0 or more seconds"),
        (["--parts", "identity,trian"], "unknown parts"),
        (["--chart-from", "{missing}"], "cannot read"),
        (["--chart-from", "{not_json}"], "is not JSON"),
        (["--chart-from", "{not_evidence}"], "not an ultralytics-train evidence file"),
        (
            ["--one-run", "{{bad", "--one-run-data", "d", "--one-run-out", "o", "--work", "w"],
            "--one-run must be a JSON object",
        ),
        (
            ["--one-run", "[1]", "--one-run-data", "d", "--one-run-out", "o", "--work", "w"],
            "--one-run must be a JSON object, got list",
        ),
    ],
)
def test_bad_input_exits_2_with_a_message_and_no_traceback(
    argv: list[str],
    message: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    (tmp_path / "not.json").write_bytes(b"\xff{results")
    (tmp_path / "other.json").write_text('{"results": [1, 2]}', encoding="utf-8")
    files = {
        "missing": tmp_path / "missing.json",
        "not_json": tmp_path / "not.json",
        "not_evidence": tmp_path / "other.json",
    }
    monkeypatch.setattr(script, "require_ultralytics", lambda: None)  # not needed to refuse
    argv = [a.format(**files) for a in argv]
    with pytest.raises(SystemExit) as exit_info:
        script.main(["--device", "cpu", *argv])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err


def test_a_missing_ultralytics_exits_2_saying_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "ultralytics", None)  # an import of it fails
    with pytest.raises(SystemExit) as exit_info:
        script.main(["--device", "cpu", "--quick"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert 'pip install "wpgate[ultralytics]"' in err
    assert "Traceback" not in err


def _clock(ticks: list[float]) -> Any:
    it: Iterator[float] = iter(ticks)
    return lambda: next(it)


def test_budget_admits_what_fits_and_learns_from_runs() -> None:
    # start at 0; the admits read the clock at 10, 20, 380 and 450; used() at 500.
    budget = script.Budget(400.0, clock=_clock([0.0, 10.0, 20.0, 380.0, 450.0, 500.0]))
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
    unlimited = script.Budget(None, clock=_clock([0.0, 1e9]))
    assert unlimited.admit("anything", "k", default_s=1e6)


def test_warmup_span_and_identity_epochs() -> None:
    assert script.warmup_span([0.8, 0.85, 0.9, 0.937, 0.937]) == 3
    assert script.warmup_span([0.937, 0.937]) == 0
    assert script.warmup_span([0.8, 0.9]) == 1
    assert script.warmup_span([]) == 0
    # 200 steps + 20 for the scaler's skips at 40 iterations an epoch: 6 epochs (240).
    assert script.identity_epochs(200, 40) == 6
    assert script.identity_epochs(12, 4) == 4  # 12 + 4
    assert script.epochs_for(60, 80) == 1
    assert script.epochs_for(60, 20) == 3


def test_lowdata_wanted() -> None:
    assert script.lowdata_wanted("on", [0.0])
    assert not script.lowdata_wanted("off", [0.9])
    assert script.lowdata_wanted("auto", [0.05, script.DATA_BOUND_SHARE])
    assert not script.lowdata_wanted("auto", [0.05, None, 0.1])
    assert script.lowdata_wanted("auto", [None])  # nothing measured: measure both


def _args(*argv: str) -> argparse.Namespace:
    return script.configure(script._parser().parse_args(list(argv)))


def test_configure_and_plan(tmp_path: Path) -> None:
    args = _args("--parts", "identity,train", "--pairs", "2", "--lowdata", "off")
    assert (args.imgsz, args.n_train, args.iters, args.identity_steps) == (640, 320, 60, 200)
    assert args.batch_sizes == [4, 16]
    lines = script.plan_lines(args, script.Budget(500.0))
    assert lines[0] == "plan: identity 240 iterations, about 93 s"
    assert lines[1].startswith("plan: train 2 pairs x 2 batch sizes")
    assert lines[-1].endswith("budget 500 s")
    assert not any("phases" in line or "lowdata" in line for line in lines)
    quick = _args("--quick", "--iters", "5", "--identity-steps", "3")
    assert (quick.imgsz, quick.iters, quick.identity_steps) == (64, 5, 3)
    with pytest.raises(script.UsageError, match="unknown parts"):
        _args("--parts", "identity,trian")
    network = _args("--parts", "network")
    assert (network.network_iters, network.ours_network) == (120, False)
    assert script.plan_lines(network, script.Budget(None))[0].startswith(
        "plan: network 3 runs of 120 iterations"
    )
    assert _args("--quick", "--parts", "network").network_iters == 8
    with pytest.raises(script.UsageError, match="--network-iters must be 1 or more"):
        _args("--network-iters", "0")
    assert args.workers == 8
    assert _args("--workers", "4").workers == 4
    assert _args("--quick", "--workers", "2").workers == 2
    with pytest.raises(script.UsageError, match="--workers must be 0 or more"):
        _args("--workers", "-1")
    assert (args.settle_s, args.isolation, args.design) == (0.0, "process", "ab")
    abba = _args("--design", "abba", "--parts", "train", "--pairs", "2", "--lowdata", "off")
    ab_lines = script.plan_lines(args, script.Budget(500.0))
    abba_lines = script.plan_lines(abba, script.Budget(500.0))
    ab_s = float(ab_lines[1].split("about ")[1].split(" s")[0])
    assert abba_lines[0] == f"plan: train 2 pairs x 2 batch sizes, about {2 * ab_s:.0f} s"
    assert _args("--settle-s", "8", "--isolation", "none").settle_s == 8.0
    for bad in ("-1", "nan", "inf"):
        with pytest.raises(script.UsageError, match="--settle-s must be 0 or more seconds"):
            _args("--settle-s", bad)


def test_lowdata_kwargs_turn_the_augmentations_off(tmp_path: Path) -> None:
    args = _args("--quick")
    args.work = tmp_path
    default = script._train_kwargs(args, tmp_path / "d.yaml", 4, 2)
    low = script._train_kwargs(args, tmp_path / "d.yaml", 4, 2, "lowdata")
    assert default["nbs"] == default["batch"] == 4
    assert "mosaic" not in default
    assert low["workers"] == args.lowdata_workers
    assert all(low[k] == 0.0 for k in script.LOWDATA_AUGMENT_OFF)
    assert {
        k: v for k, v in low.items() if k not in script.LOWDATA_AUGMENT_OFF and k != "workers"
    } == {k: v for k, v in default.items() if k != "workers"}


def test_clip_check_passes_the_eager_bits_and_flags_a_wrong_clip() -> None:
    import torch

    from musgd import GradClipReplay

    params = [torch.nn.Parameter(torch.zeros(4, 3, 3, 3)), torch.nn.Parameter(torch.zeros(4))]

    def set_grads(nan: bool) -> None:
        gen = torch.Generator().manual_seed(1)
        for p in params:
            p.grad = torch.randn(p.shape, generator=gen) * 50
        if nan:
            params[1].grad[0] = float("nan")  # an overflowed AMP step: the total norm is NaN

    check = script.ClipCheck(GradClipReplay(10.0))
    for nan in (False, True, False):
        set_grads(nan)
        check(params)
    assert (check.calls, check.mismatched) == (3, [])

    class Wrong(GradClipReplay):
        def __call__(self, parameters: Any) -> torch.Tensor:
            return torch.nn.utils.clip_grad_norm_(list(parameters), 9.0)

    wrong = script.ClipCheck(Wrong(10.0))
    set_grads(False)
    wrong(params)
    assert wrong.mismatched == [0]
