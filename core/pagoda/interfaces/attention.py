"""AttentionBackend: attention over the paged KV cache for a mixed prefill/decode batch."""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from dataclasses import dataclass, replace
from typing import Callable, ClassVar

import torch

from pagoda.interfaces.base import Capability
from pagoda.interfaces.platform import Platform

# --kv-cache-dtype values that store the cache quantized -> the element type (``auto``: the model dtype)
KV_CACHE_FORMATS: dict[str, torch.dtype] = {
    "fp8": torch.float8_e4m3fn,
    "fp8_e4m3": torch.float8_e4m3fn,
    "fp8_e5m2": torch.float8_e5m2,
}


@dataclass(frozen=True)
class MLASpec:
    """Multi-head latent attention (DeepSeek-V2/V3): every head attends over one shared latent row per token.

    The KV cache holds, per token, the normalised compressed key/value (``kv_lora_rank`` values) followed by
    the rotated decoupled rope key (``rope_dim`` values): ``latent_size`` values, one "head" for all query
    heads. Queries come absorbed (each head's no-rope query multiplied through its key up-projection, so it
    lives in the latent space, then its rotated rope query): ``latent_size`` values per head. The values are
    the cached rows' first ``kv_lora_rank`` entries; the model applies each head's value up-projection to the
    output afterwards."""

    kv_lora_rank: int
    rope_dim: int  # qk_rope_head_dim

    @property
    def latent_size(self) -> int:
        """Values cached per token per layer (576 for DeepSeek-V2/V3)."""
        return self.kv_lora_rank + self.rope_dim


@dataclass(frozen=True)
class AttentionSpec:
    """The per-layer shape an attention backend must support."""

    num_heads: int
    num_kv_heads: int
    head_size: int
    scale: float
    block_size: int
    dtype: torch.dtype  # of q/k/v (and of the KV cache unless kv_cache_dtype quantizes it)
    sliding_window: int | None = None
    causal: bool = True  # False: bidirectional attention within each sequence (encoder-only models)
    logits_soft_cap: float | None = None  # scores -> cap * tanh(scores / cap) before the softmax (Gemma 2/3 option)
    mixed_windows: bool = False  # some layers attend within sliding_window, the others to the whole context
    kv_cache_dtype: str = "auto"  # --kv-cache-dtype: "auto" (the cache in `dtype`) or a KV_CACHE_FORMATS name
    # multi-head latent attention: layers call forward_mla; num_kv_heads is 1 and head_size mla.latent_size
    mla: MLASpec | None = None

    @property
    def cache_dtype(self) -> torch.dtype:
        """The KV cache's element type: ``dtype``, or the FP8 type of a quantized cache."""
        return KV_CACHE_FORMATS.get(self.kv_cache_dtype, self.dtype)

    @property
    def kv_quantized(self) -> bool:
        """Keys and values are stored scaled to FP8 (``AttentionBackend.kv_scales`` holds the scales)."""
        return self.kv_cache_dtype in KV_CACHE_FORMATS


