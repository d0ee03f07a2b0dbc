"""``CpuAttentionBackend``: causal attention by a C++ kernel that reads the paged cache in place.

The ``torch`` reference gathers each sequence's cached keys and values into a padded copy, layer by layer, and
runs one SDPA call per prefill; on a CPU the copies cost as much as the attention, and SDPA is slow on short
prompts. The kernel (``paged_attention.cpp``) attends every sequence of a step, decodes and prefills (whole
prompts, chunks, after a cached prefix), in one call over the cache as it lies, writing the step's keys and values
into it first. Encoders, latent (MLA) caches, FP8 caches and soft-capped logits keep the reference's path.
"""

from __future__ import annotations

import torch

from pagoda.attention.torch_ref import TorchAttentionBackend
from pagoda.interfaces.attention import AttentionMetadata, AttentionSpec
from pagoda.interfaces.platform import Platform
from pagoda.platforms.csrc import ExtensionUnavailable

KERNEL_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


class CpuAttentionBackend(TorchAttentionBackend):
    description = "C++ paged attention for CPUs, read in place (encoders, FP8 caches, soft caps: the torch reference)"
    priority = 5  # above the torch reference; the GPU backends do not run on CPUs

    def __init__(self, spec: AttentionSpec, platform: Platform) -> None:
        super().__init__(spec, platform)
        from pagoda_attention_cpu.build import load_kernel

        self.kernel = load_kernel().paged_attention
        self.in_place = (spec.causal and spec.mla is None and not spec.kv_quantized and not spec.logits_soft_cap
                         and spec.dtype in KERNEL_DTYPES)

    @classmethod
    def check(cls, platform: Platform, spec: AttentionSpec | None = None) -> str | None:
        if platform is None or platform.device_type != "cpu":
            return "the cpu backend runs on the cpu platform only"
        from pagoda_attention_cpu.build import load_kernel

        try:
            load_kernel()
        except ExtensionUnavailable as error:
            return f"its C++ kernel is unavailable: {error}"
        return None

    def prepare(self, metadata: AttentionMetadata) -> AttentionMetadata:
        return metadata if self.in_place else super().prepare(metadata)  # the kernel reads the step's own tables

    def forward(self, query, key, value, kv_cache, metadata: AttentionMetadata) -> torch.Tensor:
        if not self.in_place:
            return super().forward(query, key, value, kv_cache, metadata)
        out = torch.empty(query.shape, dtype=query.dtype)
        self.kernel(out, query, key, value, kv_cache[0], kv_cache[1], metadata.slot_mapping, metadata.block_tables,
                    metadata.seq_lens, metadata.query_start_loc, self.spec.scale, self.spec.sliding_window or 0)
        return out
