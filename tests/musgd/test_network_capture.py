"""NetworkCapture on the CPU with a fake grapher: keys, fallbacks, BatchNorm statistics, bits.

The fake grapher (``replay_fakes.FakeNetworkGrapher``) warms up as the real one does and then
runs the module eagerly, so a captured training must match an eager one bit for bit; the real
recording (``CudaNetworkGrapher``, CUDA graphs) is exercised on the GPU (tests/cuda).
"""

from __future__ import annotations

import copy
import weakref
from collections import Counter
from collections.abc import Callable
from typing import cast

import pytest
import torch
from network_common import (
    TinyDetector,
    captured_copy,
    detector_inputs,
    detector_loss,
    module_state,
    same_tensors,
    train_detector,
)
from replay_fakes import FakeNetworkGrapher
from torch import Tensor, nn
from torch.utils._python_dispatch import TorchDispatchMode

from musgd._network_capture import (
    RECORDINGS_BOUND,
    NetworkCapture,
    _CudaRecording,
    compiled_predict,
    direct_hand_off,
    flatten,
    grad_buffer,
    hand_grads,
    keep_accumulated,
    obeys_layout,
    parameter_twin,
    unflatten,
)


def test_flatten_keeps_distinct_tensors_once_and_rebuilds_the_nesting() -> None:
    a, b = torch.ones(2), torch.zeros(3)
    out = {"x": [a, (b, a)], "y": {"z": b}}
    flat, spec = flatten(out)
    assert len(flat) == 2
    assert flat[0] is a
    assert flat[1] is b
    again = unflatten(spec, [a + 1, b + 1])
    assert isinstance(again["x"], list)
    assert isinstance(again["x"][1], tuple)
    assert again["x"][0] is again["x"][1][1]  # a shared tensor stays shared
    assert torch.equal(again["y"]["z"], b + 1)
    with pytest.raises(TypeError, match="returned a str"):
        flatten({"x": "text"})


def test_a_captured_training_is_the_eager_one_bit_for_bit() -> None:
    torch.manual_seed(0)
    eager = TinyDetector()
    grapher = FakeNetworkGrapher()
    captured, capture = captured_copy(eager, grapher)
    imgs = detector_inputs(6)
    assert train_detector(captured, imgs) == train_detector(eager, imgs)
    # The warm-up moved BatchNorm statistics three times per recording; they were put back.
    assert same_tensors(module_state(captured), module_state(eager))
    assert captured.bn.num_batches_tracked.item() == 6  # type: ignore[union-attr]
    assert (capture.stats.recordings, capture.stats.replays) == (1, 5)
    assert capture.stats.fallbacks == {"first-call": 1}
    assert grapher.graphed == 1
    assert eager.unused.grad is None
    assert captured.unused.grad is None


def test_each_input_layout_records_once_within_the_bound() -> None:
    model = TinyDetector()
    capture = NetworkCapture(model, grapher=FakeNetworkGrapher()).install()
    for batch in range(1, RECORDINGS_BOUND + 3):
        for img in detector_inputs(2, batch):
            model(img).get("one2many")
    # Past the bound a new layout runs eagerly at every call, first or not.
    assert capture.stats.recordings == RECORDINGS_BOUND
    assert capture.stats.fallbacks == {"first-call": RECORDINGS_BOUND, "bound": 4}
    assert capture.stats.replays == RECORDINGS_BOUND


def test_what_a_graph_cannot_stand_for_runs_the_original() -> None:
    model = TinyDetector()
    capture = NetworkCapture(model, grapher=FakeNetworkGrapher()).install()
    img = detector_inputs(1)[0]
    model.predict(img, True)  # an extra argument (Ultralytics' profile/visualize flags)
    with torch.no_grad():
        model(img)
    model.eval()
    model(img)
    model.train()
    model(img.requires_grad_())
    assert capture.stats.fallbacks == {
        "arguments": 1,
        "no-grad": 1,
        "eval": 1,
        "input-requires-grad": 1,
    }
    assert capture.stats.recordings == 0


