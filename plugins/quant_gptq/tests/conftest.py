"""Test setup for pagoda-quant-gptq.

The kernels are pagoda-quant-awq's, and so are some test helpers (its checkpoint writer, its emulation
of the tensor-core kernel). Tests of the Triton kernels take the ``triton_interpreter`` fixture: without
CUDA the interpreter runs them on CPU tensors (``TRITON_INTERPRET=1`` while the kernel module is
imported and during the test only: pagoda.testing.import_triton_kernels). ``gpu`` tests skip without CUDA.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from pagoda.testing import import_triton_kernels

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
sys.path.insert(0, str(HERE))  # int_quantizer, tiny_checkpoints, layer_cases
sys.path.insert(0, str(REPO / "tests" / "engine"))  # tiny_models
sys.path.insert(0, str(REPO / "plugins" / "quant_awq" / "tests"))  # awq_quantizer, tile_emulator
for plugin in ("quant_gptq", "quant_awq"):  # the tests also run from a checkout where they are not pip-installed
    try:
        __import__(f"pagoda_{plugin}")
    except ImportError:
        sys.path.insert(0, str(REPO / "plugins" / plugin))


# Triton decorates the kernels at import: the interpreter must be on then, before any test imports them
try:
    INTERPRET: bool | None = import_triton_kernels("pagoda_quant_awq.triton_kernels")
except ImportError:
    INTERPRET = None  # no triton


@pytest.fixture
def triton_interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    """pagoda-quant-awq's Triton kernels, run by the interpreter where there is no CUDA (skips without triton)."""
    if INTERPRET is None:
        pytest.skip("triton is not installed")
    if INTERPRET:
        monkeypatch.setenv("TRITON_INTERPRET", "1")
