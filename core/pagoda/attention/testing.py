"""Random paged batches and float64 references for the attention backends' tests (triton, flash): standard
and multi-head latent attention."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from pagoda.interfaces.attention import AttentionMetadata, AttentionSpec


@dataclass
class PagedBatch:
    query: torch.Tensor  # [num_tokens, num_heads, head_size]
    key: torch.Tensor  # [num_tokens, num_kv_heads, head_size], this step's keys
    value: torch.Tensor
    kv_cache: torch.Tensor  # holds each sequence's cached prefix already
    metadata: AttentionMetadata
    full_keys: list[torch.Tensor]  # per sequence [seq_len, num_kv_heads, head_size]
    full_values: list[torch.Tensor]
    query_lens: list[int]


def make_batch(
    spec: AttentionSpec, seqs: list[tuple[int, int]], device: str = "cpu", seed: int = 0, spare_blocks: int = 3
) -> PagedBatch:
    """``seqs``: (query_len, seq_len) per sequence, decodes (query_len 1) first.

    Blocks are drawn from a shuffled pool (non-contiguous, out of order), the tables padded
    with 0; the cached prefix of each sequence is written into the cache, the rest returned as
    this step's ``key``/``value``. The query and new keys are views into wider tensors
    (non-contiguous, as a fused QKV projection produces them).
    """
    g = torch.Generator().manual_seed(seed)
    bs, kvh, d, h = spec.block_size, spec.num_kv_heads, spec.head_size, spec.num_heads
    needed = [-(-seq_len // bs) for _, seq_len in seqs]
    pool = torch.randperm(sum(needed) + spare_blocks, generator=g).tolist()
    num_blocks = len(pool)
    cache = torch.randn(2, num_blocks, bs, kvh, d, generator=g)
    tables = torch.zeros(len(seqs), max(needed) + 1, dtype=torch.int32)
    full_k, full_v, slots = [], [], []
    for i, ((q_len, seq_len), n) in enumerate(zip(seqs, needed)):
        blocks = torch.tensor([pool.pop() for _ in range(n)])
        tables[i, :n] = blocks
        full_k.append(torch.randn(seq_len, kvh, d, generator=g))
        full_v.append(torch.randn(seq_len, kvh, d, generator=g))
        pos = torch.arange(seq_len)
        flat = blocks[pos // bs] * bs + pos % bs
        cached = seq_len - q_len
        cache[0].view(-1, kvh, d)[flat[:cached]] = full_k[i][:cached]
        cache[1].view(-1, kvh, d)[flat[:cached]] = full_v[i][:cached]
        slots.append(flat[cached:])
    q_lens = [q for q, _ in seqs]
    n_tok = sum(q_lens)
    wide = torch.randn(n_tok, h + 2 * kvh + 1, d, generator=g)  # fused-QKV-like layout
    query = wide[:, :h]
    new_k = torch.cat([k[s - q :] for k, (q, s) in zip(full_k, seqs)])
    new_v = torch.cat([v[s - q :] for v, (q, s) in zip(full_v, seqs)])
    wide[:, h : h + kvh] = new_k
    wide[:, h + kvh : h + 2 * kvh] = new_v
    qsl = torch.zeros(len(seqs) + 1, dtype=torch.int32)
    qsl[1:] = torch.cumsum(torch.tensor(q_lens), 0)
    seq_lens = torch.tensor([s for _, s in seqs], dtype=torch.int32)
    dt = spec.dtype
    wide = wide.to(dt).to(device)
    metadata = AttentionMetadata(
        slot_mapping=torch.cat(slots).to(device),
        block_tables=tables.to(device),
        query_start_loc=qsl.to(device),
        seq_lens=seq_lens.to(device),
        max_query_len=max(q_lens),
        max_seq_len=max(s for _, s in seqs),
        num_decodes=_leading_decodes(q_lens),
    )
    return PagedBatch(
        query=wide[:, :h], key=wide[:, h : h + kvh], value=wide[:, h + kvh : h + 2 * kvh],
        kv_cache=cache.to(dt).to(device), metadata=metadata,
        full_keys=[k.to(dt).double() for k in full_k], full_values=[v.to(dt).double() for v in full_v],
        query_lens=q_lens,
    )


def _leading_decodes(query_lens: list[int]) -> int:
    """How many sequences at the front have one query token."""
    return next((i for i, q in enumerate(query_lens) if q != 1), len(query_lens))


def reference(spec: AttentionSpec, batch: PagedBatch, device: str = "cpu") -> torch.Tensor:
    """float64 attention of each sequence's queries over its whole context (causal, windowed)."""
    outs = []
    q_all = batch.query.double().to(device)
    start = 0
    group = spec.num_heads // spec.num_kv_heads
    for k, v, q_len in zip(batch.full_keys, batch.full_values, batch.query_lens):
        seq_len = k.shape[0]
        q = q_all[start : start + q_len]  # [q_len, h, d]
        start += q_len
        k = k.to(device).repeat_interleave(group, dim=1)  # [seq_len, h, d]
        v = v.to(device).repeat_interleave(group, dim=1)
        scores = torch.einsum("qhd,khd->hqk", q, k) * spec.scale
        qpos = torch.arange(seq_len - q_len, seq_len, device=device)[:, None]
        kpos = torch.arange(seq_len, device=device)[None, :]
        visible = kpos <= qpos
        if spec.sliding_window:
            visible &= kpos > qpos - spec.sliding_window
        scores = scores.masked_fill(~visible, float("-inf"))
        outs.append(torch.einsum("hqk,khd->qhd", scores.softmax(-1), v))
    return torch.cat(outs).cpu()


