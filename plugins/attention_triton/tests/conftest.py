"""Test setup for pagoda-attention-triton.

Without CUDA the Triton interpreter runs the kernels on CPU tensors. ``TRITON_INTERPRET=1`` must
be set when the kernels are decorated (at import), so it is set here while importing them, then
removed again so that other test modules of the same session (which start subprocesses) do not
inherit it; an autouse fixture sets it for this directory's tests. ``gpu`` tests skip without
CUDA through the pagoda pytest plugin (pagoda.testing).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from pagoda.testing import import_triton_kernels

KERNEL_MODULES = ("kv_write", "tile", "prefill", "decode", "mla", "backend")
try:  # the tests also run from a checkout where the plugin is not pip-installed
    import pagoda_attention_triton  # noqa: F401
except ImportError:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
INTERPRET = import_triton_kernels(*(f"pagoda_attention_triton.{name}" for name in KERNEL_MODULES))


@pytest.fixture(autouse=True)
def _triton_interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    """The backend's ``check`` and dot precision read the variable at run time."""
    if INTERPRET:
        monkeypatch.setenv("TRITON_INTERPRET", "1")
