"""Grouped Triton Newton–Schulz: one problem table per param group, a few launches per iteration.

Spec §1's quintic iteration, run over every matrix of a group at once (issue #14, WP-009):

* the group's matrices ``n`` are packed into one flat buffer (one ``torch.cat``);
* two launches over the tile table normalize every matrix by its Frobenius norm (tile sums of
  squares, then each tile scales itself) and write it, in the working dtype and already
  transposed where ``rows > cols`` (read by strides, no copy), into the ``X`` workspace;
* each iteration is three grouped launches over a tile table covering every matrix:
  ``A = X·Xᵀ`` (lower-triangle tiles only, mirrored on store), ``B = b·A + c·A·A`` (likewise
  symmetric) and ``X = a·X + B·X``, with the coefficient epilogues fused;
* the last iteration writes ``scale·X`` back in the original orientation and dtype.

Operands are bf16 (or fp16), accumulation fp32. Every output tile is written by exactly one
program with a fixed reduction order and no atomics, so results are deterministic and the launches
can be captured in CUDA graphs. Triton is imported lazily: where it is missing, or a case does not
apply (no CUDA, float32 ``ns_dtype``, a compile trace), :func:`orthogonalize_table` returns None
and the caller runs the torch backend.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import operator
import os
import sys
import threading
import warnings
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import torch
from torch import Tensor

from musgd._device import capturing
from musgd._newton_schulz import muon_rms_scale

T = TypeVar("T")

BACKENDS = ("auto", "triton", "torch", "gram")
# Working dtypes the kernels support; float32 would need exact (non-TF32) dots: torch backend.
TRITON_NS_DTYPES = (torch.bfloat16, torch.float16)
# Columns of the problem table (int64): working (m, n) with m <= n, offsets of X and A/B in
# their workspaces, offset of the matrix in the packed source, whether X is the source's
# transpose (a tall source), the range of the matrix's tiles in the rectangular tile table, and
# the working extents padded to whole tiles (the workspaces' row strides). The kernels read
# them by these positions.
_M, _N, _XOFF, _AOFF, _SOFF, _TRANS, _TILE0, _TILES, _MP, _NP = range(10)
_COLUMNS = 10
# Plans (device tables) are kept for the life of the process: CUDA graphs recorded over a plan
# read its tables by address. Beyond this many layouts new plans are built per call, which a
# CUDA-graph capture cannot do (building one copies host tables to the device): there it raises
# PlanUnavailableError and the recording fails cleanly (eager from then on). A plan is tens of
# kilobytes (yolo26m's ~90 KB); a training run needs one per group layout. At 256, full CUDA
# test sessions likely filled the cache: late recordings failed with an invalidated capture.
MAX_PLANS = 4096


class PlanUnavailableError(RuntimeError):
    """A new Triton plan was needed inside a CUDA-graph capture, where none can be built."""


def interpreting() -> bool:
    """True when Triton runs this package's kernels in its CPU interpreter: as the kernel
    module was built when it was imported (Triton reads ``TRITON_INTERPRET`` when a kernel is
    defined), else as ``TRITON_INTERPRET`` says now."""
    kernels = sys.modules.get("musgd._triton_kernels")
    if kernels is not None:
        return bool(kernels.INTERPRETED)
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def _triton_found() -> bool:
    return importlib.util.find_spec("triton") is not None


_triton_found_cached = functools.cache(_triton_found)


def triton_importable() -> bool:
    """Whether the ``triton`` package can be imported (without importing it)."""
    if torch.compiler.is_compiling():
        # Dynamo traces through a functools cache wrapper (and warns); the body traces the same.
        return _triton_found()
    return _triton_found_cached()


def check_backend(value: object) -> None:
    """Raise ValueError unless ``value`` names a Newton–Schulz backend."""
    if not isinstance(value, str) or value not in BACKENDS:
        raise ValueError(f"ns_backend must be one of {', '.join(map(repr, BACKENDS))}")


@dataclass(frozen=True)
class TileConfig:
    """Tile sizes and launch settings of one plan's matmul kernels.

    ``block`` is the square tile of the Gram and polynomial products and the row extent of the
    rectangular ones (normalization and ``X' = a·X + B·X``), whose column extent is
    ``block_n`` (0: ``block``; else a multiple of it). ``update_warps`` (0: ``num_warps``) are
    the warps of the ``X'`` product alone. ``pdl``: launch the chain with programmatic
    dependent launch where it applies (:func:`pdl_applies`). ``split_k``: the Gram product's
    reduction (a matrix's columns, in whole ``block_k`` slices) dealt to this many programs per
    tile, each writing a float32 partial that a fold kernel adds in a fixed order into ``A``
    (one more launch per iteration); 1 (the default) is one program per tile. A long reduction
    (yolo26n's 256 x 2304 matrices take 36 slices) is then no longer one program's serial
    loop; the sum, in another order, rounds differently. ``fuse_small``: every matrix of at
    most ``block`` working rows (one row of tiles) runs its whole Newton-Schulz in one program
    of one launch (``musgd._triton_kernels.fused_small``: the same tiles, products and
    roundings as the chain, so the same bits), and the chain's launches cover only the others
    (yolo26n's 82 matrices of at most 64 rows then wait on one launch, not fifteen).
    """

    block: int
    block_k: int
    num_warps: int
    num_stages: int
    block_n: int = 0
    update_warps: int = 0
    pdl: bool = True
    split_k: int = 1
    fuse_small: bool = False

    @property
    def columns(self) -> int:
        """The column extent of the rectangular tiles."""
        return self.block_n or self.block

    @property
    def warps_of_update(self) -> int:
        """The warps of the ``X' = a·X + B·X`` launches."""
        return self.update_warps or self.num_warps


# Measured on the H200 with the padded, aligned kernels (docs/evidence/
# musgd-triton-tiles-h200-2c734a6.json, five iterations): 64x64 tiles with BK 64 and 4 warps
# replayed the YOLO26 tables fastest (yolo26n/s/m 0.185 / 0.545 / 1.094 ms; 128x128 tiles
# 0.267 / 0.645 / 1.150 ms), and 128x128 tiles with BK 64, 8 warps and 4 stages ran the large
# stacks fastest (24x1024x4096 5.59 ms, 8x4096x4096 22.5 ms; 64x64 tiles 7.0 and 35.3 ms).
SMALL_TILES = TileConfig(block=64, block_k=64, num_warps=4, num_stages=3)
LARGE_TILES = TileConfig(block=128, block_k=64, num_warps=8, num_stages=4)
# A plan whose largest working row count reaches this uses the large tiles (YOLO26's reach 512).
LARGE_ROWS = 1024


@dataclass(frozen=True)
class TablePlan:
    """The device tables and workspace sizes of one group layout."""

    shapes: tuple[tuple[int, int], ...]
    sizes: tuple[int, ...]
    problems: Tensor
    scales: Tensor
    square_tiles: Tensor
    rect_tiles: Tensor
    #: The problems run whole by one program each (``TileConfig.fuse_small``), in plan order.
    small: Tensor
    x_numel: int
    a_numel: int
    tiles: TileConfig


def _tile_count(extent: int, block: int) -> int:
    return (extent + block - 1) // block


def build_plan(
    shapes: Sequence[tuple[int, int]], device: torch.device, tiles: TileConfig | None = None
) -> TablePlan:
    """The problem and tile tables of matrices viewed as ``shapes`` (``(rows, cols)`` each),
    tiled by ``tiles`` (default: by the largest working row count, see ``LARGE_ROWS``)."""
    work = [(min(r, c), max(r, c)) for r, c in shapes]
    if tiles is None:
        tiles = LARGE_TILES if max(m for m, _ in work) >= LARGE_ROWS else SMALL_TILES
    if tiles.block % tiles.block_k or tiles.block < 16 or tiles.block_k < 16:
        raise ValueError(
            f"tile block {tiles.block} must be a multiple of block_k {tiles.block_k}, both at "
            "least 16: the kernels step whole block_k slices over matrices padded to whole blocks"
        )
    if tiles.split_k < 1:
        raise ValueError(
            f"tile split_k {tiles.split_k} must be 1 or more: the programs each tile's Gram "
            "product is dealt to"
        )
    if tiles.columns % tiles.block:
        raise ValueError(
            f"tile block_n {tiles.block_n} must be a multiple of block {tiles.block}: the "
            "rectangular tiles' columns pad X to whole square tiles too"
        )
    rows: list[list[int]] = []
    square: list[tuple[int, int, int]] = []
    rect: list[tuple[int, int, int]] = []
    small: list[int] = []
    x_off = a_off = s_off = 0
    for p, ((r, c), (m, n)) in enumerate(zip(shapes, work, strict=True)):
        # Source layout is the matrix's (r, c) row-major view; X is it, or its transpose. The
        # workspaces hold X and A padded to whole tiles (see musgd._triton_kernels).
        tm, tn = _tile_count(m, tiles.block), _tile_count(n, tiles.columns)
        mp, np_ = tm * tiles.block, tn * tiles.columns
        rows.append([m, n, x_off, a_off, s_off, int(r > c), len(rect), tm * tn, mp, np_])
        if tiles.fuse_small and tm == 1:
            small.append(p)
        else:
            square.extend((p, i, j) for i in range(tm) for j in range(i + 1))
            rect.extend((p, i, j) for i in range(tm) for j in range(tn))
        x_off += mp * np_
        a_off += mp * mp
        s_off += r * c
    scales = [muon_rms_scale(r, c) for r, c in shapes]
    return TablePlan(
        shapes=tuple(shapes),
        sizes=tuple(r * c for r, c in shapes),
        problems=torch.tensor(rows, dtype=torch.int64, device=device),
        scales=torch.tensor(scales, dtype=torch.float32, device=device),
        square_tiles=torch.tensor(square, dtype=torch.int32, device=device).view(-1, 3),
        rect_tiles=torch.tensor(rect, dtype=torch.int32, device=device).view(-1, 3),
        small=torch.tensor(small, dtype=torch.int32, device=device),
        x_numel=x_off,
        a_numel=a_off,
        tiles=tiles,
    )


_PLANS: dict[tuple[tuple[tuple[int, int], ...], torch.device], TablePlan] = {}
_PLANS_LOCK = threading.Lock()


def _refuse_inside_capture(device: torch.device, cache: dict[Any, Any], what: str) -> None:
    """Raise PlanUnavailableError when ``what`` (device tables) is needed inside a capture."""
    if capturing(device):
        why = (
            f"the cache is full ({MAX_PLANS} layouts)"
            if len(cache) >= MAX_PLANS
            else "this layout was never stepped outside a capture: run one step before capturing"
        )
        raise PlanUnavailableError(
            f"MuSGD's Triton Newton-Schulz needs new {what} inside a CUDA-graph capture, where "
            f"none can be built: {why}"
        )


def _cached(
    cache: dict[Any, T], key: Any, device: torch.device, what: str, build: Callable[[], T]
) -> T:
    """``cache[key]``, built by ``build()`` on first use, outside any capture (device tables and
    constants are host-to-device copies, which a capture cannot hold); kept for the life of the
    process (recordings read them by address), up to ``MAX_PLANS`` entries per cache."""
    with _PLANS_LOCK:
        found = cache.get(key)
    if found is not None:
        return found
    _refuse_inside_capture(device, cache, what)
    built = build()
    with _PLANS_LOCK:
        if len(cache) < MAX_PLANS:
            built = cache.setdefault(key, built)
    return built


def plan_for(shapes: tuple[tuple[int, int], ...], device: torch.device) -> TablePlan:
    """The cached plan of ``shapes`` on ``device`` (built on first use, outside any capture)."""
    return _cached(
        _PLANS, (shapes, device), device, "plan (device tables)", lambda: build_plan(shapes, device)
    )


_SCALES: dict[tuple[tuple[float, ...], torch.device], Tensor] = {}
_VALUES: dict[tuple[str, torch.device], Tensor] = {}


def value_tensor(value: float | Tensor, device: torch.device) -> Tensor:
    """A float32 0-d device tensor holding ``value``: the tensor itself (a replay's
    hyperparameter slot), or a cached constant per value, built outside any capture."""
    if isinstance(value, Tensor):
        return value
    number = float(value)
    return _cached(
        _VALUES,
        (number.hex(), device),
        device,
        "constants",
        lambda: torch.tensor(number, dtype=torch.float32, device=device),
    )


def _value_key(value: float | Tensor) -> Hashable:
    """What a recording of the table depends on in ``value``: its bits, or the slot's address."""
    if isinstance(value, Tensor):
        return ("slot", value.data_ptr())
    return ("float", float(value).hex())


def scales_for(scales: tuple[float, ...], device: torch.device) -> Tensor:
    """The cached float32 device tensor of per-matrix result scales (for a rule other than the
    plan's ``0.2·sqrt(max(rows, cols))``), built on first use, outside any capture."""
    return _cached(
        _SCALES,
        (scales, device),
        device,
        "result scales",
        lambda: torch.tensor(scales, dtype=torch.float32, device=device),
    )


_COEFFICIENTS: dict[tuple[tuple[str, ...], torch.device], Tensor] = {}


def coefficients_for(
    triples: tuple[tuple[float, float, float], ...], device: torch.device
) -> Tensor:
    """The cached float32 device tensor of the iterations' ``(a, b, c)``, one row each (the
    fused small-matrix kernel reads them; the chain takes them as launch arguments, which
    Triton rounds to float32 as this does), built on first use, outside any capture."""
    key = tuple(float(v).hex() for triple in triples for v in triple)
    return _cached(
        _COEFFICIENTS,
        (key, device),
        device,
        "Newton-Schulz coefficients",
        lambda: torch.tensor(triples, dtype=torch.float32, device=device).view(-1, 3),
    )


def _kernels() -> Any:
    """The kernel module, imported on first use (it imports Triton)."""
    from musgd import _triton_kernels

    return _triton_kernels


# Matrices index their elements in 32 bits inside the kernels (offsets into the workspaces are
# 64-bit): a larger matrix runs the torch backend.
MAX_ELEMENTS = 1 << 31
# Lanes of the normalization's sum over a matrix's tile partials (a 4096 x 4096 matrix in
# 128-wide tiles has 1024 of them: four passes).
NORMALIZE_REDUCE = 256


def _launch_pdl_found() -> bool:
    """Whether this Triton's CUDA backend takes the ``launch_pdl`` launch option."""
    try:
        compiler = importlib.import_module("triton.backends.nvidia.compiler")
    except ImportError:
        return False
    options = getattr(compiler, "CUDAOptions", None)
    return "launch_pdl" in getattr(options, "__dataclass_fields__", {})


@functools.cache
def pdl_applies(device: torch.device) -> bool:
    """Whether the table's kernels launch with programmatic dependent launch on ``device``:
    each kernel's prologue (reading the plan's tables) then overlaps the previous kernel's
    tail, and a grid-dependency wait orders the rest (``musgd._triton_kernels._follow``).
    Needs a CUDA device of compute capability 9.0 or newer (Hopper) and a Triton that has both
    the device-side wait and the launch option; never under the interpreter."""
    if device.type != "cuda" or interpreting() or not _kernels().GDC_FOUND:
        return False
    if torch.cuda.get_device_capability(device)[0] < 9:
        return False
    return _launch_pdl_found()


def run_plan(
    plan: TablePlan,
    src: Tensor,
    triples: Sequence[tuple[float, float, float]],
    eps: float,
    dtype: torch.dtype,
    scales: Tensor | None = None,
    mix: tuple[Tensor, Tensor] | None = None,
    out: Tensor | None = None,
) -> Tensor:
    """``O = scale · NS(matrix)`` for every matrix packed (row-major, in plan order) in
    ``src``, ``scale`` the plan's (``0.2·sqrt(max(rows, cols))``) or the matrix's entry of
    ``scales``; with ``mix = (w_sgd, w_muon)`` (float32 0-d device tensors) the update
    ``w_sgd·src + w_muon·O`` instead, mixed in the last kernel.

    Returns ``out`` (a flat tensor like ``src``), or a fresh one when None. Launches ``2 +
    3·len(triples)`` kernels (``2 + 4·len(triples)`` with a split Gram product), and one more
    for the plan's small matrices where it fuses them (only that one where every matrix is
    small); the caller has checked that the backend applies.
    """
    k = _kernels()
    cfg = plan.tiles
    x = torch.empty(plan.x_numel, dtype=dtype, device=src.device)
    x_next = torch.empty_like(x)
    split = cfg.split_k
    a = torch.empty(plan.a_numel, dtype=dtype, device=src.device)
    # A split Gram product writes float32 partials, one A-sized workspace per split, which
    # a fold kernel adds into A.
    partials = (
        a
        if split == 1
        else torch.empty(split * plan.a_numel, dtype=torch.float32, device=src.device)
    )
    b = torch.empty(plan.a_numel, dtype=dtype, device=src.device)
    if out is None:
        out = torch.empty_like(src)
    square = (plan.square_tiles.size(0),)
    rect = (plan.rect_tiles.size(0),)
    if plan.small.numel():
        # The small matrices, whole, one program each (the chain's bits; TileConfig.fuse_small).
        k.fused_small[(plan.small.size(0),)](
            src,
            x,
            a,
            b,
            out,
            plan.problems,
            plan.small,
            plan.scales if scales is None else scales,
            coefficients_for(tuple(triples), src.device),
            eps,
            *(mix or (src, src)),  # unread without MIX
            STEPS=len(triples),
            BM=cfg.block,
            BN=cfg.columns,
            BK=cfg.block_k,
            REDUCE=NORMALIZE_REDUCE,
            MIX=mix is not None,
            UPCAST=interpreting(),
            COLS=_COLUMNS,
            num_warps=cfg.num_warps,
            num_stages=cfg.num_stages,
        )
    if not rect[0]:
        return out
    gdc = cfg.pdl and pdl_applies(src.device)
    pdl: dict[str, Any] = {"GDC": gdc, **({"launch_pdl": True} if gdc else {})}
    launch = {
        "num_warps": cfg.num_warps,
        "num_stages": cfg.num_stages,
        "UPCAST": interpreting(),
        "COLS": _COLUMNS,
        **pdl,
    }
    # The Frobenius norms: one program per tile of each matrix, in two launches (tile sums of
    # squares, then every tile adds its matrix's sums in one fixed order and scales itself).
    partial = torch.empty(rect[0], dtype=torch.float32, device=src.device)
    k.sumsq[rect](
        src,
        partial,
        plan.problems,
        plan.rect_tiles,
        BM=cfg.block,
        BN=cfg.columns,
        COLS=_COLUMNS,
        num_warps=4,
        **pdl,
    )
    k.normalize[rect](
        src,
        x,
        partial,
        plan.problems,
        plan.rect_tiles,
        eps,
        BM=cfg.block,
        BN=cfg.columns,
        REDUCE=NORMALIZE_REDUCE,
        COLS=_COLUMNS,
        num_warps=4,
        **pdl,
    )
    last = len(triples) - 1
    for i, (ca, cb, cc) in enumerate(triples):
        k.gram[(square[0], split)](
            x,
            partials,
            plan.problems,
            plan.square_tiles,
            plan.a_numel,
            BM=cfg.block,
            BK=cfg.block_k,
            SPLIT=split,
            **launch,
        )
        if split > 1:
            k.fold[square](
                partials,
                a,
                plan.problems,
                plan.square_tiles,
                plan.a_numel,
                BM=cfg.block,
                SPLIT=split,
                COLS=_COLUMNS,
                num_warps=4,
                **pdl,
            )
        k.poly[square](
            a,
            b,
            plan.problems,
            plan.square_tiles,
            cb,
            cc,
            BM=cfg.block,
            BK=cfg.block_k,
            **launch,
        )
        final = i == last
        k.update[rect](
            b,
            x,
            out if final else x_next,
            plan.problems,
            plan.scales if scales is None else scales,
            plan.rect_tiles,
            ca,
            src,
            *(mix or (src, src)),  # unread without MIX
            BM=cfg.block,
            BN=cfg.columns,
            BK=cfg.block_k,
            FINAL=final,
            MIX=final and mix is not None,
            **{**launch, "num_warps": cfg.warps_of_update},
        )
        x, x_next = x_next, x
    return out


#: The most Newton-Schulz arithmetic (nominal FLOP per step) a group may have for ``"auto"`` to
#: run it through the Triton table. Small tables are launch-bound, where the table's few launches
#: win; beyond this, cuBLAS is as fast or faster on most shapes (H200, 2c734a6, WP-009: yolo26m,
#: 186 GFLOP, replays its table in 1.09 ms; 24x1024x4096, 2.3 TFLOP, takes 5.5 ms against
#: torch's 4.3 ms, while 8x4096x4096 takes 22.4 ms against 26.7 ms).
AUTO_MAX_FLOP = 300e9


@functools.lru_cache(maxsize=MAX_PLANS)
def table_flop(shapes: tuple[tuple[int, int], ...], steps: int) -> float:
    """Nominal Newton-Schulz FLOP of one table: ``4·m²·n + 2·m³`` per matrix and iteration
    (``m <= n``), as the benchmark counts it."""
    total = 0
    for rows, cols in shapes:
        m, n = min(rows, cols), max(rows, cols)
        total += 4 * m * m * n + 2 * m * m * m
    return float(total * steps)


# Why the Triton backend does not apply, said once per process and reason.
_WARNED: set[str] = set()


def fallback_reason(requested: str, device: torch.device, dtype: torch.dtype) -> str | None:
    """Why the Triton backend cannot run a group on ``device`` in ``dtype``, or None.

    On the CPU it runs only in Triton's interpreter and only when asked for by name ("auto"
    means CUDA): the interpreter is a testing tool, orders of magnitude slower than torch.
    """
    if not triton_importable():
        return "triton is not installed"
    cpu_ok = device.type == "cpu" and interpreting() and requested == "triton"
    if device.type != "cuda" and not cpu_ok:
        return f"its kernels run on CUDA devices only, not {device.type}"
    if dtype not in TRITON_NS_DTYPES:
        return f"ns_dtype {dtype} is not supported by its kernels (bfloat16, float16)"
    if torch.compiler.is_compiling():
        return "a torch.compile trace is active"
    return None


def warn_fallback(requested: str, reason: str) -> None:
    """Say once per reason that the torch backend runs instead; silent for ``auto``, which
    means "Triton where it applies"."""
    if requested == "auto":
        return
    if reason in _WARNED:
        return
    _WARNED.add(reason)
    warnings.warn(
        f"MuSGD ns_backend={requested!r}: the Triton Newton-Schulz backend does not apply "
        f"({reason}); the torch backend runs instead, with the same math. Pass "
        "ns_backend='torch' to silence this.",
        RuntimeWarning,
        stacklevel=3,
    )


def table_plan(
    members: Sequence[Tensor],
    shapes: tuple[tuple[int, int], ...],
    *,
    requested: str,
    steps: int,
    dtype: torch.dtype,
) -> TablePlan | None:
    """The plan that runs matrices ``members`` (their ``(rows, cols)`` views are ``shapes``)
    through the Triton table, or None when the backend does not apply (saying why once, see
    :func:`warn_fallback`), so that the caller runs the torch backend."""
    if requested == "torch" or not members:
        return None
    first = members[0]
    reason = fallback_reason(requested, first.device, dtype)
    if reason is None and len({(m.device, m.dtype) for m in members}) > 1:
        reason = "the group mixes devices or dtypes"
    if reason is None and any(r * c >= MAX_ELEMENTS for r, c in shapes):
        reason = "a matrix has 2**31 or more elements (the kernels index tiles in 32 bits)"
    if reason is None and requested == "auto" and table_flop(shapes, steps) > AUTO_MAX_FLOP:
        reason = "the group's Newton-Schulz arithmetic is large, where cuBLAS is faster"
    if reason is not None:
        warn_fallback(requested, reason)
        return None
    return plan_for(shapes, first.device)


def run_table(
    plan: TablePlan,
    src: Tensor,
    *,
    triples: Sequence[tuple[float, float, float]],
    eps: float,
    dtype: torch.dtype,
    run: Callable[[Hashable, Tensor, Callable[[Tensor], Tensor]], Tensor] | None = None,
    scales: tuple[float, ...] | None = None,
    mix: tuple[float | Tensor, float | Tensor] | None = None,
    out: Tensor | None = None,
) -> Tensor:
    """``O = 0.2·sqrt(max(rows, cols))·NS(m)`` (or ``scales[i]·NS(m)``) of every matrix packed
    row-major, in plan order, in the flat ``src``; with ``mix = (w_sgd, w_muon)`` (floats, or
    float32 0-d device tensors) the update ``w_sgd·m + w_muon·O``. Written into ``out`` when
    given (outside CUDA-graph captures: a recording writes into memory of its own), else into
    a fresh flat tensor; returns the tensor written.

    ``run(key, src, fn)`` may replace the direct call ``fn(src)`` (a replaying orthogonalizer
    records it under ``key``)."""
    device = src.device
    scale_tensor = None if scales is None else scales_for(scales, device)
    weights = None
    mix_key: Hashable = None
    if mix is not None:
        weights = (value_tensor(mix[0], device), value_tensor(mix[1], device))
        mix_key = (_value_key(mix[0]), _value_key(mix[1]))
    triples = tuple(triples)

    def table(packed: Tensor) -> Tensor:
        target = None if out is None or capturing(device) else out
        return run_plan(plan, packed, triples, eps, dtype, scale_tensor, weights, target)

    if run is None:
        return table(src)
    return run(("triton-table", plan.shapes, triples, eps, dtype, scales, mix_key), src, table)


def orthogonalize_table(
    members: Sequence[Tensor],
    shapes: tuple[tuple[int, int], ...],
    *,
    requested: str,
    triples: Sequence[tuple[float, float, float]],
    eps: float,
    dtype: torch.dtype,
    run: Callable[[Hashable, Tensor, Callable[[Tensor], Tensor]], Tensor] | None = None,
    scales: tuple[float, ...] | None = None,
    mix: tuple[float | Tensor, float | Tensor] | None = None,
) -> tuple[Tensor, list[Tensor]] | None:
    """:func:`run_table` on ``members`` packed (``shapes`` are their ``(rows, cols)`` views):
    one fresh flat tensor and its per-member views; None when the Triton backend does not
    apply (:func:`table_plan`)."""
    plan = table_plan(members, shapes, requested=requested, steps=len(triples), dtype=dtype)
    if plan is None:
        return None
    members = list(members)
    out = run_table(
        plan,
        torch._utils._flatten_dense_tensors(members),  # type: ignore[no-untyped-call]
        triples=triples,
        eps=eps,
        dtype=dtype,
        run=run,
        scales=scales,
        mix=mix,
    )
    return out, list(torch._utils._unflatten_dense_tensors(out, members))  # type: ignore[no-untyped-call]


# Elements each program of the packed momentum kernel takes (one block of one tensor).
MOMENTUM_BLOCK = 1024
_DTYPE = operator.attrgetter("dtype")


@dataclass(frozen=True)
class MomentumPlan:
    """The device tables of one packed group's momentum kernel: its ``(tensor, block)``
    pairs, and each tensor's packed offset and element count, in group order."""

    blocks: Tensor
    offsets: Tensor
    numels: Tensor
    programs: int


def build_momentum_plan(
    numels: Sequence[int], offsets: Sequence[int], device: torch.device
) -> MomentumPlan:
    """The momentum kernel's tables for tensors of ``numels`` elements packed at ``offsets``."""
    pairs = [
        (t, b) for t, count in enumerate(numels) for b in range(_tile_count(count, MOMENTUM_BLOCK))
    ]
    return MomentumPlan(
        blocks=torch.tensor(pairs, dtype=torch.int32, device=device),
        offsets=torch.tensor(offsets, dtype=torch.int64, device=device),
        numels=torch.tensor(numels, dtype=torch.int32, device=device),
        programs=len(pairs),
    )


_MOMENTUM_PLANS: dict[tuple[tuple[int, ...], tuple[int, ...], torch.device], MomentumPlan] = {}
_POINTERS: dict[tuple[tuple[int, ...], torch.device], Tensor] = {}


def momentum_plan(
    numels: tuple[int, ...], offsets: tuple[int, ...], device: torch.device
) -> MomentumPlan:
    """The cached :class:`MomentumPlan` (built on first use, outside any capture; raises
    :class:`PlanUnavailableError` when one is needed inside a capture)."""
    return _cached(
        _MOMENTUM_PLANS,
        (numels, offsets, device),
        device,
        "momentum tables",
        lambda: build_momentum_plan(numels, offsets, device),
    )


def momentum_applies(grads: Sequence[Tensor], bufs: Sequence[Tensor]) -> bool:
    """Whether :func:`run_momentum` can run these tensors: float32 and contiguous, all of them
    (the kernel walks each tensor's memory as its row-major elements)."""
    return (
        {*map(_DTYPE, grads), *map(_DTYPE, bufs)} == {torch.float32}
        and all(map(Tensor.is_contiguous, grads))
        and all(map(Tensor.is_contiguous, bufs))
    )


def run_momentum(
    plan: MomentumPlan,
    grads: Sequence[Tensor],
    bufs: Sequence[Tensor],
    n: Tensor,
    momentum: float | Tensor,
    *,
    nesterov: bool,
) -> bool:
    """``m <- mu·m + g`` for every buffer in place and the packed ``n`` in one launch (see
    ``musgd._triton_kernels.momentum``); the caller has checked :func:`momentum_applies`.

    The tensors' addresses go to the kernel in a device table, kept per set of addresses for
    the life of the process (a CUDA graph recorded over it reads it by address). Returns False,
    having done nothing, where a table or the momentum's constant would have to be built inside
    a capture: the caller then runs the multi-tensor operations instead.
    """
    device = n.device
    addresses = (*map(Tensor.data_ptr, grads), *map(Tensor.data_ptr, bufs))
    try:
        table = _cached(
            _POINTERS,
            (addresses, device),
            device,
            "pointer tables",
            lambda: torch.tensor(addresses, dtype=torch.int64, device=device),
        )
        mu = value_tensor(momentum, device)
    except PlanUnavailableError:
        return False
    _kernels().momentum[(plan.programs,)](
        table,
        len(grads),
        n,
        plan.blocks,
        plan.offsets,
        plan.numels,
        mu,
        NESTEROV=nesterov,
        BLOCK=MOMENTUM_BLOCK,
        num_warps=4,
        enable_fp_fusion=False,
    )
    return True
