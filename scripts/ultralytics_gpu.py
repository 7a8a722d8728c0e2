"""The Ultralytics trainer benchmark: a launcher of ``python -m musgd.bench ultralytics``.

Options as that subcommand (``--help``); ``scripts/gpu_ultralytics.sh`` runs it on the GPU.
Example: ``python scripts/ultralytics_gpu.py --device cpu --quick --parts identity``.
"""

from __future__ import annotations

import runpy
import sys

if __name__ == "__main__":
    sys.argv[1:1] = ["ultralytics"]  # ``python -m musgd.bench ultralytics ...``, the public CLI
    runpy.run_module("musgd.bench", run_name="__main__", alter_sys=True)
