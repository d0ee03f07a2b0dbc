"""The Triton multi-head latent attention kernels (DeepSeek-V2/V3) against a float64 reference on random
paged batches (CPU: interpreter): decodes at several context lengths and split counts, prefills and chunks
after cached prefixes, head counts that fill one head block, several, or part of one."""

from __future__ import annotations

import pytest
import torch

from pagoda.attention.testing import latent_reference, make_latent_batch, rel_error
from pagoda.interfaces.attention import AttentionSpec, MLASpec
from pagoda_attention_triton.backend import TritonAttentionBackend
from pagoda_attention_triton.mla import write_latent
from test_kernels import DEVICE, FP32_TOL, PLATFORM

MIXED = [(1, 37), (1, 5), (1, 64), (9, 9), (7, 40), (17, 50)]  # decodes, a prompt, chunks after cached prefixes


def mla_spec(heads: int, rank: int, rope: int, block: int = 16, dtype=torch.float32) -> AttentionSpec:
    return AttentionSpec(heads, 1, rank + rope, (rank // 4 + rope) ** -0.5, block, dtype, mla=MLASpec(rank, rope))


def run_mla(spec: AttentionSpec, batch, splits: int | None = None) -> torch.Tensor:
    backend = TritonAttentionBackend(spec, PLATFORM)
    backend.force_num_splits = splits
    metadata = backend.prepare(batch.metadata)
    return backend.forward_mla(batch.query, batch.latent, batch.kv_cache, metadata)


def test_latent_write_is_exact_and_skips_padding() -> None:
    spec = mla_spec(4, 32, 16)
    batch = make_latent_batch(spec, [(1, 20), (5, 9)], DEVICE, seed=1)
    slots = batch.metadata.slot_mapping.clone()
    slots[2] = -1  # a padding token
    expected = batch.kv_cache.clone()
    expected.view(-1, 48)[slots[slots >= 0]] = batch.latent[slots >= 0]
    write_latent(batch.latent, batch.kv_cache, slots)
    assert torch.equal(batch.kv_cache, expected)


@pytest.mark.parametrize("heads,rank,rope,block", [(4, 32, 16, 16), (16, 64, 16, 32), (20, 32, 8, 16), (1, 16, 16, 8)],
                         ids=["4-heads", "16-heads-one-block", "20-heads-two-blocks-rope8", "1-head-rank16"])
def test_mixed_prefill_and_decode_batch(heads: int, rank: int, rope: int, block: int) -> None:
    spec = mla_spec(heads, rank, rope, block)
    batch = make_latent_batch(spec, MIXED, DEVICE, seed=heads + rank)
    out = run_mla(spec, batch)
    assert out.shape == (batch.query.shape[0], heads, rank)
    assert rel_error(out, latent_reference(spec, batch)) < FP32_TOL
    assert torch.equal(batch.kv_cache.view(-1, rank + rope)[batch.metadata.slot_mapping], batch.latent)


@pytest.mark.parametrize("context", [1, 33, 200, 613])
@pytest.mark.parametrize("splits", [1, 2, 4, 8])
def test_split_kv_decode(context: int, splits: int) -> None:
    spec = mla_spec(8, 64, 16)
    batch = make_latent_batch(spec, [(1, context), (1, max(1, context // 3)), (1, context + 5)], DEVICE, seed=context)
    assert rel_error(run_mla(spec, batch, splits), latent_reference(spec, batch)) < FP32_TOL


def test_bfloat16_within_its_precision() -> None:
    spec = mla_spec(16, 64, 16, dtype=torch.bfloat16)
    batch = make_latent_batch(spec, MIXED, DEVICE, seed=5)
    assert rel_error(run_mla(spec, batch, 4), latent_reference(spec, batch)) < 2e-2


def test_the_spec_check_names_what_it_refuses() -> None:
    assert TritonAttentionBackend.check(PLATFORM, mla_spec(128, 512, 64)) is None  # DeepSeek-V3's shape
    assert "kv_lora_rank 16 to 1024" in TritonAttentionBackend.check(PLATFORM, mla_spec(4, 2048, 64))
