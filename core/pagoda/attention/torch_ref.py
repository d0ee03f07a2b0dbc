"""The built-in ``torch`` attention backend: a readable reference over the paged KV cache.

Decodes are attended in one batched call (keys gathered through the block tables, padded and
masked); each prefill (possibly a chunk after a cached prefix) runs one masked SDPA call.
Encoder layers (``spec.causal`` False: whole prompts, no cached prefix) attend over the step's
own keys in one padded SDPA call; they skip the KV-cache write (no later step reads an encoder's
keys) and share one padding layout per step, made by ``prepare`` without a device sync.
With ``spec.logits_soft_cap`` the scores are computed explicitly (SDPA cannot cap them).
An FP8 cache (``--kv-cache-dtype fp8``) stores keys and values divided by the layer's scales and
multiplies them back into the model dtype before attending (:mod:`pagoda.attention.kv_quant`): the
reference the FP8 kernels of the other backends are tested against. Multi-head latent attention
(``spec.mla``) attends over the latent rows in the absorbed form (:mod:`pagoda.attention.mla_torch`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F

from pagoda.attention.kv_quant import dequantize_kv
from pagoda.attention.mla_torch import gather_rows, latent_attention, write_latent
from pagoda.interfaces.attention import KV_CACHE_FORMATS, AttentionBackend, AttentionMetadata, AttentionSpec
from pagoda.interfaces.platform import Platform


class TorchAttentionBackend(AttentionBackend):
    description = "reference attention in plain torch (CPU and any device; slow)"
    priority = 0
    supports_non_causal = True  # encoder models (AttentionSpec.causal=False)
    supports_mixed_windows = True  # forward reads spec.sliding_window only
    supports_logits_soft_cap = True
    kv_cache_dtypes = ("auto", *KV_CACHE_FORMATS)  # FP8 caches: stored scaled, attended in the model dtype
    supports_mla = True  # latent caches (DeepSeek-V2/V3): attention.mla_torch

    def __init__(self, spec: AttentionSpec, platform: Platform) -> None:
        super().__init__(spec, platform)
        self.ops = platform.custom_ops()  # the platform's KV-write kernel

    def prepare(self, metadata: AttentionMetadata) -> AttentionMetadata:
        if not self.spec.causal:
            return replace(metadata, extra=Padding.of(metadata))  # once per step, shared by the layers
        if metadata.num_decodes and not self.spec.mla:  # the decodes' block index and lengths, for every layer
            return replace(metadata, extra=Decodes.of(metadata, self.spec.block_size))
        return metadata

    def forward(self, query, key, value, kv_cache, metadata: AttentionMetadata) -> torch.Tensor:
        if not self.spec.causal:  # encoders: every prompt is whole in this step, so attend over q/k/v directly
            padding = metadata.extra if isinstance(metadata.extra, Padding) else Padding.of(metadata)
            return self._attend_whole(query, key, value, padding)
        self.ops.reshape_and_cache(key, value, kv_cache, metadata.slot_mapping, *self._scales())
        out = torch.empty_like(query)
        decodes = metadata.extra if isinstance(metadata.extra, Decodes) else None
        if decodes is not None:  # prepared: one batched call without per-layer index work
            out[: decodes.count] = self._attend_decodes(query[: decodes.count], kv_cache, decodes)
        return self._each_sequence(query, out, metadata, lambda q, tables, lens, q_len: self._attend(
            q, kv_cache, tables, lens, q_len), first=0 if decodes is None else decodes.count)

    def forward_mla(self, query, latent, kv_cache, metadata: AttentionMetadata) -> torch.Tensor:
        write_latent(latent, kv_cache, metadata.slot_mapping)
        mla = self.spec.mla
        out = query.new_empty(*query.shape[:2], mla.kv_lora_rank)  # [num_tokens, heads, kv_lora_rank]

        def attend(q, tables, lens, q_len):
            rows = gather_rows(kv_cache, tables, max(lens))  # [batch, max_len, latent_size]
            mask = self._mask(torch.tensor(lens, device=q.device), q_len, rows.shape[1])
            return latent_attention(q, rows, mask, self.spec.scale, mla.kv_lora_rank)

        return self._each_sequence(query, out, metadata, attend)

    def _each_sequence(self, query, out, metadata: AttentionMetadata, attend, first: int = 0) -> torch.Tensor:
        """Fill ``out`` from sequence ``first`` on with ``attend(q [batch, q_len, heads, d], block_tables, seq_lens,
        q_len)``: the decodes in one batch, then each other sequence on its own."""
        if first == metadata.num_seqs:
            return out
        starts = metadata.query_start_loc.tolist()
        seq_lens = metadata.seq_lens.tolist()
        d = metadata.num_decodes
        if d > first:
            out[:d] = attend(query[:d, None], metadata.block_tables[:d], seq_lens[:d], 1)[:, 0]
        for i in range(max(d, first), metadata.num_seqs):
            q = query[starts[i] : starts[i + 1]]
            out[starts[i] : starts[i + 1]] = attend(q[None], metadata.block_tables[i : i + 1], seq_lens[i : i + 1],
                                                    q.shape[0])[0]
        return out

    def _attend(self, q, kv_cache, block_tables, seq_lens: list[int], q_len: int) -> torch.Tensor:
        """``q``: [batch, q_len, heads, d]; each sequence's queries are its last q_len positions."""
        s = self.spec
        max_len = max(seq_lens)
        num_blocks = -(-max_len // s.block_size)
        blocks = block_tables[:, :num_blocks].long()  # [batch, num_blocks]
        k = kv_cache[0][blocks].flatten(1, 2)[:, :max_len]  # [batch, max_len, kv_heads, d]
        v = kv_cache[1][blocks].flatten(1, 2)[:, :max_len]
        if s.kv_quantized:  # back to the model dtype: stored * scale
            k_scale, v_scale = self._scales()
            k, v = dequantize_kv(k, k_scale, q.dtype), dequantize_kv(v, v_scale, q.dtype)
        mask = self._mask(torch.tensor(seq_lens, device=q.device), q_len, max_len)
        k, v = k.transpose(1, 2), v.transpose(1, 2)  # [batch, kv_heads, max_len, d]
        if s.logits_soft_cap:
            out = _soft_capped_attention(q.transpose(1, 2).to(k.dtype), k, v, mask[:, None], s.scale, s.logits_soft_cap)
        else:
            out = F.scaled_dot_product_attention(
                q.transpose(1, 2).to(k.dtype), k, v, attn_mask=mask[:, None], scale=s.scale, enable_gqa=True
            )
        return out.transpose(1, 2).to(q.dtype)

    def _attend_decodes(self, q: torch.Tensor, kv_cache: torch.Tensor, decodes: "Decodes") -> torch.Tensor:
        """``q``: [count, heads, d], one query per decoding sequence, attended over its cached keys."""
        s = self.spec
        k = kv_cache[0][decodes.blocks].flatten(1, 2)[:, : decodes.max_len]  # [count, max_len, kv_heads, d]
        v = kv_cache[1][decodes.blocks].flatten(1, 2)[:, : decodes.max_len]
        if s.kv_quantized:
            k_scale, v_scale = self._scales()
            k, v = dequantize_kv(k, k_scale, q.dtype), dequantize_kv(v, v_scale, q.dtype)
        mask = decodes.mask if not s.sliding_window else decodes.mask & decodes.window(s.sliding_window)
        k, v, q = k.transpose(1, 2), v.transpose(1, 2), q[:, :, None].to(k.dtype)  # [count, heads, 1, d]
        if s.logits_soft_cap:
            out = _soft_capped_attention(q, k, v, mask, s.scale, s.logits_soft_cap)
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=s.scale, enable_gqa=True)
        return out[:, :, 0].to(q.dtype)

    def _scales(self) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """(k_scale, v_scale) of a quantized cache, else (None, None)."""
        scales = self.cache_scales()
        return (None, None) if scales is None else (scales.k_scale, scales.v_scale)

    def _attend_whole(self, query, key, value, padding: "Padding") -> torch.Tensor:
        """Bidirectional attention of whole sequences in one padded SDPA call (no cache read)."""
        out = F.scaled_dot_product_attention(padding.pad(query), padding.pad(key), padding.pad(value),
                                             attn_mask=padding.valid[:, None, None], scale=self.spec.scale,
                                             enable_gqa=key.shape[1] != query.shape[1])
        return padding.unpad(out)  # [num_tokens, heads, d]

    def _mask(self, seq_lens: torch.Tensor, q_len: int, max_len: int) -> torch.Tensor:
        """[batch, q_len, max_len] bool: causal, within length, within the sliding window."""
        key_pos = torch.arange(max_len, device=seq_lens.device)[None, None, :]
        q_pos = (seq_lens[:, None] - q_len + torch.arange(q_len, device=seq_lens.device)[None, :])[..., None]
        mask = key_pos <= q_pos
        if self.spec.sliding_window:
            mask &= key_pos > q_pos - self.spec.sliding_window
        return mask


