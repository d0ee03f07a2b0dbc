"""Reshape-and-cache in Triton: scatter this step's keys and values into their paged slots."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from pagoda_attention_triton.tile import dependent_start, pdl_launch


@triton.jit
def _kv_write_kernel(
    key_ptr, value_ptr, cache_ptr, slot_ptr,
    stride_kt, stride_kh, stride_vt, stride_vh,
    stride_c_kv, stride_c_slot, stride_c_head,
    NUM_HEADS: tl.constexpr, HEAD: tl.constexpr, HEADS_P: tl.constexpr, HEAD_P: tl.constexpr, PDL: tl.constexpr,
):
    """One program per token: copy its [num_kv_heads, head_size] key and value rows."""
    dependent_start(PDL)
    token = tl.program_id(0).to(tl.int64)
    slot = tl.load(slot_ptr + token).to(tl.int64)
    h = tl.arange(0, HEADS_P)[:, None]
    d = tl.arange(0, HEAD_P)[None, :]
    slot_b = tl.zeros([HEADS_P, HEAD_P], dtype=tl.int64) + slot  # a tensor: the interpreter rejects scalar masks
    mask = (h < NUM_HEADS) & (d < HEAD) & (slot_b >= 0)  # negative slots are padding
    dst = cache_ptr + slot * stride_c_slot + h * stride_c_head + d
    k = tl.load(key_ptr + token * stride_kt + h * stride_kh + d, mask=mask)
    tl.store(dst, k.to(cache_ptr.dtype.element_ty), mask=mask)
    v = tl.load(value_ptr + token * stride_vt + h * stride_vh + d, mask=mask)
    tl.store(dst + stride_c_kv, v.to(cache_ptr.dtype.element_ty), mask=mask)


def write_kv(
    key: torch.Tensor,  # [num_tokens, num_kv_heads, head_size]
    value: torch.Tensor,  # [num_tokens, num_kv_heads, head_size]
    kv_cache: torch.Tensor,  # [2, num_blocks, block_size, num_kv_heads, head_size]
    slot_mapping: torch.Tensor,  # [num_tokens] int64; negative slots are skipped
    pdl: bool = False,
) -> None:
    """Write ``key``/``value`` into ``kv_cache`` at ``slot_mapping`` (in place, no host sync); ``pdl``:
    launched as a programmatic dependent (``tile.dependent_start``)."""
    num_tokens, num_heads, head = key.shape
    if num_tokens == 0:
        return
    assert key.stride(2) == 1 and value.stride(2) == 1, "the head dimension must be contiguous"
    _, _, block_size, _, _ = kv_cache.shape
    assert kv_cache.stride(1) == block_size * kv_cache.stride(2) and kv_cache.stride(4) == 1, "cache blocks must be dense"
    _kv_write_kernel[(num_tokens,)](
        key, value, kv_cache, slot_mapping,
        key.stride(0), key.stride(1), value.stride(0), value.stride(1),
        kv_cache.stride(0), kv_cache.stride(2), kv_cache.stride(3),
        NUM_HEADS=num_heads, HEAD=head,
        HEADS_P=triton.next_power_of_2(num_heads), HEAD_P=triton.next_power_of_2(head), PDL=pdl, **pdl_launch(pdl),
    )
