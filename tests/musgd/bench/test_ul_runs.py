"""The trainer benchmark's runs, the parts that need no Ultralytics: train arguments, the
child process's command and environment, the host snapshot."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import pytest

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


def test_a_child_imports_the_musgd_this_process_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    source = str(Path(musgd.__file__).resolve().parents[1])
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    assert _ul_runs.child_env()["PYTHONPATH"] == f"{source}{os.pathsep}/elsewhere"
    monkeypatch.delenv("PYTHONPATH")
    assert _ul_runs.child_env()["PYTHONPATH"] == source


def test_a_one_run_child_needs_its_files(tmp_path: Path) -> None:
    args = _args("--quick")
    args.one_run = "{}"
    with pytest.raises(_ul_plan.UsageError, match="--one-run needs --one-run-data"):
        _ul_runs.run_one(args)


@pytest.mark.parametrize(
    ("part", "options"),
    [("phases", {"synchronize": True}), ("syncs", {"synchronize": False, "count_syncs": True})],
)
def test_the_phases_and_syncs_parts_run_each_arm_once_per_batch(
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
        }
        assert "median 3 (min 3, max 4)" in lines[0]


def test_our_options_reach_a_child_process_as_they_were_given() -> None:
    """``--ours-*`` give ``musgd_trainer``'s options, and the child's command line repeats
    them: a run in its own process trains the configuration the parent was asked for."""
    args = _args("--quick", "--ours-network", "--ours-compile", "--ours-channels-last", "false")
    options = _ul_runs.ours_options(args)
    assert options == {
        "capture_network": True,
        "skip_nonfinite": False,
        "channels_last": False,
        "compile_network": True,
    }
    child = _args("--quick", *_ul_runs.ours_argv(args))
    assert _ul_runs.ours_options(child) == options
    assert _ul_runs.ours_options(_args("--quick"))["channels_last"] is False
