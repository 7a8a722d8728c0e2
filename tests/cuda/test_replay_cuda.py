"""Orthogonalization replay (``capture_orthogonalization``) with the real CUDA-graph recorder.

Every comparison is ``torch.equal``: replay runs the same kernels as eager, so results are
bit-identical, not merely close.
"""

from __future__ import annotations

import gc
import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
from replay_common import assert_same, check_stacked, count_calls, count_ns_bodies
from replay_helpers import assert_runs_identical, deterministic, train_detector
from torch import Tensor

from musgd import MuSGD
from musgd import _functional as functional
from musgd import _triton_ns as triton_ns
from musgd._functional import EagerOrthogonalizer, NSSettings
from musgd._newton_schulz import DEFAULT_COEFFICIENTS, resolve_coefficients
from musgd._replay import (
    GRAPHS,
    CudaGraphRecorder,
    GraphPool,
    ReplayOrthogonalizer,
    ReplayState,
)

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

DEVICE = torch.device("cuda")
NS = NSSettings(
    steps=5,
    coefficients=resolve_coefficients(DEFAULT_COEFFICIENTS, 5),
    eps=1e-7,
    dtype=torch.bfloat16,
)
# Conv kernels of a small detector plus linear weights, wide and tall, and a repeated shape.
SHAPES = [
    (16, 3, 3, 3),
    (32, 16, 3, 3),
    (32, 32, 3, 3),
    (32, 32, 3, 3),
    (64, 32, 1, 1),
    (32,),
    (32,),
    (48, 96),
    (96, 48),
    (8, 8),
]


def new_state(bound: int = 64) -> ReplayState:
    return ReplayState(CudaGraphRecorder(), orth_bound=lambda: bound, update_bound=lambda: bound)


def eager(kind: str, G: Tensor, ns: NSSettings = NS) -> Tensor:
    orth = EagerOrthogonalizer()
    return orth.single(G, ns) if kind == "single" else orth.batched(G, ns)


def make_params(seed: int = 0, shapes: list[tuple[int, ...]] = SHAPES) -> list[torch.nn.Parameter]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(s, generator=gen).to(DEVICE)) for s in shapes]


def set_grads(
    params: list[torch.nn.Parameter], step: int, skip: frozenset[int] = frozenset()
) -> None:
    gen = torch.Generator().manual_seed(1000 + step)
    for i, p in enumerate(params):
        g = torch.randn(p.shape, generator=gen).to(DEVICE)
        p.grad = None if i in skip else g


