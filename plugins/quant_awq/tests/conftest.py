"""Test setup for pagoda-quant-awq.

Without CUDA the Triton interpreter runs the kernels on CPU tensors: ``TRITON_INTERPRET=1`` is set
while the kernel module is imported (the kernels are decorated then) and for each test of this
directory, never for the rest of the session. ``gpu`` tests skip without CUDA (pagoda.testing).
"""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

import pytest
import torch

HERE = Path(__file__).resolve().parent
INTERPRET = not torch.cuda.is_available()
sys.path.insert(0, str(HERE))  # awq_quantizer
try:  # the tests also run from a checkout where the plugin is not pip-installed
    import pagoda_quant_awq  # noqa: F401
except ImportError:
    sys.path.insert(0, str(HERE.parent))


def _import_kernels() -> None:
    try:
        importlib.import_module("pagoda_quant_awq.triton_kernels")
    except ImportError:  # no triton: the Triton tests skip
        pass


if INTERPRET:
    _previous = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1"
    try:
        _import_kernels()
    finally:
        if _previous is None:
            del os.environ["TRITON_INTERPRET"]
        else:
            os.environ["TRITON_INTERPRET"] = _previous
else:
    _import_kernels()


@pytest.fixture(autouse=True)
def _triton_interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    if INTERPRET:
        monkeypatch.setenv("TRITON_INTERPRET", "1")
