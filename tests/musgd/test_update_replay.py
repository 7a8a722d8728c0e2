"""Update-preparation replay (``capture_updates``) on CPU, through a fake recorder.

The fake recorder re-runs logged ATen operations on the recorded tensors, so a Python scalar
frozen into a recording would replay a stale value here exactly as in a CUDA graph: the
hyperparameter-schedule contract would catch it. The contracts both recorders must keep are
update_replay_contracts.py, imported here and by tests/cuda/test_update_replay_cuda.py, which
runs them with real CUDA graphs.
"""

from __future__ import annotations

import io
import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
from replay_common import (
    CaptureFlags,
    assert_same,
    record_first_group,
    set_grads,
    split_groups,
    step_both,
    step_with_changes,
)
from replay_fakes import FakeRecorder
from torch import Tensor
from torch.utils._python_dispatch import TorchDispatchMode

# The shared contracts, collected here with this file's `replay_backend` fixture.
from update_replay_contracts import (
    ReplayBackend,
    test_hyperparameter_schedules_are_honoured_without_rerecording,  # noqa: F401
    test_hyperparameters_held_in_device_tensors_replay_their_current_values,  # noqa: F401
    test_replayed_steps_match_eager_with_one_replay_per_group,  # noqa: F401
    test_resume_mid_run_matches_an_uninterrupted_run,  # noqa: F401
)

from musgd import MuSGD, _functional
from musgd._functional import Hyper, PrepareFn, StepRecord
from musgd._replay import STEP_RECORDINGS
from musgd._update_replay import HyperSlots, UpdateReplayer

# (12, 16, 3, 3) shares the column count 144 of (16, 16, 3, 3): a zero-padded bucket.
MATRICES = [
    (8, 3, 3, 3),
    (16, 8, 3, 3),
    (16, 16, 3, 3),
    (12, 16, 3, 3),
    (16, 16, 3, 3),
    (24, 16),
    (16, 24),
]
VECTORS = [(8,), (16,), (16,), (24,)]


def make_params(seed: int = 0, dtype: torch.dtype = torch.float32) -> list[torch.nn.Parameter]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(s, generator=gen).to(dtype)) for s in MATRICES + VECTORS]


def groups(params: list[torch.nn.Parameter], **extra: Any) -> list[dict[str, Any]]:
    return split_groups(params, len(MATRICES), **extra)


def twins(
    *,
    flags: CaptureFlags | None = None,
    recorder: FakeRecorder | None = None,
    together: bool = True,
    **options: Any,
) -> tuple[list[torch.nn.Parameter], MuSGD, list[torch.nn.Parameter], MuSGD, FakeRecorder]:
    """An eager optimizer and a replaying one (fake recorder) over identical parameters; the
    replaying one records a step's groups together, or one by one (``together=False``)."""
    flags = {"capture_updates": True} if flags is None else flags
    recorder = FakeRecorder() if recorder is None else recorder
    ref_p, rep_p = make_params(), make_params()
    ref = MuSGD(groups(ref_p), lr=0.02, **options)
    rep = MuSGD(groups(rep_p), lr=0.02, **options, **flags, recorder=recorder)
    rep._update_replay.together = together
    return ref_p, ref, rep_p, rep, recorder


def beside_eager(
    ref_p: list[torch.nn.Parameter], rep_p: list[torch.nn.Parameter], *, together: bool = True
) -> tuple[MuSGD, MuSGD, FakeRecorder]:
    """An eager optimizer over ``ref_p`` and a replaying one (fake recorder) over ``rep_p``."""
    recorder = FakeRecorder()
    rep = MuSGD(groups(rep_p), lr=0.02, capture_updates=True, recorder=recorder)
    rep._update_replay.together = together
    return MuSGD(groups(ref_p), lr=0.02), rep, recorder


# Both ways a step's groups are recorded: together (the default) and one by one (where they
# cannot be together); each test below says what it counts in each.
TOGETHER = pytest.mark.parametrize("together", [True, False], ids=["together", "one-by-one"])


@pytest.fixture(params=[True, False], ids=["together", "one-by-one"])
def replay_backend(request: pytest.FixtureRequest) -> ReplayBackend:
    """The shared contracts (update_replay_contracts.py) on CPU, through the fake recorder,
    with a step's groups recorded together and one by one."""
    return ReplayBackend(
        "cpu-fake",
        torch.device("cpu"),
        tuple(MATRICES),
        tuple(VECTORS),
        FakeRecorder,
        together=request.param,
    )


