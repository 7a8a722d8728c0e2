"""The wpgate mkdocs plugin: work-package headers, the roadmap, phase pages and evidence.

Registered as the ``wpgate`` entry point in ``mkdocs.plugins``; enable it in ``mkdocs.yml`` with
``plugins: [wpgate]``. Importing :mod:`wpgate` never imports this package (it needs mkdocs).
"""

from __future__ import annotations

__all__: list[str] = []
