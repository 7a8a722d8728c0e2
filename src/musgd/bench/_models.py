"""Built-in benchmark workloads: a YOLO-style nano detector and optimizer-only parameter sets.

The detector follows the published ideas of one-stage YOLO detectors (a strided conv backbone,
a feature-pyramid neck and a per-scale head; R60) built from cross-stage-partial blocks (CSPNet,
R61): each block splits its input, runs a stack of residual bottlenecks on one part and joins
every intermediate output with a 1x1 conv. It is written from those ideas, not from any
detector's source, and it is a *workload* for the optimizer: about 2.6 M parameters and about
120 matrix parameters (conv kernels from 16x3x3x3 up to 256x256x3x3, 1x1 convs, depthwise
kernels) plus BatchNorm vectors, which is the shape mix MuSGD buckets in practice.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from typing import cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

# Channel widths of the five backbone stages (strides 2, 4, 8, 16, 32).
WIDTHS = (16, 32, 64, 128, 256)
STRIDES = (8, 16, 32)  # the three detection scales: P3, P4, P5
BOX_CHANNELS = 4  # (x offset, y offset, log width, log height) per grid cell
BOXES_PER_IMAGE = 3


class ConvBNAct(nn.Module):
    """Conv2d (no bias) -> BatchNorm2d -> SiLU, the detector's basic unit."""

    def __init__(self, c_in: int, c_out: int, k: int = 1, s: int = 1, groups: int = 1) -> None:
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, k, s, k // 2, groups=groups, bias=False)
        self.bn = nn.BatchNorm2d(c_out)

    def forward(self, x: Tensor) -> Tensor:
        return F.silu(self.bn(self.conv(x)))


class Bottleneck(nn.Module):
    """Two 3x3 units with a residual connection."""

    def __init__(self, c: int) -> None:
        super().__init__()
        self.a = ConvBNAct(c, c, 3)
        self.b = ConvBNAct(c, c, 3)

    def forward(self, x: Tensor) -> Tensor:
        y: Tensor = self.b(self.a(x))
        return x + y


class SeparableBottleneck(nn.Module):
    """Two depthwise-separable 3x3 units (depthwise 3x3, then pointwise 1x1) with a residual."""

    def __init__(self, c: int) -> None:
        super().__init__()
        self.units = nn.Sequential(
            ConvBNAct(c, c, 3, groups=c),
            ConvBNAct(c, c, 1),
            ConvBNAct(c, c, 3, groups=c),
            ConvBNAct(c, c, 1),
        )

    def forward(self, x: Tensor) -> Tensor:
        y: Tensor = self.units(x)
        return x + y


class CSPBlock(nn.Module):
    """Cross-stage-partial block: 1x1 split, ``n`` bottlenecks on one half, 1x1 join of all.

    ``separable`` uses depthwise-separable bottlenecks: a quarter of the weights at this width.
    """

    def __init__(self, c_in: int, c_out: int, n: int, *, separable: bool = False) -> None:
        super().__init__()
        h = c_out // 2
        self.split = ConvBNAct(c_in, 2 * h, 1)
        kind = SeparableBottleneck if separable else Bottleneck
        self.blocks = nn.ModuleList(kind(h) for _ in range(n))
        self.join = ConvBNAct((2 + n) * h, c_out, 1)

    def forward(self, x: Tensor) -> Tensor:
        parts = list(self.split(x).chunk(2, dim=1))
        for block in self.blocks:
            parts.append(block(parts[-1]))
        out: Tensor = self.join(torch.cat(parts, dim=1))
        return out


