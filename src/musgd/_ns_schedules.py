"""Named Newton–Schulz schedules, as data, and the AOL-preconditioned orthogonalization.

Three schedules (spec §4: ``NSConfig(coefficients=...)`` names):

- ``"quintic"``: the fixed Muon triple for five iterations (R1), the default; through
  :func:`orthogonalize_scheduled` its arithmetic is exactly that of
  :func:`musgd.orthogonalize`, bit for bit.
- ``"polar_express"``: one minimax-optimal odd quintic per iteration (Polar Express, arXiv
  2505.16932, R2), in the paper's bf16-safe form. The triples are derived below by
  :func:`polar_express_triples` from the construction the paper describes; the literal table is
  checked against that derivation by the tests.
- ``"aol4"``: four iterations after an almost-orthogonal (AOL) rescaling in place of the
  Frobenius normalization (Turbo-Muon, arXiv 2512.04632, R270; AOL, R271). The rescaling needs
  ``A = X·Xᵀ``, which the first iteration needs anyway, so it is computed once and reused.

This module is pure math like :mod:`musgd._newton_schulz`, whose iteration it reuses; it never
imports the replay machinery.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from musgd._newton_schulz import (
    DEFAULT_EPS,
    DEFAULT_NS_DTYPE,
    NORMALIZATIONS,
    SCHEDULES,
    Schedule,
    Triple,
    _newton_schulz,
    aol_normalize,
    check_settings,
    gram_pays,
    gram_work,
    to_working_dtype,
)

__all__ = [
    "NORMALIZATIONS",
    "SCHEDULES",
    "Schedule",
    "aol_normalize",
    "ns_flop",
    "orthogonalize_scheduled",
    "orthogonalize_scheduled_batched",
    "polar_express_triples",
    "schedule",
]

# Polar Express construction (R2, as the paper describes it; wp-023 says what was read): the
# singular values of the normalized input are assumed to lie in [l, u] = [1e-3, 1]; each
# iteration's polynomial is the odd quintic p minimizing max |1 - p(x)| over
# [max(l, CUSHION*u), u], rescaled so that p(l) + p(u) = 2 (centred on 1 over the true
# interval), after which [l, u] <- [p(l), 2 - p(l)]. The cushion keeps the first polynomials
# from chasing singular values that round-off has already blurred; SAFETY divides the input of
# every polynomial but the last by 1.01, so that singular values pushed slightly above the
# interval by bf16 round-off are not amplified.
PE_LOWER = 1e-3
PE_CUSHION = 0.02407327424182761
PE_SAFETY = 1.01


def _solve4(M: list[list[float]], rhs: list[float]) -> list[float]:
    """Solve a 4x4 linear system by Gaussian elimination with partial pivoting."""
    A = [[*row, r] for row, r in zip(M, rhs, strict=True)]
    n = len(A)
    for k in range(n):
        pivot = max(range(k, n), key=lambda i: abs(A[i][k]))
        A[k], A[pivot] = A[pivot], A[k]
        for i in range(k + 1, n):
            f = A[i][k] / A[k][k]
            for j in range(k, n + 1):
                A[i][j] -= f * A[k][j]
    x = [0.0] * n
    for i in reversed(range(n)):
        x[i] = (A[i][n] - sum(A[i][j] * x[j] for j in range(i + 1, n))) / A[i][i]
    return x


def _poly(t: Triple, x: float) -> float:
    a, b, c = t
    return a * x + b * x**3 + c * x**5


def minimax_quintic(lo: float, hi: float, *, iterations: int = 100) -> Triple:
    """The odd quintic ``a·x + b·x³ + c·x⁵`` closest to 1 in max norm on ``[lo, hi]`` (Remez).

    Three free coefficients equioscillate at four points: both ends and the two interior
    extrema of ``1 - p``, which are the positive roots of ``p'(x) = a + 3b·x² + 5c·x⁴``.
    """
    if not 0 < lo < hi:
        raise ValueError(f"the interval must satisfy 0 < lo < hi, got [{lo!r}, {hi!r}]")
    pts = [lo + (hi - lo) * k / 3 for k in range(4)]
    a = b = c = 0.0
    for _ in range(iterations):
        rows = [[x, x**3, x**5, float((-1) ** k)] for k, x in enumerate(pts)]
        a, b, c, _ = _solve4(rows, [1.0] * 4)
        disc = 9 * b * b - 20 * a * c
        if c == 0 or disc < 0:
            break
        ys = sorted(((-3 * b - s * math.sqrt(disc)) / (10 * c)) for s in (1.0, -1.0))
        inner = [math.sqrt(y) for y in ys if y > 0 and lo < math.sqrt(y) < hi]
        if len(inner) != 2:
            break
        new = [lo, inner[0], inner[1], hi]
        if all(abs(p - q) <= 1e-15 for p, q in zip(new, pts, strict=True)):
            break
        pts = new
    return (a, b, c)


def polar_express_triples(
    steps: int,
    *,
    lower: float = PE_LOWER,
    cushion: float = PE_CUSHION,
    safety: float = PE_SAFETY,
) -> tuple[Triple, ...]:
    """The Polar Express schedule of ``steps`` iterations for singular values in ``[lower, 1]``.

    Each triple is the minimax odd quintic over the current interval (cushioned), recentred on
    1; all but the last are then evaluated at ``x / safety`` (``a/s, b/s³, c/s⁵``).
    """
    lo, hi = lower, 1.0
    out: list[Triple] = []
    for k in range(steps):
        t = minimax_quintic(max(lo, cushion * hi), hi)
        scale = 2.0 / (_poly(t, lo) + _poly(t, hi))
        a, b, c = (v * scale for v in t)
        lo = _poly((a, b, c), lo)
        hi = 2.0 - lo
        if k < steps - 1:
            a, b, c = a / safety, b / safety**3, c / safety**5
        out.append((a, b, c))
    return tuple(out)


# The schedules themselves (:class:`Schedule`, :data:`SCHEDULES`) live in
# musgd._newton_schulz, the optimizer's one registry of names; the literal triples there are
# polar_express_triples(5) and polar_express_triples(4, lower=AOL_LOWER), printed with repr(),
# and tests/musgd/test_ns_schedules.py re-derives them.
# AOL rescaling leaves every singular value <= 1 (R271, Theorem 1) and raises the smallest ones
# over the Frobenius normalization (1.5-7x on the YOLO-like matrices of the tests; wp-023), so
# four iterations can start from a higher lower end. Turbo-Muon's own coefficient table was not
# available here (wp-023 says so): the schedule is the Polar Express construction for 4
# iterations over [AOL_LOWER, 1], AOL_LOWER picked from {1, 2, 3, 5, 10}e-3 as the value whose
# 4 iterations beat the quintic's 5 in ||OᵀO - I|| on every test matrix, fp64 and bf16.
AOL_LOWER = 5e-3


def schedule(name: str) -> Schedule:
    """The named schedule; an unknown name raises ValueError listing the known ones."""
    try:
        return SCHEDULES[name]
    except (KeyError, TypeError):
        names = ", ".join(repr(n) for n in SCHEDULES)
        raise ValueError(
            f"unknown Newton-Schulz schedule {name!r}; choose one of {names} "
            "or pass an explicit sequence of (a, b, c) triples"
        ) from None


def _run(X: Tensor, sched: Schedule, eps: float, iteration: str = "standard") -> Tensor:
    """``sched`` on a (B, rows, cols) stack already in the working dtype: the optimizer's own
    iteration (:func:`musgd._newton_schulz._newton_schulz`; ``"gram"``: on Gram matrices where
    that pays), with the schedule's normalization."""
    return _newton_schulz(X, sched.triples, eps, sched.normalize, iteration)


