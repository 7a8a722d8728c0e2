"""YOLO26n with the Ultralytics trainer: stock MuSGD against ours, and replay bit-identity.

Two parts, one evidence file each, on a synthetic YOLO-format dataset generated offline:

* ``identity``: our trainer (both replay flags on) trains YOLO26n for ``--identity-steps``
  optimizer steps with the trainer's lr/momentum warm-up active; after every step a shadow eager
  ``UltralyticsMuSGD`` over copies of the parameters, given the same gradients and the group
  values the trainer wrote, must hold bit-identical parameters and buffers (``torch.equal``).
* ``train``: per batch size, stock ``optimizer=MuSGD``, ours (``trainer=MuSGDTrainer``), both
  with seed 0, and stock again with seed 1 (the run-to-run noise of the loss curve); per-
  iteration time (data wait included), in-loop step time (batch start to batch end, CUDA
  synchronized), epoch times and per-iteration losses. ``nbs`` equals the batch, so the
  optimizer steps every iteration, as in the complete-step figures of the compatibility spec.

Usage (GPU, about 4 minutes on an H200): ``python scripts/ultralytics_gpu.py --device cuda
--out $OUT``; on CPU: ``--device cpu --quick``.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from musgd.bench import build_evidence, summarize, write_evidence, write_synthetic_dataset
from musgd.ultralytics import UltralyticsMuSGD, musgd_trainer, require_ultralytics

SKIP_FIRST = 10  # iterations left out of the timing medians: recording, cuDNN autotuning


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


class RunLog:
    """Ultralytics callbacks that time iterations and epochs and keep each iteration's loss."""

    def __init__(self, device: str) -> None:
        self.device = device
        self.iter_ms: list[float] = []
        self.step_ms: list[float] = []
        self.epoch_s: list[float] = []
        self.losses: list[float] = []
        self._batch_start = 0.0
        self._last_end: float | None = None
        self._epoch_start = 0.0

    def attach(self, model: Any) -> None:
        model.add_callback("on_train_epoch_start", self.epoch_start)
        model.add_callback("on_train_epoch_end", self.epoch_end)
        model.add_callback("on_train_batch_start", self.batch_start)
        model.add_callback("on_train_batch_end", self.batch_end)

    def epoch_start(self, trainer: Any) -> None:
        _sync(self.device)
        self._epoch_start = time.perf_counter()
        self._last_end = None

    def epoch_end(self, trainer: Any) -> None:
        _sync(self.device)
        self.epoch_s.append(time.perf_counter() - self._epoch_start)

    def batch_start(self, trainer: Any) -> None:
        _sync(self.device)
        self._batch_start = time.perf_counter()

    def batch_end(self, trainer: Any) -> None:
        _sync(self.device)
        now = time.perf_counter()
        self.step_ms.append((now - self._batch_start) * 1e3)
        if self._last_end is not None:
            self.iter_ms.append((now - self._last_end) * 1e3)
        self._last_end = now
        self.losses.append(_loss_value(getattr(trainer, "loss_items", None)))


def _loss_value(items: Any) -> float:
    """The sum of an iteration's loss components (a tensor, or a dict of them)."""
    if items is None:
        return math.nan
    if isinstance(items, dict):
        return float(sum(float(torch.as_tensor(v).sum()) for v in items.values()))
    return float(torch.as_tensor(items).sum())


def _train_kwargs(args: argparse.Namespace, data: Path, batch: int, epochs: int) -> dict[str, Any]:
    return {
        "data": str(data),
        "epochs": epochs,
        "imgsz": args.imgsz,
        "batch": batch,
        "nbs": batch,  # the optimizer steps every iteration
        "device": 0 if args.device == "cuda" else "cpu",
        "workers": args.workers,
        "cache": "ram",
        "plots": False,
        "val": False,
        "project": str(args.work / "runs"),
        "exist_ok": True,
        "verbose": False,
        "deterministic": False,
        "amp": args.amp,
    }


def _summary(values: list[float]) -> dict[str, float] | None:
    kept = values[SKIP_FIRST:] if len(values) > SKIP_FIRST + 2 else values
    if not kept:
        return None
    s = summarize(kept)
    return {"median": s.median, "min": s.min, "max": s.max, "count": s.count}


