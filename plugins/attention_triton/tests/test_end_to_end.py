"""``LLM(..., attention_backend="triton")`` greedy tokens equal the torch backend's (tiny Llama)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tests" / "engine"))
from tiny_models import make_tiny_model, random_prompts  # noqa: E402

import pagoda.plugins.manager as manager  # noqa: E402
from pagoda import LLM, SamplingParams  # noqa: E402
from pagoda.plugins.manager import PluginManager  # noqa: E402


def _use_plugins(monkeypatch: pytest.MonkeyPatch, **modules: str) -> PluginManager:
    """A process-wide manager with the built-ins plus these plugin modules (installed or not)."""
    loaded = {name: importlib.import_module(module) for name, module in modules.items()}
    pm = PluginManager(modules=loaded, entry_points=False)
    monkeypatch.setattr(manager, "_MANAGER", pm)
    return pm


def _greedy(path: str, backend: str, prompts: list[list[int]], max_tokens: int, **kwargs) -> list[list[int]]:
    llm = LLM(model=path, attention_backend=backend, block_size=16, max_num_batched_tokens=24, **kwargs)
    assert type(llm.engine.core.runner.attention).__name__ == {"triton": "TritonAttentionBackend"}.get(backend, "TorchAttentionBackend")
    outs = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=max_tokens), use_tqdm=False)
    return [o.outputs[0].token_ids for o in outs]


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("tiny-llama")
    make_tiny_model(path, "llama")
    return str(path)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the interpreter path; its CUDA twin runs on GPUs")
def test_triton_matches_torch_backend_on_cpu(tiny_llama: str, monkeypatch: pytest.MonkeyPatch) -> None:
    _use_plugins(monkeypatch, **{"attention-triton": "pagoda_attention_triton.plugin"})
    prompts = random_prompts(3, range(5, 30), seed=3)  # a 24-token budget chunks the longer prompts
    kwargs = dict(dtype="float32", platform="cpu")
    assert _greedy(tiny_llama, "triton", prompts, 6, **kwargs) == _greedy(tiny_llama, "torch", prompts, 6, **kwargs)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the interpreter path")
def test_latent_attention_matches_torch_backend_on_cpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """DeepSeek-V3 (multi-head latent attention): chunked prefills, cached prefixes and decodes."""
    make_tiny_model(tmp_path, "deepseek_v3")
    _use_plugins(monkeypatch, **{"attention-triton": "pagoda_attention_triton.plugin"})
    shared = random_prompts(1, range(20, 21), seed=5)[0]
    prompts = [shared + tail for tail in random_prompts(3, range(3, 12), seed=6)]
    kwargs = dict(dtype="float32", platform="cpu")
    assert _greedy(str(tmp_path), "triton", prompts, 6, **kwargs) == _greedy(str(tmp_path), "torch", prompts, 6,
                                                                             **kwargs)


def _use_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    try:
        pm = _use_plugins(
            monkeypatch, **{"attention-triton": "pagoda_attention_triton.plugin", "platform-cuda": "pagoda_platform_cuda.plugin"}
        )
    except ImportError:
        pytest.skip("pagoda-platform-cuda is not available")
    if "cuda" not in pm.registry("platform"):
        pytest.skip("pagoda-platform-cuda does not register 'cuda' yet")


@pytest.mark.gpu
def test_latent_attention_with_decode_graphs_matches_torch_backend_on_cuda(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """DeepSeek-V3 on the GPU: triton's latent attention, decode steps replayed from CUDA graphs (split-KV
    planned from max_model_len), against the torch backend run eagerly."""
    make_tiny_model(tmp_path, "deepseek_v3")
    _use_cuda(monkeypatch)
    prompts = random_prompts(8, range(5, 80), seed=4)
    kwargs = dict(dtype="float32", platform="cuda")
    assert _greedy(str(tmp_path), "triton", prompts, 24, **kwargs) == _greedy(str(tmp_path), "torch", prompts, 24,
                                                                              enforce_eager=True, **kwargs)


@pytest.mark.gpu
def test_triton_matches_torch_backend_on_cuda(tiny_llama: str, monkeypatch: pytest.MonkeyPatch) -> None:
    _use_cuda(monkeypatch)
    prompts = random_prompts(8, range(5, 80), seed=4)
    kwargs = dict(dtype="float32", platform="cuda")
    assert _greedy(tiny_llama, "triton", prompts, 24, **kwargs) == _greedy(tiny_llama, "torch", prompts, 24, **kwargs)
    assert torch.cuda.is_available()
