"""NetworkCapture with real CUDA graphs (``torch.cuda.make_graphed_callables``): a captured
training is the eager one, bit for bit, with and without float16 autocast."""

from __future__ import annotations

import copy
from collections.abc import Iterator

import pytest
import torch
from network_common import (
    TinyDetector,
    detector_inputs,
    module_state,
    same_tensors,
    train_detector,
)

from musgd._network_capture import NetworkCapture

pytestmark = pytest.mark.cuda


@pytest.fixture
def deterministic_cudnn() -> Iterator[None]:
    """cuDNN's deterministic algorithms, so that two eager runs agree to begin with."""
    saved = torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False
    yield
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = saved


@pytest.mark.parametrize(
    ("amp", "share_head"),
    [(False, False), (False, True), (True, False)],
    ids=["float32", "float32-weight-used-twice", "autocast-float16"],
)
@pytest.mark.usefixtures("deterministic_cudnn")
def test_real_graphs_train_as_the_eager_network(amp: bool, share_head: bool) -> None:
    # Not autocast with a weight used twice: its float16 gradients are summed in float32 when
    # captured, in float16 when eager (the module docstring's limitation).
    torch.manual_seed(0)
    eager = TinyDetector(share_head=share_head).cuda().to(memory_format=torch.channels_last)
    captured = copy.deepcopy(eager)
    capture = NetworkCapture(captured).install()
    imgs = [img.cuda() for img in detector_inputs(6)]
    assert train_detector(captured, imgs, amp=amp) == train_detector(eager, imgs, amp=amp)
    # Parameters, gradients' effects and BatchNorm statistics (which the warm-up moved and the
    # capture put back) all match the eager run.
    assert same_tensors(module_state(captured), module_state(eager))
    assert (capture.stats.recordings, capture.stats.replays, capture.stats.failures) == (1, 5, 0)
    assert capture.stats.fallbacks == {"first-call": 1}


@pytest.mark.usefixtures("deterministic_cudnn")
def test_a_short_last_batch_gets_its_own_recording() -> None:
    torch.manual_seed(0)
    eager = TinyDetector().cuda()
    captured = copy.deepcopy(eager)
    capture = NetworkCapture(captured).install()
    imgs = [img.cuda() for img in [*detector_inputs(3, batch=4), *detector_inputs(3, batch=2)]]
    assert train_detector(captured, imgs) == train_detector(eager, imgs)
    assert same_tensors(module_state(captured), module_state(eager))
    assert (capture.stats.recordings, capture.stats.replays) == (2, 4)
