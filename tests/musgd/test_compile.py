"""``torch.compile(optimizer.step)`` on CPU: it compiles and computes what eager computes."""

from __future__ import annotations

import warnings

import pytest
import torch
from compile_common import compiled_and_eager

from musgd._newton_schulz import resolve_coefficients
from musgd._triton_ns import triton_importable

# torch.compile of a whole step compiles for seconds on a CPU (make test-fast skips it).
pytestmark = pytest.mark.slow

# Matrices of column counts 72 (16 and 12 rows: one zero-padded stack on CPU) and 16, vectors.
SHAPES = [(16, 8, 3, 3), (12, 8, 3, 3), (24, 16), (8,), (16,)]


def test_compiled_step_matches_eager_on_cpu() -> None:
    # float32 Newton-Schulz, whatever "auto" picks on this CPU (bf16 where it is native): the
    # bound below is float32's.
    eager, compiled, opt = compiled_and_eager(SHAPES, torch.device("cpu"), ns_dtype=torch.float32)
    # Inductor fuses the elementwise work and may round differently in the last bits.
    for a, b in zip(eager, compiled, strict=True):
        torch.testing.assert_close(b, a, atol=1e-5, rtol=1e-5)
    assert all(len(opt.state[p]) == 1 for group in opt.param_groups for p in group["params"])


def test_the_compiled_path_calls_no_cached_helper() -> None:
    # Dynamo warns on each call to a functools-cached function it traces through; the helpers a
    # compiled step calls use their plain body while a trace is active.
    @torch.compile(backend="eager")
    def traced(x: torch.Tensor) -> torch.Tensor:
        steps = len(resolve_coefficients((3.4445, -4.775, 2.0315), 5))
        return x + steps if triton_importable() else x - steps

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        torch._dynamo.reset()
        out = traced(torch.zeros(1))
    assert out.item() in (5.0, -5.0)
