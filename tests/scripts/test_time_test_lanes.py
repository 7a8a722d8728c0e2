"""``scripts/time_test_lanes.py``: the lanes' commands, their timing and CI's step lines."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from script_module import load_script

lanes = load_script("time_test_lanes")


def test_step_lines_of_ci_are_read_into_seconds_per_step() -> None:
    output = (
        "Setting up .venv\n"
        "ci: make -j2 lint setup-ultralytics took 212 s\n"
        "1753 passed in 200.1s\n"
        "ci: make test took 431 s\n"
        "not a ci: line took 3 s\n"
        "ci: make docs took 9 s\n"
    )
    assert lanes.step_seconds(output) == {
        "make -j2 lint setup-ultralytics": 212,
        "make test": 431,
        "make docs": 9,
    }


def test_a_timed_command_counts_its_own_cpu_and_its_last_line(tmp_path: Path) -> None:
    # About 0.3 s of CPU in a child process, then a sleep that uses none.
    code = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass\n"
    code += "time.sleep(0.3)\nprint('first')\nprint('2 passed in 0.6s')\n"
    run = lanes.run_timed([sys.executable, "-c", code], tmp_path)
    assert (run.exit_code, run.last_line) == (0, "2 passed in 0.6s")
    assert run.wall_seconds >= 0.6
    assert 0.3 <= run.cpu_seconds < run.wall_seconds
    entry = lanes.summary([run, run], ["python", "-c", "..."])
    assert entry["command"] == "python -c ..."
    assert entry["exit_codes"] == [0]
    assert entry["wall_seconds"] == [round(run.wall_seconds, 1)] * 2
    assert entry["summary"] == "2 passed in 0.6s"


def test_each_lane_runs_in_xdist_workers_and_the_fast_lane_skips_slow_tests() -> None:
    _, main_lane = lanes.LANES["test (without tests/ultralytics)"]
    _, fast = lanes.LANES["test-fast"]
    # The xdist options are the Makefile's own: the lane times what `make test` runs.
    assert lanes.XDIST_FILES == ["-n", "auto", "--dist", "loadfile"]
    assert main_lane == [*lanes.PYTEST, *lanes.XDIST_FILES, "--ignore=tests/ultralytics"]
    assert lanes.LANES["test-ultralytics"][1] == [*lanes.PYTEST, *lanes.XDIST, "tests/ultralytics"]
    assert fast == [
        *lanes.PYTEST,
        *lanes.XDIST_FILES,
        "--ignore=tests/ultralytics",
        "-m",
        "not slow and not cuda",
    ]


def test_zero_runs_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        lanes.main(["--runs", "0"])
    assert exit_info.value.code == 2
    assert "--runs must be at least 1, got 0" in capsys.readouterr().err


def test_makefile_options_expand_references_and_a_missing_name_is_a_clear_error(
    tmp_path: Path,
) -> None:
    makefile = tmp_path / "Makefile"
    makefile.write_text(
        "# A := commented\nA := -n 2\nB := $(A) --dist loadfile\ntest:\n\tpytest $(B)\n",
        encoding="utf-8",
    )
    assert lanes.makefile_options("B", makefile) == ["-n", "2", "--dist", "loadfile"]
    with pytest.raises(SystemExit, match="has no `XDIST :=` line"):
        lanes.makefile_options("XDIST", makefile)
