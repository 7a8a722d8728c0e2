"""Update-preparation replay (``capture_updates``) with the real CUDA-graph recorder.

Every comparison is ``torch.equal`` against an eager twin fed the same gradients. The contracts
both recorders keep are tests/musgd/update_replay_contracts.py, imported here and run on CUDA.
"""

from __future__ import annotations

import gc
import threading
import warnings
from typing import Any

import pytest
import torch
from replay_common import (
    CaptureFlags,
    assert_same,
    count_ns_bodies,
    record_first_group,
    set_grads,
    split_groups,
    step_both,
    step_with_changes,
)
from replay_helpers import (
    BOTH_FLAGS,
    DEVICE,
    REPLAY_FLAG_IDS,
    REPLAY_FLAGS,
    UPDATE_FLAGS,
    assert_runs_identical,
    deterministic,
    train_detector,
)
from torch import Tensor

# The shared contracts, collected here with this file's `replay_backend` fixture.
from update_replay_contracts import (
    ReplayBackend,
    test_hyperparameter_schedules_are_honoured_without_rerecording,  # noqa: F401
    test_hyperparameters_held_in_device_tensors_replay_their_current_values,  # noqa: F401
    test_recordings_dropped_and_made_anew_match_eager,  # noqa: F401
    test_replayed_steps_match_eager_with_one_replay_per_group,  # noqa: F401
    test_resume_mid_run_matches_an_uninterrupted_run,  # noqa: F401
)

from musgd import MuSGD, orthogonalize_batched
from musgd._functional import (
    EagerOrthogonalizer,
    Hyper,
    build_layout,
    pad_bound,
    prepare_updates_foreach,
)
from musgd._optimizer import group_structure
from musgd._replay import STREAMS, CudaGraphRecorder

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

MATRICES = [(16, 3, 3, 3), (32, 16, 3, 3), (32, 32, 3, 3), (32, 32, 3, 3), (48, 96), (96, 48)]
VECTORS = [(16,), (32,), (32,), (48,)]


def make_params(seed: int = 0, dtype: torch.dtype = torch.float32) -> list[torch.nn.Parameter]:
    gen = torch.Generator().manual_seed(seed)
    return [
        torch.nn.Parameter(torch.randn(s, generator=gen).to(DEVICE, dtype))
        for s in MATRICES + VECTORS
    ]


def groups(params: list[torch.nn.Parameter], **extra: Any) -> list[dict[str, Any]]:
    return split_groups(params, len(MATRICES), **extra)


def twins(
    *,
    flags: CaptureFlags | None = None,
    dtype: torch.dtype = torch.float32,
    recorder: CudaGraphRecorder | None = None,
    **options: Any,
) -> tuple[list[torch.nn.Parameter], MuSGD, list[torch.nn.Parameter], MuSGD]:
    flags = {"capture_updates": True} if flags is None else flags
    ref_p, rep_p = make_params(dtype=dtype), make_params(dtype=dtype)
    return (
        ref_p,
        MuSGD(groups(ref_p), lr=0.02, **options),
        rep_p,
        MuSGD(groups(rep_p), lr=0.02, **options, **flags, recorder=recorder),
    )


@pytest.fixture(params=[True, False], ids=["together", "one-by-one"])
def replay_backend(request: pytest.FixtureRequest) -> ReplayBackend:
    """The shared contracts (tests/musgd/update_replay_contracts.py) with real CUDA graphs,
    a step's groups recorded together and one by one."""
    return ReplayBackend(
        "cuda",
        DEVICE,
        tuple(MATRICES),
        tuple(VECTORS),
        CudaGraphRecorder,
        together=request.param,
    )


@pytest.mark.parametrize(
    ("branches", "cost_limit"), [(1, 2**31), (2, 2**31), (4, 2**31), (8, 2**31), (4, 200_000)]
)
def test_parallel_branches_change_no_bit(branches: int, cost_limit: int) -> None:
    """Bucket jobs recorded on 1..8 parallel streams replay the eager bits exactly.

    With the limit at 200,000 the two cheapest of the five buckets take lanes and the three
    costlier ones run inline on the capturing stream, overlapping them.
    """
    recorder = CudaGraphRecorder(branches=branches, branch_cost_limit=cost_limit)
    ref_p, ref, rep_p, rep = twins(flags={"capture_updates": True}, recorder=recorder)
    for step in range(6):
        step_both(ref_p, ref, rep_p, rep, step)
        assert_same(ref_p, rep_p, ref, rep)
    assert rep._replay.stats.recordings == 1, "the step's two groups in one recording"
    assert rep._replay.stats.failures == 0


