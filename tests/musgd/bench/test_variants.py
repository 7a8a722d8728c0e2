"""The variant table: names, selection, and the external peers' detection."""

from __future__ import annotations

import math
import sys
import types
from typing import Any, cast

import pytest
import torch
from torch import Tensor

from musgd import MuSGD, orthogonalize
from musgd.bench import _variants
from musgd.bench._variants import (
    ULTRALYTICS_MODULE,
    ULTRALYTICS_NAME,
    PeerImportError,
    musgd_variants,
    select_variants,
    torch_muon_variant,
    ultralytics_variant,
)

CPU = torch.device("cpu")


def test_baseline_first_and_builds_musgd() -> None:
    variants = musgd_variants()
    assert [v.name for v in variants[:2]] == ["per-matrix eager", "bucketed eager"]
    opt = variants[0].build([torch.zeros(3, 3, requires_grad=True)])
    assert isinstance(opt, MuSGD)
    assert opt.param_groups[0]["lr"] == _variants.LR


def test_select_by_name_and_unknown_name() -> None:
    chosen = select_variants(["bucketed eager"], CPU)
    assert [v.name for v in chosen] == ["bucketed eager"]
    with pytest.raises(ValueError, match=r"unknown or unavailable variant 'nope'.*per-matrix"):
        select_variants(["nope"], CPU)


def test_cpu_drops_cuda_only_and_trainable_drops_matrix_peers() -> None:
    on_cpu = select_variants(None, CPU)
    assert not any(v.cuda_only for v in on_cpu)
    assert not any(v.matrices_only for v in select_variants(None, CPU, trainable=True))


def test_muon_peer_present_when_torch_has_it() -> None:
    peer = torch_muon_variant()
    if getattr(torch.optim, "Muon", None) is None:
        assert peer is None
        return
    assert peer is not None
    assert peer.matrices_only
    assert isinstance(peer.build([torch.zeros(4, 3, requires_grad=True)]), torch.optim.Optimizer)


def test_muon_peer_absent_or_incompatible(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(torch.optim, "Muon", raising=False)
    assert torch_muon_variant() is None
    assert all(v.name != "torch.optim.Muon" for v in select_variants(None, CPU))

    class OtherMuon:  # a constructor without the arguments the benchmark passes
        def __init__(self, params: Any, lr: float) -> None: ...

    monkeypatch.setattr(torch.optim, "Muon", OtherMuon, raising=False)
    assert torch_muon_variant() is None


class FakeUltralyticsMuSGD(torch.optim.SGD):
    """Stands in for the installed peer: records the documented constructor arguments."""

    def __init__(self, params: Any, **kwargs: Any) -> None:
        self.kwargs = kwargs
        self.groups_given = [dict(g) for g in params]
        super().__init__([{"params": g["params"]} for g in self.groups_given], lr=kwargs["lr"])


def _install_fake_peer(monkeypatch: pytest.MonkeyPatch, module: object) -> None:
    monkeypatch.setattr(_variants, "_module_found", lambda name: name == "ultralytics")
    monkeypatch.setitem(sys.modules, ULTRALYTICS_MODULE, module)


def test_ultralytics_peer_absent_when_not_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_variants, "_module_found", lambda name: False)
    assert ultralytics_variant() is None
    assert all(v.name != ULTRALYTICS_NAME for v in select_variants(None, CPU))


def test_ultralytics_peer_gets_muon_and_sgd_groups_and_times_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _install_fake_peer(monkeypatch, types.SimpleNamespace(MuSGD=FakeUltralyticsMuSGD))
    peer = ultralytics_variant()
    assert peer is not None
    assert peer.timing_only
    assert [v.name for v in select_variants([ULTRALYTICS_NAME], CPU)] == [ULTRALYTICS_NAME]
    assert all(v.name != ULTRALYTICS_NAME for v in select_variants(None, CPU, trainable=True))
    conv, bias = torch.zeros(8, 4, 3, 3), torch.zeros(8)
    opt = peer.build([conv, bias])
    assert isinstance(opt, FakeUltralyticsMuSGD)
    assert opt.kwargs == {
        "lr": _variants.LR,
        "momentum": _variants.MOMENTUM,
        "nesterov": True,
        "weight_decay": 0.0,
        "muon": 0.2,
        "sgd": 1.0,
    }
    assert [(g["use_muon"], g["params"]) for g in opt.groups_given] == [
        (True, [conv]),
        (False, [bias]),
    ]


def test_ultralytics_peer_that_does_not_import_says_how_to_leave_it_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _install_fake_peer(monkeypatch, None)  # a None entry in sys.modules makes import fail
    peer = ultralytics_variant()
    assert peer is not None
    with pytest.raises(PeerImportError, match=r"did not import.*--variants"):
        peer.build([torch.zeros(3, 3)])


