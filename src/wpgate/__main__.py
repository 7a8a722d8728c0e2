"""``python -m wpgate``: the same command line as the ``wpgate`` script."""

from __future__ import annotations

from wpgate.cli import run

run()
