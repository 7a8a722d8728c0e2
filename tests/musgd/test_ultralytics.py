"""The Ultralytics-compatible flavour on CPU, without the Ultralytics package.

Against an independent float64 reference of shared/specs/ultralytics-compat.md written here (not
calling the production code), replay through the fake recorder, the state-dict layout, the
checks of bad input, and the trainer factory on a stand-in trainer class. The comparison with
the installed Ultralytics package is tests/ultralytics/ (its own environment, `make test`).
"""

from __future__ import annotations

import copy
import io
import logging
import math
import sys
import types
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import torch
from replay_common import assert_same
from replay_fakes import FakeRecorder
from torch import Tensor, nn
from torch.utils._python_dispatch import TorchDispatchMode

import musgd.ultralytics as trainer_module
from musgd import GradClipReplay, MuSGD, _functional
from musgd import _ultralytics_optim as flavour
from musgd.ultralytics import (
    UltralyticsMuSGD,
    from_stock,
    muon_scale,
    musgd_trainer,
    require_ultralytics,
)

# Conv kernels incl. depthwise (C, 1, 3, 3) and kh != kw, and plain matrices; two share a bucket.
MATRICES = [(16, 3, 3, 3), (32, 16, 3, 1), (24, 1, 3, 3), (24, 1, 3, 3), (40, 8), (8, 40)]
VECTORS = [(16,), (32,), (24,)]
KW: dict[str, Any] = {"lr": 0.02, "momentum": 0.9, "nesterov": True, "muon": 0.2, "sgd": 1.0}


def make_params(seed: int = 0) -> list[torch.nn.Parameter]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(s, generator=gen) * 0.5) for s in MATRICES + VECTORS]


def stock_groups(params: list[torch.nn.Parameter], decay: float = 5e-4) -> list[dict[str, Any]]:
    """Groups as the Ultralytics trainer builds them: muon matrices, bn weights, biases."""
    m = len(MATRICES)
    return [
        {"params": params[:m], "use_muon": True, "weight_decay": decay, "param_group": "muon"},
        {"params": params[m : m + 2], "weight_decay": 0.0, "param_group": "bn"},
        {"params": params[m + 2 :], "weight_decay": decay, "param_group": "bias"},
    ]


def set_grads(
    params: list[torch.nn.Parameter], step: int, skip: frozenset[int] = frozenset()
) -> None:
    gen = torch.Generator().manual_seed(100 + step)
    for i, p in enumerate(params):
        g = torch.randn(p.shape, generator=gen)
        p.grad = None if i in skip else g


def warmup(opt: torch.optim.Optimizer, step: int) -> None:
    """What the trainer's warm-up does: write lr and momentum into every group each iteration."""
    for group in opt.param_groups:
        group["lr"] = 0.02 * (step + 1) / 8
        group["momentum"] = 0.8 + 0.015 * step


def _ns64(G: Tensor) -> Tensor:
    """Quintic Newton–Schulz in float64 (the spec's coefficients, 5 steps, eps 1e-7)."""
    a, b, c = 3.4445, -4.7750, 2.0315
    X = G.double()
    tall = X.shape[0] > X.shape[1]
    if tall:
        X = X.T
    X = X / (X.norm() + 1e-7)
    for _ in range(5):
        A = X @ X.T
        X = a * X + (b * A + c * A @ A) @ X
    out: Tensor = X.T if tall else X
    return out


class Reference:
    """The spec's update rule in float64, one parameter at a time, Muon write before SGD write."""

    def __init__(self, params: Sequence[Tensor], groups: list[dict[str, Any]]) -> None:
        self.p = [t.detach().double().clone() for t in params]
        self.groups = groups  # dicts with "idx", "use_muon", "weight_decay"
        self.m: dict[int, Tensor] = {}
        self.s: dict[int, Tensor] = {}

    def step(self, grads: list[Tensor | None], lr: float, beta: float, nesterov: bool) -> None:
        for group in self.groups:
            wd = group["weight_decay"]
            for i in group["idx"]:
                g = grads[i]
                if g is None:
                    continue
                g = g.double()
                P = self.p[i]
                if group["use_muon"]:
                    m = self.m.setdefault(i, torch.zeros_like(P))
                    m.mul_(beta).add_((1 - beta) * g)
                    u = beta * m + (1 - beta) * g if nesterov else m
                    O = _ns64(u.reshape(P.shape[0], -1)).reshape(P.shape)
                    O = O * math.sqrt(max(1.0, P.shape[-2] / P.shape[-1]))
                    P.sub_(lr * KW["muon"] * O)
                    gd = g + wd * P
                    s = self.s.setdefault(i, torch.zeros_like(P))
                    s.mul_(beta).add_(gd)
                    v = gd + beta * s if nesterov else s
                    P.sub_(lr * KW["sgd"] * v)
                else:
                    gd = g + wd * P
                    m = self.m.setdefault(i, torch.zeros_like(P))
                    m.mul_(beta).add_(gd)
                    v = gd + beta * m if nesterov else m
                    P.sub_(lr * v)


def _ref_groups(decay: float = 5e-4) -> list[dict[str, Any]]:
    m = len(MATRICES)
    return [
        {"idx": range(m), "use_muon": True, "weight_decay": decay},
        {"idx": range(m, m + 2), "use_muon": False, "weight_decay": 0.0},
        {"idx": range(m + 2, m + 3), "use_muon": False, "weight_decay": decay},
    ]


def _rel(a: Tensor, b: Tensor, scale: Tensor) -> float:
    return float((a.double() - b.double()).norm() / scale.double().norm().clamp_min(1e-30))


