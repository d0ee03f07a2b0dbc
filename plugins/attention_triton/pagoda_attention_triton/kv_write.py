"""Reshape-and-cache in Triton: scatter this step's keys and values into their paged slots.

Into an FP8 cache (``kv_scales`` given) each value is stored as ``x / scale`` saturated to the format's
largest finite value and rounded to nearest even, as :func:`pagoda.interfaces.attention.quantize_kv`.
Triton 3.9's CPU interpreter rounds float32 to FP8 wrongly where the rounding carries into the exponent
(127.5 -> 64 in e4m3), so under ``TRITON_INTERPRET=1`` the kernel rounds to the FP8 grid itself first
(``_round_to_grid``: the cast of a value on the grid is exact); compiled kernels cast directly.
"""

from __future__ import annotations


import torch
import triton
import triton.language as tl

from pagoda.interfaces.attention import KVScales
from pagoda.triton_jit import dependent_start, pdl_launch
from pagoda.triton_support import interpreting
from pagoda_attention_triton.tile import load_kv_scales

# FP8 formats: (largest finite value, mantissa bits, exponent of the smallest normal)
FP8_FORMATS = {torch.float8_e4m3fn: (448.0, 3, -6), torch.float8_e5m2: (57344.0, 2, -14)}


@triton.jit
def _round_to_grid(y, MBITS: tl.constexpr, EMIN: tl.constexpr):
    """``y`` (within the format's range) rounded to the nearest FP8 value, ties to even, in float32."""
    a = tl.abs(y)
    e = tl.maximum(tl.floor(tl.log2(tl.maximum(a, 1e-30))), EMIN)  # subnormals share the smallest normal's step
    step = tl.exp2(e - MBITS)
    v = a / step  # exact: step is a power of two
    r = tl.floor(v + 0.5)
    odd = (r - 2.0 * tl.floor(r * 0.5)) == 1.0
    r = tl.where((r - v == 0.5) & odd, r - 1.0, r)  # a tie rounds to the even neighbour
    return tl.where(y < 0, -r * step, r * step)


@triton.jit
def _to_cache(x, scale, dst_ty: tl.constexpr, QUANT: tl.constexpr, FMAX: tl.constexpr, MBITS: tl.constexpr,
              EMIN: tl.constexpr, GRID_ROUND: tl.constexpr):
    if QUANT:
        y = tl.math.div_rn(x.to(tl.float32), scale + tl.zeros_like(x.to(tl.float32)))  # IEEE division, as torch's
        y = tl.minimum(tl.maximum(y, -FMAX), FMAX)
        if GRID_ROUND:
            y = _round_to_grid(y, MBITS, EMIN)
        return y.to(dst_ty, fp_downcast_rounding="rtne")
    return x.to(dst_ty)


@triton.jit
def _kv_write_kernel(
    key_ptr, value_ptr, cache_ptr, slot_ptr, k_scale_ptr, v_scale_ptr,
    stride_kt, stride_kh, stride_vt, stride_vh,
    stride_c_kv, stride_c_slot, stride_c_head,
    NUM_HEADS: tl.constexpr, HEAD: tl.constexpr, HEADS_P: tl.constexpr, HEAD_P: tl.constexpr, PDL: tl.constexpr,
    QUANT: tl.constexpr, FMAX: tl.constexpr, MBITS: tl.constexpr, EMIN: tl.constexpr, GRID_ROUND: tl.constexpr,
):
    """One program per token: copy (or quantize) its [num_kv_heads, head_size] key and value rows."""
    dependent_start(PDL)
    token = tl.program_id(0).to(tl.int64)
    slot = tl.load(slot_ptr + token).to(tl.int64)
    h = tl.arange(0, HEADS_P)[:, None]
    d = tl.arange(0, HEAD_P)[None, :]
    slot_b = tl.zeros([HEADS_P, HEAD_P], dtype=tl.int64) + slot  # a tensor: the interpreter rejects scalar masks
    mask = (h < NUM_HEADS) & (d < HEAD) & (slot_b >= 0)  # negative slots are padding
    dst = cache_ptr + slot * stride_c_slot + h * stride_c_head + d
    k_scale, v_scale = load_kv_scales(k_scale_ptr, v_scale_ptr, QUANT)
    ty = cache_ptr.dtype.element_ty
    k = tl.load(key_ptr + token * stride_kt + h * stride_kh + d, mask=mask)
    tl.store(dst, _to_cache(k, k_scale, ty, QUANT, FMAX, MBITS, EMIN, GRID_ROUND), mask=mask)
    v = tl.load(value_ptr + token * stride_vt + h * stride_vh + d, mask=mask)
    tl.store(dst + stride_c_kv, _to_cache(v, v_scale, ty, QUANT, FMAX, MBITS, EMIN, GRID_ROUND), mask=mask)


def write_kv(
    key: torch.Tensor,  # [num_tokens, num_kv_heads, head_size]
    value: torch.Tensor,  # [num_tokens, num_kv_heads, head_size]
    kv_cache: torch.Tensor,  # [2, num_blocks, block_size, num_kv_heads, head_size]
    slot_mapping: torch.Tensor,  # [num_tokens] int64; negative slots are skipped
    pdl: bool = False,
    kv_scales: KVScales | None = None,  # an FP8 cache's scales (required for one)
) -> None:
    """Write ``key``/``value`` into ``kv_cache`` at ``slot_mapping`` (in place, no host sync); ``pdl``:
    launched as a programmatic dependent (``pagoda.triton_jit.dependent_start``)."""
    num_tokens, num_heads, head = key.shape
    if num_tokens == 0:
        return
    assert key.stride(2) == 1 and value.stride(2) == 1, "the head dimension must be contiguous"
    _, _, block_size, _, _ = kv_cache.shape
    assert kv_cache.stride(1) == block_size * kv_cache.stride(2) and kv_cache.stride(4) == 1, "cache blocks must be dense"
    quant = kv_cache.dtype in FP8_FORMATS
    assert not quant or kv_scales is not None, "an FP8 cache needs its layer's kv_scales"
    fmax, mbits, emin = FP8_FORMATS.get(kv_cache.dtype, (0.0, 0, 0))
    k_scale, v_scale = (kv_scales.k_scale, kv_scales.v_scale) if quant else (kv_cache, kv_cache)
    _kv_write_kernel[(num_tokens,)](
        key, value, kv_cache, slot_mapping, k_scale, v_scale,
        key.stride(0), key.stride(1), value.stride(0), value.stride(1),
        kv_cache.stride(0), kv_cache.stride(2), kv_cache.stride(3),
        NUM_HEADS=num_heads, HEAD=head,
        HEADS_P=triton.next_power_of_2(num_heads), HEAD_P=triton.next_power_of_2(head), PDL=pdl,
        QUANT=quant, FMAX=fmax, MBITS=mbits, EMIN=emin, GRID_ROUND=quant and interpreting(),
        **pdl_launch(pdl),
    )