@TOGETHER
@pytest.mark.parametrize("options", [{}, {"w_muon": 0.0}, {"foreach": False}])
def test_bucket_jobs_are_recorded_in_reverse_and_still_replay_exactly(
    options: dict[str, Any], together: bool
) -> None:
    """The matrix group's bucket jobs are recorded last first (warm-up and capture passes), as
    parallel branches may finish them: the replayed bits cannot depend on their order."""
    ref_p, ref, rep_p, rep, recorder = twins(together=together, **options)
    for step in range(4):
        step_both(ref_p, ref, rep_p, rep, step)
        assert_same(ref_p, rep_p, ref, rep)
    per_step = 1 if together else 2  # recordings of one set of keys, replays of one step
    assert (recorder.records, recorder.replays) == (per_step, 4 * per_step)
    foreach_buckets = options.get("foreach") is not False and options.get("w_muon") != 0.0
    assert recorder.reordered == (2 if foreach_buckets else 0)


def test_hyperparameter_types_in_groups_stay_native() -> None:
    """Replay never writes tensors (or anything) back into the param groups."""
    ref_p, ref, rep_p, rep, _ = twins(momentum=0, w_sgd=1)
    for step in range(3):
        step_both(ref_p, ref, rep_p, rep, step)
    for group in rep.param_groups:
        assert type(group["momentum"]) is int
        assert type(group["w_sgd"]) is int
        assert type(group["lr"]) is float
    assert_same(ref_p, rep_p, ref, rep)


def test_structural_changes_record_new_keys_and_stay_exact() -> None:
    ref_p, ref, rep_p, rep, recorder = twins(together=False)
    changes: list[dict[str, Any]] = [
        {},
        {"weight_decay": 0.0},
        {"w_muon": 0.0},
        {"nesterov": False},
        {"ns_steps": 4, "ns_coefficients": ((3.4445, -4.7750, 2.0315),) * 4},
    ]
    step_with_changes(ref_p, ref, rep_p, rep, changes)
    # Group 0 records once per structure; group 1 (vectors) only when its own structure changes.
    assert recorder.records == 5 + 1


def test_skipped_gradients_change_the_key_and_stay_exact() -> None:
    ref_p, ref, rep_p, rep, recorder = twins(together=False)
    skips = [frozenset(), frozenset({0, 7}), frozenset(), frozenset({2, 3}), frozenset({0, 7})]
    for step, skip in enumerate(skips):
        step_both(ref_p, ref, rep_p, rep, step, skip=skip)
        assert_same(ref_p, rep_p, ref, rep)
    assert recorder.records == 3 * 2 - 1  # the two {2, 3} group-1 layouts equal the full one
    assert rep._replay.stats.replays == 5 * 2


@TOGETHER
def test_replaced_parameter_or_buffer_storage_is_a_new_key(together: bool) -> None:
    """Recordings address parameters and buffers by storage: new storage must not be missed."""
    ref_p, ref, rep_p, rep, recorder = twins(together=together)
    step_both(ref_p, ref, rep_p, rep, 0)
    for ps, opt in ((ref_p, ref), (rep_p, rep)):
        ps[2].data = ps[2].data.clone()  # as model.to() or weight swapping does
        opt.state[ps[8]]["momentum_buffer"] = opt.state[ps[8]]["momentum_buffer"].clone()
    for step in range(1, 3):
        step_both(ref_p, ref, rep_p, rep, step)
        assert_same(ref_p, rep_p, ref, rep)
    # Both groups' storage changed: each group's key is new, and so is the step's.
    assert recorder.records == (2 if together else 4)


def test_a_group_that_cannot_be_recorded_sends_the_step_group_by_group() -> None:
    """A bfloat16 group beside a float32 one: the step's recording is refused once (its storage
    checked when its key is new), then every step goes group by group: the float32 group
    replays its own recording, the bfloat16 one runs eagerly, bit for bit as eager."""

    def make() -> list[torch.nn.Parameter]:
        params = make_params()
        vectors = params[len(MATRICES) :]
        return params[: len(MATRICES)] + [
            torch.nn.Parameter(v.detach().to(torch.bfloat16)) for v in vectors
        ]

    ref, rep, recorder = beside_eager(ref_p := make(), rep_p := make())
    for step in range(4):
        step_both(ref_p, ref, rep_p, rep, step)
        assert_same(ref_p, rep_p, ref, rep)
    assert recorder.records == 1, "the float32 group on its own"
    assert recorder.replays == 4
    assert rep._replay.stats.fallbacks["not-float32"] == 4
    assert len(rep._replay.step_cache) == 0


