"""The trainer benchmark's identity checks: replay against eager inside the real trainer.

* ``identity``: our trainer (both replay flags on) trains for at least ``--identity-steps``
  optimizer steps with the trainer's lr/momentum warm-up active; after every step a shadow eager
  ``UltralyticsMuSGD`` over copies of the parameters, given the same gradients and the group
  values the trainer wrote, must hold bit-identical parameters and buffers, and every call of the
  replayed gradient clipping must give the eager ``clip_grad_norm_``'s bits.
* ``network``: our trainer three times, deterministic, for ``--network-iters`` iterations: the
  network eager twice (is the run reproducible at all?) and captured once
  (``capture_network=True``). The captured run must give the eager run's losses (float hex) and
  final state (sha256), with every iteration replayed but the first.
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from musgd import GradClipReplay
from musgd.bench._identity import same_bits
from musgd.bench._train_bench import hash_tensors
from musgd.bench._ul_plan import (
    Budget,
    default_run_s,
    epochs_for,
    identity_epochs,
    nbs_setting,
    network_nbs,
)
from musgd.bench._ul_runs import (
    ema_stats,
    loss_stats,
    network_stats,
    ours_options,
    replay_stats,
    stats_dict,
    train_kwargs,
)
from musgd.ultralytics import CLIP_MAX_NORM, UltralyticsMuSGD, musgd_trainer, task_trainer

__all__ = [
    "ClipCheck",
    "ShadowCheck",
    "network_run",
    "run_identity",
    "run_network_identity",
    "warmup_span",
]


def warmup_span(trace: Sequence[float]) -> int:
    """Leading steps before ``trace`` settles on its last value (0: constant throughout)."""
    for i in range(len(trace)):
        if all(v == trace[-1] for v in trace[i:]):
            return i
    return 0


class ShadowCheck:
    """After each step of ``opt``, an eager twin given the same inputs must match bit for bit."""

    def __init__(self, opt: UltralyticsMuSGD) -> None:
        self.opt = opt
        self.real = [p for g in opt.param_groups for p in g["params"]]
        self.shadow = [torch.nn.Parameter(p.detach().clone()) for p in self.real]
        groups, k = [], 0
        for g in opt.param_groups:
            n = len(g["params"])
            settings = {key: v for key, v in g.items() if key != "params"}
            settings.update(capture_updates=False, capture_orthogonalization=False)
            groups.append({**settings, "params": self.shadow[k : k + n]})
            k += n
        self.eager = UltralyticsMuSGD(groups, muon=opt.muon, sgd=opt.sgd)
        self.steps = 0
        self.mismatched: list[int] = []
        self.lr_trace: list[float] = []
        self.momentum_trace: list[float] = []
        # (shape, strides) of every non-contiguous gradient seen: what the replay must take.
        self.noncontiguous: set[tuple[tuple[int, ...], tuple[int, ...]]] = set()
        opt.register_step_pre_hook(self.before)
        opt.register_step_post_hook(self.after)

    @torch.no_grad()
    def before(self, opt: Any, args: Any, kwargs: Any) -> None:
        if self.steps == 0:  # the trainer may touch parameters between build and first step
            for s, p in zip(self.shadow, self.real, strict=True):
                s.copy_(p)
        for g_real, g_eager in zip(opt.param_groups, self.eager.param_groups, strict=True):
            for key in ("lr", "momentum", "weight_decay", "nesterov"):
                g_eager[key] = g_real[key]
        self.lr_trace.append(float(opt.param_groups[0]["lr"]))
        self.momentum_trace.append(float(opt.param_groups[0]["momentum"]))
        for s, p in zip(self.shadow, self.real, strict=True):
            s.grad = None if p.grad is None else p.grad.clone()
            if p.grad is not None and not p.grad.is_contiguous():
                self.noncontiguous.add((tuple(p.grad.shape), tuple(p.grad.stride())))

    @torch.no_grad()
    def after(self, opt: Any, args: Any, kwargs: Any) -> None:
        self.eager.step()
        same = True
        for s, p in zip(self.shadow, self.real, strict=True):
            if not torch.equal(s, p):
                same = False
                break
            st_e, st_r = self.eager.state.get(s, {}), opt.state.get(p, {})
            if st_e.keys() != st_r.keys() or not all(torch.equal(st_e[k], st_r[k]) for k in st_e):
                same = False
                break
        if not same:
            self.mismatched.append(self.steps)
        self.steps += 1


class ClipCheck:
    """Each call of the trainer's replayed clip must give the eager ``clip_grad_norm_``'s bits."""

    def __init__(self, clip: GradClipReplay) -> None:
        self.clip = clip
        self.calls = 0
        self.mismatched: list[int] = []

    @torch.no_grad()
    def __call__(self, parameters: Any) -> torch.Tensor:
        params = list(parameters)
        holders = []
        for p in params:
            if p.grad is not None:
                holder = torch.empty_like(p)
                holder.grad = p.grad.clone(memory_format=torch.preserve_format)
                holders.append(holder)
        expected = torch.nn.utils.clip_grad_norm_(holders, self.clip.max_norm, self.clip.norm_type)
        total = self.clip(params)
        grads = [p.grad for p in params if p.grad is not None]
        same = same_bits(total, expected) and all(
            h.grad is not None and same_bits(g, h.grad) for g, h in zip(grads, holders, strict=True)
        )
        if not same:
            self.mismatched.append(self.calls)
        self.calls += 1
        return total


def run_identity(args: argparse.Namespace, data: Path, budget: Budget) -> dict[str, Any]:
    from ultralytics import YOLO

    base = musgd_trainer(task_trainer(args.task))
    checks: list[ShadowCheck] = []
    clip_checks: list[ClipCheck] = []
    scales: list[float] = []

    class IdentityTrainer(base):  # type: ignore[misc,valid-type]
        def build_optimizer(self, *a: Any, **k: Any) -> Any:
            opt = super().build_optimizer(*a, **k)
            checks.append(ShadowCheck(opt))
            clip_checks.append(ClipCheck(GradClipReplay(CLIP_MAX_NORM)))
            self.musgd_clip = clip_checks[-1]
            return opt

    def batch_end(trainer: Any) -> None:
        scaler = getattr(trainer, "scaler", None)
        scales.append(float(scaler.get_scale()) if scaler is not None else math.nan)

    batch = args.identity_batch
    ipe = math.ceil(args.n_train / batch)
    epochs = identity_epochs(args.identity_steps, ipe)
    model = YOLO(args.model)
    model.add_callback("on_train_batch_end", batch_end)
    kw = train_kwargs(args, data, batch, epochs)
    kw.update(seed=0, name="identity", trainer=IdentityTrainer)
    start = time.perf_counter()
    model.train(**kw)
    budget.record("identity", time.perf_counter() - start)
    check, clip_check = checks[-1], clip_checks[-1]
    lr, mom = check.lr_trace, check.momentum_trace
    steps = check.steps
    return {
        "batch": batch,
        "nbs": nbs_setting(args),
        "imgsz": args.imgsz,
        "epochs": epochs,
        "iterations": len(scales),
        "steps": steps,
        "steps_target": args.identity_steps,
        "target_met": steps >= args.identity_steps,
        # Iterations whose optimizer step the gradient scaler skipped (inf/nan under AMP).
        "skipped_steps": len(scales) - steps,
        "scale_first_last": [scales[0], scales[-1]] if scales else None,
        "mismatched_steps": check.mismatched,
        "bit_identical": steps > 0 and not check.mismatched and not clip_check.mismatched,
        # The replayed gradient clipping against the eager call, at every optimizer step.
        "clip_calls": clip_check.calls,
        "clip_mismatched_calls": clip_check.mismatched,
        "clip_replay": stats_dict(clip_check.clip.stats),
        "amp": bool(getattr(model.trainer, "amp", False)),
        "warmup_active": warmup_span(mom) > 0,
        "warmup_steps": warmup_span(mom),
        "lr_first_last": [lr[0], lr[-1]] if lr else None,
        "momentum_first_last": [mom[0], mom[-1]] if mom else None,
        "replay": replay_stats(check.opt),
        "noncontiguous_gradients": [list(map(list, t)) for t in sorted(check.noncontiguous)],
    }


def network_run(
    args: argparse.Namespace, data: Path, *, capture: bool, name: str
) -> dict[str, Any]:
    """One deterministic training run of ours, the network eager or captured: each iteration's
    loss (as float hex: exact) and the digest of the final model state."""
    from ultralytics import YOLO

    losses: list[list[str]] = []

    def batch_end(trainer: Any) -> None:
        losses.append([float(x).hex() for x in trainer.loss.detach().reshape(-1).tolist()])

    batch = args.identity_batch
    ipe = math.ceil(args.n_train / batch)
    model = YOLO(args.model)
    model.add_callback("on_train_batch_end", batch_end)
    kw = train_kwargs(args, data, batch, epochs_for(args.network_iters, ipe))
    kw.update(
        nbs=network_nbs(args),
        seed=0,
        deterministic=True,
        name=name,
        trainer=musgd_trainer(
            task_trainer(args.task), **{**ours_options(args), "capture_network": capture}
        ),
    )
    model.train(**kw)
    return {
        "losses": losses,
        # Equal digests, equal bits (dtypes, shapes and bytes of the state, in order).
        "state_sha256": hash_tensors(model.trainer.model.state_dict().values()),
        "network": network_stats(model.trainer),
        "loss": loss_stats(model.trainer),
        "ema_replay": ema_stats(model.trainer),
        "network_reason": model.trainer.__dict__.get("musgd_network_reason"),
        "channels_last": model.trainer.musgd_channels_last,
    }


def run_network_identity(args: argparse.Namespace, data: Path, budget: Budget) -> dict[str, Any]:
    """Ours twice with the eager network (is the run reproducible at all?) and once with the
    network captured: the captured run must give the eager run's losses and final state, bit
    for bit, with the network replayed at every iteration but each layout's first two."""
    ipe = math.ceil(args.n_train / args.identity_batch)
    epochs = epochs_for(args.network_iters, ipe)
    default = default_run_s(epochs * ipe, epochs, per_iteration_s=args.per_iteration_s)
    runs: dict[str, dict[str, Any]] = {}
    for name, capture in (("eager", False), ("eager_again", False), ("captured", True)):
        if not budget.admit(f"network {name}", "network", default):
            return {"skipped": budget.skipped[-1], "target_met": False}
        start = time.perf_counter()
        runs[name] = network_run(args, data, capture=capture, name=f"network-{name}")
        budget.record("network", time.perf_counter() - start)
    eager, again, captured = runs["eager"], runs["eager_again"], runs["captured"]

    def same(a: dict[str, Any], b: dict[str, Any]) -> bool:
        return bool(a["losses"] == b["losses"] and a["state_sha256"] == b["state_sha256"])

    first_differing = next(
        (
            i
            for i, (a, b) in enumerate(zip(eager["losses"], captured["losses"], strict=False))
            if a != b
        ),
        None,
    )
    stats = captured["network"] or {}
    fallbacks = stats.get("fallbacks", {})
    # Every iteration replayed but each layout's first (eager by design), and nothing else eager.
    replayed_all = bool(stats) and set(fallbacks) <= {"first-call"}
    replayed_all = replayed_all and stats["replays"] + fallbacks.get("first-call", 0) == len(
        captured["losses"]
    )
    return {
        "batch": args.identity_batch,
        "nbs": network_nbs(args),
        "imgsz": args.imgsz,
        "task": args.task,
        # The configuration both runs share (capture_network aside): layout and compilation.
        "ours": {k: v for k, v in ours_options(args).items() if k != "capture_network"},
        "channels_last": captured["channels_last"],
        "iterations": len(captured["losses"]),
        "eager_reproducible": same(eager, again),
        "bit_identical": same(eager, captured),
        "first_differing_iteration": first_differing,
        "replayed_all": replayed_all,
        "target_met": replayed_all and same(eager, captured) and same(eager, again),
        "recordings": stats.get("recordings"),
        "replays": stats.get("replays"),
        "network": captured["network"],
        "network_reason": captured["network_reason"],
        "state_sha256": {name: run["state_sha256"] for name, run in runs.items()},
    }
