"""MuSGD: Muon's Newton–Schulz orthogonalization mixed with SGD momentum, for PyTorch.

Install with ``pip install "wpgate[optim]"``; then ``from musgd import MuSGD``.
"""

from __future__ import annotations

try:
    import torch as _torch  # noqa: F401
except ImportError:  # pragma: no cover - exercised in a torch-free subprocess test
    import sys as _sys

    # One line, the CPU route first: a plain `pip install torch` pulls the multi-GB CUDA build.
    _TORCH_MISSING = (
        "musgd needs PyTorch, which is not installed. On a CPU machine: pip install torch "
        '--index-url https://download.pytorch.org/whl/cpu && pip install "wpgate[optim]"; '
        'with an NVIDIA GPU: pip install "wpgate[optim]"'
    )
    import os as _os

    # The console scripts of pyproject.toml's [project.scripts] that import musgd; pip's
    # wrapper runs as sys.argv[0] (``musgd-yolo``, ``musgd-yolo.exe``, ``musgd-yolo-script.py``).
    _COMMANDS = ("musgd-yolo",)
    _program = _os.path.splitext(_os.path.basename(_sys.argv[0] if _sys.argv else ""))[0]
    if _sys.argv[:1] == ["-m"] or _program.removesuffix("-script") in _COMMANDS:
        # Python is locating a `python -m musgd.<command>` module (sys.argv[0] is "-m" until it
        # is found), or a console script is running: a command, so the line and exit status
        # 2, not a traceback.
        print(f"error: {_TORCH_MISSING}", file=_sys.stderr)
        raise SystemExit(2) from None
    raise ImportError(_TORCH_MISSING) from None

from musgd._clip_replay import GradClipReplay
from musgd._functional import matrix_shape
from musgd._groups import param_groups
from musgd._newton_schulz import (
    DEFAULT_COEFFICIENTS,
    orthogonalize,
    orthogonalize_batched,
)
from musgd._nsconfig import NSConfig
from musgd._optimizer import MuSGD

__all__ = [
    "DEFAULT_COEFFICIENTS",
    "GradClipReplay",
    "MuSGD",
    "NSConfig",
    "matrix_shape",
    "orthogonalize",
    "orthogonalize_batched",
    "param_groups",
]
