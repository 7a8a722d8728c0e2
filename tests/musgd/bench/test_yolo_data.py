"""The synthetic datasets of every task: layout, label columns, value ranges, seeds, refusals."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("PIL", reason="the dataset writer needs Pillow (the docs extra brings it)")

from musgd.bench._yolo_data import (
    FLIP_IDX,
    KPT_SHAPE,
    TASKS,
    SyntheticDataset,
    write_synthetic_dataset,
)


def test_writes_images_labels_and_data_yaml(tmp_path: Path) -> None:
    ds = write_synthetic_dataset(tmp_path / "d", train_images=3, val_images=2, size=48, seed=1)
    for split, count in (("train", 3), ("val", 2)):
        images = sorted((ds.root / "images" / split).glob("*.jpg"))
        labels = sorted((ds.root / "labels" / split).glob("*.txt"))
        assert len(images) == count
        assert [p.stem for p in images] == [p.stem for p in labels]
        for label in labels:
            lines = label.read_text(encoding="utf-8").splitlines()
            assert 1 <= len(lines) <= 4
            for line in lines:
                cls, *box = line.split()
                assert int(cls) in range(4)
                assert all(0.0 <= float(v) <= 1.0 for v in box)
    text = ds.yaml.read_text(encoding="utf-8")
    assert "train: images/train" in text
    assert "3: class3" in text


def test_same_seed_same_labels(tmp_path: Path) -> None:
    a = write_synthetic_dataset(tmp_path / "a", train_images=2, val_images=1, size=32, seed=7)
    b = write_synthetic_dataset(tmp_path / "b", train_images=2, val_images=1, size=32, seed=7)
    la = (a.root / "labels" / "train" / "00001.txt").read_text(encoding="utf-8")
    lb = (b.root / "labels" / "train" / "00001.txt").read_text(encoding="utf-8")
    assert la == lb


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"train_images": 0, "val_images": 1}, "train_images and val_images must be >= 1"),
        ({"train_images": 1, "val_images": 1, "size": 16}, "size must be >= 32"),
    ],
)
def test_bad_sizes_raise(tmp_path: Path, kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        write_synthetic_dataset(tmp_path, **kwargs)


def _label_values(ds: SyntheticDataset, split: str) -> list[list[float]]:
    """Every label line of ``split`` as numbers, class first; one label file per image."""
    images = sorted((ds.root / "images" / split).glob("*.jpg"))
    labels = sorted((ds.root / "labels" / split).glob("*.txt"))
    assert [p.stem for p in images] == [p.stem for p in labels]
    lines = [line for p in labels for line in p.read_text(encoding="utf-8").splitlines()]
    assert lines
    return [[float(v) for v in line.split()] for line in lines]


def _check_class_and_range(rows: list[list[float]]) -> None:
    for row in rows:
        assert row[0] in {0.0, 1.0, 2.0, 3.0}
        assert all(0.0 <= v <= 1.0 for v in row[1:])


def test_segment_labels_are_polygons(tmp_path: Path) -> None:
    ds = write_synthetic_dataset(tmp_path, train_images=4, val_images=2, size=64, task="segment")
    rows = _label_values(ds, "train") + _label_values(ds, "val")
    _check_class_and_range(rows)
    for row in rows:
        # class and 6 to 8 vertices (the documented minimum is 3), x and y per vertex.
        assert len(row) % 2 == 1
        assert 6 <= (len(row) - 1) // 2 <= 8
    assert "kpt_shape" not in ds.yaml.read_text(encoding="utf-8")


def test_pose_labels_hold_a_box_and_visible_keypoints_of_the_yaml_shape(tmp_path: Path) -> None:
    ds = write_synthetic_dataset(tmp_path, train_images=4, val_images=2, size=64, task="pose")
    count, dims = KPT_SHAPE
    rows = _label_values(ds, "train")
    _check_class_and_range([row[:5] for row in rows])
    for row in rows:
        assert len(row) == 5 + count * dims
        cx, cy, w, h = row[1:5]
        keypoints = [row[5 + dims * k : 5 + dims * (k + 1)] for k in range(count)]
        for x, y, visible in keypoints:
            assert visible == 2.0  # labelled and visible
            assert cx - w / 2 - 1e-6 <= x <= cx + w / 2 + 1e-6  # inside its box
            assert cy - h / 2 - 1e-6 <= y <= cy + h / 2 + 1e-6
        # The last keypoint is the box's centre; the first two mirror each other.
        assert keypoints[-1][:2] == pytest.approx([cx, cy], abs=2e-6)
        assert keypoints[0][1] == pytest.approx(keypoints[1][1], abs=2e-6)
    text = ds.yaml.read_text(encoding="utf-8")
    assert f"kpt_shape: [{count}, {dims}]" in text
    assert f"flip_idx: {list(FLIP_IDX)}" in text
    assert sorted(FLIP_IDX) == list(range(count))
    assert all(FLIP_IDX[FLIP_IDX[k]] == k for k in range(count))  # a flip undone by a flip


def test_obb_labels_are_four_corners_of_a_rectangle(tmp_path: Path) -> None:
    ds = write_synthetic_dataset(tmp_path, train_images=4, val_images=2, size=64, task="obb")
    rows = _label_values(ds, "train")
    _check_class_and_range(rows)
    for row in rows:
        assert len(row) == 9
        corners = [(row[1 + 2 * k] * 64, row[2 + 2 * k] * 64) for k in range(4)]
        sides = [math.dist(corners[k], corners[(k + 1) % 4]) for k in range(4)]
        # Opposite sides equal, diagonals equal: a rectangle (to the labels' 6 decimals).
        assert sides[0] == pytest.approx(sides[2], abs=1e-3)
        assert sides[1] == pytest.approx(sides[3], abs=1e-3)
        assert math.dist(corners[0], corners[2]) == pytest.approx(
            math.dist(corners[1], corners[3]), abs=1e-3
        )


def test_classify_is_an_image_folder_tree_of_every_class(tmp_path: Path) -> None:
    ds = write_synthetic_dataset(tmp_path, train_images=8, val_images=4, size=48, task="classify")
    assert ds.data == ds.root  # data= takes the root of an ImageFolder tree
    for split, count in (("train", 8), ("val", 4)):
        folders = sorted(p.name for p in (ds.root / split).iterdir())
        assert folders == ["class0", "class1", "class2", "class3"]
        images = sorted((ds.root / split).glob("class*/*.jpg"))
        assert len(images) == count
    assert not (ds.root / "labels").exists()
    with pytest.raises(ValueError, match=r"has no data\.yaml"):
        _ = ds.yaml


@pytest.mark.parametrize("task", TASKS)
def test_same_seed_same_files_for_every_task(tmp_path: Path, task: str) -> None:
    def files(seed: int, name: str) -> dict[str, bytes]:
        ds = write_synthetic_dataset(
            tmp_path / name, train_images=4, val_images=1, size=32, seed=seed, task=task
        )
        return {
            str(p.relative_to(ds.root)): p.read_bytes()
            for p in sorted(ds.root.rglob("*"))
            if p.is_file() and p.name != "data.yaml"  # the yaml names its own root
        }

    assert files(3, "a") == files(3, "b")
    assert files(3, "a") != files(4, "c")


def test_an_unknown_task_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown task 'depth': use one of detect, segment"):
        write_synthetic_dataset(tmp_path, train_images=1, val_images=1, task="depth")
