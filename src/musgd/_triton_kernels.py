"""The Triton kernels of the grouped Newton–Schulz backend (see ``musgd._triton_ns``).

Imported only when that backend runs, so that ``import musgd`` never imports Triton. Whether
Triton interprets these kernels on the CPU is decided when this module is first imported (it
reads ``TRITON_INTERPRET`` then). Each tile of every output is written by one program, with a
fixed reduction order and no atomics: results are deterministic.

``UPCAST`` (interpreter only) widens bf16/fp16 operands to float32 before each block product:
Triton's CPU interpreter multiplies bf16 blocks wrongly (numpy has no bf16), and the widening is
exact, since a product of two bf16 or fp16 values fits in float32.
"""

# mypy: ignore-errors

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def normalize(src, x, problems, eps, BLOCK: tl.constexpr):
    row = problems + tl.program_id(0) * 8
    m = tl.load(row + 0)
    n = tl.load(row + 1)
    x_off = tl.load(row + 2)
    s_off = tl.load(row + 4)
    sr = tl.load(row + 5)
    sc = tl.load(row + 6)
    numel = m * n
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, numel, BLOCK):
        idx = start + tl.arange(0, BLOCK)
        v = tl.load(src + s_off + idx, mask=idx < numel, other=0.0).to(tl.float32)
        acc += v * v
    inv = 1.0 / (tl.sqrt(tl.sum(acc, axis=0)) + eps)
    for start in range(0, numel, BLOCK):
        idx = start + tl.arange(0, BLOCK)
        mask = idx < numel
        r = idx // n
        c = idx % n
        v = tl.load(src + s_off + r * sr + c * sc, mask=mask, other=0.0).to(tl.float32)
        tl.store(x + x_off + idx, (v * inv).to(x.dtype.element_ty), mask=mask)


@triton.jit
def gram(x, a, problems, tiles, BM: tl.constexpr, BK: tl.constexpr, UPCAST: tl.constexpr):
    t = tiles + tl.program_id(0) * 3
    p = tl.load(t)
    ti = tl.load(t + 1)
    tj = tl.load(t + 2)
    row = problems + p * 8
    m = tl.load(row + 0)
    n = tl.load(row + 1)
    x_off = tl.load(row + 2)
    a_off = tl.load(row + 3)
    rm = ti * BM + tl.arange(0, BM)
    rn = tj * BM + tl.arange(0, BM)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BM), dtype=tl.float32)
    for k in range(0, n, BK):
        kk = k + rk
        left = tl.load(
            x + x_off + rm[:, None] * n + kk[None, :],
            mask=(rm[:, None] < m) & (kk[None, :] < n),
            other=0.0,
        )
        right = tl.load(
            x + x_off + rn[None, :] * n + kk[:, None],
            mask=(rn[None, :] < m) & (kk[:, None] < n),
            other=0.0,
        )
        if UPCAST:
            acc = tl.dot(left.to(tl.float32), right.to(tl.float32), acc)
        else:
            acc = tl.dot(left, right, acc)
    out = acc.to(a.dtype.element_ty)
    mask = (rm[:, None] < m) & (rn[None, :] < m)
    tl.store(a + a_off + rm[:, None] * m + rn[None, :], out, mask=mask)
    if ti != tj:  # the mirrored tile of the symmetric result
        tl.store(a + a_off + rn[None, :] * m + rm[:, None], out, mask=mask)


@triton.jit
def poly(
    a, b_out, problems, tiles, cb, cc, BM: tl.constexpr, BK: tl.constexpr, UPCAST: tl.constexpr
):
    t = tiles + tl.program_id(0) * 3
    p = tl.load(t)
    ti = tl.load(t + 1)
    tj = tl.load(t + 2)
    row = problems + p * 8
    m = tl.load(row + 0)
    a_off = tl.load(row + 3)
    rm = ti * BM + tl.arange(0, BM)
    rn = tj * BM + tl.arange(0, BM)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BM), dtype=tl.float32)
    for k in range(0, m, BK):
        kk = k + rk
        left = tl.load(
            a + a_off + rm[:, None] * m + kk[None, :],
            mask=(rm[:, None] < m) & (kk[None, :] < m),
            other=0.0,
        )
        right = tl.load(
            a + a_off + kk[:, None] * m + rn[None, :],
            mask=(kk[:, None] < m) & (rn[None, :] < m),
            other=0.0,
        )
        if UPCAST:
            acc = tl.dot(left.to(tl.float32), right.to(tl.float32), acc)
        else:
            acc = tl.dot(left, right, acc)
    mask = (rm[:, None] < m) & (rn[None, :] < m)
    aij = tl.load(a + a_off + rm[:, None] * m + rn[None, :], mask=mask, other=0.0)
    out = (cb * aij.to(tl.float32) + cc * acc).to(b_out.dtype.element_ty)
    tl.store(b_out + a_off + rm[:, None] * m + rn[None, :], out, mask=mask)
    if ti != tj:
        tl.store(b_out + a_off + rn[None, :] * m + rm[:, None], out, mask=mask)


@triton.jit
def update(
    bmat,
    x,
    out,
    problems,
    scales,
    tiles,
    ca,
    BM: tl.constexpr,
    BK: tl.constexpr,
    FINAL: tl.constexpr,
    UPCAST: tl.constexpr,
):
    t = tiles + tl.program_id(0) * 3
    p = tl.load(t)
    ti = tl.load(t + 1)
    tj = tl.load(t + 2)
    row = problems + p * 8
    m = tl.load(row + 0)
    n = tl.load(row + 1)
    x_off = tl.load(row + 2)
    a_off = tl.load(row + 3)
    rm = ti * BM + tl.arange(0, BM)
    rn = tj * BM + tl.arange(0, BM)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BM), dtype=tl.float32)
    for k in range(0, m, BK):
        kk = k + rk
        left = tl.load(
            bmat + a_off + rm[:, None] * m + kk[None, :],
            mask=(rm[:, None] < m) & (kk[None, :] < m),
            other=0.0,
        )
        right = tl.load(
            x + x_off + kk[:, None] * n + rn[None, :],
            mask=(kk[:, None] < m) & (rn[None, :] < n),
            other=0.0,
        )
        if UPCAST:
            acc = tl.dot(left.to(tl.float32), right.to(tl.float32), acc)
        else:
            acc = tl.dot(left, right, acc)
    mask = (rm[:, None] < m) & (rn[None, :] < n)
    xij = tl.load(x + x_off + rm[:, None] * n + rn[None, :], mask=mask, other=0.0)
    res = ca * xij.to(tl.float32) + acc
    if FINAL:
        # Back to the matrix's own orientation and dtype, with its RMS scale.
        s_off = tl.load(row + 4)
        sr = tl.load(row + 5)
        sc = tl.load(row + 6)
        scale = tl.load(scales + p)
        res = res.to(x.dtype.element_ty).to(tl.float32) * scale
        ptrs = out + s_off + rm[:, None] * sr + rn[None, :] * sc
        tl.store(ptrs, res.to(out.dtype.element_ty), mask=mask)
    else:
        tl.store(
            out + x_off + rm[:, None] * n + rn[None, :], res.to(out.dtype.element_ty), mask=mask
        )