def test_groups_whose_keys_keep_changing_go_one_by_one_past_the_bound() -> None:
    """Each new set of group keys is a new recording of the whole step, holding every group's
    inputs and outputs; past ``STEP_RECORDINGS`` of them the step goes group by group, where
    an unchanged group keeps one recording whatever the others do. Every step stays exact."""
    ref_p, ref, rep_p, rep, recorder = twins()
    structures: list[dict[str, Any]] = [
        {"nesterov": True},
        {"nesterov": False},
        {"w_muon": 0.0, "nesterov": True},
        {"w_muon": 0.5, "nesterov": True},
        {"nesterov": False},
    ]
    step_with_changes(ref_p, ref, rep_p, rep, structures)
    assert len(rep._replay.step_cache) == STEP_RECORDINGS
    # Steps 0 and 1 recorded together; step 2's keys past the bound, one by one (both groups);
    # steps 3 and 4 have the keys of steps 0 and 1 again, whose recordings replay.
    assert recorder.records == STEP_RECORDINGS + 2
    assert rep._replay.stats.replays == len(structures) * 2
    assert not rep._replay.stats.fallbacks


def test_bound_reached_runs_new_groups_eagerly() -> None:
    ref_p, ref, rep_p, rep, recorder = twins(together=False)
    rep._replay.update_cache._bound = lambda: 1
    for step in range(3):
        step_both(ref_p, ref, rep_p, rep, step)
        assert_same(ref_p, rep_p, ref, rep)
    assert recorder.records == 1
    assert rep._replay.stats.fallbacks["bound"] == 3


def test_default_bound_covers_every_group() -> None:
    params = [torch.nn.Parameter(torch.randn(4)) for _ in range(3)]
    opt = MuSGD([{"params": [p]} for p in params], lr=0.1, capture_updates=True)
    assert opt._count_matrices() == 0
    assert opt._replay.update_cache._bound() == 3


def _fallback_params(kind: str) -> list[torch.nn.Parameter]:
    params = make_params()
    if kind == "non-contiguous":  # a (24, 16) matrix stored transposed
        params[5] = torch.nn.Parameter(params[5].detach().mT.contiguous().mT)
    if kind == "storage-offset":
        flat = torch.cat([torch.zeros(1), params[-1].detach().reshape(-1)])
        params[-1] = torch.nn.Parameter(flat[1:].view(params[-1].shape))
    return params


@TOGETHER
@pytest.mark.parametrize("kind", ["non-contiguous", "storage-offset"])
def test_parameter_layout_fallbacks(kind: str, together: bool) -> None:
    """A transposed parameter runs eagerly; one at an offset of its storage is recorded (by
    address, as the momentum buffers that lie back to back in one buffer are)."""
    ref_p, rep_p = _fallback_params(kind), _fallback_params(kind)
    ref, rep, recorder = beside_eager(ref_p, rep_p, together=together)
    for step in range(3):
        step_both(ref_p, ref, rep_p, rep, step)
    assert_same(ref_p, rep_p, ref, rep)
    if kind == "non-contiguous":
        assert rep._replay.stats.fallbacks[kind] == 3
        assert recorder.records == 1, "the other group still replays"
    else:
        assert not rep._replay.stats.fallbacks
        assert recorder.records == (1 if together else 2), "both groups are recorded"
        assert rep._replay.stats.replays == 6  # every step of both groups is a replay
    momentum = [rep.state[p]["momentum_buffer"] for p in rep_p]
    assert all(m.storage_offset() % 16 == 0 for m in momentum)
    assert len({m.untyped_storage().data_ptr() for m in momentum}) == 2  # one per group