@pytest.mark.parametrize(("ns_dtype", "tol"), [(torch.float32, 1e-5), (torch.bfloat16, 2**-8)])
@pytest.mark.parametrize("nesterov", [True, False])
@pytest.mark.parametrize("stacks", ["cpu", "cuda"])
def test_steps_match_a_float64_reference_of_the_spec(
    ns_dtype: torch.dtype, tol: float, nesterov: bool, stacks: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Eight warm-up steps (lr and momentum change every step), one gradient skipped at step 3.

    The tolerance is relative to each parameter's total change: bf16 Newton-Schulz carries a
    unit roundoff of 2**-8 into the orthogonalized part; in float32 it is 1e-5. ``stacks="cuda"``
    stacks the matrices as on a GPU (padded blocks, wide and tall together, one transposed).
    """
    if stacks == "cuda":
        monkeypatch.setitem(_functional.PAD_BOUNDS, "cpu", _functional.PAD_BOUNDS["cuda"])
    layout = _functional.build_layout(
        make_params()[: len(MATRICES)], True, pad=_functional.pad_bound(torch.device("cpu"))
    )
    if stacks == "cuda":  # the GPU bound must pad and transpose here, or this tests nothing
        assert any(b.padded for b in layout.buckets)
        assert any(any(b.transposed) for b in layout.buckets)
    calls: list[int] = []
    batched = _functional.EagerOrthogonalizer.batched

    def counting(self: Any, G: Tensor, ns: Any) -> Tensor:
        calls.append(G.shape[0])
        return batched(self, G, ns)

    monkeypatch.setattr(_functional.EagerOrthogonalizer, "batched", counting)
    params = make_params()
    init = [p.detach().clone() for p in params]
    opt = UltralyticsMuSGD(stock_groups(params), ns_dtype=ns_dtype, **{**KW, "nesterov": nesterov})
    ref = Reference(params, _ref_groups())
    for step in range(8):
        skip = frozenset({1}) if step == 3 else frozenset()
        set_grads(params, step, skip)
        warmup(opt, step)
        opt.step()
        grads = [p.grad for p in params]
        ref.step(grads, 0.02 * (step + 1) / 8, 0.8 + 0.015 * step, nesterov)
    # One batched call per stack of the device's layout, every step.
    assert calls[: len(layout.buckets)] == [len(b.indices) for b in layout.buckets]
    for p, r, p0 in zip(params, ref.p, init, strict=True):
        assert _rel(p.detach(), r, r - p0.double()) < tol, tuple(p.shape)


def test_state_layout_is_the_ultralytics_one() -> None:
    params = make_params()
    opt = UltralyticsMuSGD(stock_groups(params), **KW)
    set_grads(params, 0, skip=frozenset({len(MATRICES)}))
    opt.step()
    sd = opt.state_dict()
    keys = [tuple(sorted(sd["state"][i])) for i in sorted(sd["state"])]
    muon, sgd = ("momentum_buffer", "momentum_buffer_SGD"), ("momentum_buffer",)
    assert keys == [muon] * len(MATRICES) + [sgd] * (len(VECTORS) - 1)
    assert len(MATRICES) not in sd["state"], "a parameter without a gradient gets no state"
    group = sd["param_groups"][0]
    for key in ("lr", "momentum", "weight_decay", "nesterov", "use_muon", "param_group"):
        assert key in group
    assert (opt.muon, opt.sgd) == (0.2, 1.0)


def test_state_dict_round_trip_and_resume_are_bit_identical() -> None:
    pa, pb = make_params(), make_params()
    a = UltralyticsMuSGD(stock_groups(pa), **KW)
    b = UltralyticsMuSGD(stock_groups(pb), **KW)
    for step in range(3):
        for ps, opt in ((pa, a), (pb, b)):
            set_grads(ps, step)
            opt.step()
    buf = io.BytesIO()
    torch.save(b.state_dict(), buf)
    buf.seek(0)
    loaded = torch.load(buf, weights_only=True)
    resumed = UltralyticsMuSGD(stock_groups(pb), **{**KW, "lr": 0.5})
    resumed.load_state_dict(loaded)
    for step in range(3, 6):
        for ps, opt in ((pa, a), (pb, resumed)):
            set_grads(ps, step)
            opt.step()
    assert_same(pa, pb, a, resumed)
    assert resumed.param_groups[0]["lr"] == KW["lr"]


def test_a_state_dict_without_replay_flags_loads_with_the_constructor_mode() -> None:
    params = make_params()
    opt = UltralyticsMuSGD(stock_groups(params), **KW)
    sd = opt.state_dict()
    for group in sd["param_groups"]:  # what the Ultralytics optimizer writes
        del group["capture_orthogonalization"], group["capture_updates"]
    ours = UltralyticsMuSGD(stock_groups(make_params()), capture_updates=True, **KW)
    ours.load_state_dict(sd)
    assert all(g["capture_updates"] for g in ours.param_groups)


@pytest.mark.parametrize("both", [False, True])
@pytest.mark.parametrize("nesterov", [True, False])
def test_replay_is_bit_identical_under_warmup_without_rerecording(
    both: bool, nesterov: bool
) -> None:
    pa, pb = make_params(), make_params()
    kw = {**KW, "nesterov": nesterov}
    eager = UltralyticsMuSGD(stock_groups(pa), **kw)
    recorder = FakeRecorder()
    replay = UltralyticsMuSGD(
        stock_groups(pb),
        capture_updates=True,
        capture_orthogonalization=both,
        **kw,
        recorder=recorder,
    )
    for step in range(6):
        for ps, opt in ((pa, eager), (pb, replay)):
            set_grads(ps, step)
            warmup(opt, step)
            opt.step()
        assert_same(pa, pb, eager, replay)
    assert recorder.records == 1, "one recording of the three groups; warm-up changes no key"
    assert replay._replay.stats.replays == 6 * 3  # counted per group prepared


def test_replay_rerecords_when_weight_decay_turns_on() -> None:
    pa, pb = make_params(), make_params()
    eager = UltralyticsMuSGD(stock_groups(pa, decay=0.0), **KW)
    recorder = FakeRecorder()
    replay = UltralyticsMuSGD(
        stock_groups(pb, decay=0.0), capture_updates=True, **KW, recorder=recorder
    )
    for step in range(4):
        for ps, opt in ((pa, eager), (pb, replay)):
            if step == 2:  # the trainer resets weight_decay on resume
                opt.param_groups[0]["weight_decay"] = 5e-4
            set_grads(ps, step)
            opt.step()
        assert_same(pa, pb, eager, replay)
    assert recorder.records == 2, "the step's groups recorded together, then anew with decay"


def test_muon_scale_reads_the_last_two_dimensions() -> None:
    assert muon_scale((64, 16)) == 2.0
    assert muon_scale((256, 1, 3, 3)) == 1.0  # depthwise: not sqrt(256 / 9)
    assert muon_scale((32, 16, 3, 1)) == math.sqrt(3)
    assert muon_scale((8, 40)) == 1.0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"lr": -1.0}, "lr must be a finite number >= 0"),
        ({"lr": float("nan")}, "lr must be"),
        ({"momentum": 1.0}, "momentum must be a number in"),
        ({"weight_decay": -1e-4}, "weight_decay must be"),
        ({"nesterov": 1}, "nesterov must be True or False"),
        ({"use_muon": "yes"}, "use_muon must be True or False"),
        ({"muon": -0.2}, "muon must be a finite number >= 0"),
        ({"sgd": float("inf")}, "sgd must be"),
        ({"ns_dtype": torch.float64}, "ns_dtype must be"),
        ({"capture_updates": None}, "capture_updates must be True or False"),
        (
            {"ns_backend": "cuda"},
            "ns_backend must be 'auto' or 'triton' or 'torch' or 'gram', got 'cuda'",
        ),
    ],
)
def test_bad_settings_raise_naming_the_argument(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        UltralyticsMuSGD(make_params(), **kwargs)


def test_bad_group_settings_raise_before_anything_is_stored() -> None:
    params = make_params()
    with pytest.raises(ValueError, match=r"param_groups\[1\]: momentum must be"):
        UltralyticsMuSGD([{"params": params[:2]}, {"params": params[2:4], "momentum": -0.1}])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"params\[1\] has shape \(16,\).*use_muon=False"):
        UltralyticsMuSGD([{"params": [params[0], params[len(MATRICES)]], "use_muon": True}])


def test_fsdp_dtensor_parameters_are_refused_with_a_clear_message(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    params = make_params()
    opt = UltralyticsMuSGD(stock_groups(params), **KW)
    monkeypatch.setattr(flavour, "is_sharded", lambda ps: True)
    set_grads(params, 0)
    before = [p.detach().clone() for p in params]
    with pytest.raises(RuntimeError, match=r"does not shard FSDP2.*process_group"):
        opt.step()
    assert all(torch.equal(p, b) for p, b in zip(params, before, strict=True))


class _StockLike(torch.optim.SGD):
    """A stand-in for the Ultralytics optimizer: its groups, defaults and muon/sgd attributes."""

    def __init__(self, groups: list[dict[str, Any]], **kw: Any) -> None:
        super().__init__(groups, lr=kw["lr"], momentum=kw["momentum"], nesterov=kw["nesterov"])
        self.muon, self.sgd = kw["muon"], kw["sgd"]


def test_from_stock_keeps_every_group_key_and_the_weights() -> None:
    params = make_params()
    stock = _StockLike(stock_groups(params), **KW)
    ours = from_stock(stock, capture_updates=False)
    assert (ours.muon, ours.sgd) == (0.2, 1.0)
    for g_ours, g_stock in zip(ours.param_groups, stock.param_groups, strict=True):
        assert g_ours["params"] == g_stock["params"]
        for key in ("param_group", "lr", "momentum", "weight_decay", "nesterov"):
            assert g_ours[key] == g_stock[key]
    set_grads(params, 0)
    stock.step()
    with pytest.raises(ValueError, match="has not stepped yet"):
        from_stock(stock)


def test_from_stock_drops_other_optimizers_settings_so_its_checkpoint_loads() -> None:
    """An SGD-derived stock optimizer's groups carry `dampening`: kept, it made the converted
    optimizer's own checkpoint read as another optimizer's at load."""
    params = make_params()
    ours = from_stock(_StockLike(stock_groups(params), **KW), capture_updates=False)
    assert all("dampening" not in group for group in ours.param_groups)
    set_grads(params, 0)
    ours.step()
    again = from_stock(_StockLike(stock_groups(params), **KW), capture_updates=False)
    again.load_state_dict(ours.state_dict())
    assert again.state_dict()["state"].keys() == ours.state_dict()["state"].keys()


def test_the_flavour_takes_what_musgd_takes_and_names_a_musgd_state_dict() -> None:
    """NumPy scalars and one-element float tensors (read on the host) were refused with a
    message their values met; an integer tensor lr passed the constructor and failed the
    step; a MuSGD state dict was refused for a setting it lacked."""
    import numpy as np

    def made(**kw: Any) -> UltralyticsMuSGD:
        return UltralyticsMuSGD([nn.Parameter(torch.ones(3, 3))], **{**KW, **kw})

    for kw in (
        {"momentum": torch.tensor(0.9)},
        {"lr": np.float32(0.01)},
        {"muon": np.float64(0.2)},
    ):
        opt = made(**kw)
        opt.param_groups[0]["params"][0].grad = torch.ones(3, 3)
        opt.step()
    with pytest.raises(ValueError, match=r"lr must be .* one-element floating-point tensor"):
        made(lr=torch.tensor(1))
    with pytest.raises(ValueError, match=r"momentum must be a number in \[0, 1\)"):
        made(momentum=1.0)
    layer = nn.Linear(4, 3)
    theirs = MuSGD(layer.parameters())
    layer(torch.randn(2, 4)).sum().backward()
    theirs.step()
    with pytest.raises(ValueError, match=r"a setting of another optimizer \(musgd.MuSGD\)"):
        UltralyticsMuSGD(layer.parameters(), **KW).load_state_dict(theirs.state_dict())


def test_musgd_trainer_builds_ours_from_the_stock_musgd_groups() -> None:
    seen: list[str] = []

    class FakeTrainer:
        def build_optimizer(
            self, model: Any, name: str = "auto", lr: float = 0.001, **kw: Any
        ) -> _StockLike:
            seen.append(name)
            return _StockLike(stock_groups(model), **{**KW, "lr": lr})

    trainer_cls = musgd_trainer(FakeTrainer, capture_orthogonalization=False)
    assert trainer_cls.__name__ == "MuSGDFakeTrainer"
    assert issubclass(trainer_cls, FakeTrainer)
    opt = trainer_cls().build_optimizer(make_params(), "auto", lr=0.01)
    assert seen == ["MuSGD"], "optimizer=auto asks the stock trainer for its MuSGD groups"
    assert isinstance(opt, UltralyticsMuSGD)
    assert opt.param_groups[0]["lr"] == 0.01
    assert opt.param_groups[0]["capture_updates"] is True
    assert opt.param_groups[0]["capture_orthogonalization"] is False
    with pytest.raises(TypeError, match="build_optimizer"):
        musgd_trainer(int)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"ns_backend": "cuda"},
            "musgd_trainer: ns_backend must be 'auto' or 'triton' or 'torch' or 'gram'",
        ),
        ({"ns_dtype": torch.float64}, "musgd_trainer: ns_dtype must be"),
    ],
)
def test_musgd_trainer_refuses_bad_settings_before_any_training(
    kwargs: dict[str, Any], message: str
) -> None:
    class FakeTrainer:
        def build_optimizer(self, model: Any, name: str = "auto", **kw: Any) -> Any:
            raise AssertionError("never reached")

    with pytest.raises(ValueError, match=message):
        musgd_trainer(FakeTrainer, **kwargs)


def test_missing_ultralytics_gives_an_install_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ultralytics", None)
    with pytest.raises(ImportError, match=r'pip install "wpgate\[ultralytics\]"'):
        require_ultralytics()
    with pytest.raises(ImportError, match="wpgate"):
        musgd_trainer()
    import musgd.ultralytics as module

    monkeypatch.delitem(module.__dict__, "MuSGDTrainer", raising=False)
    with pytest.raises(ImportError, match="wpgate"):
        _ = module.MuSGDTrainer
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        _ = module.Nope


def test_command_line_pairs_become_train_arguments() -> None:
    from musgd.ultralytics import parse_train_args

    model, kwargs = parse_train_args(
        ["model=yolo26s.yaml", "data=d.yaml", "epochs=10", "amp=false", "lr0=1e-3", "name="]
    )
    assert model == "yolo26s.yaml"
    assert kwargs == {"data": "d.yaml", "epochs": 10, "amp": False, "lr0": 1e-3, "name": None}
    assert parse_train_args([]) == ("yolo26n.yaml", {})
    with pytest.raises(ValueError, match="key=value pairs"):
        parse_train_args(["epochs"])
    with pytest.raises(ValueError, match="optimizer= is fixed") as refused:
        parse_train_args(["optimizer=SGD"])
    # The message says how to go on: leave the key out, or the stock command for another one.
    assert "leave optimizer= out" in str(refused.value)
    assert "yolo train optimizer=SGD" in str(refused.value)
    with pytest.raises(ValueError, match="leave trainer= out"):
        parse_train_args(["trainer=x"])


def test_command_line_errors_exit_2_with_a_message(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from musgd.ultralytics import main

    assert main(["trainer=x"]) == 2
    assert "fixed by musgd-yolo" in capsys.readouterr().err
    monkeypatch.setitem(sys.modules, "ultralytics", None)
    assert main(["epochs=1"]) == 2
    assert 'pip install "wpgate[ultralytics]"' in capsys.readouterr().err
    for ask in ("--help", "help"):  # `yolo help`'s word works here too
        assert main([ask]) == 0
        assert "usage: musgd-yolo" in capsys.readouterr().out
    assert main(["capture_network=maybe"]) == 2
    assert "capture_network= takes true or false, got 'maybe'" in capsys.readouterr().err
    assert main(["channels_last=auto"]) == 2
    assert "channels_last= takes true or false, got 'auto'" in capsys.readouterr().err
    # A GPU asked for where none is: one line, before Ultralytics' own traceback could come.
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for device in ("cuda", "0", "cuda:0", "0,1", "[0,1]"):
        assert main([f"device={device}"]) == 2
        assert "no CUDA GPU is visible here" in capsys.readouterr().err
    # A device that is no device's name is said to be that, GPU or none.
    for device in ("bogus", "cuda:x", "0,gpu"):
        assert main([f"device={device}"]) == 2
        assert f"device={device}: name cpu, mps, a CUDA device by its index" in (
            capsys.readouterr().err
        )
    # Values Ultralytics would take only to fail with a traceback once the model is built.
    for arg, said in (
        ("data=", "data= needs a value (a dataset's YAML, e.g. data=coco8.yaml); leave data= out"),
        ("model=", "model= needs a value (a model to build or load"),
        ("task=", "task= needs a value (one of detect, "),
        ("ns_steps=", "ns_steps= needs a value (see musgd.NSConfig)"),
        ("imgsz=abc", "imgsz='abc': takes the image size in pixels"),
        ("imgsz=0", "imgsz=0: takes the image size in pixels"),
        ("imgsz=[1,2,3]", "imgsz=[1, 2, 3]: takes the image size in pixels"),
        ("imgsz=true", "imgsz=True: takes the image size in pixels"),
        # Not YAML at all: its parser's error was a traceback.
        ("name=a: b: c", "name=a: b: c does not read as a value (mapping values"),
        ("epochs=[1", "epochs=[1 does not read as a value ("),
        ("epochs=*x", "epochs=*x does not read as a value (found undefined alias"),
        ("name=a: b", "name=a: b reads as a mapping, which no train argument takes"),
        ("data={a: 1}", "data={a: 1} reads as a mapping"),
    ):
        assert main([arg]) == 2, arg
        assert said in capsys.readouterr().err, arg
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert main(["device=0,1"]) == 2
    assert "this machine has 1 CUDA device(s), numbered from 0; there is no 1" in (
        capsys.readouterr().err
    )


def test_misused_entry_points_say_what_they_take() -> None:
    """An outside audit's raw errors: each now names what the function takes."""
    with pytest.raises(TypeError, match=r"from_stock converts Ultralytics' MuSGD .* got SGD"):
        from_stock(torch.optim.SGD([nn.Parameter(torch.zeros(2, 2))], lr=0.1))
    with pytest.raises(TypeError, match="musgd_trainer takes an Ultralytics trainer class"):
        musgd_trainer(5)  # type: ignore[arg-type]


def test_command_line_capture_network_reaches_the_trainer(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import types

    import musgd.ultralytics as module

    calls: list[tuple[str, dict[str, Any]]] = []

    class FakeYOLO:
        task = "detect"

        def __init__(self, model: str) -> None:
            self.model = model

        def train(self, **kw: Any) -> None:
            calls.append((self.model, kw))

    monkeypatch.setitem(sys.modules, "ultralytics", types.SimpleNamespace(YOLO=FakeYOLO))
    monkeypatch.setattr(module, "require_ultralytics", lambda: None)
    made: list[dict[str, Any]] = []
    monkeypatch.setattr(module, "musgd_trainer", lambda base=None, **options: made.append(options))
    assert module.main(["capture_network=true", "epochs=2"]) == 0
    assert module.main(["epochs=2"]) == 0
    assert module.main(["skip_nonfinite=true", "epochs=2"]) == 0
    assert module.main(["compile_network=true", "channels_last=false", "epochs=2"]) == 0
    cache = tmp_path / "network.bin"
    assert module.main(["compile_network=true", f"compile_cache={cache}", "epochs=2"]) == 0
    assert made == [
        {"capture_network": True},
        {"capture_network": False},
        {"capture_network": False, "skip_nonfinite": True},
        {"capture_network": False, "compile_network": True, "channels_last": False},
        {"capture_network": False, "compile_network": True, "compile_cache": str(cache)},
    ]
    assert [kw for _, kw in calls] == [{"trainer": None, "epochs": 2}] * 5

    assert module.main(["skip_nonfinite=often"]) == 2  # a clear message, no training
    assert module.main(["compile_network=yes please"]) == 2
    assert module.main(["channels_last=auto"]) == 2
    assert module.main([f"compile_cache={cache}"]) == 2  # without compile_network
    assert module.main(["compile_network=true", f"compile_cache={tmp_path}"]) == 2  # a folder
    assert module.main(["compile_network=true", "compile_cache="]) == 2  # no path
    assert len(made) == 5


def test_command_line_dataset_error_is_one_line_and_exit_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import types

    import musgd.ultralytics as module

    class FakeYOLO:
        task = "detect"

        def __init__(self, model: str) -> None:
            self.model = model

        def train(self, **kw: Any) -> None:
            if kw.get("data") == "boom":
                raise RuntimeError("something else")
            raise RuntimeError(
                "Dataset 'coco8.yaml' error ❌ ❌  Download failure for "
                "https://ultralytics.com/assets/coco8.zip. Environment may be offline."
            )

    monkeypatch.setitem(sys.modules, "ultralytics", types.SimpleNamespace(YOLO=FakeYOLO))
    monkeypatch.setattr(module, "require_ultralytics", lambda: None)
    monkeypatch.setattr(module, "musgd_trainer", lambda base=None, **options: None)
    assert module.main(["epochs=1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "Download failure" in err
    assert "no data= given" in err
    assert "data=PATH/data.yaml" in err
    with pytest.raises(RuntimeError, match="something else"):  # not a dataset error: raised
        module.main(["data=boom"])


def test_groups_given_generators_keep_their_parameters() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(6, 4), torch.nn.Linear(4, 2))
    weights = (m.weight for m in model)
    biases = (m.bias for m in model)
    opt = UltralyticsMuSGD([{"params": weights, "use_muon": True}, {"params": biases}], **KW)  # type: ignore[arg-type]
    assert [len(g["params"]) for g in opt.param_groups] == [2, 2]
    opt.add_param_group({"params": torch.nn.Parameter(torch.zeros(3))})
    assert len(opt.param_groups[2]["params"]) == 1


class _Spied:
    """Records the calls the trainer's optimizer step makes, in order."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def wrap(self, name: str, fn: Any) -> Any:
        def called(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(name)
            return fn(*args, **kwargs)

        return called


def _step_trainer(spied: _Spied, **options: Any) -> Any:
    class FakeTrainer:
        def build_optimizer(self, model: Any, name: str = "auto", **kw: Any) -> Any:
            return _StockLike(stock_groups(list(model.parameters())), **KW)

    trainer = musgd_trainer(FakeTrainer, **options)()
    trainer.model = torch.nn.ParameterList(make_params())
    opt = trainer.build_optimizer(trainer.model)
    scaler = torch.amp.GradScaler("cpu", enabled=False)
    for name in ("unscale_", "step", "update"):
        setattr(scaler, name, spied.wrap(f"scaler.{name}", getattr(scaler, name)))
    opt.step = spied.wrap("optimizer.step", opt.step)
    opt.zero_grad = spied.wrap("zero_grad", opt.zero_grad)
    trainer.optimizer, trainer.scaler = opt, scaler
    trainer.ema = types.SimpleNamespace(update=spied.wrap("ema.update", lambda model: None))
    return trainer


def test_trainer_optimizer_step_is_the_stock_sequence_with_the_clip_replayed() -> None:
    spied = _Spied()
    trainer = _step_trainer(spied, capture_orthogonalization=False, capture_updates=False)
    clip = GradClipReplay(10.0, recorder=FakeRecorder())
    trainer.musgd_clip = spied.wrap("clip", clip)
    params = list(trainer.model.parameters())
    twin = [p.detach().clone().requires_grad_() for p in params]
    reference = UltralyticsMuSGD(stock_groups(twin), **KW)
    for step in range(4):
        for group in (params, twin):
            set_grads(group, step)
            for p in group:
                p.grad.mul_(40.0)  # norms well above 10: the clip scales them
        spied.calls.clear()
        trainer.optimizer_step()
        assert spied.calls == [
            "scaler.unscale_",
            "clip",
            "scaler.step",
            "optimizer.step",
            "scaler.update",
            "zero_grad",
            "ema.update",
        ]
        assert all(p.grad is None for p in params)
        torch.nn.utils.clip_grad_norm_(twin, 10.0)
        reference.step()
        reference.zero_grad()
        for p, q in zip(params, twin, strict=True):
            assert torch.equal(p, q)
    assert clip.stats.replays == 3


def test_the_clip_lists_the_models_parameters_once_an_epoch() -> None:
    """The replayed clip gets the model's parameters in their order, listed anew when the
    epoch or the model changes (a parameter added inside an epoch is clipped from the next)."""
    spied = _Spied()
    trainer = _step_trainer(spied, capture_orthogonalization=False, capture_updates=False)
    seen: list[list[torch.Tensor]] = []
    trainer.musgd_clip = lambda params: seen.append(list(params))
    trainer.epoch = 0
    for step in range(2):
        set_grads(list(trainer.model.parameters()), step)
        trainer.optimizer_step()
    assert [id(p) for p in seen[0]] == [id(p) for p in seen[1]]
    assert [id(p) for p in seen[0]] == [id(p) for p in trainer.model.parameters()]
    extra = torch.nn.Parameter(torch.zeros(2))
    trainer.model.append(extra)
    set_grads(list(trainer.model.parameters()), 2)
    trainer.optimizer_step()
    assert all(p is not extra for p in seen[2])  # the same epoch: the list made at its start
    trainer.epoch = 1
    set_grads(list(trainer.model.parameters()), 3)
    trainer.optimizer_step()
    assert seen[3][-1] is extra
    trainer.model = torch.nn.ParameterList(make_params())
    set_grads(list(trainer.model.parameters()), 4)
    trainer.optimizer_step()
    assert [id(p) for p in seen[4]] == [id(p) for p in trainer.model.parameters()]


def test_trainer_clip_replay_can_be_turned_off_and_a_custom_step_is_kept() -> None:
    class FakeTrainer:
        def build_optimizer(self, model: Any, name: str = "auto", **kw: Any) -> Any:
            raise AssertionError("never reached")

    class CustomStep(FakeTrainer):
        def optimizer_step(self) -> str:
            return "custom"

    assert "optimizer_step" in vars(musgd_trainer(FakeTrainer))
    off = musgd_trainer(FakeTrainer, capture_clip=False, ns_backend="torch")
    assert "optimizer_step" not in vars(off)
    assert off.musgd_options == {
        "capture_orthogonalization": True,
        "capture_updates": True,
        "ns_dtype": torch.bfloat16,
        "ns_backend": "torch",
        "capture_clip": False,
        "capture_network": False,
        "channels_last": False,
        "compile_network": False,
        "compile_cache": None,
        "device_loss": False,
    }
    kept = musgd_trainer(CustomStep)
    assert "optimizer_step" not in vars(kept)
    assert kept().optimizer_step() == "custom"
    with pytest.raises(ValueError, match="capture_clip must be True or False"):
        musgd_trainer(FakeTrainer, capture_clip="yes")  # type: ignore[arg-type]
    # The optimizer's flags too, when the trainer is made, not after the run's set-up.
    with pytest.raises(ValueError, match="capture_orthogonalization must be True or False"):
        musgd_trainer(FakeTrainer, capture_orthogonalization="no")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="capture_updates must be True or False, got 0"):
        musgd_trainer(FakeTrainer, capture_updates=0)  # type: ignore[arg-type]


def test_trainer_network_capture_installs_at_the_first_batch_and_leaves_at_the_end() -> None:
    from network_common import TinyDetector

    from musgd._network_capture import NetworkCapture

    class FakeTrainer(_LayoutTrainer):
        def preprocess_batch(self, batch: dict[str, Any]) -> dict[str, Any]:
            return {**batch, "seen": True}

    assert "preprocess_batch" not in vars(musgd_trainer(FakeTrainer))
    cls = musgd_trainer(FakeTrainer, capture_network=True)
    assert cls.musgd_options["capture_network"] is True

    class Subclass(cls):  # type: ignore[misc,valid-type]
        """A subclass (the GPU script times one): the base's preprocess_batch still runs."""

    model = TinyDetector()
    trainer = Subclass(model)
    assert trainer.preprocess_batch({"img": 1}) == {"img": 1, "seen": True}
    capture = trainer.musgd_network
    assert isinstance(capture, NetworkCapture)
    assert capture.installed
    assert trainer.musgd_network_reason is None
    trainer.preprocess_batch({})
    assert trainer.musgd_network is capture  # installed once
    (end,) = trainer.callbacks["on_train_end"]
    end(trainer)
    assert not capture.installed
    # A model without predict (a DDP wrapper, say) keeps its eager network, saying why.
    other = Subclass(torch.nn.Linear(2, 2))
    other.preprocess_batch({})
    assert other.musgd_network is None
    assert "needs an Ultralytics model" in other.musgd_network_reason
    with pytest.raises(ValueError, match="capture_network must be True or False"):
        musgd_trainer(FakeTrainer, capture_network="yes")


class _LayoutTrainer:
    """The parts of an Ultralytics trainer the layout and the compiled network touch: a model,
    its EMA (``ema.ema``), callbacks and ``preprocess_batch``."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.ema = types.SimpleNamespace(ema=copy.deepcopy(model))
        self.callbacks: dict[str, list[Any]] = {}

    def build_optimizer(self, model: Any, name: str = "auto", **kw: Any) -> Any:
        raise AssertionError("never reached")

    def add_callback(self, event: str, callback: Any) -> None:
        self.callbacks.setdefault(event, []).append(callback)

    def preprocess_batch(self, batch: dict[str, Any]) -> dict[str, Any]:
        return dict(batch)

    def end(self) -> None:
        for callback in self.callbacks.get("on_train_end", []):
            callback(self)


def _weights_4d(model: torch.nn.Module) -> list[torch.Tensor]:
    return [p for p in model.parameters() if p.dim() == 4]


def test_channels_last_puts_model_ema_and_batches_in_it_and_keeps_the_parameters() -> None:
    from network_common import TinyDetector

    model = TinyDetector()
    params = list(model.parameters())
    trainer = musgd_trainer(_LayoutTrainer, channels_last=True)(model)
    img = torch.randn(2, 3, 8, 8)
    out = trainer.preprocess_batch({"img": img, "cls": torch.zeros(2)})
    assert trainer.musgd_channels_last is True
    assert trainer.musgd_layout_reason is None
    assert out["img"].is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(out["img"], img)  # the same values, another layout
    assert list(model.parameters()) == params  # the optimizer's parameters are still the model's
    for t in (*_weights_4d(model), *_weights_4d(trainer.ema.ema)):
        assert t.is_contiguous(memory_format=torch.channels_last)
    # Not asked for (the default): NCHW, the batches untouched.
    other = musgd_trainer(_LayoutTrainer, capture_network=True)(TinyDetector())
    kept = other.preprocess_batch({"img": img})
    assert other.musgd_channels_last is False
    assert other.musgd_layout_reason == "channels_last=False"
    assert kept["img"].is_contiguous()
    assert all(t.is_contiguous() for t in _weights_4d(other.model))
    with pytest.raises(ValueError, match="channels_last must be True or False"):
        musgd_trainer(_LayoutTrainer, channels_last="auto")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="compile_network must be True or False"):
        musgd_trainer(_LayoutTrainer, compile_network=1)  # type: ignore[arg-type]


def test_a_channels_last_gradient_is_orthogonalized_as_the_contiguous_one() -> None:
    """A 4-D gradient in channels-last memory is the same rows x (in*kh*kw) matrix: the step
    leaves the same parameters (compared in one layout) and momentum buffers."""
    torch.manual_seed(0)
    shapes = [(8, 4, 3, 3), (16, 8, 1, 1), (8,)]
    grads = [torch.randn(s) for s in shapes]
    results = []
    for fmt in (torch.contiguous_format, torch.channels_last):
        params = [
            torch.nn.Parameter(torch.randn(s, generator=torch.Generator().manual_seed(i)))
            for i, s in enumerate(shapes)
        ]
        for p, g in zip(params, grads, strict=True):
            layout = fmt if p.dim() == 4 else torch.contiguous_format
            p.data = p.data.contiguous(memory_format=layout)
            p.grad = g.contiguous(memory_format=layout)
        groups: list[dict[str, Any]] = [
            {"params": params[:2], "use_muon": True},
            {"params": params[2:]},
        ]
        opt = UltralyticsMuSGD(
            groups,
            lr=0.01,
            ns_dtype=torch.float32,
        )
        for _ in range(2):
            opt.step()
        bufs = [opt.state[p]["momentum_buffer"].contiguous() for p in params]
        results.append(([p.detach().contiguous() for p in params], bufs))
    (a_params, a_bufs), (b_params, b_bufs) = results
    assert all(map(torch.equal, a_params, b_params))
    assert all(map(torch.equal, a_bufs, b_bufs))


@pytest.mark.slow  # compiles TinyDetector's predict with Inductor
def test_compile_network_alone_installs_the_compiled_predict_until_training_ends() -> None:
    from network_common import TinyDetector

    model = TinyDetector()
    trainer = musgd_trainer(_LayoutTrainer, compile_network=True, channels_last=False)(model)
    trainer.preprocess_batch({"img": torch.randn(2, 3, 8, 8)})
    assert trainer.musgd_compiled is True
    assert trainer.musgd_network is None
    compiled = model.__dict__["predict"]
    out = model.predict(torch.randn(2, 3, 8, 8))
    assert set(out) == {"one2many", "one2one"}
    trainer.end()
    assert "predict" not in model.__dict__
    assert compiled is not None
    # With capture_network the capture runs the compiled network and is removed at the end.
    both = musgd_trainer(_LayoutTrainer, compile_network=True, capture_network=True)(TinyDetector())
    both.preprocess_batch({"img": torch.randn(2, 3, 8, 8)})
    assert both.musgd_network.compile is True
    assert both.musgd_network.installed
    both.end()
    assert not both.musgd_network.installed


def test_a_compile_cache_is_written_when_training_ends_and_loaded_before_compiling(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The first run finds no cache, compiles and writes one; a second run (a fresh model)
    loads all of it before it compiles; a damaged file is one warning and the run goes on."""
    from network_common import TinyDetector

    cache = tmp_path / "network.bin"
    trainer_class = musgd_trainer(_LayoutTrainer, compile_network=True, compile_cache=cache)
    first = trainer_class(TinyDetector())
    first.preprocess_batch({"img": torch.randn(2, 3, 8, 8)})
    assert first.musgd_compile_cache["loaded_bytes"] == 0
    assert "no cache file yet" in first.musgd_compile_cache["reason"]
    first.model.predict(torch.randn(2, 3, 8, 8))  # compiles
    first.end()
    written = cache.stat().st_size
    assert written > 0
    assert first.musgd_compile_cache["saved_bytes"] == written
    second = trainer_class(TinyDetector())
    second.preprocess_batch({"img": torch.randn(2, 3, 8, 8)})
    assert second.musgd_compile_cache["loaded_bytes"] == written
    assert second.musgd_compile_cache["reason"] is None
    assert set(second.model.predict(torch.randn(2, 3, 8, 8))) == {"one2many", "one2one"}
    second.end()
    cache.write_bytes(b"not a cache")
    third = trainer_class(TinyDetector())
    with caplog.at_level("WARNING", logger="musgd"):
        third.preprocess_batch({"img": torch.randn(2, 3, 8, 8)})
    assert third.musgd_compile_cache["loaded_bytes"] == 0
    assert "compiling as without it" in third.musgd_compile_cache["reason"]
    assert "compile_cache" in caplog.text
    assert set(third.model.predict(torch.randn(2, 3, 8, 8))) == {"one2many", "one2one"}
    third.end()
    assert cache.stat().st_size > len(b"not a cache")  # rewritten with real artifacts


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (3, "must be the path of a file"),
        ("", "must be the path of a file"),
        ("{tmp}", "exists and is not a regular file"),
        ("{tmp}/missing/cache.bin", "does not exist; create it"),
    ],
)
def test_a_bad_compile_cache_is_refused_naming_the_fix(
    tmp_path: Path, value: object, message: str
) -> None:
    given = value.format(tmp=tmp_path) if isinstance(value, str) else value
    with pytest.raises(ValueError, match=message):
        musgd_trainer(_LayoutTrainer, compile_network=True, compile_cache=given)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="needs compile_network=True"):
        musgd_trainer(_LayoutTrainer, compile_cache=tmp_path / "cache.bin")


