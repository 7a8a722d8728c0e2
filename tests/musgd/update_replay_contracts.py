"""Update-replay contracts with one body for both recorders: the CPU fake and CUDA graphs.

tests/musgd/test_update_replay.py (CPU, ``FakeRecorder``) and
tests/cuda/test_update_replay_cuda.py (CUDA, ``CudaGraphRecorder``) each define a
``replay_backend`` fixture and import these tests, so each contract runs in both lanes from the
same code. Every comparison is ``torch.equal`` against an eager twin fed the same gradients.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import torch
from replay_common import CaptureFlags, assert_same, split_groups, step_both

from musgd import MuSGD
from musgd._replay import Recorder

Shape = tuple[int, ...]


@dataclass(frozen=True)
class ReplayBackend:
    """Where the contracts run: the device, the parameter shapes and a recorder factory."""

    name: str
    device: torch.device
    matrices: tuple[Shape, ...]
    vectors: tuple[Shape, ...]
    new_recorder: Callable[[], Recorder]
    # Whether a step's groups share one recording (the default) or go one by one (the path
    # that serves where they cannot share one).
    together: bool = True

    def recordings(self, groups: int) -> int:
        """The recordings one set of keys makes for ``groups`` groups."""
        return 1 if self.together else groups

    def set_mode(self, opt: MuSGD) -> MuSGD:
        """``opt`` preparing its groups together or one by one, as this backend says."""
        opt._update_replay.together = self.together
        return opt

    def make_params(self, seed: int = 0) -> list[torch.nn.Parameter]:
        gen = torch.Generator().manual_seed(seed)
        return [
            torch.nn.Parameter(torch.randn(s, generator=gen).to(self.device))
            for s in self.matrices + self.vectors
        ]

    def groups(self, params: list[torch.nn.Parameter]) -> list[dict[str, Any]]:
        return split_groups(params, len(self.matrices))

    def replaying(self, params: list[torch.nn.Parameter], **options: Any) -> MuSGD:
        """A MuSGD with ``capture_updates`` (unless ``options`` says otherwise) and a recorder."""
        options = {"capture_updates": True, **options}
        opt = MuSGD(self.groups(params), lr=0.02, recorder=self.new_recorder(), **options)
        return self.set_mode(opt)

    def twins(
        self, flags: CaptureFlags | None = None, **options: Any
    ) -> tuple[list[torch.nn.Parameter], MuSGD, list[torch.nn.Parameter], MuSGD]:
        """An eager optimizer and a replaying one over identical parameters."""
        ref_p, rep_p = self.make_params(), self.make_params()
        ref = MuSGD(self.groups(ref_p), lr=0.02, **options)
        rep = self.replaying(rep_p, **(flags or {}), **options)
        return ref_p, ref, rep_p, rep


CONFIGS = [
    {},
    {"nesterov": False},
    {"w_muon": 0.0},
    {"nesterov": False, "w_sgd": 0.0},
    {"foreach": False},
    {"ns_dtype": torch.float32},
    {"momentum": 0.0, "ns_steps": 3},
    {"momentum": 0.0, "w_muon": 1.0, "ns_steps": 3},
]


@pytest.mark.parametrize("options", CONFIGS)
@pytest.mark.parametrize("both", [False, True])
def test_replayed_steps_match_eager_with_one_replay_per_group(
    replay_backend: ReplayBackend, options: dict[str, Any], both: bool
) -> None:
    ref_p, ref, rep_p, rep = replay_backend.twins(
        {"capture_updates": True, "capture_orthogonalization": both}, **options
    )
    for step in range(6):
        step_both(ref_p, ref, rep_p, rep, step)
        assert_same(ref_p, rep_p, ref, rep)
    stats = rep._replay.stats
    assert (stats.recordings, stats.replays, stats.failures) == (
        replay_backend.recordings(2),
        6 * 2,
        0,
    ), "one per set of keys; replays counted per group"
    assert len(rep._replay.orth_cache) == 0, "Newton-Schulz runs inside the group's recording"


@pytest.mark.parametrize("both", [False, True])
def test_recordings_dropped_and_made_anew_match_eager(
    replay_backend: ReplayBackend, both: bool
) -> None:
    """A drop (a network joining the shared pool drops the optimizer's recordings) leaves
    keys recorded before: they are captured anew without a warm-up, and replay exactly."""
    ref_p, ref, rep_p, rep = replay_backend.twins(
        {"capture_updates": True, "capture_orthogonalization": both}
    )
    for step in range(6):
        if step in (2, 4):
            rep._replay.clear()
        step_both(ref_p, ref, rep_p, rep, step)
        assert_same(ref_p, rep_p, ref, rep)
    stats = rep._replay.stats
    assert (stats.recordings, stats.replays, stats.failures) == (
        3 * replay_backend.recordings(2),
        6 * 2,
        0,
    )
    assert "cold-capture-failed" not in stats.fallbacks, "made anew without a warm-up"


def test_hyperparameter_schedules_are_honoured_without_rerecording(
    replay_backend: ReplayBackend,
) -> None:
    ref_p, ref, rep_p, rep = replay_backend.twins()
    scheds = [torch.optim.lr_scheduler.LambdaLR(o, lambda s: 1.0 / (1 + s)) for o in (ref, rep)]
    for step in range(8):
        for opt in (ref, rep):
            for group in opt.param_groups:
                # A warm-up schedule: every value changes every iteration.
                group["momentum"] = 0.8 + 0.02 * step
                group["w_muon"] = 0.3 + 0.05 * step
                group["w_sgd"] = 0.7 - 0.05 * step
                if group["weight_decay"]:
                    group["weight_decay"] = 0.01 * (step + 1)
        step_both(ref_p, ref, rep_p, rep, step)
        for sched in scheds:
            sched.step()
        assert_same(ref_p, rep_p, ref, rep)
    stats = rep._replay.stats
    assert (stats.recordings, stats.replays) == (replay_backend.recordings(2), 8 * 2)


def test_resume_mid_run_matches_an_uninterrupted_run(replay_backend: ReplayBackend) -> None:
    ref_p, ref, first_p, first = replay_backend.twins()
    for step in range(4):
        step_both(ref_p, ref, first_p, first, step)
    buffer = io.BytesIO()
    torch.save(first.state_dict(), buffer)
    buffer.seek(0)
    resumed_p = [torch.nn.Parameter(p.detach().clone()) for p in first_p]
    resumed = replay_backend.replaying(resumed_p)
    resumed.load_state_dict(torch.load(buffer, weights_only=True))
    for step in range(4, 8):
        step_both(ref_p, ref, resumed_p, resumed, step)
    assert_same(ref_p, resumed_p, ref, resumed)


def test_hyperparameters_held_in_device_tensors_replay_their_current_values(
    replay_backend: ReplayBackend,
) -> None:
    """Hyperparameters held in float32 0-d tensors on the parameters' device reach a recording
    through device copies (never read on the host), and in-place changes between steps (an
    LRScheduler's on ``lr``) reach every replay: bit-identical to the eager twin holding its
    own tensors of the same values."""
    device = replay_backend.device
    values = {"lr": 0.02, "momentum": 0.9, "weight_decay": 0.01, "w_muon": 0.4, "w_sgd": 0.6}

    def held() -> dict[str, torch.Tensor]:
        return {k: torch.tensor(v, dtype=torch.float32, device=device) for k, v in values.items()}

    ref_p, rep_p = replay_backend.make_params(), replay_backend.make_params()
    ref_t, rep_t = held(), held()
    ref = MuSGD(replay_backend.groups(ref_p), **ref_t)  # type: ignore[arg-type]
    rep = replay_backend.set_mode(
        MuSGD(
            replay_backend.groups(rep_p),
            capture_updates=True,
            recorder=replay_backend.new_recorder(),
            **rep_t,  # type: ignore[arg-type]
        )
    )
    scheds = [torch.optim.lr_scheduler.LambdaLR(o, lambda s: 1.0 / (1 + s)) for o in (ref, rep)]
    for step in range(6):
        for tensors in (ref_t, rep_t):
            tensors["momentum"].fill_(0.8 + 0.02 * step)
            tensors["w_muon"].fill_(0.3 + 0.05 * step)
        step_both(ref_p, ref, rep_p, rep, step)
        for sched in scheds:
            sched.step()
        assert_same(ref_p, rep_p, ref, rep)
    assert rep.param_groups[0]["lr"] is rep_t["lr"], "the scheduler fills the tensor in place"
    stats = rep._replay.stats
    assert (stats.recordings, stats.replays, stats.failures) == (
        replay_backend.recordings(2),
        6 * 2,
        0,
    )
