"""Bidirectional (encoder) attention: the torch reference attends over each whole sequence, and
backend selection refuses backends that cannot, with the reason, while ``auto`` skips them."""

from __future__ import annotations

import dataclasses
import importlib
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from hf_tiny import prefill_metadata
from pagoda.attention.torch_ref import TorchAttentionBackend
from pagoda.errors import IncompatibleChoiceError
from pagoda.interfaces import AttentionSpec
from pagoda.platforms.cpu import CpuPlatform
from pagoda.plugins.manager import PluginManager

CAUSAL = AttentionSpec(num_heads=4, num_kv_heads=4, head_size=8, scale=8**-0.5, block_size=4, dtype=torch.float32)
ENCODER = dataclasses.replace(CAUSAL, causal=False)
FAKES = Path(__file__).resolve().parents[1] / "plugins"


def test_the_torch_reference_attends_over_whole_sequences():
    lens = [1, 6, 3, 9]  # the 1-token prompt runs through the batched decode path
    meta, num_blocks = prefill_metadata(lens)
    meta.num_decodes = 1
    backend = TorchAttentionBackend(ENCODER, CpuPlatform())
    torch.manual_seed(0)
    q, k, v = (torch.randn(sum(lens), 4, 8) for _ in range(3))
    out = backend.forward(q, k, v, torch.zeros(backend.kv_cache_shape(num_blocks)), meta)
    start = 0
    for n in lens:
        s = slice(start, start + n)
        expected = F.scaled_dot_product_attention(q[s].transpose(0, 1), k[s].transpose(0, 1), v[s].transpose(0, 1),
                                                  scale=8**-0.5).transpose(0, 1)  # no mask: every key
        torch.testing.assert_close(out[s], expected, atol=1e-5, rtol=1e-5)
        start += n


def test_selection_refuses_causal_only_backends_for_encoders(monkeypatch):
    monkeypatch.syspath_prepend(str(FAKES / "fake_attention"))
    plugin = importlib.import_module("pagoda_fake_attention.plugin")  # priority 10, causal only
    registry = PluginManager(modules={"fake-attention": plugin}, entry_points=False, block="").registry("attention")
    platform = CpuPlatform()
    assert registry.select("auto", platform=platform, spec=CAUSAL)[0] == "fake-attn"
    assert registry.select("auto", platform=platform, spec=ENCODER)[0] == "torch"
    with pytest.raises(IncompatibleChoiceError) as err:
        registry.select("fake-attn", platform=platform, spec=ENCODER)
    message = str(err.value)
    assert "bidirectional" in message and "--attention-backend torch" in message and "Usable here: torch" in message
