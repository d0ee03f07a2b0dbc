"""The kernels compiled for a real GPU at real sizes (marked ``gpu``: skipped without CUDA)."""

from __future__ import annotations

import pytest
import torch

from pagoda.attention.testing import make_batch, reference, rel_error, replay_after_shortening
from pagoda.interfaces.attention import AttentionSpec
from test_kernels import PLATFORM, run_backend

pytestmark = pytest.mark.gpu

BF16_TOL, FP16_TOL, FP32_TOL = 1e-2, 2e-3, 1e-5  # relative L2 error bounds per dtype
TOLS = {torch.bfloat16: BF16_TOL, torch.float16: FP16_TOL, torch.float32: FP32_TOL}
MIXED = [(1, 3000), (1, 17), (1, 1024), (1, 700), (512, 512), (300, 2100), (77, 1500), (1000, 1000)]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=str)
@pytest.mark.parametrize(
    "heads,kv_heads,head,block,window",
    [(32, 8, 128, 16, None), (32, 32, 64, 32, None), (16, 2, 256, 16, None), (32, 4, 128, 32, 512), (8, 1, 80, 16, None)],
    ids=["gqa4-d128", "mha-d64-b32", "gqa8-d256", "window512", "mqa-d80"],
)
def test_mixed_batch_real_sizes(dtype, heads, kv_heads, head, block, window) -> None:
    spec = AttentionSpec(heads, kv_heads, head, head**-0.5, block, dtype, window)
    batch = make_batch(spec, MIXED, "cuda", seed=heads + head)
    out = run_backend(spec, batch)
    assert rel_error(out, reference(spec, batch, "cuda")) < TOLS[dtype]


@pytest.mark.parametrize("splits", [None, 8, 32])
def test_split_kv_decode_long_context(splits) -> None:
    spec = AttentionSpec(32, 8, 128, 128**-0.5, 16, torch.bfloat16)
    batch = make_batch(spec, [(1, 16000), (1, 9000), (1, 1), (1, 4097)], "cuda", seed=11)
    out = run_backend(spec, batch, splits=splits)
    assert rel_error(out, reference(spec, batch, "cuda")) < BF16_TOL


@pytest.mark.parametrize("splits", [None, 1, 16])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_verify_sized_queries_real_sizes(dtype, splits) -> None:
    """Decodes, then sequences of 2-8 query tokens (a verify step) at long contexts: the decode kernel."""
    spec = AttentionSpec(32, 8, 128, 128**-0.5, 16, dtype)
    batch = make_batch(spec, [(1, 3000), (5, 16000), (8, 4100), (2, 2), (5, 700)], "cuda", seed=13)
    out = run_backend(spec, batch, splits=splits)
    assert rel_error(out, reference(spec, batch, "cuda")) < TOLS[dtype]


def test_decode_replays_in_a_cuda_graph() -> None:
    """Capture one decode step; replay after changing lengths and tables in place: same as eager."""
    from pagoda_attention_triton.backend import TritonAttentionBackend

    spec = AttentionSpec(32, 8, 128, 128**-0.5, 16, torch.bfloat16)
    batch = make_batch(spec, [(1, 3000), (1, 100), (1, 5000), (1, 64)], "cuda", seed=12)
    backend = TritonAttentionBackend(spec, PLATFORM)
    backend.force_num_splits = 8
    out, expected, _ = replay_after_shortening(backend, batch, [1000, 50, 7, 1])
    assert torch.equal(out, expected)


@pytest.mark.parametrize("splits", [1, 8])
def test_dependent_launch_gives_the_same_bits(splits) -> None:
    """kv write, decode and reduction launched as programmatic dependents (sm_90+): the same output as
    plain launches, eagerly and replayed in a CUDA graph after the inputs change."""
    from pagoda_attention_triton.backend import TritonAttentionBackend

    if torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("programmatic dependent launch needs sm_90+")
    spec = AttentionSpec(32, 8, 128, 128**-0.5, 16, torch.bfloat16)
    outputs = []
    for pdl in (False, True):
        batch = make_batch(spec, [(1, 3000), (1, 100), (1, 5000), (1, 64)], "cuda", seed=13)
        backend = TritonAttentionBackend(spec, PLATFORM)
        backend.force_num_splits, backend.pdl = splits, pdl
        eager = backend.forward(batch.query, batch.key, batch.value, batch.kv_cache, backend.prepare(batch.metadata))
        replayed, expected, _ = replay_after_shortening(backend, batch, [1000, 50, 7, 1])
        assert torch.equal(replayed, expected)
        outputs.append((eager, replayed))
    assert all(torch.equal(a, b) for other in outputs[1:] for a, b in zip(outputs[0], other))
