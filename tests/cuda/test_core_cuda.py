"""The eager MuSGD core on CUDA: float64 reference, foreach vs per-tensor, resume; fp32 and bf16."""

from __future__ import annotations

import importlib.util
import io
import itertools
from typing import Any

import pytest
import torch
from musgd_reference import Hyper64, ns64, rel_err, route, run64
from torch import Tensor, nn

from musgd import MuSGD, orthogonalize, orthogonalize_batched
from musgd._functional import (
    EagerOrthogonalizer,
    Hyper,
    NSSettings,
    Orthogonalizer,
    Structure,
    build_layout,
    prepare_updates_foreach,
    prepare_updates_per_tensor,
    run_in_order,
)
from musgd._newton_schulz import resolve_coefficients

pytestmark = pytest.mark.cuda

DEVICE = torch.device("cuda")
SHAPES = [(8, 3, 3, 3), (16, 8), (4, 24), (24, 4), (16,), (8, 1, 1), (6, 6), (6, 6), (6, 6)]
PARAM_DTYPES = [torch.float32, torch.bfloat16]
NS_DTYPES = [torch.bfloat16, torch.float32]
# Relative error bounds of the parameter change against float64. fp32 params: the NS working
# dtype dominates (bf16 NS measured at <= 0.017 on CPU; fp32 NS ~1e-6, TF32 is off by default).
# bf16 params: every buffer and write rounds to 8 significant bits (2^-9 relative per
# operation), compounded over three steps.
DELTA_TOL = {
    (torch.float32, torch.bfloat16): 0.04,
    (torch.float32, torch.float32): 2e-5,
    (torch.bfloat16, torch.bfloat16): 0.06,
    (torch.bfloat16, torch.float32): 0.03,
}
MOMENTUM_TOL = {torch.float32: 1e-6, torch.bfloat16: 1e-2}