def test_branched_bucket_jobs_run_eagerly_match_in_order_jobs() -> None:
    """Outside a capture, too, the branched schedule computes what the in-order one does."""
    params = make_params()
    grads = [torch.randn_like(p) for p in params]
    structure = group_structure(MuSGD(groups(params), lr=0.1).param_groups[0], DEVICE)
    layout = build_layout(params, None)
    hyper = Hyper(momentum=0.9, weight_decay=0.01, w_muon=0.5, w_sgd=0.5)
    recorder = CudaGraphRecorder(branches=4)
    results = []
    for orth in (EagerOrthogonalizer(), recorder.concurrent(EagerOrthogonalizer(), DEVICE)):
        bufs = [torch.ones_like(p) for p in params]
        results.append(
            prepare_updates_foreach(params, grads, bufs, layout, hyper, structure, orth) + bufs
        )
    torch.cuda.synchronize()
    assert all(torch.equal(a, b) for a, b in zip(*results, strict=True))


def test_structural_changes_record_new_keys() -> None:
    ref_p, ref, rep_p, rep = twins()
    rep._update_replay.together = False  # each group's own keys (together: each step's)
    changes: list[dict[str, Any]] = [
        {},
        {"weight_decay": 0.0},
        {"w_muon": 0.0},
        {"nesterov": False},
    ]
    step_with_changes(ref_p, ref, rep_p, rep, changes)
    assert rep._replay.stats.recordings == 4 + 1


def test_skipped_gradients_and_changing_bucket_order() -> None:
    ref_p, ref, rep_p, rep = twins(flags=BOTH_FLAGS)
    skips = [frozenset(), frozenset({0, 7}), frozenset({2}), frozenset(), frozenset({0, 7})]
    for step in range(10):
        step_both(ref_p, ref, rep_p, rep, step, skip=skips[step % len(skips)])
        assert_same(ref_p, rep_p, ref, rep)
    assert rep._replay.stats.failures == 0


def test_load_state_dict_drops_recordings_and_keeps_types_and_bits() -> None:
    ref_p, ref, rep_p, rep = twins()
    for step in range(3):
        step_both(ref_p, ref, rep_p, rep, step)
    saved = rep.state_dict()
    kinds = [{k: type(v) for k, v in g.items()} for g in saved["param_groups"]]
    bufs = {i: s["momentum_buffer"].clone() for i, s in saved["state"].items()}
    assert len(rep._replay.step_cache) == 1
    rep.load_state_dict(saved)
    assert len(rep._replay.update_cache) == len(rep._replay.step_cache) == 0
    again = rep.state_dict()
    assert [{k: type(v) for k, v in g.items()} for g in again["param_groups"]] == kinds
    for i, s in again["state"].items():
        assert torch.equal(s["momentum_buffer"], bufs[i])
    for step in range(3, 5):
        step_both(ref_p, ref, rep_p, rep, step)
        assert_same(ref_p, rep_p, ref, rep)


def test_non_float32_and_cpu_groups_fall_back() -> None:
    ref_p, ref, rep_p, rep = twins(dtype=torch.bfloat16)
    for step in range(2):
        step_both(ref_p, ref, rep_p, rep, step)
    assert_same(ref_p, rep_p, ref, rep)
    assert rep._replay.stats.fallbacks["not-float32"] == 4
    cpu = [torch.nn.Parameter(torch.randn(8, 8))]
    opt = MuSGD(cpu, lr=0.1, capture_updates=True)
    cpu[0].grad = torch.randn(8, 8)
    opt.step()
    assert opt._replay.stats.fallbacks["device:cpu"] == 1


def test_autocast_requires_grad_and_channels_last_fall_back() -> None:
    ref_p, ref, rep_p, rep = twins()
    for ps, opt in ((ref_p, ref), (rep_p, rep)):
        set_grads(ps, 0)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            opt.step()
        set_grads(ps, 1)
        for p in ps:
            assert p.grad is not None
            p.grad.requires_grad_(True)
        opt.step()
    assert_same(ref_p, rep_p, ref, rep)
    fallbacks = rep._replay.stats.fallbacks
    assert fallbacks["autocast"] == 2
    assert fallbacks["requires-grad"] == 2
    # Channels-last parameters replay (see the test below); a transposed matrix falls back.
    nc_ref, nc_rep = make_params(), make_params()
    for ps in (nc_ref, nc_rep):
        ps[5] = torch.nn.Parameter(ps[5].detach().mT.contiguous().mT)
    ref, rep = MuSGD(groups(nc_ref), lr=0.02), MuSGD(groups(nc_rep), lr=0.02, capture_updates=True)
    for step in range(2):
        step_both(nc_ref, ref, nc_rep, rep, step)
    assert_same(nc_ref, nc_rep, ref, rep)
    assert rep._replay.stats.fallbacks["non-contiguous"] == 2