def test_a_device_the_grapher_does_not_support_runs_the_original() -> None:
    class CudaOnly(FakeNetworkGrapher):
        def supports(self, device: torch.device) -> bool:
            return device.type == "cuda"

    model = TinyDetector()
    capture = NetworkCapture(model, grapher=CudaOnly()).install()
    for img in detector_inputs(3):
        model(img)
    assert capture.stats.fallbacks == {"device:cpu": 3}


def test_a_failed_recording_puts_the_statistics_back_and_stays_eager() -> None:
    torch.manual_seed(0)
    eager = TinyDetector()
    model, capture = captured_copy(eager, FakeNetworkGrapher(fail=True))
    imgs = detector_inputs(4)
    # One warning, with the grapher's message, however many layouts fail after it.
    with pytest.warns(RuntimeWarning) as caught:
        captured_losses = train_detector(model, imgs)
    assert [str(w.message) for w in caught] == [
        "NetworkCapture: recording the network for input (2, 3, 8, 8) failed (RuntimeError: "
        "fake graphing failure); that input runs eagerly"
    ]
    assert captured_losses == train_detector(eager, imgs)
    assert same_tensors(module_state(model), module_state(eager))
    assert capture.stats.failures == 1
    assert capture.stats.fallbacks == {
        "first-call": 1,
        "record-failed:RuntimeError": 1,
        "not-recordable": 2,
    }


def test_install_and_uninstall_leave_the_class_method() -> None:
    model = TinyDetector()
    capture = NetworkCapture(model, grapher=FakeNetworkGrapher())
    assert not capture.installed
    capture.install().install()
    assert capture.installed
    assert model.predict == capture.predict
    capture.uninstall()
    assert not capture.installed
    assert "predict" not in model.__dict__
    assert model.predict.__func__ is TinyDetector.predict
    with pytest.raises(TypeError, match="needs an Ultralytics model"):
        NetworkCapture(nn.Linear(2, 2))


def test_uninstall_puts_back_the_instance_predict_it_shadowed() -> None:
    model = TinyDetector()
    own = model.predict
    model.__dict__["predict"] = own
    capture = NetworkCapture(model, grapher=FakeNetworkGrapher()).install()
    assert model.predict == capture.predict
    capture.uninstall()
    assert model.__dict__["predict"] is own


def test_a_parameter_twin_shares_memory_and_buffers_and_differentiates_its_stand_ins() -> None:
    torch.manual_seed(0)
    model = TinyDetector(share_head=True)
    model.__dict__["predict"] = model.predict  # an instance predict is not copied
    stand_ins = {
        n: nn.Parameter(p.detach(), requires_grad=p.requires_grad)
        for n, p in model.named_parameters()
    }
    twin = parameter_twin(model, stand_ins)
    assert "predict" in model.__dict__
    assert "predict" not in twin.__dict__
    for (name, p), (twin_name, q) in zip(
        model.named_parameters(), twin.named_parameters(), strict=True
    ):
        assert name == twin_name
        assert q is stand_ins[name]
        assert q.data_ptr() == p.data_ptr()
    assert twin.head_one2one is twin.head  # a shared module stays shared, its weight one leaf
    assert twin.bn.running_mean is model.bn.running_mean  # type: ignore[union-attr]
    loss = detector_loss(twin.predict(detector_inputs(1)[0]))  # type: ignore[operator]
    leaves = list(stand_ins.values())
    grads = dict(zip(stand_ins, torch.autograd.grad(loss, leaves, allow_unused=True), strict=True))
    assert grads["conv.weight"] is not None
    assert grads["unused"] is None
    assert all(p.grad is None for p in model.parameters())  # the model's own are untouched
    with pytest.raises(KeyError, match="no stand-in for the parameter 'unused'"):
        parameter_twin(model, {})


