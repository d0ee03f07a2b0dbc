"""Test setup for pagoda-attention-triton.

Without CUDA the Triton interpreter runs the kernels on CPU tensors. ``TRITON_INTERPRET=1`` must
be set when the kernels are decorated (at import), so it is set here while importing them, then
removed again so that other test modules of the same session (which start subprocesses) do not
inherit it; an autouse fixture sets it for this directory's tests. ``gpu`` tests skip without
CUDA through the pagoda pytest plugin (pagoda.testing).
"""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

import pytest
import torch

INTERPRET = not torch.cuda.is_available()
KERNEL_MODULES = ("kv_write", "tile", "prefill", "decode", "backend")


def _import_kernels() -> None:
    try:  # the tests also run from a checkout where the plugin is not pip-installed
        import pagoda_attention_triton  # noqa: F401
    except ImportError:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    for name in KERNEL_MODULES:
        importlib.import_module(f"pagoda_attention_triton.{name}")


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
    """The backend's ``check`` and dot precision read the variable at run time."""
    if INTERPRET:
        monkeypatch.setenv("TRITON_INTERPRET", "1")
