"""MuSGD the class: spec §1 steps against an independent float64 reference, and its contracts."""

from __future__ import annotations

import inspect
import io
import math
from collections.abc import Callable
from typing import Any

import pytest
import torch
from musgd_reference import MUON_TRIPLE, Hyper64, route, run64
from torch import Tensor, nn

import musgd._functional as functional
from musgd import MuSGD, _newton_schulz, param_groups

# Conv kernels, linear weights (tall, wide, square), a repeated shape (one bucket of three),
# and vectors: a bias, a (C, 1, 1) gain and a one-row weight.
SHAPES = [(8, 3, 3, 3), (16, 8), (4, 24), (24, 4), (16,), (8, 1, 1), (1, 5), (6, 6), (6, 6), (6, 6)]
# bf16 Newton–Schulz differs from the float64 iteration by a relative Frobenius error measured
# at 0.012-0.017 (tests/musgd/test_newton_schulz.py); in a full update that term is mixed with
# the exact SGD term, so 0.04 bounds it with room. fp32 NS and the vector route are ~1e-7.
TOL = {torch.bfloat16: 0.04, torch.float32: 2e-5}


def make_params(seed: int = 0, shapes: list[tuple[int, ...]] = SHAPES) -> list[Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return [nn.Parameter(torch.randn(s, generator=gen)) for s in shapes]


def make_grads(params: list[Tensor], steps: int, seed: int = 1) -> list[list[Tensor]]:
    gen = torch.Generator().manual_seed(seed)
    return [[torch.randn(p.shape, generator=gen) for p in params] for _ in range(steps)]


def run_musgd(
    params: list[Tensor],
    grads_per_step: list[list[Tensor]],
    opt: torch.optim.Optimizer,
    before_step: Callable[[], None] = lambda: None,
) -> None:
    for grads in grads_per_step:
        for p, g in zip(params, grads, strict=True):
            p.grad = g.clone()
        before_step()
        opt.step()


def assert_matches_reference(
    *,
    params: list[Tensor],
    start: list[Tensor],
    opt: torch.optim.Optimizer,
    ref_W: list[Tensor],
    ref_m: list[Tensor],
    tol: float,
    use_muon: bool | None = None,
) -> None:
    for p, w0, rw, rm in zip(params, start, ref_W, ref_m, strict=True):
        t = tol if route(tuple(p.shape), use_muon) is not None else TOL[torch.float32]
        delta, ref_delta = (p.detach() - w0).double(), rw - w0.double()
        err = float((delta - ref_delta).norm() / ref_delta.norm())
        assert err < t, f"{tuple(p.shape)}: parameter change off by {err:.2e} (bound {t})"
        m = opt.state[p]["momentum_buffer"].double()
        assert float((m - rm).norm() / rm.norm()) < 1e-6, f"{tuple(p.shape)}: momentum"


@pytest.mark.parametrize("foreach", [None, False])
@pytest.mark.parametrize("ns_dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("weight_decay", [0.0, 0.1])
@pytest.mark.parametrize("nesterov", [True, False])
@pytest.mark.parametrize("steps", [1, 3])
def test_steps_match_the_float64_reference(
    steps: int, nesterov: bool, weight_decay: float, ns_dtype: torch.dtype, foreach: bool | None
) -> None:
    params = make_params()
    start = [p.detach().clone() for p in params]
    grads = make_grads(params, steps)
    hyper = Hyper64(lr=0.05, momentum=0.9, nesterov=nesterov, weight_decay=weight_decay)
    opt = MuSGD(
        params,
        lr=0.05,
        momentum=0.9,
        nesterov=nesterov,
        weight_decay=weight_decay,
        ns_dtype=ns_dtype,
        foreach=foreach,
    )
    run_musgd(params, grads, opt)
    ref_W, ref_m = run64(start, grads, [hyper] * steps)
    assert_matches_reference(
        params=params, start=start, opt=opt, ref_W=ref_W, ref_m=ref_m, tol=TOL[ns_dtype]
    )


@pytest.mark.parametrize("use_muon", [True, False])
def test_use_muon_forces_the_route(use_muon: bool) -> None:
    params = make_params(shapes=[(8, 12), (8,), (8, 1, 1)])
    start = [p.detach().clone() for p in params]
    grads = make_grads(params, 2)
    opt = MuSGD(
        [{"params": params, "use_muon": use_muon}],
        lr=0.1,
        w_muon=0.6,
        w_sgd=0.4,
        ns_dtype=torch.float32,
    )
    run_musgd(params, grads, opt)
    hyper = Hyper64(lr=0.1, w_muon=0.6, w_sgd=0.4, use_muon=use_muon)
    ref_W, ref_m = run64(start, grads, [hyper] * 2)
    assert_matches_reference(
        params=params,
        start=start,
        opt=opt,
        ref_W=ref_W,
        ref_m=ref_m,
        tol=TOL[torch.float32],
        use_muon=use_muon,
    )


def test_defaults_are_the_spec_values() -> None:
    # Issue #36 gave lr a default (generic construction, as torch.optim's optimizers allow).
    assert inspect.signature(MuSGD).parameters["lr"].default == 0.02
    group = MuSGD([nn.Parameter(torch.zeros(4, 4))], lr=0.1).param_groups[0]
    expected = {
        "lr": 0.1,
        "momentum": 0.95,
        "nesterov": True,
        "weight_decay": 0.0,
        "w_muon": 0.5,
        "w_sgd": 0.5,
        "ns_steps": 5,
        "eps": 1e-7,
        "ns_dtype": "auto",
        "use_muon": None,
        "ns_coefficients": (MUON_TRIPLE,) * 5,
        "maximize": False,
    }
    assert {k: group[k] for k in expected} == expected


def test_default_step_matches_the_reference() -> None:
    params = make_params(seed=5)
    start = [p.detach().clone() for p in params]
    grads = make_grads(params, 2, seed=6)
    opt = MuSGD(params, lr=0.02)
    run_musgd(params, grads, opt)
    ref_W, ref_m = run64(start, grads, [Hyper64(lr=0.02)] * 2)
    assert_matches_reference(
        params=params, start=start, opt=opt, ref_W=ref_W, ref_m=ref_m, tol=TOL[torch.bfloat16]
    )


def test_group_ns_steps_resolves_its_own_coefficients() -> None:
    opt = MuSGD([nn.Parameter(torch.zeros(4, 4))], lr=0.1, ns_coefficients=[(3.0, -3.0, 1.0)])
    opt.add_param_group({"params": [nn.Parameter(torch.zeros(4, 4))], "ns_steps": 2})
    assert opt.param_groups[0]["ns_coefficients"] == ((3.0, -3.0, 1.0),) * 5
    assert opt.param_groups[1]["ns_coefficients"] == ((3.0, -3.0, 1.0),) * 2


NAN, INF = float("nan"), float("inf")


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("lr", -0.1),
        ("lr", NAN),
        ("lr", INF),
        ("lr", "0.1"),
        ("lr", torch.tensor([0.1, 0.2])),
        ("momentum", 1.0),
        ("momentum", -0.01),
        ("momentum", NAN),
        ("momentum", True),
        ("nesterov", 1),
        ("nesterov", "yes"),
        ("weight_decay", -1e-4),
        ("weight_decay", INF),
        ("w_muon", -0.5),
        ("w_muon", NAN),
        ("w_sgd", -0.5),
        ("w_sgd", INF),
        ("ns_steps", 0),
        ("ns_steps", 101),
        ("ns_steps", 2.0),
        ("ns_steps", True),
        ("eps", 0.0),
        ("eps", -1e-7),
        ("eps", NAN),
        ("ns_dtype", torch.float64),
        ("ns_dtype", torch.int8),
        ("ns_dtype", "bf16"),
        ("use_muon", "yes"),
        ("use_muon", 1),
        ("use_muon", 0.0),
        ("ns_coefficients", []),
        ("ns_coefficients", (1.0, 2.0)),
        ("ns_coefficients", [(1.0, 2.0, NAN)]),
        ("ns_coefficients", 3.0),
    ],
)
def test_bad_hyperparameters_raise_value_error_naming_them(name: str, value: Any) -> None:
    kwargs: dict[str, Any] = {"lr": 0.1, name: value}
    with pytest.raises(ValueError, match=name) as info:
        MuSGD([nn.Parameter(torch.zeros(4, 4))], **kwargs)
    assert "MuSGD" in str(info.value)
    # The same check guards a param group, whose message says which group.
    good = nn.Parameter(torch.zeros(4, 4))
    with pytest.raises(ValueError, match=rf"param_groups\[1\].*{name}"):
        MuSGD([{"params": [good]}, {"params": [nn.Parameter(torch.zeros(4))], name: value}], lr=0.1)


