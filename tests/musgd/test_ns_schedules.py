"""Named Newton–Schulz schedules: data, derivation, AOL, and quality against the SVD polar factor.

Every schedule maps each singular value s of its normalized start matrix X0 through the scalar
composition f = p_k ∘ ... ∘ p_1 (p_i(x) = a_i·x + b_i·x³ + c_i·x⁵) and keeps the singular
vectors. So, in exact arithmetic, the result is O = U·diag(f(s_i))·Vᵀ and its spectral distance
to the polar factor U·Vᵀ is exactly max_i |f(s_i) - 1|. The tests predict f(s_i) in float64 from
the start matrix's singular values and hold the computed result to it, within the measured
round-off of the working dtype (ROUNDOFF below).

The start matrix is G/||G||_F for the Frobenius schedules, whose polar factor is G's. For aol4 it
is D·G (D the AOL row scaling): a row scaling changes the singular vectors, so aol4 converges to
the polar factor of D·G, not of G (wp-023 measures how far apart the two are).
"""

from __future__ import annotations

import dataclasses
import functools
import math

import pytest
import torch
from musgd_reference import MUON_TRIPLE, quintic
from torch import Tensor

from musgd import orthogonalize, orthogonalize_batched
from musgd._ns_schedules import (
    AOL_LOWER,
    NORMALIZATIONS,
    SCHEDULES,
    Schedule,
    aol_normalize,
    minimax_quintic,
    ns_flop,
    orthogonalize_scheduled,
    orthogonalize_scheduled_batched,
    polar_express_triples,
    schedule,
)

NAMES = ("quintic", "polar_express", "aol4")
# YOLO-like (out, in*kh*kw) shapes: a stem conv, a 64-channel 3x3, a square 1x1 and a tall one
# (rows > cols takes the transposed path); a 256-channel 3x3 (256x2304) runs in the slow lane.
SHAPES = [(16, 27), (64, 576), (128, 128), (576, 64)]
ALL_SHAPES = [*SHAPES, pytest.param((256, 2304), marks=pytest.mark.slow)]
DTYPES = [torch.float32, torch.bfloat16]
# Round-off of the working dtype, as bounds on (largest |computed - predicted| singular value,
# off-diagonal mass in the start's singular bases), measured over SHAPES and stated with about
# 1.5-2x headroom. fp32: <= 1e-4 and ~0. bf16 "well": 0.031 and 0.014. bf16 "ill": 0.094 and
# 0.059 -- casting G to bf16 (relative precision 2^-8) already moves singular values of 1e-3 of
# the largest by more than their size, so the smallest ones are not predictable there.
ROUNDOFF = {
    (torch.float32, "well"): (5e-4, 1e-3),
    (torch.float32, "ill"): (5e-4, 1e-3),
    (torch.bfloat16, "well"): (0.05, 0.03),
    (torch.bfloat16, "ill"): (0.15, 0.1),
}


def matrix(rows: int, cols: int, kind: str, seed: int) -> Tensor:
    """float64: ``well`` (singular values evenly in [1/4, 1]), ``ill`` (log-spaced 1..1e-3) or
    ``gauss`` (i.i.d. normal, the shape of a fresh gradient)."""
    gen = torch.Generator().manual_seed(seed)
    if kind == "gauss":
        return torch.randn(rows, cols, generator=gen, dtype=torch.float64)
    k = min(rows, cols)
    U, _ = torch.linalg.qr(torch.randn(rows, k, generator=gen, dtype=torch.float64))
    V, _ = torch.linalg.qr(torch.randn(cols, k, generator=gen, dtype=torch.float64))
    if kind == "well":
        s = torch.linspace(1.0, 0.25, k, dtype=torch.float64)
    else:
        s = torch.logspace(0.0, -3.0, k, dtype=torch.float64)
    out: Tensor = (U * s) @ V.T
    return out


def start_matrix(G: Tensor, sched: Schedule) -> Tensor:
    """The normalized start matrix X0 of ``sched`` for ``G`` (float64, G's orientation)."""
    X = G if G.shape[0] <= G.shape[1] else G.T
    if sched.normalize == "frobenius":
        X0 = X / (torch.linalg.matrix_norm(X) + 1e-7)
    else:
        # Written out here, not through aol_normalize: D = diag(1/sqrt(Σ_j |XXᵀ|_ij)).
        d = (X @ X.T).abs().sum(dim=1).rsqrt()
        X0 = d[:, None] * X
    out: Tensor = X0 if G.shape[0] <= G.shape[1] else X0.T
    return out


