"""A loss of static shapes, its forward and backward replayed from CUDA graphs.

:class:`musgd._yolo_loss.DeviceE2ELoss` computes YOLO26's detection loss with no host read, on
tensors whose shapes are fixed per batch geometry and target bucket; that is what a CUDA graph
needs. :class:`LossCapture` records it as the network capture records the network
(:mod:`musgd._network_capture`): one graph for the forward (the network's outputs, the padded
targets and the head weights in; the gain-scaled loss vector and its items out), one for the
backward (the loss vector's gradient in; the gradients of the network's outputs out), inside
one autograd node, so that the trainer's ``loss.backward()`` replays the loss's backward and
then the network's. The loss's hundreds of small kernels cost one launch each way.

* a key (the inputs' shapes, strides and dtypes, the device and the autocast setting) is
  recorded at its second call: the first runs eagerly, as the network's does;
* the loss has no state to restore (no BatchNorm), so the warm-up passes are free to run it;
* evaluation-time calls (``no_grad``), a surrounding capture, ``torch.compile`` and a device the
  grapher does not support run eagerly, counted by reason; a failed recording warns once and
  leaves its key eager;
* the recording's gradients live in its memory and the next replay overwrites them: they are
  handed on at once (the network's backward copies them into its own buffers).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any, Protocol, cast

import torch
from torch import Tensor

from musgd._replay import (
    GRAPHS,
    STREAMS,
    RecordingCache,
    ReplayStats,
    capture,
    give_back_cached_blocks,
    on_side_stream,
)

__all__ = ["CudaLossGrapher", "LossCapture", "LossFunction", "LossGrapher", "LossRecording"]

# A loss of tensors: (loss vector, detached items).
LossFunction = Callable[..., tuple[Tensor, Tensor]]
# Keys recorded at once (a full batch and a short last one, each in a bucket or two).
RECORDINGS_BOUND = 6
WARMUP_PASSES = 3


class LossRecording(Protocol):
    """A recorded loss: the forward on copies of the inputs, the backward from a gradient."""

    def replay_forward(self, inputs: Sequence[Tensor]) -> tuple[Tensor, Tensor]: ...

    def replay_backward(self, grad: Tensor | None) -> tuple[Tensor | None, ...]: ...


class LossGrapher(Protocol):
    """Makes :class:`LossRecording` objects for one kind of device."""

    def supports(self, device: torch.device) -> bool: ...

    def record(
        self, fn: LossFunction, inputs: Sequence[Tensor], wants_grad: Sequence[bool]
    ) -> LossRecording: ...


class _CudaLossRecording:
    """``fn`` on static copies of its inputs (leaves where ``wants_grad``), as two CUDA graphs."""

    def __init__(
        self, fn: LossFunction, inputs: Sequence[Tensor], wants_grad: Sequence[bool]
    ) -> None:
        pairs = zip(inputs, wants_grad, strict=True)
        self.static = [x.detach().clone().requires_grad_(w) for x, w in pairs]
        self.leaves = [x for x, w in zip(self.static, wants_grad, strict=True) if w]
        self.wants_grad = tuple(wants_grad)
        device = inputs[0].device
        with torch.cuda.device(device):
            current = torch.cuda.current_stream()
            side = STREAMS.side_stream(torch.cuda.current_device())
            torch.cuda.synchronize()
            with on_side_stream(side, current):
                for _ in range(WARMUP_PASSES):
                    torch.clear_autocast_cache()
                    total, _ = fn(*self.static)
                    torch.autograd.grad(total, self.leaves, torch.ones_like(total))
                    del total
            torch.clear_autocast_cache()
            give_back_cached_blocks()  # the warm-up's blocks, cached for the side stream
            pool = torch.cuda.graph_pool_handle()
            self._forward, self._backward = GRAPHS.graph(), GRAPHS.graph()
            try:
                total, items = capture(self._forward, lambda: fn(*self.static), side, pool)
            finally:
                torch.clear_autocast_cache()
            self.grad_total = torch.empty_like(total)
            self.grads = capture(
                self._backward,
                lambda: torch.autograd.grad(total, self.leaves, self.grad_total),
                side,
                pool,
            )
            self.total, self.items = total.detach(), items.detach()

    def replay_forward(self, inputs: Sequence[Tensor]) -> tuple[Tensor, Tensor]:
        for static, x in zip(self.static, inputs, strict=True):
            if static.data_ptr() != x.data_ptr():
                static.detach().copy_(x)
        self._forward.replay()
        return self.total.detach(), self.items.detach()

    def replay_backward(self, grad: Tensor | None) -> tuple[Tensor | None, ...]:
        if grad is None:
            self.grad_total.zero_()
        else:
            self.grad_total.copy_(grad)
        self._backward.replay()
        return tuple(g.detach() for g in self.grads)


class CudaLossGrapher:
    """Records a loss with CUDA graphs."""

    def supports(self, device: torch.device) -> bool:
        return device.type == "cuda"

    def record(
        self, fn: LossFunction, inputs: Sequence[Tensor], wants_grad: Sequence[bool]
    ) -> LossRecording:
        return _CudaLossRecording(fn, inputs, wants_grad)


class _LossReplay(torch.autograd.Function):
    """One autograd node for a replayed loss."""

    @staticmethod
    def forward(  # type: ignore[override,unused-ignore]
        ctx: Any, recording: LossRecording, wants_grad: tuple[bool, ...], *inputs: Tensor
    ) -> tuple[Tensor, Tensor]:
        ctx.recording, ctx.wants_grad = recording, wants_grad
        ctx.set_materialize_grads(False)
        total, items = recording.replay_forward(inputs)
        ctx.mark_non_differentiable(items)
        return total, items

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, grad: Tensor | None, _items: Tensor | None) -> tuple[Tensor | None, ...]:
        grads = iter(ctx.recording.replay_backward(grad))
        return (None, None, *(next(grads) if w else None for w in ctx.wants_grad))


def _key(inputs: Sequence[Tensor]) -> Hashable:
    device = inputs[0].device
    enabled = torch.is_autocast_enabled(device.type)
    autocast = (enabled, torch.get_autocast_dtype(device.type) if enabled else None)
    shapes = tuple((tuple(x.shape), x.stride(), x.dtype, x.requires_grad) for x in inputs)
    return (shapes, device, autocast)


class LossCapture:
    """Runs a loss of tensors from recordings; ``stats`` counts recordings, replays, failures
    and eager calls by reason."""

    def __init__(self, grapher: LossGrapher | None = None) -> None:
        self.grapher: LossGrapher = CudaLossGrapher() if grapher is None else grapher
        self.stats = ReplayStats()
        self._cache: RecordingCache[LossRecording] = RecordingCache(lambda: RECORDINGS_BOUND)
        self._seen: set[Hashable] = set()

    def release(self) -> None:
        """Drop every recording (a later call records anew)."""
        self._cache.clear()

    def _fallback(self, device: torch.device) -> str | None:
        if not torch.is_grad_enabled():
            return "no-grad"
        if not self.grapher.supports(device):
            return f"device:{device.type}"
        if torch.compiler.is_compiling():
            return "compile"
        if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
            return "capture"
        return None

    def __call__(self, fn: LossFunction, inputs: Sequence[Tensor]) -> tuple[Tensor, Tensor]:
        """``fn(*inputs)``, from a recording where one stands for it; gradients flow to the
        inputs that require them."""
        reason = self._fallback(inputs[0].device)
        if reason is not None:
            self.stats.fallbacks[reason] += 1
            return fn(*inputs)
        key = _key(inputs)
        entry = self._cache.get(key)
        if entry is None:
            entry = self._record(key, fn, inputs)
            if entry is None:
                return fn(*inputs)
        self.stats.replays += 1
        wants = tuple(x.requires_grad for x in inputs)
        out = _LossReplay.apply(entry, wants, *inputs)  # type: ignore[no-untyped-call,unused-ignore]
        return cast(tuple[Tensor, Tensor], out)

    def _record(
        self, key: Hashable, fn: LossFunction, inputs: Sequence[Tensor]
    ) -> LossRecording | None:
        refused = self._cache.admits(key)
        if refused is not None:
            self.stats.fallbacks[refused] += 1
            return None
        if key not in self._seen:  # a key's first call runs eagerly: it may be a one-off
            self._seen.add(key)
            self.stats.fallbacks["first-call"] += 1
            return None
        try:
            entry = self.grapher.record(fn, inputs, [x.requires_grad for x in inputs])
        except Exception as exc:  # any failure: this key stays eager
            what, after = "LossCapture: recording the loss", "that batch shape runs eagerly"
            self._cache.refuse_failed(key, exc, self.stats, what, after)
            return None
        self._cache.publish(key, entry)
        self.stats.recordings += 1
        return entry
