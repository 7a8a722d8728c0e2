"""The built-in workloads: the nano detector's size and shapes, data, loss, parameter sets."""

from __future__ import annotations

import math

import pytest
import torch

from musgd import MuSGD, matrix_shape, param_groups
from musgd._functional import build_layout
from musgd.bench._models import (
    BOXES_PER_IMAGE,
    PARAMETER_SETS,
    STRIDES,
    YOLO26_MODELS,
    NanoDetector,
    detection_loss,
    large_parameters,
    make_parameters,
    nano_detector_parameters,
    synthetic_batch,
    transformer_parameters,
    yolo26_parameters,
)


@pytest.fixture(scope="module")
def model() -> NanoDetector:
    torch.manual_seed(0)
    return NanoDetector()


def test_nano_detector_size_and_matrix_count(model: NanoDetector) -> None:
    params = list(model.parameters())
    total = sum(p.numel() for p in params)
    matrices = [p for p in params if matrix_shape(p.shape) is not None]
    assert 2_000_000 <= total <= 3_000_000
    assert 100 <= len(matrices) <= 140
    shapes = {tuple(p.shape) for p in matrices}
    assert (16, 3, 3, 3) in shapes  # the stem
    assert (256, 256, 3, 3) in shapes  # the largest kernel
    assert any(s[2:] == (1, 1) for s in shapes)  # 1x1 convs
    assert max(math.prod(s) for s in shapes) == 256 * 256 * 9
    # BatchNorm weights and biases are vectors: MuSGD routes them to the SGD rule.
    assert any(matrix_shape(p.shape) is None for p in params)