@functools.cache
def computed(
    name: str, shape: tuple[int, int], kind: str, dtype: torch.dtype, seed: int
) -> tuple[Tensor, Tensor]:
    """(G in float64, the schedule's result in float64), computed once for all the tests."""
    G = matrix(*shape, kind, seed=seed)
    O = orthogonalize_scheduled(G.to(torch.float32), name, dtype=dtype).to(torch.float64)
    return G, O


def orthogonality_error(O: Tensor) -> float:
    """||OᵀO - I||_F / sqrt(n) on the short side."""
    O = O.to(torch.float64)
    S = O @ O.T if O.shape[0] <= O.shape[1] else O.T @ O
    n = S.shape[0]
    return float(torch.linalg.matrix_norm(S - torch.eye(n, dtype=torch.float64))) / math.sqrt(n)


# --- the schedules as data ---------------------------------------------------------------------


def test_the_three_names_are_registered_with_their_normalization_and_source() -> None:
    assert tuple(SCHEDULES) == NAMES
    assert SCHEDULES["quintic"].triples == (MUON_TRIPLE,) * 5
    assert [SCHEDULES[n].normalize for n in NAMES] == ["frobenius", "frobenius", "aol"]
    assert [SCHEDULES[n].steps for n in NAMES] == [5, 5, 4]
    assert "2505.16932" in SCHEDULES["polar_express"].source
    assert "2512.04632" in SCHEDULES["aol4"].source
    for name in NAMES:
        assert schedule(name) is SCHEDULES[name]


def test_an_unknown_name_is_refused_with_the_known_names() -> None:
    with pytest.raises(ValueError, match="unknown Newton-Schulz schedule 'polar'") as info:
        schedule("polar")
    for name in NAMES:
        assert repr(name) in str(info.value)
    with pytest.raises(ValueError, match="choose one of"):
        schedule(["quintic"])  # type: ignore[arg-type]


def test_schedules_are_immutable_data() -> None:
    with pytest.raises(TypeError):
        SCHEDULES["mine"] = SCHEDULES["quintic"]  # type: ignore[index]
    with pytest.raises(dataclasses.FrozenInstanceError):
        SCHEDULES["quintic"].triples = ()  # type: ignore[misc]
    for sched in SCHEDULES.values():
        assert isinstance(sched.triples, tuple)
        assert all(isinstance(t, tuple) and len(t) == 3 for t in sched.triples)


def test_a_schedule_validates_its_triples_and_normalization() -> None:
    made = Schedule(name="x", triples=[[1.5, -0.5, 0]], normalize="aol", source="test")  # type: ignore[arg-type]
    assert made.triples == ((1.5, -0.5, 0.0),)
    with pytest.raises(ValueError, match="normalize must be one of frobenius, aol"):
        Schedule(name="x", triples=(MUON_TRIPLE,), normalize="spectral", source="")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"ns_coefficients\[0\] must be finite"):
        Schedule(name="x", triples=((math.nan, 0.0, 0.0),), normalize="frobenius", source="")
    with pytest.raises(ValueError, match=r"ns_steps must be an int in 1\.\.100"):
        Schedule(name="x", triples=(), normalize="frobenius", source="")
    assert NORMALIZATIONS == ("frobenius", "aol")


def test_the_literal_tables_are_the_derivation() -> None:
    derived = {
        "polar_express": polar_express_triples(5),
        "aol4": polar_express_triples(4, lower=AOL_LOWER),
    }
    for name, triples in derived.items():
        table = SCHEDULES[name].triples
        assert len(table) == len(triples)
        for got, want in zip(table, triples, strict=True):
            assert got == pytest.approx(want, rel=1e-12, abs=0)


@pytest.mark.parametrize(("lo", "hi"), [(0.02407327424182761, 1.0), (0.3, 1.7), (0.9, 1.1)])
def test_minimax_quintic_equioscillates(lo: float, hi: float) -> None:
    a, b, c = minimax_quintic(lo, hi)
    x = torch.linspace(lo, hi, 200_001, dtype=torch.float64)
    err = 1 - (a * x + b * x**3 + c * x**5)
    worst = float(err.abs().max())
    # Chebyshev alternation: the error reaches ±worst at both ends, with opposite signs.
    assert float(err[0]) == pytest.approx(worst, rel=1e-9)
    assert float(err[-1]) == pytest.approx(-worst, rel=1e-9)
    # ... and any other odd quintic through the same point count does worse, e.g. a nudge.
    nudged = 1 - ((a * 1.001) * x + b * x**3 + c * x**5)
    assert float(nudged.abs().max()) > worst


