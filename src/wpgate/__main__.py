"""``python -m wpgate``: the same command line as the ``wpgate`` script."""

from __future__ import annotations

import sys

from wpgate.cli import main

sys.exit(main())
