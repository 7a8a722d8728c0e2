"""A synthetic YOLO-format detection dataset, generated offline (the GPU machine has no network).

Each image (JPEG) is a noisy background with 1 to 4 filled rectangles; each rectangle is one
labelled box of the class that selects its colour. The layout is the documented YOLO detection
format: ``images/{train,val}/*.jpg``, ``labels/{train,val}/*.txt`` with one ``class cx cy w h``
line per box (normalized to [0, 1]) and a ``data.yaml`` naming the splits and classes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

# One colour per class, far apart so the classes are learnable.
_COLOURS = ((230, 40, 40), (40, 200, 60), (50, 80, 230), (240, 220, 40))


@dataclass(frozen=True)
class SyntheticDataset:
    """Where a generated dataset lies: its root and its ``data.yaml``."""

    root: Path
    yaml: Path
    train_images: int
    val_images: int


def _image(generator: torch.Generator, size: int) -> tuple[torch.Tensor, list[str]]:
    """One ``(size, size, 3)`` uint8 image and its label lines."""
    img = torch.randint(0, 60, (size, size, 3), generator=generator, dtype=torch.uint8)
    lines: list[str] = []
    count = int(torch.randint(1, 5, (1,), generator=generator))
    for _ in range(count):
        cls = int(torch.randint(0, len(_COLOURS), (1,), generator=generator))
        w, h = (int(v) for v in torch.randint(size // 8, size // 2, (2,), generator=generator))
        x0 = int(torch.randint(0, size - w, (1,), generator=generator))
        y0 = int(torch.randint(0, size - h, (1,), generator=generator))
        img[y0 : y0 + h, x0 : x0 + w] = torch.tensor(_COLOURS[cls], dtype=torch.uint8)
        cx, cy = (x0 + w / 2) / size, (y0 + h / 2) / size
        lines.append(f"{cls} {cx:.6f} {cy:.6f} {w / size:.6f} {h / size:.6f}")
    return img, lines


def write_synthetic_dataset(
    root: Path, *, train_images: int, val_images: int, size: int = 128, seed: int = 0
) -> SyntheticDataset:
    """Write the dataset under ``root`` (created; existing files of the same names replaced)."""
    from PIL import Image

    if train_images < 1 or val_images < 1:
        raise ValueError(
            f"train_images and val_images must be >= 1, got {train_images} and {val_images}"
        )
    if size < 32:
        raise ValueError(f"size must be >= 32 pixels, got {size}")
    generator = torch.Generator().manual_seed(seed)
    for split, count in (("train", train_images), ("val", val_images)):
        images = root / "images" / split
        labels = root / "labels" / split
        images.mkdir(parents=True, exist_ok=True)
        labels.mkdir(parents=True, exist_ok=True)
        for i in range(count):
            img, lines = _image(generator, size)
            Image.fromarray(img.numpy()).save(images / f"{i:05d}.jpg", quality=90)
            (labels / f"{i:05d}.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    names = "\n".join(f"  {i}: class{i}" for i in range(len(_COLOURS)))
    yaml = root / "data.yaml"
    yaml.write_text(
        f"path: {root.resolve()}\ntrain: images/train\nval: images/val\nnames:\n{names}\n",
        encoding="utf-8",
    )
    return SyntheticDataset(root, yaml, train_images, val_images)
