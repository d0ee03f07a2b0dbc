"""Test setup for pagoda-quant-awq.

Without CUDA the Triton interpreter runs the kernels on CPU tensors: ``TRITON_INTERPRET=1`` is set
while the kernel module is imported and for each test of this directory, never for the rest of
the session (pagoda.testing.import_triton_kernels). ``gpu`` tests skip without CUDA.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

from pagoda.testing import import_triton_kernels

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # awq_quantizer
sys.path.insert(0, str(HERE.parents[2] / "tests" / "engine"))  # tiny_models
try:  # the tests also run from a checkout where the plugin is not pip-installed
    import pagoda_quant_awq  # noqa: F401
except ImportError:
    sys.path.insert(0, str(HERE.parent))
try:
    INTERPRET = import_triton_kernels("pagoda_quant_awq.triton_kernels")
except ImportError:  # no triton: the Triton tests skip
    INTERPRET = False


@pytest.fixture(autouse=True)
def _triton_interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    if INTERPRET:
        monkeypatch.setenv("TRITON_INTERPRET", "1")


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as mp:
        yield mp


@pytest.fixture(scope="module")
def checkpoints_on_gpu(tmp_path_factory: pytest.TempPathFactory, monkeypatch_module):
    """(awq folder, dequantized dense folder) of a tiny Llama, with the CUDA platform and this plugin
    registered process-wide (skips where pagoda-platform-cuda is missing)."""
    import pagoda.plugins.manager as manager
    from awq_quantizer import write_tiny_awq_llama
    from pagoda.plugins.manager import PluginManager

    try:
        modules = {name: importlib.import_module(mod) for name, mod in
                   (("quant-awq", "pagoda_quant_awq.plugin"), ("platform-cuda", "pagoda_platform_cuda.plugin"))}
    except ImportError:
        pytest.skip("pagoda-platform-cuda is not available")
    monkeypatch_module.setattr(manager, "_MANAGER", PluginManager(modules=modules, entry_points=False))
    awq, dense, _ = write_tiny_awq_llama(tmp_path_factory.mktemp("awq-gpu"), group=32)
    return awq, dense
