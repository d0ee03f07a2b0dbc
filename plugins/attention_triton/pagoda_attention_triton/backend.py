"""``TritonAttentionBackend``: paged attention for mixed prefill/decode batches in Triton."""

from __future__ import annotations

from typing import ClassVar

import torch

from pagoda.attention.split_kv import decode_scratch
from pagoda.interfaces.attention import KV_CACHE_FORMATS, AttentionBackend, AttentionMetadata, AttentionSpec
from pagoda.interfaces.platform import Platform
from pagoda.triton_support import dependent_launch, interpreting

DTYPES = (torch.float16, torch.bfloat16, torch.float32)
MIN_HEAD, MAX_HEAD = 16, 256
MAX_MLA_RANK = 1024  # the latent attention's fp32 accumulator holds a tile's rows x kv_lora_rank


class TritonAttentionBackend(AttentionBackend):
    """Triton kernels: KV write, tiled prefill over cached prefixes, split-KV decode.

    Graph safety: ``forward`` launches with grids computed from tensor shapes and from the
    Python ints of the metadata (``num_decodes``) and of the plan ``prepare()`` stored in
    ``metadata.extra`` (``num_splits``); kernels read lengths and block tables on the device.
    To capture a decode graph, these must stay fixed between capture and replay: the token
    count, ``num_decodes``, the block table width and ``num_splits`` (choose it from an upper
    bound such as ``max_model_len`` via ``metadata.max_seq_len``, or set ``force_num_splits``).
    """

    description = "Triton paged attention (prefill tiles, split-KV decode; GPU, or CPU under TRITON_INTERPRET=1)"
    priority = 50
    supports_graphs: ClassVar[bool] = True
    supports_mixed_windows: ClassVar[bool] = True  # forward reads spec.sliding_window only (Gemma 3)
    kv_cache_dtypes: ClassVar[tuple[str, ...]] = ("auto", *KV_CACHE_FORMATS)  # FP8: stored scaled, read into q's dtype
    supports_mla: ClassVar[bool] = True  # latent caches (DeepSeek-V2/V3): mla.py, split-KV decode

    def __init__(self, spec: AttentionSpec, platform: Platform) -> None:
        super().__init__(spec, platform)
        self.force_num_splits: int | None = None  # tests and benchmarks pin the split-KV choice
        self.num_sms = platform.compute_units()
        self.pdl = dependent_launch(platform)  # kv write and decode kernels

    @classmethod
    def check(cls, platform: Platform, spec: AttentionSpec | None = None) -> str | None:
        if platform is None or (platform.device_type not in ("cuda", "hip") and not interpreting()):
            return "triton needs a GPU or TRITON_INTERPRET=1"
        try:
            import triton  # noqa: F401
        except ImportError:
            return "the triton package is not installed"
        return None if spec is None else _spec_reason(spec) or _kv_cache_reason(platform, spec)

    def prepare(self, metadata: AttentionMetadata) -> AttentionMetadata:
        from pagoda_attention_triton.decode import SHORT_QUERY
        from pagoda_attention_triton.plan import TritonStepPlan

        s, m = self.spec, metadata
        if s.mla is not None:
            return self._prepare_mla(metadata)
        d, others = m.num_decodes, m.num_seqs - m.num_decodes
        splits = self.force_num_splits or _splits(d, s.num_kv_heads, m.max_seq_len, self.num_sms)
        plan = TritonStepPlan(splits, decode_scratch(d, s.num_heads, s.head_size, splits, m.seq_lens.device))
        if others > 0 and m.max_query_len <= SHORT_QUERY:
            plan.short_splits = self.force_num_splits or _splits(others, s.num_kv_heads, m.max_seq_len, self.num_sms)
            tokens = m.slot_mapping.shape[0] - d
            plan.short_scratch = decode_scratch(tokens, s.num_heads, s.head_size, plan.short_splits, m.seq_lens.device)
        metadata.extra = plan
        return metadata

    def _prepare_mla(self, metadata: AttentionMetadata) -> AttentionMetadata:
        """Decodes split their context when their (sequence, head block) programs underfill the GPU."""
        from pagoda_attention_triton.mla import MAX_BLOCK_H
        from pagoda_attention_triton.plan import TritonStepPlan

        s, m = self.spec, metadata
        head_blocks = -(-s.num_heads // MAX_BLOCK_H)
        splits = self.force_num_splits or _splits(m.num_decodes, head_blocks, m.max_seq_len, self.num_sms)
        scratch = decode_scratch(m.num_decodes, s.num_heads, s.mla.kv_lora_rank, splits, m.seq_lens.device)
        metadata.extra = TritonStepPlan(splits, scratch)
        return metadata

    def forward_mla(self, query, latent, kv_cache, metadata: AttentionMetadata) -> torch.Tensor:
        from pagoda_attention_triton.mla import mla_attention, write_latent

        plan = metadata.extra if _is_plan(metadata.extra) else self.prepare(metadata).extra
        s, m = self.spec, metadata
        write_latent(latent, kv_cache, m.slot_mapping, pdl=self.pdl)
        out = query.new_empty(*query.shape[:2], s.mla.kv_lora_rank)  # [num_tokens, num_heads, kv_lora_rank]
        mla_attention(query, out, kv_cache, m.block_tables, m.seq_lens, m.query_start_loc, m.num_decodes,
                      s.mla.kv_lora_rank, s.scale, plan.num_splits, plan.decode_scratch, pdl=self.pdl)
        return out

    def forward(self, query, key, value, kv_cache, metadata: AttentionMetadata) -> torch.Tensor:
        from pagoda_attention_triton.decode import decode_attention, short_query_attention
        from pagoda_attention_triton.kv_write import write_kv
        from pagoda_attention_triton.prefill import prefill_attention

        plan = metadata.extra if _is_plan(metadata.extra) else self.prepare(metadata).extra
        s, m = self.spec, metadata
        scales = self.cache_scales()
        write_kv(key, value, kv_cache, m.slot_mapping, pdl=self.pdl, kv_scales=scales)
        out = torch.empty_like(query)  # [num_tokens, num_heads, head_size]
        decode_attention(
            query, out, kv_cache, m.block_tables, m.seq_lens, m.num_decodes, s.scale, s.sliding_window,
            plan.num_splits, plan.decode_scratch, pdl=self.pdl, query_start_loc=m.query_start_loc, kv_scales=scales,
        )
        if plan.short_splits:
            short_query_attention(
                query, out, kv_cache, m.block_tables, m.query_start_loc, m.seq_lens, m.num_decodes, m.max_query_len,
                s.scale, s.sliding_window, plan.short_splits, plan.short_scratch, pdl=self.pdl, kv_scales=scales,
            )
        else:
            prefill_attention(
                query, out, kv_cache, m.block_tables, m.query_start_loc, m.seq_lens, m.num_decodes, s.scale,
                s.sliding_window, m.max_query_len, kv_scales=scales,
            )
        return out


def _spec_reason(spec: AttentionSpec) -> str | None:
    if spec.dtype not in DTYPES:
        return f"triton attention supports float16, bfloat16 and float32, not {str(spec.dtype).removeprefix('torch.')}"
    if spec.block_size & (spec.block_size - 1):
        return f"triton attention needs a power-of-two block size, not {spec.block_size}"
    if spec.mla is not None:
        rank = spec.mla.kv_lora_rank
        return None if MIN_HEAD <= rank <= MAX_MLA_RANK else (
            f"triton's latent attention supports kv_lora_rank {MIN_HEAD} to {MAX_MLA_RANK}, not {rank}")
    if not MIN_HEAD <= spec.head_size <= MAX_HEAD:
        return f"triton attention supports head sizes {MIN_HEAD} to {MAX_HEAD}, not {spec.head_size}"
    if spec.num_heads % spec.num_kv_heads:
        return f"{spec.num_heads} query heads are not a multiple of {spec.num_kv_heads} kv heads"
    return None


def _kv_cache_reason(platform: Platform, spec: AttentionSpec) -> str | None:
    """Why this platform cannot convert the FP8 format of ``spec``'s cache in Triton (None: it can): e4m3 needs the
    GPU's FP8 instructions in the OCP format (NVIDIA sm_89+, AMD gfx950), e5m2 a GPU that takes ``float8_e5m2``
    (every NVIDIA GPU: Triton converts it in software below sm_89; on AMD, gfx950)."""
    if not spec.kv_quantized or interpreting():
        return None
    e5m2_reason = platform.supports_dtype(torch.float8_e5m2)
    if spec.cache_dtype == torch.float8_e4m3fn and platform.fp8_dtype() != torch.float8_e4m3fn:
        problem = (f"triton converts an FP8 e4m3 KV cache with the OCP FP8 instructions (NVIDIA compute capability "
                   f">= 8.9, AMD gfx950), which {platform.describe()} lacks")
    elif spec.cache_dtype == torch.float8_e5m2 and e5m2_reason is not None:
        problem = f"triton's FP8 e5m2 KV cache needs float8_e5m2: {e5m2_reason}"
    else:
        return None
    ways = ["--kv-cache-dtype fp8_e5m2"] if e5m2_reason is None else []
    ways += ["--attention-backend flash"] if platform.csrc_kernel_reason("attention") is None else []
    return f"{problem}; use {' or '.join(ways or ['--kv-cache-dtype auto'])}"


def _splits(num_decodes: int, num_kv_heads: int, max_seq_len: int, num_sms: int) -> int:
    from pagoda_attention_triton.plan import choose_num_splits

    return choose_num_splits(num_decodes, num_kv_heads, max_seq_len, num_sms)


def _is_plan(extra: object) -> bool:
    from pagoda_attention_triton.plan import TritonStepPlan

    return isinstance(extra, TritonStepPlan)


