"""Benchmarks for MuSGD: built-in workloads, a timing harness and evidence files.

Run ``python -m musgd.bench demo`` (a short nano-detector training run),
``python -m musgd.bench optimizer`` (optimizer-step variants side by side) or
``python -m musgd.bench train`` (complete training steps, paired arms) on your own machine.
"""

from __future__ import annotations

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

__all__ = [
    "PARAMETER_SETS",
    "STRIDES",
    "DetectionBatch",
    "NanoDetector",
    "ParamSpec",
    "detection_loss",
    "large_parameters",
    "make_parameters",
    "nano_detector_parameters",
    "synthetic_batch",
    "transformer_parameters",
]