def test_lr_may_be_a_one_element_tensor() -> None:
    p = nn.Parameter(torch.ones(3))
    p.grad = torch.ones(3)
    MuSGD([p], lr=torch.tensor(0.5), momentum=0.0).step()  # type: ignore[arg-type]
    torch.testing.assert_close(p.detach(), torch.full((3,), 0.5))


HYPER = {"momentum": 0.9, "weight_decay": 0.01, "w_muon": 0.5, "w_sgd": 0.7}


def _hyper_run(
    live: tuple[str, ...], steps: int = 3, **extra: Any
) -> tuple[list[Tensor], MuSGD, dict[str, Tensor]]:
    """Three steps with the hyperparameters named in ``live`` held in float32 0-d tensors."""
    params = make_params(5)
    tensors = {k: torch.tensor(HYPER.get(k, 0.05), dtype=torch.float32) for k in live}
    values: dict[str, Any] = {"lr": 0.05, **HYPER, **tensors, **extra}
    opt = MuSGD(params, ns_dtype=torch.float32, **values)
    for grads in make_grads(params, steps, seed=6):
        for p, g in zip(params, grads, strict=True):
            p.grad = g
        opt.step()
    return [p.detach().clone() for p in params], opt, tensors


def test_hyperparameters_in_tensors_give_the_bits_of_numbers() -> None:
    """momentum, weight_decay, w_muon and w_sgd held in float32 0-d tensors on the parameters'
    device are read there (no host read) and give the same bits as the numbers (A1)."""
    numbers, _, _ = _hyper_run(())
    held, _, _ = _hyper_run(("momentum", "weight_decay", "w_muon", "w_sgd"))
    for a, b in zip(numbers, held, strict=True):
        assert torch.equal(a, b)


