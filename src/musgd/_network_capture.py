"""The training forward and backward of an Ultralytics network, replayed from CUDA graphs.

In the Ultralytics trainer the forward and backward take 87-90% of an iteration with this
package's optimizer, and they are host-bound on an H200: YOLO26n takes about as long at batch 16
as at batch 4 (WP-011). The trainer computes its loss through ``model(batch)``, which reaches
the network as ``model.predict(img)`` (observed on Ultralytics 8.4 by wrapping the instance's
methods). :class:`NetworkCapture` sets an instance ``predict`` that runs the network from a
recording -- one CUDA graph for the forward, one for the backward, inside one autograd node, as
PyTorch documents for partial-network capture -- and leaves the loss eager.

What a capture must respect, each handled here:

* the recording's warm-up runs the network's forward and backward a few times, which moves the
  BatchNorm running statistics: every buffer of the model is put back afterwards, so the
  iteration that records updates them once, as an eager one does;
* the network is recorded on stand-ins for its parameters (leaves sharing their memory, through
  ``torch.func.functional_call``), never on the parameters themselves. The trainer keeps its last
  loss, and with it the last autograd graph, alive into the next forward; that graph holds the
  parameters' gradient accumulators, which belong to the eager stream, and PyTorch's
  ``make_graphed_callables``, which differentiates the parameters, failed there on the H200
  (PyTorch 2.11): "operation would make the legacy stream depend on a capturing blocking stream";
* under autocast the recording runs in the caller's autocast state, cache included, with the
  cache emptied before and after each warm-up pass and the capture: a weight used twice in one
  forward is cast once and its two gradients summed as in eager autograd, and no cast made
  outside the graph is read inside it. The autocast setting is part of the key;
* an input of another shape, layout, dtype or autocast setting (an epoch's short last batch)
  gets a recording of its own, up to ``RECORDINGS_BOUND``, or runs eagerly;
* evaluation, ``no_grad``, extra arguments, a surrounding capture or ``torch.compile`` and a
  device the grapher does not support run the original ``predict``, counted by reason;
* the first call with a new key runs eagerly (cuDNN picks its algorithms there, as for an
  eager run); a failed recording restores the buffers, is counted, warns once with PyTorch's
  message, and leaves its key eager;
* the backward hands the parameters gradients that live in the recording's memory, which the
  next replay overwrites (the forward's scratch memory too: both graphs share one pool): where a
  parameter's ``.grad`` still holds them when the recording replays again (gradients
  accumulated over iterations), it is copied out first. The backward sets each ``.grad`` itself
  (:func:`hand_grads`, as autograd's ``AccumulateGrad`` does: the gradient kept, or added in
  place) rather than through an autograd edge and node per parameter, which cost YOLO26n's 366
  parameters more host time than the replays; where a parameter has a tensor hook or no longer
  requires grad, autograd hands them over as before (:func:`direct_hand_off`).

Outputs are any nesting of dicts, lists and tuples of tensors: the recording returns them as a
flat tuple of distinct tensors, and each call rebuilds the nesting.

With ``compile=True`` the recording holds the network's Inductor kernels instead of its eager
ones: :func:`compiled_predict` compiles the class's ``predict`` with ``torch.compile`` (default
mode: no CUDA graphs of Inductor's own, as this recording owns the graph), once for the model
(the eager calls: a key's first call, the fallbacks of a training call) and once for a twin of
the model whose parameters are the recording's stand-ins (:func:`parameter_twin`: the same
modules, buffers and parameter memory; ``torch.func.functional_call`` does not reach a compiled
function's parameters). Both compile the same code on the same shapes, so the recording replays
the kernels the eager compiled network runs, and Inductor's caches make the twin's compilation
a lookup. The compilation happens in the warm-up passes, before the capture.
"""

from __future__ import annotations

import copy
import weakref
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, cast

import torch
from torch import Tensor

