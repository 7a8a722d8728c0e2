"""The Triton kernels of the grouped Newton–Schulz backend (see ``musgd._triton_ns``).

Imported only when that backend runs, so that ``import musgd`` never imports Triton. Whether
Triton interprets these kernels on the CPU is decided when this module is first imported (it
reads ``TRITON_INTERPRET`` then). Each tile of every output is written by one program, with a
fixed reduction order and no atomics: results are deterministic.

The iteration's workspaces hold every matrix padded with zeros to whole tiles (``MP x NP`` for
``X``, ``MP x MP`` for ``A`` and ``B``; ``NP`` a multiple of the column tile ``BN`` of the
rectangular kernels, itself a multiple of ``BM``), at offsets and row strides that are
multiples of the tile: the product kernels then read and write whole tiles with no masks and no
index wrapping, and (told so by ``tl.multiple_of``) with vectorized, aligned accesses. Zero
padding is closed under the iteration: padded rows and columns of ``X`` give zero rows and
columns of ``A`` and ``B``, which give zeros again in ``X``'s padding; they add exact zeros to
every sum.

``UPCAST`` (interpreter only) widens bf16/fp16 operands to float32 before each block product:
Triton's CPU interpreter multiplies bf16 blocks wrongly (numpy has no bf16), and the widening is
exact, since a product of two bf16 or fp16 values fits in float32.
"""

# mypy: ignore-errors

from __future__ import annotations

import os

import triton
import triton.language as tl

# Whether Triton interprets the kernels below: it decides when each is defined, from this.
INTERPRETED = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")

try:  # Grid dependency control (programmatic dependent launch, SM90+), in newer Triton only.
    from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

    GDC_FOUND = True
except ImportError:  # the kernels then launch without it (GDC=False never reaches these names)
    gdc_launch_dependents = gdc_wait = None
    GDC_FOUND = False


@triton.jit
def _follow(GDC: tl.constexpr):
    """With programmatic dependent launch (``GDC``): let the next kernel of the chain start its
    prologue now, then wait until the previous kernel has finished and its writes are visible.
    Each kernel calls this after reading only the plan's tables (never written by a kernel) and
    before any other access, so every read of a prior kernel's output, and every write a prior
    kernel might still read, comes after the wait; the wait of each kernel follows the whole
    completion of the one before it, so the ordering holds across the chain."""
    if GDC:
        gdc_launch_dependents()
        gdc_wait()


@triton.jit
def _problem(problems, tiles, BM: tl.constexpr, BN: tl.constexpr, COLS: tl.constexpr):
    """A program's problem row and the row/column indices of its ``BM x BN`` output tile."""
    t = tiles + tl.program_id(0) * 3
    p = tl.load(t)
    ti = tl.load(t + 1)
    tj = tl.load(t + 2)
    rm = ti * BM + tl.arange(0, BM)
    rn = tj * BN + tl.arange(0, BN)
    return p, problems + p * COLS, rm, rn, ti != tj


@triton.jit
def _padded(row, BM: tl.constexpr):
    """A matrix's padded working extents ``(MP, NP)`` and its ``X`` and ``A`` offsets, each a
    multiple of the tile (the plan pads them so)."""
    mp = tl.multiple_of(tl.load(row + 8).to(tl.int32), BM)
    np_ = tl.multiple_of(tl.load(row + 9).to(tl.int32), BM)
    x_off = tl.multiple_of(tl.load(row + 2), BM)
    a_off = tl.multiple_of(tl.load(row + 3), BM)
    return mp, np_, x_off, a_off


@triton.jit
def _source_tile(src, row, rm, rn, m, n, mask):
    """Tile ``X[rm, rn]`` of a matrix read from its row-major source: ``X`` is the source, or
    (where the source is tall) its transpose; either way the unit stride is a literal, so the
    loads are coalesced along the source's rows."""
    base = src + tl.load(row + 4)
    if tl.load(row + 5) != 0:
        ptrs = base + rn[None, :] * m + rm[:, None]
    else:
        ptrs = base + rm[:, None] * n + rn[None, :]
    return tl.load(ptrs, mask=mask, other=0.0).to(tl.float32)


