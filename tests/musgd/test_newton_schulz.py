"""Newton–Schulz: against the float64 SVD polar factor, batched vs scalar, schedules, errors."""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from musgd_reference import MUON_TRIPLE, ns64, quintic, rel_err
from torch import Tensor

from musgd import (
    DEFAULT_COEFFICIENTS,
    _newton_schulz,
    orthogonalize,
    orthogonalize_batched,
)
from musgd._newton_schulz import CPU_BF16_MIN_WORK, ns_work, resolve_coefficients, resolve_ns_dtype

# The band of the default coefficients. Newton–Schulz maps each singular value s of the
# Frobenius-normalized input independently through p(x) = a*x + b*x^3 + c*x^5 (five times), so
# the band is the range of p∘p∘p∘p∘p over the normalized singular values. Measured on a 200,001-
# point log grid: for x in [0.003, 1] it is [0.6818, 1.2024] (for x >= 0.01: [0.6818, 1.1344]);
# below 0.003 the output falls (x = 0.001 gives 0.47). The matrices below have condition number
# 4 and rank at most 64, so every normalized singular value is >= 1/(4*sqrt(64)) = 0.031, well
# inside. bf16 arithmetic moved the measured singular values by at most 0.015 from the float64
# prediction, hence a margin of 0.02 on each side.
BAND = (0.6818 - 0.02, 1.2024 + 0.02)
COND = 4.0
SHAPES = [(32, 32), (48, 16), (16, 48), (3, 40), (64, 64)]
NS_DTYPES = [torch.bfloat16, torch.float16, torch.float32]
# Relative Frobenius error of the result against the float64 iteration, measured at
# 0.012-0.017 (bf16), 0.0015-0.0021 (fp16) and ~1e-6 (fp32); bounds with about 2x headroom.
ITERATION_RTOL = {torch.bfloat16: 0.04, torch.float16: 0.005, torch.float32: 1e-5}


def well_conditioned(rows: int, cols: int, seed: int, cond: float = COND) -> Tensor:
    """A float64 matrix with singular values spread evenly over [1/cond, 1]."""
    gen = torch.Generator().manual_seed(seed)
    k = min(rows, cols)
    U, _ = torch.linalg.qr(torch.randn(rows, k, generator=gen, dtype=torch.float64))
    V, _ = torch.linalg.qr(torch.randn(cols, k, generator=gen, dtype=torch.float64))
    s = torch.linspace(1.0, 1.0 / cond, k, dtype=torch.float64)
    out: Tensor = (U * s) @ V.T
    return out


