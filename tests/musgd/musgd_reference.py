"""An independent float64 MuSGD written from spec §1, for the tests (never calls musgd code).

Shared by ``tests/musgd/test_optimizer.py`` and ``tests/cuda/test_core_cuda.py``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

# Spec §1 defaults, restated here on purpose rather than imported from musgd.
MUON_TRIPLE = (3.4445, -4.7750, 2.0315)
NS_EPS = 1e-7


def quintic(x: Tensor, triples: Sequence[tuple[float, float, float]]) -> Tensor:
    """The scalar map each singular value follows: x <- a*x + b*x^3 + c*x^5, once per triple."""
    for a, b, c in triples:
        x = a * x + b * x**3 + c * x**5
    return x


def ns64(
    G: Tensor,
    triples: Sequence[tuple[float, float, float]] = (MUON_TRIPLE,) * 5,
    eps: float = NS_EPS,
) -> Tensor:
    """Quintic Newton–Schulz on one matrix, in float64, exactly as spec §1 states it."""
    X = G.to(torch.float64)
    tall = X.shape[0] > X.shape[1]
    if tall:
        X = X.T
    X = X / (torch.sqrt((X * X).sum()) + eps)
    for a, b, c in triples:
        A = X @ X.T
        B = b * A + c * (A @ A)
        X = a * X + B @ X
    return X.T if tall else X


def route(shape: Sequence[int], use_muon: bool | None = None) -> tuple[int, int] | None:
    """Spec §1 routing: (rows, cols) = (shape[0], numel/shape[0]); a matrix needs both >= 2."""
    if use_muon is False:
        return None
    numel = math.prod(shape)
    rows = shape[0] if shape else 1
    if numel == 0:
        return None
    cols = numel // rows
    if use_muon or (rows >= 2 and cols >= 2):
        return rows, cols
    return None


@dataclass(frozen=True)
class Hyper64:
    """One group's hyperparameters for one step."""

    lr: float
    momentum: float = 0.95
    nesterov: bool = True
    weight_decay: float = 0.0
    w_muon: float = 0.5
    w_sgd: float = 0.5
    ns_steps: int = 5
    use_muon: bool | None = None


def step64(W: Tensor, g: Tensor, m: Tensor, h: Hyper64) -> tuple[Tensor, Tensor]:
    """One spec §1 step of one parameter in float64; returns the new (W, m)."""
    W, g, m = (t.to(torch.float64) for t in (W, g, m))
    m = h.momentum * m + g
    n = g + h.momentum * m if h.nesterov else m
    rc = route(tuple(W.shape), h.use_muon)
    if rc is None:
        U = n + h.weight_decay * W
    else:
        scale = h.w_muon * 0.2 * math.sqrt(max(rc))
        Q = ns64(n.reshape(rc), (MUON_TRIPLE,) * h.ns_steps).reshape(W.shape)
        U = scale * Q + h.w_sgd * n + h.weight_decay * W
    return W - h.lr * U, m


def run64(
    params: Sequence[Tensor], grads_per_step: Sequence[Sequence[Tensor]], hypers: Sequence[Hyper64]
) -> tuple[list[Tensor], list[Tensor]]:
    """Run ``len(hypers)`` steps over ``params`` from zero momentum; returns float64 (W, m)."""
    Ws = [p.detach().to(torch.float64) for p in params]
    ms = [torch.zeros_like(w) for w in Ws]
    for grads, h in zip(grads_per_step, hypers, strict=True):
        for i, g in enumerate(grads):
            Ws[i], ms[i] = step64(Ws[i], g, ms[i], h)
    return Ws, ms


def rel_err(actual: Tensor, expected: Tensor) -> float:
    """Relative Frobenius error of ``actual`` against ``expected`` (in float64)."""
    a, e = actual.to(torch.float64), expected.to(torch.float64)
    return float(torch.linalg.vector_norm(a - e) / torch.linalg.vector_norm(e))
