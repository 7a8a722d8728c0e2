"""Gradient-norm clipping replayed from one recording: ``clip_grad_norm_`` without its host cost.

``torch.nn.utils.clip_grad_norm_`` launches a handful of kernels, but on a model of a few
hundred parameters its host work (a norm per gradient moved to one device and stacked, the
clip coefficient, the scaling) took 3.1 to 4.5 ms of an Ultralytics training iteration on an
H200 host, more than the optimizer's step itself (a profile, WP-011). :class:`GradClipReplay`
records the very same call once, over static copies of the gradients, and from then on copies
the fresh gradients in, replays, and copies the clipped values back into the same gradient
tensors: the kernels, their inputs and their order are the eager call's, so the bits are too.

Anything the recording cannot stand for runs the eager call instead, counted by reason in
``stats.fallbacks``: a device the recorder does not support, a surrounding capture or
``torch.compile``, gradients that are sparse, need grad, or span devices.

:meth:`GradClipReplay.unscale_and_clip` is a mixed-precision trainer's two calls,
``scaler.unscale_(optimizer)`` and the clip, for gradients that stay at the same addresses
from one step to the next (a captured network's): one recording over the gradients' own memory
runs both, so neither the scaler's walk over the optimizer's parameters nor the copies in and
out run on the host, and no static copy of the gradients is kept.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor
from torch.amp.grad_scaler import GradScaler, OptState

from musgd._identity import SameTensors
from musgd._replay import (
    CudaGraphRecorder,
    Recorder,
    Recording,
    RecordingCache,
    ReplayStats,
    context_fallback,
    environment_key,
)

__all__ = ["EagerUnscale", "GradClipReplay"]

# Gradient layouts kept recorded at once: a model whose set of gradients keeps changing (layers
# frozen and thawed) runs eagerly past this many instead of recording without end.
RECORDINGS_BOUND = 4


@dataclass(frozen=True)
class _ClipEntry:
    """A recorded clip: the static gradients it reads and scales, and its total norm."""

    grads: list[Tensor]
    total: Tensor
    recording: Recording


@dataclass(frozen=True)
class _InPlaceEntry:
    """A recorded unscale and clip over the gradients' own memory: the scaler's found-inf flag
    it writes and the total norm."""

    found_inf: Tensor
    total: Tensor
    recording: Recording


def _addresses(grads: list[Tensor]) -> tuple[int, ...] | None:
    """Each gradient's memory address, or None where one has no plain storage (sparse).

    The addresses alone key an in-place recording: a gradient has its parameter's shape and
    dtype (``.grad`` refuses any other), so the same number of gradients at the same addresses
    is the same memory in the same extents; only a view of other strides on the same memory,
    which no trainer hands over, would escape the key. Reading each gradient's shape and
    strides too cost 0.25 ms a call for YOLO26n's 366 on a CPU host, the addresses 0.02 ms."""
    try:
        return tuple([g.data_ptr() for g in grads])
    except RuntimeError:  # a sparse tensor has no data pointer
        return None


def _scaler_fallback(scaler: GradScaler, optimizer: object) -> str | None:
    """Why ``scaler.unscale_(optimizer)`` must run as the scaler runs it, or None when a
    recording can stand for it: an enabled ``torch.amp.GradScaler`` whose unscale is the
    stock one, with its scale made, that has not unscaled this optimizer since its update."""
    if not scaler.is_enabled():
        return "scaler-off"
    kind = type(scaler)
    if kind.unscale_ is not GradScaler.unscale_ or kind._unscale_grads_ is not (
        GradScaler._unscale_grads_
    ):
        return "scaler-own-unscale"
    scale = getattr(scaler, "_scale", None)
    states = getattr(scaler, "_per_optimizer_states", None)
    if not isinstance(scale, Tensor) or states is None:
        return "scaler-not-ready"
    if states[id(optimizer)]["stage"] is not OptState.READY:
        return "scaler-stage"  # its own unscale_ says what is wrong
    return None


def _positive_number(name: str, value: object, *, allow_inf: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"GradClipReplay: {name} must be a number, got {value!r}")
    number = float(value)
    if math.isnan(number) or number <= 0 or (math.isinf(number) and not allow_inf):
        allowed = "a positive number or inf" if allow_inf else "a positive finite number"
        raise ValueError(f"GradClipReplay: {name} must be {allowed}, got {value!r}")
    return number


