"""The compiled kernels against float64 references (float32) and against the built-in ops' own rounding
(bfloat16), on rows at their own strides; what the kernels do not take goes to the built-in ops; bad calls are
refused naming the rule."""

from __future__ import annotations

import pytest
import torch

from pagoda.interfaces.ops import CustomOps
from pagoda.platforms.cpu_ops import CpuOps
from pagoda_platform_cpu.build import load_kernels
from pagoda_platform_cpu.ops import NativeCpuOps

EPS = 1e-6


@pytest.fixture(scope="module")
def ops() -> NativeCpuOps:
    return NativeCpuOps(load_kernels())


def strided(rows: int, d: int, dtype: torch.dtype, seed: int, scale: float = 1.0) -> torch.Tensor:
    """[rows, d] as a column slice of a wider tensor (rows at stride d + 24), values N(0, scale)."""
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(rows, d + 24, generator=g, dtype=torch.float64) * scale).to(dtype)[:, 8 : 8 + d]


def rms_reference(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    x = x.double()
    return weight.double() * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS)


@pytest.mark.parametrize("rows", [1, 7, 300])
def test_rms_norm_and_its_residual_add_match_float64(ops: NativeCpuOps, rows: int) -> None:
    x, residual, weight = strided(rows, 576, torch.float32, 1), strided(rows, 576, torch.float32, 2), torch.randn(576)
    assert torch.allclose(ops.rms_norm(x, weight, EPS).double(), rms_reference(x, weight), rtol=1e-5, atol=1e-5)
    out, total = ops.fused_add_rms_norm(x, residual, weight, EPS)
    assert torch.equal(total, x + residual)
    assert torch.allclose(out.double(), rms_reference(x.double() + residual.double(), weight), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("rows", [1, 300])
def test_silu_and_mul_matches_float64_at_every_magnitude(ops: NativeCpuOps, rows: int) -> None:
    x = strided(rows, 2 * 1536, torch.float32, 3, scale=30.0)  # far into both tails: no overflow, no NaN
    x[0, :4] = torch.tensor([0.0, -0.0, 1e-30, -200.0])
    gate, up = x.double().chunk(2, dim=-1)
    expected = torch.nn.functional.silu(gate) * up
    # float32's exp(-|x|) carries |x| times float32's step of relative error from rounding x * log2(e) (as any
    # float32 exp without extended range reduction); far tails end in float32's subnormals
    bound = (1e-6 + 1.2e-7 * gate.abs()) * expected.abs() + 1e-40
    assert ((ops.silu_and_mul(x).double() - expected).abs() <= bound).all()


@pytest.mark.parametrize("rotary_dim", [64, 32])  # whole heads; partial rotary (the first half of each head)
def test_rotary_matches_float64_in_place_on_views_of_one_qkv_tensor(ops: NativeCpuOps, rotary_dim: int) -> None:
    tokens, heads, kv_heads, d = 33, 9, 3, 64
    qkv = strided(tokens, (heads + 2 * kv_heads) * d, torch.float32, 4)
    query, key = qkv[:, : heads * d], qkv[:, heads * d : (heads + kv_heads) * d]
    before = qkv.double().clone()
    positions = torch.randint(0, 500, (tokens,), dtype=torch.int32)
    freqs = torch.outer(torch.arange(512, dtype=torch.float64), 1e4 ** (-torch.arange(0, rotary_dim, 2) / rotary_dim))
    cache = torch.cat((freqs.cos(), freqs.sin()), dim=-1)  # [max_position, rotary_dim]
    ops.rotary_embedding(positions, query, key, d, cache.float(), is_neox=True)
    for x, x0 in ((query, before[:, : heads * d]), (key, before[:, heads * d : (heads + kv_heads) * d])):
        x, x0 = x.double().view(tokens, -1, d), x0.view(tokens, -1, d)
        half = rotary_dim // 2
        cos, sin = cache[positions.long(), :half][:, None], cache[positions.long(), half:][:, None]
        a, b = x0[..., :half], x0[..., half:rotary_dim]
        expected = torch.cat((a * cos - b * sin, b * cos + a * sin, x0[..., rotary_dim:]), dim=-1)
        assert torch.allclose(x, expected, atol=2e-6), (x - expected).abs().max()
    assert torch.equal(qkv[:, (heads + kv_heads) * d :].double(), before[:, (heads + kv_heads) * d :])  # values kept


def test_bfloat16_rounds_where_the_builtin_ops_round(ops: NativeCpuOps) -> None:
    """bfloat16 in, float32 inside, rounded as the built-in ops round (their results, within one bfloat16 step
    where a float32 sum's order differs)."""
    builtin = CpuOps()
    x, residual = strided(40, 576, torch.bfloat16, 5), strided(40, 576, torch.bfloat16, 6)
    weight = torch.randn(576).to(torch.bfloat16)
    ours, theirs = ops.fused_add_rms_norm(x, residual, weight, EPS), builtin.fused_add_rms_norm(x, residual, weight, EPS)
    assert torch.equal(ours[1], theirs[1])
    assert torch.allclose(ours[0].float(), theirs[0].float(), rtol=2 ** -7, atol=0)
    g = strided(40, 2 * 1536, torch.bfloat16, 7)
    assert torch.equal(ops.silu_and_mul(g), builtin.silu_and_mul(g))
    q, k = strided(40, 9 * 64, torch.bfloat16, 8), strided(40, 3 * 64, torch.bfloat16, 9)
    q2, k2 = q.clone(), k.clone()
    positions, cache = torch.arange(40), torch.randn(64, 64)
    ops.rotary_embedding(positions, q, k, 64, cache, True)
    builtin.rotary_embedding(positions, q2, k2, 64, cache, True)
    assert torch.allclose(q.float(), q2.float(), rtol=2 ** -7, atol=1e-6) and torch.allclose(k.float(), k2.float(), rtol=2 ** -7, atol=1e-6)


def test_what_the_kernels_do_not_take_gets_the_builtin_ops(ops: NativeCpuOps) -> None:
    reference = CustomOps()
    half = torch.randn(5, 64).half()
    assert torch.equal(ops.silu_and_mul(half), reference.silu_and_mul(half))
    q, k = torch.randn(5, 128), torch.randn(5, 64)
    q2, k2 = q.clone(), k.clone()
    positions, cache = torch.arange(5), torch.randn(16, 32)
    ops.rotary_embedding(positions, q, k, 64, cache, is_neox=False)  # interleaved pairs: the reference's path
    reference.rotary_embedding(positions, q2, k2, 64, cache, is_neox=False)
    assert torch.equal(q, q2) and torch.equal(k, k2)
    x3 = torch.randn(2, 3, 64)  # [tokens, heads, head_size] (q/k norms): the rows of a view
    weight = torch.randn(64)
    assert torch.allclose(ops.rms_norm(x3, weight, EPS), reference.rms_norm(x3, weight, EPS), atol=1e-6)


def test_bad_calls_are_refused_naming_the_rule() -> None:
    kernels = load_kernels()
    x = torch.randn(4, 64)
    with pytest.raises(RuntimeError, match="float32 or bfloat16"):
        kernels.rms_norm(torch.empty(4, 64, dtype=torch.float64), x.double(), None, None, torch.ones(64).double(), EPS)
    with pytest.raises(RuntimeError, match="weight must be contiguous"):
        kernels.rms_norm(torch.empty(4, 64), x, None, None, torch.ones(32), EPS)
    with pytest.raises(RuntimeError, match="residual and sum come together"):
        kernels.rms_norm(torch.empty(4, 64), x, x, None, torch.ones(64), EPS)
    with pytest.raises(RuntimeError, match="x \\[rows, 2d\\]"):
        kernels.silu_and_mul(torch.empty(4, 64), x)
    with pytest.raises(RuntimeError, match="whole heads"):
        kernels.rotary_embedding(torch.arange(4), x, x, 48, torch.randn(8, 32))
    with pytest.raises(RuntimeError, match="position 8 is outside cos_sin_cache's 8 rows"):
        kernels.rotary_embedding(torch.arange(5, 9), x, x.clone(), 64, torch.randn(8, 32))