def test_compile_trace_falls_back(monkeypatch: pytest.MonkeyPatch) -> None:
    ref_p, ref, rep_p, rep = twins()
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    step_both(ref_p, ref, rep_p, rep, 0)
    assert_same(ref_p, rep_p, ref, rep)
    assert rep._replay.stats.fallbacks["compile"] == 2
    assert rep._replay.stats.recordings == 0


def test_enclosing_capture_of_the_whole_step_runs_eagerly_inside_it() -> None:
    ref_p, ref, rep_p, rep = twins()
    step_both(ref_p, ref, rep_p, rep, 0)  # state exists before the user's capture
    set_grads(rep_p, 1)
    static_grads = [p.grad for p in rep_p]
    capture_stream = torch.cuda.Stream()
    capture_stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(capture_stream):
        # Warm up cuBLAS on the capture stream (its workspace is per stream) without touching
        # the optimizer's state.
        orthogonalize_batched(torch.randn(2, 32, 144, device=DEVICE))
    torch.cuda.current_stream().wait_stream(capture_stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=capture_stream):
        rep.step()
    assert rep._replay.stats.fallbacks["capture"] == 2
    for step in range(1, 4):
        set_grads(ref_p, step)
        ref.step()
        set_grads(rep_p, step)
        for static, p in zip(static_grads, rep_p, strict=True):
            assert static is not None
            assert p.grad is not None
            static.copy_(p.grad)
            p.grad = static
        graph.replay()
    assert_same(ref_p, rep_p, ref, rep)


def _failing_prepare(opt: MuSGD, where: str) -> None:
    real = opt._engine.body

    def failing(*args: Any) -> list[Tensor]:
        out = real(*args)  # momentum moves first, as a half-finished pass would move it
        capturing = torch.cuda.is_current_stream_capturing()
        warmup = torch.cuda.current_stream() != torch.cuda.default_stream() and not capturing
        if (where == "capture" and capturing) or (where == "warmup" and warmup):
            raise RuntimeError(f"injected failure in the {where} pass")
        return out

    opt._engine.body = failing


@pytest.mark.parametrize("where", ["warmup", "capture"])
def test_failure_in_either_pass_restores_every_tensor(where: str) -> None:
    params = make_params()
    opt = MuSGD(groups(params), lr=0.02, capture_updates=True)
    set_grads(params, 0)
    opt.step()  # non-zero momentum from here on
    opt._replay.clear()
    _failing_prepare(opt, where)
    set_grads(params, 1)
    group = opt.param_groups[0]
    ps, grads = opt._gather(0, group)
    before = [t.clone() for t in (*ps, *grads, *opt._buffers(ps))]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result, after = record_first_group(opt, ("test-key",))
    torch.cuda.synchronize()
    assert torch.cuda.current_stream() == torch.cuda.default_stream(), "stream not restored"
    assert result is None
    for b, a in zip(before, after, strict=True):
        assert torch.equal(b, a)
    ours = [str(w.message) for w in caught if "could not record" in str(w.message)]
    assert len(ours) == 1
    assert f"injected failure in the {where} pass" in ours[0]


@pytest.mark.parametrize("where", ["warmup", "capture"])
def test_failed_recording_continues_eagerly_and_exactly(where: str) -> None:
    ref_p, ref, rep_p, rep = twins()
    _failing_prepare(rep, where)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for step in range(4):
            step_both(ref_p, ref, rep_p, rep, step)
            assert_same(ref_p, rep_p, ref, rep)
    assert len([w for w in caught if "could not record" in str(w.message)]) == 1
    # The step's key failed, then each group's on its own, each once and never again.
    assert rep._replay.stats.failures == 3
    assert len(rep._replay.update_cache) == len(rep._replay.step_cache) == 0