@pytest.mark.parametrize("ns_dtype", NS_DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_result_is_the_svd_polar_factor_up_to_the_ns_band(
    shape: tuple[int, int], ns_dtype: torch.dtype
) -> None:
    G = well_conditioned(*shape, seed=sum(shape))
    Q = orthogonalize(G.to(torch.float32), dtype=ns_dtype).to(torch.float64)
    U, S, Vh = torch.linalg.svd(G, full_matrices=False)
    # In G's singular bases the result must be diagonal (same singular vectors as U·Vᵀ) ...
    core = U.T @ Q @ Vh.T
    diag = torch.diagonal(core)
    off = core - torch.diag(diag)
    assert float(torch.linalg.matrix_norm(off)) < 0.05 * float(torch.linalg.matrix_norm(core))
    # ... with every singular value inside the band, not merely close to 1 on average.
    svals = torch.linalg.svdvals(Q)
    assert BAND[0] <= float(svals.min())
    assert float(svals.max()) <= BAND[1]
    # ... and equal to the scalar polynomial's prediction for each singular value.
    predicted = quintic(S / (torch.linalg.vector_norm(G) + 1e-7), [MUON_TRIPLE] * 5)
    torch.testing.assert_close(diag, predicted, atol=2 * ITERATION_RTOL[ns_dtype], rtol=0)


@pytest.mark.parametrize("shape", SHAPES)
def test_long_schedule_converges_to_the_polar_factor(shape: tuple[int, int]) -> None:
    # Five Muon steps, then the classical cubic Newton–Schulz (1.5, -0.5, 0) repeated: its fixed
    # point is exactly 1, so the result must equal U·Vᵀ closely (fp32 working dtype).
    G = well_conditioned(*shape, seed=7 + sum(shape))
    schedule = [MUON_TRIPLE] * 5 + [(1.5, -0.5, 0.0)]
    Q = orthogonalize(G.to(torch.float32), steps=14, coefficients=schedule, dtype=torch.float32)
    U, _, Vh = torch.linalg.svd(G, full_matrices=False)
    assert rel_err(Q, U @ Vh) < 1e-4


@pytest.mark.parametrize("ns_dtype", NS_DTYPES)
@pytest.mark.parametrize("shape", [(24, 24), (40, 12), (12, 40)])
def test_matches_the_float64_iteration(shape: tuple[int, int], ns_dtype: torch.dtype) -> None:
    G = torch.randn(*shape, generator=torch.Generator().manual_seed(3))
    Q = orthogonalize(G, dtype=ns_dtype)
    assert Q.dtype == G.dtype
    assert Q.shape == G.shape
    assert rel_err(Q, ns64(G)) < ITERATION_RTOL[ns_dtype]


def test_schedule_shorter_than_steps_repeats_its_last_triple() -> None:
    G = torch.randn(20, 30, generator=torch.Generator().manual_seed(4))
    first, last = (3.0, -3.2, 1.2), (2.0, -1.5, 0.5)
    Q = orthogonalize(G, steps=4, coefficients=[first, last], dtype=torch.float32)
    assert rel_err(Q, ns64(G, [first, last, last, last])) < 1e-5
    # ... and is not what the default coefficients give (the schedule is really used).
    assert rel_err(Q, ns64(G)) > 1e-2


def test_one_triple_in_a_sequence_equals_the_bare_triple() -> None:
    G = torch.randn(16, 16, generator=torch.Generator().manual_seed(5))
    bare = orthogonalize(G, coefficients=DEFAULT_COEFFICIENTS)
    assert torch.equal(orthogonalize(G, coefficients=[DEFAULT_COEFFICIENTS]), bare)
    assert torch.equal(orthogonalize(G, coefficients=[DEFAULT_COEFFICIENTS] * 5), bare)


@pytest.mark.parametrize(
    ("G", "error", "said"),
    [
        (
            torch.ones(3, 3, dtype=torch.long),
            TypeError,
            "real floating-point tensor, got torch.int64",
        ),
        (torch.ones(3, 3, dtype=torch.complex64), TypeError, "got torch.complex64"),
        ([[1.0, 2.0], [3.0, 4.0]], TypeError, "torch.Tensor, got list; wrap it"),
        (torch.ones(3), ValueError, "expects a (rows, cols) tensor, got (3,)"),
    ],
)
def test_orthogonalize_refuses_what_is_not_a_real_matrix(
    G: object, error: type[Exception], said: str
) -> None:
    """An integer matrix came back as zeros (the result rounded to its dtype), a list raised
    an AttributeError: each is now refused, naming what it got."""
    with pytest.raises(error, match=re.escape(said)):
        orthogonalize(G)  # type: ignore[arg-type]


def test_resolve_coefficients_expands_to_exactly_steps_triples() -> None:
    assert resolve_coefficients((1, 2, 3), 3) == ((1.0, 2.0, 3.0),) * 3
    schedule = [(1.0, 2.0, 3.0), (4.0, 5.0, 6.0)]
    assert resolve_coefficients(schedule, 4) == (
        (1.0, 2.0, 3.0),
        (4.0, 5.0, 6.0),
        (4.0, 5.0, 6.0),
        (4.0, 5.0, 6.0),
    )
    # A schedule longer than steps is truncated.
    assert resolve_coefficients(schedule, 1) == ((1.0, 2.0, 3.0),)


@pytest.mark.parametrize("ns_dtype", NS_DTYPES)
def test_batched_equals_scalar_per_matrix(ns_dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(6)
    # Very different scales: each matrix is normalized by its own norm, not the stack's.
    G = (
        torch.randn(5, 24, 40, generator=gen)
        * torch.tensor([1e-3, 1.0, 10.0, 0.5, 300.0])[:, None, None]
    )
    batched = orthogonalize_batched(G, dtype=ns_dtype)
    scalar = torch.stack([orthogonalize(g, dtype=ns_dtype) for g in G])
    # bf16 carries 8 significant bits: a result entry (~0.1) may differ by a few ulps.
    tol = {torch.bfloat16: 2e-2, torch.float16: 3e-3, torch.float32: 1e-5}[ns_dtype]
    torch.testing.assert_close(batched, scalar, atol=tol, rtol=0)


def test_batched_tall_stack() -> None:
    G = torch.randn(3, 40, 12, generator=torch.Generator().manual_seed(8))
    Q = orthogonalize_batched(G, dtype=torch.float32)
    for o, g in zip(Q, G, strict=True):
        assert rel_err(o, ns64(g)) < 1e-5


@pytest.mark.parametrize("ns_dtype", NS_DTYPES)
def test_inputs_are_not_modified(ns_dtype: torch.dtype) -> None:
    for G in (torch.randn(12, 20), torch.randn(20, 12), torch.randn(12, 12)):
        before = G.clone()
        orthogonalize(G, dtype=ns_dtype)
        assert torch.equal(G, before)
    # Same-dtype input (where .to() returns the input itself) must not be written either.
    G = torch.randn(2, 12, 20, dtype=ns_dtype)
    before = G.clone()
    out = orthogonalize_batched(G, dtype=ns_dtype)
    assert torch.equal(G, before)
    assert out.data_ptr() != G.data_ptr()


def test_zero_matrix_gives_zero_not_nan() -> None:
    assert torch.equal(orthogonalize(torch.zeros(6, 9)), torch.zeros(6, 9))


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: orthogonalize(torch.randn(4)), r"\(rows, cols\)"),
        (lambda: orthogonalize(torch.randn(2, 4, 4)), r"\(rows, cols\)"),
        (lambda: orthogonalize_batched(torch.randn(4, 4)), r"\(B, rows, cols\)"),
        (lambda: orthogonalize(torch.randn(4, 4), dtype=torch.float64), "^dtype"),
        (lambda: orthogonalize(torch.randn(4, 4), dtype=torch.int32), "^dtype"),
        (lambda: orthogonalize(torch.randn(4, 4), steps=0), "^steps"),
        (lambda: orthogonalize(torch.randn(4, 4), steps=101), "^steps"),
        (lambda: orthogonalize(torch.randn(4, 4), steps=2.0), "^steps"),  # type: ignore[arg-type]
        (lambda: orthogonalize(torch.randn(4, 4), steps=True), "^steps"),
        (lambda: orthogonalize(torch.randn(4, 4), eps=0.0), "eps"),
        (lambda: orthogonalize(torch.randn(4, 4), eps=-1e-7), "eps"),
        (lambda: orthogonalize(torch.randn(4, 4), coefficients=[]), "^coefficients"),
        (lambda: orthogonalize(torch.randn(4, 4), coefficients=(1.0, 2.0)), "^coefficients"),  # type: ignore[arg-type]
        (
            lambda: orthogonalize(torch.randn(4, 4), coefficients=[(1.0, 2.0, float("nan"))]),
            "^coefficients",
        ),
        (
            lambda: orthogonalize(torch.randn(4, 4), coefficients=[(1.0, 2.0, True)]),
            "^coefficients",
        ),
        (lambda: orthogonalize(torch.randn(4, 4), coefficients=5), "^coefficients"),  # type: ignore[arg-type]
        (lambda: orthogonalize(torch.randn(4, 4), coefficients="abc"), "^coefficients"),
    ],
)
def test_bad_arguments_raise_value_error_naming_them(call: object, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        call()  # type: ignore[operator]


def test_auto_ns_dtype_is_float32_off_cuda_and_bf16_on_native_bf16_gpus(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert resolve_ns_dtype(torch.float16, torch.device("cpu")) is torch.float16
    monkeypatch.setattr(_newton_schulz, "_CPU_NATIVE_BF16", [False])  # a CPU without it
    assert resolve_ns_dtype("auto", torch.device("cpu")) is torch.float32
    assert resolve_ns_dtype("auto", torch.device("meta")) is torch.float32
    capability = {0: (9, 0), 1: (7, 5)}
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index: capability[index])
    monkeypatch.setattr(_newton_schulz, "_CUDA_AUTO_DTYPES", {})
    assert resolve_ns_dtype("auto", torch.device("cuda", 0)) is torch.bfloat16
    # Before Ampere, bf16 matrix multiplication is emulated: float32 instead.
    assert resolve_ns_dtype("auto", torch.device("cuda", 1)) is torch.float32
    # The Gram iteration is float16 on a GPU (as fast there, nearer the exact iteration); on a
    # CPU "auto" is what it is for the other backends.
    assert resolve_ns_dtype("auto", torch.device("cuda", 0), backend="gram") is torch.float16
    assert resolve_ns_dtype("auto", torch.device("cuda", 1), backend="gram") is torch.float16
    assert resolve_ns_dtype("auto", torch.device("cpu"), backend="gram") is torch.float32
    chosen = resolve_ns_dtype(torch.bfloat16, torch.device("cuda", 0), backend="gram")
    assert chosen is torch.bfloat16


@pytest.mark.parametrize(
    ("probes", "expected"),
    [
        ({"_is_avx512_bf16_supported": True, "_is_amx_tile_supported": False}, torch.bfloat16),
        ({"_is_avx512_bf16_supported": False, "_is_amx_tile_supported": True}, torch.bfloat16),
        ({"_is_avx512_bf16_supported": False, "_is_amx_tile_supported": False}, torch.float32),
        ({}, torch.float32),  # a torch that cannot say
    ],
)
def test_auto_ns_dtype_on_cpu_follows_native_bf16(
    monkeypatch: pytest.MonkeyPatch, probes: dict[str, bool], expected: torch.dtype
) -> None:
    """On a CPU, "auto" is bf16 for large matrices where torch reports AVX512-BF16 or AMX
    tiles, else float32."""
    for name in _newton_schulz._CPU_BF16_PROBES:
        monkeypatch.delattr(torch.cpu, name, raising=False)
    for name, value in probes.items():
        monkeypatch.setattr(torch.cpu, name, lambda value=value: value, raising=False)
    monkeypatch.setattr(_newton_schulz, "_CPU_NATIVE_BF16", [])
    assert resolve_ns_dtype("auto", torch.device("cpu"), [(1024, 1024)]) is expected
    assert resolve_ns_dtype("auto", torch.device("meta")) is torch.float32


def test_ns_work_counts_the_three_products_of_one_iteration() -> None:
    # X is (s, l) after the transpose: X X^T is s*s*l, A A is s*s*s, B X is s*s*l.
    assert ns_work(64, 256) == 64 * 64 * 256 + 64**3 + 64 * 64 * 256
    assert ns_work(256, 64) == ns_work(64, 256)  # a tall matrix runs transposed
    assert ns_work(3, 3) == 81


def _native_bf16_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_newton_schulz, "cpu_has_native_bf16", lambda: True)


