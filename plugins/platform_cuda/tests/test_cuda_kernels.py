"""Each csrc kernel against the torch reference (CustomOps) computed in float64.

Outputs are poisoned with NaN before each launch; error bounds come from the dtype's rounding:
a few units of its machine epsilon, relative to the reference (plus the same relative to the
reference's mean magnitude, for sums that cancel). reshape_and_cache must be exact.
"""

from __future__ import annotations

import pytest
import torch

from pagoda.interfaces.ops import CustomOps

pytest.importorskip("pagoda_platform_cuda", reason="pagoda-platform-cuda is not installed")
pytestmark = pytest.mark.gpu

DTYPES = [torch.float16, torch.bfloat16, torch.float32]
REF = CustomOps()


def assert_close(out: torch.Tensor, ref: torch.Tensor, ulps: float = 4.0) -> None:
    """|out - ref| <= ulps * eps(dtype) * (|ref| + mean|ref|) elementwise; NaN never passes."""
    assert not out.isnan().any(), "unwritten (NaN) elements"
    tol = ulps * torch.finfo(out.dtype).eps + 32 * torch.finfo(torch.float32).eps
    err = (out.double() - ref).abs()
    bound = tol * (ref.abs() + ref.abs().mean())
    worst = (err / bound).max().item()
    assert worst <= 1.0, f"error {worst:.2f}x the bound (max abs err {err.max().item():.3g})"


def rand(*shape: int, dtype: torch.dtype) -> torch.Tensor:
    return torch.randn(*shape, device="cuda").to(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hidden", [576, 4096, 5120, 100, 4093])
@pytest.mark.parametrize("num_tokens", [1, 7, 130])
def test_rms_norm(cuda_ops, dtype, hidden, num_tokens):
    x, w = rand(num_tokens, hidden, dtype=dtype), rand(hidden, dtype=dtype)
    out = torch.full_like(x, float("nan"))
    cuda_ops.kernels.rms_norm(out, x, w, 1e-6)
    assert_close(out, REF.rms_norm(x.double(), w.double(), 1e-6))


@pytest.mark.parametrize("dtype", DTYPES)
def test_rms_norm_strided_rows_and_the_ops_api(cuda_ops, dtype):
    packed = rand(33, 3 * 128 + 1, dtype=dtype)
    x = packed[:, 1:129]  # row stride 385: the unvectorised path
    w = rand(128, dtype=dtype)
    assert_close(cuda_ops.rms_norm(x, w, 1e-5), REF.rms_norm(x.double(), w.double(), 1e-5))
    y = packed[:, 129:257].reshape(-1, 4, 32)[:, :, :]  # 3-D input through the ops API
    assert_close(cuda_ops.rms_norm(y.reshape(-1, 32), w[:32], 1e-5), REF.rms_norm(y.reshape(-1, 32).double(), w[:32].double(), 1e-5))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hidden", [576, 4096, 5120, 100])
@pytest.mark.parametrize("num_tokens", [1, 9, 257])
def test_fused_add_rms_norm_in_place(cuda_ops, dtype, hidden, num_tokens):
    x, res, w = rand(num_tokens, hidden, dtype=dtype), rand(num_tokens, hidden, dtype=dtype), rand(hidden, dtype=dtype)
    ref_out, ref_res = REF.fused_add_rms_norm(x.double(), res.double(), w.double(), 1e-6)
    out, new_res = cuda_ops.fused_add_rms_norm(x, res, w, 1e-6)
    assert out.data_ptr() == x.data_ptr() and new_res.data_ptr() == res.data_ptr()
    assert_close(new_res, ref_res, ulps=1.0)
    assert_close(out, ref_out, ulps=5.0)  # the sum is rounded to the dtype before the norm


def cos_sin_cache(max_position: int, rot_dim: int) -> torch.Tensor:
    inv_freq = 1.0 / 10000 ** (torch.arange(0, rot_dim, 2, dtype=torch.float32, device="cuda") / rot_dim)
    angles = torch.arange(max_position, dtype=torch.float32, device="cuda")[:, None] * inv_freq
    return torch.cat((angles.cos(), angles.sin()), dim=-1)  # [max_position, rot_dim]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("is_neox", [True, False])
@pytest.mark.parametrize("heads,kv_heads,head_size,rot_dim", [(32, 8, 128, 128), (14, 2, 64, 64), (16, 16, 128, 64)])
@pytest.mark.parametrize("num_tokens", [1, 37, 300])
def test_rotary_embedding_in_place_on_packed_qkv(cuda_ops, dtype, is_neox, heads, kv_heads, head_size, rot_dim, num_tokens):
    qkv = rand(num_tokens, (heads + 2 * kv_heads) * head_size, dtype=dtype)
    q, k, v = qkv.split([heads * head_size, kv_heads * head_size, kv_heads * head_size], dim=-1)  # strided views
    positions = torch.randint(0, 4096, (num_tokens,), device="cuda")
    cache = cos_sin_cache(4096, rot_dim)
    q_ref, k_ref, v_before = q.double().clone(), k.double().clone(), v.clone()
    REF.rotary_embedding(positions, q_ref, k_ref, head_size, cache.double(), is_neox)
    cuda_ops.rotary_embedding(positions, q, k, head_size, cache, is_neox)
    assert_close(q, q_ref, ulps=2.0)
    assert_close(k, k_ref, ulps=2.0)
    assert torch.equal(v, v_before), "the kernel wrote outside q and k"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("d", [14336, 1536, 100, 8])
@pytest.mark.parametrize("num_tokens", [1, 45])
def test_silu_and_mul(cuda_ops, dtype, d, num_tokens):
    x = rand(num_tokens, 2 * d, dtype=dtype) * 3
    out = torch.full((num_tokens, d), float("nan"), dtype=dtype, device="cuda")
    cuda_ops.kernels.silu_and_mul(out, x)
    assert_close(out, REF.silu_and_mul(x.double()), ulps=3.0)
    assert_close(cuda_ops.silu_and_mul(x[:, 1:-1]), REF.silu_and_mul(x[:, 1:-1].double()), ulps=3.0)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kv_heads,head_size,block_size", [(8, 128, 16), (2, 64, 32), (1, 80, 8)])
def test_reshape_and_cache_is_exact_and_skips_padding(cuda_ops, dtype, kv_heads, head_size, block_size):
    num_blocks, num_tokens = 40, 100
    kv = rand(num_tokens, 2, kv_heads, head_size, dtype=dtype)
    key, value = kv[:, 0], kv[:, 1]  # strided views: [num_tokens, kv_heads, head_size]
    slots = torch.randperm(num_blocks * block_size, device="cuda")[:num_tokens]
    slots[::7] = -1  # padding tokens write nothing
    cache = torch.full((2, num_blocks, block_size, kv_heads, head_size), float("nan"), dtype=dtype, device="cuda")
    expected = cache.clone()
    REF.reshape_and_cache(key, value, expected, slots)
    cuda_ops.reshape_and_cache(key, value, cache, slots)
    assert torch.equal(cache.isnan(), expected.isnan()), "wrong slots written"
    assert torch.equal(cache.nan_to_num(0.0), expected.nan_to_num(0.0))