def test_forward_shapes(model: NanoDetector) -> None:
    out = model.eval()(torch.zeros(2, 3, 64, 64))
    assert [tuple(o.shape) for o in out] == [(2, 5, 64 // s, 64 // s) for s in STRIDES]


def test_synthetic_batch_is_seeded_and_boxes_are_inside() -> None:
    a = synthetic_batch(3, 64, generator=torch.Generator().manual_seed(1))
    b = synthetic_batch(3, 64, generator=torch.Generator().manual_seed(1))
    c = synthetic_batch(3, 64, generator=torch.Generator().manual_seed(2))
    assert torch.equal(a.images, b.images)
    assert torch.equal(a.boxes, b.boxes)
    assert not torch.equal(a.boxes, c.boxes)
    assert a.images.shape == (3, 3, 64, 64)
    assert a.boxes.shape == (3, BOXES_PER_IMAGE, 4)
    cx, cy, w, h = a.boxes.unbind(-1)
    assert bool(((cx - w / 2) >= 0).all() and ((cx + w / 2) <= 1).all())
    assert bool(((cy - h / 2) >= 0).all() and ((cy + h / 2) <= 1).all())
    # The last rectangle is painted on top: its centre pixel has its (bright) colour.
    px = (a.boxes[0, -1, :2] * 64).long()
    assert bool((a.images[0, :, px[1], px[0]] >= 0.5).all())


@pytest.mark.parametrize(("batch", "size"), [(0, 64), (2, 48), (2, 0)])
def test_synthetic_batch_rejects_bad_sizes(batch: int, size: int) -> None:
    with pytest.raises(ValueError, match="must be"):
        synthetic_batch(batch, size, generator=torch.Generator())


def test_loss_is_small_for_a_perfect_prediction() -> None:
    batch = synthetic_batch(2, 64, generator=torch.Generator().manual_seed(0))
    preds = []
    for stride in STRIDES:
        grid = 64 // stride
        p = torch.full((2, 5, grid, grid), -20.0)
        for b in range(2):
            for cx, cy, w, h in batch.boxes[b].tolist():
                gx, gy = int(cx * grid), int(cy * grid)
                p[b, 0, gy, gx] = 20.0
                p[b, 1, gy, gx] = torch.logit(torch.tensor(cx * grid - gx).clamp(1e-4, 1 - 1e-4))
                p[b, 2, gy, gx] = torch.logit(torch.tensor(cy * grid - gy).clamp(1e-4, 1 - 1e-4))
                p[b, 3, gy, gx] = math.log(w * grid)
                p[b, 4, gy, gx] = math.log(h * grid)
        preds.append(p)
    perfect = detection_loss(preds, batch.boxes)
    blank = detection_loss([torch.zeros_like(p) for p in preds], batch.boxes)
    assert float(perfect) < 1e-3 < float(blank)


def test_model_trains_on_cpu() -> None:
    torch.manual_seed(0)
    model = NanoDetector()
    opt = MuSGD(param_groups(model, weight_decay=5e-4), lr=0.02)
    generator = torch.Generator().manual_seed(0)
    batch = synthetic_batch(2, 64, generator=generator)
    losses = []
    for _ in range(6):
        opt.zero_grad()
        loss = detection_loss(model(batch.images), batch.boxes)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    assert all(math.isfinite(v) for v in losses)
    assert losses[-1] < 0.7 * losses[0]


def test_transformer_parameter_set() -> None:
    specs = transformer_parameters(blocks=2, width=8)
    assert len(specs) == 24
    assert sum(matrix_shape(s.shape) is not None for s in specs) == 8
    assert {s.shape for s in specs if len(s.shape) == 2} == {(24, 8), (8, 8), (32, 8), (8, 32)}
    assert len({s.name for s in specs}) == len(specs)
    default = transformer_parameters()
    assert sum(math.prod(s.shape) for s in default) == 12 * (12 * 768 * 768 + 13 * 768)
    with pytest.raises(ValueError, match="blocks >= 1"):
        transformer_parameters(blocks=0)


def test_large_set_is_width_4096() -> None:
    specs = large_parameters()
    assert max(max(s.shape) for s in specs) == 4 * 4096
    assert any(s.shape == (4096, 4096) for s in specs)


def test_nano_parameter_specs_match_the_model(model: NanoDetector) -> None:
    specs = nano_detector_parameters()
    assert [s.shape for s in specs] == [tuple(p.shape) for p in model.parameters()]


def test_make_parameters_is_seeded() -> None:
    specs = transformer_parameters(blocks=1, width=4)
    p1, g1 = make_parameters(specs, device="cpu", seed=3)
    p2, g2 = make_parameters(specs, device="cpu", seed=3)
    p3, _ = make_parameters(specs, device="cpu", seed=4)
    assert all(torch.equal(a, b) for a, b in zip(p1 + g1, p2 + g2, strict=True))
    assert not torch.equal(p1[2], p3[2])
    assert [tuple(p.shape) for p in p1] == [s.shape for s in specs]


# (parameters, matrices, same-shape buckets) of each YOLO26 set, counted from the shared files.
YOLO26_COUNTS = {"yolo26n": (366, 126, 41), "yolo26s": (366, 126, 37), "yolo26m": (396, 136, 30)}


@pytest.mark.parametrize("name", YOLO26_MODELS)
def test_yolo26_sets_are_the_packaged_shapes(name: str) -> None:
    specs = PARAMETER_SETS[name]()
    assert specs == yolo26_parameters(name)
    params, matrices, buckets = YOLO26_COUNTS[name]
    assert len(specs) == params
    shapes = [s.shape for s in specs]
    assert sum(matrix_shape(s) is not None for s in shapes) == matrices
    assert all(len(s) == 4 for s in shapes[:matrices])  # conv kernels first
    metas = [torch.empty(s, device="meta") for s in shapes]
    assert len(build_layout(metas, None).buckets) == buckets


def test_yolo26_rejects_unknown_models() -> None:
    with pytest.raises(ValueError, match="choose from yolo26n, yolo26s, yolo26m"):
        yolo26_parameters("yolo26x")


@pytest.mark.parametrize("name", YOLO26_MODELS)
def test_yolo26_package_data_is_the_shared_file_byte_for_byte(name: str) -> None:
    from importlib import resources
    from pathlib import Path

    shared = Path(__file__).resolve().parents[3].parent / "shared" / "data" / f"{name}_shapes.json"
    if not shared.is_file():
        pytest.skip(f"{shared} is not beside the repository (CI and worktrees have it)")
    packaged = resources.files("musgd.bench").joinpath(f"data/{name}_shapes.json").read_bytes()
    assert packaged == shared.read_bytes()
