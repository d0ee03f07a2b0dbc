"""Multi-head latent attention in the contract and the torch backend: the latent cache's shape, the torch
backend against a float64 reference, and selection refusing (naming MLA) the backends that lack it."""

from __future__ import annotations

import pytest
import torch

from pagoda.attention.testing import latent_reference, make_latent_batch, rel_error
from pagoda.attention.torch_ref import TorchAttentionBackend
from pagoda.errors import IncompatibleChoiceError
from pagoda.interfaces.attention import AttentionBackend, AttentionSpec, MLASpec, contract_reason
from pagoda.platforms.cpu import CpuPlatform
from pagoda.plugins import get_plugin_manager

MIXED = [(1, 37), (1, 5), (1, 64), (9, 9), (7, 40), (17, 50)]  # decodes, a prompt, chunks after cached prefixes


def mla_spec(heads: int = 4, rank: int = 32, rope: int = 16, block: int = 16, dtype=torch.float32, **kw):
    return AttentionSpec(heads, 1, rank + rope, (rank // 2 + rope) ** -0.5, block, dtype, mla=MLASpec(rank, rope), **kw)


def test_the_cache_is_one_latent_row_per_token() -> None:
    backend = TorchAttentionBackend(mla_spec(rank=512, rope=64), CpuPlatform())
    assert backend.kv_cache_shape(10) == (10, 16, 576)  # DeepSeek-V3: 576 values a token a layer, any head count


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
def test_torch_backend_matches_the_float64_reference(dtype, tol) -> None:
    spec = mla_spec(dtype=dtype)
    batch = make_latent_batch(spec, MIXED, seed=1)
    out = TorchAttentionBackend(spec, CpuPlatform()).forward_mla(batch.query, batch.latent, batch.kv_cache,
                                                                  batch.metadata)
    assert out.shape == (batch.query.shape[0], 4, 32) and out.dtype == dtype
    assert rel_error(out, latent_reference(spec, batch)) < tol
    rows = batch.kv_cache.view(-1, 48)[batch.metadata.slot_mapping]
    assert torch.equal(rows, batch.latent)  # this step's rows were written before attending


def test_padding_slots_are_not_written() -> None:
    spec = mla_spec()
    batch = make_latent_batch(spec, [(1, 9), (4, 4)], seed=2)
    slots = batch.metadata.slot_mapping.clone()
    slots[1] = -1
    before = batch.kv_cache.clone()
    batch.metadata.slot_mapping = slots
    TorchAttentionBackend(spec, CpuPlatform()).forward_mla(batch.query, batch.latent, batch.kv_cache, batch.metadata)
    changed = (batch.kv_cache != before).any(-1).flatten().nonzero().flatten()
    assert sorted(changed.tolist()) == sorted(s for s in slots.tolist() if s >= 0)


class StandardOnly(AttentionBackend):
    def forward(self, query, key, value, kv_cache, metadata):
        raise AssertionError("not called")


def test_contract_refuses_backends_without_mla_naming_it() -> None:
    spec = mla_spec()
    assert "multi-head latent attention" in contract_reason(StandardOnly, spec)
    assert contract_reason(TorchAttentionBackend, spec) is None
    fp8 = mla_spec(kv_cache_dtype="fp8")
    assert "latent attention cache is stored in the model dtype" in contract_reason(TorchAttentionBackend, fp8)


def test_selection_names_mla_for_flash_and_auto_skips_it() -> None:
    pytest.importorskip("pagoda_attention_flash")
    attention = get_plugin_manager().registry("attention")
    with pytest.raises(IncompatibleChoiceError, match="multi-head latent attention"):
        attention.select("flash", platform=CpuPlatform(), spec=mla_spec())
    name, backend = attention.select("auto", platform=CpuPlatform(), spec=mla_spec())
    assert name in ("torch", "cpu") and backend.supports_mla  # cpu: the torch reference's latent path
