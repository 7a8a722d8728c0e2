"""Benchmarks for MuSGD: built-in workloads, a timing harness and evidence files.

Run ``python -m musgd.bench demo`` (a short nano-detector training run),
``python -m musgd.bench optimizer`` (optimizer-step variants side by side) or
``python -m musgd.bench train`` (complete training steps, paired arms) on your own machine;
``profile``, ``triton``, ``triton-tiles`` and ``distributed`` are the maintainers' measurements.
Scripts that drive a benchmark of their own use the evidence writer, the timing summary and the
synthetic YOLO dataset, paired ratios, the trainer phase clock and the bitwise comparison
exported here.
"""

from __future__ import annotations

from musgd.bench._evidence import build_evidence, write_evidence
from musgd.bench._identity import same_bits
from musgd.bench._models import (
    PARAMETER_SETS,
    STRIDES,
    DetectionBatch,
    NanoDetector,
    ParamSpec,
    detection_loss,
    large_parameters,
    make_parameters,
    nano_detector_parameters,
    synthetic_batch,
    transformer_parameters,
)
from musgd.bench._timing import Summary, paired_ratios, summarize
from musgd.bench._train_bench import hash_tensors
from musgd.bench._trainer_phases import (
    PhaseClock,
    data_wait_share,
    phase_trace,
    summarize_phases,
)
from musgd.bench._yolo_data import write_synthetic_dataset

__all__ = [
    "PARAMETER_SETS",
    "STRIDES",
    "DetectionBatch",
    "NanoDetector",
    "ParamSpec",
    "PhaseClock",
    "Summary",
    "build_evidence",
    "data_wait_share",
    "detection_loss",
    "hash_tensors",
    "large_parameters",
    "make_parameters",
    "nano_detector_parameters",
    "paired_ratios",
    "phase_trace",
    "same_bits",
    "summarize",
    "summarize_phases",
    "synthetic_batch",
    "transformer_parameters",
    "write_evidence",
    "write_synthetic_dataset",
]