@triton.jit
def sumsq(
    src,
    partial,
    problems,
    tiles,
    BM: tl.constexpr,
    BN: tl.constexpr,
    COLS: tl.constexpr,
    GDC: tl.constexpr,
):
    """The sum of squares of one tile of one matrix, into ``partial`` at the tile's index."""
    _p, row, rm, rn, _mirror = _problem(problems, tiles, BM, BN, COLS)
    m = tl.load(row + 0).to(tl.int32)
    n = tl.load(row + 1).to(tl.int32)
    _follow(GDC)
    mask = (rm[:, None] < m) & (rn[None, :] < n)
    v = _source_tile(src, row, rm, rn, m, n, mask)
    tl.store(partial + tl.program_id(0), tl.sum(tl.sum(v * v, axis=1), axis=0))


@triton.jit
def normalize(
    src,
    x,
    partial,
    problems,
    tiles,
    eps,
    BM: tl.constexpr,
    BN: tl.constexpr,
    REDUCE: tl.constexpr,
    COLS: tl.constexpr,
    GDC: tl.constexpr,
):
    """``X = G / (‖G‖_F + eps)`` on one tile of the padded ``X``, in the working dtype (zeros
    in the padding). Every tile of a matrix adds that matrix's tile partials in the same fixed
    order, so all see the same norm."""
    _p, row, rm, rn, _mirror = _problem(problems, tiles, BM, BN, COLS)
    m = tl.load(row + 0).to(tl.int32)
    n = tl.load(row + 1).to(tl.int32)
    _mp, np_, x_off, _a_off = _padded(row, BM)
    first = tl.load(row + 6)
    count = tl.load(row + 7).to(tl.int32)
    _follow(GDC)
    lanes = tl.arange(0, REDUCE)
    # Masked lanes must read 0: an undefined value would enter every norm (it did, on the H200:
    # replays then differed from eager runs at d844cf2).
    acc = tl.zeros([REDUCE], dtype=tl.float32)
    for start in range(0, count, REDUCE):
        idx = start + lanes
        acc += tl.load(partial + first + idx, mask=idx < count, other=0.0)
    inv = 1.0 / (tl.sqrt(tl.sum(acc, axis=0)) + eps)
    mask = (rm[:, None] < m) & (rn[None, :] < n)
    v = _source_tile(src, row, rm, rn, m, n, mask)
    tl.store(x + x_off + rm[:, None] * np_ + rn[None, :], (v * inv).to(x.dtype.element_ty))


@triton.jit
def _mma(left, right, acc, UPCAST: tl.constexpr):
    if UPCAST:
        return tl.dot(left.to(tl.float32), right.to(tl.float32), acc)
    return tl.dot(left, right, acc)


@triton.jit
def _store_symmetric(base, ld, rm, rn, out, mirror):
    """Store a whole tile of a symmetric padded result (row stride ``ld``) and, off the
    diagonal, its mirror."""
    tl.store(base + rm[:, None] * ld + rn[None, :], out)
    if mirror:
        tl.store(base + rn[None, :] * ld + rm[:, None], out)


@triton.jit
def _square_times(
    sq,
    mp,
    rm,
    rhs,
    w,
    rn,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
    UPCAST: tl.constexpr,
):
    """``S[rm, :] · R[:, rn]`` in fp32 (``BM x BN``), for the padded ``S`` (``mp x mp``) at
    ``sq`` and ``R`` (``mp x w``) at ``rhs``, both row-major with whole tiles."""
    rk = tl.arange(0, BK)
    left = sq + rm[:, None] * mp + rk[None, :]
    right = rhs + rk[:, None] * w + rn[None, :]
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for _k in range(0, mp, BK):
        acc = _mma(tl.load(left), tl.load(right), acc, UPCAST)
        left += BK
        right += BK * w
    return acc


