"""``python -m musgd.bench ultralytics``: YOLO26 in the Ultralytics trainer, stock MuSGD against
ours (and the other arms of ``--arms``), and replay bit-identity, for any Ultralytics task.

Five parts on a synthetic dataset of the task's documented format generated offline, one
evidence file each (:mod:`musgd.bench._ul_identity` for the first two,
:mod:`musgd.bench._ul_runs` for the runs, :mod:`musgd.bench._ul_design` for the pairs):

* ``identity``: our trainer against a shadow eager optimizer, bit for bit, at every step;
* ``network``: the captured network against the eager one, losses and final state;
* ``phases``: per batch size, one run of each arm with the device synchronised at every phase
  boundary of the iteration: where the time goes;
* ``syncs``: per batch size, one run of each arm unsynchronised, every host synchronization of
  every iteration counted, with its source (:mod:`musgd.bench._syncs`);
* ``kernels``: per batch size, one run of each arm unsynchronised, the device's kernels over a
  window of steady iterations profiled: its busy time against the wall time, and the kernels
  with the most time (:mod:`musgd.bench._kernels`);
* ``host``: the same with the host's main thread profiled over the window (``cProfile``): the
  functions with the most cumulative and self time per iteration (:mod:`musgd.bench._host`);
* ``train``: per batch size, ``--rounds`` rounds of every arm with the same seed (seed k in
  round k, the order rotating: :mod:`musgd.bench._ul_design`), unsynchronised: iteration,
  compute and epoch times, complete-fit times, CUDA peaks, losses, per-round ratios stock/arm,
  and the loss and iteration curves (``results.curves``); where the data loader's
  wait is a large share of the iteration (``--lowdata auto``), the same pairs again with more
  loader workers and the augmentations off (``lowdata``), so that the optimizer's share shows.

``nbs`` equals the batch, so the optimizer steps every iteration, unless ``--nbs N`` (above the
batch) makes every run accumulate gradients over iterations between steps, as the trainer's own
default of 64 does. Usage (GPU, under 9 minutes on an H200):
``python -m musgd.bench ultralytics --device cuda --out $OUT --budget-s 500``; on CPU:
``--device cpu --quick``; another task: ``--task segment`` (``pose``, ``obb``,
``classify``). The arms (:mod:`musgd.bench._ul_arms`): ``--arms stock,ours`` by default;
``--arms stock,stock-compile,stock-channels-last,ours,ours-network,ours-network-compiled`` runs
the six of issue #32.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from musgd.bench._evidence import build_evidence, write_evidence
from musgd.bench._trainer_phases import data_wait_share
from musgd.bench._ul_design import DATA_BOUND_SHARE, SKIP_FIRST, lowdata_wanted
from musgd.bench._ul_identity import run_identity, run_network_identity
from musgd.bench._ul_plan import (
    VAL_IMAGES,
    Budget,
    UsageError,
    configure,
    dataset_fits,
    model_builds,
    nbs_setting,
    plan_lines,
)
from musgd.bench._ul_report import build_curves, read_train_results
from musgd.bench._ul_runs import (
    RunFailedError,
    arm_records,
    ours_options,
    run_host,
    run_kernels,
    run_one,
    run_pairs,
    run_phases,
    run_syncs,
)
from musgd.bench._yolo_data import write_synthetic_dataset
from musgd.ultralytics import require_ultralytics

__all__ = ["run"]

EXIT_OK, EXIT_FINDINGS = 0, 1
# The name of the temporary folder a command without --work measures in.
WORK_PREFIX = "musgd-ultralytics-"


def run(args: argparse.Namespace, argv: list[str]) -> int:
    """The subcommand: 0 when every part met its target, 1 otherwise or when a run failed in its
    own process (with a message; what ran before it is written); bad input raises
    :class:`UsageError` (exit 2)."""
    try:
        return _run(args, argv)
    except RunFailedError as exc:
        print(f"ultralytics: {exc}", file=sys.stderr)
        return EXIT_FINDINGS


def _run(args: argparse.Namespace, argv: list[str]) -> int:
    if args.curves_from is not None:
        curves = build_curves(read_train_results(args.curves_from))
        path = args.out / "ultralytics-curves.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"curves": curves}, indent=1) + "\n", encoding="utf-8")
        print("wrote", path)
        return EXIT_OK
    budget = Budget(args.budget_s)  # before importing ultralytics: that is spent time too
    configure(args)  # bad options are refused first, with or without ultralytics
    try:
        require_ultralytics()
    except ImportError as exc:  # its message says how to install it
        raise UsageError(str(exc)) from exc
    if args.one_run is not None:
        return run_one(args)
    for line in plan_lines(args, budget):
        print(line)
    dataset_fits(args.work, args.n_train, args.imgsz)
    model_builds(args.model)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.work is not None:
        return _measure(args, argv, budget)
    # A folder of its own (the dataset, each run's trainer output), removed when it ends: 640 px
    # datasets are hundreds of megabytes, and every command made another. --work keeps one.
    with tempfile.TemporaryDirectory(prefix=WORK_PREFIX, ignore_cleanup_errors=True) as work:
        args.work = Path(work)
        return _measure(args, argv, budget)


def _measure(args: argparse.Namespace, argv: list[str], budget: Budget) -> int:
    """The parts of ``--parts`` in ``args.work``, each part's evidence written to ``args.out``."""
    dataset = write_synthetic_dataset(
        args.work / "data",
        train_images=args.n_train,
        val_images=VAL_IMAGES,
        size=args.imgsz,
        seed=0,
        task=args.task,
    )
    data = dataset.data
    device = torch.device("cuda" if args.device == "cuda" else "cpu")
    task = {"task": args.task, "model": args.model}

    def save(kind: str, result: dict[str, Any]) -> None:
        evidence = build_evidence(
            kind, {**task, **result}, device=device, argv=argv, commit=args.commit
        )
        write_evidence(evidence, args.out / f"{kind}.json")

    rc = EXIT_OK
    if "identity" in args.parts:
        identity = run_identity(args, data, budget)
        print("identity:", {k: v for k, v in identity.items() if k != "replay"})
        print("identity replay:", identity["replay"])
        save("ultralytics-identity", identity)
        print("wrote", args.out / "ultralytics-identity.json")
        rc |= EXIT_OK if identity["bit_identical"] and identity["target_met"] else EXIT_FINDINGS
    if "network" in args.parts:
        network = run_network_identity(args, data, budget)
        print("network:", {k: v for k, v in network.items() if k != "state_sha256"})
        save("ultralytics-network", network)
        print("wrote", args.out / "ultralytics-network.json")
        rc |= EXIT_OK if network["target_met"] else EXIT_FINDINGS
    shares: list[float | None] = []
    if "phases" in args.parts:
        phases = run_phases(args, data, budget)
        phases["budget"] = budget.as_dict()
        save("ultralytics-phases", phases)
        print("wrote", args.out / "ultralytics-phases.json")
        shares.extend(
            data_wait_share(entry["arms"]["stock"]["phases"])
            for entry in phases["batches"].values()
            if "stock" in entry["arms"]
        )
    if "syncs" in args.parts:
        syncs = run_syncs(args, data, budget)
        syncs["budget"] = budget.as_dict()
        save("ultralytics-syncs", syncs)
        print("wrote", args.out / "ultralytics-syncs.json")
    if "kernels" in args.parts:
        kernels = run_kernels(args, data, budget)
        kernels["budget"] = budget.as_dict()
        save("ultralytics-kernels", kernels)
        print("wrote", args.out / "ultralytics-kernels.json")
    if "host" in args.parts:
        host = run_host(args, data, budget)
        host["budget"] = budget.as_dict()
        save("ultralytics-host", host)
        print("wrote", args.out / "ultralytics-host.json")
    if "train" in args.parts:
        _train(args, data, budget, shares, save)
    print(f"budget: used {budget.used():.0f} s, skipped {len(budget.skipped)} runs")
    return rc


