"""``python -m musgd.bench triton`` and ``triton-tiles``: options, tables, the pick, no-GPU exit."""

from __future__ import annotations

import pytest
import torch

from musgd._triton_ns import TileConfig
from musgd.bench import _triton_bench as tb
from musgd.bench._cli import EXIT_USAGE, build_parser, main
from musgd.bench._models import YOLO26_MODELS, yolo26_parameters


def test_triton_options_and_defaults() -> None:
    args = build_parser().parse_args(
        ["triton", "--commit", "abc1234", "--steps", "30", "--warmup", "5", "--ns-steps", "5"]
    )
    assert (args.steps, args.warmup, args.ns_steps, args.commit) == (30, 5, 5, "abc1234")
    assert args.sets == ",".join(YOLO26_MODELS)
    assert str(args.out) == "out"
    tiles = build_parser().parse_args(["triton-tiles"])
    assert tiles.configs == list(tb.CONFIGS)
    some = build_parser().parse_args(["triton-tiles", "--configs", "64/64/w4/s3,64/64/w4/s3/k4"])
    assert some.configs == ["64/64/w4/s3", "64/64/w4/s3/k4"]


def _usage_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """What the parser printed on stderr as it exited 2 on ``argv``."""
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(argv)
    assert exit_.value.code == EXIT_USAGE
    return capsys.readouterr().err


@pytest.mark.parametrize("bad", ["64/64/w4/s3,64/64/w9", "", ","])
def test_unknown_tile_configurations_exit_2_listing_the_names(
    bad: str, capsys: pytest.CaptureFixture[str]
) -> None:
    err = _usage_error(["triton-tiles", "--configs", bad], capsys)
    assert "unknown tile configuration" in err
    assert "the names are 32/32/w2/s3, " in err


@pytest.mark.parametrize(
    ("name", "label"),
    [
        ("NVIDIA H100 80GB HBM3", "h100"),
        ("NVIDIA H200", "h200"),
        ("NVIDIA A100-SXM4-80GB", "a100"),
        ("Some GPU", "cuda"),
    ],
)
def test_evidence_files_are_named_by_the_gpu_that_ran(name: str, label: str) -> None:
    assert tb.gpu_label(name) == label


def test_tile_options_take_four_to_seven_integers() -> None:
    args = build_parser().parse_args(
        ["triton", "--small-tiles", "64,64,4,3,128,8", "--large-tiles", "128,64,8,4,0,0,4"]
    )
    assert args.small_tiles == TileConfig(64, 64, 4, 3, block_n=128, update_warps=8)
    assert args.large_tiles == TileConfig(128, 64, 8, 4, split_k=4)


@pytest.mark.parametrize(
    "bad", ["64,64,4", "64,64,4,3,1,2,3,4", "64,x,4,3", "64,64,-4,3", "64,64,4,3,0,0,0"]
)
def test_bad_tile_options_exit_2_saying_the_form(
    bad: str, capsys: pytest.CaptureFixture[str]
) -> None:
    err = _usage_error(["triton", "--small-tiles", bad], capsys)
    assert "expected block,block_k,warps,stages[,block_n[,update_warps[,split_k]]]" in err


@pytest.mark.skipif(torch.cuda.is_available(), reason="the no-GPU answer")
@pytest.mark.parametrize("command", ["triton", "triton-tiles"])
def test_without_a_gpu_the_triton_commands_say_so(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([command]) == EXIT_USAGE
    assert f"python -m musgd.bench {command} needs a CUDA GPU" in capsys.readouterr().err


def test_yolo_shapes_and_tables_come_from_the_package_data() -> None:
    specs = yolo26_parameters("yolo26n")
    assert tb.yolo_shapes("yolo26n") == [s.shape for s in specs]
    tables = tb.tables()
    assert list(tables) == [*YOLO26_MODELS, "24x1024x4096", "8x4096x4096"]
    matrices = [s.shape for s in specs if s.name.startswith("matrices.")]
    assert len(tables["yolo26n"]) == len(matrices)
    first = matrices[0]
    assert tables["yolo26n"][0] == (first[0], torch.Size(first).numel() // first[0])


def test_ns_flops_counts_the_unsymmetric_iteration() -> None:
    # m = 2, n = 3: 4·m²·n + 2·m³ = 48 + 16 per matrix and iteration.
    assert tb._ns_flops(batch=2, rows=3, cols=2, steps=5) == 2 * 5 * 64


def test_pick_takes_the_fastest_capturing_configurations() -> None:
    fast, safe = "64/32/w4/s3", "128/64/w8/s3"
    ok = {"captures": True, "replay_equal": True}
    results = {
        "yolo26n": {fast: {**ok, "replay_ms": 0.1}, safe: {**ok, "replay_ms": 0.2}},
        "yolo26s": {fast: {"captures": False}, safe: ok},
        "yolo26m": {fast: ok, safe: ok},
        "24x1024x4096": {fast: {"tflops": 90.0}, safe: {"tflops": 50.0}},
        "8x4096x4096": {fast: {"tflops": 90.0}, safe: {"tflops": 50.0}},
    }
    assert tb.pick(results) == {"small": "64,32,4,3,0,0,1", "large": "128,64,8,3,0,0,1"}
