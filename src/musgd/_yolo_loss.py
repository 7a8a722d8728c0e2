"""YOLO26's end-to-end detection loss on the device: static shapes, no host read.

Ultralytics 8.4 trains YOLO26 detection with two heads on one network, a one-to-many head and a
one-to-one head (R380), each scored by a detection loss, the total weighted ``o2m * L_many +
o2o * L_one`` with weights its criterion moves over the epochs (R377). Its loss reads the
device about 30 times an iteration (WP-024). This module computes the same loss from the published
descriptions (R378: task-aligned assignment; R379: CIoU), written anew; its observed behaviour
was matched against the installed package as a black box, attribute by attribute and method by
method, and is checked against it in ``tests/ultralytics``. For one head, given the anchor
points ``p`` (cell centres of every stride level, in grid units) and per image ``M`` target
slots (the batch padded to a bucket, a validity mask beside them):

* **candidates**: an anchor is a candidate of a target when its centre (``p * stride``, pixels)
  lies inside the target's box, a box side under ``stride_val`` (16) pixels widened to it about
  the centre first (the assigner's small-target rule);
* **alignment**: ``t = s**alpha * iou**beta`` (``alpha`` 0.5, ``beta`` 6) over candidates, ``s``
  the sigmoid score of the target's class and ``iou`` the CIoU of the target with the predicted
  box (pixels), clamped at 0; 0 elsewhere;
* **assignment**: each valid target's ``topk`` anchors by ``t`` (ties as ``torch.topk`` breaks
  them), those that are candidates kept; an anchor claimed by several targets kept by the one
  of largest ``iou``; then each target's ``topk2`` best kept anchors by ``t``;
* **soft labels**: an assigned anchor's class target is ``t * max_iou / (max_t + eps)`` with the
  maxima over the target's assigned anchors, 0 elsewhere; ``S`` their sum, at least 1;
* **losses**: ``cls = sum BCE(logits, labels) / S``; ``box = sum w (1 - CIoU(pred, target)) /
  S`` and ``l1 = sum w mean_4(|d - d*| * stride / (w, h, w, h)) / S`` over assigned anchors,
  ``w`` an anchor's label sum, ``d`` and ``d*`` the predicted and target (left, top, right,
  bottom) distances in grid units; the three times the gains ``box``, ``cls`` and ``dfl`` of the
  trainer's settings (7.5, 0.5, 1.5), and the whole times the batch size.

Everything is a dense tensor of the batch's static shape: masks are multiplied or selected with
``torch.where``, never used to index, and nothing is read back, so the loss runs ahead of the
device and can be recorded in a CUDA graph. The targets come padded from the host
(:func:`padded_targets`, before the batch is copied to the device).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = [
    "BUCKET_MIN",
    "DeviceE2ELoss",
    "HeadSettings",
    "HostItems",
    "ciou",
    "device_loss_reason",
    "head_loss",
    "padded_targets",
]

# The smallest target bucket: a batch's targets are padded per image to the power of two at or
# above its largest count, and never to fewer than this (a few recordings cover a whole run).
BUCKET_MIN = 8
# Key of the padded targets in the trainer's batch dict (beside Ultralytics' own keys).
TARGETS_KEY = "musgd_targets"
VALID_KEY = "musgd_valid"


def ciou(b1: Tensor, b2: Tensor, eps: float = 1e-7) -> Tensor:
    """Complete IoU of (x1, y1, x2, y2) boxes, broadcast (Zheng et al., R379): the IoU less the
    centre distance over the enclosing diagonal and the aspect-ratio term ``alpha * v``, with
    ``alpha`` a constant of the gradient."""
    x1, y1, x2, y2 = b1.unbind(-1)
    u1, v1, u2, v2 = b2.unbind(-1)
    w1, h1 = x2 - x1, y2 - y1 + eps
    w2, h2 = u2 - u1, v2 - v1 + eps
    inter = (torch.minimum(x2, u2) - torch.maximum(x1, u1)).clamp(0) * (
        torch.minimum(y2, v2) - torch.maximum(y1, v1)
    ).clamp(0)
    iou = inter / (w1 * h1 + w2 * h2 - inter + eps)
    cw = torch.maximum(x2, u2) - torch.minimum(x1, u1)
    ch = torch.maximum(y2, v2) - torch.minimum(y1, v1)
    c2 = cw.pow(2) + ch.pow(2) + eps
    rho2 = ((u1 + u2 - x1 - x2).pow(2) + (v1 + v2 - y1 - y2).pow(2)) / 4
    v = (4 / math.pi**2) * (torch.atan(w2 / h2) - torch.atan(w1 / h1)).pow(2)
    with torch.no_grad():
        alpha = v / (v - iou + (1 + eps))
    return iou - (rho2 / c2 + v * alpha)


class HeadSettings:
    """One head's assignment settings (read off the stock criterion's assigner)."""

    def __init__(
        self,
        *,
        topk: int,
        topk2: int,
        alpha: float,
        beta: float,
        eps: float,
        stride_val: float,
    ) -> None:
        self.topk, self.topk2 = topk, topk2
        self.alpha, self.beta, self.eps, self.stride_val = alpha, beta, eps, stride_val


def _candidates(points: Tensor, boxes: Tensor, valid: Tensor, settings: HeadSettings) -> Tensor:
    """(B, M, A) bool: anchor centres inside each valid target's box, small sides widened."""
    centre = (boxes[..., :2] + boxes[..., 2:]) / 2
    side = boxes[..., 2:] - boxes[..., :2]
    small = (side < settings.stride_val) & valid[..., None]
    side = torch.where(small, torch.full_like(side, settings.stride_val), side)
    grown = torch.cat((centre - side / 2, centre + side / 2), -1)
    lt = points[None, None] - grown[:, :, None, :2]
    rb = grown[:, :, None, 2:] - points[None, None]
    return torch.cat((lt, rb), -1).amin(-1) > settings.eps