def _train(
    args: argparse.Namespace,
    data: Path,
    budget: Budget,
    shares: list[float | None],
    save: Callable[[str, dict[str, Any]], None],
) -> None:
    """The ``train`` part: the default pairs, then the low-data ones where wanted; the evidence
    written after every pair, its curves with it."""
    train: dict[str, Any] = {
        "imgsz": args.imgsz,
        "train_images": args.n_train,
        "iterations_per_run": args.iters,
        "nbs": nbs_setting(args),
        "skip_first": SKIP_FIRST,
        "isolation": args.isolation,
        "settle_s": args.settle_s,
        "design": args.design,
        "ours": ours_options(args),
        "arms": arm_records(args),
        "variants": {},
    }

    def save_train() -> None:
        train["budget"] = budget.as_dict()
        train["curves"] = build_curves(train)
        save("ultralytics-train", train)

    run_pairs(
        args, data, budget, variant="default", pairs=args.pairs, result=train, save=save_train
    )
    if not shares:  # no phases part: the unsynchronised stock data wait of the pairs
        for entry in train["variants"]["default"]["batches"].values():
            shares.extend(data_wait_share(p["stock"]["phases"]) for p in entry["pairs"])
    wanted = lowdata_wanted(args.lowdata, shares)
    train["lowdata_decision"] = {
        "mode": args.lowdata,
        "stock_data_wait_shares": shares,
        "threshold": DATA_BOUND_SHARE,
        "ran": wanted,
    }
    print(f"lowdata: {train['lowdata_decision']}")
    if wanted:
        run_pairs(
            args,
            data,
            budget,
            variant="lowdata",
            pairs=args.lowdata_pairs,
            result=train,
            save=save_train,
        )
    save_train()
    print("wrote", args.out / "ultralytics-train.json")
