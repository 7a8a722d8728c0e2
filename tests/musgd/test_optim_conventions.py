"""The generic ``torch.optim.Optimizer`` behaviour, for both flavours (issue #36).

Written here from PyTorch's documentation of ``torch.optim.Optimizer`` (``state_dict`` /
``load_state_dict``, ``add_param_group``, ``zero_grad``, ``step(closure)``, the step hooks) and of
its optimizers' ``maximize`` flag, not from PyTorch's own test code: each test states the
documented property and checks it on ``MuSGD`` and ``UltralyticsMuSGD``.
"""

from __future__ import annotations

import copy
import io
import pickle
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.distributed as dist
from replay_fakes import FakeRecorder
from test_distributed import single_rank  # noqa: F401 - a fixture, used by name
from torch import Tensor, nn

from musgd import MuSGD
from musgd._optimizer import DEFAULT_LR
from musgd.ultralytics import UltralyticsMuSGD

SHAPES = [(8, 6), (6, 3, 3, 3), (4, 4), (6,), (8,)]
Make = Callable[..., torch.optim.Optimizer]


def _musgd(params: list[nn.Parameter], **kw: Any) -> torch.optim.Optimizer:
    return MuSGD(params, **{"lr": 0.05, "weight_decay": 0.01, **kw})


def _ultralytics(params: list[nn.Parameter], **kw: Any) -> torch.optim.Optimizer:
    groups = [
        {"params": params[:3], "use_muon": True, "weight_decay": 0.01},
        {"params": params[3:], "use_muon": False},
    ]
    return UltralyticsMuSGD(groups, **{"lr": 0.05, "momentum": 0.9, "muon": 0.2, "sgd": 1.0, **kw})


FLAVOURS = {"musgd": _musgd, "ultralytics": _ultralytics}


def make_params(seed: int = 0) -> list[nn.Parameter]:
    gen = torch.Generator().manual_seed(seed)
    return [nn.Parameter(torch.randn(s, generator=gen)) for s in SHAPES]


def set_grads(params: list[nn.Parameter], step: int, sign: float = 1.0) -> None:
    gen = torch.Generator().manual_seed(100 + step)
    for p in params:
        p.grad = sign * torch.randn(p.shape, generator=gen)


def run(make: Make, steps: int, *, sign: float = 1.0, **kw: Any) -> list[Tensor]:
    """Parameters and every buffer after ``steps`` steps on gradients ``sign * g``."""
    params = make_params()
    opt = make(params, **kw)
    for step in range(steps):
        set_grads(params, step, sign)
        opt.step()
    return snapshot(opt, params)


def snapshot(opt: torch.optim.Optimizer, params: list[nn.Parameter]) -> list[Tensor]:
    return [
        t.detach().clone() for p in params for t in (p, *(opt.state[p][k] for k in opt.state[p]))
    ]


