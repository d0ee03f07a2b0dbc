"""The CPU platform's kernels: dense layers on oneDNN with weights packed once, RMSNorm in one pass.

``torch.nn.functional.linear`` multiplies a row-major weight on every call; oneDNN's packed (blocked)
layout, made once after loading, ran the same products 2-2.5x faster on the development machine's AVX-512
cores at every row count tried (1 to 2048; docs/cpu.md). The packed tensor keeps the weight's shape and
dtype; the dense one is dropped unless something else reads it (a tied embedding).
"""

from __future__ import annotations

from functools import cache

import torch
import torch.nn.functional as F

from pagoda.interfaces.ops import CustomOps

PACK_BATCH_HINT = 64  # oneDNN's expected rows per call; the products were as fast at 1 to 2048 rows
BUCKETS_PER_OCTAVE = 8  # row counts a product runs at between n and 2n (see row_bucket)


@cache
def packed_dtypes() -> tuple[torch.dtype, ...]:
    """The weight dtypes oneDNN packs here: float32, and bfloat16 where this CPU has oneDNN's bf16 path (AVX-512
    or AVX-NE-CONVERT; an AVX2-only CPU refuses to pack bf16, and its bf16 weights stay with torch's linear)."""
    if not torch.backends.mkldnn.is_available():
        return ()
    return (torch.float32, torch.bfloat16) if torch.ops.mkldnn._is_mkldnn_bf16_supported() else (torch.float32,)


def row_bucket(rows: int) -> int:
    """The row count a product runs at. oneDNN builds and keeps a primitive (and work memory) for every input
    shape it meets; a server meets every count of tokens a step, and glibc kept gigabytes of the memory freed
    between them. Rounding to 8 counts an octave bounds the shapes to 65 (up to 2048 rows) and pads at most an
    eighth: oneDNN's time grows with the rows from about 8 on, so padded rows cost what real ones do (10 rows
    ran a SmolLM2 step's products in 15.7 ms, 16 in 18.9 ms)."""
    if rows <= 2 * BUCKETS_PER_OCTAVE:
        return rows + rows % 2 if rows > 1 else 1
    step = 1 << ((rows - 1).bit_length() - BUCKETS_PER_OCTAVE.bit_length())  # rows in (2^(b-1), 2^b]: 2^(b-4)
    return -(-rows // step) * step


class CpuOps(CustomOps):
    name = "cpu"

    def pack_linear_weight(self, weight: torch.Tensor) -> torch.Tensor | None:
        if not (weight.dim() == 2 and weight.dtype in packed_dtypes() and weight.device.type == "cpu"
                and not weight.is_mkldnn):
            return None
        return torch.ops.mkldnn._reorder_linear_weight(weight.contiguous(), PACK_BATCH_HINT)

    def linear(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        if not weight.is_mkldnn:
            return F.linear(x, weight, bias)
        rows = x.reshape(-1, x.shape[-1]).to(weight.dtype)
        n, padded = rows.shape[0], row_bucket(rows.shape[0])
        if padded != n:
            rows = torch.cat((rows, rows.new_zeros(padded - n, rows.shape[1])))
        y = torch.ops.mkldnn._linear_pointwise(rows, weight, bias, "none", [], "")
        return y[:n].view(*x.shape[:-1], y.shape[-1])

    def reshape_and_cache(self, key, value, kv_cache, slot_mapping, k_scale=None, v_scale=None) -> None:
        """As the reference, with one ``index_copy_`` a half when every slot is real (no padding) and the cache
        unquantized: no boolean-mask gathers."""
        if k_scale is not None or key.dtype != kv_cache.dtype or bool((slot_mapping < 0).any()):
            return super().reshape_and_cache(key, value, kv_cache, slot_mapping, k_scale, v_scale)
        slots = slot_mapping.long()
        for half, x in ((0, key), (1, value)):
            kv_cache[half].view(-1, *key.shape[1:]).index_copy_(0, slots, x)

    def rotary_embedding(self, positions, query, key, head_size, cos_sin_cache, is_neox) -> None:
        """As the reference, rotating each half in place (no concatenated copy); float32 models only."""
        if query.dtype != torch.float32 or cos_sin_cache.dtype != torch.float32 or not is_neox:
            return super().rotary_embedding(positions, query, key, head_size, cos_sin_cache, is_neox)
        cos, sin = cos_sin_cache[positions].chunk(2, dim=-1)  # [num_tokens, rotary_dim / 2]
        cos, sin = cos[:, None], sin[:, None]
        half = cos.shape[-1]
        for x in (query, key):
            heads = x.view(x.shape[0], -1, head_size)
            x1, x2 = heads[..., :half], heads[..., half : 2 * half]
            rotated = x1 * sin  # x1's share of the second half, before x1 is overwritten
            x1.mul_(cos).addcmul_(x2, sin, value=-1)
            x2.mul_(cos).add_(rotated)

    def silu_and_mul(self, x: torch.Tensor) -> torch.Tensor:
        """As the reference, multiplying into silu's output: one temporary, not two (a third less time)."""
        gate, up = x.chunk(2, dim=-1)
        return F.silu(gate).mul_(up)

    def rms_norm(self, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        if x.dtype != torch.float32 or weight.dtype != torch.float32:  # the reference's float32 casts
            return super().rms_norm(x, weight, eps)
        return F.rms_norm(x, (x.shape[-1],), weight, eps)
