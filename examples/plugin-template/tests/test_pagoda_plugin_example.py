"""Tests of the 'example' attention backend: its registration, then its output on random paged
inputs (decodes and a chunked prefill) against Pagoda's torch reference backend."""

from __future__ import annotations

import pytest
import torch

from pagoda.attention.torch_ref import TorchAttentionBackend
from pagoda.interfaces import AttentionMetadata, AttentionSpec
from pagoda.platforms.cpu import CpuPlatform
from pagoda.plugins.manager import PluginManager

from pagoda_plugin_example import plugin
from pagoda_plugin_example.backend import ExampleBackend

SPEC = AttentionSpec(num_heads=4, num_kv_heads=2, head_size=16, scale=0.25, block_size=4, dtype=torch.float32)


def test_hook_registers_the_backend() -> None:
    manager = PluginManager(modules={"plugin-example": plugin}, entry_points=False)
    info = manager.plugins["plugin-example"]
    assert info.status == "loaded", info.errors
    assert info.registers == {"attention": ["example"]}
    selected = manager.registry("attention").select("example", platform=CpuPlatform(), spec=SPEC)
    assert selected == ("example", ExampleBackend)


def paged_batch(seq_lens: list[int], query_lens: list[int], num_blocks: int, gen: torch.Generator):
    """Random q/k/v for this step, a cache holding each sequence's earlier tokens, and metadata."""
    s = SPEC
    max_blocks = max(-(-n // s.block_size) for n in seq_lens)
    pool = torch.randperm(num_blocks, generator=gen)  # scatter each sequence over random blocks
    tables = pool[: len(seq_lens) * max_blocks].view(len(seq_lens), max_blocks).int()
    cache = torch.randn(2, num_blocks, s.block_size, s.num_kv_heads, s.head_size, generator=gen)
    slots = [
        int(tables[i, pos // s.block_size]) * s.block_size + pos % s.block_size
        for i, (n, q) in enumerate(zip(seq_lens, query_lens))
        for pos in range(n - q, n)
    ]
    tokens = sum(query_lens)
    qkv = [torch.randn(tokens, h, s.head_size, generator=gen) for h in (s.num_heads, s.num_kv_heads, s.num_kv_heads)]
    metadata = AttentionMetadata(
        slot_mapping=torch.tensor(slots),
        block_tables=tables,
        query_start_loc=torch.tensor([0, *torch.tensor(query_lens).cumsum(0).tolist()], dtype=torch.int32),
        seq_lens=torch.tensor(seq_lens, dtype=torch.int32),
        max_query_len=max(query_lens),
        max_seq_len=max(seq_lens),
        num_decodes=sum(q == 1 for q in query_lens),
    )
    return (*qkv, cache, metadata)


@pytest.mark.parametrize("seed", [0, 1])
def test_matches_the_torch_reference(seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    # two decodes (query length 1), a prefill chunk after 5 cached tokens, a whole prefill
    q, k, v, cache, metadata = paged_batch([9, 3, 12, 6], [1, 1, 7, 6], num_blocks=32, gen=gen)
    expected_cache = cache.clone()
    expected = TorchAttentionBackend(SPEC, CpuPlatform()).forward(q, k, v, expected_cache, metadata)
    out = ExampleBackend(SPEC, CpuPlatform()).forward(q, k, v, cache, metadata)
    assert out.shape == q.shape
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(cache, expected_cache)  # the same k/v written to the same slots