def test_a_zero_held_in_a_tensor_adds_exact_zeros() -> None:
    """A tensor's value is not read on the host, so its term always runs; at zero it changes no
    bit against the number zero, whose term is skipped."""
    numbers, _, _ = _hyper_run((), weight_decay=0.0, w_muon=0.0)
    zeros: dict[str, Any] = {"weight_decay": torch.tensor(0.0), "w_muon": torch.tensor(0.0)}
    held, _, _ = _hyper_run((), **zeros)
    for a, b in zip(numbers, held, strict=True):
        assert torch.equal(a, b)


def test_a_learning_rate_in_a_tensor_is_read_on_the_device_and_scheduled_in_place() -> None:
    """The write reads a tensor lr on the device as ``W - (lr*U)``; an LRScheduler fills that
    tensor in place, and each step uses the value it holds then."""
    params = [nn.Parameter(torch.ones(3))]
    lr = torch.tensor(0.5)
    opt = MuSGD(params, lr=lr, momentum=0.0, nesterov=False)  # type: ignore[arg-type]
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda e: 0.5**e)
    for expected in (0.5, 0.25, 0.125):
        before = params[0].detach().clone()
        params[0].grad = torch.full((3,), 2.0)
        opt.step()
        sched.step()
        assert opt.param_groups[0]["lr"] is lr, "the scheduler keeps the optimizer's tensor"
        torch.testing.assert_close(params[0].detach(), before - expected * 2.0, rtol=0, atol=0)
    numbers, _, _ = _hyper_run(())
    held, _, _ = _hyper_run(("lr",))
    for a, b in zip(numbers, held, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)  # the write rounds lr*U first


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("momentum", torch.tensor(1.0)),
        ("weight_decay", torch.tensor([-0.1])),
        ("w_muon", torch.tensor(NAN)),
        ("w_sgd", torch.tensor(1)),
        ("lr", torch.tensor([0.1, 0.2])),
    ],
)
def test_bad_hyperparameter_tensors_raise_value_error_naming_them(name: str, value: Any) -> None:
    with pytest.raises(ValueError, match=name):
        MuSGD([nn.Parameter(torch.zeros(4, 4))], **{"lr": 0.1, name: value})