@pytest.fixture
def task_cli(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, dict[str, Any]]]:
    """``musgd-yolo`` with stand-ins for ``ultralytics.YOLO`` (its task read from the model
    name, as the real one reads it from the configuration) and the trainer classes: the model
    and train arguments of each training it starts, ``trainer`` naming the base class."""
    import types

    import musgd.ultralytics as module

    trained: list[tuple[str, dict[str, Any]]] = []
    suffixes = {"-seg": "segment", "-pose": "pose", "-obb": "obb", "-cls": "classify"}

    class FakeYOLO:
        def __init__(self, model: str) -> None:
            self.model = model
            self.task = next((t for s, t in suffixes.items() if s in model), "detect")

        def train(self, **kw: Any) -> None:
            trained.append((self.model, kw))

    monkeypatch.setitem(sys.modules, "ultralytics", types.SimpleNamespace(YOLO=FakeYOLO))
    monkeypatch.setattr(module, "require_ultralytics", lambda: None)
    monkeypatch.setattr(module, "task_trainer", lambda task: f"{task}-trainer")
    monkeypatch.setattr(
        module, "musgd_trainer", lambda base=None, capture_network=False: f"musgd({base})"
    )
    return trained


def test_command_line_task_picks_the_trainer_class_and_the_tasks_model(
    task_cli: list[tuple[str, dict[str, Any]]],
) -> None:
    from musgd.ultralytics import TASKS, main

    assert main(["task=segment", "epochs=1"]) == 0
    assert main(["task=pose", "model=yolo26s-pose.yaml"]) == 0
    assert main(["model=yolo26n-obb.yaml"]) == 0  # no task=: the model's own
    assert main(["epochs=1"]) == 0  # detection keeps the exported MuSGDTrainer
    assert task_cli == [
        ("yolo26n-seg.yaml", {"trainer": "musgd(segment-trainer)", "epochs": 1}),
        ("yolo26s-pose.yaml", {"trainer": "musgd(pose-trainer)"}),
        ("yolo26n-obb.yaml", {"trainer": "musgd(obb-trainer)"}),
        ("yolo26n.yaml", {"trainer": "musgd(None)", "epochs": 1}),
    ]
    assert TASKS == ("detect", "segment", "pose", "obb", "classify")


