"""Test setup for pagoda-platform-cpu: the tests also run from a checkout where the plugin is not installed."""

from __future__ import annotations

import sys
from pathlib import Path

try:
    import pagoda_platform_cpu  # noqa: F401
except ImportError:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
