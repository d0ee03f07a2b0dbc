"""Test setup for pagoda-attention-flash.

The random paged batches and their float64 reference are the Triton backend's test helpers
(``plugins/attention_triton/tests/paged_batches.py``), shared so that both backends are held to
the same cases. ``gpu`` tests skip without CUDA through the pagoda pytest plugin (pagoda.testing).
"""

from __future__ import annotations

import sys
from pathlib import Path

PLUGINS = Path(__file__).resolve().parents[2]
try:  # the tests also run from a checkout where the plugin is not pip-installed
    import pagoda_attention_flash  # noqa: F401
except ImportError:
    sys.path.insert(0, str(PLUGINS / "attention_flash"))
sys.path.insert(0, str(PLUGINS / "attention_triton" / "tests"))  # paged_batches
