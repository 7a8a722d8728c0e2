"""Gradient clipping replayed (``GradClipReplay``) on CPU, through the fake recorder.

The fake recorder re-runs the logged ATen operations on the recorded tensors, as a CUDA graph
re-runs its kernels on the same memory; tests/cuda/test_clip_replay_cuda.py checks the real one.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch
from clip_common import compare_unscale_and_clip
from replay_fakes import FakeRecorder
from torch import Tensor

from musgd import GradClipReplay
from musgd._clip_replay import EagerUnscale
from musgd.bench import same_bits

# Mixed shapes; conv kernels' gradients are channels-last, as the Ultralytics trainer makes them.
SHAPES = [(8, 3, 3, 3), (16, 8, 3, 3), (16,), (32, 16), (16, 16, 1, 1), (4,)]


def _params() -> list[torch.nn.Parameter]:
    gen = torch.Generator().manual_seed(0)
    return [torch.nn.Parameter(torch.randn(s, generator=gen)) for s in SHAPES]


def _grads(step: int, scale: float = 1.0) -> list[Tensor]:
    gen = torch.Generator().manual_seed(100 + step)
    out = []
    for s in SHAPES:
        g = torch.randn(s, generator=gen) * scale
        out.append(g.contiguous(memory_format=torch.channels_last) if len(s) == 4 else g)
    return out


def _set(params: list[torch.nn.Parameter], grads: list[Tensor | None]) -> None:
    for p, g in zip(params, grads, strict=True):
        p.grad = None if g is None else g.clone(memory_format=torch.preserve_format)


def _same(a: Tensor, b: Tensor) -> bool:
    return a.stride() == b.stride() and same_bits(a, b)


def _over_the_bound(step: int) -> list[Tensor | None]:
    """Gradients whose total norm is far above every bound these tests clip to."""
    return list(_grads(step, 30.0))


def _run_both(
    clip: GradClipReplay, steps: int, grads_for: Callable[[int], list[Tensor | None]]
) -> None:
    ours, stock = _params(), _params()
    for step in range(steps):
        grads = grads_for(step)
        _set(ours, grads)
        _set(stock, grads)
        before = [p.grad for p in ours]
        total = clip(ours)
        expected = torch.nn.utils.clip_grad_norm_(stock, clip.max_norm, clip.norm_type)
        assert _same(total, expected), step
        for p, q, g in zip(ours, stock, before, strict=True):
            assert p.grad is g  # scaled in place, as the eager call does
            if g is not None:
                assert q.grad is not None
                assert _same(p.grad, q.grad), step  # type: ignore[arg-type]


@pytest.mark.parametrize("norm_type", [2.0, 1.0, math.inf])
def test_replayed_clip_is_the_eager_call_bit_for_bit(norm_type: float) -> None:
    recorder = FakeRecorder()
    clip = GradClipReplay(10.0, norm_type, recorder=recorder)
    # Large gradients are clipped; small ones (scale 0.01) leave the coefficient clamped at 1.
    _run_both(clip, 8, lambda step: list(_grads(step, 30.0 if step % 2 else 0.01)))
    assert clip.stats.recordings == 1
    assert recorder.records == 1
    assert clip.stats.fallbacks == {"first-call": 1}
    # The second call records and replays; every later one replays.
    assert clip.stats.replays == 7 == recorder.replays


def test_replay_runs_no_python_clip(monkeypatch: pytest.MonkeyPatch) -> None:
    clip = GradClipReplay(1.0, recorder=FakeRecorder())
    params = _params()
    calls = []
    original = torch.nn.utils.clip_grad_norm_

    def spy(*args: object, **kwargs: object) -> Tensor:
        calls.append(1)
        return original(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", spy)
    for step in range(5):
        _set(params, list(_grads(step)))
        clip(params)
    # The first call eager, then the recording's warm-up and capture passes; none after.
    assert len(calls) == 3
    assert clip.stats.replays == 4


def test_non_finite_gradients_give_the_eager_bits() -> None:
    def grads(step: int) -> list[Tensor | None]:
        out: list[Tensor | None] = list(_grads(step))
        if step == 3:
            assert out[2] is not None
            out[2][1] = math.inf
        if step == 4:
            assert out[3] is not None
            out[3][0, 0] = math.nan
        return out

    _run_both(GradClipReplay(10.0, recorder=FakeRecorder()), 6, grads)


def test_a_changed_set_of_gradients_gets_its_own_recording() -> None:
    clip = GradClipReplay(5.0, recorder=FakeRecorder())

    def grads(step: int) -> list[Tensor | None]:
        out: list[Tensor | None] = list(_grads(step, 10.0))
        if step >= 4:
            out[1] = None  # a layer frozen from step 4 on
        return out

    _run_both(clip, 9, grads)
    assert clip.stats.recordings == 2
    assert clip.stats.fallbacks == {"first-call": 2}


def test_unsupported_devices_and_contexts_run_the_eager_call() -> None:
    clip = GradClipReplay(10.0, recorder=FakeRecorder(device_type="cuda"))
    _run_both(clip, 3, _over_the_bound)
    assert clip.stats.recordings == 0
    assert clip.stats.fallbacks == {"device:cpu": 3}

    inside = GradClipReplay(10.0, recorder=FakeRecorder(capture_underway=True))
    _run_both(inside, 3, _over_the_bound)
    assert inside.stats.fallbacks == {"capture": 3}

    none = GradClipReplay(10.0, recorder=FakeRecorder())
    _run_both(none, 2, lambda step: [None] * len(SHAPES))
    assert none.stats.fallbacks == {"no-gradients": 2}


def test_gradients_that_need_grad_run_the_eager_call() -> None:
    clip = GradClipReplay(1.0, recorder=FakeRecorder())
    params = _params()
    for step in range(3):
        for p, g in zip(params, _grads(step), strict=True):
            p.grad = g.requires_grad_()
        clip(params)
    assert clip.stats.recordings == 0
    assert clip.stats.fallbacks == {"requires-grad": 3}


def test_a_failed_recording_leaves_the_gradients_to_the_eager_call() -> None:
    clip = GradClipReplay(10.0, recorder=FakeRecorder(fail_in="capture"))
    _run_both(clip, 5, _over_the_bound)
    assert clip.stats.failures == 1
    assert clip.stats.recordings == 0
    # Never retried: the key is refused from then on.
    assert clip.stats.fallbacks == {
        "first-call": 1,
        "record-failed:InjectedFailureError": 1,
        "not-recordable": 3,
    }


def test_a_single_tensor_is_accepted_like_the_eager_call() -> None:
    clip = GradClipReplay(0.5, recorder=FakeRecorder())
    p, q = torch.nn.Parameter(torch.ones(8)), torch.nn.Parameter(torch.ones(8))
    for step in range(4):
        p.grad = torch.full((8,), float(step + 1))
        q.grad = p.grad.clone()
        assert _same(clip(p), torch.nn.utils.clip_grad_norm_(q, 0.5))
        assert _same(p.grad, q.grad)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_norm": 0.0}, "max_norm must be a positive finite number"),
        ({"max_norm": -1.0}, "max_norm must be a positive finite number"),
        ({"max_norm": math.inf}, "max_norm must be a positive finite number"),
        ({"max_norm": math.nan}, "max_norm must be a positive finite number"),
        ({"max_norm": True}, "max_norm must be a number"),
        ({"max_norm": "10"}, "max_norm must be a number"),
        ({"max_norm": 1.0, "norm_type": 0.0}, "norm_type must be a positive number or inf"),
        ({"max_norm": 1.0, "norm_type": math.nan}, "norm_type must be a positive number or inf"),
    ],
)
def test_bad_settings_are_refused_with_a_message(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        GradClipReplay(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("parameters", "message"),
    [
        (None, "with a tensor or an iterable of tensors .* got NoneType"),
        (5, "got int"),
        ("weights", "got str"),
        ([torch.zeros(2), 3], "item 1 of the parameters is not a tensor \\(it is of type int\\)"),
    ],
)
def test_parameters_that_are_not_tensors_are_refused_with_a_message(
    parameters: object, message: str
) -> None:
    clip = GradClipReplay(1.0, recorder=FakeRecorder())
    with pytest.raises(TypeError, match=message):
        clip(parameters)  # type: ignore[arg-type]
    assert clip.stats.recordings == 0


def test_clear_drops_the_recordings_and_the_next_calls_record_anew() -> None:
    recorder = FakeRecorder()
    clip = GradClipReplay(10.0, recorder=recorder)
    _run_both(clip, 4, lambda step: list(_grads(step, 30.0)))
    assert (clip.stats.recordings, clip.stats.replays) == (1, 3)
    clip.clear()
    # As a new clip: the next call runs eagerly, the one after records, the rest replay.
    _run_both(clip, 4, lambda step: list(_grads(step + 4, 30.0)))
    assert (clip.stats.recordings, clip.stats.replays) == (2, 6)
    assert clip.stats.fallbacks == {"first-call": 2}
    assert recorder.records == 2


def _scaler() -> torch.amp.GradScaler:
    return torch.amp.GradScaler("cpu", init_scale=2.0**12, growth_interval=2)


def _scaled_grads(step: int, poisoned: int | None = None) -> list[Tensor]:
    """Step ``step``'s gradients as a scaled loss gives them; one entry inf at ``poisoned``."""
    grads = _grads(step, 2.0**12 * 30.0)
    if step == poisoned:
        grads[1][2, 1, 0, 2] = math.inf
    return grads