@pytest.fixture
def counted_bodies(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count executions of the eager Newton-Schulz body."""
    return count_ns_bodies(monkeypatch)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("ns_dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize(
    ("kind", "shape"), [("single", (48, 96)), ("single", (96, 48)), ("batched", (4, 32, 288))]
)
def test_replayed_ns_is_bit_identical_with_fresh_inputs_and_owned_results(
    kind: str, shape: tuple[int, ...], dtype: torch.dtype, ns_dtype: torch.dtype
) -> None:
    ns = NSSettings(NS.steps, NS.coefficients, NS.eps, ns_dtype)
    state = new_state()
    orth = ReplayOrthogonalizer(state)
    gen = torch.Generator().manual_seed(1)
    results, expected = [], []
    for _ in range(5):
        G = torch.randn(shape, generator=gen).to(DEVICE, dtype)
        before = G.clone()
        out = orth.single(G, ns) if kind == "single" else orth.batched(G, ns)
        results.append(out)
        expected.append(eager(kind, before, ns))
        assert torch.equal(G, before)
    torch.cuda.synchronize()
    for out, ref in zip(results, expected, strict=True):
        assert torch.equal(out, ref)
    assert (state.stats.recordings, state.stats.replays) == (1, 4)
    assert len({r.data_ptr() for r in results}) == len(results), "results must not alias"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(
    ("shapes", "layout", "direct"),
    [
        ([(32, 16, 3, 3)], torch.contiguous_format, True),
        ([(32, 16, 3, 3)] * 3, torch.contiguous_format, True),
        ([(48, 96)] * 2, torch.contiguous_format, True),
        ([(96, 48)] * 2, torch.contiguous_format, True),
        ([(32, 16, 3, 3)] * 2, torch.channels_last, False),
        ([(64, 32, 1, 1), (64, 32)], torch.contiguous_format, False),
    ],
    ids=["one", "three-kernels", "two-wide", "two-tall", "channels-last", "mixed-shapes"],
)
def test_stacked_replays_bucket_stacks_with_the_eager_bits(
    shapes: list[tuple[int, ...]],
    layout: torch.memory_format,
    direct: bool,
    dtype: torch.dtype,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A bucket stacked straight into the recording and scaled on the way out is exact."""
    stacks = count_calls(monkeypatch, functional, "stack_bucket")
    state = new_state()
    check_stacked(ReplayOrthogonalizer(state), shapes, DEVICE, NS, dtype=dtype, layout=layout)
    assert stacks[0] == (1 if direct else 4)
    assert (state.stats.recordings, state.stats.replays) == (1, 3)


def test_optimizer_steps_match_eager_with_skipped_grads_and_bucket_order() -> None:
    for foreach in (True, False):
        ref_p, rep_p = make_params(), make_params()
        ref = MuSGD(ref_p, lr=0.02, weight_decay=0.01, foreach=foreach)
        rep = MuSGD(
            rep_p, lr=0.02, weight_decay=0.01, foreach=foreach, capture_orthogonalization=True
        )
        skips = [frozenset(), frozenset({1}), frozenset({0, 2}), frozenset(), frozenset({3, 8})]
        for step in range(12):
            skip = skips[step % len(skips)]
            set_grads(ref_p, step, skip)
            set_grads(rep_p, step, skip)
            ref.step()
            rep.step()
            assert_same(ref_p, rep_p, ref, rep)
        stats = rep._replay.stats
        assert stats.recordings > 0
        assert stats.replays > stats.recordings
        assert stats.failures == 0
        assert len(rep._replay.orth_cache) <= rep._count_matrices()


@pytest.mark.parametrize("backend", ["torch", "auto"])
def test_count_regression_zero_eager_bodies_during_replayed_steps(
    backend: str, counted_bodies: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    # "auto" runs the Triton table where Triton imports: count its launches too.
    tables = count_calls(monkeypatch, triton_ns, "run_plan")
    ref_p, rep_p = make_params(), make_params()
    ref = MuSGD(ref_p, lr=0.02, ns_backend=backend)
    rep = MuSGD(rep_p, lr=0.02, ns_backend=backend, capture_orthogonalization=True)
    set_grads(rep_p, 0)
    rep.step()
    assert rep._replay.stats.recordings > 0
    assert counted_bodies[0] + tables[0] > 0
    counted_bodies[0] = tables[0] = 0
    for step in range(1, 6):
        set_grads(rep_p, step)
        rep.step()
    assert counted_bodies[0] == 0, "replayed steps ran the eager Newton-Schulz body"
    assert tables[0] == 0, "replayed steps ran the Triton table eagerly"
    for step in range(6):
        set_grads(ref_p, step)
        ref.step()
    assert_same(ref_p, rep_p, ref, rep)


def test_bounded_signatures_fall_back_to_eager_and_stay_exact() -> None:
    state = new_state(bound=2)
    orth = ReplayOrthogonalizer(state)
    shapes = [(1, 16, 24), (1, 24, 16), (2, 20, 20), (3, 8, 40)]
    for _ in range(3):
        for shape in shapes:
            G = torch.randn(shape, device=DEVICE)
            assert torch.equal(orth.batched(G, NS), eager("batched", G))
    assert len(state.orth_cache) == 2
    assert state.stats.fallbacks["bound"] == 2 * 3


def test_precision_change_mid_run_records_a_new_key() -> None:
    ns32 = NSSettings(NS.steps, NS.coefficients, NS.eps, torch.float32)
    state = new_state()
    orth = ReplayOrthogonalizer(state)
    saved = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("highest")
        G = torch.randn(2, 64, 128, device=DEVICE)
        assert torch.equal(orth.batched(G, ns32), eager("batched", G, ns32))
        assert torch.equal(orth.batched(G, ns32), eager("batched", G, ns32))
        torch.set_float32_matmul_precision("high")  # TF32: different kernels, different bits
        G2 = torch.randn(2, 64, 128, device=DEVICE)
        assert torch.equal(orth.batched(G2, ns32), eager("batched", G2, ns32))
        assert torch.equal(orth.batched(G2, ns32), eager("batched", G2, ns32))
    finally:
        torch.set_float32_matmul_precision(saved)
    assert state.stats.recordings == 2
    assert state.stats.replays == 2


def test_resume_mid_run_matches_an_uninterrupted_run() -> None:
    ref_p, first_p = make_params(), make_params()
    ref = MuSGD(ref_p, lr=0.02, capture_orthogonalization=True)
    first = MuSGD(first_p, lr=0.02, capture_orthogonalization=True)
    for step in range(4):
        for ps, opt in ((ref_p, ref), (first_p, first)):
            set_grads(ps, step)
            opt.step()
    saved = first.state_dict()
    resumed_p = [torch.nn.Parameter(p.detach().clone()) for p in first_p]
    resumed = MuSGD(resumed_p, lr=0.02, capture_orthogonalization=True)
    resumed.load_state_dict(saved)
    for step in range(4, 8):
        for ps, opt in ((ref_p, ref), (resumed_p, resumed)):
            set_grads(ps, step)
            opt.step()
    assert_same(ref_p, resumed_p, ref, resumed)


def test_load_state_dict_drops_recordings() -> None:
    params = make_params()
    opt = MuSGD(params, lr=0.02, capture_orthogonalization=True)
    set_grads(params, 0)
    opt.step()
    assert len(opt._replay.orth_cache) > 0
    opt.load_state_dict(opt.state_dict())
    assert len(opt._replay.orth_cache) == 0


def _fallback_inputs() -> list[tuple[str, Callable[[], Tensor]]]:
    return [
        ("device:cpu", lambda: torch.randn(2, 16, 24)),
        ("requires-grad", lambda: torch.randn(2, 16, 24, device=DEVICE, requires_grad=True)),
        ("non-contiguous", lambda: torch.randn(2, 24, 16, device=DEVICE).mT),
        ("storage-offset", lambda: torch.randn(3, 16, 24, device=DEVICE)[1:]),
    ]


@pytest.mark.parametrize(("reason", "make"), _fallback_inputs())
def test_input_fallbacks(reason: str, make: Callable[[], Tensor]) -> None:
    state = new_state()
    orth = ReplayOrthogonalizer(state)
    G = make()
    with torch.no_grad():
        assert torch.equal(orth.batched(G, NS), eager("batched", G))
    assert state.stats.fallbacks[reason] == 1
    assert len(state.orth_cache) == 0


def test_autocast_falls_back_inside_the_optimizer() -> None:
    ref_p, rep_p = make_params(), make_params()
    ref = MuSGD(ref_p, lr=0.02)
    rep = MuSGD(rep_p, lr=0.02, capture_orthogonalization=True)
    for step in range(2):
        for ps, opt in ((ref_p, ref), (rep_p, rep)):
            set_grads(ps, step)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                opt.step()
    assert_same(ref_p, rep_p, ref, rep)
    assert rep._replay.stats.fallbacks["autocast"] > 0
    assert len(rep._replay.orth_cache) == 0


def test_enclosing_capture_runs_the_eager_ops_inside_it() -> None:
    state = new_state()
    orth = ReplayOrthogonalizer(state)
    static = torch.randn(2, 16, 24, device=DEVICE)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        eager("batched", static)  # warm-up on the capture stream, as any capture needs
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=side):
        out = orth.batched(static, NS)
    assert state.stats.fallbacks["capture"] == 1
    assert len(state.orth_cache) == 0
    static.copy_(torch.randn(2, 16, 24, device=DEVICE))
    graph.replay()
    assert torch.equal(out, eager("batched", static))


def test_compile_trace_falls_back(monkeypatch: pytest.MonkeyPatch) -> None:
    state = new_state()
    orth = ReplayOrthogonalizer(state)
    G = torch.randn(2, 16, 24, device=DEVICE)
    expected = eager("batched", G)
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    assert torch.equal(orth.batched(G, NS), expected)
    assert state.stats.fallbacks["compile"] == 1


@pytest.mark.parametrize("where", ["warmup", "capture"])
def test_injected_recording_failure_publishes_nothing_and_warns_once(
    where: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = EagerOrthogonalizer.batched

    def failing(self: EagerOrthogonalizer, G: Tensor, ns: NSSettings) -> Tensor:
        out = real(self, G, ns)
        capturing = torch.cuda.is_current_stream_capturing()
        on_side_stream = torch.cuda.current_stream() != torch.cuda.default_stream()
        if (where == "capture" and capturing) or (
            where == "warmup" and on_side_stream and not capturing
        ):
            raise RuntimeError(f"injected failure in the {where} pass")
        return out

    monkeypatch.setattr(EagerOrthogonalizer, "batched", failing)
    ref_p, rep_p = make_params(), make_params()
    # The torch backend's batched calls are what fails here (the Triton table has its own test).
    ref = MuSGD(ref_p, lr=0.02, ns_backend="torch")
    rep = MuSGD(rep_p, lr=0.02, ns_backend="torch", capture_orthogonalization=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for step in range(3):
            for ps, opt in ((ref_p, ref), (rep_p, rep)):
                set_grads(ps, step)
                opt.step()
    assert torch.cuda.current_stream() == torch.cuda.default_stream(), "stream not restored"
    assert_same(ref_p, rep_p, ref, rep)
    messages = [str(w.message) for w in caught if "could not record" in str(w.message)]
    assert len(messages) == 1
    assert f"injected failure in the {where} pass" in messages[0]
    assert len(rep._replay.orth_cache) == 0
    assert rep._replay.stats.failures == len(rep._replay.orth_cache._refused)


def test_memory_with_the_flag_off_and_on() -> None:
    """Peak allocated and reserved memory of the same steps off and on (reported, bounded)."""
    peaks = {}
    for flag in (False, True):
        gc.collect()  # earlier tests' optimizers (and their graph pools) sit in reference cycles
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        params = make_params()
        opt = MuSGD(params, lr=0.02, capture_orthogonalization=flag)
        for step in range(5):
            set_grads(params, step)
            opt.step()
        torch.cuda.synchronize()
        peaks[flag] = (torch.cuda.max_memory_allocated(), torch.cuda.max_memory_reserved())
        del opt, params
    mib = 2**20
    print(
        "peak allocated/reserved MiB, off: "
        f"{peaks[False][0] / mib:.1f}/{peaks[False][1] / mib:.1f}, "
        f"on: {peaks[True][0] / mib:.1f}/{peaks[True][1] / mib:.1f}"
    )
    assert peaks[True][0] - peaks[False][0] < 256 * mib


@pytest.mark.slow
def test_200_step_nano_detector_run_is_byte_identical() -> None:
    eager_run, replay_run = deterministic(
        lambda: (
            train_detector(steps=200, image_size=128, batch=4),
            train_detector(steps=200, image_size=128, batch=4, capture_orthogonalization=True),
        )
    )
    assert replay_run.stats.replays > 0
    assert replay_run.stats.failures == 0
    assert_runs_identical(eager_run, replay_run)


def test_real_capture_error_is_a_failed_recording_and_later_steps_work(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A host sync inside the capture is refused by CUDA itself; the step still completes.

    Last in the file: on some PyTorch versions an invalidated capture leaves allocator
    bookkeeping behind (harmless for results, but it should not precede memory measurements).
    """
    real = EagerOrthogonalizer.batched

    def syncing(self: EagerOrthogonalizer, G: Tensor, ns: NSSettings) -> Tensor:
        out = real(self, G, ns)
        if torch.cuda.is_current_stream_capturing():
            out.sum().item()  # not allowed while capturing
        return out

    monkeypatch.setattr(EagerOrthogonalizer, "batched", syncing)
    ref_p, rep_p = make_params(), make_params()
    # The torch backend's batched calls are what fails here (the Triton table has its own test).
    ref = MuSGD(ref_p, lr=0.02, ns_backend="torch")
    rep = MuSGD(rep_p, lr=0.02, ns_backend="torch", capture_orthogonalization=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for step in range(3):
            for ps, opt in ((ref_p, ref), (rep_p, rep)):
                set_grads(ps, step)
                opt.step()
    torch.cuda.synchronize()
    assert torch.cuda.current_stream() == torch.cuda.default_stream(), "stream not restored"
    assert_same(ref_p, rep_p, ref, rep)
    assert rep._replay.stats.failures > 0
    assert len(rep._replay.orth_cache) == 0


def test_a_collection_inside_a_capture_cannot_free_graphs_there() -> None:
    """Unreachable recordings (a graph in a reference cycle, as a dropped optimizer leaves them)
    survive a capture that allocates enough objects to trigger the cyclic collector: freeing
    them there invalidated the capture (the full CUDA suite at bc3da34 and 4b62f17)."""
    recorder = CudaGraphRecorder()
    x = torch.arange(8.0, device=DEVICE)
    gc.collect()
    enabled = gc.isenabled()
    gc.disable()  # the garbage must still be uncollected when the capture starts
    try:
        for k in range(4):
            old = recorder.record(lambda k=k: [x * k], DEVICE)  # type: ignore[misc]
            cycle: list[object] = [old]
            cycle.append(cycle)
        del old, cycle
        gc.enable()

        def fn() -> list[Tensor]:
            if torch.cuda.is_current_stream_capturing():
                # Far past the collector's first threshold (700 new container objects).
                junk = [[i] for i in range(20_000)]
                del junk
            return [x + 1]

        recording = recorder.record(fn, DEVICE)
        recording.replay()
        torch.cuda.synchronize()
        assert torch.equal(recording.outputs[0], x + 1)
    finally:
        if enabled:
            gc.enable()
        else:
            gc.disable()


def test_a_users_capture_survives_the_collection_of_a_dropped_optimizer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A user's own whole-step capture (``torch.cuda.graph``, its default global mode) during
    which the cyclic collector frees an optimizer with recordings: destroying their graphs
    there invalidated the capture (the full CUDA suite on the H100 at 6268a20). The keeper
    defers their destruction to its next call outside the capture."""
    from musgd import _replay

    keeper = _replay.GraphKeeper()
    monkeypatch.setattr(_replay, "GRAPHS", keeper)  # the dropped optimizer's are its only graphs
    params = make_params()
    opt = MuSGD(params, lr=0.02, ns_backend="torch", capture_orthogonalization=True)
    for step in range(3):
        set_grads(params, step)
        opt.step()
    assert opt._replay.stats.replays > 0
    cycle: list[object] = [opt]
    cycle.append(cycle)  # freed only by the cyclic collector
    del opt, cycle
    x = torch.arange(8.0, device=DEVICE)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = x * 2
        gc.collect()  # the dropped optimizer goes here, inside the capture
        y += 1
    assert keeper.deferred > 0  # its graphs wait for the capture's end
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(y, x * 2 + 1)
    keeper.flush()
    assert keeper.deferred == 0


def test_recordings_in_one_pool_reuse_its_scratch_and_keep_their_bits() -> None:
    # Each function's two 16 MiB intermediates are scratch, freed by the capture's end: in
    # pools of their own the second recording reserves them again, in one pool it reuses them.
    x = torch.randn(2048, 2048, device=DEVICE)

    def chain(scale: float) -> Callable[[], list[Tensor]]:
        def run() -> list[Tensor]:
            y = x @ x
            return [((y * scale) @ y).sum(dim=0)]

        return run

    def grown_by(recorder: CudaGraphRecorder, fn: Callable[[], list[Tensor]]) -> tuple[int, Any]:
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        before = torch.cuda.memory_reserved(DEVICE)
        recording = recorder.record(fn, DEVICE)
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        return torch.cuda.memory_reserved(DEVICE) - before, recording

    mib = 2**20
    own = CudaGraphRecorder(branches=1)
    _, first_own = grown_by(own, chain(1.0))
    second_own_growth, second_own = grown_by(own, chain(0.5))
    shared = CudaGraphRecorder(branches=1, pool=GraphPool())
    _, first = grown_by(shared, chain(1.0))
    second_growth, second = grown_by(shared, chain(0.5))
    assert second_own_growth >= 32 * mib
    assert second_growth <= 4 * mib
    # Replayed in any order, each gives its eager bits, read before the other replays (a
    # later capture's output may sit in the earlier one's scratch).
    want = {id(first): chain(1.0)()[0], id(second): chain(0.5)()[0]}
    for order in ((first, second), (second, first), (first, first, second, second)):
        for recording in order:
            recording.replay()
            assert torch.equal(recording.outputs[0], want[id(recording)])
    for recording, expected in ((first_own, first), (second_own, second)):
        recording.replay()
        assert torch.equal(recording.outputs[0], want[id(expected)])


def test_dropping_a_recording_leaves_the_others_their_cublas_workspace() -> None:
    """Every recording warms up and captures on one side stream (``musgd._replay.STREAMS``),
    so its GEMMs bake in that stream's cuBLAS workspace. PyTorch's tracker reports that
    destroying a graph frees the workspace of the stream it was captured on, under the graphs
    still alive (docs/PROVENANCE.md R386); a dropped or failed recording would then leave the
    others reading freed memory. Dropping one recording must free its outputs and nothing else,
    and the other must still replay the eager bits with the freed memory reused."""
    gen = torch.Generator(device=DEVICE).manual_seed(0)
    a, b = (
        torch.randn(1024, 1024, generator=gen, device=DEVICE).to(torch.bfloat16) for _ in range(2)
    )
    recorder = CudaGraphRecorder(branches=1)
    kept = recorder.record(lambda: (a @ b,), DEVICE)
    dropped = recorder.record(lambda: (b @ a,), DEVICE)
    kept.replay()
    dropped.replay()
    expected = (a @ b).clone()
    output_bytes = dropped.outputs[0].untyped_storage().nbytes()
    torch.cuda.synchronize()
    gc.collect()
    before = torch.cuda.memory_allocated(DEVICE)
    del dropped
    gc.collect()
    torch.cuda.synchronize()
    freed = before - torch.cuda.memory_allocated(DEVICE)
    assert freed == output_bytes, (
        f"dropping one recording freed {freed} bytes, its outputs are {output_bytes}: the "
        "rest is memory the live recordings may use (the side stream's cuBLAS workspace)"
    )
    filler = torch.full((32 << 20,), 3.0, device=DEVICE)  # takes whatever was freed
    kept.replay()
    torch.cuda.synchronize()
    assert torch.equal(kept.outputs[0], expected)
    assert bool((filler == 3.0).all())


def test_a_failed_capture_leaves_the_live_recordings_their_workspace() -> None:
    """A capture that fails gives up its graph while another recording of the side stream
    lives: :data:`musgd._replay.GRAPHS` keeps that graph, idle, so the workspace the live one's
    GEMM writes to stays its own through the cache's give-back and a new allocation."""
    gen = torch.Generator(device=DEVICE).manual_seed(1)
    a, b = (
        torch.randn(1024, 1024, generator=gen, device=DEVICE).to(torch.bfloat16) for _ in range(2)
    )
    recorder = CudaGraphRecorder(branches=1)
    kept = recorder.record(lambda: (a @ b,), DEVICE)
    expected = (a @ b).clone()
    idle = GRAPHS.idle
    passes: list[int] = []

    def fails_in_capture() -> tuple[Tensor, ...]:
        out = b @ a
        passes.append(1)
        if len(passes) > 1:  # the warm-up passes, the capture fails
            raise RuntimeError("injected capture failure")
        return (out,)

    with pytest.raises(RuntimeError, match="injected capture failure"):
        recorder.record(fails_in_capture, DEVICE)
    gc.collect()
    assert GRAPHS.idle == idle + 1
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    filler = torch.full((32 << 20,), 3.0, device=DEVICE)
    kept.replay()
    torch.cuda.synchronize()
    assert torch.equal(kept.outputs[0], expected)
    assert bool((filler == 3.0).all())