def _assign(
    scores: Tensor,
    boxes: Tensor,
    points: Tensor,
    labels: Tensor,
    targets: Tensor,
    valid: Tensor,
    settings: HeadSettings,
) -> tuple[Tensor, Tensor, Tensor]:
    """Targets per anchor: boxes (B, A, 4), soft labels (B, A, C) and the foreground (B, A)."""
    b, a, c = scores.shape
    m = targets.shape[1]
    inside = _candidates(points, targets, valid, settings) & valid[..., None]
    zero = scores.new_zeros(())
    iou = torch.where(inside, ciou(targets[:, :, None], boxes[:, None]).clamp(0), zero)
    score = scores.gather(2, labels[:, None, :].expand(b, a, m)).transpose(1, 2)
    align = torch.where(inside, score, zero).pow(settings.alpha) * iou.pow(settings.beta)
    top = align.topk(settings.topk, dim=-1).indices
    chosen = torch.zeros_like(align).scatter_(-1, top, 1.0) * inside
    claimed = chosen.sum(1, keepdim=True) > 1
    best = iou.argmax(1, keepdim=True) == torch.arange(m, device=iou.device)[None, :, None]
    chosen = torch.where(claimed, best.to(chosen.dtype), chosen)
    if settings.topk2 != settings.topk:
        second = (align * chosen).topk(settings.topk2, dim=-1).indices
        chosen = chosen * torch.zeros_like(chosen).scatter_(-1, second, 1.0)
    fg = chosen.sum(1) > 0
    index = chosen.argmax(1)
    label = labels.gather(1, index)
    box = targets.gather(1, index[..., None].expand(-1, -1, 4))
    classes = torch.arange(c, device=scores.device)
    onehot = ((label[..., None] == classes) & fg[..., None]).to(scores.dtype)
    align = align * chosen
    best_align = align.amax(-1, keepdim=True)
    best_iou = (iou * chosen).amax(-1, keepdim=True)
    norm = (align * best_iou / (best_align + settings.eps)).amax(-2)[..., None]
    return box, onehot * norm, fg


class _Grid:
    """A head's anchor points, strides and image scale for one feature-map geometry (made once
    per geometry, so that steady-state calls make no tensor from host data)."""

    def __init__(
        self, feats: Sequence[Tensor], strides: Sequence[float], dtype: torch.dtype
    ) -> None:
        device = feats[0].device
        points, stride = [], []
        for f, s in zip(feats, strides, strict=True):
            h, w = f.shape[2], f.shape[3]
            ys = torch.arange(h, device=device, dtype=dtype) + 0.5
            xs = torch.arange(w, device=device, dtype=dtype) + 0.5
            yy, xx = torch.meshgrid(ys, xs, indexing="ij")
            points.append(torch.stack((xx, yy), -1).view(-1, 2))
            stride.append(torch.full((h * w, 1), float(s), device=device, dtype=dtype))
        self.points = torch.cat(points)
        self.stride = torch.cat(stride)
        height = feats[0].shape[2] * float(strides[0])
        width = feats[0].shape[3] * float(strides[0])
        self.whwh = torch.tensor([width, height, width, height], device=device, dtype=dtype)