def test_auto_on_a_native_bf16_cpu_is_float32_for_small_groups_and_bf16_for_large(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _native_bf16_cpu(monkeypatch)
    cpu = torch.device("cpu")
    digits_mlp = [(128, 64), (128, 128), (10, 128)]  # tests/musgd/test_digits.py's network
    yolo_largest = [(16, 27), (64, 576), (256, 1152)]  # YOLO26n's largest conv kernel, and two
    assert max(ns_work(r, c) for r, c in digits_mlp) < CPU_BF16_MIN_WORK
    assert resolve_ns_dtype("auto", cpu, digits_mlp) is torch.float32
    assert resolve_ns_dtype("auto", cpu, yolo_largest) is torch.bfloat16
    assert resolve_ns_dtype("auto", cpu, []) is torch.float32  # a group of vectors only
    # The group's largest matrix decides, not the sum of many small ones.
    many_small = [(128, 128)] * 100
    assert sum(ns_work(r, c) for r, c in many_small) >= CPU_BF16_MIN_WORK
    assert resolve_ns_dtype("auto", cpu, many_small) is torch.float32


def test_the_cpu_crossover_is_inclusive(monkeypatch: pytest.MonkeyPatch) -> None:
    _native_bf16_cpu(monkeypatch)
    cpu = torch.device("cpu")
    monkeypatch.setattr(_newton_schulz, "CPU_BF16_MIN_WORK", ns_work(100, 200))
    assert resolve_ns_dtype("auto", cpu, [(100, 200)]) is torch.bfloat16
    assert resolve_ns_dtype("auto", cpu, [(100, 199)]) is torch.float32


def test_matrix_sizes_change_neither_cuda_nor_other_devices_nor_explicit_dtypes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _native_bf16_cpu(monkeypatch)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index: (9, 0))
    monkeypatch.setattr(_newton_schulz, "_CUDA_AUTO_DTYPES", {})
    tiny, huge = [(2, 2)], [(4096, 4096)]
    for shapes in (tiny, huge, []):
        assert resolve_ns_dtype("auto", torch.device("cuda", 0), shapes) is torch.bfloat16
        assert resolve_ns_dtype("auto", torch.device("meta"), shapes) is torch.float32
        for dtype in (torch.bfloat16, torch.float16, torch.float32):
            assert resolve_ns_dtype(dtype, torch.device("cpu"), shapes) is dtype