def _tensors(parameters: object) -> list[Tensor]:
    """``parameters`` (a tensor or an iterable of tensors) as a list, or a TypeError saying so."""
    if isinstance(parameters, Tensor):
        return [parameters]
    if isinstance(parameters, str | bytes) or not isinstance(parameters, Iterable):
        raise TypeError(
            "GradClipReplay: call it with a tensor or an iterable of tensors (such as "
            f"model.parameters()), got {type(parameters).__name__}"
        )
    params = list(parameters)
    for i, p in enumerate(params):
        if not isinstance(p, Tensor):
            raise TypeError(
                f"GradClipReplay: item {i} of the parameters is not a tensor (it is of type "
                f"{type(p).__name__}); pass the model's parameters (model.parameters())"
            )
    return params


def _grad_fallback(grads: list[Tensor]) -> str | None:
    """Why these gradients must be clipped eagerly, or None when a recording can serve."""
    if not grads:
        return "no-gradients"
    device = grads[0].device
    for g in grads:
        if g.is_sparse:
            return "sparse"
        if g.requires_grad:
            return "requires-grad"
        if g.device != device:
            return "mixed-devices"
    return None


def _describe(grads: list[Tensor]) -> tuple[str | None, Hashable]:
    """Why these gradients must be clipped eagerly (None where a recording can serve), and
    their layouts, the recording's key."""
    return _grad_fallback(grads), tuple((g.shape, g.stride(), g.dtype) for g in grads)


class EagerUnscale:
    """``scaler.unscale_(optimizer)`` as one multi-tensor call over a gradient list kept while
    the gradients are the same objects (a captured network's are, every iteration).

    The scaler's own ``unscale_`` walks the optimizer's parameters in Python each call, sorting
    the gradients by device and dtype (about 1 ms for YOLO26's 366 on a CPU host). Where every
    gradient is a dense float32 tensor on the scale's device, there is one list, and this runs
    what the scaler runs on it: the reciprocal of the scale taken in float64, one
    ``torch._amp_foreach_non_finite_check_and_unscale_`` into a fresh found-inf flag, and the
    scaler's record that this optimizer is unscaled with that flag, which its ``step`` and
    ``update`` read as their own. The same kernels on the same values: the same bits. Anything
    else (a scaler that is off, of another kind or already unscaled this optimizer; half,
    sparse or mixed-device gradients; none at all) is the scaler's own call, so its own checks
    and messages stand.
    """

    def __init__(self) -> None:
        self._plain: SameTensors[bool] = SameTensors()

    def __call__(self, scaler: GradScaler, optimizer: torch.optim.Optimizer) -> None:
        """Unscale ``optimizer``'s gradients as ``scaler.unscale_(optimizer)`` does."""
        if _scaler_fallback(scaler, optimizer) is not None:
            scaler.unscale_(optimizer)
            return
        scale = scaler._scale
        assert scale is not None  # _scaler_fallback refused a scaler without its scale made
        device = scale.device
        grads = [p.grad for g in optimizer.param_groups for p in g["params"] if p.grad is not None]
        if not grads or not self._plain.get(grads, lambda: _plain_float32(grads, device)):
            scaler.unscale_(optimizer)
            return
        inv_scale = scale.double().reciprocal().float()
        found_inf = torch.full((), 0.0, dtype=torch.float32, device=device)
        torch._amp_foreach_non_finite_check_and_unscale_(grads, found_inf, inv_scale)
        state = scaler._per_optimizer_states[id(optimizer)]
        state["found_inf_per_device"] = {device: found_inf}
        state["stage"] = OptState.UNSCALED


def _plain_float32(grads: list[Tensor], device: torch.device) -> bool:
    """Whether every gradient is a dense float32 tensor on ``device`` (the scaler's one list)."""
    return all(
        g.dtype == torch.float32 and g.layout == torch.strided and g.device == device for g in grads
    )