def head_loss(
    boxes: Tensor,
    scores: Tensor,
    targets: Tensor,
    valid: Tensor,
    grid: _Grid,
    settings: HeadSettings,
    gains: tuple[float, float, float],
) -> Tensor:
    """The gain-scaled (box, cls, l1) of one head's outputs (``boxes`` (B, 4, A) distances in
    grid units, ``scores`` (B, C, A) logits); ``targets`` (B, M, 5) (class, x, y, w, h of the
    image, normalised) with ``valid`` (B, M). Computed in float32 whatever the outputs' dtype
    (under autocast a network's last convolutions give float16, where CIoU's ``eps`` of 1e-7
    rounds away); the gradients go back in the outputs' dtype."""
    dist = boxes.permute(0, 2, 1).float().contiguous()
    logits = scores.permute(0, 2, 1).float().contiguous()
    dtype = logits.dtype
    points, stride, whwh = grid.points, grid.stride, grid.whwh
    pred = torch.cat((points - dist[..., :2], points + dist[..., 2:]), -1)
    targets = targets.to(dtype)
    xywh = targets[..., 1:5] * whwh
    boxes = torch.cat((xywh[..., :2] - xywh[..., 2:] / 2, xywh[..., :2] + xywh[..., 2:] / 2), -1)
    boxes = boxes * valid[..., None].to(boxes.dtype)
    labels = targets[..., 0].long()
    assigned, soft, fg = _assign(
        logits.detach().sigmoid(),
        (pred.detach() * stride).to(boxes.dtype),
        points * stride,
        labels,
        boxes,
        valid,
        settings,
    )
    total = soft.sum().clamp(min=1)
    cls = F.binary_cross_entropy_with_logits(logits, soft.to(dtype), reduction="none").sum() / total
    assigned = assigned / stride
    weight = soft.sum(-1) * fg
    iou_loss = ((1.0 - ciou(pred, assigned)) * weight).sum() / total
    aim = torch.cat((points - assigned[..., :2], assigned[..., 2:] - points), -1)
    l1 = ((dist - aim).abs() * stride / whwh).mean(-1)
    l1_loss = (l1 * weight).sum() / total
    return torch.stack((iou_loss * gains[0], cls * gains[1], l1_loss * gains[2]))


def padded_targets(
    batch_idx: Tensor, cls: Tensor, bboxes: Tensor, batch_size: int, bucket_min: int = BUCKET_MIN
) -> tuple[Tensor, Tensor]:
    """The batch's targets as (B, M, 5) rows (class, x, y, w, h) and a (B, M) validity mask,
    ``M`` the power of two at or above the largest count per image (at least ``bucket_min``).

    Run on the host tensors the loader made (before the batch goes to the device): the counts
    are host values there, so the device is never asked for them."""
    index = batch_idx.reshape(-1).long()
    n = index.numel()
    counts = torch.bincount(index, minlength=batch_size) if n else torch.zeros(batch_size)
    most = int(counts.max()) if batch_size else 0
    slots = max(bucket_min, 1 << max(most - 1, 0).bit_length())
    rows = torch.zeros(batch_size, slots, 5, dtype=bboxes.dtype)
    valid = torch.zeros(batch_size, slots, dtype=torch.bool)
    if n:
        order = torch.argsort(index, stable=True)
        index = index[order]
        start = torch.cumsum(counts, 0) - counts
        slot = torch.arange(n) - start[index]
        rows[index, slot, 0] = cls.reshape(-1)[order].to(bboxes.dtype)
        rows[index, slot, 1:] = bboxes.reshape(-1, 4)[order]
        valid[index, slot] = True
    return rows, valid