def test_without_native_bf16_a_cpu_never_reads_the_sizes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_newton_schulz, "cpu_has_native_bf16", lambda: False)

    def unread() -> Iterator[tuple[int, int]]:
        raise AssertionError("the matrix sizes were read")
        yield (2, 2)  # pragma: no cover

    assert resolve_ns_dtype("auto", torch.device("cpu"), unread()) is torch.float32


def test_aol4_by_name_runs_the_aol_normalization_and_its_four_triples() -> None:
    from musgd._ns_schedules import orthogonalize_scheduled_batched

    G = torch.randn(3, 24, 40, generator=torch.Generator().manual_seed(9))
    f32 = torch.float32
    named = orthogonalize_batched(G, steps=4, coefficients="aol4", dtype=f32)
    assert torch.equal(named, orthogonalize_scheduled_batched(G, "aol4", dtype=f32))
    triples = _newton_schulz.AOL4_COEFFICIENTS
    explicit = orthogonalize_batched(G, steps=4, coefficients=triples, normalize="aol", dtype=f32)
    assert torch.equal(named, explicit)
    frobenius = orthogonalize_batched(G, steps=4, coefficients=triples, dtype=f32)
    assert not torch.allclose(named, frobenius, atol=1e-3)
    with pytest.raises(ValueError, match="tuned for the 'aol' normalization, not 'frobenius'"):
        orthogonalize_batched(G, coefficients="aol4", normalize="frobenius")
    with pytest.raises(ValueError, match="normalize must be one of 'frobenius', 'aol'"):
        orthogonalize_batched(G, normalize="spectral")
    with pytest.raises(ValueError, match="names no known schedule: 'polar'"):
        resolve_coefficients("polar", 5)


