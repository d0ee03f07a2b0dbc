"""The flash kernels of csrc/attention, as built into pagoda-platform-cuda's extension module.

:func:`extension` finds the module (``None`` and a reason when it is unavailable);
:func:`flash_attention` is the call the backend makes every layer (no host synchronisation).
"""

from __future__ import annotations

import functools
from types import ModuleType

import torch

from pagoda.interfaces.attention import KVScales

OP = "flash_attention"


@functools.cache
def extension() -> tuple[ModuleType | None, str | None]:
    """(pagoda-platform-cuda's compiled module with the flash kernels, None) or (None, why not)."""
    try:
        from pagoda_platform_cuda.build import ExtensionUnavailable, load_extension
    except ImportError:
        return None, "pagoda-platform-cuda is not installed (it builds the csrc kernels)"
    try:
        ext = load_extension()
    except ExtensionUnavailable as error:
        return None, f"the csrc kernels are unavailable ({error})"
    if not hasattr(ext, OP):
        return None, "the installed csrc kernels predate csrc/attention; reinstall pagoda-platform-cuda"
    return ext, None


def fp8_cache_reason() -> str | None:
    """Why the built kernels cannot serve an FP8 KV cache (None: they can)."""
    ext, reason = extension()
    if ext is not None and not hasattr(ext, "reshape_and_cache_fp8"):
        return "the installed csrc kernels predate the FP8 KV cache; reinstall pagoda-platform-cuda"
    return reason


@functools.cache
def decode_programs_per_sm(head_size: int, dtype: torch.dtype, device: int) -> int:
    """Decode programs resident per SM of GPU ``device``, as the CUDA runtime reports it (0: unknown)."""
    ext, _ = extension()
    if ext is None or not hasattr(ext, "flash_decode_programs_per_sm"):
        return 0
    return int(ext.flash_decode_programs_per_sm(head_size, dtype == torch.float16, device))


def rows_aligned(t: torch.Tensor) -> bool:
    """The kernels move 16-byte chunks of rows: last dim contiguous, other strides multiples of 8."""
    return t.stride(-1) == 1 and all(s % 8 == 0 for s in t.stride()[:-1]) and t.data_ptr() % 16 == 0


def flash_attention(
    out: torch.Tensor,  # [num_tokens, num_heads, head_size], written
    query: torch.Tensor,  # [num_tokens, num_heads, head_size]; tokens :num_decodes are decodes
    kv_cache: torch.Tensor,  # [2, num_blocks, block_size, num_kv_heads, head_size]
    block_tables: torch.Tensor,  # [num_seqs, max_blocks] int32
    query_start_loc: torch.Tensor,  # [num_seqs + 1] int32
    seq_lens: torch.Tensor,  # [num_seqs] int32
    num_decodes: int,
    scale: float,
    window: int | None,
    num_splits: int,
    scratch: tuple[torch.Tensor, torch.Tensor] | None,
    short_query_len: int = 0,
    kv_scales: KVScales | None = None,  # an FP8 cache's scales (required for one)
) -> None:
    """Split-KV decode of the first ``num_decodes`` sequences, then (chunked) prefill of the rest; or,
    with ``short_query_len`` (every sequence has at most that many query tokens, as in a verify step),
    every sequence on the decode kernel, causal within its query (``scratch`` then per token). An FP8
    ``kv_cache`` holds keys and values divided by ``kv_scales``' (widened to the query's dtype in the kernels)."""
    ext, reason = extension()
    if ext is None:
        raise RuntimeError(f"flash attention kernels unavailable: {reason}")
    if not rows_aligned(query):
        query = query.contiguous()
    part_out, part_lse = scratch if scratch is not None else (None, None)
    scales = {} if kv_scales is None else {"k_scale": kv_scales.k_scale, "v_scale": kv_scales.v_scale}
    ext.flash_attention(out, query, kv_cache, block_tables, query_start_loc, seq_lens, num_decodes, scale,
                        window or 0, num_splits if scratch is not None else 1, part_out, part_lse, short_query_len,
                        **scales)