def rel_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    out = out.double().cpu()
    assert torch.isfinite(out).all(), "non-finite output"
    return float((out - ref).norm() / ref.norm())


def replay_after_shortening(backend, batch: PagedBatch, cut: list[int]) -> tuple[torch.Tensor, torch.Tensor, PagedBatch]:
    """Capture one forward of ``backend`` (split count already set) in a CUDA graph, shorten every
    sequence by ``cut`` in place on the device, replay. Returns (the replayed output, an eager
    forward at the new lengths, the batch as a reference should see it: contexts cut to match)."""
    from dataclasses import replace

    metadata = backend.prepare(batch.metadata)
    args = (batch.query, batch.key, batch.value, batch.kv_cache, metadata)
    backend.forward(*args)  # warm-up outside the capture (compiles, extension load, shared-memory opt-in)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = backend.forward(*args)
    metadata.seq_lens.sub_(torch.tensor(cut, dtype=torch.int32, device=metadata.seq_lens.device))
    graph.replay()
    torch.cuda.synchronize()
    lens = metadata.seq_lens.tolist()
    shortened = replace(batch, full_keys=[k[:n] for k, n in zip(batch.full_keys, lens)],
                        full_values=[v[:n] for v, n in zip(batch.full_values, lens)])
    return out, backend.forward(*args), shortened