@triton.jit
def gram(
    x,
    a,
    problems,
    tiles,
    a_total,
    BM: tl.constexpr,
    BK: tl.constexpr,
    SPLIT: tl.constexpr,
    UPCAST: tl.constexpr,
    COLS: tl.constexpr,
    GDC: tl.constexpr,
):
    """``A = X·Xᵀ`` on one lower-triangle tile; both operands are row blocks of X.

    With ``SPLIT`` > 1 the columns of ``X`` (the reduction) are dealt to ``SPLIT`` programs
    per tile (``program_id(1)``), whole ``BK`` slices each, the last ones empty where a matrix
    has fewer slices; each writes its float32 partial at ``a + split · a_total``, which
    :func:`fold` sums in split order."""
    _p, row, rm, rn, mirror = _problem(problems, tiles, BM, BM, COLS)
    mp, np_, x_off, a_off = _padded(row, BM)
    _follow(GDC)
    rk = tl.arange(0, BK)
    left = x + x_off + rm[:, None] * np_ + rk[None, :]
    right = x + x_off + rn[:, None] * np_ + rk[None, :]
    k0 = 0
    k1 = np_
    if SPLIT > 1:
        slices = np_ // BK
        per = (slices + SPLIT - 1) // SPLIT
        split = tl.program_id(1)
        k0 = tl.minimum(split * per, slices) * BK
        k1 = tl.minimum(split * per + per, slices) * BK
        left += k0
        right += k0
    acc = tl.zeros((BM, BM), dtype=tl.float32)
    for _k in range(k0, k1, BK):
        acc = _mma(tl.load(left), tl.trans(tl.load(right)), acc, UPCAST)
        left += BK
        right += BK
    if SPLIT > 1:
        base = a + tl.program_id(1).to(tl.int64) * a_total + a_off
        _store_symmetric(base, mp, rm, rn, acc, mirror)
    else:
        _store_symmetric(a + a_off, mp, rm, rn, acc.to(a.dtype.element_ty), mirror)


@triton.jit
def fold(
    partials,
    a,
    problems,
    tiles,
    a_total,
    BM: tl.constexpr,
    SPLIT: tl.constexpr,
    COLS: tl.constexpr,
    GDC: tl.constexpr,
):
    """``A`` on one lower-triangle tile from :func:`gram`'s ``SPLIT`` float32 partials
    (``a_total`` apart), added in split order and rounded to ``A``'s dtype, as the unsplit
    product is stored: :func:`poly` then reads one ``A`` whatever the split."""
    _p, row, rm, rn, mirror = _problem(problems, tiles, BM, BM, COLS)
    mp, _np, _x_off, a_off = _padded(row, BM)
    _follow(GDC)
    ptrs = partials + a_off + rm[:, None] * mp + rn[None, :]
    acc = tl.load(ptrs)
    for split in tl.static_range(1, SPLIT):
        acc += tl.load(ptrs + split * a_total)
    _store_symmetric(a + a_off, mp, rm, rn, acc.to(a.dtype.element_ty), mirror)


@triton.jit
def poly(
    a,
    b_out,
    problems,
    tiles,
    cb,
    cc,
    BM: tl.constexpr,
    BK: tl.constexpr,
    UPCAST: tl.constexpr,
    COLS: tl.constexpr,
    GDC: tl.constexpr,
):
    """``B = b·A + c·A·A`` on one lower-triangle tile (A symmetric, so is B)."""
    _p, row, rm, rn, mirror = _problem(problems, tiles, BM, BM, COLS)
    mp, _np, _x_off, a_off = _padded(row, BM)
    _follow(GDC)
    ab = a + a_off
    acc = _square_times(ab, mp, rm, ab, mp, rn, BM, BM, BK, UPCAST)
    aij = tl.load(ab + rm[:, None] * mp + rn[None, :])
    out = (cb * aij.to(tl.float32) + cc * acc).to(b_out.dtype.element_ty)
    _store_symmetric(b_out + a_off, mp, rm, rn, out, mirror)