def test_aol_on_a_zero_padded_stack_is_each_matrix_alone() -> None:
    gen = torch.Generator().manual_seed(10)
    members = [torch.randn(s, generator=gen) for s in ((6, 10), (4, 7), (6, 10))]
    stack = torch.zeros(3, 6, 10)
    for k, m in enumerate(members):
        stack[k, : m.shape[0], : m.shape[1]] = m
    out = orthogonalize_batched(stack, steps=4, coefficients="aol4", dtype=torch.float32)
    for k, m in enumerate(members):
        alone = orthogonalize_batched(m[None], steps=4, coefficients="aol4", dtype=torch.float32)
        torch.testing.assert_close(
            out[k, : m.shape[0], : m.shape[1]], alone[0], rtol=1e-5, atol=1e-6
        )
        assert not out[k, m.shape[0] :].any()
        assert not out[k, :, m.shape[1] :].any()


@pytest.mark.parametrize("coefficients", [b"quintic", b"\x01\x02\x03", bytearray(b"abc")])
def test_bytes_are_not_read_as_coefficient_triples(coefficients: object) -> None:
    with pytest.raises(ValueError, match=r"^ns_coefficients must be an \(a, b, c\) triple or"):
        resolve_coefficients(coefficients, 5)  # type: ignore[arg-type]