from musgd._flat import dense, flat_copies
from musgd._replay import (
    GRAPHS,
    STREAMS,
    GraphPool,
    RecordingCache,
    ReplayStats,
    capture,
    give_back_cached_blocks,
    on_side_stream,
)

__all__ = [
    "RECORDINGS_BOUND",
    "CudaNetworkGrapher",
    "NetworkCapture",
    "NetworkGrapher",
    "compiled_predict",
    "parameter_twin",
]

# Input layouts kept recorded at once (the full batch and an epoch's short last batch, with room).
RECORDINGS_BOUND = 3


class NetworkGrapher(Protocol):
    """Makes a graphed callable of a module for given sample arguments."""

    def supports(self, device: torch.device) -> bool: ...

    def graph(
        self, module: torch.nn.Module, sample_args: tuple[Tensor, ...], grad_strides: GradStrides
    ) -> Callable[..., Any]: ...


class CudaNetworkGrapher:
    """Records a network with CUDA graphs (:class:`_CudaRecording`); with ``compile``, its
    Inductor kernels (:func:`compiled_predict` of a :func:`parameter_twin`)."""

    def __init__(self, *, compile: bool = False, pool: GraphPool | None = None) -> None:
        self.compile = compile
        self.pool = pool

    def supports(self, device: torch.device) -> bool:
        return device.type == "cuda"

    def graph(
        self, module: torch.nn.Module, sample_args: tuple[Tensor, ...], grad_strides: GradStrides
    ) -> Callable[..., Any]:
        (img,) = sample_args
        recording = _CudaRecording(module, img, grad_strides, compile=self.compile, pool=self.pool)
        return recording.run


# Warm-up passes before a capture (PyTorch's documented default for graphed callables).
WARMUP_PASSES = 3


