"""scripts/gpu_gate.sh: the tests stage split over TESTS_SHARDS processes; the tiles and targets
stages."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from musgd.bench import _triton_bench as tb
from musgd.bench._yolo_data import CLASSES

REPO = Path(__file__).resolve().parents[2]
# A stand-in Python: records each call's arguments, and fails the pytest call given FAIL_FILE.
FAKE_PY = """#!/bin/bash
echo "$*" >> "$CALLS"
case "$*" in
  *"$FAIL_FILE"*) echo "FAILED $FAIL_FILE::test_x"; echo "1 failed in 0.1s"; exit 1;;
esac
echo "1 passed in 0.1s"
"""


def _gate(
    tmp_path: Path, shards: int, fail: str, stage: str = "tests"
) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    fake = tmp_path / "py"
    fake.write_text(FAKE_PY)
    fake.chmod(0o755)
    calls = tmp_path / "calls"
    env = {
        "PATH": os.environ["PATH"],
        "PY": str(fake),
        "OUT": str(tmp_path / "out"),
        "CALLS": str(calls),
        "FAIL_FILE": fail,
        "TESTS_SHARDS": str(shards),
    }
    done = subprocess.run(
        ["bash", str(REPO / "scripts/gpu_gate.sh"), stage],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    prefix = "-m pytest" if stage == "tests" else "-m musgd.bench"
    stage_calls = [c for c in calls.read_text().splitlines() if c.startswith(prefix)]
    return done, stage_calls


def test_shards_deal_every_cuda_test_file_to_exactly_one_process(tmp_path: Path) -> None:
    done, calls = _gate(tmp_path, 3, fail="no-such-file")
    assert done.returncode == 0, done.stdout + done.stderr
    assert len(calls) == 3
    dealt = [w for c in calls for w in c.split() if w.startswith("tests/cuda/test_")]
    files = sorted(str(p.relative_to(REPO)) for p in (REPO / "tests/cuda").glob("test_*.py"))
    assert sorted(dealt) == files, "each file once, none left out"
    assert all("-m cuda" in c for c in calls)
    # One log for every shard: a device call returns at most 8 files.
    assert sorted(p.name for p in (tmp_path / "out").glob("cuda_tests*.log")) == ["cuda_tests.log"]
    log = (tmp_path / "out" / "cuda_tests.log").read_text()
    assert [line.split(":")[0] for line in log.splitlines() if line.startswith("== shard")] == [
        f"== shard {k}" for k in range(3)
    ]
    assert log.count("1 passed in 0.1s") == 3
    assert "gpu_gate rc=0" in done.stdout


def test_a_failing_shard_fails_the_gate_and_shows_its_failure(tmp_path: Path) -> None:
    done, calls = _gate(tmp_path, 2, fail="tests/cuda/test_ema_cuda.py")
    assert len(calls) == 2
    assert done.returncode == 1
    assert "FAILED tests/cuda/test_ema_cuda.py::test_x" in done.stdout
    assert "gpu_gate rc=1" in done.stdout


def test_one_shard_runs_the_folder_in_one_process(tmp_path: Path) -> None:
    done, calls = _gate(tmp_path, 1, fail="no-such-file")
    assert done.returncode == 0
    assert calls == ["-m pytest -q -p no:cacheprovider -m cuda tests/cuda"]


def test_a_shard_count_that_is_not_a_whole_number_is_refused(tmp_path: Path) -> None:
    for bad in ("abc", "0", "-1", "2.5"):
        done = subprocess.run(
            ["bash", str(REPO / "scripts/gpu_gate.sh"), "tests"],
            env={"PATH": os.environ["PATH"], "OUT": str(tmp_path), "TESTS_SHARDS": bad},
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 2, bad
        assert f"TESTS_SHARDS must be a whole number of processes, 1 or more, not '{bad}'" in (
            done.stderr
        )
        assert done.stdout == "", "refused before anything ran"


def test_the_tiles_stage_sweeps_known_configurations_with_and_without_fusion(
    tmp_path: Path,
) -> None:
    """The chain alone and with its small matrices fused, at both tile sizes."""
    done, calls = _gate(tmp_path, 1, fail="no-such-file", stage="tiles")
    assert done.returncode == 0, done.stdout + done.stderr
    assert len(calls) == 1
    words = calls[0].split()
    assert words[:3] == ["-m", "musgd.bench", "triton-tiles"]
    names = words[words.index("--configs") + 1].split(",")
    assert set(names) <= set(tb.CONFIGS), "every default name is a configuration"
    configs = [tb.CONFIGS[n] for n in names]
    assert {c.fuse_small for c in configs} == {False, True}
    assert {c.block for c in configs} == {64, 128}


def test_the_targets_stage_measures_the_trained_models_floors_then_reads_them_together(
    tmp_path: Path,
) -> None:
    done, calls = _gate(tmp_path, 1, fail="no-such-file", stage="targets")
    assert done.returncode == 0, done.stdout + done.stderr
    commands = [c.split()[2] for c in calls]
    assert commands == ["floor", "ultralytics", "ultralytics", "floor-ratio"]
    floor = calls[0].split()
    # The floor of the model the trainer bench trains: its synthetic data's class count.
    assert floor[floor.index("--classes") + 1] == str(CLASSES)
    assert floor[floor.index("--models") + 1] == "yolo26s.yaml,yolo26m.yaml"
    assert [c.split()[c.split().index("--model") + 1] for c in calls[1:3]] == [
        "yolo26s.yaml",
        "yolo26m.yaml",
    ]
    out = tmp_path / "out"
    assert calls[3].split()[3:] == [
        str(out / "targets-floor.json"),
        str(out / "targets-yolo26s" / "ultralytics-train.json"),
        str(out / "targets-yolo26m" / "ultralytics-train.json"),
        "--out",
        str(out / "floor-ratio.json"),
    ]