def test_a_first_step_inside_a_capture_raises_and_changes_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Momentum buffers are made at a parameter's first step: inside a CUDA-graph capture that
    would be replayed as a reset, so it raises, saying to step once first."""
    import musgd._engine as engine_module

    params = make_params(7)
    for p in params:
        p.grad = torch.ones_like(p)
    before = [p.detach().clone() for p in params]
    opt = MuSGD(params, lr=0.1)
    monkeypatch.setattr(engine_module, "capturing", lambda device=None: True)
    with pytest.raises(RuntimeError, match="run one step outside the capture first"):
        opt.step()
    assert not any(opt.state.values()), "no buffer was made"
    for p, b in zip(params, before, strict=True):
        assert torch.equal(p.detach(), b)


@pytest.mark.filterwarnings("ignore:Sparse invariant checks:UserWarning")
def test_sparse_gradient_raises_runtime_error_with_group_and_index() -> None:
    dense, sparse = nn.Parameter(torch.zeros(4, 4)), nn.Parameter(torch.zeros(10, 3))
    dense.grad = torch.zeros(4, 4)
    sparse.grad = torch.sparse_coo_tensor(
        torch.tensor([[1, 7]]), torch.ones(2, 3), (10, 3), check_invariants=True
    )
    dense.grad = torch.ones(4, 4)
    opt = MuSGD([{"params": [dense]}, {"params": [nn.Parameter(torch.zeros(2)), sparse]}], lr=0.1)
    opt.param_groups[1]["params"][0].grad = torch.zeros(2)
    with pytest.raises(RuntimeError, match=r"sparse.*param_groups\[1\], params\[1\]"):
        opt.step()
    # The error comes before any write: the earlier group is untouched and has no state.
    assert torch.equal(dense.detach(), torch.zeros(4, 4))
    assert len(opt.state) == 0


def test_complex_parameter_raises_runtime_error_with_group_and_index() -> None:
    p = nn.Parameter(torch.zeros(4, 4, dtype=torch.complex64))
    p.grad = torch.ones(4, 4, dtype=torch.complex64)
    with pytest.raises(RuntimeError, match=r"complex.*param_groups\[0\], params\[0\]"):
        MuSGD([p], lr=0.1).step()


@pytest.mark.parametrize("dtype", [torch.int64, torch.bool, torch.float8_e4m3fn])
def test_a_parameter_of_no_stepping_dtype_is_refused_before_any_write(dtype: torch.dtype) -> None:
    """An audit's integer tensor failed in torch's arithmetic after the group before it was
    written (and with foreach=False, after its own buffers were)."""
    dense = nn.Parameter(torch.zeros(4, 4))
    dense.grad = torch.ones(4, 4)
    odd = torch.zeros(3, 3, dtype=dtype)
    odd.grad = torch.ones(3, 3, dtype=dtype)
    groups: list[dict[str, Any]] = [{"params": [dense]}, {"params": [odd]}]
    for foreach in (None, False):
        opt = MuSGD(groups, lr=0.1, foreach=foreach)
        with pytest.raises(RuntimeError, match=rf"param_groups\[1\], params\[0\] has a {dtype}"):
            opt.step()
        assert torch.equal(dense.detach(), torch.zeros(4, 4))
        assert len(opt.state) == 0


def test_parameter_without_gradient_gets_no_state_and_is_not_moved() -> None:
    with_grad, without = make_params(shapes=[(6, 6), (6, 6)])
    before = without.detach().clone()
    with_grad.grad = torch.ones(6, 6)
    opt = MuSGD([with_grad, without], lr=0.1)
    opt.step()
    assert without not in opt.state
    assert set(opt.state[with_grad]) == {"momentum_buffer"}
    assert torch.equal(without.detach(), before)


def _forbid_newton_schulz(monkeypatch: pytest.MonkeyPatch) -> None:
    def forbidden(*args: object, **kwargs: object) -> Tensor:
        raise AssertionError("Newton–Schulz must not run")

    monkeypatch.setattr(functional, "newton_schulz_stack", forbidden)


@pytest.mark.parametrize("foreach", [None, False])
def test_w_muon_zero_skips_newton_schulz(monkeypatch: pytest.MonkeyPatch, foreach: bool) -> None:
    _forbid_newton_schulz(monkeypatch)
    params = make_params(seed=2)
    start = [p.detach().clone() for p in params]
    grads = make_grads(params, 2)
    # The patch is live: with w_muon > 0 the same step reaches Newton–Schulz and fails.
    with pytest.raises(AssertionError, match="must not run"):
        run_musgd(params, grads[:1], MuSGD(params, lr=0.1, foreach=foreach))
    for p, s in zip(params, start, strict=True):
        p.data.copy_(s)
    opt = MuSGD(params, lr=0.1, w_muon=0.0, w_sgd=0.7, weight_decay=0.01, foreach=foreach)
    run_musgd(params, grads, opt)
    hyper = Hyper64(lr=0.1, w_muon=0.0, w_sgd=0.7, weight_decay=0.01)
    ref_W, ref_m = run64(start, grads, [hyper] * 2)
    assert_matches_reference(
        params=params, start=start, opt=opt, ref_W=ref_W, ref_m=ref_m, tol=TOL[torch.float32]
    )


class TinyNet(nn.Module):
    """A small conv net: conv kernels, a linear weight, biases and norm weights."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.norm = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1, bias=False)
        self.head = nn.Linear(8, 4)

    def forward(self, x: Tensor) -> Tensor:
        x = torch.relu(self.norm(self.conv1(x)))
        x = torch.relu(self.conv2(x)).mean(dim=(2, 3))
        out: Tensor = self.head(x)
        return out


