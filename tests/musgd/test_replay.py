"""Orthogonalization replay (``capture_orthogonalization``) on CPU, through a fake recorder.

The fake recorder (``replay_fakes.py``) has CUDA-graph semantics: it re-runs logged ATen
operations on fixed tensors, so keys, the bound, fallbacks, failures and the count regression
are all exercised here; tests/cuda/test_replay_cuda.py checks the real CUDA recorder.
"""

from __future__ import annotations

import dataclasses
import inspect
import warnings
from collections.abc import Callable, Hashable
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from replay_common import assert_same, check_stacked, count_calls, count_ns_bodies, set_grads
from replay_fakes import FakeRecorder, InjectedFailureError, fake_graph_pools
from torch import Tensor

from musgd import MuSGD
from musgd import _functional as functional
from musgd._functional import EagerOrthogonalizer, NSSettings, build_layout, pad_bound
from musgd._newton_schulz import DEFAULT_COEFFICIENTS, resolve_coefficients
from musgd._replay import (
    CudaGraphRecorder,
    ReplayOrthogonalizer,
    ReplayState,
    plan_branches,
    plan_lanes,
    same_float,
    tensor_fallback,
    typed,
)
from musgd.ultralytics import UltralyticsMuSGD

NS = NSSettings(
    steps=5,
    coefficients=resolve_coefficients(DEFAULT_COEFFICIENTS, 5),
    eps=1e-7,
    dtype=torch.bfloat16,
)
# (12, 16, 3, 3) shares the column count 144 of (16, 16, 3, 3): a zero-padded bucket.
SHAPES = [
    (8, 3, 3, 3),
    (16, 8, 3, 3),
    (16, 16, 3, 3),
    (12, 16, 3, 3),
    (16, 16, 3, 3),
    (16,),
    (32, 16),
    (16, 32),
]


def make_state(recorder: FakeRecorder, bound: int = 100) -> ReplayState:
    return ReplayState(recorder, orth_bound=lambda: bound, update_bound=lambda: bound)


def eager(kind: str, G: Tensor, ns: NSSettings = NS) -> Tensor:
    orth = EagerOrthogonalizer()
    return orth.single(G, ns) if kind == "single" else orth.batched(G, ns)


def replayed(orth: ReplayOrthogonalizer, kind: str, G: Tensor, ns: NSSettings = NS) -> Tensor:
    return orth.single(G, ns) if kind == "single" else orth.batched(G, ns)


