"""Gemma 3's interleaved local (sliding-window) and global layers on the Triton kernels: each layer
calls a view of the backend with its own window (AttentionBackend.with_window)."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tests"))
from hf_tiny import BLOCK_SIZE, hf_logits, run_prefill, save_tiny  # noqa: E402

from pagoda.interfaces import BuildContext  # noqa: E402
from pagoda.interfaces.attention import AttentionBackend, contract_reason  # noqa: E402
from pagoda.interfaces.ops import CustomOps  # noqa: E402
from pagoda.loader import ModelSource, load_hf_config, load_model  # noqa: E402
from pagoda.models import model_class  # noqa: E402
from pagoda.models.spec import attention_spec  # noqa: E402
from pagoda.platforms.cpu import CpuPlatform  # noqa: E402
from pagoda.quantization.unquantized import UnquantizedMethod  # noqa: E402
from pagoda_attention_triton.backend import TritonAttentionBackend  # noqa: E402

PROMPT = [5, 17, 42, 3, 88, 61, 7, 7, 29, 90, 14, 2, 55, 31]  # longer than the window (5)


def test_gemma3_local_and_global_layers_match_transformers(tmp_path):
    hf = save_tiny("gemma3", tmp_path)
    config = load_hf_config(ModelSource(tmp_path, None, "tiny"))
    spec = attention_spec(config, BLOCK_SIZE, torch.float32)
    assert spec.mixed_windows and contract_reason(TritonAttentionBackend, spec) is None
    ctx = BuildContext(torch.float32, UnquantizedMethod(), CustomOps(), TritonAttentionBackend(spec, CpuPlatform()))
    model = load_model(ModelSource(tmp_path, None, "tiny"), config, ctx, model_class("Gemma3ForCausalLM"), "auto", "cpu",
                       progress=False)
    windows = [layer.self_attn.attn.backend.spec.sliding_window for layer in model.model.layers]
    assert windows == [5, None, 5]
    assert all(isinstance(layer.self_attn.attn.backend, TritonAttentionBackend) for layer in model.model.layers)
    ours, theirs = run_prefill(model, ctx, [PROMPT, PROMPT[:9]]), hf_logits(hf, PROMPT)
    assert (ours[: len(PROMPT)] - theirs).abs().max().item() < 1e-4
    assert (ours[len(PROMPT):] - theirs[:9]).abs().max().item() < 1e-4


def test_backends_without_per_layer_windows_are_refused(tmp_path):
    class OneWindow(AttentionBackend):
        def forward(self, query, key, value, kv_cache, metadata):
            raise NotImplementedError

    save_tiny("gemma3", tmp_path)
    spec = attention_spec(load_hf_config(ModelSource(tmp_path, None, "tiny")), BLOCK_SIZE, torch.float32)
    assert "interleaves sliding-window and full-attention layers" in contract_reason(OneWindow, spec)
