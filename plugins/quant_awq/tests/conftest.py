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


@pytest.fixture(scope="module")
def checkpoints_on_gpu(tmp_path_factory: pytest.TempPathFactory, monkeypatch_module):
    """(awq folder, dequantized dense folder) of a tiny Llama, with the CUDA platform and this plugin
    registered process-wide (skips where pagoda-platform-cuda is missing)."""
    import transformers

    import pagoda.plugins.manager as manager
    from pagoda.plugins.manager import PluginManager

    sys.path.insert(0, str(HERE.parents[2] / "tests" / "engine"))
    from awq_quantizer import write_awq_checkpoint
    from tiny_models import CONFIGS, save_word_tokenizer

    try:
        modules = {name: importlib.import_module(mod) for name, mod in
                   (("quant-awq", "pagoda_quant_awq.plugin"), ("platform-cuda", "pagoda_platform_cuda.plugin"))}
    except ImportError:
        pytest.skip("pagoda-platform-cuda is not available")
    monkeypatch_module.setattr(manager, "_MANAGER", PluginManager(modules=modules, entry_points=False))
    torch.manual_seed(1234)
    model = transformers.AutoModelForCausalLM.from_config(CONFIGS["llama"](), dtype=torch.float32).eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0, 0.08)
    root = tmp_path_factory.mktemp("awq-gpu")
    write_awq_checkpoint(model, root / "awq", 32, dense_folder=root / "dense")
    for folder in ("awq", "dense"):
        save_word_tokenizer(root / folder)
    return root / "awq", root / "dense"


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as mp:
        yield mp
