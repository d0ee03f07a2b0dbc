"""Mixtral / Qwen3-MoE beyond logits parity: the Triton MoE inside a whole model, and loading errors."""

from __future__ import annotations

import importlib.util
import os

import pytest
import safetensors.torch as st
import torch

from pagoda.errors import ModelLoadError
from pagoda.layers.moe import FusedMoE
from pagoda.interfaces.ops import CustomOps
from pagoda.testing import import_triton_kernels
from hf_tiny import hf_logits, load_pagoda, run_prefill, save_tiny

PROMPT = [5, 17, 42, 3, 88, 61, 7, 7, 29, 90, 14, 2, 55, 31]


class TritonMoeOps(CustomOps):
    """The reference ops with the fused MoE Triton kernel (under the interpreter on CPU)."""

    def fused_moe(self, x, w13, w2, topk_weights, topk_ids):
        from pagoda.layers.fused_moe_triton import fused_moe_triton

        return fused_moe_triton(x, w13, w2, topk_weights, topk_ids, self.silu_and_mul)


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="needs triton")
@pytest.mark.parametrize("kind", ["mixtral", "qwen3_moe"])
def test_triton_moe_model_matches_transformers(tmp_path, monkeypatch, kind):
    if torch.cuda.is_available():  # a CPU model, the kernel under the interpreter; on GPUs: test_fused_moe's
        pytest.skip("CPU test (the kernel on GPUs: test_fused_moe.py's gpu tests)")
    if import_triton_kernels("pagoda.layers.fused_moe_triton"):
        monkeypatch.setenv("TRITON_INTERPRET", "1")
    hf = save_tiny(kind, tmp_path)
    model, ctx = load_pagoda(tmp_path)
    moes = [m for m in model.modules() if isinstance(m, FusedMoE)]
    assert len(moes) == (2 if kind == "mixtral" else 1)  # qwen3_moe's layer 1 is dense
    for moe in moes:
        moe.ops = TritonMoeOps()
    ours, theirs = run_prefill(model, ctx, [PROMPT]), hf_logits(hf, PROMPT)
    assert (ours - theirs).abs().max().item() < 1e-4
    assert os.environ.get("TRITON_INTERPRET") in (None, "1")


def test_missing_expert_tensor_is_named(tmp_path):
    save_tiny("mixtral", tmp_path)
    tensors = st.load_file(tmp_path / "model.safetensors")
    del tensors["model.layers.1.block_sparse_moe.experts.4.w3.weight"]
    st.save_file(tensors, tmp_path / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ModelLoadError, match=r"lacks 1 tensor\(s\).*layers\.1\.block_sparse_moe\.experts\.4\.w3\.weight"):
        load_pagoda(tmp_path)


def test_expert_tensor_of_wrong_shape_is_refused(tmp_path):
    save_tiny("qwen3_moe", tmp_path)
    tensors = st.load_file(tmp_path / "model.safetensors")
    name = "model.layers.0.mlp.experts.2.down_proj.weight"
    tensors[name] = tensors[name][:, :-1].contiguous()
    st.save_file(tensors, tmp_path / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ModelLoadError, match="experts.2.down_proj.weight"):
        load_pagoda(tmp_path)