class GradClipReplay:
    """``torch.nn.utils.clip_grad_norm_(parameters, max_norm, norm_type)``, replayed.

    Call it where the eager function would be called, with the same parameters; it scales their
    ``.grad`` tensors in place and returns the total norm, exactly as the eager call does. The
    first call with a given set of gradient layouts runs eagerly; the second records the call
    over static gradients (one more eager-equivalent pass) and every later one replays it.

    Each recording holds one copy of the gradients it was made for (at most
    ``RECORDINGS_BOUND`` layouts are recorded; further ones run eagerly).
    """

    def __init__(
        self,
        max_norm: float,
        norm_type: float = 2.0,
        *,
        recorder: Recorder | None = None,
    ) -> None:
        self.max_norm = _positive_number("max_norm", max_norm, allow_inf=False)
        self.norm_type = _positive_number("norm_type", norm_type, allow_inf=True)
        # One branch: a clip is a handful of kernels in one chain, nothing to run side by side.
        self.recorder: Recorder = CudaGraphRecorder(branches=1) if recorder is None else recorder
        self.stats = ReplayStats()
        self._cache: RecordingCache[_ClipEntry] = RecordingCache(lambda: RECORDINGS_BOUND)
        self._in_place: RecordingCache[_InPlaceEntry] = RecordingCache(lambda: RECORDINGS_BOUND)
        self._seen: Hashable | None = None
        self._seen_in_place: Hashable | None = None
        self._described: SameTensors[tuple[str | None, Hashable]] = SameTensors()

    def clear(self) -> None:
        """Drop every recording: each layout's next call runs eagerly, the one after records."""
        self._cache.clear()
        self._in_place.clear()
        self._seen = None
        self._seen_in_place = None

    def _eager(self, params: list[Tensor]) -> Tensor:
        return torch.nn.utils.clip_grad_norm_(params, self.max_norm, self.norm_type)

    def __call__(self, parameters: Tensor | Iterable[Tensor]) -> Tensor:
        params = _tensors(parameters)
        with_grad = [p for p in params if p.grad is not None]
        grads = [p.grad for p in with_grad if p.grad is not None]
        # The same gradient objects as the last call's (a captured network's): their check
        # and layouts are the last call's (musgd._identity).
        reason, layouts = self._described.get(grads, lambda: _describe(grads))
        device = grads[0].device if grads else None
        if reason is None and device is not None:
            reason = context_fallback(self.recorder, device)
        if reason is not None or device is None:
            self.stats.fallbacks[reason or "no-gradients"] += 1
            return self._eager(params)
        key = (layouts, device, environment_key(self.recorder, device))
        entry = self._cache.get(key)
        if entry is None:
            entry = self._record(key, with_grad, grads, device)
            if entry is None:
                return self._eager(params)
        torch._foreach_copy_(entry.grads, grads)
        entry.recording.replay()
        self.stats.replays += 1
        torch._foreach_copy_(grads, entry.grads)
        return entry.total.clone()

    def _record(
        self, key: Hashable, with_grad: list[Tensor], grads: list[Tensor], device: torch.device
    ) -> _ClipEntry | None:
        """The recording for ``key``, or None when this call must run eagerly."""
        refused = self._cache.admits(key)
        if refused is not None:
            self.stats.fallbacks[refused] += 1
            return None
        if self._seen != key:  # a layout's first call runs eagerly: it may be a one-off
            self._seen = key
            self.stats.fallbacks["first-call"] += 1
            return None
        static = [
            torch.empty_strided(g.shape, g.stride(), dtype=g.dtype, device=device) for g in grads
        ]
        torch._foreach_copy_(static, grads)

        def clip() -> tuple[Tensor, ...]:
            return (torch.nn.utils.clip_grad_norm_(with_grad, self.max_norm, self.norm_type),)

        # The recorded call reads and scales the static gradients: the parameters hold them as
        # their .grad while it is recorded, and get their own gradients back afterwards.
        try:
            for p, s in zip(with_grad, static, strict=True):
                p.grad = s
            recording = self.recorder.record(clip, device)
        except Exception as exc:  # a failed capture leaves these gradients to the eager call
            self._cache.refuse(key)
            self.stats.count_failure(exc)
            return None
        finally:
            for p, g in zip(with_grad, grads, strict=True):
                p.grad = g
        self.stats.recordings += 1
        entry = _ClipEntry(static, recording.outputs[0], recording)
        self._cache.publish(key, entry)
        return entry

    def unscale_and_clip(
        self, scaler: Any, optimizer: torch.optim.Optimizer, parameters: Tensor | Iterable[Tensor]
    ) -> Tensor:
        """``scaler.unscale_(optimizer)``, then ``self(parameters)``: the same kernels on the
        same values, so the same bits, in one recording over the gradients' own memory.

        For gradients that keep their addresses from one step to the next (a captured
        network's, which live in its recording's memory): the first call with a set of
        addresses runs the two calls as they are, the second records them (capturing only, so
        the gradients are unscaled once) and replays, and every later one replays, leaving the
        scaler as its ``unscale_`` would (this optimizer unscaled, its found-inf flag the
        recording's, which the scaler's ``step`` and ``update`` read as their own). Gradients at
        new addresses are recorded anew (up to ``RECORDINGS_BOUND`` sets). Where the recording
        cannot stand for the scaler (a scaler that is off, of another kind, or has unscaled
        this optimizer already, whose own ``unscale_`` then says so) or for the gradients (see
        the class), the two calls run as they are, counted by reason in ``stats.fallbacks``.
        """
        if not isinstance(scaler, GradScaler):
            raise TypeError(
                "GradClipReplay.unscale_and_clip: scaler must be a torch.amp.GradScaler (the one "
                f"that scaled the loss), got {type(scaler).__name__}"
            )
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError(
                "GradClipReplay.unscale_and_clip: optimizer must be the torch.optim.Optimizer "
                f"whose gradients the scaler unscales, got {type(optimizer).__name__}"
            )
        params = _tensors(parameters)
        reason = _scaler_fallback(scaler, optimizer)
        if reason is not None:
            if reason != "scaler-off":
                self.stats.fallbacks[reason] += 1
            scaler.unscale_(optimizer)
            return self(params)
        unscaled = [
            p.grad for g in optimizer.param_groups for p in g["params"] if p.grad is not None
        ]
        with_grad = [p for p in params if p.grad is not None]
        grads = [p.grad for p in with_grad if p.grad is not None]
        held, clipped = _addresses(unscaled), _addresses(grads)
        scale = scaler._scale
        assert scale is not None  # _scaler_fallback refused a scaler without its scale made
        device = scale.device
        key = (held, clipped, scale.data_ptr(), environment_key(self.recorder, device))
        found = self._in_place.get(key) if held is not None and clipped is not None else None
        entry = found or self._record_in_place(key, scale, unscaled, with_grad, grads)
        if isinstance(entry, str):
            scaler.unscale_(optimizer)
            # A set of addresses' first call clips eagerly: a copying recording made now would
            # hold a copy of every gradient that the next call no longer needs.
            return self._eager(params) if entry == "first-call" else self(params)
        if found is not None and (why := context_fallback(self.recorder, device)) is not None:
            self.stats.fallbacks[why] += 1
            scaler.unscale_(optimizer)
            return self._eager(params)
        entry.recording.replay()
        self.stats.replays += 1
        state = scaler._per_optimizer_states[id(optimizer)]
        state["found_inf_per_device"] = {device: entry.found_inf}
        state["stage"] = OptState.UNSCALED
        return entry.total.clone()

    def _record_in_place(
        self,
        key: Hashable,
        scale: Tensor,
        unscaled: list[Tensor],
        with_grad: list[Tensor],
        grads: list[Tensor],
    ) -> _InPlaceEntry | str:
        """The in-place recording for ``key`` (the scaler's ``scale``), or why these calls
        must run as they are (counted in ``stats.fallbacks``)."""
        device = scale.device
        reason = _grad_fallback(unscaled) or _grad_fallback(grads)
        if reason is None and any(g.device != device for g in (*unscaled, *grads)):
            reason = "mixed-devices"
        if reason is None and any(g.dtype != torch.float32 for g in unscaled):
            reason = "not-float32"  # the scaler refuses half gradients: its message stands
        if reason is None:
            reason = context_fallback(self.recorder, device) or self._in_place.admits(key)
        if reason is None and self._seen_in_place != key:
            self._seen_in_place = key  # a set of addresses' first call: it may be a one-off
            reason = "first-call"
        if reason is not None:
            self.stats.fallbacks[reason] += 1
            return reason

        def unscale_and_clip() -> tuple[Tensor, ...]:
            # The scaler's unscale_ (its reciprocal in float64, as it takes it), then the clip.
            inv_scale = scale.double().reciprocal().float()
            found_inf = torch.full((), 0.0, dtype=torch.float32, device=device)
            torch._amp_foreach_non_finite_check_and_unscale_(unscaled, found_inf, inv_scale)
            total = torch.nn.utils.clip_grad_norm_(with_grad, self.max_norm, self.norm_type)
            return found_inf, total

        try:
            # No warm-up: it would unscale the very gradients the replay then unscales again.
            # The unscale's and the clip's kernels ran eagerly at this set's first call.
            recording = self.recorder.record(unscale_and_clip, device, warm_up=False)
        except Exception as exc:  # a failed capture leaves these gradients to the eager calls
            self._in_place.refuse(key)
            self.stats.count_failure(exc)
            return "failure"
        self.stats.recordings += 1
        entry = _InPlaceEntry(recording.outputs[0], recording.outputs[1], recording)
        self._in_place.publish(key, entry)
        return entry
