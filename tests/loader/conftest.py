"""Fixtures for loader tests: the shared helpers live in tests/ (hf_tiny.py, smollm.py)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
