"""Paged attention backends (by registry name: triton, flash, torch, ...) through their ``prepare`` and
``forward``, as the engine calls them, at Llama-3.1-8B's heads (32 q, 8 kv, head 128, bf16, 16-token
blocks in shuffled order).

- prefill: 16k tokens of fresh prompts of 512..16k tokens, timed launch by launch (the engine runs
  prefills eagerly), against torch ``scaled_dot_product_attention`` (its flash kernel on a GPU; cuDNN's,
  where it runs, as ``sdpa_cudnn``) on contiguous tensors; the floor is the causal FLOPs at the matmul rate.
- decode: one query token per sequence, batch 1..256 at context 1k..32k; CUDA-graph replays where the
  backend supports graphs; the floor is the KV bytes at the copy rate.
- verify: speculative verify steps (4-token queries; 16 tokens after 1008 cached), as decode.

``--kv-cache-dtype fp8`` (or ``fp8_e5m2``) times the backends over an FP8 cache (scales 1.0): the KV bytes,
and so the decode floor, halve; ``gbs`` then shows whether the kernels keep the same share of the copy rate.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F

from benchmarks.kernel_bench.report import Report, make_row
from benchmarks.kernel_bench.timing import device, on_gpu, platform, time_us

TIMING = "prefill: launches; decode and verify: CUDA-graph replays where the backend supports them; median"
PARTS = ("prefill", "decode", "verify")
PREFILL_TOKENS = 16384


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--backends", help="comma-separated attention backends (default: every one usable here)")
    p.add_argument("--parts", default=",".join(PARTS), help="comma-separated of: %(default)s")
    p.add_argument("--kv-cache-dtype", default="auto", choices=("auto", "fp8", "fp8_e4m3", "fp8_e5m2"),
                   help="the cache's element type: auto (bf16) or an FP8 format, stored scaled (default %(default)s)")


def unavailable(args: argparse.Namespace) -> str | None:
    unknown = set(args.parts.split(",")) - set(PARTS)
    if unknown:
        return f"unknown part(s) {', '.join(sorted(unknown))}; parts: {', '.join(PARTS)}"
    try:
        backends(args)
    except Exception as exc:  # an unknown or unusable backend: the registry's message names the fix
        return str(exc)
    return None


def spec(small: bool, kv_cache_dtype: str = "auto"):
    from pagoda.interfaces.attention import AttentionSpec

    if small:
        return AttentionSpec(4, 2, 64, 64**-0.5, 16, torch.bfloat16 if on_gpu() else torch.float32,
                             kv_cache_dtype=kv_cache_dtype)
    return AttentionSpec(32, 8, 128, 128**-0.5, 16, torch.bfloat16, kv_cache_dtype=kv_cache_dtype)


def backends(args: argparse.Namespace) -> dict[str, type]:
    from pagoda.plugins import get_plugin_manager

    registry = get_plugin_manager().registry("attention")
    context = {"platform": platform(), "spec": spec(args.small, args.kv_cache_dtype)}
    names = args.backends.split(",") if args.backends else [  # on a GPU the torch reference is too slow to time
        n for n in registry.names() if not registry.reason_against(n, **context) and not (on_gpu() and n == "torch")]
    if not names:
        raise ValueError("no attention backend to time: install pagoda-attention-triton or -flash, or pass --backends")
    return dict(registry.select(name, **context) for name in names)


def paged_batch(s, seqs: list[tuple[int, int]]):
    """(query, key, value, kv cache, metadata) of ``seqs`` (query_len, seq_len), decodes first: random
    cache blocks in shuffled order, this step's tokens at the end of each sequence."""
    from pagoda.interfaces.attention import AttentionMetadata

    dev, bs = device(), s.block_size
    needed = [-(-seq_len // bs) for _, seq_len in seqs]
    pool = torch.randperm(sum(needed), device=dev).to(torch.int32)
    tables = torch.zeros(len(seqs), max(needed), dtype=torch.int32, device=dev)
    slots, start = [], 0
    for i, ((q_len, seq_len), n) in enumerate(zip(seqs, needed)):
        tables[i, :n] = pool[start : start + n]
        start += n
        pos = torch.arange(seq_len - q_len, seq_len, device=dev)
        slots.append(tables[i, pos // bs].long() * bs + pos % bs)
    q_lens = torch.tensor([q for q, _ in seqs], dtype=torch.int32, device=dev)
    tokens = int(q_lens.sum())
    metadata = AttentionMetadata(
        slot_mapping=torch.cat(slots), block_tables=tables,
        query_start_loc=torch.nn.functional.pad(torch.cumsum(q_lens, 0, dtype=torch.int32), (1, 0)),
        seq_lens=torch.tensor([n for _, n in seqs], dtype=torch.int32, device=dev),
        max_query_len=max(q for q, _ in seqs), max_seq_len=max(n for _, n in seqs),
        num_decodes=next((i for i, (q, _) in enumerate(seqs) if q != 1), len(seqs)))
    cache = torch.randn(2, sum(needed), bs, s.num_kv_heads, s.head_size, dtype=s.dtype, device=dev).to(s.cache_dtype)
    q = torch.randn(tokens, s.num_heads, s.head_size, dtype=s.dtype, device=dev)
    k, v = (torch.randn(tokens, s.num_kv_heads, s.head_size, dtype=s.dtype, device=dev) for _ in range(2))
    return q, k, v, cache, metadata


def time_backends(args, s, seqs, graphed: bool) -> dict[str, float]:
    """Microseconds of one forward of each backend over the same batch."""
    q, k, v, cache, metadata = paged_batch(s, seqs)
    us = {}
    for name, cls in backends(args).items():
        backend = cls(s, platform())
        prepared = backend.prepare(metadata)
        us[name] = time_us(lambda: backend.forward(q, k, v, cache, prepared), graphed and cls.supports_graphs)
    return us


def prefill(args, report: Report, s) -> None:
    total = 128 if args.small else PREFILL_TOKENS
    for seq in (32, 64) if args.small else (512, 1024, 2048, 4096, 8192, 16384):
        batch = max(1, total // seq)
        us = time_backends(args, s, [(seq, seq)] * batch, graphed=False)
        qs, ks, vs = (torch.randn(batch, s.num_heads, seq, s.head_size, dtype=s.dtype, device=device()) for _ in range(3))
        us["sdpa"] = time_us(lambda: sdpa(qs, ks, vs))
        if on_gpu() and (cudnn := cudnn_us(qs, ks, vs)):
            us["sdpa_cudnn"] = cudnn
        flops = 4.0 * batch * s.num_heads * s.head_size * seq * (seq + 1) / 2
        report.add(make_row({"part": "prefill", "seq": seq, "batch": batch}, us, peer="sdpa",
                            floor_us=report.rates.floor_us(flops=flops),
                            tflops={name: round(flops / t / 1e6, 1) for name, t in us.items()}))


def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, backend: str = "FLASH_ATTENTION") -> torch.Tensor:
    if not on_gpu():
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(getattr(SDPBackend, backend)):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def cudnn_us(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> float | None:
    """cuDNN's attention through SDPA, or None where this torch or GPU has none (its own warning says why)."""
    try:
        return time_us(lambda: sdpa(q, k, v, "CUDNN_ATTENTION"))
    except RuntimeError:
        return None


def streaming(args, report: Report, s, part: str, cases: list[tuple[int, int, int]]) -> None:
    """Decode or verify rows: ``cases`` of (batch, query tokens, context); floor = the KV bytes."""
    for batch, q_len, ctx in cases:
        us = time_backends(args, s, [(q_len, ctx)] * batch, graphed=True)
        kv_bytes = 2 * batch * ctx * s.num_kv_heads * s.head_size * s.cache_dtype.itemsize
        report.add(make_row({"part": part, "batch": batch, "q_len": q_len, "ctx": ctx}, us,
                            floor_us=report.rates.floor_us(nbytes=kv_bytes),
                            gbs={name: round(kv_bytes / t / 1e3) for name, t in us.items()}))
        torch.cuda.empty_cache() if on_gpu() else None


def decode_cases(small: bool) -> list[tuple[int, int, int]]:
    if small:
        return [(b, 1, ctx) for ctx in (64, 256) for b in (1, 4)]
    return [(b, 1, ctx) for ctx in (1024, 4096, 8192, 32768) for b in (1, 4, 16, 64, 256) if b * ctx <= 2**21]


def verify_cases(small: bool) -> list[tuple[int, int, int]]:
    if small:
        return [(2, 4, 64)]
    # a prompt found whole in the prefix cache recomputes its last block: 16 tokens after 1008
    return [(b, 4, ctx) for ctx in (1024, 4096) for b in (1, 16, 64)] + [(b, 16, 1024) for b in (1, 64, 256)]


def run(args: argparse.Namespace, report: Report) -> None:
    s, parts = spec(args.small, args.kv_cache_dtype), args.parts.split(",")
    torch.manual_seed(0)
    if "prefill" in parts:
        prefill(args, report, s)
    if "decode" in parts:
        streaming(args, report, s, "decode", decode_cases(args.small))
    if "verify" in parts:
        streaming(args, report, s, "verify", verify_cases(args.small))