def assert_bits(a: list[Tensor], b: list[Tensor]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert torch.equal(x, y)


flavours = pytest.mark.parametrize("make", list(FLAVOURS.values()), ids=list(FLAVOURS))


def test_generic_construction_takes_a_default_lr() -> None:
    params = make_params()
    opt = MuSGD(params)  # as a generic harness builds an optimizer: parameters only
    assert opt.param_groups[0]["lr"] == DEFAULT_LR == 0.02
    assert UltralyticsMuSGD(params).param_groups[0]["lr"] == 1e-3  # Ultralytics' own default


@flavours
def test_state_dict_round_trip_resumes_bit_identically(make: Make) -> None:
    params = make_params()
    opt = make(params)
    for step in range(2):
        set_grads(params, step)
        opt.step()
    buffer = io.BytesIO()
    torch.save(opt.state_dict(), buffer)
    resumed_params = [nn.Parameter(p.detach().clone()) for p in params]
    resumed = make(resumed_params)
    buffer.seek(0)
    resumed.load_state_dict(torch.load(buffer, weights_only=True))
    for step in range(2, 4):
        set_grads(params, step)
        set_grads(resumed_params, step)
        opt.step()
        resumed.step()
    assert_bits(snapshot(resumed, resumed_params), snapshot(opt, params))


@flavours
def test_load_state_dict_of_mismatched_groups_raises(make: Make) -> None:
    opt = make(make_params())
    saved = opt.state_dict()
    fewer = make(make_params()[:2])
    with pytest.raises(ValueError, match="parameter group"):
        fewer.load_state_dict(saved)
    other = make(make_params())
    groups = other.state_dict()
    groups["param_groups"][0]["params"] = groups["param_groups"][0]["params"][:-1]
    with pytest.raises(ValueError, match="size"):
        opt.load_state_dict(groups)


@flavours
def test_add_param_group_steps_the_new_group_and_refuses_a_repeated_parameter(make: Make) -> None:
    params = make_params()
    opt = make(params[:3] if make is _musgd else params)
    extra = nn.Parameter(torch.ones(5, 4))
    opt.add_param_group({"params": [extra], "lr": 0.1})
    assert opt.param_groups[-1]["lr"] == 0.1
    for key, value in opt.defaults.items():
        assert key in opt.param_groups[-1], key
        if key != "lr":
            assert opt.param_groups[-1][key] == value or key == "use_muon"
    extra.grad = torch.ones(5, 4)
    before = extra.detach().clone()
    opt.step()
    assert not torch.equal(extra.detach(), before)
    with pytest.raises(ValueError, match="more than one parameter group"):
        opt.add_param_group({"params": [extra]})


@flavours
@pytest.mark.parametrize("set_to_none", [True, False])
def test_zero_grad_sets_gradients_to_none_or_zero(make: Make, set_to_none: bool) -> None:
    params = make_params()
    opt = make(params)
    set_grads(params, 0)
    opt.zero_grad(set_to_none=set_to_none)
    for p in params:
        if set_to_none:
            assert p.grad is None
        else:
            assert p.grad is not None
            assert torch.count_nonzero(p.grad) == 0


@flavours
def test_step_with_a_closure_returns_its_loss_and_uses_its_gradients(make: Make) -> None:
    params = make_params()
    twin = [nn.Parameter(p.detach().clone()) for p in params]
    opt, ref = make(params), make(twin)

    def closure() -> Tensor:
        opt.zero_grad()
        loss = sum((p**2).sum() for p in params)
        assert isinstance(loss, Tensor)
        loss.backward()
        return loss

    with torch.no_grad():  # the closure re-enables grad, as torch.optim documents
        loss = opt.step(closure)  # type: ignore[arg-type]  # torch types the closure as float
    expected = sum((p.detach() ** 2).sum() for p in twin)
    assert isinstance(loss, Tensor)
    assert torch.equal(loss.detach(), expected)
    for p in twin:
        p.grad = 2 * p.detach()
    ref.step()
    assert_bits(snapshot(opt, params), snapshot(ref, twin))


@flavours
def test_lr_may_be_a_tensor(make: Make) -> None:
    as_number = run(make, 2, lr=0.05)
    as_tensor = run(make, 2, lr=torch.tensor(0.05))
    for a, b in zip(as_tensor, as_number, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)  # W - (lr*U) rounds lr*U first


PATHS: dict[str, dict[str, Any]] = {
    "eager": {},
    "per-tensor": {"foreach": False},
    "capture_updates": {"capture_updates": True},
    "capture_orthogonalization": {"capture_orthogonalization": True},
}


@pytest.mark.parametrize(
    ("make", "path"),
    [
        (make, path)
        for make in FLAVOURS.values()
        for path in PATHS
        # The Ultralytics flavour has one (multi-tensor) body.
        if not (make is _ultralytics and path == "per-tensor")
    ],
)
def test_maximize_on_f_is_minimize_on_minus_f_bit_for_bit(make: Make, path: str) -> None:
    kw: dict[str, Any] = dict(PATHS[path])
    replayed = path.startswith("capture")
    recorder: dict[str, Any] = {"recorder": FakeRecorder()} if replayed else {}
    maximized = run(make, 3, maximize=True, **kw, **recorder)
    minimized = run(make, 3, sign=-1.0, **kw, **({"recorder": FakeRecorder()} if replayed else {}))
    assert_bits(maximized, minimized)
    # Control: maximizing f is not minimizing it.
    plain = run(make, 3, **kw)
    assert not torch.equal(maximized[0], plain[0])
    if replayed:  # the replayed path really replayed, with maximize on
        params = make_params()
        opt = make(params, maximize=True, recorder=FakeRecorder(), **kw)
        for step in range(2):
            set_grads(params, step)
            opt.step()
        assert opt._replay.stats.replays > 0  # type: ignore[attr-defined]


@pytest.mark.usefixtures("single_rank")
def test_maximize_reaches_the_sharded_step() -> None:
    group = dist.group.WORLD
    maximized = run(_musgd, 3, maximize=True, process_group=group)
    minimized = run(_musgd, 3, sign=-1.0, process_group=group)
    assert_bits(maximized, minimized)
    assert not torch.equal(maximized[0], run(_musgd, 3, process_group=group)[0])


@flavours
def test_maximize_is_a_group_key_the_state_dict_carries(make: Make) -> None:
    opt = make(make_params(), maximize=True)
    saved = opt.state_dict()
    assert all(g["maximize"] is True for g in saved["param_groups"])
    fresh = make(make_params())
    fresh.load_state_dict(saved)
    assert all(g["maximize"] is True for g in fresh.param_groups)
    # A state dict written before the key existed loads with the constructor's value.
    for g in saved["param_groups"]:
        del g["maximize"]
    older = make(make_params(), maximize=True)
    older.load_state_dict(saved)
    assert all(g["maximize"] is True for g in older.param_groups)
    with pytest.raises(ValueError, match="maximize must be True or False"):
        make(make_params(), maximize="yes")


@flavours
def test_deepcopy_and_pickle_give_an_optimizer_that_steps_the_same(make: Make) -> None:
    params = make_params()
    opt = make(params)
    set_grads(params, 0)
    opt.step()
    copies = [copy.deepcopy(opt), pickle.loads(pickle.dumps(opt))]
    for step in range(1, 3):
        set_grads(params, step)
        opt.step()
        for other in copies:
            set_grads(_params_of(other), step)
            other.step()
    for other in copies:
        assert type(other) is type(opt)
        assert_bits(snapshot(other, _params_of(other)), snapshot(opt, params))
    if make is _ultralytics:
        assert (copies[1].muon, copies[1].sgd) == (0.2, 1.0)


def _params_of(opt: torch.optim.Optimizer) -> list[nn.Parameter]:
    return [p for g in opt.param_groups for p in g["params"]]


@flavours
def test_step_hooks_run_around_each_step(make: Make) -> None:
    params = make_params()
    opt = make(params)
    seen: list[str] = []
    pre = opt.register_step_pre_hook(lambda o, args, kwargs: seen.append("pre"))
    post = opt.register_step_post_hook(lambda o, args, kwargs: seen.append("post"))
    set_grads(params, 0)
    opt.step()
    assert seen == ["pre", "post"]
    pre.remove()
    post.remove()
    opt.step()
    assert seen == ["pre", "post"]


@flavours
@pytest.mark.parametrize(
    ("flag", "replacement"),
    [
        ("differentiable", "not differentiable"),
        ("fused", "ns_backend='triton'"),
        ("capturable", "capture the whole step"),
    ],
)
def test_unsupported_generic_flags_are_refused_saying_what_replaces_them(
    make: Make, flag: str, replacement: str
) -> None:
    with pytest.raises(ValueError, match=rf"{flag}=True is not offered.*{replacement}"):
        make(make_params(), **{flag: True})
    make(make_params(), **{flag: False})  # the flag's default is accepted