class SPPF(nn.Module):
    """Spatial pyramid pooling: three chained 5x5 max-pools joined by a 1x1 conv."""

    def __init__(self, c: int) -> None:
        super().__init__()
        self.reduce = ConvBNAct(c, c // 2, 1)
        self.join = ConvBNAct(2 * c, c, 1)

    def forward(self, x: Tensor) -> Tensor:
        parts = [self.reduce(x)]
        for _ in range(3):
            parts.append(F.max_pool2d(parts[-1], 5, 1, 2))
        out: Tensor = self.join(torch.cat(parts, dim=1))
        return out


class Head(nn.Module):
    """One scale's head: a 3x3 box branch and a depthwise-separable objectness branch."""

    def __init__(self, c: int, c_box: int, c_obj: int) -> None:
        super().__init__()
        self.box = nn.Sequential(
            ConvBNAct(c, c_box, 3),
            ConvBNAct(c_box, c_box, 3),
            nn.Conv2d(c_box, BOX_CHANNELS, 1),
        )
        self.obj = nn.Sequential(
            ConvBNAct(c, c, 3, groups=c),
            ConvBNAct(c, c_obj, 1),
            ConvBNAct(c_obj, c_obj, 3, groups=c_obj),
            ConvBNAct(c_obj, c_obj, 1),
        )
        self.obj_logit = nn.Conv2d(c_obj, 1, 1)
        # Start objectness at a 1% prior so early steps are not spent learning the bias.
        nn.init.constant_(cast(Tensor, self.obj_logit.bias), math.log(0.01 / 0.99))

    def forward(self, x: Tensor) -> Tensor:
        return torch.cat([self.obj_logit(self.obj(x)), self.box(x)], dim=1)


class NanoDetector(nn.Module):
    """A YOLO-style nano detector: CSP backbone, top-down/bottom-up neck, three-scale head.

    ``forward(images)`` takes ``(B, 3, S, S)`` with ``S`` a multiple of 32 and returns one map
    per stride in :data:`STRIDES`, each ``(B, 1 + 4, S/stride, S/stride)``: an objectness logit
    and ``(x offset, y offset, log width, log height)`` of the box centred in that cell.
    """

    def __init__(self) -> None:
        super().__init__()
        c1, c2, c3, c4, c5 = WIDTHS
        self.stem = ConvBNAct(3, c1, 3, 2)
        self.stage2 = nn.Sequential(ConvBNAct(c1, c2, 3, 2), CSPBlock(c2, c2, 3))
        self.stage3 = nn.Sequential(ConvBNAct(c2, c3, 3, 2), CSPBlock(c3, c3, 6))
        self.stage4 = nn.Sequential(ConvBNAct(c3, c4, 3, 2), CSPBlock(c4, c4, 3))
        # One full-width 3x3 conv mixes the deepest features before pooling (256x256x3x3).
        self.stage5 = nn.Sequential(
            ConvBNAct(c4, c5, 3, 2),
            CSPBlock(c5, c5, 1, separable=True),
            ConvBNAct(c5, c5, 3),
            SPPF(c5),
        )
        # The neck uses separable bottlenecks: many small kernels, few weights.
        self.top_p4 = CSPBlock(c5 + c4, c4, 3, separable=True)
        self.top_p3 = CSPBlock(c4 + c3, c3, 3, separable=True)
        self.down_p3 = ConvBNAct(c3, c3, 3, 2)
        self.out_p4 = CSPBlock(c3 + c4, c4, 3, separable=True)
        self.down_p4 = ConvBNAct(c4, c4, 3, 2)
        self.out_p5 = CSPBlock(c4 + c5, c5, 2, separable=True)
        self.heads = nn.ModuleList(Head(c, 48, 64) for c in (c3, c4, c5))

    def forward(self, images: Tensor) -> list[Tensor]:
        """Return the raw prediction maps for strides 8, 16 and 32."""
        p2 = self.stage2(self.stem(images))
        p3 = self.stage3(p2)
        p4 = self.stage4(p3)
        p5 = self.stage5(p4)
        t4 = self.top_p4(torch.cat([F.interpolate(p5, scale_factor=2.0), p4], dim=1))
        t3 = self.top_p3(torch.cat([F.interpolate(t4, scale_factor=2.0), p3], dim=1))
        o4 = self.out_p4(torch.cat([self.down_p3(t3), t4], dim=1))
        o5 = self.out_p5(torch.cat([self.down_p4(o4), p5], dim=1))
        return [head(x) for head, x in zip(self.heads, (t3, o4, o5), strict=True)]


@dataclass(frozen=True)
class DetectionBatch:
    """Synthetic images and their boxes, normalized ``(cx, cy, w, h)`` in (0, 1)."""

    images: Tensor  # (B, 3, S, S), float32
    boxes: Tensor  # (B, BOXES_PER_IMAGE, 4), float32


def synthetic_batch(
    batch_size: int,
    image_size: int,
    *,
    generator: torch.Generator,
    device: torch.device | str = "cpu",
) -> DetectionBatch:
    """Draw ``batch_size`` noisy images with three solid rectangles each, and their boxes.

    Everything is drawn on the CPU from ``generator`` and then moved, so the same seed gives the
    same batch on every device.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if image_size < 32 or image_size % 32:
        raise ValueError(f"image_size must be a multiple of 32 (>= 32), got {image_size}")
    shape = (batch_size, BOXES_PER_IMAGE)
    wh = 0.1 + 0.3 * torch.rand((*shape, 2), generator=generator)
    centre = wh / 2 + (1 - wh) * torch.rand((*shape, 2), generator=generator)
    colour = 0.5 + 0.5 * torch.rand((*shape, 3), generator=generator)
    images = 0.2 * torch.randn((batch_size, 3, image_size, image_size), generator=generator)
    pixel = (torch.arange(image_size, dtype=torch.float32) + 0.5) / image_size
    lo, hi = centre - wh / 2, centre + wh / 2
    for k in range(BOXES_PER_IMAGE):  # later rectangles paint over earlier ones
        inside_x = (pixel >= lo[:, k, 0:1]) & (pixel < hi[:, k, 0:1])  # (B, S)
        inside_y = (pixel >= lo[:, k, 1:2]) & (pixel < hi[:, k, 1:2])
        mask = (inside_y[:, :, None] & inside_x[:, None, :])[:, None]  # (B, 1, S, S)
        images = torch.where(mask, colour[:, k, :, None, None], images)
    boxes = torch.cat([centre, wh], dim=-1)
    return DetectionBatch(images.to(device), boxes.to(device))


def detection_loss(predictions: list[Tensor], boxes: Tensor) -> Tensor:
    """Objectness plus box regression on each scale's grid; a scalar float32 loss.

    Each box is a positive at the cell holding its centre on every scale. Objectness is binary
    cross-entropy over all cells plus over the positives (so the rare positives are not drowned);
    the box term is smooth L1 on ``(sigmoid(x), sigmoid(y))`` against the centre's offset in the
    cell and on ``(log w, log h)`` against the box size in cells.
    """
    total = boxes.new_zeros(())
    batch = torch.arange(boxes.shape[0], device=boxes.device)[:, None]
    cx, cy, w, h = boxes.unbind(-1)
    for raw in predictions:
        pred = raw.float()  # the loss runs in float32 under autocast too
        grid = pred.shape[-1]
        gx = (cx * grid).long().clamp_(0, grid - 1)
        gy = (cy * grid).long().clamp_(0, grid - 1)
        target = torch.zeros_like(pred[:, 0])
        target[batch, gy, gx] = 1.0
        cells = pred[batch, :, gy, gx]  # (B, K, 5): advanced indices come first
        objectness = F.binary_cross_entropy_with_logits(pred[:, 0], target)
        positives = F.binary_cross_entropy_with_logits(cells[..., 0], torch.ones_like(cx))
        offsets = torch.stack([cx * grid - gx, cy * grid - gy], dim=-1)
        sizes = torch.stack([w * grid, h * grid], dim=-1).log()
        box = F.smooth_l1_loss(cells[..., 1:3].sigmoid(), offsets) + F.smooth_l1_loss(
            cells[..., 3:5], sizes
        )
        total = total + objectness + positives + box
    return total / len(predictions)


@dataclass(frozen=True)
class ParamSpec:
    """One parameter of an optimizer-only workload: its name and shape."""

    name: str
    shape: tuple[int, ...]


def nano_detector_parameters() -> list[ParamSpec]:
    """The parameter shapes of :class:`NanoDetector`, in module order."""
    return [ParamSpec(n, tuple(p.shape)) for n, p in NanoDetector().named_parameters()]


def transformer_parameters(blocks: int = 12, width: int = 768) -> list[ParamSpec]:
    """A pre-norm transformer's block parameters (GPT-2 small at the defaults, embeddings out).

    Per block: LayerNorm weight and bias twice, the fused ``(3w, w)`` QKV projection, the
    ``(w, w)`` output projection and the ``(4w, w)`` / ``(w, 4w)`` MLP, each with a bias.
    Embeddings are left out: Muon-style optimizers route them to the vector rule in practice.
    """
    if blocks < 1 or width < 2:
        raise ValueError(f"need blocks >= 1 and width >= 2, got blocks={blocks}, width={width}")
    specs: list[ParamSpec] = []
    for b in range(blocks):
        for name, shape in (
            ("ln1.weight", (width,)),
            ("ln1.bias", (width,)),
            ("attn.qkv.weight", (3 * width, width)),
            ("attn.qkv.bias", (3 * width,)),
            ("attn.proj.weight", (width, width)),
            ("attn.proj.bias", (width,)),
            ("ln2.weight", (width,)),
            ("ln2.bias", (width,)),
            ("mlp.fc.weight", (4 * width, width)),
            ("mlp.fc.bias", (4 * width,)),
            ("mlp.proj.weight", (width, 4 * width)),
            ("mlp.proj.bias", (width,)),
        ):
            specs.append(ParamSpec(f"blocks.{b}.{name}", shape))
    return specs


def large_parameters(blocks: int = 2, width: int = 4096) -> list[ParamSpec]:
    """The large set: transformer blocks at width 4096 (about 200 M parameters per block)."""
    return transformer_parameters(blocks=blocks, width=width)


YOLO26_MODELS = ("yolo26n", "yolo26s", "yolo26m")
# Parameter lists of these files: matrices (conv kernels), then norm weights, then biases.
_YOLO26_KINDS = ("matrices", "norm_weights", "biases")


def yolo26_parameters(model: str) -> list[ParamSpec]:
    """The parameter shapes of an Ultralytics YOLO26 detector (package data, ``bench/data``).

    Shapes only, as its model constructor builds them from the published model config: no
    Ultralytics code or weights. Matrices come first, then norm weights, then biases.
    """
    if model not in YOLO26_MODELS:
        raise ValueError(f"unknown YOLO26 model {model!r}; choose from {', '.join(YOLO26_MODELS)}")
    return list(_yolo26_specs(model))


@functools.cache
def _yolo26_specs(model: str) -> tuple[ParamSpec, ...]:
    text = resources.files("musgd.bench").joinpath(f"data/{model}_shapes.json").read_text()
    data = json.loads(text)
    return tuple(
        ParamSpec(f"{kind}.{i}", tuple(int(d) for d in shape))
        for kind in _YOLO26_KINDS
        for i, shape in enumerate(data[kind])
    )


PARAMETER_SETS: dict[str, Callable[[], list[ParamSpec]]] = {
    "nano": nano_detector_parameters,
    "transformer": transformer_parameters,
    "large": large_parameters,
    **{name: functools.partial(yolo26_parameters, name) for name in YOLO26_MODELS},
}


def make_parameters(
    specs: list[ParamSpec], *, device: torch.device | str, seed: int
) -> tuple[list[Tensor], list[Tensor]]:
    """Seeded float32 parameters and gradients of the given shapes (drawn on CPU, then moved)."""
    generator = torch.Generator().manual_seed(seed)
    params: list[Tensor] = []
    grads: list[Tensor] = []
    for spec in specs:
        fan_in = math.prod(spec.shape[1:]) if len(spec.shape) > 1 else 1
        p = torch.randn(spec.shape, generator=generator) / math.sqrt(fan_in)
        g = torch.randn(spec.shape, generator=generator) * 1e-3
        params.append(p.to(device))
        grads.append(g.to(device))
    return params, grads