def quantize_kv(x: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """How a quantized cache stores ``x``: ``x / scale`` saturated to the largest finite value of the FP8
    format ``dtype`` (e4m3: 448, e5m2: 57344), rounded to nearest even. Kernels must store the same."""
    limit = float(torch.finfo(dtype).max)
    return (x.float() / scale).clamp_(-limit, limit).to(dtype)


class KVScales:
    """One layer's per-tensor scales of a quantized KV cache: a key is stored as ``key / k_scale``
    (saturated to the format's range) and read back as ``stored * k_scale``; likewise values.

    float32 0-dim tensors on the layer's device, 1.0 until the checkpoint's ``k_scale``/``v_scale``
    or a calibration (``--calculate-kv-scales``) sets them. They change only in place, so kernels
    captured in a device graph read the current values.
    """

    def __init__(self, device: torch.device | str | None = None) -> None:
        self.k_scale = torch.ones((), dtype=torch.float32, device=device)
        self.v_scale = torch.ones((), dtype=torch.float32, device=device)
        self.calibrating = False  # the layer observes the next step's keys and values to set the scales
        self.agree: Callable[[torch.Tensor], object] | None = None  # tensor-parallel ranks: max over them, in place


@dataclass
class AttentionMetadata:
    """Batch layout for one step, built once by the model runner and shared by all layers.

    Tokens of all sequences are packed along one axis (``num_tokens``); sequence ``i`` owns
    query tokens ``query_start_loc[i]:query_start_loc[i+1]``, which are the last
    ``query_len`` of its ``seq_lens[i]`` context tokens. Decodes are sequences with query_len 1.
    """

    slot_mapping: torch.Tensor  # [num_tokens] int64, flat slot in the cache (block * block_size + offset)
    block_tables: torch.Tensor  # [num_seqs, max_blocks_per_seq] int32, padded with 0
    query_start_loc: torch.Tensor  # [num_seqs + 1] int32
    seq_lens: torch.Tensor  # [num_seqs] int32, context length including this step's tokens
    max_query_len: int
    max_seq_len: int
    num_decodes: int = 0  # the first num_decodes sequences have query_len == 1 (runner orders them)
    extra: object = None  # whatever a backend's prepare() adds

    @property
    def num_seqs(self) -> int:
        return int(self.seq_lens.shape[0])


class AttentionBackend(Capability, ABC):
    """One instance per engine, shared by all layers (layers differ only by their KV cache).

    Contract: ``forward`` writes this step's ``key``/``value`` into ``kv_cache`` at
    ``metadata.slot_mapping`` and returns attention of ``query`` over each sequence's full
    context (causal within the new tokens; with ``spec.causal`` False, over the whole sequence:
    encoder models run each prompt whole in one step). A backend with ``supports_graphs = True`` must not
    synchronise with the host or branch on tensor values inside ``forward``.
    """

    supports_graphs: ClassVar[bool] = False
    supports_non_causal: ClassVar[bool] = False  # can attend bidirectionally (AttentionSpec.causal=False)
    supports_mixed_windows: ClassVar[bool] = False  # forward reads the window from self.spec only (see with_window)
    supports_logits_soft_cap: ClassVar[bool] = False  # applies AttentionSpec.logits_soft_cap
    kv_cache_dtypes: ClassVar[tuple[str, ...]] = ("auto",)  # --kv-cache-dtype values it stores (auto: model dtype)
    supports_mla: ClassVar[bool] = False  # implements forward_mla over a latent cache (AttentionSpec.mla)
    kv_scales: KVScales | None = None  # a quantized cache's scales, on each layer's view (with_kv_scales)

    def __init__(self, spec: AttentionSpec, platform: Platform) -> None:
        self.spec = spec
        self.platform = platform

    @classmethod
    def check(cls, platform: Platform, spec: AttentionSpec | None = None) -> str | None:
        """``None`` if this backend runs on ``platform`` for ``spec``, else the reason."""
        return None

    def kv_cache_shape(self, num_blocks: int) -> tuple[int, ...]:
        """Shape of one layer's cache; default ``[2, num_blocks, block_size, num_kv_heads, head_size]``, and for
        multi-head latent attention ``[num_blocks, block_size, latent_size]`` (no separate values)."""
        s = self.spec
        if s.mla is not None:
            return (num_blocks, s.block_size, s.mla.latent_size)
        return (2, num_blocks, s.block_size, s.num_kv_heads, s.head_size)

    def prepare(self, metadata: AttentionMetadata) -> AttentionMetadata:
        """Called once per step before the layers run: derive backend-specific fields."""
        return metadata

    def with_window(self, sliding_window: int | None) -> "AttentionBackend":
        """This backend for the layers of a mixed-window model (``spec.mixed_windows``) whose window is
        ``sliding_window`` (None: the whole context): a shallow copy that shares all state (``prepare``
        runs once per step, on the engine's instance) and differs only in ``spec.sliding_window``.
        Backends declare ``supports_mixed_windows`` when their ``forward`` reads the window from
        ``self.spec`` and nothing derived from it at construction."""
        view = copy.copy(self)
        view.spec = replace(self.spec, sliding_window=sliding_window)
        return view

    def with_kv_scales(self, scales: KVScales) -> "AttentionBackend":
        """This backend for one layer of a quantized KV cache (``spec.kv_quantized``): a shallow copy, like
        ``with_window``'s, whose ``kv_scales`` are that layer's. ``forward`` then writes keys and values
        divided by the scales in ``spec.cache_dtype`` and attends over them multiplied back."""
        view = copy.copy(self)
        view.kv_scales = scales
        return view

    def cache_scales(self) -> KVScales | None:
        """What ``forward`` scales a quantized cache by: this layer's ``kv_scales`` (1.0 on an instance no layer
        gave scales, e.g. in a kernel test); None for an unquantized cache."""
        if not self.spec.kv_quantized:
            return None
        if self.kv_scales is None:
            self.kv_scales = KVScales(self.platform.device())
        return self.kv_scales

    @abstractmethod
    def forward(
        self,
        query: torch.Tensor,  # [num_tokens, num_heads, head_size]
        key: torch.Tensor,  # [num_tokens, num_kv_heads, head_size]
        value: torch.Tensor,  # [num_tokens, num_kv_heads, head_size]
        kv_cache: torch.Tensor,  # kv_cache_shape(num_blocks)
        metadata: AttentionMetadata,
    ) -> torch.Tensor:  # [num_tokens, num_heads, head_size]
        """Write k/v into the paged cache, then attend."""

    def forward_mla(
        self,
        query: torch.Tensor,  # [num_tokens, num_heads, latent_size]: absorbed no-rope query, then rotated rope query
        latent: torch.Tensor,  # [num_tokens, latent_size]: normalised kv latent, then rotated rope key
        kv_cache: torch.Tensor,  # kv_cache_shape(num_blocks) = [num_blocks, block_size, latent_size]
        metadata: AttentionMetadata,
    ) -> torch.Tensor:  # [num_tokens, num_heads, kv_lora_rank]
        """Multi-head latent attention (``spec.mla``; backends with ``supports_mla``): write each token's
        ``latent`` row at ``metadata.slot_mapping``, then for every query head ``softmax(scale * query . row)``
        over the sequence's cached rows (causal, as ``forward``), weighting the rows' first ``kv_lora_rank``
        entries."""
        raise NotImplementedError(f"{type(self).__name__} does not implement multi-head latent attention")


def contract_reason(backend_cls: type[AttentionBackend], spec: AttentionSpec | None) -> str | None:
    """Why ``backend_cls`` cannot serve ``spec`` by the contract alone (before its own ``check``)."""
    if spec is not None and not spec.causal and not getattr(backend_cls, "supports_non_causal", False):
        return ("it computes causal (decoder) attention only, and this encoder model needs bidirectional "
                "attention; use --attention-backend torch (attention_backend='torch')")
    if spec is not None and spec.mixed_windows and not getattr(backend_cls, "supports_mixed_windows", False):
        return ("it applies one sliding window to every layer, and this model interleaves sliding-window and "
                "full-attention layers (e.g. Gemma 3); use --attention-backend torch or triton")
    if spec is not None and spec.mla is not None and not getattr(backend_cls, "supports_mla", False):
        return ("it does not implement multi-head latent attention (MLA), which this model uses (DeepSeek-V2/V3: "
                "a latent KV cache); use --attention-backend triton (GPU) or torch")
    if spec is not None and spec.mla is not None and spec.kv_quantized:
        return ("a multi-head latent attention cache is stored in the model dtype only; leave --kv-cache-dtype at "
                "auto")
    if spec is not None and spec.kv_cache_dtype not in getattr(backend_cls, "kv_cache_dtypes", ("auto",)):
        stored = ", ".join(getattr(backend_cls, "kv_cache_dtypes", ("auto",)))
        return (f"it does not store a {spec.kv_cache_dtype} KV cache (it stores: {stored}); choose a backend that "
                "does (--attention-backend) or leave --kv-cache-dtype at auto")
    if spec is not None and spec.logits_soft_cap and not getattr(backend_cls, "supports_logits_soft_cap", False):
        return (f"it does not soft-cap attention scores, and this model's config sets attn_logit_softcapping="
                f"{spec.logits_soft_cap}; use --attention-backend torch")
    return None