def test_grad_scaler_inf_skip_leaves_parameters_and_momentum_untouched() -> None:
    ref_p, ref, rep_p, rep = twins(flags=BOTH_FLAGS)
    scalers = [torch.amp.GradScaler("cuda", init_scale=2.0**8) for _ in range(2)]
    gen = torch.Generator().manual_seed(5)
    weights = [torch.randn(p.shape, generator=gen).to(DEVICE) for p in ref_p]
    for step in range(5):
        poisoned = step == 2
        for ps, opt, scaler in ((ref_p, ref, scalers[0]), (rep_p, rep, scalers[1])):
            opt.zero_grad(set_to_none=True)
            ws = [w * (step + 1) for w in weights]
            if poisoned:
                ws[3] = torch.full_like(ws[3], float("inf"))
            loss = sum((p * w).sum() for p, w in zip(ps, ws, strict=True))
            before = [p.detach().clone() for p in ps] + [
                opt.state[p]["momentum_buffer"].clone() for p in ps if p in opt.state
            ]
            scaler.scale(loss).backward()  # type: ignore[arg-type]
            scaler.step(opt)
            scaler.update()
            if poisoned:
                now = [p.detach() for p in ps] + [
                    opt.state[p]["momentum_buffer"] for p in ps if p in opt.state
                ]
                assert all(torch.equal(a, b) for a, b in zip(before, now, strict=True))
        assert_same(ref_p, rep_p, ref, rep)
    assert rep._replay.stats.replays == 4 * 2