class _CudaRecording:
    """A module of one tensor in and a flat tuple of tensors out, recorded as two CUDA graphs.

    The forward graph reads ``static_img`` and writes ``outputs``; the backward graph reads
    ``grad_outputs`` (one per output that requires grad) and writes ``grads`` (one per
    parameter that requires grad; None where the outputs do not depend on it). Both run on
    leaves sharing the parameters' memory, so an optimizer's in-place updates are seen.
    """

    # Each parameter's ``.grad`` at the last :func:`keep_accumulated` check, weakly held (a
    # dropped gradient's memory is not kept for this), None for a parameter that had none; the
    # list itself None before the first check.
    _kept: list[weakref.ref[Tensor] | None] | None = None

    def __init__(
        self,
        module: torch.nn.Module,
        img: Tensor,
        grad_strides: GradStrides,
        *,
        compile: bool = False,
        pool: GraphPool | None = None,
    ) -> None:
        self.static_img = img.detach().clone()
        forward = self._compiled_forward(module) if compile else self._eager_forward(module)

        with torch.cuda.device(img.device):
            # The eager iterations before this one left their activations cached for the
            # current stream; the warm-up allocates for the side stream, which cannot reuse
            # them. Given back first, the peak holds one iteration's activations, not two.
            give_back_cached_blocks()
            current = torch.cuda.current_stream()
            # The side stream every recording of this package warms up and captures on (one
            # cuBLAS workspace; musgd._replay.STREAMS).
            side = STREAMS.side_stream(torch.cuda.current_device())
            with on_side_stream(side, current):  # the caller puts the buffers back on `current`
                for _ in range(WARMUP_PASSES):
                    torch.clear_autocast_cache()
                    outs = forward()
                    zeros = [torch.zeros_like(o) for o in outs if o.requires_grad]
                    self._differentiate(outs, zeros)
                    del outs, zeros
            torch.clear_autocast_cache()
            # The warm-up's activations, cached for the side stream, are given back before the
            # capture takes its own: the peak holds one set of them, not two.
            give_back_cached_blocks()
            # Both graphs in one pool: the backward's scratch reuses the forward's. A shared
            # pool (GraphPool) also holds recordings that replay after the backward only and
            # read its gradients: this recording joins it as their producer.
            token = torch.cuda.graph_pool_handle() if pool is None else pool.producer(img.device)
            self._forward, self._backward = GRAPHS.graph(), GRAPHS.graph()
            try:
                outs = capture(self._forward, forward, side, token)
            finally:
                torch.clear_autocast_cache()  # no cast made in the capture is read outside it
            self.differentiable = tuple(o.requires_grad for o in outs)
            self.grad_outputs = [
                grad_buffer(o, stride)
                for o, stride in zip(outs, _padded(grad_strides, len(outs)), strict=True)
                if o.requires_grad
            ]
            self.grads = capture(
                self._backward, lambda: self._differentiate(outs, self.grad_outputs), side, token
            )
            self.outputs = tuple(o.detach() for o in outs)  # the capture's autograd graph goes
            # Whether each gradient already has its parameter's layout (autograd's contract).
            pairs = zip(self.params, self.grads, strict=True)
            self.obeys = tuple(g is None or obeys_layout(g, p) for p, g in pairs)
            # The input through which a handing replay's outputs require grad (no gradient
            # ever reaches it: the backward hands the parameters theirs).
            self.anchor = torch.empty(0, device=img.device, requires_grad=True)

    def _eager_forward(self, module: torch.nn.Module) -> Callable[[], tuple[Tensor, ...]]:
        """The module on the static input, its parameters replaced by stand-ins (leaves sharing
        their memory) through ``functional_call``; sets ``params`` and ``_leaves``."""
        named = list(module.named_parameters())
        leaves = {n: p.detach().requires_grad_(p.requires_grad) for n, p in named}
        self.params = [p for _, p in named if p.requires_grad]
        self._leaves = [leaves[n] for n, p in named if p.requires_grad]

        def forward() -> tuple[Tensor, ...]:
            out = torch.func.functional_call(module, leaves, (self.static_img,))
            return tuple(cast(tuple[Tensor, ...], out))

        return forward

    def _compiled_forward(self, module: torch.nn.Module) -> Callable[[], tuple[Tensor, ...]]:
        """The compiled ``predict`` of a twin of the network's model whose parameters are the
        stand-ins, flattened as :class:`_FlatNetwork` flattens; sets ``params`` and ``_leaves``."""
        if not isinstance(module, _FlatNetwork):
            raise TypeError(
                "a compiled recording needs the network NetworkCapture builds (_FlatNetwork), "
                f"got {type(module).__name__}"
            )
        named = list(module.model.named_parameters())
        stand_ins = {
            n: torch.nn.Parameter(p.detach(), requires_grad=p.requires_grad) for n, p in named
        }
        self.params = [p for _, p in named if p.requires_grad]
        self._leaves = [stand_ins[n] for n, p in named if p.requires_grad]
        run = compiled_predict(parameter_twin(module.model, stand_ins))

        def forward() -> tuple[Tensor, ...]:
            flat, module.spec = flatten(run(self.static_img))
            return tuple(flat)

        return forward

    def _differentiate(
        self, outs: Sequence[Tensor], grad_outputs: Sequence[Tensor]
    ) -> tuple[Tensor | None, ...]:
        wanted = [o for o in outs if o.requires_grad]
        if not wanted or not self._leaves:
            return tuple(None for _ in self._leaves)
        return torch.autograd.grad(wanted, self._leaves, grad_outputs, allow_unused=True)

    def run(self, img: Tensor) -> tuple[Tensor, ...]:
        """The network on ``img`` from the recording, differentiable in the parameters: their
        gradients handed over by :func:`hand_grads` where :func:`direct_hand_off` allows it,
        else by autograd (the parameters the node's inputs)."""
        if direct_hand_off(self.params):
            out = _HandingReplay.apply(self, img, self.anchor)  # type: ignore[no-untyped-call,unused-ignore]
        else:
            out = _Replay.apply(self, img, *self.params)  # type: ignore[no-untyped-call,unused-ignore]
        return cast(tuple[Tensor, ...], out)

    def replay_forward(self, img: Tensor) -> tuple[Tensor, ...]:
        # The forward graph's scratch memory overlaps the backward's gradients (one pool).
        self._keep_accumulated()
        if img.data_ptr() != self.static_img.data_ptr():
            self.static_img.copy_(img)
        self._forward.replay()
        # Fresh tensor objects on the recording's memory: autograd attaches its node to these,
        # not to the recording's own outputs.
        return tuple(o.detach() for o in self.outputs)

    def _keep_accumulated(self) -> None:
        """:func:`keep_accumulated` for this recording, skipped where every parameter's
        ``.grad`` is the very object it was after the last check: those were checked then, and
        a gradient object keeps its memory (only ``.data =`` or ``set_`` would move it, which
        no trainer does to a ``.grad``). A handed gradient or a ``zero_grad`` is a new object
        (or None) and brings the check back. Walking the parameters' data pointers twice an
        iteration took about 1.4 ms of host time for YOLO26n's 366 (the H100 profile, WP-024)."""
        kept = self._kept
        if kept is not None and all(map(_still, self.params, kept)):
            return
        keep_accumulated(self.params, self.grads)
        self._kept = [None if (g := p.grad) is None else weakref.ref(g) for p in self.params]

    def replay_backward(self, grads: Sequence[Tensor | None]) -> tuple[Tensor | None, ...]:
        """The backward graph on the outputs' gradients ``grads``: the parameters' gradients,
        the recording's own tensors (overwritten by the next replay)."""
        wanted = (g for g, d in zip(grads, self.differentiable, strict=True) if d)
        for static, g in zip(self.grad_outputs, wanted, strict=True):
            if g is None:
                static.zero_()
            else:
                static.copy_(g)
        self._keep_accumulated()
        self._backward.replay()
        return self.grads