def test_polar_express_construction_shrinks_the_interval_and_applies_safety_but_last() -> None:
    raw = polar_express_triples(5, safety=1.0)
    safe = polar_express_triples(5)
    s = 1.01
    for k in range(4):
        assert safe[k] == pytest.approx((raw[k][0] / s, raw[k][1] / s**3, raw[k][2] / s**5))
    assert safe[4] == raw[4]
    # The unsafe composition maps the design interval [1e-3, 1] into [l5, 2 - l5] with l5 near 1.
    x = torch.logspace(-3, 0, 10_001, dtype=torch.float64)
    y = quintic(x, raw)
    assert float(y.min()) == pytest.approx(float(quintic(x[:1], raw)), rel=1e-12)
    assert float(y.min()) > 0.85
    assert float(y.max()) < 2 - 0.85
    with pytest.raises(ValueError, match="0 < lo < hi"):
        minimax_quintic(0.5, 0.5)


# --- AOL ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["gauss", "ill"])
@pytest.mark.parametrize("shape", [(16, 27), (64, 576), (128, 128)])
def test_aol_rescaling_has_spectral_norm_at_most_one_and_returns_its_gram(
    shape: tuple[int, int], kind: str
) -> None:
    X = matrix(*shape, kind, seed=sum(shape)).unsqueeze(0)
    Y, gram = aol_normalize(X, eps=1e-30)
    assert float(torch.linalg.matrix_norm(Y[0], ord=2)) <= 1 + 1e-12
    torch.testing.assert_close(gram, Y @ Y.mT, rtol=1e-12, atol=1e-14)
    # AOL is a row scaling: singular vectors change, but no row changes direction.
    ratio = Y[0] / X[0]
    torch.testing.assert_close(ratio, ratio[:, :1].expand_as(ratio))
    # It raises the smallest singular value over the Frobenius normalization (wp-023 records
    # by how much); this is what lets a shorter schedule start from a higher lower end.
    frob = torch.linalg.svdvals(X[0] / torch.linalg.matrix_norm(X[0]))
    assert float(torch.linalg.svdvals(Y[0]).min()) > 1.4 * float(frob.min())


def test_aol_keeps_a_zero_row_at_zero_and_finite() -> None:
    G = matrix(8, 20, "gauss", seed=1)
    G[3] = 0
    for sched in NAMES:
        O = orthogonalize_scheduled(G.float(), sched, dtype=torch.float32)
        assert torch.isfinite(O).all()
        assert float(O[3].abs().max()) == 0.0


# --- against the float64 polar factor -----------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", ["well", "ill"])
@pytest.mark.parametrize("shape", ALL_SHAPES)
@pytest.mark.parametrize("name", NAMES)
def test_result_is_the_polar_factor_up_to_the_schedule_map(
    name: str, shape: tuple[int, int], kind: str, dtype: torch.dtype
) -> None:
    sched = SCHEDULES[name]
    G, O = computed(name, shape, kind, dtype, sum(shape))
    assert O.shape == G.shape
    U, S, Vh = torch.linalg.svd(start_matrix(G, sched), full_matrices=False)
    predicted = quintic(S, sched.triples)
    tol, off_tol = ROUNDOFF[(dtype, kind)]
    # The result keeps the start's singular vectors: in their bases it is (nearly) diagonal ...
    core = U.T @ O @ Vh.T
    diag = torch.diagonal(core)
    off = core - torch.diag(diag)
    assert float(torch.linalg.matrix_norm(off)) <= off_tol * float(torch.linalg.matrix_norm(core))
    # ... its singular values are the schedule's map of the start's, within round-off ...
    got = torch.linalg.svdvals(O)
    want = predicted.sort(descending=True).values
    assert float((got - want).abs().max()) <= tol
    # ... so its spectral distance to U·Vᵀ is the map's worst miss, max |f(s) - 1|, within it.
    distance = float(torch.linalg.matrix_norm(O - U @ Vh, ord=2))
    assert distance <= float((predicted - 1).abs().max()) + tol