def batch(step: int) -> tuple[Tensor, Tensor]:
    gen = torch.Generator().manual_seed(1000 + step)
    return torch.randn(4, 3, 8, 8, generator=gen), torch.randn(4, 4, generator=gen)


def train_step(model: nn.Module, opt: torch.optim.Optimizer, step: int) -> float:
    x, y = batch(step)
    opt.zero_grad()
    loss = (model(x) - y).square().mean()
    loss.backward()
    opt.step()
    return float(loss.detach())


def make_training(seed: int = 0) -> tuple[nn.Module, MuSGD, torch.optim.lr_scheduler.StepLR]:
    torch.manual_seed(seed)
    model = TinyNet()
    opt = MuSGD(param_groups(model, weight_decay=1e-3), lr=0.05, momentum=0.9)
    return model, opt, torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)


def roundtrip(obj: object) -> Any:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


def test_state_dict_round_trip_through_weights_only_load() -> None:
    model, opt, _ = make_training()
    for step in range(2):
        train_step(model, opt, step)
    saved = opt.state_dict()
    loaded = roundtrip(saved)
    assert loaded["param_groups"] == saved["param_groups"]
    assert loaded["param_groups"][0]["ns_dtype"] == "auto"
    assert saved["state"].keys() == loaded["state"].keys()
    for key, state in saved["state"].items():
        assert torch.equal(loaded["state"][key]["momentum_buffer"], state["momentum_buffer"])
    other_model, other, _ = make_training(seed=1)
    other.load_state_dict(loaded)
    assert other.state_dict()["param_groups"] == saved["param_groups"]
    for p_other, p in zip(other_model.parameters(), model.parameters(), strict=True):
        assert torch.equal(other.state[p_other]["momentum_buffer"], opt.state[p]["momentum_buffer"])


def test_resume_is_bit_identical_to_an_uninterrupted_run() -> None:
    model, opt, sched = make_training()
    losses = []
    for step in range(6):
        losses.append(train_step(model, opt, step))
        sched.step()

    first, opt_a, sched_a = make_training()
    resumed = []
    for step in range(3):
        resumed.append(train_step(first, opt_a, step))
        sched_a.step()
    checkpoint = roundtrip(
        {"model": first.state_dict(), "opt": opt_a.state_dict(), "sched": sched_a.state_dict()}
    )
    second, opt_b, sched_b = make_training(seed=99)  # different init: everything comes from disk
    second.load_state_dict(checkpoint["model"])
    opt_b.load_state_dict(checkpoint["opt"])
    sched_b.load_state_dict(checkpoint["sched"])
    for step in range(3, 6):
        resumed.append(train_step(second, opt_b, step))
        sched_b.step()

    assert resumed == losses
    for p, q in zip(model.parameters(), second.parameters(), strict=True):
        assert torch.equal(p, q)
        assert torch.equal(opt.state[p]["momentum_buffer"], opt_b.state[q]["momentum_buffer"])
    assert opt_b.param_groups[0]["lr"] == opt.param_groups[0]["lr"] == 0.05 * 0.5**3


def _run_scheduled(
    make_scheduler: Callable[[MuSGD], Any], steps: int
) -> tuple[list[tuple[float, float]], list[Tensor], list[Tensor], MuSGD, list[list[Tensor]]]:
    params = make_params(seed=3)
    start = [p.detach().clone() for p in params]
    grads = make_grads(params, steps, seed=4)
    opt = MuSGD(params, lr=0.1, momentum=0.9, ns_dtype=torch.float32)
    sched = make_scheduler(opt)
    seen: list[tuple[float, float]] = []
    for g in grads:
        for p, gi in zip(params, g, strict=True):
            p.grad = gi.clone()
        seen.append((opt.param_groups[0]["lr"], opt.param_groups[0]["momentum"]))
        opt.step()
        sched.step()
    hypers = [Hyper64(lr=lr, momentum=mu) for lr, mu in seen]
    ref_W, ref_m = run64(start, grads, hypers)
    assert_matches_reference(
        params=params, start=start, opt=opt, ref_W=ref_W, ref_m=ref_m, tol=TOL[torch.float32]
    )
    return seen, ref_W, ref_m, opt, grads


