"""The flash kernels on a real GPU (marked ``gpu``: skipped without CUDA) against the float64
reference: random varlen batches with shuffled block tables and cached prefixes, GQA 1/4/8 (and a
group of 20 q heads), head sizes 64/128/256, fp16 and bf16, sliding windows, split-KV decode.

Outputs and split scratch are NaN-filled before each run, and cache slots outside every sequence
are NaN too (the kernels must neither read them nor leave an output unwritten), as are this step's
slots until its KV write (read only after it); every case runs
twice and must be bit-identical (no races). On a GPU, kernels that did not build fail these tests
(pagoda.testing.built_kernels) instead of skipping them.
"""

from __future__ import annotations

import pytest
import torch

from pagoda.attention.testing import make_batch, reference, rel_error, replay_after_shortening
from pagoda.interfaces.attention import AttentionSpec
from pagoda.testing import built_kernels

pytestmark = pytest.mark.gpu

TOLS = {torch.bfloat16: 1e-2, torch.float16: 2e-3}  # relative L2 error bounds
MIXED = [(1, 3000), (1, 17), (1, 1024), (1, 700), (512, 512), (300, 2100), (77, 1500), (1000, 1000), (1, 5)]
LONG_DECODES = [(1, 16000), (1, 9000), (1, 1), (1, 4097)]


def platform_and_kernels():
    """(the CUDA platform, the kernels module); raises where the kernels did not build."""
    from pagoda_attention_flash.kernels import extension
    from pagoda_platform_cuda.platform import CudaPlatform

    ext, reason = extension()
    if ext is None:
        raise RuntimeError(reason)
    return CudaPlatform(), ext


@pytest.fixture(scope="module")
def cuda():
    """(the CUDA platform, the kernels module): skips without a GPU, fails on one without the kernels."""
    return built_kernels("the flash kernels", platform_and_kernels)