# Per flat output, the strides its gradient came back with in the eager call (None: unseen).
GradStrides = Sequence[tuple[int, ...] | None]


def _padded(strides: GradStrides, n: int) -> list[tuple[int, ...] | None]:
    return [*strides[:n], *[None] * (n - len(strides))]


def observe_grad_strides(out: Any) -> list[tuple[int, ...] | None]:
    """Hooks on the differentiable tensors of ``out`` (a network's eager output) that note the
    strides of the gradient each receives in the backward; the list they fill, per flat output.

    The loss hands its gradients back in layouts of its own (a channels-last output's gradient
    may come back contiguous); a recorded backward that read them in another layout would run
    other kernels, and sum in another order.
    """
    try:
        flat, _ = flatten(out)
    except TypeError:  # not an output a graph can give back: its recording fails, and says so
        return []
    strides: list[tuple[int, ...] | None] = [None] * len(flat)
    for i, t in enumerate(flat):
        if t.requires_grad:

            def note(grad: Tensor | None, i: int = i) -> None:
                # None: the output got no gradient (a compiled backward may say so); the
                # recording's buffer takes the output's own layout.
                if grad is not None:
                    strides[i] = tuple(grad.stride())

            t.register_hook(note)  # type: ignore[no-untyped-call,unused-ignore]
    return strides


def grad_buffer(out: Tensor, stride: tuple[int, ...] | None) -> Tensor:
    """The recording's buffer for ``out``'s gradient: in the layout the eager call's gradient
    had, where that was seen and dense, else ``out``'s own."""
    if stride is not None and dense(out.shape, stride):
        return torch.empty_strided(out.shape, stride, dtype=out.dtype, device=out.device)
    return torch.empty_like(out)


def _still(param: Tensor, kept: weakref.ref[Tensor] | None) -> bool:
    """Whether ``param.grad`` is the object ``kept`` refers to (both None: no gradient)."""
    grad = param.grad
    return grad is None if kept is None else grad is not None and kept() is grad