def device_loss_reason(criterion: object) -> str | None:
    """Why ``criterion`` (a model's stock criterion) cannot be computed here, or None.

    Covered: YOLO26 detection's end-to-end criterion -- two detection heads, one box per anchor
    (``reg_max`` 1: the L1 term), no class weights."""
    heads = [getattr(criterion, name, None) for name in ("one2many", "one2one")]
    if not all(hasattr(criterion, w) for w in ("o2m", "o2o")) or None in heads:
        return f"the loss is {type(criterion).__name__}, not YOLO26's end-to-end detection loss"
    for head in heads:
        kind = type(head).__name__
        if kind != "v8DetectionLoss":
            return f"a head's loss is {kind} (segment, pose and obb losses stay eager)"
        if getattr(head, "reg_max", None) != 1:
            return "the boxes are distributions (reg_max > 1): the DFL loss stays eager"
        if getattr(head, "class_weights", None) is not None:
            return "class weights are set: that loss stays eager"
        assigner = getattr(head, "assigner", None)
        if assigner is None or not all(
            hasattr(assigner, k) for k in ("topk", "topk2", "alpha", "beta", "eps", "stride_val")
        ):
            return "the assigner is not the task-aligned assigner this loss implements"
    return None


def _settings(head: Any) -> HeadSettings:
    a = head.assigner
    return HeadSettings(
        topk=int(a.topk),
        topk2=int(a.topk2),
        alpha=float(a.alpha),
        beta=float(a.beta),
        eps=float(a.eps),
        stride_val=float(a.stride_val),
    )


class HostItems:
    """The loss items on the host without waiting for the device: each call copies the device
    items into one of ``slots`` pinned buffers (non-blocking, an event recorded behind it) and
    answers the newest buffer whose copy has completed -- the items of an iteration the device
    has finished, usually the one or two before the host's. Only the very first call waits.

    The trainer formats its progress line from the items every iteration; read from the device
    that is a host synchronization each (three an iteration for YOLO26's three terms).
    ``event`` makes the completion markers (CUDA events; a stand-in in tests).
    """

    def __init__(self, slots: int = 4, event: Callable[[], Any] | None = None) -> None:
        if slots < 2:
            raise ValueError(f"HostItems needs 2 or more slots, got {slots}")
        self.slots = slots
        self._event: Callable[[], Any] = event or torch.cuda.Event
        self._buffers: list[Tensor] = []
        self._events: list[Any] = []
        self._sequence: list[int] = []  # per slot, the call number its copy belongs to
        self._calls = 0
        self._answer: Tensor | None = None
        self._answered = -1

    def push(self, items: Tensor) -> Tensor:
        """Queue the copy of ``items`` (a device vector) and answer the newest completed one
        (a host tensor of its own)."""
        if not self._buffers:
            pin = items.device.type == "cuda"
            self._buffers = [
                torch.empty(items.shape, dtype=items.dtype, pin_memory=pin)
                for _ in range(self.slots)
            ]
            self._events = [self._event() for _ in range(self.slots)]
            self._sequence = [-1] * self.slots
        slot = self._calls % self.slots
        self._buffers[slot].copy_(items.detach(), non_blocking=True)
        self._events[slot].record()
        self._sequence[slot] = self._calls
        self._calls += 1
        done = [i for i in range(self.slots) if self._sequence[i] >= 0 and self._events[i].query()]
        if done:
            newest = max(done, key=lambda i: self._sequence[i])
            if self._sequence[newest] > self._answered:
                self._answer = self._buffers[newest].clone()
                self._answered = self._sequence[newest]
        if self._answer is None:  # the first call: nothing has completed yet, so wait once
            self._events[slot].synchronize()
            self._answer = self._buffers[slot].clone()
            self._answered = self._sequence[slot]
        return self._answer


