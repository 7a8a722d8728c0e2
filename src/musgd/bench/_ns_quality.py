"""``python -m musgd.bench ns-quality``: how orthogonal each Newton–Schulz schedule's result is.

For each schedule (``musgd._ns_schedules.SCHEDULES``), iteration (``--iterations``: the
standard one, and the Gram iteration of ``ns_backend="gram"``) and working dtype, per layer
shape: the
singular-value spread of the result (its smallest and largest singular value), the
orthogonality error ``||OᵀO - I||_F / sqrt(n)`` (n the short side), the spectral distance to the
float64 SVD polar factor ``U·Vᵀ`` of the input, and the nominal FLOP of one call. Inputs are
(a) momentum-like random matrices of the YOLO26n shapes (package data) and (b) recorded momenta
(``--momenta FILE.pt``, a dict name -> tensor), which ``--record-from-yolo FILE.pt`` records from a
short YOLO26n training run with ``musgd.ultralytics.musgd_trainer`` on the CPU (Ultralytics
needed; without it the command says how to get it and exits 2).
"""

from __future__ import annotations

import argparse
import hashlib
import math
import sys
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from musgd._newton_schulz import ITERATIONS
from musgd._ns_schedules import SCHEDULES, ns_flop, orthogonalize_scheduled_batched, schedule
from musgd.bench._evidence import build_evidence, write_evidence
from musgd.bench._models import yolo26_parameters

DTYPES: dict[str, torch.dtype] = {
    "fp32": torch.float32,
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
}
DEFAULT_DTYPES = ("fp32", "bf16")
# Singular values of the random momentum-like matrices: s_k = (k + 1)^-SPECTRUM_DECAY, a
# power-law spectrum (a few strong directions, a long weak tail), between a gradient's flat
# spectrum and a rank-one matrix; the recorded momenta are the real thing.
SPECTRUM_DECAY = 1.0


@dataclass(frozen=True)
class QualityRow:
    """One schedule, dtype and layer shape: the result's quality over that shape's matrices."""

    source: str  # "random" or "recorded"
    schedule: str
    dtype: str
    rows: int
    cols: int
    matrices: int
    sv_min: float  # smallest singular value of any result
    sv_max: float  # largest
    orth_err_mean: float  # ||OᵀO - I||_F / sqrt(n), mean over the matrices
    orth_err_max: float
    polar_dist_max: float  # max ||O - U·Vᵀ||_2 against the input's float64 polar factor
    flop: int  # nominal FLOP of one call on one matrix
    iteration: str = "standard"  # or "gram" (where it pays; musgd._newton_schulz.iterate_gram)


def as_matrix(t: Tensor) -> Tensor | None:
    """``t`` viewed as (rows, numel/rows) in float32 when both sides are >= 2 (spec §1)."""
    if t.dim() < 2 or t.numel() == 0:
        return None
    rows = t.shape[0]
    cols = t.numel() // rows
    return t.detach().reshape(rows, cols).float() if rows >= 2 and cols >= 2 else None


def momentum_like(rows: int, cols: int, seed: int) -> Tensor:
    """A float32 ``rows x cols`` matrix with random singular vectors and a power-law spectrum."""
    gen = torch.Generator().manual_seed(seed)
    k = min(rows, cols)
    U, _ = torch.linalg.qr(torch.randn(rows, k, generator=gen, dtype=torch.float64))
    V, _ = torch.linalg.qr(torch.randn(cols, k, generator=gen, dtype=torch.float64))
    s = torch.arange(1, k + 1, dtype=torch.float64).pow(-SPECTRUM_DECAY)
    out: Tensor = ((U * s) @ V.T).float()
    return out


def yolo26n_random(seed: int) -> dict[str, Tensor]:
    """One momentum-like matrix per YOLO26n matrix parameter, named as in the shape file."""
    out: dict[str, Tensor] = {}
    for i, spec in enumerate(yolo26_parameters("yolo26n")):
        rows = spec.shape[0]
        cols = math.prod(spec.shape) // rows if spec.shape else 0
        if len(spec.shape) >= 2 and rows >= 2 and cols >= 2:
            out[spec.name] = momentum_like(rows, cols, seed + i)
    return out


def _orth_err(O: Tensor) -> Tensor:
    """``||OᵀO - I||_F / sqrt(n)`` per matrix of a (B, rows, cols) float64 stack."""
    S = O @ O.mT if O.shape[-2] <= O.shape[-1] else O.mT @ O
    eye = torch.eye(S.shape[-1], dtype=S.dtype)
    err: Tensor = torch.linalg.matrix_norm(S - eye).div(math.sqrt(S.shape[-1]))
    return err


