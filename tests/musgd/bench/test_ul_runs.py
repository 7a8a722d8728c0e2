"""The trainer benchmark's runs, the parts that need no Ultralytics: train arguments, the
child process's command and environment, the host snapshot."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

import musgd
from musgd.bench import _ul_plan, _ul_runs


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    _ul_plan.add_arguments(parser)
    return _ul_plan.configure(parser.parse_args(list(argv)))


def test_host_snapshot_reads_load_and_clock_where_the_system_says() -> None:
    snap = _ul_runs.host_snapshot()
    assert set(snap) == {"loadavg_1m", "cpu_mhz"}
    assert snap["loadavg_1m"] is None or snap["loadavg_1m"] >= 0.0
    assert snap["cpu_mhz"] is None or snap["cpu_mhz"] > 0.0


def test_lowdata_kwargs_turn_the_augmentations_off(tmp_path: Path) -> None:
    args = _args("--quick")
    args.work = tmp_path
    default = _ul_runs.train_kwargs(args, tmp_path / "d.yaml", 4, 2)
    low = _ul_runs.train_kwargs(args, tmp_path / "d.yaml", 4, 2, "lowdata")
    assert default["nbs"] == default["batch"] == 4
    assert "mosaic" not in default
    assert low["workers"] == args.lowdata_workers
    assert all(low[k] == 0.0 for k in _ul_runs.LOWDATA_AUGMENT_OFF)
    assert {
        k: v for k, v in low.items() if k not in _ul_runs.LOWDATA_AUGMENT_OFF and k != "workers"
    } == {k: v for k, v in default.items() if k != "workers"}


def test_a_child_runs_the_subcommand_with_this_configuration(tmp_path: Path) -> None:
    args = _args("--quick", "--task", "obb", "--ours-network", "--ours-guard", "--amp", "false")
    args.work = tmp_path
    run = {"arm": "ours", "batch": 4, "seed": 1, "synchronize": False}
    argv = _ul_runs.child_argv(args, tmp_path / "data.yaml", run, tmp_path / "out.json")
    assert argv[1:4] == ["-m", "musgd.bench", "ultralytics"]
    options = dict(zip(argv[4::2], argv[5::2], strict=False))
    assert options["--task"] == "obb"
    assert options["--model"] == "yolo26n-obb.yaml"
    assert options["--amp"] == "false"
    assert {"--quick", "--ours-network", "--ours-guard"} <= set(argv)
    assert "--ours-guard" not in _ul_runs.child_argv(
        _args("--quick"), tmp_path / "data.yaml", run, tmp_path / "out.json"
    )
    assert json.loads(argv[argv.index("--one-run") + 1]) == run
    assert argv[-2:] == ["--one-run-out", str(tmp_path / "out.json")]
    assert "--trace-iterations" not in argv  # off: the child is not told
    traced = _args("--quick", "--trace-iterations", "3")
    traced.work = tmp_path
    child = _ul_runs.child_argv(traced, tmp_path / "data.yaml", run, tmp_path / "out.json")
    assert _args(*child[4:]).trace_iterations == 3
    assert "--nbs" not in child  # not given: the child steps every iteration too


def test_nbs_makes_every_run_accumulate_and_reaches_the_child(tmp_path: Path) -> None:
    args = _args("--quick", "--nbs", "64")
    args.work = tmp_path
    kw = _ul_runs.train_kwargs(args, tmp_path / "d.yaml", 4, 2)
    assert (kw["batch"], kw["nbs"]) == (4, 64)  # the trainer's own default
    assert _ul_runs.train_kwargs(args, tmp_path / "d.yaml", 16, 2, "lowdata")["nbs"] == 64
    run = {"arm": "ours", "batch": 4, "seed": 0, "synchronize": False}
    child = _ul_runs.child_argv(args, tmp_path / "data.yaml", run, tmp_path / "out.json")
    assert _args(*child[4:]).nbs == 64
    assert _ul_plan.nbs_setting(args) == 64
    assert _ul_plan.nbs_setting(_args("--quick")) == "batch"


@pytest.mark.parametrize("sizes", [(), ("--train-images", "1600", "--iters", "1000")])
def test_a_child_sizes_its_epochs_as_this_process_does(
    tmp_path: Path, sizes: tuple[str, ...]
) -> None:
    # A child that dropped --train-images read the default epoch length: at 1600 images of
    # batch 16 and 1000 iterations it trained 50 epochs of 100 iterations instead of 10.
    args = _args(*sizes)
    args.work = tmp_path
    run = {"arm": "stock", "batch": 16, "seed": 0, "synchronize": False}
    argv = _ul_runs.child_argv(args, tmp_path / "data.yaml", run, tmp_path / "out.json")
    child = _args(*argv[4:])
    assert (child.n_train, child.iters, child.imgsz, child.workers) == (
        args.n_train,
        args.iters,
        args.imgsz,
        args.workers,
    )
    if sizes:
        assert _ul_plan.epochs_for(child.iters, child.n_train // 16) == 10


def test_a_child_imports_the_musgd_this_process_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    source = str(Path(musgd.__file__).resolve().parents[1])
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    assert _ul_runs.child_env()["PYTHONPATH"] == f"{source}{os.pathsep}/elsewhere"
    monkeypatch.delenv("PYTHONPATH")
    assert _ul_runs.child_env()["PYTHONPATH"] == source


def test_a_child_that_dies_of_a_signal_writes_its_stack() -> None:
    import sys

    crash = "import ctypes\ndef run_training():\n    ctypes.string_at(0)\nrun_training()\n"
    done = subprocess.run(
        [sys.executable, "-c", crash],
        env=_ul_runs.child_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode != 0
    assert "Fatal Python error" in done.stderr
    assert "run_training" in done.stderr, "the stack names where it died"


def test_a_one_run_child_needs_its_files(tmp_path: Path) -> None:
    args = _args("--quick")
    args.one_run = "{}"
    with pytest.raises(_ul_plan.UsageError, match="--one-run needs --one-run-data"):
        _ul_runs.run_one(args)


@pytest.mark.parametrize(
    ("part", "options"),
    [
        ("phases", {"synchronize": True}),
        ("syncs", {"synchronize": False, "count_syncs": True}),
        ("kernels", {"synchronize": False, "profile_kernels": True}),
        ("host", {"synchronize": False, "profile_host": True}),
    ],
)
def test_the_phases_syncs_and_kernels_parts_run_each_arm_once_per_batch(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    part: str,
    options: dict[str, bool],
) -> None:
    calls: list[dict[str, object]] = []

    def fake_run(args: argparse.Namespace, data: Path, **run: object) -> dict[str, object]:
        calls.append(run)
        return {
            "losses": [1.0],
            "phases": {"iteration": {"median": 10.0, "min": 9.0, "max": 11.0}},
            "iteration_ms": {"median": 10.0, "min": 9.0, "max": 11.0},
            "host_syncs": {"per_iteration": {"median": 3, "min": 3, "max": 4}},
            "kernels": {
                "iterations": 10,
                "timed": "device kernels and copies",
                "wall_ms": 12.5,
                "busy_ms": 10.0,
                "busy_share": 0.8,
                "kernels": 900.0,
            },
            "host_profile": {
                "iterations": 10,
                "wall_ms": 14.0,
                "by_cumulative": [
                    {"name": f"musgd/m.py:{i}(f{i})", "cumulative_ms": 3.0 - i} for i in range(5)
                ],
            },
        }

    monkeypatch.setattr(_ul_runs, "train_run", fake_run)
    args = _args("--quick", "--batch-sizes", "4,16", "--ours-guard")
    result = getattr(_ul_runs, f"run_{part}")(args, Path("data.yaml"), _ul_plan.Budget(None))
    assert [(c["arm"], c["batch"]) for c in calls] == [
        ("stock", 4),
        ("ours", 4),
        ("stock", 16),
        ("ours", 16),
    ]
    assert all({k: c[k] for k in options} == options for c in calls)
    assert set(result["batches"]) == {"4", "16"}
    assert all(
        "losses" not in run for b in result["batches"].values() for run in b["arms"].values()
    )
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith(part)]
    assert len(lines) == 4
    assert lines[0].startswith(f"{part} batch 4 stock: iteration 10")
    if part == "syncs":
        assert result["ours"] == {
            "capture_network": False,
            "skip_nonfinite": True,
            "channels_last": False,
            "compile_network": False,
            "device_loss": False,
        }
        assert "median 3 (min 3, max 4)" in lines[0]
    if part == "kernels":
        assert (
            "12.50 ms each, device kernels and copies busy 10.00 ms (80%), 900 kernels" in lines[0]
        )
        assert result["nbs"] == "batch"
    if part == "host":
        assert (
            "14.00 ms each; the most cumulative ms: musgd/m.py:0(f0) 3.00, musgd/m.py:1(f1) 2.00, "
            "musgd/m.py:2(f2) 1.00" in lines[0]
        )


def test_our_options_reach_a_child_process_as_they_were_given() -> None:
    """``--ours-*`` give ``musgd_trainer``'s options, and the child's command line repeats
    them: a run in its own process trains the configuration the parent was asked for."""
    args = _args(
        "--quick",
        "--ours-network",
        "--ours-compile",
        "--ours-device-loss",
        "--ours-channels-last",
        "false",
    )
    options = _ul_runs.ours_options(args)
    assert options == {
        "capture_network": True,
        "skip_nonfinite": False,
        "channels_last": False,
        "compile_network": True,
        "device_loss": True,
    }
    child = _args("--quick", *_ul_runs.ours_argv(args))
    assert _ul_runs.ours_options(child) == options
    assert _ul_runs.ours_options(_args("--quick"))["channels_last"] is False


def _fake_run(arm: str, seed: int, iteration: float) -> dict[str, object]:
    entry = {"median": iteration, "min": iteration - 1.0, "max": iteration + 1.0, "count": 8}
    return {
        "arm": arm,
        "seed": seed,
        "iteration_ms": entry,
        "compute_ms": entry,
        "data_wait_ms": {"median": 0.5, "min": 0.1, "max": 0.9, "count": 8},
        "first_epoch_s": {"median": 2.0, "min": 2.0, "max": 2.0, "count": 1},
        "steady_epoch_s": None,
        "phases": {"iteration": entry},
        "run_s": 10.0,
        "process_s": 14.0,
        "memory_mib": {"peak_allocated": 900.0, "peak_reserved": 1200.0},
        "losses": [1.0, 0.5],
        "trace_ms": {"iteration": [None, iteration]},
    }


# Each arm's iteration in the fake runs: stock 120 ms, ours 60, stock-channels-last 100.
_SPEED = {"stock": 120.0, "ours": 60.0, "stock-channels-last": 100.0}


def _rounds(
    monkeypatch: pytest.MonkeyPatch, *argv: str, budget: _ul_plan.Budget | None = None
) -> tuple[list[dict[str, object]], dict[str, object]]:
    calls: list[dict[str, object]] = []

    def fake_run(args: argparse.Namespace, data: Path, **run: object) -> dict[str, object]:
        calls.append(run)
        arm, seed = str(run["arm"]), int(str(run["seed"]))
        return _fake_run(arm, seed, _SPEED[arm])

    monkeypatch.setattr(_ul_runs, "train_run", fake_run)
    args = _args("--quick", "--batch-sizes", "4", "--arms", "stock,ours,stock-channels-last", *argv)
    args.work = Path("work")
    result: dict[str, object] = {"variants": {}}
    saves: list[int] = []
    _ul_runs.run_pairs(
        args,
        Path("data.yaml"),
        budget or _ul_plan.Budget(None),
        variant="default",
        pairs=args.pairs,
        result=result,
        save=lambda: saves.append(1),
    )
    return calls, result


def test_rounds_run_every_arm_rotating_and_log_a_line_per_arm_per_round(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    calls, result = _rounds(monkeypatch, "--rounds", "3")
    assert [(c["arm"], c["seed"]) for c in calls] == [
        ("stock", 0),
        ("ours", 0),
        ("stock-channels-last", 0),
        ("ours", 1),
        ("stock-channels-last", 1),
        ("stock", 1),
        ("stock-channels-last", 2),
        ("stock", 2),
        ("ours", 2),
    ]
    entry = result["variants"]["default"]["batches"]["4"]  # type: ignore[index]
    assert entry["count"] == 3
    assert [p["order"][0] for p in entry["pairs"]] == ["stock", "ours", "stock-channels-last"]
    ratio = entry["against_stock"]["stock-channels-last"]["iteration"]["stock_over_arm"]
    assert ratio["per_round"] == [1.2, 1.2, 1.2]
    assert entry["iteration"]["stock_over_ours"]["median"] == 2.0  # the two-arm entry stays
    assert entry["per_arm"]["ours"]["peak_reserved_mib"]["median"] == 1200.0
    out = capsys.readouterr().out.splitlines()
    lines = [line for line in out if line.startswith("round default batch 4")]
    assert len(lines) == 9
    assert lines[0].startswith("round default batch 4 seed 0 stock (place 1): iteration 120.0")
    assert "train 10.0 s, process 14.0 s, peak allocated 900 MiB, reserved 1200 MiB" in lines[0]
    assert lines[3].startswith("round default batch 4 seed 1 ours (place 1)")
    assert "batch 4 default iteration: stock/stock-channels-last 1.200" in "\n".join(out)


def test_an_abba_round_over_three_arms_merges_each_arms_two_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls, result = _rounds(monkeypatch, "--rounds", "1", "--design", "abba")
    order = ["stock", "ours", "stock-channels-last", "stock-channels-last", "ours", "stock"]
    assert [c["arm"] for c in calls] == order
    (pair,) = result["variants"]["default"]["batches"]["4"]["pairs"]  # type: ignore[index]
    assert [run["arm"] for run in pair["runs"]] == order
    assert {pair[arm]["merged_runs"] for arm in _SPEED} == {2}


def test_rounds_the_budget_cannot_fit_are_skipped_whole(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    calls, result = _rounds(monkeypatch, "--rounds", "2", budget=_ul_plan.Budget(0.001))
    assert calls == []
    assert result["variants"]["default"]["batches"] == {}  # type: ignore[index]
    skipped = [line for line in capsys.readouterr().out.splitlines() if "skipped" in line]
    assert len(skipped) == 2
    assert skipped[0].startswith("budget: skipped default round 0 batch 4: needs about")


def test_a_run_in_its_own_process_records_the_processs_wall_time(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    seen: list[list[str]] = []

    def fake_process(argv: list[str], **_: object) -> subprocess.CompletedProcess[str]:
        seen.append(argv)
        run = json.loads(argv[argv.index("--one-run") + 1])
        Path(argv[-1]).write_text(json.dumps({"arm": run["arm"], "process_s": None}), "utf-8")
        return subprocess.CompletedProcess(argv, 0)

    monkeypatch.setattr(subprocess, "run", fake_process)
    args = _args("--quick")
    args.work = tmp_path
    result = _ul_runs.train_run(args, tmp_path / "d.yaml", arm="stock-channels-last", seed=0)
    assert result["arm"] == "stock-channels-last"  # the child is told its arm by name
    assert isinstance(result["process_s"], float)
    assert result["process_s"] >= 0.0
    assert len(seen) == 1


def test_the_arms_options_and_records_follow_the_table_and_the_flags() -> None:
    args = _args("--quick", "--ours-guard", "--arms", "stock,ours,ours-network-compiled")
    assert _ul_runs.arm_options("ours", args)["skip_nonfinite"] is True
    fixed = _ul_runs.arm_options("ours-network-compiled", args)
    assert (fixed["skip_nonfinite"], fixed["compile_network"]) == (False, True)
    records = _ul_runs.arm_records(args)
    assert list(records) == ["stock", "ours", "ours-network-compiled"]
    assert records["ours"]["options"] == _ul_runs.ours_options(args)


def test_an_unknown_arm_is_refused_before_ultralytics_is_imported(tmp_path: Path) -> None:
    args = _args("--quick")
    with pytest.raises(_ul_plan.UsageError, match="unknown arm 'stock-fast': the arms are stock"):
        _ul_runs.train_once(
            args, tmp_path / "d.yaml", arm="stock-fast", batch=4, seed=0, synchronize=False
        )


def test_the_pool_split_separates_the_caching_allocator_from_the_recordings() -> None:
    mib = 2**20

    def segment(pool: tuple[int, int], total: int, allocated: int) -> dict[str, object]:
        return {
            "segment_pool_id": pool,
            "total_size": total * mib,
            "allocated_size": allocated * mib,
        }

    segments = [
        segment((0, 0), 20, 4),
        segment((0, 0), 2, 2),
        segment((1, 3), 40, 40),
        segment((1, 7), 100, 60),
        segment((1, 7), 20, 0),
        segment((1, 9), 2, 1),
    ]
    segments[0]["blocks"] = [
        {"size": 3 * mib, "state": "active_allocated"},
        {"size": 3 * mib, "state": "active_allocated"},
        {"size": 1 * mib, "state": "active_allocated"},
        {"size": 16 * mib, "state": "inactive"},
    ]
    segments[1]["blocks"] = [{"size": 2 * mib, "state": "active_allocated"}]
    segments[2]["blocks"] = [{"size": 40 * mib, "state": "active_allocated"}]  # a recording's
    split = _ul_runs.pool_split(segments)
    caching = split["caching"]
    assert (caching["segments"], caching["reserved"], caching["allocated"]) == (2, 22.0, 6.0)
    assert caching["largest_live"] == [[3.0, 2], [2.0, 1], [1.0, 1]]  # most bytes first
    private = split["private"]
    assert (private["pools"], private["segments"]) == (3, 4)
    assert (private["reserved"], private["allocated"]) == (162.0, 101.0)
    assert [p["reserved"] for p in private["largest"]] == [120.0, 40.0, 2.0]  # largest first
    assert private["largest"][0] == {"segments": 2, "reserved": 120.0, "allocated": 60.0}
    assert _ul_runs.pool_split([])["private"]["pools"] == 0


def test_a_cuda_run_traces_its_first_iterations_reserved_memory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import types

    import torch

    from musgd.bench._trainer_phases import PhaseClock

    reserved = iter(range(1, 100))
    monkeypatch.setattr(torch.cuda, "max_memory_reserved", lambda: 2**20 * 64)
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda: 2**20 * next(reserved))
    log = _ul_runs.RunLog("cuda", PhaseClock(synchronize=lambda: None))
    trainer = types.SimpleNamespace(loss_items=None)
    for _ in range(_ul_runs.MEMORY_TRACE_ITERATIONS + 3):
        log.batch_start(trainer)
        log.batch_end(trainer)
    assert log.memory_trace_mib == [
        {"peak_reserved": 64.0, "reserved": float(i)}
        for i in range(1, _ul_runs.MEMORY_TRACE_ITERATIONS + 1)
    ]
    cpu = _ul_runs.RunLog("cpu", PhaseClock(synchronize=lambda: None))
    cpu.batch_start(trainer)
    cpu.batch_end(trainer)
    assert cpu.memory_trace_mib == []


def test_network_stats_say_how_many_networks_kept_pools_of_their_own() -> None:
    import types

    from musgd._replay import GraphPool, ReplayStats

    capture = types.SimpleNamespace(stats=ReplayStats(recordings=2, replays=5))
    pool = GraphPool()
    pool.private = 1
    trainer = types.SimpleNamespace(musgd_network=capture, musgd_graph_pool=pool)
    stats = _ul_runs.network_stats(trainer)
    assert stats is not None
    assert (stats["recordings"], stats["replays"], stats["pool_private"]) == (2, 5, 1)
    assert stats["graphs_kept_idle"] == 0  # no CUDA graph was ever made here
    assert stats["graphs_owned"] == 0
    alone = _ul_runs.network_stats(types.SimpleNamespace(musgd_network=capture))
    assert alone is not None
    assert "pool_private" not in alone
    assert _ul_runs.network_stats(types.SimpleNamespace()) is None


def test_ema_stats_count_the_guarded_emas_recordings_and_fallbacks() -> None:
    import types

    from musgd._ema import FusedEMA

    fused = FusedEMA()
    fused.stats.recordings, fused.stats.replays = 1, 7
    fused.stats.fallbacks["first-call"] += 1
    stats = _ul_runs.ema_stats(types.SimpleNamespace(musgd_ema=fused))
    assert stats is not None
    assert (stats["recordings"], stats["replays"], stats["fallbacks"]) == (1, 7, {"first-call": 1})
    assert _ul_runs.ema_stats(types.SimpleNamespace()) is None, "no guard, no fused EMA"


def _base_tree(tmp_path: Path) -> Path:
    """A source folder holding a musgd package (an empty one: the runs here are faked)."""
    src = tmp_path / "base" / "src"
    (src / "musgd").mkdir(parents=True)
    (src / "musgd" / "__init__.py").write_text("", encoding="utf-8")
    return src


def test_a_base_arm_runs_its_child_on_the_other_musgd_under_its_own_name(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    seen: list[tuple[str, str]] = []

    def fake_process(argv: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
        run = json.loads(argv[argv.index("--one-run") + 1])
        env = kw["env"]
        assert isinstance(env, dict)
        seen.append((run["arm"], env["PYTHONPATH"].split(os.pathsep)[0]))
        Path(argv[-1]).write_text(json.dumps({"arm": run["arm"]}), "utf-8")
        return subprocess.CompletedProcess(argv, 0)

    monkeypatch.setattr(subprocess, "run", fake_process)
    base = _base_tree(tmp_path)
    commit = "a" * 40
    args = _args(
        "--quick",
        "--arms",
        "stock,ours,ours@base",
        "--base-src",
        str(base),
        "--base-commit",
        commit,
    )
    args.work = tmp_path
    ours = _ul_runs.train_run(args, tmp_path / "d.yaml", arm="ours", seed=0)
    other = _ul_runs.train_run(args, tmp_path / "d.yaml", arm="ours@base", seed=0)
    this = str(Path(musgd.__file__).resolve().parents[1])
    # The base child is told "ours" (the other musgd knows no @base) and imports the base tree.
    assert seen == [("ours", this), ("ours", str(base.resolve()))]
    assert (ours["arm"], other["arm"]) == ("ours", "ours@base")
    record = _ul_runs.arm_records(args)["ours@base"]
    assert record["musgd_source"] == str(base.resolve())
    assert record["musgd_commit"] == commit
    assert record["options"] == _ul_runs.arm_records(args)["ours"]["options"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--arms", "stock,ours@base"], "--base-src is missing"),
        (["--arms", "stock,ours@base", "--base-src", "{tmp}"], "holds no musgd/__init__.py"),
        (["--arms", "stock,ours", "--base-src", "{base}"], "--arms names none"),
        (
            ["--arms", "stock,ours@base", "--base-src", "{base}", "--isolation", "none"],
            "need --isolation process",
        ),
        (
            ["--arms", "stock,ours@base", "--base-src", "{base}", "--base-commit", "HEAD~1"],
            "--base-commit must be a full commit name",
        ),
        (["--arms", "stock,nope@base"], "unknown arms nope@base"),
    ],
)
def test_base_arms_refuse_what_cannot_run_saying_what_to_pass(
    tmp_path: Path, argv: list[str], message: str
) -> None:
    base = _base_tree(tmp_path)
    filled = [a.format(tmp=tmp_path, base=base) for a in argv]
    with pytest.raises(_ul_plan.UsageError, match=message):
        _args(*filled)


def test_the_scaled_losss_backward_is_marked_where_it_returns_with_the_same_gradients() -> None:
    from musgd.bench._trainer_phases import PhaseClock

    class Scaler:
        def scale(self, loss: torch.Tensor) -> torch.Tensor:
            return loss * 4.0

    ticks = iter(float(t) for t in range(100))
    clock = PhaseClock(clock=lambda: next(ticks))
    trainer = SimpleNamespace(ema=None, scaler=Scaler())
    _ul_runs.instrument_trainer_objects(trainer, clock)
    _ul_runs.instrument_trainer_objects(trainer, clock)  # a second time wraps nothing more
    w = torch.tensor([1.0, -2.0], requires_grad=True)
    clock.start_iteration()  # 0
    trainer.scaler.scale((w * w).sum()).backward()  # scale at 1, its backward returns at 2
    clock.end_iteration()  # 3
    (marks,) = clock.iterations
    assert (marks["backward_start"], marks["backward_end"]) == (1.0, 2.0)
    assert w.grad is not None
    assert torch.equal(w.grad, torch.tensor([8.0, -16.0]))  # 4 * 2w: the same call, unchanged
