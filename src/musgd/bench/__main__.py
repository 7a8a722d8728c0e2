"""``python -m musgd.bench``: see :mod:`musgd.bench._cli`."""

from musgd.bench._cli import main

raise SystemExit(main())