def keep_accumulated(params: Sequence[Tensor], grads: Sequence[Tensor | None]) -> None:
    """Copy out each ``.grad`` that is still one of ``grads`` (autograd keeps an incoming
    gradient as ``.grad`` when there was none): the replay about to run overwrites them, and an
    accumulating ``.grad`` must keep its value. The copies lie back to back in one new buffer
    (:func:`musgd._flat.flat_copies`, the same shapes and strides) and are made by one
    multi-tensor copy: the same bits as a ``clone`` each, without a launch per gradient."""
    held = [
        (p, kept)
        for p, g in zip(params, grads, strict=True)
        if g is not None and (kept := p.grad) is not None and kept.data_ptr() == g.data_ptr()
    ]
    if not held:
        return
    copies = flat_copies([kept for _, kept in held])
    for (p, kept), copied in zip(held, copies, strict=True):
        p.grad = kept.clone() if copied is None else copied


def obeys_layout(grad: Tensor, param: Tensor) -> bool:
    """Whether autograd would keep ``grad`` as ``param.grad`` as it is (its layout contract):
    a dense parameter's gradient has the parameter's strides (size-1 dimensions aside), any
    other parameter's is contiguous."""
    if not dense(param.shape, param.stride()):
        return grad.is_contiguous()
    return all(
        size == 1 or g == p
        for size, g, p in zip(param.shape, grad.stride(), param.stride(), strict=True)
    )


def direct_hand_off(params: Sequence[Tensor]) -> bool:
    """Whether a replay may hand ``params`` their gradients itself (:func:`hand_grads`): each
    still requires grad and has no tensor hook (``register_hook``,
    ``register_post_accumulate_grad_hook``), which only autograd's hand-off runs."""
    for p in params:
        if not p.requires_grad or p._backward_hooks or p._post_accumulate_grad_hooks:
            return False
    return True


def hand_grads(
    params: Sequence[Tensor], grads: Sequence[Tensor | None], obeys: Sequence[bool]
) -> None:
    """Give each parameter its gradient as autograd's ``AccumulateGrad`` does: where ``.grad``
    is None, the gradient itself (detached where it requires grad; a copy in the parameter's
    layout where it does not ``obey`` it), else added in place (out of place when grad mode is
    on, as under ``create_graph``).

    The in-place additions (gradients accumulated over iterations, as the Ultralytics trainer
    does between its steps with its default ``nbs`` at batch 4 or 16) are one multi-tensor
    add, elementwise the same ``a + b`` as one ``+=`` per parameter, where a launch each cost
    YOLO26n's 366 parameters about 2 ms of host time per iteration (a profile on the H100
    host, WP-024)."""
    accumulate_in_place = not torch.is_grad_enabled()
    into: list[Tensor] = []
    adds: list[Tensor] = []
    for p, g, fits in zip(params, grads, obeys, strict=True):
        if g is None:
            continue
        held = p.grad
        if held is None:
            if fits:
                # The gradient object itself where it is already detached (a recording's
                # gradients are): a new view per parameter cost YOLO26n's 366 0.7 ms of host
                # time per iteration under the profiler (WP-024).
                p.grad = g.detach() if g.requires_grad else g
            else:
                p.grad = torch.empty_strided(p.shape, p.stride(), dtype=g.dtype, device=g.device)
                p.grad.copy_(g)
        elif accumulate_in_place:
            into.append(held)
            adds.append(g)
        else:
            p.grad = held + g
    if not into:
        return
    if len({id(t) for t in into}) == len(into):
        torch._foreach_add_(into, adds)
        return
    for grad, g in zip(into, adds, strict=True):  # one .grad shared by two parameters: in turn
        grad.add_(g)


def _replayed_forward(ctx: Any, recording: _CudaRecording, img: Tensor) -> tuple[Tensor, ...]:
    ctx.recording = recording
    ctx.set_materialize_grads(False)
    outs = recording.replay_forward(img)
    fixed = [o for o, d in zip(outs, recording.differentiable, strict=True) if not d]
    ctx.mark_non_differentiable(*fixed)
    return outs