def _soft_capped_attention(
    q: torch.Tensor,  # [batch, heads, q_len, d]
    k: torch.Tensor,  # [batch, kv_heads, max_len, d]
    v: torch.Tensor,  # [batch, kv_heads, max_len, d]
    mask: torch.Tensor,  # [batch, 1, q_len, max_len] bool
    scale: float,
    cap: float,
) -> torch.Tensor:  # [batch, heads, q_len, d]
    """softmax(cap * tanh(q k^T * scale / cap)) v in float32, with GQA by repeating the kv heads."""
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, dim=1).float(), v.repeat_interleave(group, dim=1).float()
    scores = torch.matmul(q.float(), k.transpose(-1, -2)) * scale  # [batch, heads, q_len, max_len]
    scores = torch.tanh(scores / cap) * cap
    probs = scores.masked_fill(~mask, float("-inf")).softmax(dim=-1)
    return torch.matmul(probs, v).to(q.dtype)


@dataclass(frozen=True)
class Decodes:
    """The decoding sequences of a step (the first ``count``), laid out once for every layer's gather."""

    count: int
    blocks: torch.Tensor  # [count, blocks of the longest] int64 block ids
    lens: torch.Tensor  # [count] tokens each attends over
    max_len: int
    mask: torch.Tensor  # [count, 1, 1, max_len] bool: within the sequence

    @classmethod
    def of(cls, metadata: AttentionMetadata, block_size: int) -> "Decodes":
        count = metadata.num_decodes
        lens = metadata.seq_lens[:count]
        max_len = int(lens.max())
        blocks = metadata.block_tables[:count, : -(-max_len // block_size)].long()
        mask = torch.arange(max_len, device=lens.device)[None, :] < lens[:, None]
        return cls(count, blocks, lens, max_len, mask[:, None, None])

    def window(self, size: int) -> torch.Tensor:
        """[count, 1, 1, max_len]: the last ``size`` positions of each sequence."""
        return (torch.arange(self.max_len, device=self.lens.device)[None, :] >= (self.lens - size)[:, None])[:, None, None]


@dataclass(frozen=True)
class Padding:
    """Where each packed token of a step of whole sequences sits in a [num_seqs, width] padded batch."""

    index: torch.Tensor  # [num_tokens] int64: seq * width + offset within its sequence
    valid: torch.Tensor  # [num_seqs, width] bool: real (not padding) positions
    width: int

    @classmethod
    def of(cls, metadata: AttentionMetadata) -> "Padding":
        starts = metadata.query_start_loc.long()  # [num_seqs + 1]
        lens = starts[1:] - starts[:-1]
        num_seqs, width = lens.shape[0], metadata.max_query_len  # a host int: no sync
        num_tokens = metadata.slot_mapping.shape[0]
        seq = torch.repeat_interleave(torch.arange(num_seqs, device=lens.device), lens, output_size=num_tokens)
        index = torch.arange(num_tokens, device=lens.device) + seq * width - starts[seq]
        valid = torch.arange(width, device=lens.device)[None, :] < lens[:, None]
        return cls(index, valid, width)

    def pad(self, x: torch.Tensor) -> torch.Tensor:
        """[num_tokens, h, d] -> [num_seqs, h, width, d], zeros in the padding."""
        out = x.new_zeros(self.valid.numel(), *x.shape[1:]).index_copy_(0, self.index, x)
        return out.view(-1, self.width, *x.shape[1:]).transpose(1, 2)

    def unpad(self, x: torch.Tensor) -> torch.Tensor:
        """[num_seqs, h, width, d] -> [num_tokens, h, d]."""
        return x.transpose(1, 2).flatten(0, 1).index_select(0, self.index)