def measure(
    matrices: Mapping[str, Tensor],
    *,
    source: str,
    schedules: Sequence[str],
    dtypes: Sequence[str],
    iterations: Sequence[str] = ("standard",),
) -> list[QualityRow]:
    """Quality rows for ``matrices`` (any shapes; vectors skipped), grouped by 2-D shape."""
    groups: dict[tuple[int, int], list[Tensor]] = {}
    for t in matrices.values():
        m = as_matrix(t)
        if m is not None and bool(torch.isfinite(m).all()) and float(m.abs().max()) > 0:
            groups.setdefault((m.shape[0], m.shape[1]), []).append(m)
    rows: list[QualityRow] = []
    for (r, c), items in sorted(groups.items()):
        G = torch.stack(items)
        U, _, Vh = torch.linalg.svd(G.double(), full_matrices=False)
        polar = U @ Vh
        for name, iteration, dname in (
            (n, i, d) for n in schedules for i in iterations for d in dtypes
        ):
            O = orthogonalize_scheduled_batched(
                G, name, dtype=DTYPES[dname], iteration=iteration
            ).double()
            sv = torch.linalg.svdvals(O)
            err = _orth_err(O)
            dist = torch.linalg.matrix_norm(O - polar, ord=2)
            rows.append(
                QualityRow(
                    source=source,
                    schedule=name,
                    dtype=dname,
                    iteration=iteration,
                    rows=r,
                    cols=c,
                    matrices=len(items),
                    sv_min=float(sv.min()),
                    sv_max=float(sv.max()),
                    orth_err_mean=float(err.mean()),
                    orth_err_max=float(err.max()),
                    polar_dist_max=float(dist.max()),
                    flop=ns_flop(r, c, name, iteration),
                )
            )
    return rows


def summarize(rows: Iterable[QualityRow]) -> list[dict[str, Any]]:
    """Per source, schedule, iteration and dtype: errors over all matrices and FLOP per
    optimizer step (``flop_vs_quintic`` against the standard quintic's)."""
    acc: dict[tuple[str, str, str, str], list[QualityRow]] = {}
    for row in rows:
        acc.setdefault((row.source, row.schedule, row.iteration, row.dtype), []).append(row)
    flop_quintic: dict[tuple[str, str], int] = {}
    out: list[dict[str, Any]] = []
    for (source, name, iteration, dname), items in acc.items():
        count = sum(r.matrices for r in items)
        flop = sum(r.flop * r.matrices for r in items)
        if name == "quintic" and iteration == "standard":
            flop_quintic[(source, dname)] = flop
        out.append(
            {
                "source": source,
                "schedule": name,
                "iteration": iteration,
                "dtype": dname,
                "matrices": count,
                "shapes": len(items),
                "orth_err_mean": sum(r.orth_err_mean * r.matrices for r in items) / count,
                "orth_err_max": max(r.orth_err_max for r in items),
                "sv_min": min(r.sv_min for r in items),
                "sv_max": max(r.sv_max for r in items),
                "polar_dist_max": max(r.polar_dist_max for r in items),
                "flop_per_step": flop,
            }
        )
    for entry in out:
        base = flop_quintic.get((entry["source"], entry["dtype"]))
        entry["flop_vs_quintic"] = entry["flop_per_step"] / base if base else None
    return out


def format_summary(summary: Sequence[Mapping[str, Any]]) -> str:
    """A plain-text table of :func:`summarize`."""
    head = (
        f"{'source':<9} {'schedule':<14} {'iter':<8} {'dtype':<5} {'mats':>5} {'orth mean':>10} "
        f"{'orth max':>9} {'sv min':>7} {'sv max':>7} {'polar max':>9} {'flop/q':>7}"
    )
    lines = [head, "-" * len(head)]
    for e in summary:
        ratio = e["flop_vs_quintic"]
        lines.append(
            f"{e['source']:<9} {e['schedule']:<14} {e['iteration']:<8} {e['dtype']:<5} "
            f"{e['matrices']:>5} "
            f"{e['orth_err_mean']:>10.4f} {e['orth_err_max']:>9.4f} {e['sv_min']:>7.3f} "
            f"{e['sv_max']:>7.3f} {e['polar_dist_max']:>9.3f} "
            f"{'-' if ratio is None else f'{ratio:.3f}':>7}"
        )
    return "\n".join(lines)