def _smooth(values: list[float], width: int = 10) -> list[float]:
    out: list[float] = []
    for i in range(len(values)):
        window = values[max(0, i - width + 1) : i + 1]
        out.append(statistics.fmean(window))
    return out


def _mean_abs_gap(a: list[float], b: list[float]) -> float | None:
    n = min(len(a), len(b))
    if n == 0:
        return None
    sa, sb = _smooth(a[:n]), _smooth(b[:n])
    return statistics.fmean(abs(x - y) for x, y in zip(sa, sb, strict=True))


def run_train(args: argparse.Namespace, data: Path, n_train: int) -> dict[str, Any]:
    """Stock seed 0, ours seed 0, stock seed 1, for each batch size."""
    from ultralytics import YOLO

    trainer_cls = musgd_trainer()
    per_batch: dict[str, Any] = {}
    for batch in args.batch_sizes:
        iters_per_epoch = math.ceil(n_train / batch)
        epochs = max(1, math.ceil(args.iters / iters_per_epoch))
        arms: dict[str, Any] = {}
        for arm, seed in (("stock", 0), ("ours", 0), ("stock_seed1", 1)):
            log = RunLog(args.device)
            model = YOLO("yolo26n.yaml")
            log.attach(model)
            kw = _train_kwargs(args, data, batch, epochs)
            kw.update(seed=seed, name=f"b{batch}-{arm}")
            if arm == "ours":
                kw["trainer"] = trainer_cls
            else:
                kw["optimizer"] = "MuSGD"
            start = time.perf_counter()
            model.train(**kw)
            total = time.perf_counter() - start
            opt = model.trainer.optimizer
            arms[arm] = {
                "optimizer": type(opt).__name__,
                "amp": bool(getattr(model.trainer, "amp", False)),
                "epochs": epochs,
                "iterations": len(log.step_ms),
                "iteration_ms": _summary(log.iter_ms),
                "step_ms": _summary(log.step_ms),
                "epoch_s": log.epoch_s,
                "run_s": total,
                "losses": log.losses,
                "replay": _replay_stats(opt),
            }
            timing = {k: arms[arm][k] for k in ("step_ms", "iteration_ms")}
            print(f"batch {batch} {arm}: {timing}")
        stock, ours = arms["stock"], arms["ours"]
        result: dict[str, Any] = {"arms": arms}
        for key in ("iteration_ms", "step_ms"):
            if stock[key] and ours[key]:
                result[f"{key}_saving"] = 1.0 - ours[key]["median"] / stock[key]["median"]
        result["loss_gap_ours_vs_stock"] = _mean_abs_gap(ours["losses"], stock["losses"])
        result["loss_gap_stock_seed1_vs_stock"] = _mean_abs_gap(
            arms["stock_seed1"]["losses"], stock["losses"]
        )
        per_batch[str(batch)] = result
    return {"imgsz": args.imgsz, "train_images": n_train, "batches": per_batch}


def _replay_stats(opt: Any) -> dict[str, Any] | None:
    replay = getattr(opt, "_replay", None)
    if replay is None:
        return None
    stats = replay.stats
    return {
        "recordings": stats.recordings,
        "replays": stats.replays,
        "failures": stats.failures,
        "fallbacks": dict(stats.fallbacks),
    }


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


def run_identity(args: argparse.Namespace, data: Path, n_train: int) -> dict[str, Any]:
    from ultralytics import YOLO

    base = musgd_trainer()
    checks: list[ShadowCheck] = []

    class IdentityTrainer(base):  # type: ignore[misc,valid-type]
        def build_optimizer(self, *a: Any, **k: Any) -> Any:
            opt = super().build_optimizer(*a, **k)
            checks.append(ShadowCheck(opt))
            return opt

    batch = args.identity_batch
    epochs = math.ceil(args.identity_steps / math.ceil(n_train / batch))
    model = YOLO("yolo26n.yaml")
    kw = _train_kwargs(args, data, batch, epochs)
    kw.update(seed=0, name="identity", trainer=IdentityTrainer)
    model.train(**kw)
    check = checks[-1]
    lr, mom = check.lr_trace, check.momentum_trace
    return {
        "batch": batch,
        "imgsz": args.imgsz,
        "epochs": epochs,
        "steps": check.steps,
        "mismatched_steps": check.mismatched,
        "bit_identical": check.steps > 0 and not check.mismatched,
        "amp": bool(getattr(model.trainer, "amp", False)),
        "warmup_active": len(set(lr[: min(len(lr), 100)])) > 1,
        "lr_first_last": [lr[0], lr[-1]] if lr else None,
        "momentum_first_last": [mom[0], mom[-1]] if mom else None,
        "replay": _replay_stats(check.opt),
    }