@triton.jit
def update(
    bmat,
    x,
    out,
    problems,
    scales,
    tiles,
    ca,
    src,
    w_sgd,
    w_muon,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
    FINAL: tl.constexpr,
    MIX: tl.constexpr,
    UPCAST: tl.constexpr,
    COLS: tl.constexpr,
    GDC: tl.constexpr,
):
    """``X' = a·X + B·X`` on one ``BM x BN`` tile; the last iteration writes ``O = scale·X'``
    in the matrix's own orientation, extent and dtype (``out`` is then the packed result), or
    with ``MIX`` the update ``w_sgd·G + w_muon·O`` of the packed source ``G`` (the weights read
    from float32 0-d device tensors)."""
    p, row, rm, rn, _mirror = _problem(problems, tiles, BM, BN, COLS)
    mp, np_, x_off, a_off = _padded(row, BM)
    _follow(GDC)
    xb = x + x_off
    acc = _square_times(bmat + a_off, mp, rm, xb, np_, rn, BM, BN, BK, UPCAST)
    xij = tl.load(xb + rm[:, None] * np_ + rn[None, :])
    res = ca * xij.to(tl.float32) + acc
    if FINAL:
        _store_result(res, x, out, row, p, scales, src, w_sgd, w_muon, rm, rn, MIX)
    else:
        tl.store(out + x_off + rm[:, None] * np_ + rn[None, :], res.to(out.dtype.element_ty))


@triton.jit
def _store_result(res, x, out, row, p, scales, src, w_sgd, w_muon, rm, rn, MIX: tl.constexpr):
    """The last iteration's tile ``res`` of matrix ``p`` written as the result ``O = scale·X'``
    in the matrix's own orientation, extent and dtype, or with ``MIX`` as the update
    ``w_sgd·G + w_muon·O`` of the packed source ``G``."""
    m = tl.load(row + 0).to(tl.int32)
    n = tl.load(row + 1).to(tl.int32)
    mask = (rm[:, None] < m) & (rn[None, :] < n)
    # Round to the working dtype (as the torch backend's result is), then scale.
    res = res.to(x.dtype.element_ty).to(tl.float32) * tl.load(scales + p)
    # The unit stride is a literal in either orientation, so the stores are coalesced.
    if tl.load(row + 5) != 0:
        offs = tl.load(row + 4) + rn[None, :] * m + rm[:, None]
    else:
        offs = tl.load(row + 4) + rm[:, None] * n + rn[None, :]
    if MIX:
        g = tl.load(src + offs, mask=mask, other=0.0).to(tl.float32)
        res = tl.load(w_sgd) * g + tl.load(w_muon) * res
    tl.store(out + offs, res.to(out.dtype.element_ty), mask=mask)