def load_momenta(path: Path) -> dict[str, Tensor]:
    """A recorded ``{name: tensor}`` file; ValueError saying what is wrong and how to fix it."""
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise ValueError(
            f"--momenta {path}: no such file; record one with --record-from-yolo"
        ) from None
    except Exception as exc:  # any unreadable file is a usage error here
        # Only the kind of error: torch's own message runs to many lines and advises loading
        # with weights_only=False, which would run the file's code.
        raise ValueError(
            f"--momenta {path}: not a torch.save file of tensors (torch.load: "
            f"{type(exc).__name__}); pass a file written by --record-from-yolo or "
            "torch.save({name: tensor})"
        ) from None
    if not isinstance(data, dict) or not data:
        raise ValueError(f"--momenta {path}: expected a non-empty dict name -> tensor")
    bad = [k for k, v in data.items() if not isinstance(k, str) or not isinstance(v, Tensor)]
    if bad:
        raise ValueError(f"--momenta {path}: entry {bad[0]!r} is not a str -> tensor pair")
    for name, tensor in data.items():
        if not tensor.is_floating_point():
            raise ValueError(
                f"--momenta {path}: entry {name!r} is a {tensor.dtype} tensor; momenta are real "
                "floating-point tensors (record them with --record-from-yolo)"
            )
        if not bool(torch.isfinite(tensor).all()):
            raise ValueError(
                f"--momenta {path}: entry {name!r} holds non-finite values; a momentum that "
                "is not finite has no polar factor to measure against (drop it)"
            )
    if all(as_matrix(t) is None for t in data.values()):
        raise ValueError(
            f"--momenta {path}: no entry is a matrix (at least 2 x 2; vectors and empty "
            "tensors are not orthogonalized), so there is nothing to measure"
        )
    return data