@pytest.fixture
def counted_bodies(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count executions of the eager Newton-Schulz body (the count regression's probe)."""
    return count_ns_bodies(monkeypatch)


# --- the orthogonalizer on its own -----------------------------------------------------------


@pytest.mark.parametrize(("kind", "shape"), [("single", (12, 20)), ("batched", (3, 20, 12))])
def test_replay_is_bit_identical_with_fresh_inputs_and_owned_outputs(
    kind: str, shape: tuple[int, ...]
) -> None:
    recorder = FakeRecorder()
    state = make_state(recorder)
    orth = ReplayOrthogonalizer(state)
    gen = torch.Generator().manual_seed(0)
    results = []
    for _ in range(4):
        G = torch.randn(shape, generator=gen)
        before = G.clone()
        out = replayed(orth, kind, G)
        assert torch.equal(out, eager(kind, before))
        assert torch.equal(G, before), "the input must not be modified"
        results.append(out)
    assert (recorder.records, state.stats.recordings, state.stats.replays) == (1, 1, 3)
    # Owned storage: no two results alias each other or the recording's output.
    ptrs = {r.data_ptr() for r in results} | {recorder.recordings[0].outputs[0].data_ptr()}
    assert len(ptrs) == len(results) + 1
    kept = results[1].clone()
    results[2].zero_()
    replayed(orth, kind, torch.randn(shape, generator=gen))
    assert torch.equal(results[1], kept)


def test_key_separates_shape_dtype_and_ns_settings() -> None:
    recorder = FakeRecorder()
    orth = ReplayOrthogonalizer(make_state(recorder))
    G = torch.randn(2, 6, 10)
    variants = [
        (G, NS),
        (G[:1].clone(), NS),
        (G.double(), NS),
        (G, NSSettings(4, NS.coefficients[:4], NS.eps, NS.dtype)),
        (G, NSSettings(5, ((3.0, -3.2, 1.2),) * 5, NS.eps, NS.dtype)),
        (G, NSSettings(5, NS.coefficients, 1e-6, NS.dtype)),
        (G, NSSettings(5, NS.coefficients, NS.eps, torch.float32)),
    ]
    for X, ns in variants:
        assert torch.equal(orth.batched(X, ns), eager("batched", X, ns))
    assert recorder.records == len(variants)
    for X, ns in variants:  # every variant now replays its own recording
        assert torch.equal(orth.batched(X, ns), eager("batched", X, ns))
    assert recorder.records == len(variants)
    assert recorder.replays == len(variants)


def test_single_and_batched_are_different_functions_in_the_key() -> None:
    recorder = FakeRecorder()
    orth = ReplayOrthogonalizer(make_state(recorder))
    G = torch.randn(6, 10)
    orth.single(G, NS)
    orth.batched(G.unsqueeze(0).clone(), NS)
    assert recorder.records == 2


def test_environment_changes_make_new_keys_never_a_stale_recording() -> None:
    recorder = FakeRecorder()
    orth = ReplayOrthogonalizer(make_state(recorder))
    G = torch.randn(1, 8, 8)
    precision = torch.get_float32_matmul_precision()
    deterministic = torch.are_deterministic_algorithms_enabled()
    # Setting a precision also pins the finer-grained fp32_precision setting ("none" becomes
    # "ieee"), itself part of the key; set it once first so the restore lands on the same key.
    torch.set_float32_matmul_precision(precision)
    try:
        orth.batched(G, NS)
        torch.set_float32_matmul_precision("medium" if precision != "medium" else "high")
        orth.batched(G, NS)
        torch.use_deterministic_algorithms(not deterministic)
        orth.batched(G, NS)
        recorder.stream = "stream-1"
        assert torch.equal(orth.batched(G, NS), eager("batched", G))
    finally:
        torch.set_float32_matmul_precision(precision)
        torch.use_deterministic_algorithms(deterministic)
    assert recorder.records == 4
    recorder.stream = "stream-0"
    orth.batched(G, NS)  # back to the first settings: its recording replays
    assert recorder.records == 4


def test_typed_keys_refuse_int_for_float_and_signed_zero() -> None:
    assert typed(5) != typed(5.0)
    assert typed(True) != typed(1)
    assert typed(0.0) != typed(-0.0)
    assert typed((1, 2.0)) != typed((1.0, 2.0))
    assert typed([1]) != typed((1,))
    assert same_float(0.5, 0.5)
    assert not same_float(0.0, -0.0)
    assert not same_float(None, 0.0)


def test_float_step_count_is_refused_through_the_eager_error() -> None:
    recorder = FakeRecorder()
    orth = ReplayOrthogonalizer(make_state(recorder))
    G = torch.randn(1, 8, 8)
    orth.batched(G, NS)
    float_steps = NSSettings(5.0, NS.coefficients, NS.eps, NS.dtype)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="ns_steps must be an int"):
        orth.batched(G, float_steps)
    assert recorder.records == 1


def test_bound_reached_runs_new_keys_eagerly_and_correctly() -> None:
    recorder = FakeRecorder()
    state = make_state(recorder, bound=2)
    orth = ReplayOrthogonalizer(state)
    shapes = [(1, 4, 6), (1, 6, 4), (1, 5, 5), (2, 5, 5)]
    for _ in range(2):
        for shape in shapes:
            G = torch.randn(shape)
            assert torch.equal(orth.batched(G, NS), eager("batched", G))
    assert recorder.records == 2
    assert len(state.orth_cache) == 2
    assert state.stats.fallbacks["bound"] == 4
    assert state.stats.replays == 2


def _fallback_cases() -> list[tuple[str, Callable[[FakeRecorder, pytest.MonkeyPatch], Any]]]:
    def unsupported_device(rec: FakeRecorder, mp: pytest.MonkeyPatch) -> None:
        rec.device_type = "cuda"

    def capture_underway(rec: FakeRecorder, mp: pytest.MonkeyPatch) -> None:
        rec.capture_underway = True

    def compiling(rec: FakeRecorder, mp: pytest.MonkeyPatch) -> None:
        mp.setattr(torch.compiler, "is_compiling", lambda: True)

    return [
        ("device:cpu", unsupported_device),
        ("capture", capture_underway),
        ("compile", compiling),
    ]


@pytest.mark.parametrize(("reason", "setup"), _fallback_cases())
def test_context_fallbacks_run_eagerly(
    reason: str,
    setup: Callable[[FakeRecorder, pytest.MonkeyPatch], Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    recorder = FakeRecorder()
    state = make_state(recorder)
    orth = ReplayOrthogonalizer(state)
    setup(recorder, monkeypatch)
    G = torch.randn(2, 6, 9)
    expected = eager("batched", G)
    monkeypatch.undo()  # the reference ran without the patch; the replayer runs with it
    setup(recorder, monkeypatch)
    assert torch.equal(orth.batched(G, NS), expected)
    assert recorder.records == 0
    assert state.stats.fallbacks[reason] == 1


def test_autocast_falls_back() -> None:
    recorder = FakeRecorder()
    state = make_state(recorder)
    orth = ReplayOrthogonalizer(state)
    G = torch.randn(2, 6, 9)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        expected = eager("batched", G)
        out = orth.batched(G, NS)
    assert torch.equal(out, expected)
    assert recorder.records == 0
    assert state.stats.fallbacks["autocast"] == 1


@pytest.mark.parametrize(
    ("reason", "make"),
    [
        ("requires-grad", lambda: torch.randn(2, 6, 9, requires_grad=True)),
        ("non-contiguous", lambda: torch.randn(2, 9, 6).mT),
        ("storage-offset", lambda: torch.randn(3, 6, 9)[1:]),
    ],
)
def test_input_fallbacks_run_eagerly(reason: str, make: Callable[[], Tensor]) -> None:
    recorder = FakeRecorder()
    state = make_state(recorder)
    orth = ReplayOrthogonalizer(state)
    G = make()
    with torch.no_grad():
        assert torch.equal(orth.batched(G, NS), eager("batched", G))
    assert recorder.records == 0
    assert state.stats.fallbacks[reason] == 1


def test_tensor_fallback_reports_mixed_devices() -> None:
    assert tensor_fallback(torch.empty(2, 2, device="meta"), torch.device("cpu")) == (
        "mixed-devices"
    )
    assert tensor_fallback(torch.empty(2, 2), torch.device("cpu")) is None


def test_cuda_recorder_refuses_cpu_tensors() -> None:
    state = ReplayState(CudaGraphRecorder(), orth_bound=lambda: 10, update_bound=lambda: 10)
    orth = ReplayOrthogonalizer(state)
    G = torch.randn(2, 6, 9)
    assert torch.equal(orth.batched(G, NS), eager("batched", G))
    assert state.stats.fallbacks["device:cpu"] == 1
    assert len(state.orth_cache) == 0


@pytest.mark.parametrize("fail_in", ["warmup", "capture"])
def test_failed_recording_publishes_nothing_warns_once_and_runs_eagerly(fail_in: str) -> None:
    recorder = FakeRecorder(fail_in=fail_in)
    state = make_state(recorder)
    orth = ReplayOrthogonalizer(state)
    inputs = [torch.randn(1, 6, 9), torch.randn(1, 9, 6)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            for G in inputs:
                before = G.clone()
                assert torch.equal(orth.batched(G, NS), eager("batched", before))
                assert torch.equal(G, before)
    assert len(caught) == 1
    assert str(caught[0].message).startswith(
        "MuSGD could not record the batched orthogonalization of a (1, 6, 9) matrix for replay "
        f"(InjectedFailureError: injected failure in the {fail_in.replace('warmup', 'warm-up')}"
    )
    assert issubclass(caught[0].category, RuntimeWarning)
    assert recorder.records == 2, "a key whose recording failed is never retried"
    assert len(state.orth_cache) == 0
    assert state.stats.failures == 2
    assert state.stats.fallbacks["not-recordable"] == 4


def test_capture_refuses_host_synchronization() -> None:
    """The fake recorder enforces capture rules: a host sync fails the recording."""
    recorder = FakeRecorder()
    with pytest.raises(InjectedFailureError, match="host synchronization"):
        recorder.record(lambda: (torch.ones(1) * torch.ones(1).sum().item(),), torch.device("cpu"))


@pytest.fixture
def default_stacks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the stacks ``stacked`` builds on its default path (``stack_bucket`` calls)."""
    return count_calls(monkeypatch, functional, "stack_bucket")


@pytest.mark.parametrize(
    "shapes",
    [[(8, 3, 3, 3)], [(8, 3, 3, 3)] * 3, [(16, 32)] * 2, [(32, 16)] * 2],
    ids=["one", "three-kernels", "two-wide", "two-tall"],
)
def test_stacked_fills_the_recording_directly_with_the_eager_bits(
    shapes: list[tuple[int, ...]], default_stacks: list[int]
) -> None:
    """After the recording, a bucket is stacked into its static input and scaled on the way out."""
    recorder = FakeRecorder()
    state = make_state(recorder)
    check_stacked(ReplayOrthogonalizer(state), shapes, torch.device("cpu"), NS)
    assert default_stacks[0] == 1, "only the recording call may stack on the default path"
    assert (state.stats.recordings, state.stats.replays) == (1, 3)


@pytest.mark.parametrize(
    ("shapes", "layout"),
    [
        ([(8, 4, 1, 1), (8, 4)], torch.contiguous_format),
        ([(8, 3, 3, 3)] * 2, torch.channels_last),
    ],
    ids=["mixed-shapes", "channels-last"],
)
def test_stacked_takes_the_default_path_for_other_layouts(
    shapes: list[tuple[int, ...]], layout: torch.memory_format, default_stacks: list[int]
) -> None:
    """Members a direct fill cannot take still replay, through a stack and a copy, exactly."""
    recorder = FakeRecorder()
    state = make_state(recorder)
    check_stacked(ReplayOrthogonalizer(state), shapes, torch.device("cpu"), NS, layout=layout)
    assert default_stacks[0] == 4
    assert (state.stats.recordings, state.stats.replays) == (1, 3)


def test_stacked_falls_back_like_batched_under_autocast(default_stacks: list[int]) -> None:
    recorder = FakeRecorder()
    state = make_state(recorder)
    orth = ReplayOrthogonalizer(state)
    check_stacked(orth, [(16, 32)] * 2, torch.device("cpu"), NS, steps=2)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        check_stacked(orth, [(16, 32)] * 2, torch.device("cpu"), NS, steps=2)
    assert state.stats.fallbacks["autocast"] == 2
    assert (state.stats.recordings, state.stats.replays) == (1, 1)


# --- inside the optimizer --------------------------------------------------------------------


def make_params(seed: int = 0) -> list[torch.nn.Parameter]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(s, generator=gen)) for s in SHAPES]


def test_the_recorder_is_a_keyword_only_seam_that_the_optimizer_records_with() -> None:
    for cls in (MuSGD, UltralyticsMuSGD):
        assert inspect.signature(cls).parameters["recorder"].kind is inspect.Parameter.KEYWORD_ONLY
    with pytest.raises(TypeError):
        MuSGD(
            make_params(),
            0.02,
            0.9,
            True,
            0.0,
            0.5,
            0.5,
            5,
            DEFAULT_COEFFICIENTS,
            1e-7,
            "auto",
            None,
            FakeRecorder(),  # type: ignore[arg-type]
        )  # type: ignore[call-arg]
    params = make_params()
    recorder = FakeRecorder()
    opt = MuSGD(params, lr=0.02, capture_orthogonalization=True, recorder=recorder)
    set_grads(params, 0)
    opt.step()
    assert recorder.records == 5  # one recording per bucket, all through the given recorder


@pytest.mark.parametrize("foreach", [True, False])
def test_optimizer_steps_match_eager_with_skipped_grads_and_changing_buckets(
    foreach: bool,
) -> None:
    ref_params, rep_params = make_params(), make_params()
    ref = MuSGD(ref_params, lr=0.02, weight_decay=0.01, foreach=foreach)
    recorder = FakeRecorder()
    rep = MuSGD(
        rep_params,
        lr=0.02,
        weight_decay=0.01,
        foreach=foreach,
        capture_orthogonalization=True,
        recorder=recorder,
    )
    # Skipping grads changes which buckets exist and their order within the group.
    skips: list[set[int]] = [set(), {1}, {0, 2}, set(), {3, 5}, set()]
    for step, skip in enumerate(skips):
        set_grads(ref_params, step, skip)
        set_grads(rep_params, step, skip)
        ref.step()
        rep.step()
        assert_same(ref_params, rep_params, ref, rep)
    assert recorder.records > 0
    assert rep._replay.stats.replays > 0
    assert len(rep._replay.orth_cache) <= rep._count_matrices()


def test_count_regression_no_eager_body_runs_during_replayed_steps(
    counted_bodies: list[int],
) -> None:
    params = make_params()
    opt = MuSGD(params, lr=0.02, capture_orthogonalization=True, recorder=FakeRecorder())
    set_grads(params, 0)
    opt.step()
    assert counted_bodies[0] > 0  # recording ran the bodies (eager result, warm-up, capture)
    counted_bodies[0] = 0
    for step in range(1, 4):
        set_grads(params, step)
        opt.step()
    assert counted_bodies[0] == 0, "replayed steps must not run the eager Newton-Schulz body"
    assert opt._replay.stats.replays == 3 * 5  # five buckets per step


def test_count_regression_fails_when_replay_turns_eager(
    counted_bodies: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The regression's probe sees a replay that silently became eager."""
    monkeypatch.setattr(
        ReplayOrthogonalizer, "_run", lambda self, kind, G, ns: self._call_eager(kind, G, ns)
    )
    params = make_params()
    opt = MuSGD(params, lr=0.02, capture_orthogonalization=True, recorder=FakeRecorder())
    for step in range(2):
        set_grads(params, step)
        opt.step()
    assert counted_bodies[0] == 2 * 5


def test_replayed_shapes_include_a_zero_padded_bucket() -> None:
    """The replay tests here run a padded stack: its recording replays like any other."""
    params = make_params()
    layout = build_layout(params, None, pad=pad_bound(torch.device("cpu")))
    padded = [b for b in layout.buckets if b.padded]
    assert [(b.rows, b.cols, b.member_shapes) for b in padded] == [
        (16, 144, ((16, 144), (12, 144), (16, 144)))
    ]


def test_bound_is_the_number_of_matrix_parameters() -> None:
    params = make_params()
    recorder = FakeRecorder()
    opt = MuSGD(params, lr=0.02, foreach=False, capture_orthogonalization=True, recorder=recorder)
    assert opt._count_matrices() == 7
    opt.add_param_group({"params": [torch.nn.Parameter(torch.randn(4, 4))]})
    assert opt._count_matrices() == 8
    for p in opt.param_groups[1]["params"]:
        p.grad = torch.randn(4, 4)
    set_grads(params, 0)
    opt.step()
    # Per-tensor mode records one signature per distinct matrix shape: 6 + the new (4, 4).
    assert recorder.records == 7


def test_load_state_dict_drops_recordings_and_results_stay_exact() -> None:
    ref_params, rep_params = make_params(), make_params()
    ref = MuSGD(ref_params, lr=0.02)
    recorder = FakeRecorder()
    rep = MuSGD(rep_params, lr=0.02, capture_orthogonalization=True, recorder=recorder)
    for step in range(2):
        set_grads(ref_params, step)
        set_grads(rep_params, step)
        ref.step()
        rep.step()
    assert len(rep._replay.orth_cache) == 5
    rep.load_state_dict(rep.state_dict())
    assert len(rep._replay.orth_cache) == 0
    set_grads(ref_params, 2)
    set_grads(rep_params, 2)
    ref.step()
    rep.step()
    assert recorder.records == 10
    assert_same(ref_params, rep_params, ref, rep)


def test_resume_mid_run_matches_an_uninterrupted_run() -> None:
    ref_params = make_params()
    ref = MuSGD(ref_params, lr=0.02, capture_orthogonalization=True, recorder=FakeRecorder())
    first_params = make_params()
    first = MuSGD(first_params, lr=0.02, capture_orthogonalization=True, recorder=FakeRecorder())
    for step in range(3):
        set_grads(ref_params, step)
        set_grads(first_params, step)
        ref.step()
        first.step()
    saved = first.state_dict()
    resumed_params = [torch.nn.Parameter(p.detach().clone()) for p in first_params]
    resumed = MuSGD(
        resumed_params, lr=0.02, capture_orthogonalization=True, recorder=FakeRecorder()
    )
    resumed.load_state_dict(saved)
    for step in range(3, 6):
        set_grads(ref_params, step)
        set_grads(resumed_params, step)
        ref.step()
        resumed.step()
    assert_same(ref_params, resumed_params, ref, resumed)


@pytest.mark.parametrize("requested", [True, False])
def test_flag_lives_in_groups_and_legacy_state_takes_the_constructor_mode(requested: bool) -> None:
    params = make_params()
    opt = MuSGD(params, lr=0.02, capture_orthogonalization=not requested)
    saved = opt.state_dict()
    assert all(g["capture_orthogonalization"] is (not requested) for g in saved["param_groups"])
    legacy = {
        "state": saved["state"],
        "param_groups": [
            {
                k: v
                for k, v in g.items()
                if k not in ("capture_orthogonalization", "capture_updates")
            }
            for g in saved["param_groups"]
        ],
    }
    fresh = MuSGD(make_params(), lr=0.02, capture_orthogonalization=requested)
    fresh.load_state_dict(legacy)
    assert [g["capture_orthogonalization"] for g in fresh.param_groups] == [requested]
    fresh.load_state_dict(saved)  # a state dict that has the field keeps its own value
    assert [g["capture_orthogonalization"] for g in fresh.param_groups] == [not requested]


@pytest.mark.parametrize("name", ["capture_orthogonalization", "capture_updates"])
def test_flags_must_be_bools(name: str) -> None:
    with pytest.raises(ValueError, match=f"{name} must be True or False, got 'yes'"):
        MuSGD(make_params(), lr=0.02, **{name: "yes"})  # type: ignore[arg-type]
    opt = MuSGD(make_params(), lr=0.02)
    with pytest.raises(ValueError, match=rf"param_groups\[1\]: {name} must be True or False"):
        opt.add_param_group({"params": [torch.nn.Parameter(torch.randn(3))], name: 1})


def test_cpu_optimizer_with_the_real_recorder_runs_eagerly() -> None:
    ref_params, rep_params = make_params(), make_params()
    ref = MuSGD(ref_params, lr=0.02)
    rep = MuSGD(rep_params, lr=0.02, capture_orthogonalization=True)
    for step in range(2):
        set_grads(ref_params, step)
        set_grads(rep_params, step)
        ref.step()
        rep.step()
    assert_same(ref_params, rep_params, ref, rep)
    assert rep._replay.stats.fallbacks["device:cpu"] == 10
    assert len(rep._replay.orth_cache) == 0


@settings(max_examples=200, deadline=None)
@given(
    costs=st.lists(st.integers(min_value=0, max_value=10**9), max_size=40),
    lanes=st.integers(min_value=1, max_value=8),
)
def test_plan_lanes_places_every_job_once_within_the_list_scheduling_bound(
    costs: list[int], lanes: int
) -> None:
    plan = plan_lanes(costs, lanes)
    assert sorted(i for lane in plan for i in lane) == list(range(len(costs)))
    assert len(plan) <= lanes
    assert all(lane == sorted(lane) and lane for lane in plan)
    if costs:
        # Greedy placement never exceeds an even share plus the largest job.
        makespan = max(sum(costs[i] for i in lane) for lane in plan)
        assert makespan <= sum(costs) / lanes + max(costs)


def test_plan_lanes_gives_the_largest_jobs_their_own_lanes() -> None:
    assert plan_lanes([1, 100, 2, 90, 3], 3) == [[1], [3], [0, 2, 4]]
    assert plan_lanes([5, 5, 5], 1) == [[0, 1, 2]]
    assert plan_lanes([], 4) == []


def test_step_scope_reads_the_context_once_per_step_and_anew_each_step() -> None:
    ref_p, rep_p = make_params(), make_params()
    ref = MuSGD(ref_p, lr=0.02)
    recorder = FakeRecorder()
    rep = MuSGD(rep_p, lr=0.02, capture_orthogonalization=True, recorder=recorder)
    reads: list[Hashable] = []

    def stream_key(device: torch.device) -> Hashable:
        reads.append(recorder.stream)
        return recorder.stream

    recorder.stream_key = stream_key  # type: ignore[method-assign]
    for step in range(3):
        if step == 2:
            recorder.stream = "stream-1"  # changed between steps: seen by the next step
        for ps, opt in ((ref_p, ref), (rep_p, rep)):
            set_grads(ps, step)
            opt.step()
        assert_same(ref_p, rep_p, ref, rep)
    assert reads == ["stream-0", "stream-0", "stream-1"], "one environment read per step"
    buckets = len(build_layout(rep_p, None).buckets)
    bound = len(build_layout(rep_p, None).matrices)
    assert recorder.records == min(2 * buckets, bound), "the new stream made new recordings"
    # Outside a step nothing is memoized: every call reads the environment.
    orth = ReplayOrthogonalizer(rep._replay)
    G = torch.randn(2, 8, 8)
    orth.batched(G, NS)
    orth.batched(G, NS)
    assert len(reads) == 5


def test_ns_key_is_typed_and_follows_the_settings_object() -> None:
    state = make_state(FakeRecorder())
    key = state.ns_key(NS)
    assert state.ns_key(NS) is key
    assert state.ns_key(dataclasses.replace(NS, steps=5.0)) != key  # type: ignore[arg-type]
    assert state.ns_key(dataclasses.replace(NS, eps=1e-6)) != key
    assert state.ns_key(dataclasses.replace(NS)) == key


def test_plan_branches_keeps_costly_jobs_inline_and_spreads_the_rest() -> None:
    lanes, inline = plan_branches([5, 100, 6, 7, 200], 2, limit=100)
    assert inline == [1, 4]
    assert sorted(i for lane in lanes for i in lane) == [0, 2, 3]
    assert len(lanes) == 2


def test_plan_branches_runs_everything_inline_without_two_lanes_of_small_jobs() -> None:
    assert plan_branches([5, 100, 200], 4, limit=100) == ([], [0, 1, 2])
    assert plan_branches([5, 6, 7], 1, limit=100) == ([], [0, 1, 2])
    assert plan_branches([], 4) == ([], [])


def test_a_graph_pool_takes_one_producer_and_drops_the_consumers_before_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from musgd._replay import GraphPool

    given_back = fake_graph_pools(monkeypatch)
    first, second, third = (torch.device("cuda", i) for i in range(3))
    dropped: list[str] = []
    pool = GraphPool()
    pool.on_producer(lambda: dropped.append("optimizer"))
    network = pool.producer(first)
    assert pool.consumer(first, droppable=True) == network  # the optimizer joins it
    assert dropped == []  # it came after the network: nothing to drop
    # A second network (a short batch's) gets a pool of its own: its gradients could
    # otherwise sit in the first one's scratch, overwritten while they accumulate.
    assert pool.producer(first) != network
    assert pool.private == 1
    # The optimizer captured first on another device: the network joins there, and the
    # optimizer's recordings are dropped, to be made anew after it.
    early = pool.consumer(second, droppable=True)
    joined = pool.producer(second)
    assert dropped == ["optimizer"]
    # ... into a fresh pool (PyTorch refuses a capture into one whose graphs were all freed),
    # the dropped recordings' memory given back first.
    assert joined != early
    assert given_back == [1]
    assert pool.consumer(second, droppable=True) == joined
    # The first device's pool, with its network, stays.
    assert pool.consumer(first, droppable=True) == network
    assert pool.private == 1
    # A consumer that cannot drop its recordings keeps a late network out.
    strict = GraphPool()
    alone = strict.consumer(third)  # said nothing of how to drop its recordings
    assert strict.producer(third) != alone
    assert strict.private == 1


def test_drops_with_needs_a_pool_and_says_how_to_give_one() -> None:
    from musgd._replay import CudaGraphRecorder

    with pytest.raises(ValueError, match=r"CudaGraphRecorder\(pool=GraphPool\(\)\)"):
        CudaGraphRecorder().drops_with(lambda: None)


class _FakeGraph:
    """Stands in for ``torch.cuda.CUDAGraph``: its capture's pool and mode, and its
    destruction, appended by name to a shared list."""

    def __init__(self, name: str, destroyed: list[str]) -> None:
        self.name, self.destroyed = name, destroyed
        self.pool: Any = None
        self.mode = ""
        self.replays = 0

    def capture_begin(self, pool: Any = None, capture_error_mode: str = "global") -> None:
        self.pool, self.mode = pool, capture_error_mode

    def capture_end(self) -> None:
        pass

    def replay(self) -> None:
        self.replays += 1

    def __del__(self) -> None:
        self.destroyed.append(self.name)


def _fake_keeper(capturing: Callable[[], bool] = lambda: False) -> tuple[Any, list[str]]:
    """A :class:`musgd._replay.GraphKeeper` of fake graphs named a, b, c, ... in order of
    making, and the list their destruction is written to."""
    from musgd._replay import GraphKeeper

    destroyed: list[str] = []
    names = iter("abcdefgh")
    return GraphKeeper(lambda: _FakeGraph(next(names), destroyed), capturing), destroyed


def test_a_graph_outlives_its_owner_until_its_devices_last_owned_graph_goes() -> None:
    # PyTorch frees the capture stream's cuBLAS workspace with a graph (R386): one destroyed
    # while another of the same side stream lives would free the live one's workspace.
    keeper, destroyed = _fake_keeper()
    a, b, c = keeper.graph(0), keeper.graph(0), keeper.graph(1)
    assert keeper.owned == 3
    del a
    assert destroyed == []  # b, on the same device, still owned: a is kept
    assert (keeper.idle, keeper.owned) == (1, 2)
    del c
    assert destroyed == ["c"]  # the last owned graph of device 1: nothing to keep it for
    b.replay()
    assert keeper.idle == 1
    del b
    assert sorted(destroyed) == ["a", "b", "c"]  # device 0's last owner went: both go
    assert keeper.idle == 0


def test_no_graph_is_destroyed_while_the_current_stream_captures() -> None:
    # Destroying a graph inside a capture invalidates that capture (a user's whole-step graph
    # failed so on the H100 at 6268a20): the destruction waits for the capture's end.
    under_way = [False]
    keeper, destroyed = _fake_keeper(lambda: under_way[0])
    a, b = keeper.graph(0), keeper.graph(0)
    under_way[0] = True
    del a, b  # b was device 0's last owned graph: both would go now
    assert destroyed == []
    assert (keeper.idle, keeper.deferred) == (0, 2)
    keeper.flush()  # still capturing: nothing goes
    assert destroyed == []
    under_way[0] = False
    c = keeper.graph(1)  # the keeper's next call outside the capture destroys them
    assert sorted(destroyed) == ["a", "b"]
    assert keeper.deferred == 0
    under_way[0] = True
    del c
    assert sorted(destroyed) == ["a", "b"]  # c waits
    assert keeper.deferred == 1
    under_way[0] = False
    keeper.flush()
    assert sorted(destroyed) == ["a", "b", "c"]
    assert keeper.deferred == 0


def test_the_keeper_knows_which_pools_its_graphs_captured_into() -> None:
    keeper, destroyed = _fake_keeper()
    graph, other = keeper.graph(0), keeper.graph(0)
    graph.capture_begin(("pool", 7))
    graph.capture_end()
    assert keeper.holds_pool(0, ("pool", 7))
    assert not keeper.holds_pool(1, ("pool", 7))
    assert not keeper.holds_pool(0, ("pool", 8))
    del graph
    assert keeper.holds_pool(0, ("pool", 7))  # kept, idle: the pool still has a graph
    del other
    assert not keeper.holds_pool(0, ("pool", 7))
    assert sorted(destroyed) == ["a", "b"]


def test_captures_are_thread_local_into_the_pool_given() -> None:
    keeper, _ = _fake_keeper()
    graph = keeper.graph(0)
    graph.capture_begin(("pool", 1))
    held = graph._held.graph
    assert (held.pool, held.mode) == (("pool", 1), "thread_local")


def test_a_producer_joins_the_pool_its_dropped_consumers_are_kept_in(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from musgd import _replay
    from musgd._replay import GraphPool

    given_back = fake_graph_pools(monkeypatch)
    keeper, destroyed = _fake_keeper()
    monkeypatch.setattr(_replay, "GRAPHS", keeper)
    first, second = torch.device("cuda", 0), torch.device("cuda", 1)
    pool = GraphPool()
    consumers: dict[int, Any] = {}
    pool.on_producer(consumers.clear)
    # On the first device a loss recording (its own pool) lives when the network joins: the
    # optimizer's dropped graph is kept, so the shared pool still has a graph and lives on.
    loss = keeper.graph(0)
    loss.capture_begin(("loss", 0))
    early = pool.consumer(first, droppable=True)
    consumers[0] = keeper.graph(0)
    consumers[0].capture_begin(early)
    assert pool.producer(first) == early
    assert destroyed == []
    assert keeper.idle == 1
    assert given_back == [1]
    # On the second device nothing else lives: the dropped graph goes, and the network starts
    # a fresh pool (PyTorch refuses a capture into one whose graphs were all destroyed).
    late = pool.consumer(second, droppable=True)
    consumers[1] = keeper.graph(1)
    consumers[1].capture_begin(late)
    joined = pool.producer(second)
    assert joined != late
    assert destroyed == ["c"]
    del loss


def test_settings_that_change_the_result_change_the_replay_key() -> None:
    # A group switched to the AOL normalization, or to the Gram iteration, must record anew,
    # not replay the recording of its earlier settings.
    state = ReplayState(FakeRecorder(), orth_bound=lambda: 10, update_bound=lambda: 10)
    keys = {
        state.ns_key(dataclasses.replace(NS, **change))
        for change in ({}, {"normalize": "aol"}, {"backend": "gram"}, {"dtype": torch.float16})
    }
    assert len(keys) == 4


@pytest.mark.parametrize("flag", ["capture_orthogonalization", "capture_updates"])
def test_the_gram_backend_replays_its_own_eager_bits(flag: str) -> None:
    runs = {
        name: (make_params(), options)
        for name, options in (
            ("torch", {"ns_backend": "torch"}),
            ("gram", {"ns_backend": "gram"}),
            ("gram replayed", {"ns_backend": "gram", flag: True, "recorder": FakeRecorder()}),
        )
    }
    for params, options in runs.values():
        opt = MuSGD(params, lr=0.02, weight_decay=0.01, ns_dtype=torch.bfloat16, **options)
        for step in range(3):
            set_grads(params, step)
            opt.step()
    gram, replayed, torch_backend = runs["gram"][0], runs["gram replayed"][0], runs["torch"][0]
    for a, b in zip(gram, replayed, strict=True):
        assert torch.equal(a, b)
    # The wide matrices (8 x 27, 16 x 144) ran the Gram iteration: not the torch backend's bits.
    assert any(not torch.equal(a, b) for a, b in zip(gram, torch_backend, strict=True))
