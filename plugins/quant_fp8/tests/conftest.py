"""Test setup for pagoda-quant-fp8: importable from a checkout, with the core's tests/ helpers.

Without CUDA the Triton interpreter runs the fused kernels on CPU tensors: ``TRITON_INTERPRET=1``
is set while their module is imported and for each test here, never for the rest of the session.

``gpu`` tests skip without CUDA through the pagoda pytest plugin (pagoda.testing).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from pagoda.testing import import_triton_kernels

PLUGIN = Path(__file__).resolve().parents[1]
REPO_TESTS = PLUGIN.parents[1] / "tests"
try:  # the tests also run from a checkout where the plugin is not pip-installed
    import pagoda_quant_fp8  # noqa: F401
except ImportError:
    sys.path.insert(0, str(PLUGIN))
sys.path.insert(0, str(REPO_TESTS))  # hf_tiny: tiny random HF checkpoints
try:  # the fused kernels are decorated at import: under the interpreter where there is no GPU
    INTERPRET = import_triton_kernels("pagoda_quant_fp8.triton_fused")
except ImportError:  # no triton: the fused-kernel tests skip
    INTERPRET = False
torch.set_num_threads(1)  # tiny matmuls: one thread avoids OpenMP spin contention on small CI machines



@pytest.fixture(autouse=True)
def _triton_interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    if INTERPRET:
        monkeypatch.setenv("TRITON_INTERPRET", "1")
