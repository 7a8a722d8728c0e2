"""The floor's model is the one the trainer trains: built for the trainer bench's classes."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("ultralytics", reason="ultralytics is not installed: make test-ultralytics")

from musgd.bench._floor import build_yolo
from musgd.bench._yolo_data import CLASSES


def _size(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def _classes(model: torch.nn.Module) -> object:
    spec = getattr(model, "yaml", None)
    assert isinstance(spec, dict)
    return spec["nc"]


def test_the_floor_builds_the_model_for_the_benchmarks_classes() -> None:
    cpu = torch.device("cpu")
    own = build_yolo("yolo26n.yaml", cpu, None)
    assert _classes(own) == 80  # the configuration's COCO head
    ours = build_yolo("yolo26n.yaml", cpu, CLASSES)
    assert _classes(ours) == CLASSES == 4
    assert type(ours) is type(own)
    # The head's class branch narrows with the class count: fewer parameters, less work.
    assert _size(ours) < _size(own)
    assert _size(build_yolo("yolo26n.yaml", cpu, 80)) == _size(own)
    seg = build_yolo("yolo26n-seg.yaml", cpu, CLASSES)
    assert (type(seg).__name__, _classes(seg)) == ("SegmentationModel", CLASSES)
