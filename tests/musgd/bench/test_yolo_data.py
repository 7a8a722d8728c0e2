"""The synthetic YOLO-format dataset: layout, label lines and bad sizes."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("PIL", reason="the dataset writer needs Pillow (the docs extra brings it)")

from musgd.bench._yolo_data import write_synthetic_dataset


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
def test_bad_sizes_raise(tmp_path: Path, kwargs: dict[str, int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        write_synthetic_dataset(tmp_path, **kwargs)
