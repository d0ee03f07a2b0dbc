"""The flash kernels' control flow, emulated on CPU (tests/flash_emulation.py), against the float64
reference on random paged batches: shuffled block tables, cached prefixes, chunked prefills longer
than one 128-token query block, GQA groups of 1/4/8/20 (20: two programs of 16 rows), sliding
windows, split-KV decode. In float32 the emulation must match the reference to float32 accuracy:
any index, range or mask mistake would show as a large error. (40, 73) puts a warp's last query on
the first key of a tile (prefix 33 + 31 = 64) and (50, 80) a warp's first query right before a
tile's last key (prefix 30 + 32 = 62): off-by-one skips or masks of the prefill warps fail there."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from flash_emulation import BLOCK_M, emulate, prefill_block_n, prefill_warp_rows
from pagoda.attention.testing import make_batch, reference, rel_error
from pagoda.interfaces.attention import AttentionSpec

CSRC = Path(__file__).resolve().parents[3] / "csrc" / "attention"

MIXED = [(1, 37), (1, 5), (1, 300), (9, 9), (70, 70), (130, 200), (1 + 16, 50), (3, 180), (40, 73), (50, 80)]


def _check(spec: AttentionSpec, seqs, splits: int, seed: int, tol: float, short_query_len: int = 0,
           packed: bool = False) -> None:
    batch = make_batch(spec, seqs, "cpu", seed=seed)
    m = batch.metadata
    slots = m.slot_mapping
    kv = batch.kv_cache
    kv[0].view(-1, spec.num_kv_heads, spec.head_size)[slots] = batch.key  # the KV write runs first
    kv[1].view(-1, spec.num_kv_heads, spec.head_size)[slots] = batch.value
    out = emulate(batch.query, kv, m, spec.scale, spec.sliding_window, splits, short_query_len, packed)
    assert rel_error(out, reference(spec, batch)) < tol


@pytest.mark.parametrize(
    "heads,kv_heads,head,block,window,splits",
    [(4, 4, 64, 16, None, 1), (8, 2, 128, 16, None, 4), (8, 1, 64, 32, None, 8), (20, 1, 64, 16, None, 2),
     (4, 2, 256, 16, None, 1), (4, 1, 64, 8, 40, 4), (4, 4, 128, 16, 100, 1), (6, 2, 64, 24, None, 3)],
    ids=["mha-d64", "gqa4-d128-split4", "gqa8-b32-split8", "group20-split2", "d256", "window40-b8-split4",
         "window100-d128", "block24-split3"],
)
def test_emulated_kernels_match_the_reference(heads, kv_heads, head, block, window, splits) -> None:
    spec = AttentionSpec(heads, kv_heads, head, head**-0.5, block, torch.float32, window)
    _check(spec, MIXED, splits, seed=heads + head + splits, tol=1e-5)


@pytest.mark.parametrize("dtype,tol", [(torch.float16, 2e-3), (torch.bfloat16, 1e-2)])
def test_emulated_half_precision_within_bounds(dtype: torch.dtype, tol: float) -> None:
    spec = AttentionSpec(8, 2, 64, 64**-0.5, 16, dtype)
    _check(spec, [(1, 700), (1, 3), (100, 260)], 4, seed=3, tol=tol)


def test_emulated_splits_beyond_the_context_are_empty() -> None:
    """More splits than 64-key slices: the empty ones write lse = -inf and weigh nothing."""
    spec = AttentionSpec(4, 1, 64, 0.125, 16, torch.float32)
    _check(spec, [(1, 1), (1, 65), (1, 130)], 16, seed=5, tol=1e-5)


@pytest.mark.parametrize("head,splits", [(128, 48), (64, 72)])
def test_emulated_reduction_of_more_splits_than_one_batch_per_group(head, splits) -> None:
    """Past 8 splits per reduction group (4 groups at head 128, 8 at 64) the running max rescales the sums."""
    spec = AttentionSpec(8, 2, head, head**-0.5, 16, torch.float32)
    _check(spec, [(1, 64 * splits - 20), (1, 300)], splits, seed=head + splits, tol=1e-5)


@pytest.mark.parametrize(
    "heads,kv_heads,head,block,window",
    [(8, 2, 128, 16, None), (8, 1, 64, 32, None), (20, 1, 64, 16, None), (4, 1, 64, 8, 40), (6, 2, 64, 24, None),
     (4, 2, 256, 16, 100)],
    ids=["gqa4-d128", "gqa8-b32", "group20", "gqa4-window40-b8", "group3-b24", "gqa2-d256-window100"],
)
def test_emulated_prefill_with_packed_q_heads(heads, kv_heads, head, block, window) -> None:
    """The packed prefill (the default for GQA): a program's rows are (token, q head) pairs of one kv head (group 3 and 20
    put a block's first row inside a token; short and long chunks after cached prefixes)."""
    spec = AttentionSpec(heads, kv_heads, head, head**-0.5, block, torch.float32, window)
    _check(spec, MIXED + [(33, 1000), (200, 260)], 1, seed=heads + head, tol=1e-5, packed=True)


# a verify step: decodes, then queries of up to 16 tokens; (5, 20) and (8, 37) end mid-tile, (3, 3) is
# all query, (1, 1) a one-token sequence after the decodes, (16, 64) a prompt's recomputed last block
SHORT = [(1, 37), (1, 300), (4, 70), (8, 37), (3, 3), (1, 1), (5, 20), (8, 200), (6, 65), (16, 64), (13, 13)]


@pytest.mark.parametrize(
    "heads,kv_heads,head,block,window,splits",
    [(4, 4, 64, 16, None, 1), (8, 2, 128, 16, None, 4), (8, 1, 64, 32, None, 3), (20, 1, 64, 16, None, 2),
     (4, 1, 64, 8, 40, 4), (4, 2, 128, 16, 7, 1), (6, 2, 64, 24, None, 16)],
    ids=["mha", "gqa4-split4", "gqa8-b32-split3", "group20-split2", "window40-b8-split4", "window7", "block24-split16"],
)
def test_emulated_short_queries_on_the_decode_kernel(heads, kv_heads, head, block, window, splits) -> None:
    """Every sequence of a verify-sized step on the decode kernel: rows of (token, q head) over one to
    twenty programs a kv head (group 20 x 16 tokens), causal within each query, windows shorter than it."""
    spec = AttentionSpec(heads, kv_heads, head, head**-0.5, block, torch.float32, window)
    _check(spec, SHORT, splits, seed=heads + head + splits, tol=1e-5, short_query_len=16)


@pytest.mark.skipif(not CSRC.is_dir(), reason="needs the repository's csrc/")
def test_emulation_uses_the_kernels_tile_sizes() -> None:
    """The emulation's partition (query block, warp rows, key tile) is the kernel's: the reference
    comparison cannot see it (any partition gives the right answer), so read it from the sources."""
    header = (CSRC / "flash_attention.h").read_text()
    assert re.search(r"kFlashPrefillBlockM = (\d+);", header).group(1) == str(BLOCK_M)
    prefill = (CSRC / "flash_prefill.cu").read_text()
    row_tiles = re.search(r"kRowTiles = D <= (\d+) \? (\d+) : (\d+);", prefill).groups()
    block_n = re.search(r"kBlockN = D <= (\d+) \? (\d+) : (\d+);", prefill).groups()
    for d in (64, 128, 256):
        assert prefill_warp_rows(d) == 16 * int(row_tiles[1] if d <= int(row_tiles[0]) else row_tiles[2])
        assert prefill_block_n(d) == int(block_n[1] if d <= int(block_n[0]) else block_n[2])