def quantize_batch(spec: AttentionSpec, batch: PagedBatch, k_scale: float = 0.05, v_scale: float = 0.03) -> tuple[
        PagedBatch, torch.Tensor, torch.Tensor]:
    """``batch`` with its cache stored in ``spec.cache_dtype`` (an FP8 cache: the cached prefixes divided by
    the scales), and its reference contexts the values an FP8 cache gives back (stored * scale) for every
    position, this step's too (the backend stores those before attending). Returns (batch, k_scale, v_scale),
    the scales as float32 0-dim tensors on the batch's device."""
    from dataclasses import replace

    from pagoda.attention.kv_quant import dequantize_kv, quantize_kv

    device = batch.kv_cache.device
    k_s, v_s = (torch.tensor(s, dtype=torch.float32, device=device) for s in (k_scale, v_scale))
    dt = spec.cache_dtype
    cache = torch.stack([quantize_kv(batch.kv_cache[0], k_s, dt), quantize_kv(batch.kv_cache[1], v_s, dt)])

    def round_trip(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:  # what the cache gives back, float64
        return dequantize_kv(quantize_kv(x.to(spec.dtype), scale.cpu(), dt), scale.cpu(), torch.float64)

    return replace(batch, kv_cache=cache,
                   full_keys=[round_trip(k, k_s) for k in batch.full_keys],
                   full_values=[round_trip(v, v_s) for v in batch.full_values]), k_s, v_s


@dataclass
class LatentBatch:
    """A random paged batch for multi-head latent attention (``spec.mla``)."""

    query: torch.Tensor  # [num_tokens, num_heads, latent_size], absorbed
    latent: torch.Tensor  # [num_tokens, latent_size], this step's rows
    kv_cache: torch.Tensor  # [num_blocks, block_size, latent_size], each sequence's cached prefix already in
    metadata: AttentionMetadata
    full_rows: list[torch.Tensor]  # per sequence [seq_len, latent_size] float64
    query_lens: list[int]


def make_latent_batch(spec: AttentionSpec, seqs: list[tuple[int, int]], device: str = "cpu", seed: int = 0,
                      spare_blocks: int = 3) -> LatentBatch:
    """``seqs``: (query_len, seq_len) per sequence, decodes first; blocks shuffled as in :func:`make_batch`. The
    query and latent are views into wider tensors (as the model's projections produce them)."""
    g = torch.Generator().manual_seed(seed)
    bs, d, h = spec.block_size, spec.mla.latent_size, spec.num_heads
    needed = [-(-seq_len // bs) for _, seq_len in seqs]
    pool = torch.randperm(sum(needed) + spare_blocks, generator=g).tolist()
    cache = torch.randn(len(pool), bs, d, generator=g)
    tables = torch.zeros(len(seqs), max(needed) + 1, dtype=torch.int32)
    full, slots = [], []
    for i, ((q_len, seq_len), n) in enumerate(zip(seqs, needed)):
        blocks = torch.tensor([pool.pop() for _ in range(n)])
        tables[i, :n] = blocks
        full.append(torch.randn(seq_len, d, generator=g))
        pos = torch.arange(seq_len)
        flat = blocks[pos // bs] * bs + pos % bs
        cache.view(-1, d)[flat[: seq_len - q_len]] = full[i][: seq_len - q_len]
        slots.append(flat[seq_len - q_len :])
    q_lens = [q for q, _ in seqs]
    wide_q = torch.randn(sum(q_lens), h, d + 3, generator=g)
    wide_latent = torch.zeros(sum(q_lens), d + 5)
    wide_latent[:, 2 : 2 + d] = torch.cat([rows[s - q :] for rows, (q, s) in zip(full, seqs)])
    qsl = torch.zeros(len(seqs) + 1, dtype=torch.int32)
    qsl[1:] = torch.cumsum(torch.tensor(q_lens), 0)
    dt = spec.dtype
    metadata = AttentionMetadata(
        slot_mapping=torch.cat(slots).to(device), block_tables=tables.to(device), query_start_loc=qsl.to(device),
        seq_lens=torch.tensor([s for _, s in seqs], dtype=torch.int32, device=device), max_query_len=max(q_lens),
        max_seq_len=max(s for _, s in seqs), num_decodes=_leading_decodes(q_lens),
    )
    wide_q, wide_latent = wide_q.to(dt).to(device), wide_latent.to(dt).to(device)
    return LatentBatch(query=wide_q[..., 1 : 1 + d], latent=wide_latent[:, 2 : 2 + d],
                       kv_cache=cache.to(dt).to(device), metadata=metadata,
                       full_rows=[rows.to(dt).double() for rows in full], query_lens=q_lens)


def latent_reference(spec: AttentionSpec, batch: LatentBatch) -> torch.Tensor:
    """float64 multi-head latent attention of each sequence's queries over its rows (causal):
    ``[num_tokens, num_heads, kv_lora_rank]``."""
    outs, start, rank = [], 0, spec.mla.kv_lora_rank
    q_all = batch.query.double().cpu()
    for rows, q_len in zip(batch.full_rows, batch.query_lens):
        seq_len = rows.shape[0]
        q = q_all[start : start + q_len]  # [q_len, heads, latent_size]
        start += q_len
        scores = torch.einsum("qhd,kd->hqk", q, rows) * spec.scale
        visible = torch.arange(seq_len)[None, :] <= torch.arange(seq_len - q_len, seq_len)[:, None]
        probs = scores.masked_fill(~visible, float("-inf")).softmax(-1)
        outs.append(torch.einsum("hqk,kl->qhl", probs, rows[:, :rank]))
    return torch.cat(outs)