def test_unscale_and_clip_in_place_is_the_scalers_unscale_and_the_clip_bit_for_bit() -> None:
    """Gradients that keep their memory (a captured network's, handed over as new tensor
    objects on it each step): one recording, captured without a warm-up, unscales and clips
    them as the scaler's ``unscale_`` and the eager clip do, and leaves the scaler as its
    ``unscale_`` would, so its step skips the non-finite step and its update halves the scale.
    The first step's gradients lie elsewhere (an eager first batch): each set of addresses'
    first call clips eagerly, and no copying recording (a copy of every gradient) is made."""
    recorder = FakeRecorder()
    clip = GradClipReplay(10.0, recorder=recorder)
    scales = compare_unscale_and_clip(
        clip,
        (_params(), _params()),
        lambda step: _scaled_grads(step, poisoned=5),
        9,
        first_elsewhere=True,
    )
    assert scales[3] > scales[0]  # it grew
    assert scales[5] < scales[4]  # and halved at the inf
    assert (recorder.records, recorder.warm_ups) == (1, 0)
    assert clip.stats.replays == 7
    assert dict(clip.stats.fallbacks) == {"first-call": 2}  # the two sets' first calls


def test_unscale_and_clip_leaves_to_the_scaler_what_a_recording_cannot_stand_for() -> None:
    recorder = FakeRecorder()
    clip = GradClipReplay(10.0, recorder=recorder)
    params = _params()
    optimizer = torch.optim.SGD(params, lr=0.01)
    # Not a scaler, or not an optimizer: a TypeError that says which, nothing touched.
    with pytest.raises(TypeError, match=r"scaler must be a torch\.amp\.GradScaler"):
        clip.unscale_and_clip(None, optimizer, params)
    with pytest.raises(TypeError, match=r"optimizer must be the torch\.optim\.Optimizer"):
        clip.unscale_and_clip(_scaler(), "sgd", params)  # type: ignore[arg-type]
    # A scaler that is off unscales nothing: the clip alone, as the two calls would.
    off = torch.amp.GradScaler("cpu", enabled=False)
    _set(params, list(_grads(0, 30.0)))
    stock = _params()
    _set(stock, list(_grads(0, 30.0)))
    clip.unscale_and_clip(off, optimizer, params)
    torch.nn.utils.clip_grad_norm_(stock, 10.0)
    assert all(_same(p.grad, q.grad) for p, q in zip(params, stock, strict=True))  # type: ignore[arg-type]
    # Unscaled twice before an update: the scaler's own error, as its unscale_ gives it.
    scaler = _scaler()
    scaler.scale(torch.ones(()))
    clip.unscale_and_clip(scaler, optimizer, params)
    with pytest.raises(RuntimeError, match="already been called"):
        clip.unscale_and_clip(scaler, optimizer, params)
    assert clip.stats.fallbacks["scaler-stage"] == 1
    scaler.update()
    # Gradients at new memory every step never record; each step is still the two calls' bits.
    fresh = _params()
    twin = _params()
    twin_optimizer = torch.optim.SGD(twin, lr=0.01)
    scalers = [_scaler(), _scaler()]
    records = recorder.records
    for step in range(4):
        _set(fresh, list(_scaled_grads(step)))
        _set(twin, list(_scaled_grads(step)))
        for s in scalers:
            s.scale(torch.ones(()))
        clip.unscale_and_clip(scalers[0], optimizer, fresh)
        scalers[1].unscale_(twin_optimizer)
        torch.nn.utils.clip_grad_norm_(twin, 10.0)
        assert all(_same(p.grad, q.grad) for p, q in zip(fresh, twin, strict=True))  # type: ignore[arg-type]
        for s in scalers:
            s.update()
    assert recorder.records - records <= 1  # the copying clip's own recording, no in-place one