class _Replay(torch.autograd.Function):
    """One autograd node for a replayed network, the parameters its inputs: autograd hands them
    the backward graph's gradients."""

    @staticmethod
    def forward(  # type: ignore[override,unused-ignore]
        ctx: Any, recording: _CudaRecording, img: Tensor, *params: Tensor
    ) -> tuple[Tensor, ...]:
        return _replayed_forward(ctx, recording, img)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, *grads: Tensor | None) -> tuple[Tensor | None, ...]:
        handed = ctx.recording.replay_backward(grads)
        return (None, None, *(None if g is None else g.detach() for g in handed))


class _HandingReplay(torch.autograd.Function):
    """One autograd node for a replayed network whose backward hands the parameters their
    gradients itself (:func:`hand_grads`).

    Autograd's hand-off makes an edge per parameter in the forward and runs an
    ``AccumulateGrad`` node per parameter in the backward: for YOLO26n's 366 parameters that
    took 1.6 to 2.6 ms of host time per iteration against 0.3 to 0.5 ms for this one, timed
    alone on a CPU host with stand-in nodes (WP-024 has the trainer's numbers). Only
    ``anchor`` (an empty leaf) is an input, so that the outputs require grad; it never gets a
    gradient. A backward that asks for the parameters' gradients by name
    (``torch.autograd.grad(..., params)``, ``backward(inputs=...)``) does not see them here:
    the trainer's ``loss.backward()`` is what this serves.
    """

    @staticmethod
    def forward(  # type: ignore[override,unused-ignore]
        ctx: Any, recording: _CudaRecording, img: Tensor, anchor: Tensor
    ) -> tuple[Tensor, ...]:
        return _replayed_forward(ctx, recording, img)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, *grads: Tensor | None) -> tuple[None, None, None]:
        recording = ctx.recording
        hand_grads(recording.params, recording.replay_backward(grads), recording.obeys)
        return (None, None, None)


def compiled_predict(model: torch.nn.Module) -> Callable[..., Any]:
    """``predict`` of ``model``'s class, bound to ``model`` and compiled by Inductor for static
    shapes, without CUDA graphs of its own (``torch.compile``'s default mode)."""
    predict = getattr(type(model), "predict", None)
    if not callable(predict):
        raise TypeError(
            "compiling the network needs a model class with predict(img), got "
            f"{type(model).__name__}"
        )
    compiled: Callable[..., Any] = torch.compile(predict.__get__(model), dynamic=False)
    return compiled


def parameter_twin(model: torch.nn.Module, parameters: Mapping[str, Tensor]) -> torch.nn.Module:
    """A copy of ``model``'s modules whose parameters are ``parameters`` (by name, as
    ``named_parameters`` gives them) and whose buffers are ``model``'s own tensors; a parameter
    shared by two modules is one stand-in in both. Other tensor attributes are copied; an
    instance ``predict`` is left out."""
    memo: dict[int, Any] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        first = memo.setdefault(id(p), parameters.get(name))
        if first is None:
            raise KeyError(f"parameter_twin: no stand-in for the parameter {name!r}")
    memo.update({id(b): b for b in model.buffers()})
    # An instance predict (a capture's, holding its recordings) is not the twin's to copy.
    shadowed = model.__dict__.pop("predict", None)
    try:
        return copy.deepcopy(model, memo)
    finally:
        if shadowed is not None:
            model.__dict__["predict"] = shadowed


# A nested output with its tensors replaced by their index in the flat tuple.
Spec = Any


def flatten(out: Any) -> tuple[list[Tensor], Spec]:
    """The distinct tensors of a nesting of dicts, lists and tuples (first-seen order), and the
    spec :func:`unflatten` rebuilds it from; a tensor met twice is one entry."""
    flat: list[Tensor] = []
    seen: dict[int, int] = {}

    def walk(x: Any) -> Spec:
        if isinstance(x, Tensor):
            index = seen.get(id(x))
            if index is None:
                index = seen[id(x)] = len(flat)
                flat.append(x)
            return ("tensor", index)
        if isinstance(x, dict):
            return ("dict", tuple((k, walk(v)) for k, v in x.items()))
        if isinstance(x, list | tuple):
            return (type(x).__name__, tuple(walk(v) for v in x))
        raise TypeError(
            f"NetworkCapture: the network returned a {type(x).__name__}; only tensors in dicts, "
            "lists and tuples can come out of a graph"
        )

    return flat, walk(out)


