"""The Triton Newton-Schulz kernels compile for a Hopper GPU (sm_90) on a machine without one.

Triton's interpreter (tests/musgd/test_triton_ns.py) checks what the kernels compute, not that
they compile: a kernel the GPU compiler refuses would pass there and fail on every CUDA
machine. Triton compiles ahead of time for a target it is given (``triton.compile`` with a
``GPUTarget``) with the ``ptxas`` its wheel ships, no GPU needed; this runs that compile in a
fresh process with an empty cache, for the Gram, fold and polynomial kernels, split and
unsplit, in the tile configurations the table uses, and checks each fits a Hopper block's
shared memory. Nothing here imports Triton: the interpreter tests need it imported first with the
interpreter on (tests/musgd/test_triton_ns.py), and this file is collected before theirs.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

KERNELS = Path(__file__).resolve().parents[2] / "src" / "musgd" / "_triton_kernels.py"

# The tile configurations the Triton table ships (small and large tiles) and benchmarks split.
CONFIGS = ((64, 64, 4, 3), (128, 64, 8, 4))
SPLITS = (1, 2, 4, 8)
# The shared memory one block may use on an H100 or H200 (227 KiB): Triton refuses to launch
# a kernel compiled for more ("OutOfResources"), as the split polynomial kernel of 6a2d1e0 did.
HOPPER_SHARED = 232448

COMPILE = """
import importlib.util, json, sys
import triton
from triton.backends.compiler import GPUTarget
from triton.backends import backends
from triton.compiler import ASTSource

if "nvidia" not in backends:
    print("no NVIDIA backend")
    sys.exit(0)
spec = importlib.util.spec_from_file_location("kernels", sys.argv[1])
k = importlib.util.module_from_spec(spec)
spec.loader.exec_module(k)
kinds = {"x": "*bf16", "b_out": "*bf16", "problems": "*i64", "tiles": "*i32",
         "cb": "fp32", "cc": "fp32", "a_total": "i64", "partials": "*fp32"}
configs, splits = json.loads(sys.argv[2])
for bm, bk, warps, stages in configs:
    for name, split in [("poly", 1)] + [(n, s) for s in splits for n in ("gram", "fold")]:
        if name == "fold" and split == 1:
            continue
        fn = getattr(k, name)
        # A split Gram product writes float32 partials; the fold and the polynomial read A.
        a = "*fp32" if name == "gram" and split > 1 else "*bf16"
        consts = {"BM": bm, "BK": bk, "SPLIT": split, "UPCAST": False, "COLS": 10, "GDC": False}
        consts = {n: v for n, v in consts.items() if n in fn.arg_names}
        sig = {n: "constexpr" if n in consts else {**kinds, "a": a}[n] for n in fn.arg_names}
        src = ASTSource(fn=fn, signature=sig,
                        constexprs={(fn.arg_names.index(n),): v for n, v in consts.items()})
        done = triton.compile(src, target=GPUTarget("cuda", 90, 32),
                              options={"num_warps": warps, "num_stages": stages})
        assert ".entry" in done.asm["ptx"]
        print(bm, name, split, done.metadata.shared)
"""


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="needs Triton")
def test_the_gram_fold_and_polynomial_kernels_compile_for_sm90_within_its_shared_memory(
    tmp_path: Path,
) -> None:
    env = {**os.environ, "TRITON_INTERPRET": "0", "TRITON_CACHE_DIR": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-c", COMPILE, str(KERNELS), json.dumps([CONFIGS, SPLITS])],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    if done.stdout.strip() == "no NVIDIA backend":
        pytest.skip("this Triton has no NVIDIA backend")
    rows = [line.split() for line in done.stdout.splitlines()]
    compiled = {(int(bm), name, int(split)): int(shared) for bm, name, split, shared in rows}
    expected = {
        (bm, name, split)
        for bm, *_ in CONFIGS
        for name, split in [("poly", 1), *((n, s) for s in SPLITS for n in ("gram", "fold"))]
        if (name, split) != ("fold", 1)
    }
    assert set(compiled) == expected
    too_big = {key: shared for key, shared in compiled.items() if shared > HOPPER_SHARED}
    assert not too_big, f"kernels over Hopper's {HOPPER_SHARED} bytes of shared memory: {too_big}"