# The Gram iteration (ns_backend="gram"): its results against the float64 iteration, measured
# over 7 shapes x 5 seeds of Gaussian matrices at up to 0.023 (bf16 asked for, run in float16
# after the bf16 result; the standard iteration in bf16: 0.031), 0.011 (fp16; 0.0043) and ~1e-6
# (fp32); bounds with about 1.5x headroom.
GRAM_RTOL = {torch.bfloat16: 0.035, torch.float16: 0.017, torch.float32: 1e-5}
# Shapes where it runs (long side over 1.5x the short one), tall ones transposed first.
GRAM_SHAPES = [(12, 40), (40, 12), (16, 48), (3, 40), (24, 80)]


def spread(rows: int, cols: int, seed: int, smallest: float) -> Tensor:
    """A float64 matrix with singular values spread log-evenly over [smallest, 1]."""
    gen = torch.Generator().manual_seed(seed)
    k = min(rows, cols)
    U, _ = torch.linalg.qr(torch.randn(rows, k, generator=gen, dtype=torch.float64))
    V, _ = torch.linalg.qr(torch.randn(cols, k, generator=gen, dtype=torch.float64))
    s = torch.logspace(0, torch.log10(torch.tensor(smallest)).item(), k, dtype=torch.float64)
    out: Tensor = (U * s) @ V.T
    return out


def orthogonality_error(O: Tensor) -> float:
    """``||O·Oᵀ - I||_F / sqrt(rows)`` of a wide result, in float64."""
    O = O.to(torch.float64)
    rows = int(O.size(0))
    error = float(torch.linalg.matrix_norm(O @ O.T - torch.eye(rows, dtype=O.dtype)))
    return error / math.sqrt(rows)


def test_the_gram_iteration_is_the_standard_one_in_exact_arithmetic() -> None:
    from musgd._newton_schulz import iterate, iterate_gram

    gen = torch.Generator().manual_seed(0)
    triples = resolve_coefficients("polar_express", 5)
    for rows, cols in ((8, 30), (16, 48), (5, 5)):
        X = torch.randn(3, rows, cols, generator=gen, dtype=torch.float64)
        X = X / torch.linalg.matrix_norm(X, keepdim=True)
        gram_way, standard = iterate_gram(X, triples), iterate(X, triples)
        torch.testing.assert_close(gram_way, standard, rtol=0, atol=1e-12)
        gram = X @ X.mT  # a Gram matrix handed in (the AOL normalization's) is used as is
        torch.testing.assert_close(iterate_gram(X, triples, gram), iterate(X, triples, gram))