def test_non_float32_groups_fall_back() -> None:
    ref_p, rep_p = make_params(dtype=torch.bfloat16), make_params(dtype=torch.bfloat16)
    ref, rep, recorder = beside_eager(ref_p, rep_p)
    for step in range(2):
        step_both(ref_p, ref, rep_p, rep, step)
    assert_same(ref_p, rep_p, ref, rep)
    assert recorder.records == 0
    assert rep._replay.stats.fallbacks["not-float32"] == 4


def _context_cases() -> list[tuple[str, Callable[[FakeRecorder, pytest.MonkeyPatch], None]]]:
    def device(rec: FakeRecorder, mp: pytest.MonkeyPatch) -> None:
        rec.device_type = "cuda"

    def capture(rec: FakeRecorder, mp: pytest.MonkeyPatch) -> None:
        rec.capture_underway = True

    def compiling(rec: FakeRecorder, mp: pytest.MonkeyPatch) -> None:
        mp.setattr(torch.compiler, "is_compiling", lambda: True)

    return [("device:cpu", device), ("capture", capture), ("compile", compiling)]


@pytest.mark.parametrize(("reason", "setup"), _context_cases())
def test_context_fallbacks(
    reason: str,
    setup: Callable[[FakeRecorder, pytest.MonkeyPatch], None],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ref_p, ref, rep_p, rep, recorder = twins()
    for step in range(2):
        set_grads(ref_p, step)
        ref.step()
        set_grads(rep_p, step)
        with monkeypatch.context() as mp:
            setup(recorder, mp)
            rep.step()
    assert_same(ref_p, rep_p, ref, rep)
    assert recorder.records == 0
    assert rep._replay.stats.fallbacks[reason] == 4


def test_autocast_and_requires_grad_gradients_fall_back() -> None:
    ref_p, ref, rep_p, rep, recorder = twins()
    for ps, opt in ((ref_p, ref), (rep_p, rep)):
        set_grads(ps, 0)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            opt.step()
        set_grads(ps, 1)
        for p in ps:
            assert p.grad is not None
            p.grad.requires_grad_(True)
        opt.step()
    assert_same(ref_p, rep_p, ref, rep)
    assert recorder.records == 0
    assert rep._replay.stats.fallbacks["autocast"] == 2
    assert rep._replay.stats.fallbacks["requires-grad"] == 2


@pytest.mark.parametrize("fail_in", ["warmup", "capture"])
def test_failed_pass_restores_every_tensor_before_continuing(fail_in: str) -> None:
    """Seed 003's review: a failure in the warm-up pass must restore state as the capture's does."""
    params = make_params()
    recorder = FakeRecorder()
    opt = MuSGD(groups(params), lr=0.02, capture_updates=True, recorder=recorder)
    set_grads(params, 0)
    opt.step()  # momentum is non-zero from here on, so a missing restore would show
    recorder.fail_in = fail_in  # the next recording's warm-up or capture pass fails
    opt._replay.clear()
    set_grads(params, 1)
    group = opt.param_groups[0]
    ps, grads = opt._gather(0, group)
    before = [t.clone() for t in (*ps, *grads, *opt._buffers(ps))]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result, after = record_first_group(opt, ("test-key",))
    assert result is None
    for b, a in zip(before, after, strict=True):
        assert torch.equal(b, a), "every tensor must be back to its value before the call"
    assert len(caught) == 1
    assert opt._replay.update_cache.admits(("test-key",)) == "not-recordable"


@TOGETHER
@pytest.mark.parametrize("fail_in", ["warmup", "capture"])
def test_failed_recording_continues_eagerly_warns_once_and_never_retries(
    fail_in: str, together: bool
) -> None:
    ref_p, ref, rep_p, rep, recorder = twins(
        recorder=FakeRecorder(fail_in=fail_in), together=together
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for step in range(4):
            step_both(ref_p, ref, rep_p, rep, step)
            assert_same(ref_p, rep_p, ref, rep)
    runtime = [w for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(runtime) == 1
    assert f"injected failure in the {fail_in.replace('warmup', 'warm-up')} pass" in str(
        runtime[0].message
    )
    # Together: the step's key failed once, then each group's on its own.
    assert recorder.records == (3 if together else 2), "each key failed once, never retried"
    assert len(rep._replay.update_cache) == len(rep._replay.step_cache) == 0


@TOGETHER
def test_a_key_recorded_before_is_captured_anew_without_a_warm_up(together: bool) -> None:
    """After a drop, no warm-up pass: its scratch (and the momentum snapshot it needs) would
    come on top of everything a training run holds at that point (WP-025)."""
    ref_p, ref, rep_p, rep, recorder = twins(together=together)
    per_step = 1 if together else 2
    for step in range(2):
        step_both(ref_p, ref, rep_p, rep, step)
    assert (recorder.records, recorder.warm_ups) == (per_step, per_step)
    rep._replay.clear()
    set_grads(rep_p, 2)
    clones = count_clones(rep.step, recorder)
    set_grads(ref_p, 2)
    ref.step()
    assert_same(ref_p, rep_p, ref, rep)
    assert (recorder.records, recorder.warm_ups) == (2 * per_step, per_step), (
        "captured anew, not warmed up"
    )
    assert clones == 0, "no snapshot of the momentum buffers where no warm-up runs"
    for step in range(3, 5):
        step_both(ref_p, ref, rep_p, rep, step)
        assert_same(ref_p, rep_p, ref, rep)


@TOGETHER
def test_a_failed_capture_without_warm_up_is_made_again_with_one(together: bool) -> None:
    ref_p, ref, rep_p, rep, recorder = twins(
        recorder=FakeRecorder(fail_cold=True), together=together
    )
    per_step = 1 if together else 2
    step_both(ref_p, ref, rep_p, rep, 0)
    rep._replay.clear()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a cold failure the warm path recovers is not warned of
        for step in range(1, 4):
            step_both(ref_p, ref, rep_p, rep, step)
            assert_same(ref_p, rep_p, ref, rep)
    stats = rep._replay.stats
    assert stats.fallbacks["cold-capture-failed"] == per_step, "once per key"
    assert (stats.recordings, stats.failures) == (2 * per_step, 0)
    assert recorder.warm_ups == 2 * per_step


def count_clones(fn: Callable[[], object], recorder: FakeRecorder) -> int:
    """How many ``aten.clone`` calls ``fn`` makes outside the fake's capture pass (which clones
    what each operation writes, to put it back)."""

    class Clones(TorchDispatchMode):
        count = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            if func is torch.ops.aten.clone.default and not recorder.in_capture:
                Clones.count += 1
            return func(*args, **(kwargs or {}))

    with Clones():  # type: ignore[no-untyped-call]
        fn()
    return Clones.count


@TOGETHER
def test_grad_scaler_inf_skip_leaves_parameters_and_momentum_untouched(together: bool) -> None:
    ref_p, ref, rep_p, rep, recorder = twins(together=together)
    scalers = [torch.amp.GradScaler("cpu", init_scale=2.0**8) for _ in range(2)]
    gen = torch.Generator().manual_seed(5)
    weights = [torch.randn(p.shape, generator=gen) for p in ref_p]
    for step in range(4):
        poisoned = step == 2
        snapshots = []
        for ps, opt, scaler in ((ref_p, ref, scalers[0]), (rep_p, rep, scalers[1])):
            opt.zero_grad(set_to_none=True)
            ws = [w * (step + 1) for w in weights]
            if poisoned:
                ws[3] = ws[3].clone().fill_(float("inf"))
            loss = sum((p * w).sum() for p, w in zip(ps, ws, strict=True))
            snapshots.append(
                [p.detach().clone() for p in ps]
                + [opt.state[p]["momentum_buffer"].clone() for p in ps if p in opt.state]
            )
            scaler.scale(loss).backward()  # type: ignore[arg-type]
            scaler.step(opt)
            scaler.update()
            if poisoned:
                now = [p.detach() for p in ps] + [
                    opt.state[p]["momentum_buffer"] for p in ps if p in opt.state
                ]
                assert all(torch.equal(a, b) for a, b in zip(snapshots[-1], now, strict=True))
        assert_same(ref_p, rep_p, ref, rep)
    assert recorder.records == (1 if together else 2)
    assert rep._replay.stats.replays == 3 * 2  # counted per group prepared


@TOGETHER
def test_state_dict_round_trip_keeps_types_and_bits_and_drops_recordings(together: bool) -> None:
    ref_p, ref, rep_p, rep, recorder = twins(together=together)
    cache = rep._replay.step_cache if together else rep._replay.update_cache
    per_step = 1 if together else 2
    for step in range(3):
        step_both(ref_p, ref, rep_p, rep, step)
    saved = rep.state_dict()
    assert all(set(s) == {"momentum_buffer"} for s in saved["state"].values())
    buffer = io.BytesIO()
    torch.save(saved, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=True)
    for key, group in zip(loaded["param_groups"], saved["param_groups"], strict=True):
        assert {k: type(v) for k, v in key.items()} == {k: type(v) for k, v in group.items()}
    for i, s in saved["state"].items():
        assert torch.equal(loaded["state"][i]["momentum_buffer"], s["momentum_buffer"])
        assert loaded["state"][i]["momentum_buffer"].dtype == s["momentum_buffer"].dtype
    assert len(cache) == per_step
    rep.load_state_dict(loaded)
    assert len(cache) == 0
    for step in range(3, 5):
        step_both(ref_p, ref, rep_p, rep, step)
        assert_same(ref_p, rep_p, ref, rep)
    assert recorder.records == 2 * per_step


@pytest.mark.parametrize("requested", [True, False])
def test_legacy_state_without_the_flag_takes_the_constructor_mode(requested: bool) -> None:
    opt = MuSGD(groups(make_params()), lr=0.02)
    saved = opt.state_dict()
    for group in saved["param_groups"]:
        del group["capture_updates"]
    fresh = MuSGD(groups(make_params()), lr=0.02, capture_updates=requested)
    fresh.load_state_dict(saved)
    assert [g["capture_updates"] for g in fresh.param_groups] == [requested, requested]


def _count_prepare(opt: MuSGD) -> list[int]:
    calls = [0]
    body = opt._engine.body

    def counting(*args: Any) -> list[Tensor]:
        calls[0] += 1
        return body(*args)

    opt._engine.body = counting
    return calls


def test_count_regression_no_eager_preparation_during_replayed_steps() -> None:
    params = make_params()
    opt = MuSGD(
        groups(params),
        lr=0.02,
        capture_updates=True,
        capture_orthogonalization=True,
        recorder=FakeRecorder(),
    )
    calls = _count_prepare(opt)
    set_grads(params, 0)
    opt.step()
    assert calls[0] > 0  # the recording's warm-up and capture passes
    calls[0] = 0
    for step in range(1, 4):
        set_grads(params, step)
        opt.step()
    assert calls[0] == 0, "replayed steps must not run the eager update preparation"


def test_count_regression_fails_when_replay_turns_eager(monkeypatch: pytest.MonkeyPatch) -> None:
    """The probe sees an update replay that silently became eager."""

    def eager_only(
        self: UpdateReplayer, index: int, step: StepRecord, *, body: PrepareFn
    ) -> list[Tensor]:
        return body(step)

    monkeypatch.setattr(UpdateReplayer, "prepare", eager_only)
    params = make_params()
    opt = MuSGD(groups(params), lr=0.02, capture_updates=True, recorder=FakeRecorder())
    opt._update_replay.together = False  # the group-by-group path, which the patch turns eager
    calls = _count_prepare(opt)
    for step in range(3):
        set_grads(params, step)
        opt.step()
    assert calls[0] == 3 * 2


class _CountFills(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.fills = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        if func.overloadpacket is torch.ops.aten.fill_:
            self.fills += 1
        return func(*args, **(kwargs or {}))


def test_hyper_slots_refill_only_changed_values() -> None:
    slots = HyperSlots(torch.device("cpu"))
    with _CountFills() as counter:
        slots.fill(Hyper(0.9, 0.0, 0.5, 0.5))
        slots.fill(Hyper(0.9, 0.0, 0.5, 0.5))
        slots.fill(Hyper(0.9, -0.0, 0.5, 0.25))
    assert counter.fills == 4 + 0 + 2
    expected = torch.tensor([0.9, -0.0, 0.5, 0.25], dtype=torch.float32)
    assert torch.equal(torch.stack(slots.tensors), expected)
    assert torch.signbit(slots.tensors[1]), "-0.0 is a change from 0.0 (it flips signed zeros)"
    assert all(t.dtype == torch.float32 and t.dim() == 0 for t in slots.tensors)


def test_cuda_padding_bound_replays_transposed_stacks_bit_for_bit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The CUDA bound (rows and columns padded, tall matrices transposed) applied on CPU."""
    monkeypatch.setitem(_functional.PAD_BOUNDS, "cpu", _functional.PAD_BOUNDS["cuda"])
    shapes = [(64, 32, 3, 3), (48, 40), (200, 96), (16, 8, 3, 3), (300, 20), (64,)]

    def make() -> list[torch.nn.Parameter]:
        gen = torch.Generator().manual_seed(5)
        return [torch.nn.Parameter(torch.randn(s, generator=gen)) for s in shapes]

    layout = _functional.build_layout(make(), None, pad=_functional.pad_bound(torch.device("cpu")))
    assert any(b.padded and any(b.transposed) for b in layout.buckets)
    for flags in ({"capture_updates": True}, {"capture_orthogonalization": True}):
        ref_p, rep_p = make(), make()
        ref = MuSGD(split_groups(ref_p, 5), lr=0.02)
        recorder = FakeRecorder()
        rep = MuSGD(split_groups(rep_p, 5), lr=0.02, **flags, recorder=recorder)  # type: ignore[arg-type]
        for step in range(3):
            step_both(ref_p, ref, rep_p, rep, step)
            assert_same(ref_p, rep_p, ref, rep)
        assert recorder.replays > 0


def _grads_with_layout(params: list[torch.nn.Parameter], step: int, kind: str) -> None:
    """Seeded gradients (as set_grads gives) laid out as ``kind`` in memory."""
    set_grads(params, step)
    for p in params:
        g = p.grad
        assert g is not None
        if kind == "channels-last" and g.dim() == 4:
            p.grad = g.to(memory_format=torch.channels_last)
        elif kind == "transposed" and g.dim() == 2:
            p.grad = g.mT.contiguous().mT
        elif kind == "offset":
            p.grad = torch.cat([torch.zeros(1), g.reshape(-1)])[1:].view(g.shape)


@TOGETHER
@pytest.mark.parametrize(
    ("kind", "fallbacks", "records"),
    [("channels-last", 0, 2), ("offset", 0, 2), ("transposed", 4, 1)],
)
def test_gradient_layouts_replay_or_fall_back_bit_identically(
    kind: str, fallbacks: int, records: int, together: bool
) -> None:
    """Channels-last gradients (cuDNN gives some) and gradients at a storage offset are copied
    into owned inputs of their layout and replayed; a transposed view runs eagerly. Either way
    the results are eager's, bit for bit. (``records`` one by one; together, both groups are
    one recording, and a step with a transposed view goes one by one.)"""
    if together and kind != "transposed":
        records = 1
    ref_p, rep_p = make_params(), make_params()
    ref, rep, recorder = beside_eager(ref_p, rep_p, together=together)
    for step in range(4):
        for ps, opt in ((ref_p, ref), (rep_p, rep)):
            _grads_with_layout(ps, step, kind)
            opt.step()
        assert_same(ref_p, rep_p, ref, rep)
    assert rep._replay.stats.fallbacks["non-contiguous"] == fallbacks
    assert recorder.records == records
    # Back to contiguous gradients: a new key where the layout changed (never a stale replay)
    # or where the group ran eagerly; the offset's recording is reused.
    step_both(ref_p, ref, rep_p, rep, 4)
    assert_same(ref_p, rep_p, ref, rep)
    assert recorder.records == records + (kind != "offset")


@TOGETHER
def test_channels_last_parameters_replay_bit_identically(together: bool) -> None:
    """A model converted to channels-last (as the Ultralytics trainer does on CUDA) has
    channels-last conv weights, gradients and momentum buffers: every group still replays."""
    ref_p, rep_p = make_params(), make_params()
    for ps in (ref_p, rep_p):
        for i, p in enumerate(ps):
            if p.dim() == 4:
                ps[i] = torch.nn.Parameter(p.detach().to(memory_format=torch.channels_last))
    ref, rep, recorder = beside_eager(ref_p, rep_p, together=together)
    for step in range(3):
        for ps, opt in ((ref_p, ref), (rep_p, rep)):
            set_grads(ps, step)
            for p in ps:
                if p.grad is not None and p.dim() == 4:
                    p.grad = p.grad.to(memory_format=torch.channels_last)
            opt.step()
        assert_same(ref_p, rep_p, ref, rep)
    assert not rep._replay.stats.fallbacks
    assert recorder.records == (1 if together else 2)
    assert rep.state[rep_p[1]]["momentum_buffer"].is_contiguous(memory_format=torch.channels_last)
