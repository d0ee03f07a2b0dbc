"""The CPU platform's ops against the torch reference (CustomOps) in float64-checked float32, and the bounds
on the shapes oneDNN meets."""

from __future__ import annotations

import mmap

import pytest
import torch
import torch.nn.functional as F

from pagoda.interfaces.ops import CustomOps
from pagoda.platforms.cpu import CpuPlatform
from pagoda.platforms.cpu_ops import CpuOps, packed_dtypes, row_bucket

pytestmark = pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="needs oneDNN (mkldnn)")


@pytest.mark.parametrize("rows", [1, 3, 17, 64, 65, 300])
@pytest.mark.parametrize("bias", [False, True])
def test_packed_linear_equals_the_float64_product(rows: int, bias: bool):
    torch.manual_seed(rows)
    ops = CpuOps()
    w, x = torch.randn(96, 48), torch.randn(rows, 48)
    b = torch.randn(96) if bias else None
    packed = ops.pack_linear_weight(w)
    assert packed is not None and packed.shape == w.shape and packed.dtype == w.dtype
    want = F.linear(x.double(), w.double(), None if b is None else b.double())
    got = ops.linear(x, packed, b)
    assert got.shape == (rows, 96) and (got.double() - want).abs().max() < 1e-4
    assert ops.linear(x, w, b).equal(F.linear(x, w, b))  # an unpacked weight: the reference


def test_weights_it_cannot_pack_stay_as_they_are():
    ops = CpuOps()
    assert ops.pack_linear_weight(torch.randn(4, 4, dtype=torch.float16)) is None
    assert ops.pack_linear_weight(torch.randn(2, 4, 4)) is None


def test_bf16_is_packed_only_where_the_cpu_has_onednns_bf16_path():
    """An AVX2-only CPU cannot pack bf16 (oneDNN raises); its bf16 weights stay dense and the product still runs."""
    torch.manual_seed(0)
    ops, w, x = CpuOps(), torch.randn(32, 16, dtype=torch.bfloat16), torch.randn(5, 16, dtype=torch.bfloat16)
    bf16_path = torch.ops.mkldnn._is_mkldnn_bf16_supported()
    assert (torch.bfloat16 in packed_dtypes()) == bf16_path
    packed = ops.pack_linear_weight(w)
    assert (packed is not None) == bf16_path
    got = ops.linear(x, packed if packed is not None else w)
    assert (got.float() - F.linear(x.float(), w.float())).abs().max() < 0.1


def test_row_counts_are_bounded_to_a_few_shapes():
    buckets = {row_bucket(n) for n in range(1, 2049)}
    assert len(buckets) <= 65
    assert row_bucket(1) == 1 and all(n <= row_bucket(n) <= n + 1 for n in range(2, 17))
    assert all(n <= row_bucket(n) <= n * 9 / 8 for n in range(17, 2049))


def test_rotary_rms_norm_and_cache_writes_equal_the_reference():
    torch.manual_seed(0)
    ref, ops = CustomOps(), CpuOps()
    t, heads, kv_heads, d = 37, 6, 2, 32
    cache = torch.randn(512, d)
    pos = torch.randint(0, 512, (t,))
    q, k = torch.randn(t, heads * d), torch.randn(t, kv_heads * d)
    q1, k1, q2, k2 = q.clone(), k.clone(), q.clone(), k.clone()
    ref.rotary_embedding(pos, q1, k1, d, cache, True)
    ops.rotary_embedding(pos, q2, k2, d, cache, True)
    assert torch.allclose(q1, q2, atol=1e-5) and torch.allclose(k1, k2, atol=1e-5)
    x, weight = torch.randn(t, 64), torch.randn(64)
    assert torch.allclose(ops.rms_norm(x, weight, 1e-6), ref.rms_norm(x, weight, 1e-6), atol=1e-5)
    for slots in (torch.randperm(80)[:t], torch.where(torch.arange(t) % 5 == 0, -1, torch.randperm(80)[:t])):
        key, value = torch.randn(t, kv_heads, d), torch.randn(t, kv_heads, d)
        want, got = torch.zeros(2, 10, 8, kv_heads, d), torch.zeros(2, 10, 8, kv_heads, d)
        ref.reshape_and_cache(key, value, want, slots)
        ops.reshape_and_cache(key, value, got, slots)
        assert got.equal(want)


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * mmap.PAGESIZE


def test_a_large_kv_cache_is_zeroed_and_committed_only_as_written():
    before = _rss_bytes()
    tensor = CpuPlatform().kv_cache_tensor((2, 2048, 16, 8, 64), torch.float32)  # 256 MiB
    assert _rss_bytes() - before < 16 << 20  # nothing committed yet
    tensor[:, :4] = 1.0  # four blocks written
    assert _rss_bytes() - before < 16 << 20
    assert tensor[:, 4:].abs().sum() == 0 and tensor[:, :4].sum() == 2 * 4 * 16 * 8 * 64