def test_count_regression_zero_eager_bodies_during_replayed_steps(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ns_calls = count_ns_bodies(monkeypatch)  # the torch backend's body: ask for that backend
    ref_p, ref, rep_p, rep = twins(flags=BOTH_FLAGS, ns_backend="torch")
    prep_calls = [0]
    real = rep._engine.body

    def counting_prepare(*args: Any) -> list[Tensor]:
        prep_calls[0] += 1
        return real(*args)

    rep._engine.body = counting_prepare
    step_both(ref_p, ref, rep_p, rep, 0)
    assert prep_calls[0] > 0
    assert ns_calls[0] > 0
    prep_calls[0] = ns_calls[0] = 0
    for step in range(1, 6):
        set_grads(rep_p, step)
        rep.step()
    assert prep_calls[0] == 0, "replayed steps ran the eager update preparation"
    assert ns_calls[0] == 0, "replayed steps ran the eager Newton-Schulz body"
    for step in range(1, 6):
        set_grads(ref_p, step)
        ref.step()
    assert_same(ref_p, rep_p, ref, rep)


def _peaks(flags: CaptureFlags) -> tuple[float, float]:
    gc.collect()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    params = make_params()
    opt = MuSGD(groups(params), lr=0.02, **flags)
    for step in range(5):
        set_grads(params, step)
        opt.step()
    torch.cuda.synchronize()
    mib = 2.0**20
    peaks = torch.cuda.max_memory_allocated() / mib, torch.cuda.max_memory_reserved() / mib
    del opt, params
    return peaks


def test_memory_with_the_flags_off_and_on() -> None:
    variants: dict[str, CaptureFlags] = {
        "off": {},
        "capture_updates": {"capture_updates": True},
        "both": BOTH_FLAGS,
    }
    peaks = {name: _peaks(flags) for name, flags in variants.items()}
    print(
        "peak allocated/reserved MiB: "
        + ", ".join(f"{n}: {a:.1f}/{r:.1f}" for n, (a, r) in peaks.items())
    )
    assert peaks["both"][0] - peaks["off"][0] < 256


def test_recorders_share_their_streams_per_thread_and_device() -> None:
    """One side stream and one set of lanes per thread and device, whatever the recorder.

    Another thread gets stream objects of its own; their CUDA streams come from PyTorch's
    round-robin pool, which after many streams may repeat one of these (``_StreamPool``), so
    the objects are compared, not the CUDA streams."""
    index = torch.cuda.current_device()
    four, two = STREAMS.lane_streams(index, 4), STREAMS.lane_streams(index, 2)
    assert two == four[:2]
    assert len(set(four)) == 4
    assert STREAMS.side_stream(index) is STREAMS.side_stream(index)
    assert STREAMS.side_stream(index) not in four
    elsewhere: list[tuple[torch.cuda.Stream, ...]] = []
    thread = threading.Thread(target=lambda: elsewhere.append(STREAMS.lane_streams(index, 4)))
    thread.start()
    thread.join()
    assert not set(map(id, elsewhere[0])) & set(map(id, four)), "another thread has its own"


def test_a_second_optimizer_holds_no_new_cublas_workspaces() -> None:
    """cuBLAS keeps a workspace per stream for the process (32 MiB each on an H200): optimizers
    that recorded on streams of their own would each leave one per stream behind."""
    params = make_params()

    def train_and_drop() -> int:
        opt = MuSGD(groups(params), lr=0.02, capture_updates=True, capture_orthogonalization=True)
        for step in range(3):
            set_grads(params, step)
            opt.step()
        assert opt._replay.stats.recordings > 0
        torch.cuda.synchronize()
        del opt
        gc.collect()
        return torch.cuda.memory_allocated()

    first = train_and_drop()
    second = train_and_drop()
    assert second - first < 2**20, f"{(second - first) / 2**20:.1f} MiB more after the second"


@pytest.mark.slow
@pytest.mark.parametrize(
    "flags",
    UPDATE_FLAGS,
)
def test_200_step_nano_detector_run_is_byte_identical(flags: CaptureFlags) -> None:
    def runs() -> tuple[Any, Any]:
        kw: dict[str, Any] = {"steps": 200, "image_size": 128, "batch": 4, "warmup_schedule": True}
        return train_detector(**kw), train_detector(**kw, **flags)

    eager_run, replay_run = deterministic(runs)
    assert replay_run.stats.recordings == 1  # the two groups together
    assert replay_run.stats.failures == 0
    assert replay_run.stats.replays == 2 * 200  # two groups, every step
    assert_runs_identical(eager_run, replay_run)


# Column count 288 for all three kernels (64, 48 and 16 rows): one zero-padded stack on CUDA.
PADDED_MATRICES = [(64, 32, 3, 3), (48, 32, 3, 3), (16, 32, 3, 3)]


@pytest.mark.parametrize(
    "flags",
    REPLAY_FLAGS,
    ids=REPLAY_FLAG_IDS,
)
def test_zero_padded_stacks_replay_the_eager_bits(flags: CaptureFlags) -> None:
    shapes = [*PADDED_MATRICES, (64,), (48,)]

    def make() -> list[torch.nn.Parameter]:
        gen = torch.Generator().manual_seed(3)
        return [torch.nn.Parameter(torch.randn(s, generator=gen).to(DEVICE)) for s in shapes]

    ref_p, rep_p = make(), make()
    layout = build_layout(ref_p[:3], None, pad=pad_bound(DEVICE))
    assert [b.member_shapes for b in layout.buckets] == [((64, 288), (48, 288), (16, 288))]
    ref = MuSGD(split_groups(ref_p, 3), lr=0.02)
    rep = MuSGD(split_groups(rep_p, 3), lr=0.02, **flags)
    for step in range(4):
        step_both(ref_p, ref, rep_p, rep, step)
        assert_same(ref_p, rep_p, ref, rep)
    assert rep._replay.stats.recordings >= 1
    assert rep._replay.stats.failures == 0


@pytest.mark.parametrize(
    "flags",
    UPDATE_FLAGS,
)
def test_channels_last_gradients_replay_bit_identically(flags: CaptureFlags) -> None:
    """Channels-last gradients, of contiguous parameters (cuDNN may return them) or of
    channels-last ones (a model converted with ``.to(memory_format=...)``, as the Ultralytics
    trainer does), replay bit for bit and never run eagerly."""
    ref_p, ref, rep_p, rep = twins(flags=flags)
    cl_ref, cl_rep = make_params(), make_params()
    for ps in (cl_ref, cl_rep):
        for i, p in enumerate(ps):
            if p.dim() == 4:
                ps[i] = torch.nn.Parameter(p.detach().to(memory_format=torch.channels_last))
    cl_opts = MuSGD(groups(cl_ref), lr=0.02), MuSGD(groups(cl_rep), lr=0.02, **flags)
    for step in range(4):
        for ps, opt in ((ref_p, ref), (rep_p, rep), (cl_ref, cl_opts[0]), (cl_rep, cl_opts[1])):
            set_grads(ps, step)
            for p in ps:
                if p.grad is not None and p.grad.dim() == 4:
                    p.grad = p.grad.to(memory_format=torch.channels_last)
            opt.step()
        assert_same(ref_p, rep_p, ref, rep)
        assert_same(cl_ref, cl_rep, *cl_opts)
    for opt in (cl_opts[1], rep):
        assert opt._replay.stats.fallbacks["non-contiguous"] == 0
        assert opt._replay.stats.failures == 0
        assert opt._replay.stats.replays > 0