def test_graphed_variants_time_a_whole_step_graph_on_cuda_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _install_fake_peer(monkeypatch, types.SimpleNamespace(MuSGD=FakeUltralyticsMuSGD))
    names = [v.name for v in _variants.all_variants()]
    assert "bucketed eager graphed" in names
    assert f"{ULTRALYTICS_NAME} graphed" in names
    graphed = [v for v in _variants.all_variants() if v.whole_graph]
    # The default and tensor-hyperparameter steps, one per schedule, the peer's.
    assert len(graphed) == 6
    schedules = [v.name for v in _variants.schedule_variants()]
    assert schedules == [f"torch-NS {n} graphed" for n in ("quintic", "polar_express", "aol4")]
    aol4 = _variants.schedule_variants()[2].build([torch.zeros(4, 4, requires_grad=True)])
    assert aol4.param_groups[0]["ns_steps"] == 4
    assert aol4.param_groups[0]["ns_normalize"] == "aol"
    assert all(v.cuda_only for v in graphed)
    # Frozen values make a step captured whole timing-only; tensor hyperparameters let it train.
    trainable = [v.name for v in graphed if not v.timing_only]
    assert trainable == ["tensor-hyperparameters graphed"]
    assert all(not v.whole_graph for v in select_variants(None, CPU))
    with pytest.raises(ValueError, match="unknown or unavailable variant 'bucketed eager graphed'"):
        select_variants(["bucketed eager graphed"], CPU)
    opt = musgd_variants()[1].build([torch.zeros(3, 3, requires_grad=True)])
    assert musgd_variants()[1].stepper(opt) is opt
    assert isinstance(graphed[0].stepper(opt), _variants.WholeStepGraph)


def test_ultralytics_flavour_variants_build_ours_on_the_peer_groups_without_ultralytics(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from musgd.ultralytics import UltralyticsMuSGD

    monkeypatch.setattr(_variants, "_module_found", lambda name: False)
    names = [v.name for v in select_variants(None, CPU)]
    assert f"{_variants.FLAVOUR_NAME} eager" in names
    assert f"{_variants.FLAVOUR_NAME} both" not in names  # replay flags: CUDA only
    (eager,) = select_variants([f"{_variants.FLAVOUR_NAME} eager"], CPU)
    assert eager.timing_only
    conv = torch.randn(8, 4, 3, 3, requires_grad=True)
    bias = torch.randn(8, requires_grad=True)
    opt = eager.build([conv, bias])
    assert isinstance(opt, UltralyticsMuSGD)
    assert (opt.muon, opt.sgd) == (0.2, 1.0)
    assert [(g["use_muon"], g["params"]) for g in opt.param_groups] == [
        (True, [conv]),
        (False, [bias]),
    ]
    before = conv.detach().clone()
    conv.grad, bias.grad = torch.ones_like(conv), torch.ones_like(bias)
    opt.step()
    assert not torch.equal(conv.detach(), before)
    assert set(opt.state[conv]) >= {"momentum_buffer", "momentum_buffer_SGD"}


def test_tensor_hyperparameter_variant_holds_lr_and_momentum_on_the_parameters_device() -> None:
    variant = next(v for v in musgd_variants() if v.name == "tensor-hyperparameters graphed")
    p = torch.nn.Parameter(torch.zeros(4, 4))
    opt = variant.build([{"params": [p], "weight_decay": 0.0}])
    group = opt.param_groups[0]
    for name, value in (("lr", _variants.LR), ("momentum", _variants.MOMENTUM)):
        assert isinstance(group[name], torch.Tensor)
        assert group[name].device == p.device
        assert float(group[name]) == pytest.approx(value)
    assert group["weight_decay"] == 0.0, "a group's own values stay as given"


def test_ns_only_variants_time_each_schedules_newton_schulz_alone_on_the_cpu() -> None:
    """One NS-only variant per schedule, on the default backend: on the CPU its jobs are the
    torch backend's batched calls (no graph, saying why), each the Muon-scaled schedule of the
    group's matrices (their gradients standing in for the momenta), and a step changes no
    parameter, gradient or buffer."""
    variants = _variants.ns_only_variants()
    names = [f"NS-only {n}" for n in (*_variants.SCHEDULE_NAMES, "torch", "gram", "aol4 gram")]
    assert [v.name for v in variants] == names
    assert all(v.ns_only and v.timing_only and not v.cuda_only for v in variants)
    assert [v.name for v in select_variants(["NS-only aol4"], CPU)] == ["NS-only aol4"]
    gen = torch.Generator().manual_seed(0)
    for variant in variants:
        params = [torch.randn(s, generator=gen).requires_grad_() for s in ((8, 4, 3, 3), (8,))]
        grads = [torch.randn(p.shape, generator=gen) for p in params]
        for p, g in zip(params, grads, strict=True):
            p.grad = g
        before = [t.detach().clone() for t in (*params, *grads)]
        opt = variant.build(params)
        stepper = variant.stepper(opt)
        assert isinstance(stepper, _variants.NSOnlyStep)
        stepper.step()
        stepper.step()
        name = variant.name.removeprefix("NS-only ")
        backend = "gram" if name.endswith("gram") else "torch"
        schedule = name.split()[0] if name.split()[0] in _variants.SCHEDULE_NAMES else "quintic"
        assert stepper.backends == (backend,)
        assert stepper.skipped is not None
        assert "needs CUDA (cpu)" in stepper.skipped
        assert stepper.describe() == {
            "ran": "newton-schulz only",
            "backends": [backend],
            "graphed": False,
            "not_graphed_because": stepper.skipped,
        }
        assert all(p.grad is g for p, g in zip(params, grads, strict=True))
        after = [t.detach() for t in (*params, *grads)]
        assert all(torch.equal(a, b) for a, b in zip(before, after, strict=True))
        assert not opt.state, "no momentum buffer: the step ran no momentum"
        (job,) = stepper._prepare()
        steps = 4 if schedule == "aol4" else 5
        expected = orthogonalize(
            grads[0].reshape(8, 36),
            coefficients=schedule,
            steps=steps,
            dtype=torch.float32,
            iteration="gram" if backend == "gram" else "standard",
        ) * (0.2 * math.sqrt(36))
        torch.testing.assert_close(cast(Tensor, job()).reshape(8, 36), expected)