@pytest.mark.slow  # compiles TinyDetector's forward and backward with Inductor (seconds)
def test_compiled_training_calls_run_the_compiled_predict_where_none_is_recorded() -> None:
    """On a device the grapher does not record, ``compile=True`` still runs every training call
    as the compiled network: the same bits as the model's own compiled predict, and a loss
    within rounding of the eager network's. Evaluation calls run the original."""
    torch.manual_seed(0)
    eager = TinyDetector()
    reference = copy.deepcopy(eager)
    reference.__dict__["predict"] = compiled_predict(reference)
    captured = copy.deepcopy(eager)
    capture = NetworkCapture(captured, compile=True).install()
    imgs = detector_inputs(4)
    compiled_losses = train_detector(reference, imgs)
    assert train_detector(captured, imgs) == compiled_losses
    assert same_tensors(module_state(captured), module_state(reference))
    assert capture.stats.fallbacks["device:cpu"] == 4
    assert capture.stats.recordings == 0
    assert compiled_losses == pytest.approx(train_detector(eager, imgs), rel=1e-5)
    captured.eval()
    with torch.no_grad():
        captured.predict(imgs[0])
    assert capture.stats.fallbacks["eval"] == 1
    with pytest.raises(ValueError, match="makes its own grapher"):
        NetworkCapture(eager, compile=True, grapher=FakeNetworkGrapher())
    with pytest.raises(TypeError, match="model class with predict"):
        compiled_predict(nn.Linear(2, 2))


def test_keep_accumulated_copies_out_only_a_grad_on_the_recordings_memory() -> None:
    static = [torch.full((2,), 1.0), torch.full((3,), 2.0), None]
    a, b, c = (
        torch.zeros(2, requires_grad=True),
        torch.zeros(3, requires_grad=True),
        torch.zeros(1, requires_grad=True),
    )
    a.grad = static[0].detach()  # type: ignore[union-attr]  # kept by autograd: the recording's memory
    b.grad = torch.full((3,), 5.0)  # a .grad of its own
    c.grad = torch.full((1,), 7.0)  # a parameter the network does not use
    own_b, own_c = b.grad, c.grad
    keep_accumulated([a, b, c], static)
    assert a.grad is not None
    assert a.grad.data_ptr() != static[0].data_ptr()  # type: ignore[union-attr]
    assert torch.equal(a.grad, torch.full((2,), 1.0))
    assert b.grad is own_b
    assert c.grad is own_c
    d = torch.zeros(2, requires_grad=True)  # no .grad yet: nothing to keep
    keep_accumulated([d], [static[0]])
    assert d.grad is None


