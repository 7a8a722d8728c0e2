"""Synthetic datasets of every Ultralytics task's documented format, generated offline.

The GPU machine has no network, so each benchmark and test writes its own data. Each image
(JPEG) is a noisy background with 1 to 4 filled shapes, the class selecting the colour, so the
classes are learnable. The layouts are the documented ones:

* ``detect``: ``images/{train,val}/*.jpg``, ``labels/{train,val}/*.txt`` with one
  ``class cx cy w h`` line per box (normalized to [0, 1]) and a ``data.yaml`` naming the splits
  and classes;
* ``segment``: the same tree, each line ``class x1 y1 ... xn yn``, the normalized polygon of a
  filled shape (6 to 8 vertices);
* ``pose``: the same tree, each line ``class cx cy w h`` then ``px py v`` for each of the
  :data:`KPT_SHAPE` keypoints (the box's inset corners and its centre, all visible: v = 2), and
  ``kpt_shape`` and ``flip_idx`` (the keypoints a horizontal flip swaps) in the data yaml;
* ``obb``: the same tree, each line ``class x1 y1 x2 y2 x3 y3 x4 y4``, the normalized corners of
  a rotated filled rectangle;
* ``classify``: an ImageFolder tree ``{train,val}/class<k>/*.jpg``, one large shape of class
  ``k``'s colour per image; the dataset root is what ``data=`` takes (there is no yaml).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import torch

from musgd.ultralytics import TASKS

__all__ = [
    "CLASSES",
    "FLIP_IDX",
    "KPT_SHAPE",
    "TASKS",
    "SyntheticDataset",
    "write_synthetic_dataset",
]

# One colour per class, far apart so the classes are learnable.
_COLOURS = ((230, 40, 40), (40, 200, 60), (50, 80, 230), (240, 220, 40))
# The classes of every synthetic dataset: one per colour (the trainer builds its model for them).
CLASSES = len(_COLOURS)
# Pose: keypoints per object and values per keypoint (x, y, visibility).
KPT_SHAPE = (5, 3)
# The keypoints are the box's top-left, top-right, bottom-right, bottom-left corners (inset) and
# its centre: a horizontal flip swaps 0 with 1 and 2 with 3.
FLIP_IDX = (1, 0, 3, 2, 4)
_VISIBLE = 2  # the documented visibility of a labelled, visible keypoint
_INSET = 0.15  # keypoints sit this share of the box inside its corners


@dataclass(frozen=True)
class SyntheticDataset:
    """Where a generated dataset lies: its root and what ``model.train(data=...)`` takes (the
    ``data.yaml``, or the root itself for ``classify``)."""

    root: Path
    data: Path
    train_images: int
    val_images: int
    task: str = "detect"

    @property
    def yaml(self) -> Path:
        """The ``data.yaml`` of a detection-style task (``classify`` has none)."""
        if self.task == "classify":
            raise ValueError("a classify dataset has no data.yaml: pass its root (.data) as data=")
        return self.data


def _noise(generator: torch.Generator, size: int) -> torch.Tensor:
    return torch.randint(0, 60, (size, size, 3), generator=generator, dtype=torch.uint8)


def _uniform(generator: torch.Generator, low: float, high: float) -> float:
    return low + (high - low) * float(torch.rand((), generator=generator))


def _int(generator: torch.Generator, low: int, high: int) -> int:
    """A whole number in ``[low, high)``."""
    return int(torch.randint(low, high, (1,), generator=generator))


def _norm(points: list[tuple[float, float]], size: int) -> str:
    return " ".join(f"{min(max(c / size, 0.0), 1.0):.6f}" for p in points for c in p)


def _detect_image(generator: torch.Generator, size: int) -> tuple[torch.Tensor, list[str]]:
    """One ``(size, size, 3)`` uint8 image of filled rectangles and its ``class cx cy w h`` lines.

    Kept exactly as the detection data of the evidence so far: same seed, same bytes.
    """
    img = _noise(generator, size)
    lines: list[str] = []
    for _ in range(_int(generator, 1, 5)):
        cls = _int(generator, 0, len(_COLOURS))
        w, h = (int(v) for v in torch.randint(size // 8, size // 2, (2,), generator=generator))
        x0 = _int(generator, 0, size - w)
        y0 = _int(generator, 0, size - h)
        img[y0 : y0 + h, x0 : x0 + w] = torch.tensor(_COLOURS[cls], dtype=torch.uint8)
        cx, cy = (x0 + w / 2) / size, (y0 + h / 2) / size
        lines.append(f"{cls} {cx:.6f} {cy:.6f} {w / size:.6f} {h / size:.6f}")
    return img, lines


def _polygon(generator: torch.Generator, size: int) -> list[tuple[float, float]]:
    """A star-shaped polygon of 6 to 8 vertices around a centre, inside the image."""
    radius = _uniform(generator, size / 10, size / 4)
    cx = _uniform(generator, radius, size - radius)
    cy = _uniform(generator, radius, size - radius)
    n = _int(generator, 6, 9)
    points = []
    for k in range(n):
        angle = 2 * math.pi * (k + _uniform(generator, -0.3, 0.3)) / n
        r = radius * _uniform(generator, 0.6, 1.0)
        points.append((cx + r * math.cos(angle), cy + r * math.sin(angle)))
    return points


def _rotated_rectangle(generator: torch.Generator, size: int) -> list[tuple[float, float]]:
    """The 4 corners (in order around it) of a rotated rectangle inside the image."""
    w = _uniform(generator, size / 8, size / 3)
    h = _uniform(generator, size / 8, size / 3)
    half = math.hypot(w, h) / 2  # the rectangle fits in this circle whatever its angle
    cx = _uniform(generator, half, size - half)
    cy = _uniform(generator, half, size - half)
    angle = _uniform(generator, 0.0, math.pi)
    c, s = math.cos(angle), math.sin(angle)
    corners = ((-w / 2, -h / 2), (w / 2, -h / 2), (w / 2, h / 2), (-w / 2, h / 2))
    return [(cx + x * c - y * s, cy + x * s + y * c) for x, y in corners]


def _shapes_image(
    generator: torch.Generator, size: int, task: str
) -> tuple[torch.Tensor, list[str]]:
    """One image of 1 to 4 filled shapes and its label lines in ``task``'s format."""
    import numpy as np
    from PIL import Image, ImageDraw

    image = Image.fromarray(_noise(generator, size).numpy())
    draw = ImageDraw.Draw(image)
    lines: list[str] = []
    for _ in range(_int(generator, 1, 5)):
        cls = _int(generator, 0, len(_COLOURS))
        colour = _COLOURS[cls]
        if task == "segment":
            points = _polygon(generator, size)
            draw.polygon(points, fill=colour)
            lines.append(f"{cls} {_norm(points, size)}")
        elif task == "obb":
            points = _rotated_rectangle(generator, size)
            draw.polygon(points, fill=colour)
            lines.append(f"{cls} {_norm(points, size)}")
        else:  # pose: a box and its keypoints, drawn as white dots
            w = _uniform(generator, size / 5, size / 2)
            h = _uniform(generator, size / 5, size / 2)
            x0 = _uniform(generator, 0.0, size - w)
            y0 = _uniform(generator, 0.0, size - h)
            draw.rectangle((x0, y0, x0 + w, y0 + h), fill=colour)
            dx, dy = _INSET * w, _INSET * h
            keypoints = [
                (x0 + dx, y0 + dy),
                (x0 + w - dx, y0 + dy),
                (x0 + w - dx, y0 + h - dy),
                (x0 + dx, y0 + h - dy),
                (x0 + w / 2, y0 + h / 2),
            ]
            for x, y in keypoints:
                draw.ellipse((x - 1, y - 1, x + 1, y + 1), fill=(255, 255, 255))
            box = _norm([(x0 + w / 2, y0 + h / 2), (w, h)], size)
            kpts = " ".join(f"{_norm([p], size)} {_VISIBLE}" for p in keypoints)
            lines.append(f"{cls} {box} {kpts}")
    return torch.from_numpy(np.asarray(image).copy()), lines