def write_loss_chart(train: dict[str, Any], path: Path) -> Path:
    """Loss curves (10-iteration running mean) of each batch size's three runs, overlaid."""
    import matplotlib as mpl

    mpl.use("Agg")
    from matplotlib.figure import Figure

    batches = train["batches"]
    figure = Figure(figsize=(5.0 * len(batches), 3.6), layout="constrained")
    axes = figure.subplots(1, len(batches), squeeze=False)[0]
    labels = {
        "stock": "stock MuSGD, seed 0",
        "ours": "ours, seed 0",
        "stock_seed1": "stock, seed 1",
    }
    for ax, (batch, result) in zip(axes, batches.items(), strict=True):
        for arm, label in labels.items():
            losses = result["arms"][arm]["losses"]
            ax.plot(_smooth(losses), label=label, linewidth=1.2)
        ax.set_title(f"YOLO26n, batch {batch}, {train['imgsz']} px")
        ax.set_xlabel("iteration")
        ax.set_ylabel("training loss (running mean of 10)")
        ax.legend(fontsize="small")
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, for a CPU check")
    parser.add_argument("--parts", default="identity,train")
    parser.add_argument("--batch-sizes", default="4,16")
    parser.add_argument(
        "--amp",
        choices=("true", "false"),
        default="true",
        help="the trainer's mixed precision (false skips its AMP check, which wants a download)",
    )
    parser.add_argument("--out", type=Path, default=Path("out"))
    parser.add_argument("--commit", default=None, help="the full sha the tree came from")
    parser.add_argument(
        "--chart-from", type=Path, default=None, help="only draw the loss chart of this evidence"
    )
    parser.add_argument(
        "--work", type=Path, default=None, help="dataset and runs (default: a temporary folder)"
    )
    args = parser.parse_args(argv)
    if args.chart_from is not None:
        train = json.loads(args.chart_from.read_text(encoding="utf-8"))["results"]
        print("wrote", write_loss_chart(train, args.out / "ultralytics-loss.png"))
        return 0
    require_ultralytics()
    args.batch_sizes = [int(b) for b in args.batch_sizes.split(",")]
    args.amp = args.amp == "true"
    if args.quick:
        args.imgsz, n_train, args.iters, args.workers = 64, 16, 8, 0
        args.identity_steps, args.identity_batch = 12, 4
    else:
        args.imgsz, n_train, args.iters, args.workers = 640, 320, 60, 8
        args.identity_steps, args.identity_batch = 200, 8
    if args.device == "cuda" and not torch.cuda.is_available():
        print("no CUDA device: use --device cpu --quick", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    if args.work is None:
        args.work = Path(tempfile.mkdtemp(prefix="musgd-ultralytics-"))
    data = write_synthetic_dataset(
        args.work / "data", train_images=n_train, val_images=4, size=args.imgsz, seed=0
    ).yaml
    device = torch.device("cuda" if args.device == "cuda" else "cpu")
    parts = args.parts.split(",")
    argv_used = sys.argv[1:] if argv is None else argv
    rc = 0
    if "identity" in parts:
        result = run_identity(args, data, n_train)
        print("identity:", {k: v for k, v in result.items() if k != "replay"})
        evidence = build_evidence(
            "ultralytics-identity", result, device=device, argv=argv_used, commit=args.commit
        )
        print("wrote", write_evidence(evidence, args.out / "ultralytics-identity.json"))
        rc |= 0 if result["bit_identical"] else 1
    if "train" in parts:
        result = run_train(args, data, n_train)
        evidence = build_evidence(
            "ultralytics-train", result, device=device, argv=argv_used, commit=args.commit
        )
        print("wrote", write_evidence(evidence, args.out / "ultralytics-train.json"))
        print("wrote", write_loss_chart(result, args.out / "ultralytics-loss.png"))
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
