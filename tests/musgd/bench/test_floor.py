"""``python -m musgd.bench floor``: the stand-in loss, the groups, a CPU run and its refusals
(the replayed floor itself needs CUDA: ``scripts/gpu_gate.sh`` runs it on the H200)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import Tensor, nn

from musgd.bench._cli import EXIT_USAGE, main
from musgd.bench._floor import (
    FloorConfig,
    configurations,
    floor_groups,
    run_floor,
    stand_in_loss,
)


class TinyDetector(nn.Module):
    """Two convs, a BatchNorm and two heads: a train-mode output that is a list and a dict."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(8)
        self.head = nn.Conv2d(8, 4, 1)

    def forward(self, x: Tensor) -> object:
        y = torch.relu(self.bn(self.stem(x)))
        return {"boxes": [self.head(y)], "scores": y.mean(dim=(2, 3))}


def _build(_cfg: str, device: torch.device, _classes: int | None) -> nn.Module:
    return TinyDetector().to(device)


def _cpu_floor(
    configs: list[FloorConfig],
    build: Callable[[str, torch.device, int | None], nn.Module],
    steps: int,
    classes: int | None = None,
) -> dict[str, Any]:
    return run_floor(
        configs,
        device=torch.device("cpu"),
        imgsz=32,
        warmup=1,
        replays=steps,
        eager_steps=steps,
        seed=0,
        classes=classes,
        build=build,
    )


def test_the_stand_in_loss_is_the_sum_of_every_floating_outputs_mean() -> None:
    a = torch.randn(2, 3, requires_grad=True)
    b = torch.randn(4, requires_grad=True)
    outputs = {"x": [a, torch.arange(3)], "y": (b, {"z": torch.ones(2)})}
    expected = a.float().mean() + b.float().mean()
    assert torch.equal(stand_in_loss(outputs), expected)
    with pytest.raises(TypeError, match="train mode"):
        stand_in_loss([torch.ones(3), torch.arange(2)])


def test_the_groups_orthogonalize_kernels_and_step_vectors_by_sgd() -> None:
    model = TinyDetector()
    muon, sgd = floor_groups(model)
    assert muon["use_muon"]
    assert not sgd["use_muon"]
    assert {id(p) for p in muon["params"]} == {id(model.stem.weight), id(model.head.weight)}
    assert {id(p) for p in sgd["params"]} == {
        id(model.bn.weight),
        id(model.bn.bias),
        id(model.head.bias),
    }
    assert (muon["weight_decay"], sgd["weight_decay"]) == (5e-4, 0.0)


def test_a_cpu_floor_times_the_eager_iteration_trains_and_says_why_nothing_replays() -> None:
    configs = configurations(["tiny.yaml"], [2], ["nchw", "channels_last"], ["bfloat16"], [False])
    seen: list[TinyDetector] = []

    def build(_cfg: str, device: torch.device, _classes: int | None) -> nn.Module:
        seen.append(TinyDetector().to(device))
        seen.append(TinyDetector())  # the untrained twin, same seed
        seen[-1].load_state_dict(seen[-2].state_dict())
        return seen[-2]

    results = _cpu_floor(configs, build, 2)
    rows = results["floors"]
    assert [r["layout"] for r in rows] == ["nchw", "channels_last"]
    for row in rows:
        assert row["eager"]["count"] == 2
        assert row["eager"]["median_ms"] > 0
        assert row["replay"] is None
        assert "CUDA" in row["replay_reason"]
    trained, untouched = seen[0], seen[1]
    assert not torch.equal(trained.stem.weight, untouched.stem.weight)
    assert seen[2].stem.weight.is_contiguous(memory_format=torch.channels_last)
    assert results["config"]["imgsz"] == 32
    assert results["config"]["classes"] == "the configuration's own"  # the spec's floor


def test_a_floor_for_other_classes_builds_every_model_for_them_and_says_so() -> None:
    asked: list[int | None] = []

    def build(_cfg: str, device: torch.device, classes: int | None) -> nn.Module:
        asked.append(classes)
        return TinyDetector().to(device)

    configs = configurations(["tiny.yaml"], [2, 3], ["nchw"], ["bfloat16"], [False])
    results = _cpu_floor(configs, build, 1, classes=4)
    assert asked == [4, 4]
    assert results["config"]["classes"] == 4


def test_a_configuration_that_fails_is_recorded_and_the_next_still_runs() -> None:
    configs = [
        FloorConfig("tiny.yaml", 2, "nchw", "bfloat16", True),  # no predict() to compile
        FloorConfig("tiny.yaml", 2, "nchw", "bfloat16", False),
    ]
    rows = _cpu_floor(configs, _build, 1)["floors"]
    assert "predict" in rows[0]["error"]
    assert rows[0]["label"] == "tiny b2 nchw bfloat16 compiled"
    assert "error" not in rows[1]
    assert rows[1]["eager"]["count"] == 1


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--layouts", "nhwc"], "unknown layout"),
        (["--dtypes", "float8"], "unknown dtype"),
        (["--batch-sizes", "0"], "batch sizes of 1 or more"),
        (["--models", "yolo26n"], "model configurations"),
        (["--compile", "maybe"], "false, true or both"),
        (["--classes", "0"], "--classes"),
    ],
)
def test_bad_options_exit_2_saying_what_to_give(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["floor", "--device", "cpu", *argv]) == EXIT_USAGE
    assert message in capsys.readouterr().err


def test_an_image_size_off_the_stride_and_a_missing_gpu_exit_2(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["floor", "--device", "cpu", "--imgsz", "100"]) == EXIT_USAGE
    assert "multiple of 32" in capsys.readouterr().out
    if not torch.cuda.is_available():
        assert main(["floor", "--device", "cuda"]) == EXIT_USAGE
        assert "sees no CUDA GPU" in capsys.readouterr().err