def _as_schedule(value: str | Schedule) -> Schedule:
    return value if isinstance(value, Schedule) else schedule(value)


def orthogonalize_scheduled_batched(
    G: Tensor,
    sched: str | Schedule = "quintic",
    *,
    eps: float = DEFAULT_EPS,
    dtype: torch.dtype = DEFAULT_NS_DTYPE,
    iteration: str = "standard",
) -> Tensor:
    """Approximately orthogonalize each matrix of a ``(B, rows, cols)`` stack with ``sched``
    (``iteration`` as in :func:`musgd.orthogonalize_batched`).

    The result has ``G``'s shape and dtype; ``G`` is not modified. With ``"quintic"`` the result
    equals :func:`musgd.orthogonalize_batched` with its defaults exactly.
    """
    if G.dim() != 3:
        raise ValueError(
            f"orthogonalize_scheduled_batched expects a (B, rows, cols) tensor, got "
            f"{tuple(G.shape)}"
        )
    check_settings(dtype, eps)
    return _run(to_working_dtype(G, dtype, eps), _as_schedule(sched), eps, iteration).to(G.dtype)


def orthogonalize_scheduled(
    G: Tensor,
    sched: str | Schedule = "quintic",
    *,
    eps: float = DEFAULT_EPS,
    dtype: torch.dtype = DEFAULT_NS_DTYPE,
) -> Tensor:
    """Approximately orthogonalize one ``(rows, cols)`` matrix with ``sched``."""
    if G.dim() != 2:
        raise ValueError(
            f"orthogonalize_scheduled expects a (rows, cols) tensor, got {tuple(G.shape)}"
        )
    return orthogonalize_scheduled_batched(G.unsqueeze(0), sched, eps=eps, dtype=dtype).squeeze(0)


def ns_flop(rows: int, cols: int, sched: str | Schedule, iteration: str = "standard") -> int:
    """Nominal FLOP of one call on a ``rows x cols`` matrix (``m <= n`` its sides).

    Each iteration costs ``4·m²·n + 2·m³`` (``X·Xᵀ``, ``A·A``, ``B·X``); AOL reuses the first
    ``X·Xᵀ`` and adds ``3·m² + m·n`` (row sums, ``D·A·D``, ``D·X``); the Frobenius norm ``2·m·n``.
    The Gram iteration, where it runs, costs twice :func:`musgd._newton_schulz.gram_work`.
    """
    s = _as_schedule(sched)
    m, n = min(rows, cols), max(rows, cols)
    body = s.steps * (4 * m * m * n + 2 * m * m * m)
    if iteration == "gram" and gram_pays(m, n, s.steps):
        body = 2 * gram_work(m, n, s.steps)
    return body + (3 * m * m + m * n if s.normalize == "aol" else 2 * m * n)