def unflatten(spec: Spec, flat: Sequence[Tensor]) -> Any:
    """The nesting ``spec`` describes, holding ``flat``'s tensors."""
    kind, body = spec
    if kind == "tensor":
        return flat[body]
    if kind == "dict":
        return {k: unflatten(v, flat) for k, v in body}
    items = [unflatten(v, flat) for v in body]
    return items if kind == "list" else tuple(items)


class _FlatNetwork(torch.nn.Module):
    """The network as a module of one tensor in and a flat tuple of distinct tensors out.

    The model is its submodule, so its parameters are the model's (what the graphing
    differentiates); ``spec`` is the output's nesting, set by each forward.
    """

    def __init__(self, model: torch.nn.Module, predict: Callable[[Tensor], Any]) -> None:
        super().__init__()
        self.model = model
        self.run = predict
        self.spec: Spec = None

    def forward(self, img: Tensor) -> tuple[Tensor, ...]:
        flat, self.spec = flatten(self.run(img))
        return tuple(flat)


@dataclass(frozen=True)
class _Graphed:
    """A recorded network: the graphed callable and the nesting of its outputs."""

    run: Callable[..., Any]
    spec: Spec


def _autocast_key(device: torch.device) -> tuple[bool, torch.dtype | None]:
    """Whether autocast is on for ``device``'s type, and its dtype when it is."""
    enabled = torch.is_autocast_enabled(device.type)
    return (enabled, torch.get_autocast_dtype(device.type) if enabled else None)