class _Ops(TorchDispatchMode):
    """Counts the aten operations run under it, by name."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.names: Counter[str] = Counter()

    def __torch_dispatch__(  # type: ignore[no-untyped-def]
        self, func, types, args=(), kwargs=None
    ):
        self.names[str(func.overloadpacket.__name__)] += 1
        return func(*args, **(kwargs or {}))


def test_kept_gradients_lie_in_one_buffer_in_their_layouts_copied_in_one_pass() -> None:
    static = [
        torch.randn(4, 3, 2, 2).to(memory_format=torch.channels_last),
        torch.randn(5),
        torch.randn(3, 7),
    ]
    params = [torch.zeros_like(s, memory_format=torch.preserve_format) for s in static]
    for p, s in zip(params, static, strict=True):
        p.requires_grad_()
        p.grad = s.detach()
    with _Ops() as ops:
        keep_accumulated(params, static)
    assert ops.names["_foreach_copy_"] == 1
    assert ops.names["clone"] == 0
    kept = [p.grad for p in params]
    assert all(k is not None for k in kept)
    bases = {k._base.data_ptr() for k in kept if k is not None and k._base is not None}
    assert len(bases) == 1  # one buffer
    for k, s in zip(kept, static, strict=True):
        assert k is not None
        assert k.stride() == s.stride()
        assert k.data_ptr() != s.data_ptr()
        assert torch.equal(k, s)


def test_hand_grads_adds_every_accumulated_gradient_in_one_pass() -> None:
    params = [torch.zeros(3, requires_grad=True), torch.zeros(2, 2, requires_grad=True)]
    first = [torch.randn(3), torch.randn(2, 2)]
    second = [torch.randn(3), torch.randn(2, 2)]
    hand_grads(params, first, [True, True])
    keep_accumulated(params, first)  # the next replay would overwrite them: copied out
    held = [p.grad for p in params]
    with _Ops() as ops, torch.no_grad():  # as in a backward
        hand_grads(params, second, [True, True])
    assert ops.names["_foreach_add_"] == 1
    assert ops.names["add_"] == 0
    for p, h, a, b in zip(params, held, first, second, strict=True):
        assert p.grad is h  # added in place
        assert h is not None
        assert torch.equal(h, a + b)
    # Two parameters holding one .grad object: added in turn, as one += each would.
    shared = torch.ones(3)
    twins = [torch.zeros(3, requires_grad=True), torch.zeros(3, requires_grad=True)]
    for t in twins:
        t.grad = shared
    with torch.no_grad():
        hand_grads(twins, [torch.full((3,), 2.0), torch.full((3,), 5.0)], [True, True])
    assert torch.equal(shared, torch.full((3,), 8.0))


def test_a_recording_checks_the_gradients_again_only_when_one_changed() -> None:
    module = _two_layers()
    rec = _eager_recording(module, torch.randn(1, 3, 5, 5))
    _backward_through(rec, torch.randn(1, 3, 5, 5), 1.0)  # hands views of rec.grads
    first, static = next(iter(module.parameters())), rec.grads[0]
    assert first.grad is not None
    assert static is not None
    assert first.grad.data_ptr() == static.data_ptr()
    with _Ops() as ops:
        rec.replay_forward(rec.static_img)  # a new object: checked, copied out
    assert ops.names["_foreach_copy_"] == 1
    copied = first.grad
    assert copied.data_ptr() != static.data_ptr()
    rec._keep_accumulated()  # nothing changed: no walk
    assert first.grad is copied
    first.grad = static.detach()  # handed again by hand: a new object, checked again
    rec._keep_accumulated()
    assert first.grad.data_ptr() != static.data_ptr()
    # The check holds no gradient: one dropped by zero_grad is freed at once.
    gone = weakref.ref(first.grad)
    del copied
    module.zero_grad(set_to_none=True)
    assert gone() is None
    rec._keep_accumulated()  # every .grad None now: checked, nothing to keep
    assert first.grad is None


def test_grad_buffer_takes_the_eager_gradients_layout_where_it_can() -> None:
    out = torch.zeros(2, 3, 4, 5).to(memory_format=torch.channels_last)
    assert grad_buffer(out, (60, 20, 5, 1)).is_contiguous()
    assert grad_buffer(out, None).is_contiguous(memory_format=torch.channels_last)
    expanded = grad_buffer(out, (0, 0, 0, 0))  # not a layout a buffer can take: out's own
    assert expanded.is_contiguous(memory_format=torch.channels_last)
    assert expanded.dtype == out.dtype


def test_the_recording_gets_the_strides_of_the_first_calls_gradients() -> None:
    model = TinyDetector().to(memory_format=torch.channels_last)  # type: ignore[call-overload]
    grapher = FakeNetworkGrapher()
    NetworkCapture(model, grapher=grapher).install()
    seen: list[tuple[int, ...]] = []
    imgs = detector_inputs(3)
    out = model(imgs[0])  # the first call: eager, hooked
    out["one2many"]["boxes"].register_hook(lambda g: seen.append(tuple(g.stride())))
    detector_loss(out).backward()
    model(imgs[1])  # the second: recorded, with what the first call's backward showed
    (strides,) = grapher.grad_strides
    # Flat order: one2many boxes, feats, one2one boxes, one2one feats (detached: no gradient).
    assert strides[0] == seen[0]
    assert all(isinstance(s, tuple) for s in strides[:3])
    assert strides[3] is None


def test_a_network_whose_output_a_graph_cannot_give_back_stays_eager() -> None:
    class Labelled(TinyDetector):
        def predict(self, img: torch.Tensor, *args: object, **kwargs: object) -> object:
            return {"boxes": super().predict(img), "names": ["person"]}

    eager = Labelled()
    model, capture = captured_copy(eager, FakeNetworkGrapher())
    imgs = detector_inputs(3)
    with pytest.warns(RuntimeWarning, match=r"failed \(TypeError: NetworkCapture: the network "):
        got = [model(img)["boxes"]["one2many"]["boxes"] for img in imgs]
    want = [eager(img)["boxes"]["one2many"]["boxes"] for img in imgs]
    assert same_tensors(got, want)
    assert capture.stats.fallbacks == {
        "first-call": 1,
        "record-failed:TypeError": 1,
        "not-recordable": 1,
    }


class _EagerGraph:
    """A stand-in for a CUDA graph: ``replay`` runs ``body``."""

    def __init__(self, body: Callable[[], None]) -> None:
        self.body = body

    def replay(self) -> None:
        self.body()


def _eager_recording(module: nn.Module, img: Tensor) -> _CudaRecording:
    """A :class:`_CudaRecording` of ``module`` whose two graphs run eagerly on the CPU, into the
    recording's static tensors as the captured graphs write them (what the real one records is
    tested on the GPU)."""
    rec = _CudaRecording.__new__(_CudaRecording)
    rec.static_img = img.detach().clone()
    forward = rec._eager_forward(module)
    outs = forward()
    rec.differentiable = tuple(o.requires_grad for o in outs)
    rec.outputs = tuple(o.detach().clone() for o in outs)
    rec.grad_outputs = [torch.empty_like(o) for o in outs if o.requires_grad]
    grads = tuple(torch.zeros_like(p) for p in rec._leaves)
    rec.grads = grads
    live: dict[str, tuple[Tensor, ...]] = {}

    def run_forward() -> None:
        with torch.enable_grad():  # an autograd.Function's forward runs without it
            live["outs"] = forward()
        for static, o in zip(rec.outputs, live["outs"], strict=True):
            static.copy_(o.detach())

    def run_backward() -> None:
        wanted = [o for o in live["outs"] if o.requires_grad]
        fresh = torch.autograd.grad(wanted, rec._leaves, rec.grad_outputs)
        for static, g in zip(grads, fresh, strict=True):
            static.copy_(g)

    rec._forward, rec._backward = _EagerGraph(run_forward), _EagerGraph(run_backward)  # type: ignore[assignment]
    rec.obeys = tuple(obeys_layout(g, p) for p, g in zip(rec.params, grads, strict=True))
    rec.anchor = torch.empty(0, requires_grad=True)
    return rec


class _TwoLayers(nn.Sequential):
    """Two convolutions whose output is a flat tuple, as a recording's module gives it."""

    def forward(self, x: Tensor) -> tuple[Tensor, ...]:
        return (super().forward(x),)  # type: ignore[no-untyped-call,unused-ignore]


