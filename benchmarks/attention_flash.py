"""Benchmark the ``flash`` attention backend's CUDA kernels on a GPU (writes a JSON of results).

Prefill: causal TFLOP/s, head dim 128, bf16, 32 heads, 16k tokens per batch (``16384 / seq``
prompts), our kernel over a paged cache (block 16, shuffled tables) against torch
``scaled_dot_product_attention`` with the flash backend (FlashAttention-2) on the same q/k/v laid
out contiguously, and the ``triton`` backend's kernel; each row also gives the max abs difference
from SDPA. Decode: KV bytes read per second against the measured device copy bandwidth (read +
write), 32 q / 8 kv heads, batch 1-256, context 1k-32k, timed as CUDA-graph replays (as the
engine runs decodes), with the ``triton`` decode beside it. Helpers are shared with
``attention_triton.py`` (same timing, same cache layout).

    python benchmarks/attention_flash.py --out $OUT/attention_flash.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "plugins" / "attention_flash"))
from attention_triton import BLOCK, DT, HEAD, bench, causal_flops, copy_bandwidth, paged_cache  # noqa: E402
from attention_triton import decode_case as triton_decode_case  # noqa: E402
from attention_triton import prefill_case as triton_prefill_case  # noqa: E402
from pagoda_attention_flash.plan import choose_num_splits, make_plan  # noqa: E402
from pagoda_platform_cuda.build import load_flash_extension  # noqa: E402

TOKENS = 16384
SCALE = HEAD**-0.5


def _paged_from(k: torch.Tensor, v: torch.Tensor, seq: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Cache and block table holding contiguous k/v [batch, kv_heads, seq, d] in shuffled blocks."""
    batch, kv_heads = k.shape[0], k.shape[1]
    cache, table = paged_cache([seq] * batch, kv_heads)
    pos = torch.arange(seq, device="cuda")
    slots = (table[:, pos // BLOCK].long() * BLOCK + pos % BLOCK).reshape(-1)  # [batch * seq]
    cache[0].view(-1, kv_heads, HEAD)[slots] = k.transpose(1, 2).reshape(-1, kv_heads, HEAD)
    cache[1].view(-1, kv_heads, HEAD)[slots] = v.transpose(1, 2).reshape(-1, kv_heads, HEAD)
    return cache, table


def prefill_case(kernels, seq: int, heads: int, kv_heads: int) -> dict:
    """Flash prefill (ms) of fresh prompts, and SDPA-flash (ms, MHA only) on the same data."""
    batch = max(1, TOKENS // seq)
    q = torch.randn(batch, heads, seq, HEAD, dtype=DT, device="cuda")
    k, v = (torch.randn(batch, kv_heads, seq, HEAD, dtype=DT, device="cuda") for _ in range(2))
    cache, table = _paged_from(k, v, seq)
    q_tok = q.transpose(1, 2).reshape(batch * seq, heads, HEAD).contiguous()  # [tokens, heads, d]
    seq_lens = torch.full((batch,), seq, dtype=torch.int32, device="cuda")
    qsl = torch.arange(batch + 1, dtype=torch.int32, device="cuda") * seq
    out = torch.empty_like(q_tok)
    run = lambda: kernels.flash_prefill(out, q_tok, cache, table, qsl, seq_lens, 0, SCALE, 0)  # noqa: E731
    row = dict(flash_ms=bench(run))
    if heads == kv_heads:
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            ref = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            row["sdpa_ms"] = bench(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))
        run()
        ref_tok = ref.transpose(1, 2).reshape(batch * seq, heads, HEAD)
        row["max_abs_vs_sdpa"] = float((out.float() - ref_tok.float()).abs().max())
    return row


def prefill_rows(kernels) -> list[dict]:
    rows = []
    for seq in (1024, 2048, 4096, 8192, 16384):
        flops = causal_flops(seq, 32, TOKENS)
        mha, gqa = prefill_case(kernels, seq, 32, 32), prefill_case(kernels, seq, 32, 8)
        triton_ms = triton_prefill_case(seq, 32, 32, TOKENS)
        row = dict(seq=seq, flash_mha_tflops=flops / mha["flash_ms"] / 1e9, flash_gqa4_tflops=flops / gqa["flash_ms"] / 1e9,
                   sdpa_flash_tflops=flops / mha["sdpa_ms"] / 1e9, triton_mha_tflops=flops / triton_ms / 1e9,
                   ratio_vs_sdpa=mha["sdpa_ms"] / mha["flash_ms"], max_abs_vs_sdpa=mha["max_abs_vs_sdpa"])
        rows.append(row)
        print(f"prefill seq {seq:6d}: flash {row['flash_mha_tflops']:6.1f} (gqa4 {row['flash_gqa4_tflops']:6.1f})"
              f" sdpa-flash {row['sdpa_flash_tflops']:6.1f} triton {row['triton_mha_tflops']:6.1f} TFLOP/s"
              f"  ratio {row['ratio_vs_sdpa']:.2f}  max|diff| {row['max_abs_vs_sdpa']:.1e}", flush=True)
        torch.cuda.empty_cache()
    return rows


def decode_case(kernels, batch: int, ctx: int, splits: int | None) -> tuple[float, int]:
    """Flash decode GB/s of KV read (graph replays) and the split count used."""
    heads, kv_heads = 32, 8
    cache, table = paged_cache([ctx] * batch, kv_heads)
    seq_lens = torch.full((batch,), ctx, dtype=torch.int32, device="cuda")
    q = torch.randn(batch, heads, HEAD, dtype=DT, device="cuda")
    out = torch.empty_like(q)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    n = splits or choose_num_splits(batch, heads, kv_heads, ctx, sms)
    plan = make_plan(batch, heads, HEAD, n, q.device)
    torch.cuda.synchronize()  # the graph bench runs on a side stream: inputs must be ready
    ms = bench(lambda: kernels.flash_decode(out, q, cache, table, seq_lens, batch, SCALE, 0, plan.part_out, plan.part_lse),
               graphed=True)
    return 2 * batch * ctx * kv_heads * HEAD * 2 / ms / 1e6, n


def decode_rows(kernels, copy_gbs: float) -> list[dict]:
    rows = []
    for ctx in (1024, 8192, 32768):
        for batch in (1, 4, 16, 64, 256):
            if batch * ctx > 2**21:  # keep the cache under ~8 GiB
                continue
            gbs, n = decode_case(kernels, batch, ctx, None)
            single = decode_case(kernels, batch, ctx, 1)[0] if n > 1 else gbs
            triton_gbs = triton_decode_case(batch, ctx, None)[0]
            rows.append(dict(batch=batch, ctx=ctx, splits=n, gbs=gbs, no_split_gbs=single, of_copy=gbs / copy_gbs,
                             triton_gbs=triton_gbs))
            print(f"decode b {batch:3d} ctx {ctx:5d}: flash {gbs:7.0f} GB/s ({gbs / copy_gbs:5.1%} of copy) splits {n:2d}"
                  f" | no split {single:7.0f} | triton {triton_gbs:7.0f}", flush=True)
            torch.cuda.empty_cache()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--only", choices=["prefill", "decode"], help="run one half")
    args = parser.parse_args()
    torch.manual_seed(0)
    kernels = load_flash_extension()
    copy_gbs = copy_bandwidth()
    print(f"device {torch.cuda.get_device_name()} | copy bandwidth {copy_gbs:.0f} GB/s", flush=True)
    result = dict(device=torch.cuda.get_device_name(), torch=torch.__version__, copy_gbs=copy_gbs,
                  timing="prefill: launches; decode: CUDA-graph replays")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    for part, rows in (("prefill", prefill_rows), ("decode", lambda k: decode_rows(k, copy_gbs))):
        if args.only in (None, part):
            result[part] = rows(kernels)
            args.out.write_text(json.dumps(result, indent=1))  # what finished survives a timeout


if __name__ == "__main__":
    main()