# The stated bands: the result's singular values for every matrix above, measured on SHAPES and
# 256x2304, fp32 and bf16; "well" has condition number 4, "ill" spans 1e-3..1.
BANDS = {
    ("quintic", "well"): (0.66, 1.16),  # measured [0.679, 1.141]
    ("polar_express", "well"): (0.86, 1.14),  # [0.873, 1.126]
    ("aol4", "well"): (0.89, 1.10),  # [0.909, 1.090]
    ("quintic", "ill"): (0.10, 1.22),  # [0.111, 1.2023]
    ("polar_express", "ill"): (0.21, 1.14),  # [0.225, 1.125]
    ("aol4", "ill"): (0.13, 1.10),  # [0.141, 1.089]
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", ["well", "ill"])
@pytest.mark.parametrize("name", NAMES)
def test_singular_values_stay_in_the_stated_band(name: str, kind: str, dtype: torch.dtype) -> None:
    lo, hi = BANDS[(name, kind)]
    for shape in SHAPES:
        _, O = computed(name, shape, kind, dtype, sum(shape))
        s = torch.linalg.svdvals(O)
        assert lo <= float(s.min()), (shape, float(s.min()))
        assert float(s.max()) <= hi, (shape, float(s.max()))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", ["gauss", "ill"])
@pytest.mark.parametrize("shape", ALL_SHAPES)
def test_polar_express_and_aol4_are_more_orthogonal_than_the_quintic(
    shape: tuple[int, int], kind: str, dtype: torch.dtype
) -> None:
    # The paper's claim for Polar Express at the same 5 steps, and Turbo-Muon's for 4 AOL steps
    # against 5: ||OᵀO - I||_F/sqrt(n) strictly lower.
    err = {
        n: orthogonality_error(computed(n, shape, kind, dtype, 3 * sum(shape))[1]) for n in NAMES
    }
    assert err["polar_express"] < err["quintic"], err
    assert err["aol4"] < err["quintic"], err


# --- the functions ------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_quintic_is_bit_identical_to_orthogonalize(dtype: torch.dtype) -> None:
    G = torch.randn(3, 24, 40, generator=torch.Generator().manual_seed(5))
    assert torch.equal(
        orthogonalize_scheduled_batched(G, "quintic", dtype=dtype),
        orthogonalize_batched(G, dtype=dtype),
    )
    assert torch.equal(
        orthogonalize_scheduled(G[0].T, dtype=dtype), orthogonalize(G[0].T, dtype=dtype)
    )


@pytest.mark.parametrize("name", NAMES)
def test_batched_equals_one_matrix_at_a_time(name: str) -> None:
    G = torch.randn(4, 30, 12, generator=torch.Generator().manual_seed(9))
    G[1] *= 1e3  # per-matrix normalization: scale must not leak across the stack
    batched = orthogonalize_scheduled_batched(G, name, dtype=torch.float32)
    single = torch.stack([orthogonalize_scheduled(g, name, dtype=torch.float32) for g in G])
    torch.testing.assert_close(batched, single, rtol=1e-5, atol=1e-6)
    assert batched.dtype == G.dtype


def test_a_schedule_object_and_its_name_give_the_same_result() -> None:
    G = torch.randn(10, 20, generator=torch.Generator().manual_seed(2))
    made = Schedule(name="mine", triples=SCHEDULES["aol4"].triples, normalize="aol", source="")
    assert torch.equal(orthogonalize_scheduled(G, made), orthogonalize_scheduled(G, "aol4"))


def test_the_input_is_not_modified_and_bad_input_is_refused() -> None:
    G = torch.randn(6, 9)
    before = G.clone()
    orthogonalize_scheduled(G, "aol4")
    assert torch.equal(G, before)
    with pytest.raises(ValueError, match=r"\(rows, cols\) tensor"):
        orthogonalize_scheduled(G[None], "aol4")
    with pytest.raises(ValueError, match=r"\(B, rows, cols\) tensor"):
        orthogonalize_scheduled_batched(G, "aol4")
    with pytest.raises(ValueError, match="ns_dtype must be one of"):
        orthogonalize_scheduled(G, "aol4", dtype=torch.float64)
    with pytest.raises(ValueError, match="eps must be > 0"):
        orthogonalize_scheduled(G, "aol4", eps=0.0)
    with pytest.raises(ValueError, match="unknown Newton-Schulz schedule"):
        orthogonalize_scheduled(G, "cubic")


def test_ns_flop_counts_four_fifths_for_aol4() -> None:
    m, n = 64, 576
    assert ns_flop(m, n, "quintic") == 5 * (4 * m * m * n + 2 * m**3) + 2 * m * n
    assert ns_flop(n, m, "quintic") == ns_flop(m, n, "quintic")
    assert ns_flop(m, n, "polar_express") == ns_flop(m, n, "quintic")
    ratio = ns_flop(m, n, "aol4") / ns_flop(m, n, "quintic")
    # 4 iterations of 5, less the Frobenius norm, plus AOL's row sums and scalings.
    assert 0.799 < ratio < 0.801