def record_from_yolo(
    path: Path, *, epochs: int, images: int, imgsz: int, batch: int, seed: int
) -> dict[str, Any]:
    """Train YOLO26n on a synthetic dataset with ``musgd_trainer`` (CPU) and save the momentum
    buffers of its matrix parameters to ``path``; returns what was recorded (for the evidence).

    One optimizer step per batch (``nbs = batch``): ``epochs * ceil(images / batch)`` steps.
    """
    from musgd.ultralytics import musgd_trainer, require_ultralytics

    try:
        require_ultralytics()
    except ImportError as exc:
        raise ValueError(str(exc)) from None
    from musgd.bench._yolo_data import write_synthetic_dataset
    from ultralytics import YOLO  # after require_ultralytics: its message, not a traceback

    captured: dict[str, Tensor] = {}

    def keep(trainer: Any) -> None:  # each epoch's end: the latest momentum of each matrix
        state = trainer.optimizer.state
        for name, p in trainer.model.named_parameters():
            buf = state.get(p, {}).get("momentum_buffer")
            if buf is not None and as_matrix(buf) is not None:
                captured[name] = buf.detach().cpu().clone()

    with tempfile.TemporaryDirectory(prefix="musgd-ns-quality-") as tmp:
        data = write_synthetic_dataset(
            Path(tmp) / "data", train_images=images, val_images=2, size=imgsz, seed=seed
        )
        model = YOLO("yolo26n.yaml")
        model.add_callback("on_train_epoch_end", keep)
        model.train(
            data=str(data.yaml),
            epochs=epochs,
            imgsz=imgsz,
            batch=batch,
            nbs=batch,
            device="cpu",
            workers=0,
            plots=False,
            val=False,
            save=False,
            project=str(Path(tmp) / "runs"),
            name="record",
            exist_ok=True,
            seed=seed,
            deterministic=True,
            amp=False,
            verbose=False,
            trainer=musgd_trainer(),
        )
    if not captured:
        raise ValueError("the YOLO26n run left no momentum buffers; train for at least 1 epoch")
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(captured, path)
    import ultralytics

    return {
        "model": "yolo26n.yaml",
        "trainer": "musgd.ultralytics.musgd_trainer()",
        "ultralytics": ultralytics.__version__,
        "epochs": epochs,
        "train_images": images,
        "imgsz": imgsz,
        "batch": batch,
        "optimizer_steps": epochs * math.ceil(images / batch),
        "seed": seed,
        "data": "musgd.bench._yolo_data synthetic boxes",
    }


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _names(text: str, known: Iterable[str], what: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    known = list(known)
    for n in names:
        if n not in known:
            raise ValueError(f"unknown {what} {n!r}; choose from {', '.join(known)}")
    if not names:
        raise ValueError(f"name at least one {what}, of {', '.join(known)}")
    return names


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``python -m musgd.bench ns-quality``."""
    parser.add_argument("--device", choices=("cpu",), default="cpu", help="cpu only")
    parser.add_argument("--schedules", default=",".join(SCHEDULES), help="comma-separated")
    parser.add_argument(
        "--dtypes", default=",".join(DEFAULT_DTYPES), help="comma-separated: fp32,bf16,fp16"
    )
    parser.add_argument(
        "--iterations",
        default="standard",
        help="comma-separated: standard,gram (the Gram iteration, where it pays)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the random matrices")
    parser.add_argument(
        "--no-random", action="store_true", help="skip the random YOLO26n-shape matrices"
    )
    parser.add_argument("--momenta", type=Path, help="recorded momenta: torch.save({name: t})")
    parser.add_argument(
        "--record-from-yolo",
        type=Path,
        metavar="FILE.pt",
        help="first record momenta from a short YOLO26n run (Ultralytics) into this file",
    )
    parser.add_argument(
        "--record-epochs", type=int, default=2, help="epochs of the recording run (default 2)"
    )
    parser.add_argument(
        "--record-images",
        type=int,
        default=16,
        help="synthetic training images of the recording run (default 16)",
    )
    parser.add_argument(
        "--record-imgsz", type=int, default=64, help="image size of the recording run (default 64)"
    )
    parser.add_argument(
        "--record-batch", type=int, default=4, help="batch size of the recording run (default 4)"
    )
    parser.add_argument("--out", type=Path, help="evidence JSON path or directory")
    parser.add_argument("--no-evidence", action="store_true")
    parser.add_argument("--commit", default=None, help="the commit a copied tree came from")


def run(args: argparse.Namespace, argv: list[str]) -> int:
    """Measure; print the summary; write the evidence JSON. 0 done, 2 bad usage."""
    try:
        names = _names(args.schedules, SCHEDULES, "schedule")
        for n in names:
            schedule(n)
        dtypes = _names(args.dtypes, DTYPES, "dtype")
        iterations = _names(args.iterations, ITERATIONS, "iteration")
        recording: dict[str, Any] | None = None
        momenta_path = args.momenta
        if args.record_from_yolo is not None:
            if momenta_path is not None:
                raise ValueError("give --momenta or --record-from-yolo, not both")
            for opt in ("record_epochs", "record_images", "record_batch"):
                if getattr(args, opt) < 1:
                    raise ValueError(f"--{opt.replace('_', '-')} must be >= 1")
            recording = record_from_yolo(
                args.record_from_yolo,
                epochs=args.record_epochs,
                images=args.record_images,
                imgsz=args.record_imgsz,
                batch=args.record_batch,
                seed=args.seed,
            )
            momenta_path = args.record_from_yolo
        momenta = load_momenta(momenta_path) if momenta_path is not None else None
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.no_random and momenta is None:
        print(
            "error: --no-random leaves nothing to measure; add --momenta FILE.pt",
            file=sys.stderr,
        )
        return 2
    rows: list[QualityRow] = []
    if not args.no_random:
        rows += measure(
            yolo26n_random(args.seed),
            source="random",
            schedules=names,
            dtypes=dtypes,
            iterations=iterations,
        )
    if momenta is not None:
        rows += measure(
            momenta, source="recorded", schedules=names, dtypes=dtypes, iterations=iterations
        )
    summary = summarize(rows)
    print(format_summary(summary))
    if not args.no_evidence:
        results: dict[str, Any] = {
            "benchmark": "ns-quality",
            "schedules": {n: asdict(SCHEDULES[n]) for n in names},
            "random": None
            if args.no_random
            else {"shapes": "yolo26n", "spectrum": f"(k+1)^-{SPECTRUM_DECAY}", "seed": args.seed},
            "momenta": None
            if momenta_path is None
            else {"file": Path(momenta_path).name, "sha256": _sha256(Path(momenta_path))},
            "recording": recording,
            "summary": summary,
            "rows": [asdict(r) for r in rows],
        }
        document = build_evidence(
            "ns-quality", results, device=torch.device("cpu"), argv=argv, commit=args.commit
        )
        try:
            path = write_evidence(document, args.out)
        except OSError as exc:
            print(f"error: cannot write the evidence file ({exc}); pass --out", file=sys.stderr)
            return 2
        print(f"evidence: {path}")
    return 0
