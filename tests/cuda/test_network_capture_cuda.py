"""NetworkCapture with real CUDA graphs (``CudaNetworkGrapher``): a captured training is the
eager one, bit for bit, with and without float16 autocast, a weight used twice, a short last
batch, and gradients accumulated over iterations."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from network_common import (
    TinyDetector,
    captured_copy,
    detector_inputs,
    detector_loss,
    module_state,
    same_tensors,
    train_detector,
)

from musgd import GradClipReplay, MuSGD, param_groups
from musgd._network_capture import CudaNetworkGrapher
from musgd._replay import CudaGraphRecorder, GraphPool

pytestmark = pytest.mark.cuda


@pytest.fixture
def deterministic_cudnn() -> Iterator[None]:
    """cuDNN's deterministic algorithms, so that two eager runs agree to begin with."""
    saved = torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False
    yield
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = saved


@pytest.mark.parametrize("share_head", [False, True], ids=["own-heads", "weight-used-twice"])
@pytest.mark.parametrize("amp", [False, True], ids=["float32", "autocast-float16"])
@pytest.mark.usefixtures("deterministic_cudnn")
def test_real_graphs_train_as_the_eager_network(amp: bool, share_head: bool) -> None:
    # A weight used twice under autocast is cast once and its float16 gradients summed in
    # float16, as eager autocast does with its cache on.
    torch.manual_seed(0)
    eager = TinyDetector(share_head=share_head).cuda().to(memory_format=torch.channels_last)  # type: ignore[call-overload]
    captured, capture = captured_copy(eager)
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
    captured, capture = captured_copy(eager)
    imgs = [img.cuda() for img in [*detector_inputs(3, batch=4), *detector_inputs(3, batch=2)]]
    assert train_detector(captured, imgs) == train_detector(eager, imgs)
    assert same_tensors(module_state(captured), module_state(eager))
    assert (capture.stats.recordings, capture.stats.replays) == (2, 4)


@pytest.mark.usefixtures("deterministic_cudnn")
def test_gradients_accumulated_over_iterations_keep_their_sum() -> None:
    # Without a step in between, .grad still holds the recording's memory when the next
    # backward replays over it; it must be copied out first.
    torch.manual_seed(0)
    eager = TinyDetector().cuda()
    captured, capture = captured_copy(eager)
    imgs = [img.cuda() for img in detector_inputs(8)]
    got = train_detector(captured, imgs, accumulate=3)
    assert got == train_detector(eager, imgs, accumulate=3)
    assert same_tensors(module_state(captured), module_state(eager))
    assert capture.stats.replays == 7


@pytest.mark.parametrize("amp", [False, True], ids=["float32", "autocast-float16"])
@pytest.mark.parametrize("layout", ["nchw", "channels-last"])
@pytest.mark.usefixtures("deterministic_cudnn")
def test_compiled_recordings_train_as_the_eager_compiled_network(amp: bool, layout: str) -> None:
    """``compile=True``: the recordings hold Inductor's kernels, and a training is the model's
    own compiled predict's (eager, uncaptured), bit for bit; within rounding of the eager
    network's."""
    import copy

    from musgd._network_capture import NetworkCapture, compiled_predict

    torch.manual_seed(0)
    eager = TinyDetector().cuda()
    fmt = torch.channels_last if layout == "channels-last" else torch.contiguous_format
    eager = eager.to(memory_format=fmt)  # type: ignore[call-overload]
    reference = copy.deepcopy(eager)
    reference.__dict__["predict"] = compiled_predict(reference)
    captured = copy.deepcopy(eager)
    capture = NetworkCapture(captured, compile=True).install()
    imgs = [img.cuda().contiguous(memory_format=fmt) for img in detector_inputs(6)]
    expected = train_detector(reference, imgs, amp=amp)
    assert train_detector(captured, imgs, amp=amp) == expected
    assert same_tensors(module_state(captured), module_state(reference))
    assert (capture.stats.recordings, capture.stats.replays, capture.stats.failures) == (1, 5, 0)
    assert expected == pytest.approx(train_detector(eager, imgs, amp=amp), rel=1e-2)


def _train_with_musgd(
    model: TinyDetector,
    imgs: list[torch.Tensor],
    *,
    replay: bool,
    pool: GraphPool | None,
    every: int,
) -> tuple[list[float], MuSGD, GradClipReplay]:
    """MuSGD steps every ``every`` iterations (the trainer's gradient accumulation), the clip
    before each, as the Ultralytics trainer orders them; with ``replay`` the clip and both
    capture flags record, and with a ``pool`` every recording of theirs goes into it."""
    groups = param_groups(model, weight_decay=5e-4, lr=0.02, momentum=0.9)
    opt = MuSGD(groups, lr=0.02, capture_orthogonalization=replay, capture_updates=replay)
    recorder = CudaGraphRecorder(branches=1, pool=pool)
    clip = GradClipReplay(1.0, recorder=recorder)
    if pool is not None:
        assert opt._engine.share_pool(pool)
        recorder.drops_with(clip.clear)
    losses = []
    for i, img in enumerate(imgs, start=1):
        loss = detector_loss(model(img))
        loss.backward()
        if i % every == 0:
            if replay:
                clip(list(model.parameters()))
            else:
                torch.nn.utils.clip_grad_norm_(list(model.parameters()), 1.0)
            opt.step()
            opt.zero_grad()
        losses.append(loss.item())
    return losses, opt, clip


@pytest.mark.parametrize("every", [1, 2], ids=["optimizer-first", "network-first"])
@pytest.mark.usefixtures("deterministic_cudnn")
def test_the_network_the_optimizer_and_the_clip_in_one_pool_train_as_eager(every: int) -> None:
    # The network's recording of a batch of 4 (its second iteration) shares the pool with the
    # optimizer's and the clip's recordings, replayed in turns: with a step at every iteration
    # the optimizer recorded first, and those recordings are dropped and made anew after the
    # network's. The short batches' recording, a second network's, gets a pool of its own. An
    # eager network with an eager optimizer gives the same bits.
    torch.manual_seed(0)
    eager = TinyDetector().cuda()
    pool = GraphPool()
    captured, capture = captured_copy(eager, CudaNetworkGrapher(pool=pool))
    batches = [*detector_inputs(4, batch=4), *detector_inputs(3, batch=2), *detector_inputs(5)]
    imgs = [img.cuda() for img in batches]
    got, opt, clip = _train_with_musgd(captured, imgs, replay=True, pool=pool, every=every)
    want, _, _ = _train_with_musgd(eager, imgs, replay=False, pool=None, every=every)
    assert got == want
    assert same_tensors(module_state(captured), module_state(eager))
    assert capture.stats.recordings == 2
    assert capture.stats.failures == 0
    assert pool.private == 1  # the short batches' recording
    stats = opt._replay.stats
    assert stats.recordings > 0
    assert stats.failures == 0
    assert clip.stats.replays > 0
    assert clip.stats.failures == 0