def test_step_lr_schedule_is_honoured() -> None:
    seen, *_ = _run_scheduled(lambda o: torch.optim.lr_scheduler.StepLR(o, 2, gamma=0.5), 5)
    assert [lr for lr, _ in seen] == pytest.approx([0.1, 0.1, 0.05, 0.05, 0.025])


def test_lambda_lr_schedule_is_honoured() -> None:
    seen, *_ = _run_scheduled(
        lambda o: torch.optim.lr_scheduler.LambdaLR(o, lambda e: 1.0 / (1 + e)), 4
    )
    assert [lr for lr, _ in seen] == pytest.approx([0.1, 0.05, 0.1 / 3, 0.025])


def test_one_cycle_lr_cycles_lr_and_momentum() -> None:
    seen, *_ = _run_scheduled(
        lambda o: torch.optim.lr_scheduler.OneCycleLR(
            o, max_lr=0.1, total_steps=6, base_momentum=0.8, max_momentum=0.95
        ),
        6,
    )
    lrs, momenta = zip(*seen, strict=True)
    # Six steps: warm up from max_lr/25 to near max_lr, then anneal to ~0.
    assert lrs[0] == pytest.approx(0.1 / 25)
    assert max(lrs) > 0.099
    assert lrs[-1] < 1e-5
    # Momentum moves against the learning rate (0.95 -> ~0.80 -> 0.95); the reference check in
    # _run_scheduled proves each step used the value the scheduler had just written.
    assert momenta[0] == pytest.approx(0.95)
    assert momenta[-1] == pytest.approx(0.95)
    assert min(momenta) < 0.81
    assert lrs.index(max(lrs)) == momenta.index(min(momenta))


def test_zero_grad_set_to_none_skips_the_next_step() -> None:
    params = make_params(seed=7)
    opt = MuSGD(params, lr=0.1)
    run_musgd(params, make_grads(params, 1), opt)
    opt.zero_grad(set_to_none=True)
    assert all(p.grad is None for p in params)
    snapshot = [(p.detach().clone(), opt.state[p]["momentum_buffer"].clone()) for p in params]
    opt.step()
    for p, (w, m) in zip(params, snapshot, strict=True):
        assert torch.equal(p.detach(), w)
        assert torch.equal(opt.state[p]["momentum_buffer"], m)


def test_zero_grad_keeping_zeros_still_steps_on_momentum() -> None:
    params = make_params(seed=8)
    start = [p.detach().clone() for p in params]
    grads = make_grads(params, 1)
    opt = MuSGD(params, lr=0.1, ns_dtype=torch.float32)
    run_musgd(params, grads, opt)
    opt.zero_grad(set_to_none=False)
    assert all(p.grad is not None and not p.grad.any() for p in params)
    opt.step()  # zero gradient: the momentum still moves the parameters
    zeros = [torch.zeros_like(g) for g in grads[0]]
    ref_W, ref_m = run64(start, [grads[0], zeros], [Hyper64(lr=0.1)] * 2)
    assert_matches_reference(
        params=params, start=start, opt=opt, ref_W=ref_W, ref_m=ref_m, tol=TOL[torch.float32]
    )


def test_zero_gradient_on_a_fresh_optimizer_is_a_no_op_without_decay() -> None:
    params = make_params(seed=9)
    start = [p.detach().clone() for p in params]
    opt = MuSGD(params, lr=0.1)
    for p in params:
        p.grad = torch.zeros_like(p)
    opt.step()
    for p, s in zip(params, start, strict=True):
        assert torch.equal(p.detach(), s)  # NS(0) is 0, not NaN
        assert not opt.state[p]["momentum_buffer"].any()


def _grad_scaler() -> Any:
    try:
        return torch.amp.GradScaler("cpu", init_scale=2.0**10)
    except (AttributeError, RuntimeError, TypeError) as exc:  # older torch: CUDA-only scaler
        pytest.skip(f"torch.amp.GradScaler('cpu') is not supported by torch {torch.__version__}")
        raise AssertionError from exc  # unreachable; pytest.skip raises


