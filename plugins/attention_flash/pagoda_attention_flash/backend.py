"""``FlashAttentionBackend``: paged attention on tensor cores from csrc/attention (NVIDIA sm_80+)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from pagoda.attention.split_kv import StepPlan, balance_waves, choose_num_splits, decode_scratch
from pagoda.interfaces.attention import KV_CACHE_FORMATS, AttentionBackend, AttentionMetadata, AttentionSpec
from pagoda.interfaces.platform import Platform
from pagoda_attention_flash import kernels

DTYPES = (torch.float16, torch.bfloat16)
HEAD_SIZES = (64, 128, 256)
MIN_CAPABILITY = (8, 0)  # mma.sync m16n8k16 on bf16, ldmatrix, cp.async
DECODE_ROWS = 16  # (query token, q head) rows per decode program (more take several programs)
SHORT_QUERY = 8  # most query tokens a sequence may have for the decode kernel to take the step (default)
# Up to this many query tokens the decode kernel also takes a step whose sequences x kv heads leave SMs idle on
# the prefill kernel (no split-KV there): H200, 2026-11-27, 1 x 16 tokens after 1k: 10.9 us against 36.1.
UNDERFILLED_SHORT_QUERY = 16
# Shared memory the decode kernel of head size 256 asks for (csrc/attention/flash_decode.cu,
# DecodeTile<256>): sm_80/sm_90 have it, the 99 KiB GPUs (sm_86, sm_89) do not.
HEAD256_SHARED_MEMORY = 16 * 256 * 2 + 4 * 2 * 2 * 16 * 256 * 2


@dataclass
class FlashStepPlan(StepPlan):
    """The decode kernel's split and scratch; ``short_query_len > 0``: it takes every sequence of the
    step (each at most that many query tokens), with the scratch per token; 0: decodes, then prefill."""

    short_query_len: int = 0


class FlashAttentionBackend(AttentionBackend):
    """FlashAttention-2-style kernels: tiled prefill over cached prefixes, GQA split-KV decode.

    Same metadata contract as ``triton``: ``forward`` writes this step's K/V (the platform's csrc
    KV write; into an FP8 cache divided by the layer's scales), then one op runs the decodes (tokens ``:num_decodes``) and the prefills, or, in a step
    of short queries only (speculative decoding's verify steps), every sequence on the decode kernel. Graph
    safety: launch shapes depend on the token count, ``num_decodes`` and ``num_splits`` (chosen in
    ``prepare()`` from ``metadata.max_seq_len``, an upper bound, or ``force_num_splits``); the
    kernels read lengths and block tables on the device; no host synchronisation.
    """

    description = "FlashAttention-style CUDA kernels from csrc/attention (tensor cores; NVIDIA sm_80+, fp16/bf16)"
    # Above triton (50), measured on an H200 on 2026-11-27 (docs/attention_flash.md, run 12): prefill
    # 1.02-1.12x torch's SDPA flash (0.91-1.03x triton), decode 0.985-1.30x triton, verify steps 1.0-1.15x,
    # 16-token chunks after cached prefixes 1.0-1.07x; end to end 0.999x (300 x 1024/128), 1.008x (256 x 256/1024).
    # `auto` falls back to triton wherever check() or the contract says no.
    priority = 60
    supports_graphs: ClassVar[bool] = True
    supports_mixed_windows: ClassVar[bool] = True  # forward reads spec.sliding_window only (Gemma 3)
    kv_cache_dtypes: ClassVar[tuple[str, ...]] = ("auto", *KV_CACHE_FORMATS)  # FP8: widened in shared memory

    def __init__(self, spec: AttentionSpec, platform: Platform) -> None:
        super().__init__(spec, platform)
        self.force_num_splits: int | None = None  # tests and benchmarks pin the split-KV choice
        self.num_sms = platform.compute_units()
        self.ops = platform.custom_ops()  # the csrc KV write
        self.programs_per_sm = kernels.decode_programs_per_sm(spec.head_size, spec.dtype, platform.device().index or 0)
        self.short_query_max = SHORT_QUERY  # tests set it (0: such steps on the prefill kernel)

    @classmethod
    def check(cls, platform: Platform, spec: AttentionSpec | None = None) -> str | None:
        reason = _platform_reason(platform)
        if reason is None and spec is not None:
            reason = _spec_reason(spec) or _shared_memory_reason(platform, spec)
        if reason is None:
            reason = kernels.extension()[1]  # last: the first call may compile the kernels
        if reason is None and spec is not None and spec.kv_quantized:
            reason = kernels.fp8_cache_reason()
        return reason

    def prepare(self, metadata: AttentionMetadata) -> AttentionMetadata:
        s, m = self.spec, metadata
        query_len = self._short_query_len(m)
        seqs, tokens = (m.num_seqs, m.slot_mapping.shape[0]) if query_len else (m.num_decodes, m.num_decodes)
        rows = (query_len or 1) * (s.num_heads // s.num_kv_heads)  # (token, q head) rows of a kv head
        programs_per_seq = s.num_kv_heads * -(-rows // DECODE_ROWS)
        splits = self.force_num_splits or balance_waves(
            seqs * programs_per_seq, choose_num_splits(seqs, programs_per_seq, m.max_seq_len, self.num_sms),
            m.max_seq_len, self.num_sms, self.programs_per_sm)
        scratch = decode_scratch(tokens, s.num_heads, s.head_size, splits, m.seq_lens.device)
        m.extra = FlashStepPlan(num_splits=splits, decode_scratch=scratch, short_query_len=query_len)
        return m

    def _short_query_len(self, m: AttentionMetadata) -> int:
        """The most query tokens of a sequence where all are short (a verify step's k + 1, at most
        ``short_query_max``; at most UNDERFILLED_SHORT_QUERY where the step's sequences x kv heads are fewer
        than the SMs) and some sequence has more than one: then the decode kernel takes every sequence."""
        limit = self.short_query_max
        if limit and m.num_seqs * self.spec.num_kv_heads < self.num_sms:
            limit = max(limit, UNDERFILLED_SHORT_QUERY)
        return m.max_query_len if m.num_seqs > m.num_decodes and m.max_query_len <= limit else 0

    def forward(self, query, key, value, kv_cache, metadata: AttentionMetadata) -> torch.Tensor:
        plan = metadata.extra if isinstance(metadata.extra, FlashStepPlan) else self.prepare(metadata).extra
        m, scales = metadata, self.cache_scales()
        self.ops.reshape_and_cache(key, value, kv_cache, m.slot_mapping,
                                   *((scales.k_scale, scales.v_scale) if scales is not None else ()))
        out = torch.empty(query.shape, dtype=query.dtype, device=query.device)  # [num_tokens, num_heads, head_size]
        kernels.flash_attention(out, query, kv_cache, m.block_tables, m.query_start_loc, m.seq_lens, m.num_decodes,
                                self.spec.scale, self.spec.sliding_window, plan.num_splits, plan.decode_scratch,
                                plan.short_query_len, scales)
        return out


def _platform_reason(platform: Platform | None) -> str | None:
    if platform is None or platform.device_type != "cuda":
        return "flash needs an NVIDIA GPU (compute capability >= 8.0) on the cuda platform"
    reason = platform.csrc_kernel_reason("attention")  # e.g. ROCm: csrc/attention is NVIDIA-only
    if reason:
        return reason
    capability = platform.compute_capability()
    if capability is None or capability < MIN_CAPABILITY:
        found = f"this GPU is sm_{capability[0]}{capability[1]}" if capability else f"{platform.describe()} is not NVIDIA"
        return (f"flash needs compute capability >= 8.0 (mma.sync bf16/fp16, cp.async); {found}; "
                "use --attention-backend triton")
    return None


def _spec_reason(spec: AttentionSpec) -> str | None:
    if spec.dtype not in DTYPES:
        return (f"flash attention supports float16 and bfloat16, not {str(spec.dtype).removeprefix('torch.')} "
                "(use --attention-backend triton)")
    if spec.head_size not in HEAD_SIZES:
        return f"flash attention supports head sizes {', '.join(map(str, HEAD_SIZES))}, not {spec.head_size}"
    if spec.num_heads % spec.num_kv_heads:
        return f"{spec.num_heads} query heads are not a multiple of {spec.num_kv_heads} kv heads"
    return None


def _shared_memory_reason(platform: Platform, spec: AttentionSpec) -> str | None:
    if spec.head_size != 256:
        return None
    available = torch.cuda.get_device_properties(platform.device()).shared_memory_per_block_optin
    if available < HEAD256_SHARED_MEMORY:
        return (f"flash attention with head size 256 needs {HEAD256_SHARED_MEMORY // 1024} KiB of shared memory per "
                f"block; this GPU has {available // 1024} KiB (use --attention-backend triton)")
    return None