def _conv(module: nn.Module, index: int) -> nn.Conv2d:
    layer = cast(nn.Sequential, module)[index]
    assert isinstance(layer, nn.Conv2d)
    return layer


def _two_layers() -> nn.Sequential:
    torch.manual_seed(0)
    return _TwoLayers(nn.Conv2d(3, 4, 3), nn.SiLU(), nn.Conv2d(4, 2, 1))


def _backward_through(rec: _CudaRecording, img: Tensor, scale: float) -> None:
    (out,) = rec.run(img)
    (out * scale).square().sum().backward()


def _grads(module: nn.Module) -> list[Tensor]:
    grads = [p.grad for p in module.parameters()]
    assert all(g is not None for g in grads)
    return [g.clone() for g in grads if g is not None]


@pytest.mark.parametrize("accumulate", [False, True])
def test_a_replay_that_hands_gradients_gives_autograds_bits(accumulate: bool) -> None:
    """The handing replay and autograd's hand-off leave the same ``.grad`` bits, each iteration
    from scratch (``zero_grad``) or summed over iterations; a handed gradient is a view of the
    recording's memory, as autograd's is."""
    imgs = [torch.randn(2, 3, 6, 6, generator=torch.Generator().manual_seed(i)) for i in range(3)]
    results = []
    for handing in (True, False):
        module = _two_layers()
        rec = _eager_recording(module, imgs[0])
        if not handing:  # a hook sends the replay through autograd's hand-off
            _conv(module, 0).weight.register_hook(lambda g: g)
        assert direct_hand_off(rec.params) is handing
        for i, img in enumerate(imgs):
            if not accumulate:
                module.zero_grad(set_to_none=True)
            _backward_through(rec, img, 1.0 + i)
        results.append(_grads(module))
        if handing and not accumulate:
            first = next(iter(module.parameters()))
            assert first.grad is not None
            assert first.grad.data_ptr() == rec.grads[0].data_ptr()  # type: ignore[union-attr]
    eager = _two_layers()
    for i, img in enumerate(imgs):
        if not accumulate:
            eager.zero_grad(set_to_none=True)
        (eager(img)[0] * (1.0 + i)).square().sum().backward()
    assert same_tensors(results[0], results[1])
    assert same_tensors(results[0], _grads(eager))