def test_the_same_gradient_objects_are_described_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A captured network hands the same gradient tensors every iteration: their check and key
    are derived at the first call only, and every call still gives the eager bits."""
    import musgd._clip_replay as clip_replay

    described = []
    original = clip_replay._describe

    def spy(grads: list[Tensor]) -> object:
        described.append(len(grads))
        return original(grads)

    monkeypatch.setattr(clip_replay, "_describe", spy)
    clip = GradClipReplay(10.0, recorder=FakeRecorder())
    ours, stock = _params(), _params()
    _set(ours, list(_grads(0)))
    held = [p.grad for p in ours]
    for step in range(5):
        for g, new in zip(held, _grads(step, 30.0), strict=True):
            assert g is not None
            g.copy_(new)  # new values in the same objects
        _set(stock, [g.clone() if g is not None else None for g in held])
        total = clip(ours)
        expected = torch.nn.utils.clip_grad_norm_(stock, clip.max_norm)
        assert _same(total, expected), step
        assert all(_same(p.grad, q.grad) for p, q in zip(ours, stock, strict=True))  # type: ignore[arg-type]
    assert described == [len(SHAPES)]
    assert clip.stats.replays == 4
    # Other objects (a new backward's) are described anew.
    _set(ours, list(_grads(9)))
    clip(ours)
    assert described == [len(SHAPES)] * 2


def _stepped_alike(
    unscale: Callable[[torch.amp.GradScaler, torch.optim.Optimizer], None],
    grads_for: Callable[[int], list[Tensor]],
    steps: int,
    *,
    same_objects: bool,
) -> list[float]:
    """Step two SGD twins through GradScalers, the first unscaled by ``unscale``, the second by
    the scaler's own ``unscale_``, asserting the same gradients, parameters and scale at every
    step; ``same_objects`` hands the first its gradients in the same tensor objects each step
    (a captured network's). Returns the scale after each step."""
    kept = [g.clone(memory_format=torch.preserve_format) for g in grads_for(0)]
    ours, stock = (
        [torch.nn.Parameter(p.detach().to(k.dtype)) for p, k in zip(_params(), kept, strict=True)]
        for _ in range(2)
    )
    optimizers = [torch.optim.SGD(ps, lr=0.01) for ps in (ours, stock)]
    scalers = [_scaler(), _scaler()]
    scales = []
    for step in range(steps):
        grads = grads_for(step)
        for k, g in zip(kept, grads, strict=True):
            k.copy_(g)
        for p, q, k, g in zip(ours, stock, kept, grads, strict=True):
            p.grad = k if same_objects else g.clone(memory_format=torch.preserve_format)
            q.grad = g.clone(memory_format=torch.preserve_format)
        for scaler in scalers:
            scaler.scale(torch.ones(()))
        unscale(scalers[0], optimizers[0])
        scalers[1].unscale_(optimizers[1])
        assert all(_same(p.grad, q.grad) for p, q in zip(ours, stock, strict=True)), step  # type: ignore[arg-type]
        for scaler, optimizer in zip(scalers, optimizers, strict=True):
            scaler.step(optimizer)
            scaler.update()
        assert scalers[0].get_scale() == scalers[1].get_scale(), step
        assert all(_same(p, q) for p, q in zip(ours, stock, strict=True)), step
        scales.append(scalers[0].get_scale())
    return scales


@pytest.mark.parametrize("same_objects", [True, False])
def test_the_eager_unscale_is_the_scalers_bit_for_bit_and_skips_with_it(
    same_objects: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One multi-tensor call over a list kept while the gradients are the same objects: the
    scaler's step still skips the non-finite step and its update halves the scale, from the
    flag this call left; and the scaler's own walk over the parameters does not run."""
    unscale = EagerUnscale()
    stock_unscale = torch.amp.GradScaler.unscale_
    calls: list[int] = []

    def counted(scaler: torch.amp.GradScaler, optimizer: torch.optim.Optimizer) -> None:
        calls.append(1)
        stock_unscale(scaler, optimizer)

    scales = _stepped_alike(
        unscale, lambda step: _scaled_grads(step, poisoned=3), 6, same_objects=same_objects
    )
    assert scales[2] > scales[0]  # it grew
    assert scales[3] < scales[2]  # and halved at the inf
    monkeypatch.setattr(torch.amp.GradScaler, "unscale_", counted)
    _stepped_alike(unscale, _scaled_grads, 2, same_objects=same_objects)
    assert len(calls) == 2  # the stock twin's calls only


def test_the_eager_unscale_leaves_to_the_scaler_what_one_list_cannot_stand_for() -> None:
    """Off, already unscaled, or gradients of other kinds: the scaler's own call, its checks
    and its messages."""
    unscale = EagerUnscale()
    params = _params()
    optimizer = torch.optim.SGD(params, lr=0.01)
    _set(params, list(_grads(0, 30.0)))
    before = [p.grad.clone() for p in params]  # type: ignore[union-attr]
    unscale(torch.amp.GradScaler("cpu", enabled=False), optimizer)  # unscales nothing
    assert all(_same(p.grad, b) for p, b in zip(params, before, strict=True))  # type: ignore[arg-type]
    scaler = _scaler()
    scaler.scale(torch.ones(()))
    unscale(scaler, optimizer)
    with pytest.raises(RuntimeError, match="already been called"):
        unscale(scaler, optimizer)
    # A half gradient: the scaler's own refusal. A bfloat16 one: its own two lists, same bits.
    half = [torch.nn.Parameter(p.detach().half()) for p in _params()]
    _set(half, [g.half() for g in _grads(0)])
    scaler = _scaler()
    scaler.scale(torch.ones(()))
    with pytest.raises(ValueError, match="FP16"):
        unscale(scaler, torch.optim.SGD(half, lr=0.01))

    def mixed(step: int) -> list[Tensor]:
        grads = _scaled_grads(step)
        return [grads[0].bfloat16(), *grads[1:]]

    _stepped_alike(unscale, mixed, 3, same_objects=True)
