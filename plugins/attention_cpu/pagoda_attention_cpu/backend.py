"""``CpuAttentionBackend``: the ``torch`` reference backend with its decodes attended by a C++ kernel.

The reference gathers every decoding sequence's cached keys and values into a padded copy, layer by layer,
before one batched SDPA call; on a CPU that copy costs as much as the attention itself. The kernel
(``paged_attention.cpp``) reads each sequence's blocks in place instead. Prefills, encoders, latent (MLA)
caches, FP8 caches and soft-capped logits keep the reference's path.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from pagoda.attention.torch_ref import Decodes, TorchAttentionBackend
from pagoda.interfaces.attention import AttentionMetadata, AttentionSpec
from pagoda.interfaces.platform import Platform
from pagoda.platforms.csrc import ExtensionUnavailable

KERNEL_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


@dataclass(frozen=True)
class TableDecodes(Decodes):
    """The reference's decode layout plus the int32 block tables the kernel reads."""

    tables: torch.Tensor = None  # [count, blocks of the longest] int32, rows contiguous


class CpuAttentionBackend(TorchAttentionBackend):
    description = "C++ paged decode attention for CPUs (prefills as the torch reference)"
    priority = 5  # above the torch reference; the GPU backends do not run on CPUs

    def __init__(self, spec: AttentionSpec, platform: Platform) -> None:
        super().__init__(spec, platform)
        from pagoda_attention_cpu.build import load_kernel

        self.kernel = load_kernel().paged_decode_attention

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
        metadata = super().prepare(metadata)
        decodes = metadata.extra
        if isinstance(decodes, Decodes):
            tables = decodes.blocks.to(torch.int32)  # once a step, not once a layer
            metadata = replace(metadata, extra=TableDecodes(**vars(decodes), tables=tables))
        return metadata

    def _attend_decodes(self, q: torch.Tensor, kv_cache: torch.Tensor, decodes: Decodes) -> torch.Tensor:
        s = self.spec
        if (s.kv_quantized or s.logits_soft_cap or not isinstance(decodes, TableDecodes)
                or q.dtype not in KERNEL_DTYPES or kv_cache.dtype != q.dtype):
            return super()._attend_decodes(q, kv_cache, decodes)
        out = torch.empty(q.shape, dtype=q.dtype)
        self.kernel(out, q, kv_cache[0], kv_cache[1], decodes.tables, decodes.lens, s.scale, s.sliding_window or 0)
        return out