@triton.jit
def fused_small(
    src,
    x,
    a,
    b,
    out,
    problems,
    small,
    scales,
    coeffs,
    eps,
    w_sgd,
    w_muon,
    STEPS: tl.constexpr,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
    REDUCE: tl.constexpr,
    MIX: tl.constexpr,
    UPCAST: tl.constexpr,
    COLS: tl.constexpr,
):
    """The whole Newton-Schulz of one matrix of at most ``BM`` working rows in one program:
    the Frobenius normalization, ``STEPS`` iterations (``coeffs``: their ``(a, b, c)``, float32)
    and the result, as the table's chain computes them tile by tile, with the same tiles, the
    same block products in the same order and the same roundings, so the same bits; ``X`` is
    updated in place in its workspace, column block by column block (each block of ``X'``
    reads only its own block of ``X``). The program's threads meet at a barrier between the
    phases, since each phase reads what the others wrote (global memory, visible across the
    program's threads after the barrier).

    ``small`` lists the problems this launch runs, one per program.
    """
    p = tl.load(small + tl.program_id(0))
    row = problems + p * COLS
    m = tl.load(row + 0).to(tl.int32)
    n = tl.load(row + 1).to(tl.int32)
    mp, np_, x_off, a_off = _padded(row, BM)
    rm = tl.arange(0, BM)
    # The norm: each BM x BN tile's sum of squares (the table's sumsq), added in the lanes of
    # the normalization's sum in tile order, as its normalize adds the tile partials.
    lanes = tl.arange(0, REDUCE)
    acc = tl.zeros([REDUCE], dtype=tl.float32)
    for c in range(0, np_, BN):
        rn = c + tl.arange(0, BN)
        mask = (rm[:, None] < m) & (rn[None, :] < n)
        v = _source_tile(src, row, rm, rn, m, n, mask)
        part = tl.sum(tl.sum(v * v, axis=1), axis=0)
        acc = tl.where(lanes == (c // BN) % REDUCE, acc + part, acc)
    inv = 1.0 / (tl.sqrt(tl.sum(acc, axis=0)) + eps)
    xb = x + x_off
    for c in range(0, np_, BN):
        rn = c + tl.arange(0, BN)
        mask = (rm[:, None] < m) & (rn[None, :] < n)
        v = _source_tile(src, row, rm, rn, m, n, mask)
        tl.store(xb + rm[:, None] * np_ + rn[None, :], (v * inv).to(x.dtype.element_ty))
    ab = a + a_off
    bb = b + a_off
    rk = tl.arange(0, BK)
    for step in range(STEPS):
        tl.debug_barrier()
        # A = X·Xᵀ (the table's gram on its one tile).
        left = xb + rm[:, None] * np_ + rk[None, :]
        gram_acc = tl.zeros((BM, BM), dtype=tl.float32)
        for _k in range(0, np_, BK):
            block = tl.load(left)
            gram_acc = _mma(block, tl.trans(block), gram_acc, UPCAST)
            left += BK
        tl.store(ab + rm[:, None] * mp + rm[None, :], gram_acc.to(a.dtype.element_ty))
        tl.debug_barrier()
        # B = b·A + c·A·A (the table's poly).
        ca = tl.load(coeffs + step * 3)
        cb = tl.load(coeffs + step * 3 + 1)
        cc = tl.load(coeffs + step * 3 + 2)
        sq = _square_times(ab, mp, rm, ab, mp, rm, BM, BM, BK, UPCAST)
        aij = tl.load(ab + rm[:, None] * mp + rm[None, :])
        tl.store(
            bb + rm[:, None] * mp + rm[None, :],
            (cb * aij.to(tl.float32) + cc * sq).to(b.dtype.element_ty),
        )
        tl.debug_barrier()
        # X' = a·X + B·X, block by block of columns (the table's update), in place.
        for c in range(0, np_, BN):
            rn = c + tl.arange(0, BN)
            prod = _square_times(bb, mp, rm, xb, np_, rn, BM, BN, BK, UPCAST)
            xij = tl.load(xb + rm[:, None] * np_ + rn[None, :])
            res = ca * xij.to(tl.float32) + prod
            if step == STEPS - 1:
                _store_result(res, x, out, row, p, scales, src, w_sgd, w_muon, rm, rn, MIX)
            else:
                tl.store(xb + rm[:, None] * np_ + rn[None, :], res.to(x.dtype.element_ty))


@triton.jit
def momentum(
    pointers,
    count,
    n,
    blocks,
    offsets,
    numels,
    mu_ptr,
    NESTEROV: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """Steps 1–2 of a packed group in one launch: ``m <- mu·m + g`` in place and ``n = g +
    mu·m`` (Nesterov) or ``m``, written packed into ``n``.

    ``pointers`` holds the addresses of the group's float32 contiguous gradients (the first
    ``count``) then of their momentum buffers; each program takes one ``BLOCK`` of one tensor
    (``blocks``: tensor, block pairs), and the tensor's elements go to ``n`` from its packed
    offset. Each product and sum is rounded on its own (launched with ``enable_fp_fusion``
    off), as the multi-tensor body's separate operations round them: the same bits.
    """
    b = blocks + tl.program_id(0) * 2
    t = tl.load(b)
    idx = tl.load(b + 1) * BLOCK + tl.arange(0, BLOCK)
    mask = idx < tl.load(numels + t)
    g = tl.load(pointers + t).to(tl.pointer_type(tl.float32))
    m = tl.load(pointers + count + t).to(tl.pointer_type(tl.float32))
    mu = tl.load(mu_ptr)
    gv = tl.load(g + idx, mask=mask)
    mv = tl.load(m + idx, mask=mask) * mu
    mv = mv + gv
    tl.store(m + idx, mv, mask=mask)
    if NESTEROV:
        nv = mv * mu
        nv = nv + gv
    else:
        nv = mv
    tl.store(n + tl.load(offsets + t) + idx, nv, mask=mask)
