"""Run the MuSGD optimizer-step benchmark (``make bench``); options as ``musgd.bench optimizer``.

Example: ``python scripts/bench_musgd.py --device cuda --sets nano --steps 100``.
"""

from __future__ import annotations

import runpy
import sys

if __name__ == "__main__":
    sys.argv[1:1] = ["optimizer"]  # ``python -m musgd.bench optimizer ...``, the public CLI
    runpy.run_module("musgd.bench", run_name="__main__", alter_sys=True)