@pytest.mark.parametrize("ns_dtype", NS_DTYPES)
@pytest.mark.parametrize("shape", GRAM_SHAPES)
def test_the_gram_iteration_matches_the_float64_iteration(
    shape: tuple[int, int], ns_dtype: torch.dtype
) -> None:
    for seed in range(3):
        G = torch.randn(*shape, generator=torch.Generator().manual_seed(seed))
        Q = orthogonalize(G, dtype=ns_dtype, iteration="gram")
        assert Q.shape == G.shape
        assert rel_err(Q, ns64(G)) < GRAM_RTOL[ns_dtype]


def test_the_gram_iteration_restarts_in_half_precision_and_needs_to(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def ratios(dtype: torch.dtype, schedule: str) -> list[float]:
        """Each matrix's orthogonality error, Gram over standard iteration, in ``dtype``."""
        steps = 4 if schedule == "aol4" else 5
        out = []
        for seed, (rows, cols) in enumerate(((32, 288), (64, 576), (64, 200), (48, 432))):
            G = spread(rows, cols, seed, smallest=1e-3).to(torch.float32)
            run = {"dtype": dtype, "coefficients": schedule, "steps": steps}
            gram = orthogonalize(G, iteration="gram", **run)  # type: ignore[arg-type]
            standard = orthogonalize(G, **run)  # type: ignore[arg-type]
            out.append(orthogonality_error(gram) / orthogonality_error(standard))
        return out

    # Measured: within 1.01x in float16; bf16, asked for, runs the Gram iteration in float16
    # (in bf16 Polar Express and aol4 diverged), within 1.022x of the standard iteration in bf16.
    for schedule in ("quintic", "polar_express", "aol4"):
        assert max(ratios(torch.float16, schedule)) < 1.05
        assert max(ratios(torch.bfloat16, schedule)) < 1.05
    monkeypatch.setattr(_newton_schulz, "GRAM_RESTARTS", ())
    # Without the restart the spurious eigenvalues grow: 1.7x for the quintic, 236x for Polar
    # Express, even in float16.
    assert max(ratios(torch.float16, "quintic")) > 1.3
    assert max(ratios(torch.float16, "polar_express")) > 10.0


def test_the_gram_iteration_runs_only_where_it_takes_fewer_operations() -> None:
    from musgd._newton_schulz import gram_pays, gram_work

    # One restart: 4 rectangle products (Gram and X, twice) and 14 cubes, against 5 x (2 + 1).
    assert gram_work(64, 576, 5) == 64 * 64 * (4 * 576 + 14 * 64)
    assert gram_work(576, 64, 5) == gram_work(64, 576, 5)
    assert gram_work(8, 80, 2) == 8 * 8 * (2 * 80 + 5 * 8)  # no restart within two steps
    assert gram_pays(64, 576, 5)  # a 3x3 convolution's out x 9*in
    assert not gram_pays(64, 64, 5)  # a square 1x1 convolution
    assert not gram_pays(64, 96, 5)  # the long side 1.5x the short: not fewer
    # Where it does not pay, the iteration is the standard one, bit for bit.
    G = torch.randn(24, 24, generator=torch.Generator().manual_seed(5))
    assert torch.equal(orthogonalize(G, iteration="gram"), orthogonalize(G))


def test_the_gram_iteration_keeps_zero_padding_and_zero_matrices() -> None:
    # A padded bucket stacks smaller matrices into the corner of zeros: each must come out as
    # if alone, and a zero matrix as zeros.
    gen = torch.Generator().manual_seed(6)
    small = torch.randn(6, 30, generator=gen)
    padded = torch.zeros(8, 40)
    padded[:6, :30] = small
    stack = torch.stack([padded, torch.zeros(8, 40)])
    out = orthogonalize_batched(stack, dtype=torch.float32, iteration="gram")
    alone = orthogonalize(small, dtype=torch.float32, iteration="gram")
    torch.testing.assert_close(out[0, :6, :30], alone, rtol=1e-5, atol=1e-6)
    assert torch.count_nonzero(out[0, 6:]) == 0
    assert torch.count_nonzero(out[0, :, 30:]) == 0
    assert torch.count_nonzero(out[1]) == 0


def test_an_unknown_iteration_is_refused_with_the_names() -> None:
    with pytest.raises(ValueError, match=r"iteration must be one of 'standard', 'gram'"):
        orthogonalize(torch.randn(4, 8), iteration="gramm")


@pytest.mark.parametrize("iteration", ["standard", "gram"])
def test_aol4_in_float16_stays_finite_on_a_small_valued_momentum(iteration: str) -> None:
    # Recorded YOLO26n momenta have entries of 1e-2 down to 1e-11: the AOL Gram product of the
    # raw matrix underflowed in float16 and aol4 returned NaN (at 1e-4 here). AOL is
    # scale-invariant, so it divides by the Frobenius norm first.
    for scale in (1e-2, 1e-4, 1e-6):
        G = (spread(64, 576, 0, smallest=1e-3) * scale).to(torch.float32)
        O = orthogonalize(G, dtype=torch.float16, coefficients="aol4", steps=4, iteration=iteration)
        assert bool(torch.isfinite(O).all()), scale
    G = spread(16, 48, 1, smallest=0.1).to(torch.float32)
    torch.testing.assert_close(  # the scale does not change the result beyond rounding
        orthogonalize(G * 1e-3, dtype=torch.float32, coefficients="aol4", steps=4),
        orthogonalize(G, dtype=torch.float32, coefficients="aol4", steps=4),
        rtol=1e-4,
        atol=1e-5,
    )


def test_float16_normalizes_before_it_rounds_a_small_momentum() -> None:
    # float16 underflows below about 6e-8: cast as it is, a momentum of such entries loses
    # them; divided by its norm first (as the Triton table does), it keeps them.
    from musgd._newton_schulz import to_working_dtype

    G = spread(32, 96, 2, smallest=1e-2).to(torch.float32) * 1e-7
    X = to_working_dtype(G, torch.float16)
    assert torch.count_nonzero(X) == G.numel()
    reference = orthogonalize(G / torch.linalg.matrix_norm(G), dtype=torch.float32)
    assert rel_err(orthogonalize(G, dtype=torch.float16), reference) < ITERATION_RTOL[torch.float16]
    # bf16 and float32 take the matrix as it is: their bits are unchanged.
    assert torch.equal(to_working_dtype(G, torch.bfloat16), G.to(torch.bfloat16))


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"dtype": torch.float64}, "^dtype must be one of"),
        ({"steps": 0}, r"^steps must be an int in 1\.\.100, got 0"),
        ({"coefficients": "bogus"}, "^coefficients names no known schedule"),
        ({"coefficients": [(1.0, 2.0)]}, r"^coefficients\[0\] must be"),
    ],
)
def test_the_functions_errors_name_their_own_arguments(
    arguments: dict[str, Any], message: str
) -> None:
    """An audit: `orthogonalize(G, dtype=torch.float64)` was told of `ns_dtype`, which is the
    optimizer's setting, not this function's argument."""
    for function, G in (
        (orthogonalize, torch.randn(4, 6)),
        (orthogonalize_batched, torch.randn(2, 4, 6)),
    ):
        with pytest.raises(ValueError, match=message):
            function(G, **arguments)


def test_a_named_schedule_runs_its_own_steps_unless_told_otherwise() -> None:
    """`orthogonalize(G, coefficients="aol4")` ran five iterations where the optimizer runs the
    schedule's four."""
    G = torch.randn(8, 16, dtype=torch.float64)
    for name, steps in (("aol4", 4), ("quintic", 5)):
        own = orthogonalize(G, coefficients=name, dtype=torch.float32)
        assert torch.equal(
            own, orthogonalize(G, coefficients=name, steps=steps, dtype=torch.float32)
        )
    assert not torch.equal(
        orthogonalize(G, coefficients="aol4", dtype=torch.float32),
        orthogonalize(G, coefficients="aol4", steps=5, dtype=torch.float32),
    )
