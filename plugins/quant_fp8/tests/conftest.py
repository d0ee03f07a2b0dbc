"""Test setup for pagoda-quant-fp8: importable from a checkout, with the core's tests/ helpers.

``gpu`` tests skip without CUDA through the pagoda pytest plugin (pagoda.testing).
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

PLUGIN = Path(__file__).resolve().parents[1]
REPO_TESTS = PLUGIN.parents[1] / "tests"
try:  # the tests also run from a checkout where the plugin is not pip-installed
    import pagoda_quant_fp8  # noqa: F401
except ImportError:
    sys.path.insert(0, str(PLUGIN))
sys.path.insert(0, str(REPO_TESTS))  # hf_tiny: tiny random HF checkpoints
torch.set_num_threads(1)  # tiny matmuls: one thread avoids OpenMP spin contention on small CI machines

