"""Run the MuSGD optimizer-step benchmark (``make bench``); options as ``musgd.bench optimizer``.

Example: ``python scripts/bench_musgd.py --device cuda --sets nano --steps 100``.
"""

from __future__ import annotations

import sys

from musgd.bench._cli import main

if __name__ == "__main__":
    sys.exit(main(["optimizer", *sys.argv[1:]]))