def test_grad_scaler_unscales_and_steps_like_an_unscaled_run() -> None:
    scaler = _grad_scaler()
    scaled_model, scaled_opt, _ = make_training()
    plain_model, plain_opt, _ = make_training()
    for step in range(3):
        x, y = batch(step)
        scaled_opt.zero_grad()
        scaler.scale((scaled_model(x) - y).square().mean()).backward()
        scaler.unscale_(scaled_opt)
        plain_opt.zero_grad()
        (plain_model(x) - y).square().mean().backward()
        # The scale is a power of two, so unscaled gradients equal the plain ones exactly.
        for p, q in zip(scaled_model.parameters(), plain_model.parameters(), strict=True):
            assert torch.equal(p.grad, q.grad)  # type: ignore[arg-type]
        scaler.step(scaled_opt)
        scaler.update()
        plain_opt.step()
    assert scaler.get_scale() == 2.0**10
    for p, q in zip(scaled_model.parameters(), plain_model.parameters(), strict=True):
        assert torch.equal(p, q)


def test_grad_scaler_skips_a_step_with_an_inf_gradient() -> None:
    scaler = _grad_scaler()
    model, opt, _ = make_training()
    train_step(model, opt, 0)  # momentum buffers exist
    snapshot = {
        p: (p.detach().clone(), opt.state[p]["momentum_buffer"].clone()) for p in model.parameters()
    }
    x, y = batch(1)
    opt.zero_grad()
    scaler.scale((model(x) - y).square().mean()).backward()
    model.conv2.weight.grad[0, 0, 0, 0] = INF  # type: ignore[index,operator,union-attr]  # an overflow in one element
    assert scaler.step(opt) is None
    scaler.update()
    assert scaler.get_scale() == 2.0**9  # backed off
    for p, (w, m) in snapshot.items():
        assert torch.equal(p.detach(), w)
        assert torch.equal(opt.state[p]["momentum_buffer"], m)


@pytest.mark.parametrize("foreach", [None, False])
def test_non_finite_gradients_propagate_like_sgd(foreach: bool | None) -> None:
    def run(poison: bool) -> tuple[list[Tensor], MuSGD]:
        params = make_params(seed=10, shapes=[(6, 10), (6, 10), (6,)])
        grads = make_grads(params, 1)
        if poison:
            grads[0][0][2, 3] = NAN
            grads[0][2][1] = INF
        opt = MuSGD(params, lr=0.1, foreach=foreach)
        run_musgd(params, grads, opt)
        return params, opt

    (a, b, v), opt = run(poison=True)
    (_, b0, v0), _ = run(poison=False)
    # A NaN entry poisons its matrix through the Frobenius norm in Newton–Schulz ...
    assert torch.isnan(a).all()
    # ... while its momentum buffer holds it in that one entry, as SGD's would.
    m = opt.state[a]["momentum_buffer"]
    assert torch.isnan(m[2, 3])
    assert int(torch.isnan(m).sum()) == 1
    # A matrix stacked in the same batched call is unaffected: normalization is per matrix.
    assert torch.equal(b, b0)
    # An inf in a vector moves that entry to -inf, elementwise, as SGD would.
    assert v[1] == -math.inf
    mask = torch.arange(6) != 1
    assert torch.equal(v[mask], v0[mask])


def test_closure_is_evaluated_with_grad_and_its_loss_returned() -> None:
    model, opt, _ = make_training()
    x, y = batch(0)
    with torch.no_grad():
        expected = float((model(x) - y).square().mean())

    def closure() -> float:
        opt.zero_grad()
        loss = (model(x) - y).square().mean()
        loss.backward()  # needs grad mode, although step() itself runs under no_grad
        return float(loss.detach())

    before = model.head.weight.detach().clone()  # type: ignore[operator,union-attr]
    assert opt.step(closure) == expected
    assert not torch.equal(model.head.weight, before)  # type: ignore[arg-type,union-attr]


# A group whose largest matrix is above the CPU crossover (256 x 256: 5.0e7 multiply-adds per
# iteration against CPU_BF16_MIN_WORK = 1.7e7), and SHAPES, below it.
LARGE_SHAPES = [(256, 256), (32, 16), (8,)]