class NetworkCapture:
    """Runs ``model.predict(img)`` from graphs while the model trains; see the module docstring.

    ``install`` sets the instance's ``predict``; ``uninstall`` removes it. ``stats`` counts
    recordings, replays, failures and eager calls by reason. With ``compile`` the recordings
    hold Inductor's kernels, and a training call that runs eagerly (a key's first, a refused or
    failed key's, a device the grapher does not support) runs the compiled ``predict``
    (:func:`compiled_predict`), so that every training iteration runs the same kernels; calls
    that are not the training forward (evaluation, ``no_grad``, extra arguments) run the
    original.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        *,
        grapher: NetworkGrapher | None = None,
        compile: bool = False,
        pool: GraphPool | None = None,
    ) -> None:
        if not callable(getattr(model, "predict", None)):
            raise TypeError(
                "NetworkCapture needs an Ultralytics model (a module with predict(img)), got "
                f"{type(model).__name__}"
            )
        if grapher is not None and (compile or pool is not None):
            raise ValueError(
                "NetworkCapture: compile=True or a pool makes its own grapher; pass no grapher"
            )
        self.model = model
        self.compile = compile
        if grapher is None:  # the compiling grapher only when asked: the default stays plain
            grapher = CudaNetworkGrapher(compile=compile, pool=pool)
        self.grapher: NetworkGrapher = grapher
        self.stats = ReplayStats()
        self._cache: RecordingCache[_Graphed] = RecordingCache(lambda: RECORDINGS_BOUND)
        # Per key seen, the strides of its first (eager) call's output gradients.
        self._grad_strides: dict[Hashable, list[tuple[int, ...] | None]] = {}
        self._original = cast(Callable[..., Any], model.predict)
        # What a training call runs where no recording stands for it: the original, or with
        # compile its compiled form (the kernels the recordings hold), made at install.
        self._eager = self._original
        # The instance's own predict that install shadows, put back by uninstall.
        self._shadowed: Callable[..., Any] | None = None
        self._patch = self.predict  # one bound method, so that installed can tell it by identity

    @property
    def installed(self) -> bool:
        return self.model.__dict__.get("predict") is self._patch

    def install(self) -> NetworkCapture:
        """Set the model instance's ``predict`` to :meth:`predict` (again: no change)."""
        if not self.installed:
            self._original = cast(Callable[..., Any], self.model.predict)
            self._eager = compiled_predict(self.model) if self.compile else self._original
            self._shadowed = self.model.__dict__.get("predict")
            self.model.__dict__["predict"] = self._patch
        return self

    def release(self) -> None:
        """Drop every recording: their graphs and memory go with the last reference to them
        (``musgd._replay.GRAPHS`` says when), and a later training call records anew."""
        self._cache.clear()

    def uninstall(self) -> None:
        """Remove the instance's ``predict``: the one it shadowed (or the class's) serves again."""
        if self.installed:
            if self._shadowed is None:
                del self.model.__dict__["predict"]
            else:
                self.model.__dict__["predict"] = self._shadowed
                self._shadowed = None

    def _call_fallback(
        self, img: object, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> str | None:
        """Why this call is not the trainer's training forward, or None when it is."""
        if args or kwargs:
            return "arguments"
        if not isinstance(img, Tensor):
            return "not-a-tensor"
        if not self.model.training:
            return "eval"
        if not torch.is_grad_enabled():
            return "no-grad"
        return "input-requires-grad" if img.requires_grad else None

    def _context_fallback(self, img: Tensor) -> str | None:
        """Why no graph can run here (device, compile, a capture underway), or None."""
        if not self.grapher.supports(img.device):
            return f"device:{img.device.type}"
        if torch.compiler.is_compiling():
            return "compile"
        if img.device.type == "cuda" and torch.cuda.is_current_stream_capturing():
            return "capture"
        return None

    def predict(self, img: Tensor, *args: Any, **kwargs: Any) -> Any:
        """``model.predict(img)``, from a recording where one can stand for it."""
        reason = self._call_fallback(img, args, kwargs) or self._context_fallback(img)
        if reason is not None:
            self.stats.fallbacks[reason] += 1
            run = self._eager if reason.startswith("device:") else self._original
            return run(img, *args, **kwargs)
        key = (img.shape, img.stride(), img.dtype, img.device, _autocast_key(img.device))
        entry = self._cache.get(key)
        if entry is None:
            entry = self._record(key, img)
            if entry is None:
                out = self._eager(img)
                if key not in self._grad_strides:  # the key's first call
                    self._grad_strides[key] = observe_grad_strides(out)
                return out
        self.stats.replays += 1
        return unflatten(entry.spec, entry.run(img))

    def _record(self, key: Hashable, img: Tensor) -> _Graphed | None:
        refused = self._cache.admits(key)
        if refused is not None:
            self.stats.fallbacks[refused] += 1
            return None
        if key not in self._grad_strides:  # a key's first call runs eagerly: it may be a one-off
            self.stats.fallbacks["first-call"] += 1
            return None
        buffers = list(self.model.buffers())
        saved = [b.clone() for b in buffers]
        network = _FlatNetwork(self.model, self._original)
        try:
            run = self.grapher.graph(network, (img.detach().clone(),), self._grad_strides[key])
        except Exception as exc:  # any failure: this key stays eager
            what = f"NetworkCapture: recording the network for input {tuple(img.shape)}"
            self._cache.refuse_failed(key, exc, self.stats, what, "that input runs eagerly")
            return None
        finally:  # the warm-up moved BatchNorm statistics (and may have failed half-way)
            with torch.no_grad():
                for b, s in zip(buffers, saved, strict=True):
                    b.copy_(s)
        entry = _Graphed(run, network.spec)
        self._cache.publish(key, entry)
        self.stats.recordings += 1
        if img.device.type == "cuda":
            # The eager iteration before it (alive until the recording's first forward) is
            # freed by now: its cached blocks given back (once a layout).
            torch.cuda.empty_cache()
        return entry