def _classify_image(generator: torch.Generator, size: int, cls: int) -> torch.Tensor:
    """One image of a single large rectangle of class ``cls``'s colour."""
    img = _noise(generator, size)
    w, h = (int(v) for v in torch.randint(size // 2, size - size // 8, (2,), generator=generator))
    x0 = _int(generator, 0, size - w)
    y0 = _int(generator, 0, size - h)
    img[y0 : y0 + h, x0 : x0 + w] = torch.tensor(_COLOURS[cls], dtype=torch.uint8)
    return img


def _save(img: torch.Tensor, path: Path) -> None:
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(img.numpy()).save(path, quality=90)


def _data_yaml(root: Path, task: str) -> Path:
    names = "\n".join(f"  {i}: class{i}" for i in range(len(_COLOURS)))
    extra = ""
    if task == "pose":
        extra = f"kpt_shape: [{KPT_SHAPE[0]}, {KPT_SHAPE[1]}]\nflip_idx: {list(FLIP_IDX)}\n"
    yaml = root / "data.yaml"
    yaml.write_text(
        f"path: {root.resolve()}\ntrain: images/train\nval: images/val\n{extra}names:\n{names}\n",
        encoding="utf-8",
    )
    return yaml


def write_synthetic_dataset(
    root: Path,
    *,
    train_images: int,
    val_images: int,
    size: int = 128,
    seed: int = 0,
    task: str = "detect",
) -> SyntheticDataset:
    """Write ``task``'s dataset under ``root`` (created; existing files of the same names
    replaced); the same arguments write the same files."""
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}: use one of {', '.join(TASKS)}")
    if train_images < 1 or val_images < 1:
        raise ValueError(
            f"train_images and val_images must be >= 1, got {train_images} and {val_images}"
        )
    if size < 32:
        raise ValueError(f"size must be >= 32 pixels, got {size}")
    generator = torch.Generator().manual_seed(seed)
    for split, count in (("train", train_images), ("val", val_images)):
        for i in range(count):
            if task == "classify":
                cls = i % len(_COLOURS)  # every class in a split of at least 4 images
                _save(_classify_image(generator, size, cls), root / split / f"class{cls}" / _jpg(i))
                continue
            img, lines = (
                _detect_image(generator, size)
                if task == "detect"
                else _shapes_image(generator, size, task)
            )
            _save(img, root / "images" / split / _jpg(i))
            label = root / "labels" / split / f"{i:05d}.txt"
            label.parent.mkdir(parents=True, exist_ok=True)
            label.write_text("\n".join(lines) + "\n", encoding="utf-8")
    data = root if task == "classify" else _data_yaml(root, task)
    return SyntheticDataset(root, data, train_images, val_images, task)


def _jpg(i: int) -> str:
    return f"{i:05d}.jpg"
