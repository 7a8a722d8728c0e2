"""The grouped Triton Newton–Schulz backend: numerics, determinism, optimizer routing, fallback.

Without a GPU the kernels run in Triton's CPU interpreter (``TRITON_INTERPRET=1``, set here before
the kernel module is first imported) on small shapes; with one, on CUDA.
"""

from __future__ import annotations

import importlib.util
import io
import math
import os
import warnings
from typing import Any

import pytest
import torch
from musgd_reference import MUON_TRIPLE, ns64, rel_err
from replay_common import params_and_momentum
from test_newton_schulz import BAND, well_conditioned
from torch import Tensor

if importlib.util.find_spec("triton") is None:
    pytest.skip("triton is not installed", allow_module_level=True)
# Before anything imports triton: triton.language's own helpers are built interpreted or not
# when it is first imported (this module is collected before any test runs).
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from musgd import MuSGD, orthogonalize
from musgd import _triton_ns as T
from musgd._optimizer import group_structure

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
# Wide, tall (transposed by strides), tiny, several tiles (> 64 rows) and a 1-row-tile remainder.
SHAPES = ((16, 27), (40, 24), (70, 130), (3, 5), (96, 64))
TRIPLES = (MUON_TRIPLE,) * 5
# Relative Frobenius error against the float64 iteration: the torch backend's bf16 bound
# (tests/musgd/test_newton_schulz.py ITERATION_RTOL), the same for both backends.
RTOL = {torch.bfloat16: 0.04, torch.float16: 0.005}
# Triton's CPU interpreter converts float32 to bf16 by truncation, not rounding to nearest
# (measured: 52% of 1024 random values differ from torch's cast), so its results sit further
# from float64: measured 1.1-1.7x the torch backend's error on SHAPES. Compiled kernels round
# to nearest, like torch.
ERR_RATIO = 2.0 if T.interpreting() else 1.6


def scale(rows: int, cols: int) -> float:
    return 0.2 * math.sqrt(max(rows, cols))