def test_command_line_bad_task_exits_2_listing_the_tasks(
    task_cli: list[tuple[str, dict[str, Any]]], capsys: pytest.CaptureFixture[str]
) -> None:
    from musgd.ultralytics import main

    assert main(["task=depth"]) == 2
    err = capsys.readouterr().err
    assert "task= takes one of detect, segment, pose, obb, classify, got 'depth'" in err
    assert main(["task=segment", "model=yolo26n-pose.yaml"]) == 2
    err = capsys.readouterr().err
    assert "yolo26n-pose.yaml is a pose model and task=segment" in err
    assert "Traceback" not in err
    assert task_cli == []


def test_task_trainer_refuses_an_unknown_task_and_needs_ultralytics(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from musgd.ultralytics import task_trainer

    with pytest.raises(ValueError, match="unknown task 'depth': use one of detect, segment"):
        task_trainer("depth")
    monkeypatch.setitem(sys.modules, "ultralytics", None)
    with pytest.raises(ImportError, match=r"pip install \"wpgate\[ultralytics\]\""):
        task_trainer("segment")


class _NoHostReads(TorchDispatchMode):
    """Fails on any host read of a tensor's value (``.item()``, ``int()``, ``bool()``)."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        if func is torch.ops.aten._local_scalar_dense.default:
            raise AssertionError("a host read of a device value in the guarded optimizer step")
        return func(*args, **(kwargs or {}))


def _ema_decay(updates: int) -> float:
    return 0.9999 * (1 - math.exp(-updates / 2000))


def test_trainer_guarded_step_skips_on_the_device_with_the_scaler_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """``skip_nonfinite``: the AMP optimizer step with no host read; a step whose unscaled
    gradients are not finite leaves parameters, both buffers and the EMA bit-identical, while
    the scaler lowers its scale exactly as with its own skip. The reference is the stock
    sequence (the scaler's host-read skip) with the EMA updated only where the step was taken."""

    class FakeTrainer:
        def __init__(self) -> None:
            self.callbacks: dict[str, list[Any]] = {}

        def add_callback(self, event: str, fn: Any) -> None:
            self.callbacks.setdefault(event, []).append(fn)

        def build_optimizer(self, model: Any, name: str = "auto", **kw: Any) -> Any:
            return _StockLike(stock_groups(list(model.parameters())), **KW)

    made = musgd_trainer(
        FakeTrainer,
        skip_nonfinite=True,
        capture_clip=False,
        capture_orthogonalization=False,
        capture_updates=False,
        ns_dtype=torch.float32,
    )
    trainer = made()
    trainer.model = torch.nn.ParameterList(make_params())
    trainer.optimizer = trainer.build_optimizer(trainer.model)
    assert trainer.callbacks["on_train_end"] == [
        trainer_module.release_recordings,
        trainer_module.report_skips,
    ]
    trainer.scaler = torch.amp.GradScaler("cpu", init_scale=2.0**6, growth_interval=2)
    ema_model = copy.deepcopy(trainer.model).requires_grad_(False)
    trainer.ema = types.SimpleNamespace(ema=ema_model, updates=0, decay=_ema_decay, enabled=True)

    twin = torch.nn.ParameterList(make_params())
    ref_opt = UltralyticsMuSGD(stock_groups(list(twin)), **KW, ns_dtype=torch.float32)
    ref_scaler = torch.amp.GradScaler("cpu", init_scale=2.0**6, growth_interval=2)
    ref_ema = [t.detach().clone() for t in twin]
    poisoned = {2: float("inf"), 3: float("nan")}
    for step in range(6):
        for params, scaler in ((list(trainer.model), trainer.scaler), (list(twin), ref_scaler)):
            gen = torch.Generator().manual_seed(100 + step)
            loss = sum((p * torch.randn(p.shape, generator=gen)).sum() for p in params)
            scaler.scale(loss).backward()  # gradients times the scale, exactly (a power of 2)
            if step in poisoned:
                params[1].grad.view(-1)[3] = poisoned[step]
        with _NoHostReads():
            trainer.optimizer_step()
        # The reference: the stock sequence; its EMA follows only a step that was taken.
        ref_scaler.unscale_(ref_opt)
        torch.nn.utils.clip_grad_norm_(list(twin), 10.0)
        ref_scaler.step(ref_opt)
        ref_scaler.update()
        ref_opt.zero_grad()
        if step not in poisoned:
            d = _ema_decay(step + 1)
            for v, m in zip(ref_ema, twin, strict=True):
                v.lerp_(m.detach(), 1 - d)
        assert trainer.scaler.get_scale() == ref_scaler.get_scale()
        for p, q in zip(trainer.model, twin, strict=True):
            assert torch.equal(p, q)
            assert trainer.optimizer.state[p].keys() == ref_opt.state[q].keys()
            for key, t in trainer.optimizer.state[p].items():
                assert torch.equal(t, ref_opt.state[q][key])
        for v, r in zip(ema_model, ref_ema, strict=True):
            assert torch.equal(v, r)
    assert trainer.ema.updates == 6  # the host counts every update it asked for
    with caplog.at_level(logging.WARNING, logger="musgd"):
        assert trainer.musgd_report_skips() == 2
    assert "skipped 2 optimizer step(s) whose gradients were not finite" in caplog.text
    assert trainer.musgd_skipped == 2


def test_trainer_skip_nonfinite_is_checked_and_reaches_the_options() -> None:
    class FakeTrainer:
        def build_optimizer(self, model: Any, name: str = "auto", **kw: Any) -> Any:
            raise AssertionError("never reached")

    with pytest.raises(ValueError, match="skip_nonfinite must be True or False, got 1"):
        musgd_trainer(FakeTrainer, skip_nonfinite=1)  # type: ignore[arg-type]
    made = musgd_trainer(FakeTrainer, skip_nonfinite=True, capture_clip=False)
    assert made.musgd_options["skip_nonfinite"] is True
    assert "optimizer_step" in vars(made)  # the guarded step, though the clip is not replayed
    assert "skip_nonfinite" not in musgd_trainer(FakeTrainer).musgd_options


def test_trainer_with_the_device_loss_validates_with_its_items_back_on_the_device() -> None:
    """The host loss items (HostItems) go back to the device loss's device before the base's
    validate, whose validator adds the EMA model's device items to zeros shaped like them."""

    class FakeTrainer:
        loss_items: dict[str, torch.Tensor]

        def build_optimizer(self, model: Any, name: str = "auto", **kw: Any) -> Any:
            raise AssertionError("never reached")

        def validate(self) -> dict[str, torch.device]:
            return {k: v.device for k, v in self.loss_items.items()}

    trainer = musgd_trainer(FakeTrainer, device_loss=True)()
    trainer.loss_items = {"box_loss": torch.tensor(1.0), "cls_loss": torch.tensor(2.0)}
    trainer.musgd_loss = types.SimpleNamespace(device_items=torch.empty(3, device="meta"))
    assert trainer.validate() == {
        "box_loss": torch.device("meta"),
        "cls_loss": torch.device("meta"),
    }
    plain = musgd_trainer(FakeTrainer)()
    assert "validate" not in vars(type(plain)), "only the device loss needs it"


def test_the_network_capture_shares_its_pool_with_the_optimizer_and_the_clip() -> None:
    from network_common import TinyDetector

    from musgd._network_capture import CudaNetworkGrapher
    from musgd._replay import CudaGraphRecorder

    class FakeTrainer(_LayoutTrainer):
        def build_optimizer(self, model: Any, name: str = "auto", **kw: Any) -> Any:
            params = list(model.parameters())
            matrices = [p for p in params if p.dim() >= 2]
            others = [p for p in params if p.dim() < 2]
            return _StockLike(
                [{"params": matrices, "use_muon": True}, {"params": others, "use_muon": False}],
                **KW,
            )

    trainer = musgd_trainer(FakeTrainer, capture_network=True)(TinyDetector())
    trainer.optimizer = trainer.build_optimizer(trainer.model)
    trainer.scaler = torch.amp.GradScaler("cpu", enabled=False)
    trainer.ema = None
    trainer.preprocess_batch({})
    pool = trainer.musgd_graph_pool
    grapher = trainer.musgd_network.grapher
    assert isinstance(grapher, CudaNetworkGrapher)
    assert grapher.pool is pool
    recorder = trainer.optimizer._replay.recorder
    assert isinstance(recorder, CudaGraphRecorder)
    assert recorder.pool is pool
    for p in trainer.model.parameters():
        p.grad = torch.ones_like(p)
    trainer.optimizer_step()  # the clip is made at the first step, in the same pool
    clip_recorder = trainer.musgd_clip.recorder
    assert isinstance(clip_recorder, CudaGraphRecorder)
    assert clip_recorder.pool is pool
    assert clip_recorder.branches == 1
    assert clip_recorder.droppable  # a network joining after its recordings drops them
    assert recorder.droppable
    # The compiled network keeps its own pools (sharing is checked for eager kernels only).
    compiled = musgd_trainer(FakeTrainer, capture_network=True, compile_network=True)(
        TinyDetector()
    )
    compiled.optimizer = compiled.build_optimizer(compiled.model)
    compiled.preprocess_batch({})
    compiled_grapher = compiled.musgd_network.grapher
    assert isinstance(compiled_grapher, CudaNetworkGrapher)
    assert compiled_grapher.pool is None
    assert "musgd_graph_pool" not in vars(compiled)
    assert compiled.optimizer._replay.recorder.pool is None
    # Without the capture nothing shares: the clip records into pools of its own.
    plain = musgd_trainer(FakeTrainer)(TinyDetector())
    plain.optimizer = plain.build_optimizer(plain.model)
    plain.scaler, plain.ema = torch.amp.GradScaler("cpu", enabled=False), None
    for p in plain.model.parameters():
        p.grad = torch.ones_like(p)
    plain.optimizer_step()
    assert "musgd_graph_pool" not in vars(plain)
    assert plain.musgd_clip.recorder.pool is None
    assert plain.optimizer._replay.recorder.pool is None


def test_every_recording_is_released_when_training_ends() -> None:
    from network_common import TinyDetector

    from musgd._loss_capture import LossCapture
    from musgd.ultralytics import release_recordings

    class FakeTrainer(_LayoutTrainer):
        def build_optimizer(self, model: Any, name: str = "auto", **kw: Any) -> Any:
            params = list(model.parameters())
            return _StockLike(
                [
                    {"params": [p for p in params if p.dim() >= 2], "use_muon": True},
                    {"params": [p for p in params if p.dim() < 2], "use_muon": False},
                ],
                **KW,
            )

    trainer = musgd_trainer(FakeTrainer, capture_network=True)(TinyDetector())
    trainer.optimizer = trainer.build_optimizer(trainer.model)
    assert release_recordings in trainer.callbacks["on_train_end"]
    trainer.scaler = torch.amp.GradScaler("cpu", enabled=False)
    trainer.ema = None
    trainer.preprocess_batch({})
    for p in trainer.model.parameters():
        p.grad = torch.ones_like(p)
    trainer.optimizer_step()
    loss = types.SimpleNamespace(capture=LossCapture())
    trainer.musgd_loss = loss
    # Stand-ins for what a GPU would have recorded by the end of training.
    engine = trainer.optimizer._engine
    caches = [
        trainer.musgd_network._cache,
        loss.capture._cache,
        trainer.musgd_clip._cache,
        engine.replay.orth_cache,
        engine.replay.update_cache,
    ]
    for cache in caches:
        cache.publish("key", object())
    pool = trainer.musgd_graph_pool
    pool._handles[0] = "token"
    pool._joined.add(0)
    stats = trainer.musgd_network.stats
    # The last iteration's loss: its autograd graph would hold the replays' recordings.
    weight = torch.ones(3, requires_grad=True)
    trainer.loss = (weight * 2).sum()
    trainer.end()
    assert [len(cache) for cache in caches] == [0] * len(caches)
    assert trainer.loss.grad_fn is None
    assert trainer.loss.item() == 6.0
    assert (pool._handles, pool._joined) == ({}, set()), "a later recording starts a fresh pool"
    assert trainer.musgd_network.stats is stats, "the counts stay for the run's report"
    release_recordings(types.SimpleNamespace())  # a trainer that made none: nothing to do


def test_the_train_arguments_record_the_optimizer_built_for_auto() -> None:
    """A stranger's audit: a checkpoint's train arguments said `optimizer=auto`, so the stock
    trainer resumed it with the optimizer its own `auto` picks (AdamW on a short run) and
    failed on the saved MuSGD state's groups. They now say MuSGD, what was built."""

    class FakeTrainer:
        def build_optimizer(self, model: Any, name: str = "auto", **kw: Any) -> Any:
            return _StockLike(stock_groups(list(model.parameters())), **KW)

    trainer = musgd_trainer(FakeTrainer)()
    trainer.args = types.SimpleNamespace(optimizer="auto")
    trainer.build_optimizer(torch.nn.ParameterList(make_params()), "auto")
    assert trainer.args.optimizer == "MuSGD"
    trainer.args = types.SimpleNamespace(optimizer="MuSGD")
    trainer.build_optimizer(torch.nn.ParameterList(make_params()), "MuSGD")
    assert trainer.args.optimizer == "MuSGD"
