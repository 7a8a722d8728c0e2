"""``torch.compile(optimizer.step)`` on CUDA, YOLO26n shapes, default flags and capture flags."""

from __future__ import annotations

import pytest
import torch
from compile_common import compiled_and_eager
from replay_common import CaptureFlags

from musgd.bench._models import yolo26_parameters

pytestmark = pytest.mark.cuda

DEVICE = torch.device("cuda")


@pytest.mark.parametrize(
    "flags",
    [{}, {"capture_orthogonalization": True, "capture_updates": True}],
    ids=["eager", "capture-flags"],
)
def test_compiled_step_matches_eager_on_yolo26n_shapes(flags: CaptureFlags) -> None:
    # The first 32 conv kernels and 32 norm weights: foreach work and Newton-Schulz norms over
    # many shapes, as in the whole set (whose compile takes minutes), in a fraction of the time.
    specs = yolo26_parameters("yolo26n")
    shapes = [s.shape for s in specs if s.name.startswith("matrices.")][:32]
    shapes += [s.shape for s in specs if s.name.startswith("norm_weights.")][:32]
    eager, compiled, opt = compiled_and_eager(shapes, DEVICE, **flags)
    # bf16 Newton-Schulz (the "auto" dtype on this GPU): Inductor's own matmul and fusion
    # choices round differently, within the bf16 tolerance of the eager core tests.
    for a, b in zip(eager, compiled, strict=True):
        torch.testing.assert_close(b, a, atol=0.02, rtol=0.04)
    # Under a compile trace the capture flags run the eager body: no recording is made.
    assert opt._replay.stats.recordings == 0
