"""Quintic Newton–Schulz orthogonalization: tensor in, tensor out.

This module is pure math. It never imports the replay machinery; the optimizer chooses whether
these functions run eagerly or are replayed from a CUDA graph.
"""

from __future__ import annotations

import contextlib
import functools
import math
import numbers
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

import torch
from torch import Tensor

# (a, b, c) of the quintic iteration X <- a*X + (b*A + c*A*A)*X with A = X*X^T, as published in
# the Muon write-up (Jordan et al., 2024; docs/PROVENANCE.md R1). Tuned for five iterations.
DEFAULT_COEFFICIENTS: tuple[float, float, float] = (3.4445, -4.7750, 2.0315)
DEFAULT_STEPS = 5
DEFAULT_EPS = 1e-7
DEFAULT_NS_DTYPE = torch.bfloat16
MAX_STEPS = 100
SUPPORTED_NS_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
# The optimizer's default working dtype: resolved per device by :func:`resolve_ns_dtype`.
AUTO_NS_DTYPE = "auto"

Triple = tuple[float, float, float]
Coefficients = str | Triple | Sequence[Triple]

# Polar Express (Amsel et al., arXiv 2505.16932; R2): one minimax-optimal odd quintic per
# iteration for singular values in [1e-3, 1], in the paper's bf16-safe form (cushion, safety
# factor 1.01 on all but the last). These are ``musgd._ns_schedules.polar_express_triples(5)``,
# printed with repr(); tests/musgd/test_ns_schedules.py re-derives them (WP-023).
POLAR_EXPRESS_COEFFICIENTS: tuple[Triple, ...] = (
    (8.205160414005567, -22.90193498705603, 16.460724910180303),
    (4.066395159942774, -2.861154086755141, 0.5183995226694739),
    (3.9095949044379146, -2.823351735039512, 0.5250369769390013),
    (3.285564017198615, -2.4153019596359457, 0.4852940655279089),
    (2.300652019954818, -1.6689039845747504, 0.4188073119525674),
)
# aol4 (WP-023): four Polar Express-style minimax quintics for [5e-3, 1] after the AOL
# rescaling (Turbo-Muon, arXiv 2512.04632, R270; AOL, R271) in place of the Frobenius
# normalization. These are musgd._ns_schedules.polar_express_triples(4, lower=AOL_LOWER),
# printed with repr(); tests/musgd/test_ns_schedules.py re-derives them.
AOL4_COEFFICIENTS: tuple[Triple, ...] = (
    (8.071393522978342, -22.52856987447433, 16.192369401672423),
    (3.870724547407258, -2.8144986353949144, 0.5269889347722406),
    (3.1582359606108845, -2.321602152947545, 0.4749026120309498),
    (2.200028180035982, -1.5770596350587671, 0.40893738237389954),
)

# How a matrix is normalized before the first iteration: "frobenius" (X/||X||_F) or "aol" (the
# AOL row rescaling, :func:`aol_normalize`).
Normalize = Literal["frobenius", "aol"]
NORMALIZATIONS: tuple[Normalize, ...] = ("frobenius", "aol")


def schedule_steps(coefficients: Coefficients, steps: int | None = None) -> int:
    """The iterations a schedule runs: ``steps`` where given, else a named schedule's own
    (:data:`SCHEDULES`), else an explicit sequence's length where it is longer than
    :data:`DEFAULT_STEPS` (its last triples had been dropped), else :data:`DEFAULT_STEPS` (a
    shorter sequence repeats its last triple). Given ``steps`` shorter than a sequence run its
    first ``steps`` triples."""
    if steps is not None:
        return steps
    if isinstance(coefficients, str):
        named = SCHEDULES.get(coefficients)
        return DEFAULT_STEPS if named is None else named.steps
    if _explicit_sequence(coefficients) and len(coefficients) <= MAX_STEPS:
        return max(DEFAULT_STEPS, len(coefficients))
    return DEFAULT_STEPS  # (a longer sequence is refused where its triples are validated)