@pytest.mark.parametrize(
    ("native_bf16", "shapes", "bf16_expected"),
    [
        (False, SHAPES, False),
        (False, LARGE_SHAPES, False),
        (True, SHAPES, False),
        (True, LARGE_SHAPES, True),
    ],
)
def test_auto_ns_dtype_runs_float32_on_cpu_bit_for_bit(
    monkeypatch: pytest.MonkeyPatch,
    native_bf16: bool,
    shapes: list[tuple[int, ...]],
    bf16_expected: bool,
) -> None:
    """The default ("auto") on a CPU without native bf16 is float32 Newton–Schulz, not emulated
    bf16; on one with it (AVX512-BF16 or AMX), bf16 for a group whose largest matrix is above
    the crossover, float32 below it."""
    monkeypatch.setattr(_newton_schulz, "_CPU_NATIVE_BF16", [native_bf16])
    assert (
        max(_newton_schulz.ns_work(s[0], math.prod(s[1:])) for s in shapes if len(s) > 1)
        >= _newton_schulz.CPU_BF16_MIN_WORK
    ) is (shapes is LARGE_SHAPES)
    results = []
    for ns_dtype in ("auto", torch.float32, torch.bfloat16):
        params = make_params(seed=9, shapes=shapes)
        opt = MuSGD(params, lr=0.1, ns_dtype=ns_dtype)
        for p in params:
            p.grad = torch.ones_like(p)
        opt.step()
        results.append([p.detach().clone() for p in params])
    auto, fp32, bf16 = results
    same, other = (bf16, fp32) if bf16_expected else (fp32, bf16)
    assert all(torch.equal(a, b) for a, b in zip(auto, same, strict=True))
    assert not all(torch.equal(a, b) for a, b in zip(auto, other, strict=True))


@pytest.mark.parametrize("foreach", ["x", 1, 0])
def test_a_foreach_that_is_not_a_bool_or_none_is_refused(foreach: object) -> None:
    # A truthy string used to pick the foreach body silently, as True would.
    params = [nn.Parameter(torch.zeros(4, 4))]
    with pytest.raises(ValueError, match=rf"foreach must be None, True or False, got {foreach!r}"):
        MuSGD(params, foreach=foreach)  # type: ignore[arg-type]
    for ok in (None, True, False):
        MuSGD(params, foreach=ok)


def test_the_gram_backend_steps_as_the_torch_backend_up_to_rounding() -> None:
    # Wide matrices take the Gram iteration, the square one the standard iteration; in float32
    # both land within rounding of the torch backend, and the setting survives a state dict.
    shapes = [(16, 8, 3, 3), (24, 96), (12, 12), (12,)]

    def run(backend: str) -> tuple[list[Tensor], MuSGD]:
        gen = torch.Generator().manual_seed(0)
        params = [nn.Parameter(torch.randn(s, generator=gen)) for s in shapes]
        opt = MuSGD(params, lr=0.05, ns_backend=backend, ns_dtype=torch.float32)
        for _ in range(3):
            for p in params:
                p.grad = torch.randn(p.shape, generator=gen)
            opt.step()
        return [p.detach() for p in params], opt

    gram, opt = run("gram")
    reference, _ = run("torch")
    for a, b in zip(gram, reference, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5)
    assert torch.equal(gram[2], reference[2])  # square: the standard iteration, the same bits
    state = opt.state_dict()
    assert state["param_groups"][0]["ns_backend"] == "gram"
    again = MuSGD([nn.Parameter(torch.zeros(s)) for s in shapes], lr=0.05)
    again.load_state_dict(state)
    assert again.param_groups[0]["ns_backend"] == "gram"


def test_numpy_scalars_are_numbers_and_step_as_their_floats() -> None:
    """Found by an audit: np.float32 learning rates and np.int64 step counts were refused as
    not numbers (torch.optim takes them); a NumPy bool is still no number."""
    np = pytest.importorskip("numpy")
    torch.manual_seed(0)
    p = torch.nn.Parameter(torch.randn(6, 4))
    q = torch.nn.Parameter(p.detach().clone())
    a = MuSGD([p], lr=np.float32(0.01), momentum=np.float32(0.9), ns_steps=np.int64(5))
    b = MuSGD([q], lr=float(np.float32(0.01)), momentum=float(np.float32(0.9)), ns_steps=5)
    for _ in range(3):
        g = torch.randn(6, 4)
        p.grad, q.grad = g.clone(), g.clone()
        a.step()
        b.step()
    assert torch.equal(p, q)
    with pytest.raises(ValueError, match="lr must be a number"):
        MuSGD([p], lr=np.bool_(True))
    # Stored as Python numbers: the schedule reads them, and a weights_only load (which
    # refuses NumPy's scalars) takes the checkpoint.
    c = MuSGD([p], lr=np.float64(0.01), ns_steps=np.int64(3), eps=np.float64(1e-7))
    c.add_param_group({"params": [q], "momentum": np.float32(0.5)})
    assert c.ns_config().steps == 3
    assert all(
        type(group[key]) in (int, float)
        for group in c.param_groups
        for key in ("lr", "momentum", "ns_steps", "eps")
    )
    assert roundtrip(c.state_dict())["param_groups"] == c.state_dict()["param_groups"]
