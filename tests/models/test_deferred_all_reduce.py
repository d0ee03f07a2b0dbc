"""Under tensor parallelism the decoder leaves the sums of o_proj and down_proj to the residual-add
RMSNorms after them (one fused kernel on GPUs). Here, without processes: which layers defer and which
norms sum, per model family; and the norm's three paths (the platform's fused op, the all-reduce then
the fused norm, a quantizer's own norm) against the unfused reference."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from hf_tiny import BLOCK_SIZE, build_ctx, hf_config
from pagoda.attention.torch_ref import TorchAttentionBackend
from pagoda.interfaces.parallel import SINGLE, FastAllReduce, TensorParallel
from pagoda.interfaces.quantization import InputQuantizer
from pagoda.layers.norm import RMSNorm
from pagoda.interfaces.ops import CustomOps
from pagoda.models import model_class
from pagoda.models.spec import attention_spec
from pagoda.platforms.cpu import CpuPlatform


def build(kind: str, tp: TensorParallel, **overrides):
    config = hf_config(kind, **overrides)
    spec = attention_spec(config, BLOCK_SIZE, torch.float32, tp.size)  # the rank's heads
    ctx = dataclasses.replace(build_ctx(config), attention=TorchAttentionBackend(spec, CpuPlatform()), tp=tp)
    architecture = type(config).__name__.replace("Config", "ForCausalLM")  # LlamaForCausalLM, Qwen3MoeForCausalLM
    return model_class(architecture)(config, ctx).model


def summing_norms(model) -> list[str]:
    names = [f"layers.{i}.{n}" for i, layer in enumerate(model.layers)
             for n in ("input_layernorm", "post_attention_layernorm") if getattr(layer, n).input_tp.size > 1]
    return names + (["norm"] if model.norm.input_tp.size > 1 else [])


TP2 = TensorParallel(rank=0, size=2)  # construction only: no collective runs here


def test_o_proj_and_down_proj_defer_into_the_norms_after_them() -> None:
    model = build("llama", TP2)
    assert summing_norms(model) == ["layers.0.post_attention_layernorm", "layers.1.input_layernorm",
                                    "layers.1.post_attention_layernorm", "norm"]
    for layer in model.layers:
        assert layer.self_attn.o_proj.partial_output and layer.mlp.down_proj.partial_output
        assert not layer.self_attn.qkv_proj.partial_output and not layer.mlp.gate_up_proj.partial_output


def test_single_rank_models_are_unchanged() -> None:
    model = build("llama", SINGLE)
    assert summing_norms(model) == []
    assert not any(layer.self_attn.o_proj.partial_output or layer.mlp.down_proj.partial_output
                   for layer in model.layers)


def test_a_biased_o_proj_keeps_its_sum_and_moe_blocks_keep_theirs() -> None:
    biased = build("llama", TP2, attention_bias=True)  # the bias is added after the sum: o_proj sums itself
    assert summing_norms(biased) == ["layers.1.input_layernorm", "norm"]
    moe = build("qwen3_moe", TP2)  # layer 0 sparse (its experts sum inside), layer 1 dense
    assert summing_norms(moe) == ["layers.0.post_attention_layernorm", "layers.1.post_attention_layernorm", "norm"]


class DoublingAllReduce(FastAllReduce):
    """Two ranks holding the same partial sums: the sum is ``2 x``. Counts its calls."""

    def __init__(self, fused: bool) -> None:
        self.takes_fused, self.calls = fused, []

    def fits(self, x: torch.Tensor) -> bool:
        return True

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        self.calls.append("sum")
        return 2 * x

    def fits_add_rms_norm(self, x, residual, weight) -> bool:
        return self.takes_fused

    def add_rms_norm(self, x, residual, weight, eps):
        self.calls.append("fused")
        return CustomOps().fused_add_rms_norm(2 * x, residual, weight, eps)


class Halving(InputQuantizer):
    """A stand-in quantizer: 'quantizes' by halving (its fused norm is the default composition)."""

    def quantize(self, x: torch.Tensor) -> torch.Tensor:
        return x / 2


@pytest.mark.parametrize("fused, quant, calls", [(True, False, ["fused"]), (False, False, ["sum"]),
                                                 (True, True, ["sum"])])
def test_a_summing_norm_equals_the_unfused_sequence(fused: bool, quant: bool, calls: list[str]) -> None:
    torch.manual_seed(0)
    norm = RMSNorm(32, 1e-5, CustomOps(), torch.float32)
    norm.weight.data.uniform_(0.5, 1.5)
    fast = DoublingAllReduce(fused)

    class Producer(torch.nn.Module):
        def defer_all_reduce(self) -> bool:
            return True

    norm.take_all_reduce_of(Producer(), TensorParallel(rank=0, size=2, fast=fast))
    x, residual = torch.randn(3, 32), torch.randn(3, 32)
    expected, expected_residual = CustomOps().fused_add_rms_norm(2 * x, residual.clone(), norm.weight, 1e-5)
    got, got_residual = norm(x, residual.clone(), Halving() if quant else None)
    assert fast.calls == calls
    assert torch.allclose(got, expected / 2 if quant else expected) and torch.allclose(got_residual, expected_residual)
    with pytest.raises(ValueError, match="needs the residual"):
        norm(x)
