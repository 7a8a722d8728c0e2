"""The demo's pieces: a line per finished variant, the results' line-chart shape, the PNG."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from musgd.bench._cli import EXIT_OK, main
from musgd.bench._demo import (
    DemoRow,
    demo_results,
    format_intro,
    format_row,
    run_demo,
    write_demo_png,
)
from musgd.bench._timing import summarize
from musgd.bench._train_bench import TrainConfig
from musgd.bench._variants import select_variants

CPU = torch.device("cpu")
CONFIG = TrainConfig(batch_size=2, image_size=64, steps=2, warmup=1)
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _row(name: str, losses: tuple[float, ...], steps: list[float]) -> DemoRow:
    return DemoRow(
        variant=name,
        step=summarize(steps),
        optimizer=summarize([s / 2 for s in steps]),
        loss_first=losses[0],
        loss_last=losses[-1],
        losses=losses,
    )


ROWS = [
    _row("per-matrix eager", (5.5, 3.0, 2.25), [10.0, 12.0, 30.0]),
    _row("bucketed eager", (5.5, 3.5, 2.5), [4.0, 5.0, 6.0]),
]


def test_results_hold_the_loss_curves_in_the_line_chart_shape() -> None:
    results = demo_results(ROWS, CONFIG)
    loss = results["curves"]["loss"]
    assert set(loss) == {"x_label", "y_label", "series"}
    assert isinstance(loss["x_label"], str)
    assert isinstance(loss["y_label"], str)
    assert loss["series"] == {
        "per-matrix eager": [5.5, 3.0, 2.25],
        "bucketed eager": [5.5, 3.5, 2.5],
    }
    assert results["steps"]["per-matrix eager"] == {
        "median_ms": 12.0,
        "min_ms": 10.0,
        "max_ms": 30.0,
    }
    # The rows keep the keys the earlier demo evidence has.
    assert results["rows"][1]["loss_last"] == 2.5
    assert results["rows"][1]["step_median_ms"] == 5.0
    assert results["config"]["steps"] == 2


def test_a_finished_variant_is_one_line_with_its_times_and_final_loss() -> None:
    line = format_row(ROWS[0])
    assert "\n" not in line
    assert line.startswith("  per-matrix eager: train step 12.0 (10.0–30.0) ms")
    assert line.endswith("final loss 2.2500")


def test_the_intro_says_what_runs_and_roughly_how_long() -> None:
    variants = select_variants(None, CPU, trainable=True)
    intro = format_intro(variants, CONFIG, CPU)
    assert "3 steps" in intro
    assert "under a minute on an idle 2-core CPU" in intro
    assert all(v.name in intro for v in variants)


def test_the_chart_is_a_png_at_the_given_path(tmp_path: Path) -> None:
    path = write_demo_png(ROWS, tmp_path / "nested" / "demo.png", title="test")
    assert path == tmp_path / "nested" / "demo.png"
    assert path.read_bytes()[:8] == PNG_MAGIC


def test_run_demo_hands_each_row_over_as_its_variant_finishes() -> None:
    variants = select_variants(["bucketed eager"], CPU, trainable=True)
    seen: list[DemoRow] = []
    rows = run_demo(variants, CONFIG, CPU, on_row=seen.append)
    assert seen == rows
    (row,) = rows
    assert len(row.losses) == CONFIG.warmup + CONFIG.steps
    assert (row.loss_first, row.loss_last) == (row.losses[0], row.losses[-1])


def test_a_chart_path_under_a_file_fails_before_drawing(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises((FileExistsError, NotADirectoryError)):
        write_demo_png(ROWS, blocker / "demo.png")


@pytest.mark.slow
def test_the_demo_command_reports_as_it_goes_and_writes_chart_and_evidence(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    png = tmp_path / "out" / "demo.png"
    argv = ["demo", "--quick", "--device", "cpu", "--steps", "2", "--warmup", "0"]
    assert main([*argv, "--png", str(png), "--out", str(tmp_path)]) == EXIT_OK
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("MuSGD demo: trains the nano detector for 2 steps")
    finished = [i for i, line in enumerate(lines) if line.startswith("  ") and "final loss" in line]
    table = next(i for i, line in enumerate(lines) if line.startswith("variant "))
    assert len(finished) == 3
    assert max(finished) < table, "each variant's line comes before the closing table"
    assert f"chart: {png}" in lines
    assert png.read_bytes()[:8] == PNG_MAGIC
    (path,) = tmp_path.glob("musgd-demo-*.json")
    results = json.loads(path.read_text())["results"]
    series = results["curves"]["loss"]["series"]
    assert list(series) == [r["variant"] for r in results["rows"]]
    assert all(len(values) == 2 for values in series.values())
    assert [r["loss_last"] for r in results["rows"]] == [v[-1] for v in series.values()]