def _explicit_sequence(coefficients: object) -> bool:
    """Whether ``coefficients`` is a sequence of triples (not one triple, not a name)."""
    if not isinstance(coefficients, Sequence) or isinstance(coefficients, str | bytes | bytearray):
        return False
    return not (len(coefficients) == 3 and all(_is_number(v) for v in coefficients))


def schedule_normalization(coefficients: Coefficients, normalize: str | None = None) -> str:
    """The normalization a schedule runs with: ``normalize`` where given, else a named
    schedule's own (:data:`SCHEDULES`), else ``"frobenius"``.

    A schedule tuned after the Frobenius normalization accepts either: both leave every singular
    value <= 1, and AOL only raises the smallest (R271), so the interval it was tuned for still
    holds. One tuned for a narrower interval that only AOL gives ("aol4") insists on AOL.
    """
    named = SCHEDULES.get(coefficients) if isinstance(coefficients, str) else None
    own = None if named is None or named.normalize == "frobenius" else named.normalize
    if normalize is None:
        return own or "frobenius"
    if normalize not in NORMALIZATIONS:
        names = ", ".join(map(repr, NORMALIZATIONS))
        raise ValueError(f"ns normalize must be one of {names}, got {normalize!r}")
    if own is not None and normalize != own:
        raise ValueError(
            f"the {coefficients!r} schedule is tuned for the {own!r} normalization, not "
            f"{normalize!r}: leave normalize out, or pass the schedule's triples themselves"
        )
    return normalize


# Muon's RMS-matching factor: 0.2*sqrt(max(rows, cols)) gives the orthogonalized update about
# the RMS of an Adam/SGD update (Moonshot's "Muon is Scalable", arXiv 2502.16982; R3).
MUON_RMS_SCALE = 0.2


def muon_rms_scale(rows: int, cols: int) -> float:
    """The default flavour's Muon scale of a ``(rows, cols)`` matrix: ``0.2*sqrt(max(rows,
    cols))`` (the ``"muon"`` scale)."""
    return MUON_RMS_SCALE * math.sqrt(max(rows, cols))


def ultralytics_scale(shape: Sequence[int]) -> float:
    """The Ultralytics flavour's Muon scale: ``sqrt(max(1, shape[-2]/shape[-1]))`` (the
    ``"ultralytics"`` scale).

    Measured on the installed Ultralytics 8.4.190 as a black box (one step on a zero parameter,
    ``lr=1``, ``momentum=0``, ``muon=1``, ``sgd=0``; tests/ultralytics checks it): the ratio is that
    of the tensor's last two dimensions, so ``rows/cols`` for a matrix but ``kh/kw`` for a conv
    kernel ``(O, I, kh, kw)``, not the ``rows/cols`` of its matrix view that the spec states.
    """
    return math.sqrt(max(1.0, shape[-2] / shape[-1]))