class DeviceE2ELoss:
    """A model's ``criterion``: the stock end-to-end criterion's loss computed on the device.

    ``stock`` keeps its state (its head weights, which its ``update`` moves; its settings):
    every attribute this class does not define is the stock criterion's, so the trainer's calls
    reach it. A batch without the padded targets (a caller that is not the trainer's
    ``preprocess_batch``) is passed to the stock criterion.

    With ``host_items`` the items it returns for a CUDA batch are host tensors, the newest the
    device has finished (:class:`HostItems`), so that the trainer's progress line reads no
    device value; the loss itself (the first result, which the trainer differentiates) is
    this iteration's. ``device_items`` keeps this iteration's items on the device.
    """

    def __init__(self, stock: Any, *, host_items: bool = False) -> None:
        reason = device_loss_reason(stock)
        if reason is not None:
            raise TypeError(f"DeviceE2ELoss: {reason}")
        self.__dict__["stock"] = stock
        many, one = stock.one2many, stock.one2one
        self.__dict__["heads"] = (("one2many", _settings(many)), ("one2one", _settings(one)))
        hyp = many.hyp
        self.__dict__["gains"] = (float(hyp.box), float(hyp.cls), float(hyp.dfl))
        self.__dict__["strides"] = tuple(float(s) for s in many.stride.tolist())
        self.__dict__["names"] = tuple(many.loss_names)
        self.__dict__["_grids"] = {}
        self.__dict__["_held"] = None
        self.__dict__["calls"] = 0
        # A musgd._loss_capture.LossCapture where the trainer records the loss (CUDA).
        self.__dict__["capture"] = None
        # The last call's items on the device; with host_items (the trainer's) the call
        # answers the newest items the device has finished instead (HostItems).
        self.__dict__["device_items"] = None
        self.__dict__["host_items"] = HostItems() if host_items else None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["stock"], name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self.__dict__["stock"], name, value)

    def _grid(self, feats: Sequence[Tensor], dtype: torch.dtype) -> _Grid:
        key = (tuple(tuple(f.shape[2:]) for f in feats), feats[0].device, dtype)
        grid: _Grid | None = self._grids.get(key)
        if grid is None:
            grid = self._grids[key] = _Grid(feats, self.strides, dtype)
        return grid

    def _weights(self, device: torch.device) -> Tensor:
        """The stock criterion's head weights as a device tensor, made anew only when they
        change (the trainer moves them once an epoch), from pinned memory on CUDA: a copy
        from pageable memory would wait for the device."""
        now = (float(self.stock.o2m), float(self.stock.o2o))
        held: tuple[tuple[float, float], Tensor] | None = self._held
        if held is None or held[0] != now or held[1].device != device:
            host = torch.tensor(now)
            if device.type == "cuda":
                # The host allocator keeps the pinned block until the copy has run.
                host = host.pin_memory()
            weights = host.to(device, non_blocking=True)
            held = self.__dict__["_held"] = (now, weights)
        return held[1]

    def _loss(
        self,
        grids: tuple[_Grid, _Grid],
        *tensors: Tensor,
    ) -> tuple[Tensor, Tensor]:
        """The loss vector (the batch size times both heads' gain-scaled terms, weighted) and
        the one-to-one head's items, of (many boxes, many scores, one boxes, one scores,
        targets, valid, weights)."""
        many_boxes, many_scores, one_boxes, one_scores, targets, valid, weights = tensors
        (_, many), (_, one) = self.heads
        part_many = head_loss(many_boxes, many_scores, targets, valid, grids[0], many, self.gains)
        part_one = head_loss(one_boxes, one_scores, targets, valid, grids[1], one, self.gains)
        total = (part_many * weights[0] + part_one * weights[1]) * targets.shape[0]
        return total, part_one.detach()

    def __call__(self, preds: Any, batch: Mapping[str, Any]) -> tuple[Tensor, dict[str, Tensor]]:
        targets, valid = batch.get(TARGETS_KEY), batch.get(VALID_KEY)
        if not isinstance(targets, Tensor) or not isinstance(valid, Tensor):
            return self.stock(preds, batch)  # type: ignore[no-any-return]
        if isinstance(preds, tuple):  # (inference, train outputs) in some call paths
            preds = preds[1]
        many, one = (preds[name] for name, _ in self.heads)
        grids = (
            self._grid(many["feats"], many["scores"].dtype),
            self._grid(one["feats"], one["scores"].dtype),
        )
        inputs = (
            many["boxes"],
            many["scores"],
            one["boxes"],
            one["scores"],
            targets,
            valid,
            self._weights(targets.device),
        )
        run = functools.partial(self._loss, grids)
        total, items = run(*inputs) if self.capture is None else self.capture(run, inputs)
        self.__dict__["calls"] += 1
        self.__dict__["device_items"] = items
        if self.host_items is not None and items.device.type == "cuda":
            items = self.host_items.push(items)
        return total, dict(zip(self.names, items.unbind(0), strict=True))
