"""``FlashAttentionBackend``: Pagoda's FlashAttention-algorithm CUDA kernels over the paged KV cache."""

from __future__ import annotations

from types import ModuleType
from typing import ClassVar

import torch

from pagoda.interfaces.attention import AttentionBackend, AttentionMetadata, AttentionSpec
from pagoda.interfaces.platform import Platform
from pagoda_attention_flash.plan import FlashPlan, choose_num_splits, make_plan

DTYPES = (torch.float16, torch.bfloat16)
HEAD_SIZES = (64, 128, 256)
MIN_CAPABILITY = (8, 0)  # mma.sync m16n8k16 in bf16, cp.async


class FlashAttentionBackend(AttentionBackend):
    """KV write, tensor-core prefill (cached prefixes read in place), split-KV decode.

    Graph safety: ``forward`` launches with grids computed from tensor shapes and the Python ints
    of the metadata (``num_decodes``) and of the plan ``prepare()`` stored in ``metadata.extra``
    (``num_splits``, with its scratch); the kernels read lengths, offsets and block tables on the
    device. Between capture and replay keep fixed: the token count, ``num_decodes``, ``num_seqs``
    and the plan (``prepare()`` with an upper bound as ``max_seq_len``, or ``force_num_splits``).
    """

    description = "FlashAttention-style CUDA kernels (tensor-core prefill, split-KV decode; sm80+, fp16/bf16)"
    priority = 100  # above triton (50): the fastest where usable
    supports_graphs: ClassVar[bool] = True

    def __init__(self, spec: AttentionSpec, platform: Platform) -> None:
        super().__init__(spec, platform)
        self.force_num_splits: int | None = None  # tests and benchmarks pin the split-KV choice
        self.num_sms = platform.compute_units()
        self.kernels: ModuleType = _load_kernels()

    @classmethod
    def check(cls, platform: Platform, spec: AttentionSpec | None = None) -> str | None:
        return _platform_reason(platform) or (spec and _spec_reason(spec)) or _kernels_reason()

    def prepare(self, metadata: AttentionMetadata) -> AttentionMetadata:
        s, d = self.spec, metadata.num_decodes
        splits = self.force_num_splits or choose_num_splits(
            d, s.num_heads, s.num_kv_heads, metadata.max_seq_len, self.num_sms
        )
        metadata.extra = make_plan(d, s.num_heads, s.head_size, splits, metadata.seq_lens.device)
        return metadata

    def forward(self, query, key, value, kv_cache, metadata: AttentionMetadata) -> torch.Tensor:
        out = torch.empty(query.shape, dtype=query.dtype, device=query.device)  # [num_tokens, num_heads, head_size]
        return self.forward_into(out, query, key, value, kv_cache, metadata)

    def forward_into(self, out, query, key, value, kv_cache, metadata: AttentionMetadata) -> torch.Tensor:
        """``forward`` into a given contiguous ``out`` (tests poison it first to see every row written)."""
        plan = metadata.extra if isinstance(metadata.extra, FlashPlan) else self.prepare(metadata).extra
        s, m, k = self.spec, metadata, self.kernels
        k.reshape_and_cache(key, value, kv_cache, m.slot_mapping)
        query = _aligned(query)
        window = s.sliding_window or 0
        k.flash_decode(out, query, kv_cache, m.block_tables, m.seq_lens, m.num_decodes, s.scale, window,
                       plan.part_out, plan.part_lse)
        k.flash_prefill(out, query, kv_cache, m.block_tables, m.query_start_loc, m.seq_lens, m.num_decodes,
                        s.scale, window)
        return out


def _aligned(query: torch.Tensor) -> torch.Tensor:
    """The kernels load 16-byte rows: a view whose strides or start break that is copied (a
    decision on shapes and addresses only, so graph replays repeat it)."""
    ok = query.stride(2) == 1 and query.stride(0) % 8 == 0 and query.stride(1) % 8 == 0 and query.data_ptr() % 16 == 0
    return query if ok else query.contiguous()


def _platform_reason(platform: Platform | None) -> str | None:
    if platform is None:
        return "flash needs an NVIDIA GPU (the cuda platform); no platform was given"
    if platform.device_type != "cuda":
        return f"flash needs an NVIDIA GPU (the cuda platform), not platform '{platform.device_type}'"
    try:
        major, minor = device_capability(platform)
    except (RuntimeError, AssertionError) as error:
        return f"flash cannot query the GPU ({error})"
    if (major, minor) < MIN_CAPABILITY:
        return f"flash needs compute capability >= 8.0 (tensor-core mma.sync); this GPU is sm_{major}{minor}"
    return None


def device_capability(platform: Platform) -> tuple[int, int]:
    return torch.cuda.get_device_capability(platform.device())


def _spec_reason(spec: AttentionSpec) -> str | None:
    if spec.dtype not in DTYPES:
        name = str(spec.dtype).removeprefix("torch.")
        return f"flash attention supports float16 and bfloat16, not {name} (use --attention-backend triton)"
    if spec.head_size not in HEAD_SIZES:
        return f"flash attention supports head sizes 64, 128 and 256, not {spec.head_size} (use --attention-backend triton)"
    if spec.num_heads % spec.num_kv_heads:
        return f"{spec.num_heads} query heads are not a multiple of {spec.num_kv_heads} kv heads"
    return None


def _kernels_reason() -> str | None:
    try:
        _load_kernels()
    except ImportError:
        return "flash needs pagoda-platform-cuda, which builds its kernels (pip install ./plugins/platform_cuda)"
    except RuntimeError as error:  # ExtensionUnavailable: no nvcc, a build error, PAGODA_CUDA_KERNELS=0
        return f"the flash kernels are unavailable: {error}"
    return None


def _load_kernels() -> ModuleType:
    """``pagoda_platform_cuda._flash`` (prebuilt at install, or compiled at first use and cached)."""
    from pagoda_platform_cuda.build import load_flash_extension

    return load_flash_extension()
