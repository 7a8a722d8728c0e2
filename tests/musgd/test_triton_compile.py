"""The Triton Newton-Schulz kernels compile for a Hopper GPU (sm_90) on a machine without one.

Triton's interpreter (tests/musgd/test_triton_ns.py) checks what the kernels compute, not that
they compile: a kernel the GPU compiler refuses would pass there and fail on every CUDA
machine. Triton compiles ahead of time for a target it is given (``triton.compile`` with a
``GPUTarget``) with the ``ptxas`` its wheel ships, no GPU needed; this runs that compile in a
fresh process with an empty cache, for the Gram and polynomial kernels with and without the
K-split. Nothing here imports Triton: the interpreter tests need it imported first with the
interpreter on (tests/musgd/test_triton_ns.py), and this file is collected before theirs.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

KERNELS = Path(__file__).resolve().parents[2] / "src" / "musgd" / "_triton_kernels.py"

COMPILE = """
import importlib.util, sys
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
for split in (1, 2):
    a = "*bf16" if split == 1 else "*fp32"  # a split Gram product writes float32 partials
    consts = {"BM": 64, "BK": 64, "SPLIT": split, "UPCAST": False, "COLS": 10, "GDC": False}
    kinds = {"x": "*bf16", "a": a, "b_out": "*bf16", "problems": "*i64", "tiles": "*i32",
             "cb": "fp32", "cc": "fp32", "a_total": "i64", **{n: "constexpr" for n in consts}}
    for fn in (k.gram, k.poly):
        sig = {n: kinds[n] for n in fn.arg_names}
        src = ASTSource(fn=fn, signature=sig,
                        constexprs={(fn.arg_names.index(n),): v for n, v in consts.items()})
        ptx = triton.compile(src, target=GPUTarget("cuda", 90, 32)).asm["ptx"]
        assert ".entry" in ptx
        print(fn.__name__, split, "compiled")
"""


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="needs Triton")
def test_the_gram_and_polynomial_kernels_compile_for_sm90_split_and_unsplit(
    tmp_path: Path,
) -> None:
    env = {**os.environ, "TRITON_INTERPRET": "0", "TRITON_CACHE_DIR": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-c", COMPILE, str(KERNELS)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    if done.stdout.strip() == "no NVIDIA backend":
        pytest.skip("this Triton has no NVIDIA backend")
    assert done.stdout.split("\n")[:-1] == [
        f"{name} {split} compiled" for split in (1, 2) for name in ("gram", "poly")
    ]