def _tensors(seed: int, dtype: torch.dtype, scale: float = 1.0) -> list[Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return [(scale * torch.randn(s, generator=gen)).to(DEVICE, dtype) for s in SHAPES]


@pytest.mark.parametrize("foreach", [None, False])
@pytest.mark.parametrize("ns_dtype", NS_DTYPES)
@pytest.mark.parametrize("dtype", PARAM_DTYPES)
def test_steps_match_the_float64_reference(
    dtype: torch.dtype, ns_dtype: torch.dtype, foreach: bool | None
) -> None:
    # Small weights, so that a bf16 write W - lr*U resolves the update (bf16 spacing near 0.1 is
    # 5e-4, the update is about lr*0.5 = 0.025).
    params = [nn.Parameter(t) for t in _tensors(0, dtype, scale=0.1)]
    start = [p.detach().clone() for p in params]
    grads = [_tensors(1 + k, dtype) for k in range(3)]
    opt = MuSGD(params, lr=0.05, momentum=0.9, weight_decay=0.1, ns_dtype=ns_dtype, foreach=foreach)
    for step_grads in grads:
        for p, g in zip(params, step_grads, strict=True):
            p.grad = g.clone()
        opt.step()
    ref_W, ref_m = run64(
        [s.cpu() for s in start],
        [[g.cpu() for g in gs] for gs in grads],
        [Hyper64(lr=0.05, momentum=0.9, weight_decay=0.1)] * 3,
    )
    for p, w0, rw, rm in zip(params, start, ref_W, ref_m, strict=True):
        matrix = route(tuple(p.shape)) is not None
        tol = DELTA_TOL[dtype, ns_dtype] if matrix else DELTA_TOL[dtype, torch.float32]
        assert p.device.type == "cuda"
        assert p.dtype == dtype
        err = rel_err(p.detach().cpu().double() - w0.cpu().double(), rw - w0.cpu().double())
        assert err < tol, f"{tuple(p.shape)}: parameter change off by {err:.2e} (bound {tol})"
        m = opt.state[p]["momentum_buffer"]
        assert m.device.type == "cuda"
        assert m.dtype == dtype
        assert rel_err(m.cpu(), rm) < MOMENTUM_TOL[dtype]


@pytest.mark.parametrize("ns_dtype", NS_DTYPES)
def test_orthogonalize_matches_the_float64_iteration(ns_dtype: torch.dtype) -> None:
    G = torch.randn(3, 48, 20, generator=torch.Generator().manual_seed(2)).to(DEVICE)
    batched = orthogonalize_batched(G, dtype=ns_dtype)
    tol = 0.04 if ns_dtype == torch.bfloat16 else 1e-5
    for g, q in zip(G, batched, strict=True):
        assert rel_err(q.cpu(), ns64(g.cpu())) < tol
        assert rel_err(orthogonalize(g, dtype=ns_dtype).cpu(), q.cpu()) < tol


class SliceOrthogonalizer(Orthogonalizer):
    """Eager NS one matrix at a time, so both bodies see identical Newton–Schulz bits."""

    def __init__(self) -> None:
        self.inner = EagerOrthogonalizer()

    run_buckets = staticmethod(run_in_order)

    def single(self, G: Tensor, ns: NSSettings) -> Tensor:
        return self.inner.single(G, ns)

    def batched(self, G: Tensor, ns: NSSettings) -> Tensor:
        return torch.stack([self.inner.single(g, ns) for g in G])


@pytest.mark.parametrize("dtype", PARAM_DTYPES)
@pytest.mark.parametrize(("nesterov", "decay"), list(itertools.product([True, False], repeat=2)))
def test_foreach_body_equals_per_tensor_body(
    dtype: torch.dtype, nesterov: bool, decay: bool
) -> None:
    ns = NSSettings(
        steps=5,
        coefficients=resolve_coefficients((3.4445, -4.7750, 2.0315), 5),
        eps=1e-7,
        dtype=torch.bfloat16,
    )
    structure = Structure(nesterov=nesterov, decay=decay, muon=True, ns=ns)
    hyper = Hyper(momentum=0.9, weight_decay=0.1 if decay else 0.0, w_muon=0.5, w_sgd=0.5)
    params, grads, bufs = _tensors(3, dtype), _tensors(4, dtype), _tensors(5, dtype)
    layout = build_layout(params, None)
    bufs_b = [b.clone() for b in bufs]
    # Same Newton–Schulz bits on both sides: the foreach kernels must equal the per-tensor ones.
    orth = SliceOrthogonalizer()
    u_a = prepare_updates_foreach(params, grads, bufs, layout, hyper, structure, orth)
    u_b = prepare_updates_per_tensor(params, grads, bufs_b, layout, hyper, structure, orth)
    for a, b in itertools.chain(zip(u_a, u_b, strict=True), zip(bufs, bufs_b, strict=True)):
        assert torch.equal(a, b)
    # With the real batched call the stacked NS may differ in the last bits only.
    bufs_c, bufs_d = [b.clone() for b in bufs_b], [b.clone() for b in bufs_b]
    eager = EagerOrthogonalizer()
    u_c = prepare_updates_foreach(params, grads, bufs_c, layout, hyper, structure, eager)
    u_d = prepare_updates_per_tensor(params, grads, bufs_d, layout, hyper, structure, eager)
    for c, d in zip(u_c, u_d, strict=True):
        assert rel_err(c.cpu(), d.cpu()) < 0.02


class Mlp(nn.Module):
    """Matmul-only layers (deterministic on CUDA), one kernel-shaped 4-D weight, norms, biases."""

    def __init__(self) -> None:
        super().__init__()
        self.kernel = nn.Parameter(torch.randn(16, 4, 2, 2) * 0.2)  # used as a (16, 16) matrix
        self.norm = nn.LayerNorm(16)
        self.hidden = nn.ModuleList(nn.Linear(16, 16) for _ in range(3))
        self.head = nn.Linear(16, 4)

    def forward(self, x: Tensor) -> Tensor:
        x = self.norm(x @ self.kernel.flatten(1).T)
        for layer in self.hidden:
            x = torch.tanh(layer(x))
        out: Tensor = self.head(x)
        return out


def _training(dtype: torch.dtype, seed: int) -> tuple[nn.Module, MuSGD]:
    torch.manual_seed(seed)
    model = Mlp().to(DEVICE, dtype)
    return model, MuSGD(model.parameters(), lr=0.05, weight_decay=1e-3)


def _train(model: nn.Module, opt: MuSGD, steps: range, dtype: torch.dtype) -> list[float]:
    losses = []
    for step in steps:
        gen = torch.Generator().manual_seed(100 + step)
        x = torch.randn(32, 16, generator=gen).to(DEVICE, dtype)
        y = torch.randn(32, 4, generator=gen).to(DEVICE, dtype)
        opt.zero_grad()
        loss = (model(x) - y).float().square().mean()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return losses


def _roundtrip(obj: object) -> Any:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


@pytest.mark.parametrize("dtype", PARAM_DTYPES)
def test_resume_from_state_dict_is_bit_identical(dtype: torch.dtype) -> None:
    straight, opt = _training(dtype, seed=0)
    losses = _train(straight, opt, range(6), dtype)

    first, opt_a = _training(dtype, seed=0)
    resumed = _train(first, opt_a, range(3), dtype)
    checkpoint = _roundtrip({"model": first.state_dict(), "opt": opt_a.state_dict()})
    second, opt_b = _training(dtype, seed=1)
    second.load_state_dict(checkpoint["model"])
    opt_b.load_state_dict(checkpoint["opt"])
    resumed += _train(second, opt_b, range(3, 6), dtype)

    assert resumed == losses
    # Training really moved the matrices (a bf16 write may swallow a small update of a norm
    # weight near 1.0, so vectors are not required to move).
    initial = _training(dtype, seed=0)[0]
    pairs = zip(initial.parameters(), straight.parameters(), strict=True)
    assert not any(torch.equal(p, q) for p, q in pairs if p.dim() >= 2)
    for p, q in zip(straight.parameters(), second.parameters(), strict=True):
        assert q.device.type == "cuda"
        assert torch.equal(p, q)
        m_p, m_q = opt.state[p]["momentum_buffer"], opt_b.state[q]["momentum_buffer"]
        assert m_q.device.type == "cuda"
        assert m_q.dtype == dtype
        assert torch.equal(m_p, m_q)


@pytest.mark.parametrize("backend", ["triton", "torch"])
def test_a_step_with_tensor_hyperparameters_captures_whole_and_follows_schedules(
    backend: str,
) -> None:
    """With every hyperparameter in a float32 0-d tensor on the GPU, ``optimizer.step()``
    captured whole in one CUDA graph (after one eager warm-up step) replays the eager step bit
    for bit while an LRScheduler and in-place writes change the values between replays."""
    if backend == "triton" and importlib.util.find_spec("triton") is None:
        pytest.skip("needs triton")
    shapes = [(64, 32, 3, 3), (128, 64), (32, 128), (64,), (16, 64, 1, 1), (128,)]
    values = {"lr": 0.02, "momentum": 0.9, "weight_decay": 5e-4, "w_muon": 0.5, "w_sgd": 0.5}

    def make() -> tuple[list[nn.Parameter], dict[str, Tensor], MuSGD]:
        gen = torch.Generator(device=DEVICE).manual_seed(5)
        params = [nn.Parameter(torch.randn(s, generator=gen, device=DEVICE)) for s in shapes]
        held = {k: torch.tensor(v, device=DEVICE) for k, v in values.items()}
        return params, held, MuSGD(params, ns_backend=backend, **held)  # type: ignore[arg-type]

    ref_p, ref_t, ref = make()
    cap_p, cap_t, cap = make()
    gen = torch.Generator(device=DEVICE).manual_seed(6)
    grads = [[torch.randn(p.shape, generator=gen, device=DEVICE) for p in ref_p] for _ in range(8)]
    for p in cap_p:  # the captured step reads its gradients here
        p.grad = torch.zeros_like(p)
    scheds = [torch.optim.lr_scheduler.LambdaLR(o, lambda s: 0.9**s) for o in (ref, cap)]
    graph = torch.cuda.CUDAGraph()
    for step, g in enumerate(grads):
        for p, gi in zip(ref_p, g, strict=True):
            p.grad = gi.clone()
        for p, gi in zip(cap_p, g, strict=True):
            p.grad.copy_(gi)  # type: ignore[union-attr]
        for held in (ref_t, cap_t):
            held["momentum"].fill_(0.85 + 0.01 * step)
        ref.step()
        if step == 0:  # the warm-up: makes the buffers, plans and cached constants
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                cap.step()
            torch.cuda.current_stream().wait_stream(side)
            with torch.cuda.graph(graph):
                cap.step()
        else:
            graph.replay()
        for sched in scheds:
            sched.step()
        torch.cuda.synchronize()
        for a, b in zip(ref_p, cap_p, strict=True):
            assert torch.equal(a.detach(), b.detach()), f"step {step}"
        for a, b in zip(ref_p, cap_p, strict=True):
            assert torch.equal(ref.state[a]["momentum_buffer"], cap.state[b]["momentum_buffer"])
    assert cap.param_groups[0]["lr"] is cap_t["lr"]