def table(
    members: list[Tensor],
    dtype: torch.dtype = torch.bfloat16,
    mix: tuple[float | Tensor, float | Tensor] | None = None,
) -> list[Tensor]:
    shapes = tuple((m.shape[0], m.numel() // m.shape[0]) for m in members)
    result = T.orthogonalize_table(
        members, shapes, requested="triton", triples=TRIPLES, eps=1e-7, dtype=dtype, mix=mix
    )
    assert result is not None, "the Triton backend must apply here"
    return result[1]


def inputs(seed: int) -> list[Tensor]:
    return [
        well_conditioned(r, c, seed=seed + i).to(torch.float32).to(DEVICE)
        for i, (r, c) in enumerate(SHAPES)
    ]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_table_matches_the_float64_iteration_and_the_polar_band(dtype: torch.dtype) -> None:
    members = inputs(seed=1)
    for G, O in zip(members, table(members, dtype), strict=True):
        r, c = G.shape
        assert O.shape == G.shape
        assert O.dtype == G.dtype
        Q = O.double().cpu() / scale(r, c)
        expected = ns64(G.double().cpu(), TRIPLES)
        assert rel_err(Q, expected) < RTOL[dtype], (r, c)
        svals = torch.linalg.svdvals(Q)
        assert BAND[0] <= float(svals.min()), (r, c)
        assert float(svals.max()) <= BAND[1], (r, c)


def test_table_agrees_with_the_torch_backend_within_bf16_rounding() -> None:
    members = inputs(seed=7)
    for G, O in zip(members, table(members), strict=True):
        r, c = G.shape
        reference = orthogonalize(G) * scale(r, c)
        expected = ns64(G.double().cpu(), TRIPLES) * scale(r, c)
        torch_err = rel_err(reference.double().cpu(), expected)
        triton_err = rel_err(O.double().cpu(), expected)
        gap = rel_err(O.double().cpu(), reference.double().cpu())
        # Both round to bf16 at the same points, not to the same bits: Triton is about as close
        # to float64 as torch, and the two differ by about that much (independent roundings).
        assert triton_err < ERR_RATIO * torch_err, (r, c)
        assert gap < 3 * torch_err, (r, c)


def test_table_is_deterministic_and_leaves_inputs_unchanged() -> None:
    members = inputs(seed=3)
    before = [m.clone() for m in members]
    first, second = table(members), table(members)
    for a, b in zip(first, second, strict=True):
        assert torch.equal(a, b)
    for m, b in zip(members, before, strict=True):
        assert torch.equal(m, b)


def test_mixed_table_is_the_sgd_and_muon_mix_of_the_plain_one() -> None:
    """``mix=(w_sgd, w_muon)`` makes the last kernel write ``w_sgd*G + w_muon*O``; the weights
    as floats (eager) or as float32 0-d device tensors (a replay's slots) give the same bits."""
    members = inputs(seed=5)
    slots = (torch.tensor(0.5, device=DEVICE), torch.tensor(0.25, device=DEVICE))
    mixed = (table(members, mix=(0.5, 0.25)), table(members, mix=slots))
    for G, O, U, V in zip(members, table(members), *mixed, strict=True):
        torch.testing.assert_close(U, 0.5 * G + 0.25 * O, rtol=1e-6, atol=1e-7)
        assert torch.equal(U, V)


def test_conv_kernels_are_viewed_as_rows_by_cols() -> None:
    kernel = torch.randn(8, 3, 3, 3, device=DEVICE)
    (O,) = table([kernel])
    assert O.shape == kernel.shape
    expected = orthogonalize(kernel.reshape(8, 27)) * scale(8, 27)
    assert rel_err(O.reshape(8, 27).double().cpu(), expected.double().cpu()) < 0.05


def test_zero_matrix_gives_zero_not_nan() -> None:
    (O,) = table([torch.zeros(6, 10, device=DEVICE)])
    assert torch.equal(O, torch.zeros_like(O))


def test_plan_covers_one_triangle_of_each_gram_and_every_update_tile() -> None:
    plan = T.build_plan([(70, 130), (200, 10)], torch.device("cpu"))
    # Working shapes (70, 130) and (10, 200); 64-wide tiles: 2x2 and 1x1 Gram grids.
    assert plan.square_tiles.tolist() == [[0, 0, 0], [0, 1, 0], [0, 1, 1], [1, 0, 0]]
    assert len(plan.rect_tiles) == 2 * 3 + 1 * 4
    # The workspaces hold each matrix padded to whole tiles: X 128x192 and 64x256, A 128x128
    # and 64x64, at offsets (and row strides) that are multiples of the tile.
    assert plan.x_numel == 128 * 192 + 64 * 256
    assert plan.a_numel == 128 * 128 + 64 * 64
    # The tall matrix is read transposed (X[r, c] = G[c, r]); its tiles follow the first's six.
    assert plan.problems[0].tolist() == [70, 130, 0, 0, 0, 0, 0, 6, 128, 192]
    assert plan.problems[1].tolist() == [10, 200, 128 * 192, 128 * 128, 70 * 130, 1, 6, 4, 64, 256]
    assert plan.rect_tiles[6:].tolist() == [[1, 0, j] for j in range(4)]


def test_wide_column_tiles_pad_x_to_them_and_tile_each_row_block_by_them() -> None:
    tiles = T.TileConfig(block=64, block_k=64, num_warps=4, num_stages=3, block_n=128)
    plan = T.build_plan([(70, 130), (200, 10)], torch.device("cpu"), tiles)
    # Columns padded to 128: X 128x256 and 64x256; the Gram grids are unchanged (64-wide).
    assert plan.square_tiles.tolist() == [[0, 0, 0], [0, 1, 0], [0, 1, 1], [1, 0, 0]]
    assert plan.x_numel == 128 * 256 + 64 * 256
    assert plan.problems[0].tolist() == [70, 130, 0, 0, 0, 0, 0, 4, 128, 256]
    assert plan.rect_tiles.tolist() == [[0, i, j] for i in range(2) for j in range(2)] + [
        [1, 0, j] for j in range(2)
    ]


def test_column_tiles_that_are_no_multiple_of_the_block_are_refused() -> None:
    tiles = T.TileConfig(block=64, block_k=64, num_warps=4, num_stages=3, block_n=96)
    with pytest.raises(ValueError, match="block_n 96 must be a multiple of block 64"):
        T.build_plan([(70, 130)], torch.device("cpu"), tiles)


def test_wide_column_tiles_give_the_square_tiles_result_up_to_summation_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Rectangular kernels on 16x32 tiles (the update with its own warps) against 16x16 ones:
    the same Newton-Schulz up to the norms' float32 summation order, and both within the
    table's bound of the float64 iteration."""
    members = inputs(11)
    results = []
    for block_n, update_warps in ((0, 0), (32, 2)):
        tiles = T.TileConfig(16, 16, 4, 1, block_n=block_n, update_warps=update_warps)
        monkeypatch.setattr(T, "SMALL_TILES", tiles)
        monkeypatch.setattr(T, "_PLANS", {})
        results.append(table(members))
    for a, b, g in zip(*results, members, strict=True):
        torch.testing.assert_close(a.float(), b.float(), atol=2e-2, rtol=0)
        want = ns64(g.double().cpu(), TRIPLES)
        assert rel_err(b.double().cpu() / scale(*g.shape), want) < RTOL[torch.bfloat16]


def _split_table(
    monkeypatch: pytest.MonkeyPatch, members: list[Tensor], split: int
) -> list[Tensor]:
    """The table on 16x16 tiles with each Gram tile dealt to ``split`` programs (a fresh plan)."""
    monkeypatch.setattr(T, "SMALL_TILES", T.TileConfig(16, 16, 4, 1, split_k=split))
    monkeypatch.setattr(T, "_PLANS", {})
    return table(members)


@pytest.mark.parametrize("split", [2, 3])
def test_a_split_gram_product_gives_the_unsplit_table_up_to_summation_order(
    monkeypatch: pytest.MonkeyPatch, split: int
) -> None:
    """The Gram product's reduction dealt to 2 or 3 programs per tile: SHAPES take 1 to 9
    slices of 16 columns, so some matrices leave splits empty (3x5's one slice in three). The
    same Newton-Schulz up to float32 summation order, within the table's bound of the float64
    iteration."""
    members = inputs(13)
    whole = _split_table(monkeypatch, members, 1)
    dealt = _split_table(monkeypatch, members, split)
    for a, b, g in zip(whole, dealt, members, strict=True):
        assert (b.dtype, b.shape) == (a.dtype, a.shape)
        torch.testing.assert_close(a.float(), b.float(), atol=2e-2, rtol=0)
        want = ns64(g.double().cpu(), TRIPLES)
        assert rel_err(b.double().cpu() / scale(*g.shape), want) < RTOL[torch.bfloat16]


def test_a_split_gram_product_is_deterministic_and_leaves_inputs_unchanged(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each partial is written by one program and the partials are added in split order: the
    same bits twice."""
    members = inputs(17)
    before = [m.clone() for m in members]
    first = _split_table(monkeypatch, members, 3)
    again = _split_table(monkeypatch, members, 3)
    for a, b in zip(first, again, strict=True):
        assert torch.equal(a, b)
    for m, kept in zip(members, before, strict=True):
        assert torch.equal(m, kept)


def _fused_table(
    monkeypatch: pytest.MonkeyPatch,
    members: list[Tensor],
    fuse: bool,
    mix: tuple[float, float] | None = None,
    block_n: int = 0,
) -> list[Tensor]:
    """The table on 16-wide tiles (a fresh plan), its one-row-of-tiles matrices fused or not."""
    tiles = T.TileConfig(16, 16, 4, 1, block_n=block_n, fuse_small=fuse)
    monkeypatch.setattr(T, "SMALL_TILES", tiles)
    monkeypatch.setattr(T, "_PLANS", {})
    return table(members, mix=mix)


@pytest.mark.parametrize("block_n", [0, 32])
@pytest.mark.parametrize("mix", [None, (0.5, 0.25)])
def test_fused_small_matrices_give_the_chains_bits(
    monkeypatch: pytest.MonkeyPatch, block_n: int, mix: tuple[float, float] | None
) -> None:
    """Matrices of one row of 16-wide tiles (3x5, 16x27, 40x24 read transposed as 24x40 is
    two) run whole in one program each, the others (70x130, 96x64) on the chain: every result
    bit for bit the chain's alone, plain and mixed, square and wide column tiles."""
    members = [*inputs(19), torch.randn(7, 200, device=DEVICE), torch.randn(130, 9, device=DEVICE)]
    chain = _fused_table(monkeypatch, members, False, mix, block_n)
    fused = _fused_table(monkeypatch, members, True, mix, block_n)
    plan = next(iter(T._PLANS.values()))
    assert plan.small.tolist() == [0, 3, 5, 6]  # 16x27, 3x5, 7x200 and 130x9 (9x130)
    for a, b in zip(chain, fused, strict=True):
        assert (b.dtype, b.shape) == (a.dtype, a.shape)
        assert torch.equal(a, b)


def test_a_plan_of_only_small_matrices_is_one_fused_launch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Where every matrix fits one row of tiles the chain has no tile to run: its launches are
    skipped, and the result is still the chain's."""
    members = [torch.randn(5, 40, device=DEVICE), torch.randn(33, 12, device=DEVICE)]
    chain = _fused_table(monkeypatch, members, False)
    launched: list[str] = []
    kernels = T._kernels()
    for name in ("sumsq", "normalize", "gram", "poly", "update", "fused_small"):
        kernel = getattr(kernels, name)

        class Counted:
            def __init__(self, kernel: Any, name: str) -> None:
                self.kernel, self.name = kernel, name

            def __getitem__(self, grid: Any) -> Any:
                launched.append(self.name)
                return self.kernel[grid]

        monkeypatch.setattr(kernels, name, Counted(kernel, name))
    fused = _fused_table(monkeypatch, members, True)
    assert launched == ["fused_small"]
    for a, b in zip(chain, fused, strict=True):
        assert torch.equal(a, b)


def test_the_fused_plan_leaves_small_matrices_out_of_the_chains_tiles() -> None:
    tiles = T.TileConfig(block=64, block_k=64, num_warps=4, num_stages=3, fuse_small=True)
    plan = T.build_plan([(70, 130), (200, 10), (8, 27)], torch.device("cpu"), tiles)
    assert plan.small.tolist() == [1, 2]
    assert plan.square_tiles.tolist() == [[0, 0, 0], [0, 1, 0], [0, 1, 1]]
    assert plan.rect_tiles.tolist() == [[0, i, j] for i in range(2) for j in range(3)]
    # The workspaces still hold every matrix: the fused programs update X in place there.
    assert plan.x_numel == 128 * 192 + 64 * 256 + 64 * 64


def test_a_split_below_one_program_is_refused() -> None:
    tiles = T.TileConfig(block=64, block_k=64, num_warps=4, num_stages=3, split_k=0)
    with pytest.raises(ValueError, match="split_k 0 must be 1 or more"):
        T.build_plan([(70, 130)], torch.device("cpu"), tiles)


def test_programmatic_dependent_launch_never_applies_off_cuda_or_interpreted() -> None:
    assert not T.pdl_applies(torch.device("cpu"))
    if T.interpreting():
        # The kernels then launch with GDC=False: the interpreter has no grid dependency control.
        assert not T.pdl_applies(torch.device("cuda"))


def _steps(backend: str, ns_dtype: torch.dtype = torch.bfloat16) -> list[Tensor]:
    gen = torch.Generator().manual_seed(0)
    shapes = [(8, 3, 3, 3), (16, 8), (24, 4), (16,), (6, 6), (6, 6)]
    params = [torch.randn(s, generator=gen).to(DEVICE).requires_grad_() for s in shapes]
    opt = MuSGD(params, lr=0.1, weight_decay=0.01, ns_backend=backend, ns_dtype=ns_dtype)
    for _ in range(3):
        for p in params:
            p.grad = torch.randn(p.shape, generator=gen).to(DEVICE)
        opt.step()
    return [p.detach().clone() for p in params]


def test_optimizer_with_triton_agrees_with_torch_backend() -> None:
    start = _steps("torch")  # same seeds: compare the parameter changes
    for a, b in zip(_steps("triton"), start, strict=True):
        assert a.shape == b.shape
        torch.testing.assert_close(a, b, atol=5e-3, rtol=0)


@pytest.mark.parametrize("nesterov", [True, False])
def test_packed_steps_equal_the_multi_tensor_body_with_the_same_table(
    nesterov: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The packed step (its workspace kept and reused across steps, the table writing into it)
    gives the bits of the multi-tensor body running the same table over its matrices alone:
    parameters and momentum buffers, over three steps with decay."""
    from musgd import _functional

    def run(packs: bool) -> list[Tensor]:
        gen = torch.Generator().manual_seed(0)
        shapes = [(8, 3, 3, 3), (16,), (16, 8), (24, 4), (6, 6), (6,)]
        params = [torch.randn(s, generator=gen).to(DEVICE).requires_grad_() for s in shapes]
        # bf16 named: the Triton kernels take bf16 or fp16, and "auto" is float32 on a CPU
        # without native bf16 (or for matrices this small on one with it, WP-022).
        opt = MuSGD(
            params,
            lr=0.1,
            weight_decay=0.01,
            nesterov=nesterov,
            ns_backend="triton",
            ns_dtype=torch.bfloat16,
        )
        for _ in range(3):
            for p in params:
                p.grad = torch.randn(p.shape, generator=gen).to(DEVICE)
            opt.step()
        assert len(opt._orth.__dict__.get("_workspaces", {})) == int(packs)
        return params_and_momentum(opt, params)

    packed = run(packs=True)
    monkeypatch.setattr(_functional, "_table_plan", lambda *args: None)
    for a, b in zip(packed, run(packs=False), strict=True):
        assert torch.equal(a, b)


def test_packed_steps_resume_from_a_checkpoint_bit_for_bit() -> None:
    """A packed run saved after two steps and loaded into a new optimizer (new workspace, new
    buffer tensors) ends as the uninterrupted run does; a buffer the user replaces with another
    dtype afterwards runs the multi-tensor calls instead of failing."""
    gen = torch.Generator().manual_seed(4)
    shapes = [(8, 3, 3, 3), (16,), (16, 8), (24, 4), (6,)]
    start = [torch.randn(s, generator=gen).to(DEVICE) for s in shapes]
    grads = [[torch.randn(s, generator=gen).to(DEVICE) for s in shapes] for _ in range(4)]

    settings: dict[str, Any] = {
        "lr": 0.1,
        "weight_decay": 0.01,
        "ns_backend": "triton",
        "ns_dtype": torch.bfloat16,
    }

    def run(resume_at: int | None) -> tuple[MuSGD, list[Tensor]]:
        params = [p.clone().requires_grad_() for p in start]
        # bf16 named, as the Triton kernels need (see the test above).
        opt = MuSGD(params, **settings)
        for k in range(4):
            if k == resume_at:
                saved = io.BytesIO()
                torch.save(opt.state_dict(), saved)
                saved.seek(0)
                opt = MuSGD(params, **settings)
                opt.load_state_dict(torch.load(saved, weights_only=True))
            for p, g in zip(params, grads[k], strict=True):
                p.grad = g.clone()
            opt.step()
        return opt, [p.detach().clone() for p in params]

    _, straight = run(None)
    opt, resumed = run(2)
    for a, b in zip(straight, resumed, strict=True):
        assert torch.equal(a, b)
    first = opt.param_groups[0]["params"][0]
    opt.state[first]["momentum_buffer"] = opt.state[first]["momentum_buffer"].double()
    opt.step()
    assert all(torch.isfinite(p).all() for p in opt.param_groups[0]["params"])


def _flavour_steps(backend: str) -> list[Tensor]:
    """Three steps of the Ultralytics flavour: a conv kernel, a tall matrix (Muon scale
    sqrt(24/4)) and a wide one in a ``use_muon`` group, with decay; vectors in an SGD group."""
    from musgd.ultralytics import UltralyticsMuSGD

    gen = torch.Generator().manual_seed(0)
    shapes = [(8, 3, 3, 3), (24, 4), (16, 40), (16,)]
    params = [torch.randn(s, generator=gen).to(DEVICE).requires_grad_() for s in shapes]
    opt = UltralyticsMuSGD(
        [{"params": params[:3], "use_muon": True, "weight_decay": 5e-4}, {"params": params[3:]}],  # type: ignore[arg-type]
        lr=0.05,
        momentum=0.9,
        nesterov=True,
        muon=0.2,
        sgd=1.0,
        ns_backend=backend,
    )
    for _ in range(3):
        for p in params:
            p.grad = torch.randn(p.shape, generator=gen).to(DEVICE)
        opt.step()
    return [p.detach().clone() for p in params]


def test_ultralytics_flavour_with_triton_agrees_with_its_torch_backend() -> None:
    """The flavour's table carries its own Muon scales (sqrt(24/4) on the tall matrix, 1 on the
    others, where the default flavour's rule would give 0.2*sqrt(max(rows, cols))). Measured in
    the interpreter: the backends differ by at most 9.7e-4 after three steps, while the default
    rule's scales put them 1.8e-2 apart on the tall matrix and 2.7e-3 on the wide one."""
    for a, b in zip(_flavour_steps("triton"), _flavour_steps("torch"), strict=True):
        torch.testing.assert_close(a, b, atol=2e-3, rtol=0)


def test_float32_ns_dtype_falls_back_to_torch_with_one_warning() -> None:
    T._WARNED.clear()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = _steps("triton", ns_dtype=torch.float32)
    messages = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(messages) == 1
    assert "float32" in messages[0]
    for a, b in zip(result, _steps("torch", ns_dtype=torch.float32), strict=True):
        assert torch.equal(a, b)


def test_auto_off_cuda_runs_the_torch_backend_silently(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    if DEVICE.type == "cuda":
        pytest.skip("auto selects Triton on CUDA")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = _steps("auto")
    for a, b in zip(result, _steps("torch"), strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize("bad", ["gpu", "", None, 1])
def test_bad_backend_raises_value_error_naming_it(bad: object) -> None:
    with pytest.raises(ValueError, match="ns_backend"):
        MuSGD([torch.zeros(2, 2, requires_grad=True)], lr=0.1, ns_backend=bad)  # type: ignore[arg-type]


def test_backend_lives_in_each_group_and_in_the_state_dict() -> None:
    a, b = torch.zeros(4, 4, requires_grad=True), torch.zeros(4, 4, requires_grad=True)
    opt = MuSGD([{"params": [a]}, {"params": [b], "ns_backend": "torch"}], lr=0.1)  # type: ignore[arg-type]
    assert [g["ns_backend"] for g in opt.param_groups] == ["auto", "torch"]
    assert opt.state_dict()["param_groups"][1]["ns_backend"] == "torch"


@pytest.mark.parametrize("backend", ["auto", "triton", "torch", "gram"])
@pytest.mark.parametrize("flag", ["capture_orthogonalization", "capture_updates"])
def test_capture_flags_never_change_the_backend(backend: str, flag: str) -> None:
    # Replay is bit-identical to eager only if both run the same Newton-Schulz code.
    structures = [
        group_structure(
            MuSGD([torch.zeros(2, 2)], lr=0.1, ns_backend=backend, **{flag: on}).param_groups[0],  # type: ignore[arg-type]
            torch.device("cpu"),
        )
        for on in (False, True)
    ]
    assert structures[0].ns == structures[1].ns
    assert structures[0].ns.backend == backend


def test_auto_with_float32_runs_the_torch_backend_without_a_warning() -> None:
    T._WARNED.clear()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = _steps("auto", ns_dtype=torch.float32)
    for a, b in zip(result, _steps("torch", ns_dtype=torch.float32), strict=True):
        assert torch.equal(a, b)


def _norm_case(monkeypatch: pytest.MonkeyPatch, block: int, reduce: int) -> list[Tensor]:
    """The table of three small matrices with ``block``-wide tiles, summing each matrix's tile
    partials ``reduce`` at a time (a fresh plan)."""
    tiles = T.TileConfig(block=block, block_k=16, num_warps=4, num_stages=1)
    monkeypatch.setattr(T, "SMALL_TILES", tiles)
    monkeypatch.setattr(T, "NORMALIZE_REDUCE", reduce)
    monkeypatch.setattr(T, "_PLANS", {})
    gen = torch.Generator().manual_seed(3)
    shapes = ((48, 40), (20, 36), (90, 12))
    return table([torch.randn(s, generator=gen).to(DEVICE) for s in shapes])


def test_normalization_split_over_several_programs_agrees_with_one_program(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each matrix's norm from one 64-wide tile, or from its 16-wide tiles (up to 9 programs
    each), is the same up to float32 summation order."""
    one = _norm_case(monkeypatch, 64, T.NORMALIZE_REDUCE)
    assert T.plan_for(((48, 40), (20, 36), (90, 12)), DEVICE).problems[:, 7].tolist() == [1, 1, 2]
    several = _norm_case(monkeypatch, 16, T.NORMALIZE_REDUCE)
    assert T.plan_for(((48, 40), (20, 36), (90, 12)), DEVICE).problems[:, 7].tolist() == [9, 6, 6]
    for a, b in zip(one, several, strict=True):
        torch.testing.assert_close(a, b, atol=1e-2, rtol=0)


def test_norms_over_many_tiles_agree_with_one_tile_per_matrix(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A matrix's tile partials summed in several passes (2 lanes: 5 passes for 9 tiles) give
    the norm of one pass, up to float32 summation order; a lane past the count adds nothing."""
    one = _norm_case(monkeypatch, 16, T.NORMALIZE_REDUCE)
    passes = _norm_case(monkeypatch, 16, 2)
    for a, b in zip(one, passes, strict=True):
        torch.testing.assert_close(a, b, atol=1e-2, rtol=0)


# --- the table path of the replaying orthogonalizer (fake recorder; any `run` of torch ops) ---


def _table_run(src: Tensor) -> Tensor:
    """A stand-in for ``run_plan`` made of torch operations, which the fake recorder replays."""
    return torch.tanh(src) * 3.0


def test_replayed_table_is_bit_identical_owned_and_recorded_once() -> None:
    from replay_fakes import FakeRecorder

    from musgd._replay import ReplayOrthogonalizer, ReplayState

    recorder = FakeRecorder()
    state = ReplayState(recorder, orth_bound=lambda: 10, update_bound=lambda: 10)
    orth = ReplayOrthogonalizer(state)
    gen = torch.Generator().manual_seed(0)
    results = []
    for _ in range(4):
        src = torch.randn(300, generator=gen)
        out = orth.table(("table-key",), src, _table_run)
        assert torch.equal(out, _table_run(src))
        results.append(out)
    assert (recorder.records, state.stats.recordings, state.stats.replays) == (1, 1, 3)
    assert len({r.data_ptr() for r in results}) == len(results), "results must not alias"
    # Another key (another layout or settings) is another recording.
    orth.table(("other-key",), torch.randn(300, generator=gen), _table_run)
    assert state.stats.recordings == 2


def test_table_falls_back_to_a_direct_call_where_replay_cannot_run() -> None:
    from replay_fakes import FakeRecorder

    from musgd._replay import ReplayOrthogonalizer, ReplayState

    recorder = FakeRecorder(capture_underway=True)  # an enclosing capture: run directly
    state = ReplayState(recorder, orth_bound=lambda: 10, update_bound=lambda: 10)
    src = torch.randn(50)
    out = ReplayOrthogonalizer(state).table(("k",), src, _table_run)
    assert torch.equal(out, _table_run(src))
    assert recorder.records == 0
    assert state.stats.fallbacks["capture"] == 1


def test_a_matrix_too_large_for_32_bit_indexing_runs_the_torch_backend() -> None:
    T._WARNED.clear()
    small = torch.zeros(2, 2, device=DEVICE)  # the shapes decide; no large tensor is allocated
    with pytest.warns(RuntimeWarning, match="2\\*\\*31"):
        result = T.orthogonalize_table(
            [small],
            ((1 << 16, 1 << 15),),
            requested="triton",
            triples=TRIPLES,
            eps=1e-7,
            dtype=torch.bfloat16,
        )
    assert result is None


def test_auto_leaves_tables_of_much_arithmetic_to_the_torch_backend(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(T, "fallback_reason", lambda *args: None)  # as on a CUDA device
    members = [torch.randn(16, 24, device=DEVICE)]
    shapes = ((16, 24),)
    work = T.table_flop(shapes, len(TRIPLES))
    assert work == len(TRIPLES) * (4 * 16 * 16 * 24 + 2 * 16**3)

    def run(requested: str) -> object:
        return T.orthogonalize_table(
            members, shapes, requested=requested, triples=TRIPLES, eps=1e-7, dtype=torch.bfloat16
        )

    monkeypatch.setattr(T, "AUTO_MAX_FLOP", work)
    assert run("auto") is not None
    monkeypatch.setattr(T, "AUTO_MAX_FLOP", work - 1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "auto" falls back silently
        assert run("auto") is None
    assert run("triton") is not None  # asked for by name, it runs whatever the size


def test_the_auto_bound_keeps_yolo26_on_triton_and_transformer_blocks_on_torch() -> None:
    from musgd._functional import matrix_shape
    from musgd.bench._models import PARAMETER_SETS

    def flop(name: str) -> float:
        shapes = [matrix_shape(spec.shape) for spec in PARAMETER_SETS[name]()]
        return T.table_flop(tuple(s for s in shapes if s is not None), 5)

    assert max(flop(n) for n in ("nano", "yolo26n", "yolo26s", "yolo26m")) < T.AUTO_MAX_FLOP
    assert min(flop(n) for n in ("transformer", "large")) > T.AUTO_MAX_FLOP


def test_a_plan_needed_inside_a_capture_raises_a_clear_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Building a plan copies host tables to the device, which a CUDA-graph capture forbids:
    inside one, a missing plan raises (the recording then fails cleanly) instead of invalidating
    the capture; outside, a full cache still builds per call."""
    cuda = torch.device("cuda")
    monkeypatch.setattr(T, "_PLANS", {})
    monkeypatch.setattr(T, "MAX_PLANS", 1)
    monkeypatch.setattr(T, "build_plan", lambda shapes, device: ("plan", shapes))
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    first = T.plan_for(((4, 8),), cuda)
    assert T.plan_for(((4, 8),), cuda) is first  # cached
    assert T.plan_for(((6, 8),), cuda) == ("plan", ((6, 8),))  # type: ignore[comparison-overlap]  # full: built per call
    assert (((6, 8),), cuda) not in T._PLANS
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    assert T.plan_for(((4, 8),), cuda) is first  # a cached plan needs no building
    with pytest.raises(T.PlanUnavailableError, match=r"cache is full \(1 layouts\)"):
        T.plan_for(((6, 8),), cuda)
    monkeypatch.setattr(T, "MAX_PLANS", 8)
    with pytest.raises(T.PlanUnavailableError, match="run one step before capturing"):
        T.plan_for(((2, 8),), cuda)