def _muon_tensor_scale(shape: Sequence[int]) -> float:
    """:func:`muon_rms_scale` of a tensor's matrix view ``(shape[0], numel/shape[0])``."""
    rows = shape[0]
    return muon_rms_scale(rows, math.prod(shape) // rows)


# Named Muon scales: name -> the scale of a tensor of that shape (routed to Newton-Schulz).
SCALES: dict[str, Callable[[Sequence[int]], float]] = {
    "muon": _muon_tensor_scale,
    "ultralytics": ultralytics_scale,
}


def resolve_coefficients(coefficients: Coefficients, steps: int) -> tuple[Triple, ...]:
    """Expand `coefficients` into exactly `steps` (a, b, c) triples.

    A single triple is used for every iteration; a sequence gives one triple per iteration and a
    shorter sequence repeats its last triple (e.g. the Polar Express schedule, arXiv 2505.16932).
    """
    if torch.compiler.is_compiling():
        # Dynamo traces through an lru_cache wrapper (and warns); the plain body traces the same.
        return _resolve(coefficients, steps)
    try:
        return _resolve_cached(coefficients, steps)
    except TypeError:  # an unhashable sequence (a list): validate it uncached
        return _resolve(coefficients, steps)


# Every Newton-Schulz call validates its settings; a step repeats the same few settings, so the
# validation is cached. `typed=True` keeps `steps=5.0` from reusing the verdict of `steps=5`.
@functools.lru_cache(maxsize=64, typed=True)
def _resolve_cached(coefficients: Coefficients, steps: int) -> tuple[Triple, ...]:
    return _resolve(coefficients, steps)


def _resolve(coefficients: Coefficients, steps: int) -> tuple[Triple, ...]:
    """The uncached body of :func:`resolve_coefficients`."""
    integral = isinstance(steps, numbers.Integral) and not isinstance(steps, bool)
    if not integral or not 1 <= int(steps) <= MAX_STEPS:
        raise ValueError(f"ns_steps must be an int in 1..{MAX_STEPS}, got {steps!r}")
    steps = int(steps)  # NumPy's integers too
    seq = _as_triples(coefficients)
    if not seq:
        raise ValueError("ns_coefficients must hold at least one (a, b, c) triple, got none")
    return tuple(seq[min(i, len(seq) - 1)] for i in range(steps))


def _as_triples(coefficients: Coefficients) -> list[Triple]:
    """Return `coefficients` as a list of validated float triples."""
    if isinstance(coefficients, str):
        named = SCHEDULES.get(coefficients)
        if named is None:
            names = ", ".join(map(repr, SCHEDULES))
            raise ValueError(
                f"ns_coefficients names no known schedule: {coefficients!r}; the names are "
                f"{names}, or pass a sequence of (a, b, c) triples"
            )
        return list(named.triples)
    if not isinstance(coefficients, Sequence) or isinstance(coefficients, bytes | bytearray):
        # Without this, len() below raises a TypeError that names no argument (and bytes, a
        # sequence of ints, would read as triples: b"quintic" is not the name).
        raise ValueError(
            "ns_coefficients must be an (a, b, c) triple or a sequence of triples, "
            f"got {coefficients!r}"
        )
    items: Sequence[object] = coefficients
    if len(coefficients) == 3 and all(_is_number(v) for v in coefficients):
        items = [coefficients]
    triples: list[Triple] = []
    for i, item in enumerate(items):
        if not isinstance(item, Sequence) or len(item) != 3 or not all(map(_is_number, item)):
            raise ValueError(
                f"ns_coefficients[{i}] must be an (a, b, c) triple of finite numbers, got {item!r}"
            )
        a, b, c = (float(v) for v in item)
        if not all(math.isfinite(v) for v in (a, b, c)):
            raise ValueError(f"ns_coefficients[{i}] must be finite, got {item!r}")
        triples.append((a, b, c))
    return triples


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


# On a CPU with native bf16, "auto" is bf16 only for a group whose largest matrix needs at least
# this many multiply-adds per Newton-Schulz iteration (:func:`ns_work`); below it float32 is the
# faster one, because bf16 adds a conversion and a slower small-matrix kernel to every product.
# Measured on an AMX Xeon (`python -m musgd.bench cpu-dtype`, WP-022): float32 faster up to
# 128x128 (ns_work 6.3e6), bf16 from 256x256 (5.0e7) up; 2**24 lies between the two. It
# sends the digits CNN and MLP to float32 and the YOLO26n shapes to bf16, the faster on each.
CPU_BF16_MIN_WORK = 2**24


def ns_work(rows: int, cols: int) -> int:
    """Multiply-adds of one Newton-Schulz iteration on a ``rows x cols`` matrix.

    With ``s = min(rows, cols)`` and ``l = max(rows, cols)``: ``A = X X^T`` (s*s*l), ``A A``
    (s*s*s) and ``B X`` (s*s*l).
    """
    small, large = min(rows, cols), max(rows, cols)
    return small * small * (2 * large + small)


def resolve_ns_dtype(
    ns_dtype: torch.dtype | str,
    device: torch.device,
    matrices: Iterable[tuple[int, int]] = (),
    backend: str = "auto",
) -> torch.dtype:
    """The Newton–Schulz working dtype for a group whose matrices (``(rows, cols)`` views, read
    only on a CPU with native bf16) live on ``device``.

    A dtype is returned as given. ``"auto"`` is ``torch.bfloat16`` where matrices multiply in
    bf16 natively and the work is large enough to gain from it, ``torch.float32`` everywhere
    else: a CUDA device of compute capability 8.0 or newer is bf16; a CPU with AVX512-BF16 or
    AMX is bf16 when the group's largest matrix needs at least :data:`CPU_BF16_MIN_WORK`
    multiply-adds per iteration (:func:`ns_work`; issue #36: a small CNN stepped 9x slower in
    bf16, the YOLO26n shapes 1.26x faster). Without native bf16, bf16 ``addmm``/``bmm`` is
    emulated and an order of magnitude slower than float32 (docs/work_packages/wp-010.md,
    docs/work_packages/wp-022.md). For the Gram iteration (``backend="gram"``) a CUDA device
    is float16 instead (as fast as bf16 there; bf16 is not precise enough for it,
    :func:`_iterate_gram_in_float16`) and a CPU float32.
    """
    if isinstance(ns_dtype, torch.dtype):
        return ns_dtype
    if device.type == "cpu":
        if backend == "gram" or not cpu_has_native_bf16():
            return torch.float32
        largest = max((ns_work(rows, cols) for rows, cols in matrices), default=0)
        return torch.bfloat16 if largest >= CPU_BF16_MIN_WORK else torch.float32
    if device.type != "cuda":
        return torch.float32
    index = device.index if device.index is not None else torch.cuda.current_device()
    if backend == "gram":
        return torch.float16 if torch.cuda.get_device_capability(index)[0] >= 7 else torch.float32
    dtype = _CUDA_AUTO_DTYPES.get(index)
    if dtype is None:
        major, _ = torch.cuda.get_device_capability(index)
        dtype = torch.bfloat16 if major >= 8 else torch.float32
        _CUDA_AUTO_DTYPES[index] = dtype
    return dtype


_CPU_BF16_PROBES = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
_CPU_NATIVE_BF16: list[bool] = []  # computed once; a list (not lru_cache) for compiled steps


def cpu_has_native_bf16() -> bool:
    """Whether this CPU multiplies bf16 natively (AVX512-BF16 or AMX tiles), as ``torch.cpu``
    reports it; False where this torch cannot say."""
    if not _CPU_NATIVE_BF16:
        found = False
        for name in _CPU_BF16_PROBES:
            probe = getattr(torch.cpu, name, None)
            with contextlib.suppress(RuntimeError, AttributeError):  # a build that cannot say
                found = found or bool(callable(probe) and probe())
        _CPU_NATIVE_BF16.append(found)
    return _CPU_NATIVE_BF16[0]


# "auto" per CUDA device index: a plain dict (not lru_cache) so that a compiled step reads it.
_CUDA_AUTO_DTYPES: dict[int, torch.dtype] = {}


def _check_dtype(dtype: torch.dtype) -> None:
    if dtype not in SUPPORTED_NS_DTYPES:
        names = ", ".join(str(d) for d in SUPPORTED_NS_DTYPES)
        raise ValueError(f"ns_dtype must be one of {names}, got {dtype!r}")


def check_settings(dtype: torch.dtype, eps: float) -> None:
    """Refuse a working dtype or an ``eps`` that no Newton–Schulz call accepts."""
    _check_dtype(dtype)
    if not eps > 0:
        raise ValueError(f"eps must be > 0, got {eps!r}")


def _newton_schulz(
    X: Tensor,
    triples: tuple[Triple, ...],
    eps: float,
    normalize: str = "frobenius",
    iteration: str = "standard",
) -> Tensor:
    """Run the iteration on a (B, rows, cols) stack already in the working dtype."""
    transposed = X.size(-2) > X.size(-1)
    if transposed:
        X = X.mT
    run = iterate
    if iteration == "gram" and gram_pays(X.size(-2), X.size(-1), len(triples)):
        run = iterate_gram if X.dtype != torch.bfloat16 else _iterate_gram_in_float16
    if normalize == "aol":
        X, gram = aol_normalize(X, eps)
        X = run(X, triples, gram)
    else:
        # Per-matrix Frobenius normalization puts every singular value in (0, 1].
        X = X / (torch.linalg.vector_norm(X, dim=(-2, -1), keepdim=True) + eps)
        X = run(X, triples)
    if transposed:
        X = X.mT
    return X


def aol_normalize(X: Tensor, eps: float = DEFAULT_EPS) -> tuple[Tensor, Tensor]:
    """AOL rescaling of a wide ``(B, rows <= cols)`` stack: ``(D·X, D·A·D)`` with ``A = X·Xᵀ``,
    ``X`` first divided by its Frobenius norm (which changes ``D·X`` only through ``eps``).

    ``D = diag(1 / sqrt(Σ_j |A_ij| + eps))``. By the AOL theorem (R271, Theorem 1, applied to
    ``Xᵀ``, whose columns are the rows of ``X``), ``‖Xᵀ·D‖₂ <= 1``, so every singular value of
    ``D·X`` is at most 1 without any norm estimate; ``eps`` keeps a zero row at zero, so a
    zero-padded stack rescales each matrix as alone (zero columns add nothing to ``A``). The
    second result is the Gram matrix of ``D·X``, exact up to rounding, for the first iteration.
    """
    # D·X does not change when X is scaled; dividing by the Frobenius norm first keeps the
    # Gram products of a small-valued momentum clear of float16's underflow.
    X = X / (torch.linalg.vector_norm(X, dim=(-2, -1), keepdim=True) + eps)
    A = torch.bmm(X, X.mT)
    d = torch.rsqrt(A.abs().sum(dim=-1, keepdim=True) + eps)  # (B, rows, 1)
    return X * d, A * d * d.mT


def iterate(X: Tensor, triples: Sequence[Triple], gram: Tensor | None = None) -> Tensor:
    """The quintic iterations on a normalized, wide (B, rows <= cols) stack.

    ``gram``, when given, is ``X·Xᵀ`` already computed (a preconditioner that needs it anyway,
    musgd._ns_schedules), and the first iteration uses it instead of multiplying again.
    """
    for i, (a, b, c) in enumerate(triples):
        # bmm rather than `@`: the same kernel, without matmul's broadcasting views per call.
        A = gram if i == 0 and gram is not None else torch.bmm(X, X.mT)
        B = torch.baddbmm(A, A, A, beta=b, alpha=c)  # b*A + c*A@A
        X = torch.baddbmm(X, B, X, beta=a, alpha=1.0)  # a*X + B@X
    return X


# How the iterations run: "standard" (on X, :func:`iterate`) or "gram" (on X's Gram matrix,
# :func:`iterate_gram`, where that takes fewer operations; the optimizer's ``ns_backend="gram"``).
Iteration = Literal["standard", "gram"]
ITERATIONS: tuple[Iteration, ...] = ("standard", "gram")
# The Gram iteration forms X again before these iterations (0-based) and restarts from its
# Gram matrix. Gram Newton-Schulz (Dao AI Lab, 2026; docs/PROVENANCE.md R387) restarts so in
# half precision: rounding gives the Gram matrix spurious negative eigenvalues, which the
# polynomial then grows. Measured here in float16 on matrices whose singular values spread from
# 1 to 1e-3 (tests/musgd/test_newton_schulz.py): without a restart ||O·Oᵀ - I|| came out up to
# 1.7x the standard iteration's with the quintic and 236x with Polar Express; restarting before
# the third iteration kept every schedule within 1.01x. bf16 is not enough even so
# (:func:`_iterate_gram_in_float16`).
GRAM_RESTARTS: tuple[int, ...] = (2,)


def gram_work(rows: int, cols: int, steps: int, restarts: Sequence[int] = GRAM_RESTARTS) -> int:
    """Multiply-adds of ``steps`` Gram iterations (:func:`iterate_gram`) on a ``rows x cols``
    matrix: with ``s`` the short side and ``l`` the long one, a Gram product (``s·s·l``) at the
    start and at each restart, an ``X`` product (``s·s·l``) at each restart and at the end, and
    per iteration ``R·R``, the product's update (from the second iteration of each run on) and
    ``R ← Q·R·Q`` (but before a restart or the end): ``s³`` each, twice for the last."""
    small, large = min(rows, cols), max(rows, cols)
    starts = [0, *(r for r in sorted(set(restarts)) if 0 < r < steps)]
    ends = [*starts[1:], steps]
    cubes = 0
    for start, end in zip(starts, ends, strict=True):
        run = end - start
        cubes += run + (run - 1) + 2 * (run - 1)  # R·R; P ← Q·P; R ← Q·R·Q
    rectangles = 2 * len(starts)  # a Gram product and an X product per run
    return small * small * (rectangles * large + cubes * small)


def gram_pays(rows: int, cols: int, steps: int) -> bool:
    """Whether the Gram iteration takes fewer multiply-adds than the standard one here: with
    the default restart, for matrices whose long side is over 1.5 times the short one (a 3x3
    convolution's ``out x 9·in``), not for square ones."""
    return gram_work(rows, cols, steps) < steps * ns_work(rows, cols)


def iterate_gram(X: Tensor, triples: Sequence[Triple], gram: Tensor | None = None) -> Tensor:
    """The quintic iterations of :func:`iterate`, run on the Gram matrix (Gram Newton-Schulz,
    docs/PROVENANCE.md R387; our derivation).

    With ``R = X·Xᵀ`` an iteration is ``X ← Q·X``, ``Q = a·I + b·R + c·R²``; ``Q`` is a
    polynomial in ``R``, so ``R ← Q·R·Q`` and the products of the ``Q`` apply to the first ``X``
    at the end: square ``rows x rows`` products in place of the ``rows x cols`` ones. ``X`` is
    formed again, and its Gram matrix, before each iteration of :data:`GRAM_RESTARTS`.
    Mathematically the standard iteration; rounded differently. ``gram`` as in :func:`iterate`.
    """
    R = gram if gram is not None else torch.bmm(X, X.mT)
    P: Tensor | None = None
    last = len(triples) - 1
    for i, (a, b, c) in enumerate(triples):
        if P is not None and i in GRAM_RESTARTS:
            X = torch.bmm(P, X)
            R, P = torch.bmm(X, X.mT), None
        Q = torch.baddbmm(R, R, R, beta=b, alpha=c)  # b*R + c*R@R
        Q.diagonal(dim1=-2, dim2=-1).add_(a)  # + a*I
        P = Q if P is None else torch.bmm(Q, P)
        if i < last and i + 1 not in GRAM_RESTARTS:
            R = torch.bmm(Q, torch.bmm(R, Q))
    return X if P is None else torch.bmm(P, X)


def to_working_dtype(G: Tensor, dtype: torch.dtype, eps: float = DEFAULT_EPS) -> Tensor:
    """``G`` in the working ``dtype``; in float16 divided first, in its own dtype, by each
    matrix's Frobenius norm (which the iteration divides by anyway).

    float16 has 5 exponent bits: a momentum of entries near 1e-6 and below (recorded YOLO26n
    momenta reach 1e-11) loses them to underflow when cast as it is, and ns-quality measured
    its results up to 1.9 from the polar factor where bf16's were 1.1 (WP-023). The Triton
    table normalizes before it rounds too. bf16 and float32 keep float32's range: ``G`` as it
    is, the bits unchanged.
    """
    if dtype == torch.float16 and G.dtype != torch.float16:
        G = G / (torch.linalg.vector_norm(G, dim=(-2, -1), keepdim=True) + eps)
    return G.to(dtype)


def _iterate_gram_in_float16(
    X: Tensor, triples: Sequence[Triple], gram: Tensor | None = None
) -> Tensor:
    """:func:`iterate_gram` of a bf16 stack, run in float16 and returned in bf16.

    bf16 keeps 8 bits of mantissa, and the Gram iteration compounds their rounding: on the
    YOLO26n shapes (``python -m musgd.bench ns-quality --iterations standard,gram``, WP-023)
    bf16 took Polar Express's largest ``||OᵀO - I||`` from 0.22 to 1.6 and aol4's from 0.16 to
    47, where float16 (11 bits) matched the standard iteration's for every schedule. A
    normalized ``X`` and every matrix the iteration forms stay far inside float16's range.
    """
    del gram  # formed in bf16 (the AOL normalization's): formed again in float16
    return iterate_gram(X.half(), triples).to(X.dtype)


def _check_matrix_input(name: str, G: object, dims: int, form: str) -> None:
    """``G`` is a real floating-point tensor of ``dims`` dimensions; else TypeError or
    ValueError naming what it is (an integer matrix came back as zeros: the result rounded to
    its dtype)."""
    if not isinstance(G, Tensor):
        raise TypeError(
            f"{name} expects a {form} torch.Tensor, got {type(G).__name__}; wrap it with "
            "torch.as_tensor(..., dtype=torch.float32)"
        )
    if not G.is_floating_point():
        raise TypeError(
            f"{name} expects a real floating-point tensor, got {G.dtype}; convert it first "
            "(G.float())"
        )
    if G.dim() != dims:
        raise ValueError(f"{name} expects a {form} tensor, got {tuple(G.shape)}")


def orthogonalize_batched(
    G: Tensor,
    *,
    steps: int | None = None,
    coefficients: Coefficients = DEFAULT_COEFFICIENTS,
    eps: float = DEFAULT_EPS,
    dtype: torch.dtype = DEFAULT_NS_DTYPE,
    normalize: str | None = None,
    iteration: str = "standard",
) -> Tensor:
    """Approximately orthogonalize each matrix of a ``(B, rows, cols)`` stack.

    Each matrix is normalized by its own Frobenius norm (or, with ``normalize="aol"`` or the
    ``"aol4"`` schedule, by the AOL row rescaling of its wide orientation), then ``steps``
    quintic Newton–Schulz iterations (None: the schedule's own, as :class:`musgd.NSConfig`
    counts them; 4 for ``"aol4"``) run in ``dtype``: on the matrices themselves, or with
    ``iteration="gram"`` on their Gram matrices where that takes fewer operations
    (:func:`iterate_gram`; in float16 where ``dtype`` is bf16). The result has ``G``'s shape
    and dtype; ``G`` is not modified.
    """
    _check_matrix_input("orthogonalize_batched", G, 3, "(B, rows, cols)")
    try:
        return newton_schulz_stack(
            G,
            steps=schedule_steps(coefficients, steps),
            coefficients=coefficients,
            eps=eps,
            dtype=dtype,
            normalize=normalize,
            iteration=iteration,
        )
    except ValueError as exc:
        # The checks are the optimizer's, whose settings are ns_steps, ...: here they are
        # this function's arguments.
        raise ValueError(_ARGUMENT_NAMES.sub(r"\1", str(exc))) from None


_ARGUMENT_NAMES = re.compile(r"\bns_(steps|coefficients|dtype)\b")


def newton_schulz_stack(
    G: Tensor,
    *,
    steps: int,
    coefficients: Coefficients,
    eps: float,
    dtype: torch.dtype,
    normalize: str | None,
    iteration: str,
) -> Tensor:
    """:func:`orthogonalize_batched` for the optimizer: a ``(B, rows, cols)`` stack it made, its
    settings' names (``ns_steps``, ...) in the errors."""
    if iteration not in ITERATIONS:
        raise ValueError(
            f"iteration must be one of {', '.join(map(repr, ITERATIONS))}, got {iteration!r}"
        )
    check_settings(dtype, eps)
    triples = resolve_coefficients(coefficients, steps)
    how = schedule_normalization(coefficients, normalize)
    return _newton_schulz(to_working_dtype(G, dtype, eps), triples, eps, how, iteration).to(G.dtype)


def orthogonalize(
    G: Tensor,
    *,
    steps: int | None = None,
    coefficients: Coefficients = DEFAULT_COEFFICIENTS,
    eps: float = DEFAULT_EPS,
    dtype: torch.dtype = DEFAULT_NS_DTYPE,
    normalize: str | None = None,
    iteration: str = "standard",
) -> Tensor:
    """Approximately orthogonalize one ``(rows, cols)`` matrix (its polar factor ``U·Vᵀ``;
    with the AOL normalization, that of its rescaled form; ``iteration`` as in
    :func:`orthogonalize_batched`).

    The result has ``G``'s shape and dtype; ``G`` is not modified.
    """
    _check_matrix_input("orthogonalize", G, 2, "(rows, cols)")
    return orthogonalize_batched(
        G.unsqueeze(0),
        steps=steps,
        coefficients=coefficients,
        eps=eps,
        dtype=dtype,
        normalize=normalize,
        iteration=iteration,
    ).squeeze(0)


@dataclass(frozen=True)
class Schedule:
    """A named Newton–Schulz schedule: one (a, b, c) triple per iteration, how the input is
    normalized before the first (``"frobenius"``: ``X/‖X‖_F``; ``"aol"``: :func:`aol_normalize`),
    and where it comes from."""

    name: str
    triples: tuple[Triple, ...]
    normalize: Normalize
    source: str

    def __post_init__(self) -> None:
        if self.normalize not in NORMALIZATIONS:
            raise ValueError(
                f"schedule {self.name!r}: normalize must be one of {', '.join(NORMALIZATIONS)}, "
                f"got {self.normalize!r}"
            )
        # Validates every triple (finite numbers, 1..MAX_STEPS of them) and freezes them.
        triples = resolve_coefficients(self.triples, len(self.triples))
        object.__setattr__(self, "triples", triples)

    @property
    def steps(self) -> int:
        """The number of iterations."""
        return len(self.triples)


# The named schedules, the one registry of them: ``NSConfig(coefficients=...)``, the
# ``ns_coefficients`` arguments and every backend accept each name here, with its triples, its
# length (``"aol4"`` runs 4 iterations unless told otherwise) and its normalization. Adding a
# schedule is one entry.
_NAMED_SCHEDULES: dict[str, Schedule] = {
    s.name: s
    for s in (
        Schedule(
            name="quintic",
            triples=(DEFAULT_COEFFICIENTS,) * DEFAULT_STEPS,
            normalize="frobenius",
            source="Muon (Jordan et al., 2024; R1): one tuned quintic, five iterations",
        ),
        Schedule(
            name="polar_express",
            triples=POLAR_EXPRESS_COEFFICIENTS,
            normalize="frobenius",
            source="Polar Express (Amsel et al., arXiv 2505.16932; R2): per-iteration "
            "minimax quintics for [1e-3, 1], cushion 0.0241, safety 1.01 on all but the "
            "last; computed by polar_express_triples(5) from the paper's construction",
        ),
        Schedule(
            name="aol4",
            triples=AOL4_COEFFICIENTS,
            normalize="aol",
            source="Turbo-Muon (Boissin et al., arXiv 2512.04632; R270) AOL rescaling "
            "(Prach & Lampert, ECCV 2022; R271) with 4 Polar Express-style minimax "
            "quintics for [5e-3, 1]: polar_express_triples(4, lower=AOL_LOWER), our choice",
        ),
    )
}
SCHEDULES: Mapping[str, Schedule] = MappingProxyType(_NAMED_SCHEDULES)