def poison_unused_slots(batch, spec: AttentionSpec) -> None:
    """NaN in every cache slot that no sequence's context covers (spare blocks, page tails)."""
    m = batch.metadata
    used = torch.zeros(batch.kv_cache.shape[1] * spec.block_size, dtype=torch.bool, device=batch.kv_cache.device)
    for table, seq_len in zip(m.block_tables.tolist(), m.seq_lens.tolist()):
        pos = torch.arange(seq_len, device=used.device)
        blocks = torch.tensor(table, device=used.device)[pos // spec.block_size]
        used[blocks * spec.block_size + pos % spec.block_size] = True
    for half in batch.kv_cache:
        half.view(-1, spec.num_kv_heads, spec.head_size)[~used] = float("nan")


def run_poisoned(cuda, spec: AttentionSpec, batch, splits: int | None, short_queries: int | None = None) -> torch.Tensor:
    """KV write, then the attention op into a NaN-filled output (NaN-filled scratch too); ``short_queries``:
    the backend's ``short_query_max`` (None: its default)."""
    from pagoda_attention_flash.backend import FlashAttentionBackend
    from pagoda_attention_flash.kernels import flash_attention

    platform, _ = cuda
    backend = FlashAttentionBackend(spec, platform)
    backend.force_num_splits = splits
    if short_queries is not None:
        backend.short_query_max = short_queries
    m = backend.prepare(batch.metadata)
    plan = m.extra
    if plan.decode_scratch is not None:
        for t in plan.decode_scratch:
            t.fill_(float("nan"))
    for half in batch.kv_cache:  # this step's slots hold NaN until its KV write: a read before that shows
        half.view(-1, spec.num_kv_heads, spec.head_size)[m.slot_mapping.long()] = float("nan")
    backend.ops.reshape_and_cache(batch.key, batch.value, batch.kv_cache, m.slot_mapping)
    out = torch.full(batch.query.shape, float("nan"), dtype=spec.dtype, device="cuda")
    flash_attention(out, batch.query, batch.kv_cache, m.block_tables, m.query_start_loc, m.seq_lens, m.num_decodes,
                    spec.scale, spec.sliding_window, plan.num_splits, plan.decode_scratch, plan.short_query_len)
    torch.cuda.synchronize()
    return out


def check_case(cuda, spec: AttentionSpec, seqs, seed: int, splits: int | None = None,
               short_queries: int | None = None) -> torch.Tensor:
    batch = make_batch(spec, seqs, "cuda", seed=seed)
    poison_unused_slots(batch, spec)
    first = run_poisoned(cuda, spec, batch, splits, short_queries)
    assert rel_error(first, reference(spec, batch, "cuda")) < TOLS[spec.dtype]
    again = run_poisoned(cuda, spec, batch, splits, short_queries)
    assert torch.equal(first, again), "two runs differ: a race or an uninitialised read"
    return first


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize(
    "heads,kv_heads,head,block,window",
    [(32, 32, 64, 16, None), (32, 8, 128, 16, None), (32, 4, 128, 32, None), (16, 2, 256, 16, None),
     (32, 8, 128, 16, 512), (40, 2, 64, 16, None), (8, 8, 256, 32, 300), (32, 8, 128, 24, None)],
    ids=["mha-d64", "gqa4-d128", "gqa8-d128-b32", "gqa8-d256", "gqa4-window512", "group20-d64", "mha-d256-window300",
         "gqa4-d128-b24"],  # b24: the prefill kernel's block-size division by multiply-high (FastDiv), not a shift
)
def test_mixed_batches_against_the_reference(cuda, dtype, heads, kv_heads, head, block, window) -> None:
    spec = AttentionSpec(heads, kv_heads, head, head**-0.5, block, dtype, window)
    check_case(cuda, spec, MIXED, seed=heads + head)


@pytest.mark.parametrize("splits", [None, 1, 8, 32, 64])  # 64: two batches per reduction group at head 128
@pytest.mark.parametrize("head", [64, 128, 256])
def test_split_kv_decode_long_contexts(cuda, splits, head) -> None:
    spec = AttentionSpec(32, 8, head, head**-0.5, 16, torch.bfloat16)
    check_case(cuda, spec, LONG_DECODES, seed=11 + head, splits=splits)


@pytest.mark.parametrize("q_len", [1, 15, 64, 65, 128, 129, 200])
def test_chunked_prefill_after_long_cached_prefix(cuda, q_len) -> None:
    """Prefix caching and chunked prefill: a few new tokens after thousands of cached ones."""
    spec = AttentionSpec(32, 8, 128, 128**-0.5, 16, torch.float16)
    check_case(cuda, spec, [(1, 40), (q_len, 5000), (q_len + 3, 700), (2, 2)], seed=q_len)


def test_prefill_only_and_decode_only_batches(cuda) -> None:
    spec = AttentionSpec(32, 8, 128, 128**-0.5, 16, torch.bfloat16)
    check_case(cuda, spec, [(700, 700), (64, 64), (128, 128), (129, 129), (3, 3)], seed=21)
    check_case(cuda, spec, [(1, n) for n in (1, 2, 63, 64, 65, 1000, 2049)], seed=22)


def test_decode_replays_in_a_cuda_graph(cuda) -> None:
    """Capture one decode step; replay after changing lengths in place: equal to eager."""
    from pagoda_attention_flash.backend import FlashAttentionBackend

    platform, _ = cuda
    spec = AttentionSpec(32, 8, 128, 128**-0.5, 16, torch.bfloat16)
    batch = make_batch(spec, [(1, 3000), (1, 100), (1, 5000), (1, 64)], "cuda", seed=12)
    backend = FlashAttentionBackend(spec, platform)
    backend.force_num_splits = 8
    out, expected, shortened = replay_after_shortening(backend, batch, [1000, 50, 7, 1])
    assert torch.equal(out, expected)
    assert rel_error(expected, reference(spec, shortened, "cuda")) < TOLS[spec.dtype]



# a verify step: decodes, then queries of 2-16 tokens (one of 1) after short and long contexts (16 after
# 1008: the recomputed last block of a prompt found whole in the prefix cache)
SHORT = [(1, 3000), (1, 40), (4, 700), (2, 17), (8, 5000), (3, 3), (1, 1), (5, 64), (16, 1024), (11, 11)]


@pytest.mark.parametrize("splits", [None, 1, 8])
@pytest.mark.parametrize(
    "heads,kv_heads,head,window",
    [(32, 8, 128, None), (32, 32, 64, None), (32, 4, 128, None), (40, 2, 64, None), (16, 2, 256, None),
     (32, 8, 128, 300)],
    ids=["gqa4-d128", "mha-d64", "gqa8-d128", "group20-d64", "gqa8-d256", "gqa4-window300"],
)
def test_short_queries_on_the_decode_kernel(cuda, splits, heads, kv_heads, head, window) -> None:
    """A step of queries of at most 16 tokens on the decode kernel (each query's tokens causal among
    themselves, rows of (token, q head) over one or more programs): against the float64 reference,
    and equal within tolerance to the prefill kernel's output for the same batch."""
    from pagoda_attention_flash.backend import FlashAttentionBackend

    spec = AttentionSpec(heads, kv_heads, head, head**-0.5, 16, torch.bfloat16, window)
    backend = FlashAttentionBackend(spec, cuda[0])
    backend.short_query_max = 16
    assert backend.prepare(make_batch(spec, SHORT, "cuda", seed=1).metadata).extra.short_query_len == 16
    short = check_case(cuda, spec, SHORT, seed=heads + head, splits=splits, short_queries=16)
    prefill = check_case(cuda, spec, SHORT, seed=heads + head, splits=splits, short_queries=0)
    assert rel_error(short, prefill.double().cpu()) < TOLS[spec.dtype]


def test_short_queries_replay_in_a_cuda_graph(cuda) -> None:
    """Capture one verify-sized step; replay after shortening the contexts in place: equal to eager."""
    from pagoda_attention_flash.backend import FlashAttentionBackend

    spec = AttentionSpec(32, 8, 128, 128**-0.5, 16, torch.bfloat16)
    batch = make_batch(spec, [(5, 3000), (5, 100), (5, 5000), (5, 64)], "cuda", seed=14)
    backend = FlashAttentionBackend(spec, cuda[0])
    backend.force_num_splits = 8
    out, expected, shortened = replay_after_shortening(backend, batch, [1000, 50, 7, 1])
    assert backend.prepare(batch.metadata).extra.short_query_len == 5
    assert torch.equal(out, expected)
    assert rel_error(expected, reference(spec, shortened, "cuda")) < TOLS[spec.dtype]