def test_a_hook_or_a_frozen_parameter_goes_through_autograd() -> None:
    module = _two_layers()
    rec = _eager_recording(module, torch.randn(1, 3, 5, 5))
    assert direct_hand_off(rec.params)
    first_bias, last_bias = _conv(module, 0).bias, _conv(module, 2).bias
    assert first_bias is not None
    assert last_bias is not None
    calls: list[int] = []
    handle = last_bias.register_post_accumulate_grad_hook(lambda p: calls.append(1))
    assert not direct_hand_off(rec.params)
    _backward_through(rec, torch.randn(1, 3, 5, 5), 1.0)
    assert calls == [1]  # autograd ran the hook
    handle.remove()
    module.zero_grad(set_to_none=True)
    first_bias.requires_grad_(False)
    assert not direct_hand_off(rec.params)
    _backward_through(rec, torch.randn(1, 3, 5, 5), 1.0)
    assert first_bias.grad is None  # frozen: no gradient, as in eager autograd
    assert _conv(module, 0).weight.grad is not None


def test_a_gradient_in_another_layout_is_handed_in_the_parameters() -> None:
    param = torch.zeros(4, 3, 2, 2).to(memory_format=torch.channels_last).requires_grad_()
    grad = torch.randn(4, 3, 2, 2)  # contiguous
    assert not obeys_layout(grad, param)
    assert obeys_layout(grad.to(memory_format=torch.channels_last), param)
    assert obeys_layout(torch.randn(1, 3), torch.zeros(1, 3).t().contiguous().t())  # size-1 dim
    hand_grads([param], [grad], [False])
    assert param.grad is not None
    assert param.grad.stride() == param.stride()
    assert torch.equal(param.grad, grad)
    hand_grads([param], [grad], [False])  # a second one adds in place
    assert torch.equal(param.grad, grad + grad)
    with torch.enable_grad():  # as under create_graph: out of place
        before = param.grad
        hand_grads([param], [grad], [False])
        assert param.grad is not before


def test_a_pool_reaches_the_default_grapher_and_refuses_a_given_one() -> None:
    from musgd._network_capture import CudaNetworkGrapher
    from musgd._replay import GraphPool

    def pool_of(capture: NetworkCapture) -> GraphPool | None:
        grapher = capture.grapher
        assert isinstance(grapher, CudaNetworkGrapher)
        return grapher.pool

    pool = GraphPool()
    assert pool_of(NetworkCapture(TinyDetector(), pool=pool)) is pool
    assert pool_of(NetworkCapture(TinyDetector(), compile=True, pool=pool)) is pool
    assert pool_of(NetworkCapture(TinyDetector())) is None
    with pytest.raises(ValueError, match="pass no grapher"):
        NetworkCapture(TinyDetector(), grapher=CudaNetworkGrapher(), pool=pool)
