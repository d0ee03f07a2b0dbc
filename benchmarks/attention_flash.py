"""Benchmark the ``flash`` attention kernels (csrc/attention) against ``triton`` and torch SDPA.

Llama-3.1-8B attention: 32 q heads, 8 kv heads, head dim 128, bf16, paged cache of 16-token
blocks in shuffled order. Prefill: causal TFLOP/s at 512..16k tokens per prompt (16k tokens per
batch), flash and triton over the paged cache, torch ``scaled_dot_product_attention`` with its
flash backend (FlashAttention-2 in torch) on contiguous tensors, timed launch by launch (the
engine runs prefills eagerly). Decode: KV bytes read per second at batch 1..256 and context
1k..32k against the measured device copy bandwidth (read + write), timed as CUDA-graph replays
(as the engine runs decode steps), with each backend's own split-KV choice. ``--verify``: verify
steps of speculative decoding (4-token queries) on each path, graph replays.

    python benchmarks/attention_flash.py --out benchmarks/results/attention_flash_h100.json [--quick | --verify]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
import triton
from torch.nn.attention import SDPBackend, sdpa_kernel

ROOT = Path(__file__).resolve().parents[1]
for folder in ("plugins/attention_triton", "plugins/attention_flash", "benchmarks"):
    sys.path.insert(0, str(ROOT / folder))
from attention_triton import bench, copy_bandwidth, paged_cache  # noqa: E402 - the same timing and cache as triton's benchmark
from pagoda.attention.split_kv import balance_waves, choose_num_splits, decode_scratch  # noqa: E402
from pagoda_attention_flash.backend import DECODE_ROWS  # noqa: E402
from pagoda_attention_flash.kernels import decode_programs_per_sm, extension  # noqa: E402
from pagoda_attention_triton.decode import decode_attention, short_query_attention  # noqa: E402
from pagoda_attention_triton.prefill import prefill_attention  # noqa: E402

HEADS, KV_HEADS, HEAD, BLOCK = 32, 8, 128, 16
DT = torch.bfloat16
SCALE = HEAD**-0.5


def flash_call(ext, out, q, cache, table, qsl, seq_lens, num_decodes, splits=1, scratch=None, short_query_len=0):
    part_o, part_lse = scratch if scratch is not None else (None, None)
    return lambda: ext.flash_attention(out, q, cache, table, qsl, seq_lens, num_decodes, SCALE, 0,
                                       splits if scratch is not None else 1, part_o, part_lse, short_query_len)


def split_plans(batch: int, q_len: int, ctx: int, sms: int) -> tuple:
    """(flash's splits, its scratch, triton's splits, its scratch) for ``batch`` queries of ``q_len``
    tokens at context ``ctx``: each backend's own plan (flash counts its programs of 16 rows)."""
    programs = KV_HEADS * -(-(q_len * HEADS // KV_HEADS) // DECODE_ROWS)
    n_flash = balance_waves(batch * programs, choose_num_splits(batch, programs, ctx, sms), ctx, sms,
                            decode_programs_per_sm(HEAD, DT, torch.cuda.current_device()))
    n_triton = choose_num_splits(batch, KV_HEADS, ctx, sms)
    tokens, device = batch * q_len, torch.device("cuda")
    return (n_flash, decode_scratch(tokens, HEADS, HEAD, n_flash, device), n_triton,
            decode_scratch(tokens, HEADS, HEAD, n_triton, device))


def prefill_row(ext, seq: int, tokens: int) -> dict:
    batch = max(1, tokens // seq)
    seq_lens = torch.full((batch,), seq, dtype=torch.int32, device="cuda")
    qsl = torch.arange(batch + 1, dtype=torch.int32, device="cuda") * seq
    cache, table = paged_cache([seq] * batch, KV_HEADS)
    q = torch.randn(batch * seq, HEADS, HEAD, dtype=DT, device="cuda")
    out = torch.empty_like(q)
    flops = 4.0 * batch * HEADS * HEAD * seq * (seq + 1) / 2
    ms_flash = bench(flash_call(ext, out, q, cache, table, qsl, seq_lens, 0))
    ms_triton = bench(lambda: prefill_attention(q, out, cache, table, qsl, seq_lens, 0, SCALE, None, seq))
    qs, ks, vs = (torch.randn(batch, HEADS, seq, HEAD, dtype=DT, device="cuda") for _ in range(3))
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        ms_sdpa = bench(lambda: F.scaled_dot_product_attention(qs, ks, vs, is_causal=True))
    row = dict(seq=seq, batch=batch, flash_tflops=flops / ms_flash / 1e9, triton_tflops=flops / ms_triton / 1e9,
               sdpa_flash_tflops=flops / ms_sdpa / 1e9, flash_vs_sdpa=ms_sdpa / ms_flash, flash_vs_triton=ms_triton / ms_flash)
    print(f"prefill seq {seq:6d} x {batch:3d}: flash {row['flash_tflops']:6.1f}  triton {row['triton_tflops']:6.1f}  "
          f"sdpa-flash {row['sdpa_flash_tflops']:6.1f} TFLOP/s | flash/sdpa {row['flash_vs_sdpa']:.2f}x  "
          f"flash/triton {row['flash_vs_triton']:.2f}x", flush=True)
    return row


def decode_inputs(batch: int, ctx: int) -> tuple[torch.Tensor, ...]:
    """(cache, block table, seq_lens, query_start_loc, query) of ``batch`` decodes at context ``ctx``."""
    cache, table = paged_cache([ctx] * batch, KV_HEADS)
    seq_lens = torch.full((batch,), ctx, dtype=torch.int32, device="cuda")
    qsl = torch.arange(batch + 1, dtype=torch.int32, device="cuda")
    return cache, table, seq_lens, qsl, torch.randn(batch, HEADS, HEAD, dtype=DT, device="cuda")


def decode_row(ext, batch: int, ctx: int, copy_gbs: float, sms: int) -> dict:
    cache, table, seq_lens, qsl, q = decode_inputs(batch, ctx)
    out = torch.empty_like(q)
    n_flash, s_flash, n_triton, s_triton = split_plans(batch, 1, ctx, sms)
    torch.cuda.synchronize()  # do_bench_cudagraph captures on a side stream: inputs must be ready
    ms_flash = bench(flash_call(ext, out, q, cache, table, qsl, seq_lens, batch, n_flash, s_flash), graphed=True)
    ms_triton = bench(lambda: decode_attention(q, out, cache, table, seq_lens, batch, SCALE, None, n_triton, s_triton),
                      graphed=True)
    kv_bytes = 2 * batch * ctx * KV_HEADS * HEAD * 2
    row = dict(batch=batch, ctx=ctx, flash_splits=n_flash, triton_splits=n_triton,
               flash_gbs=kv_bytes / ms_flash / 1e6, triton_gbs=kv_bytes / ms_triton / 1e6,
               flash_us=ms_flash * 1e3, triton_us=ms_triton * 1e3)
    row["flash_of_copy"] = row["flash_gbs"] / copy_gbs
    row["flash_vs_triton"] = ms_triton / ms_flash
    print(f"decode b {batch:3d} ctx {ctx:5d}: flash {row['flash_gbs']:6.0f} GB/s ({row['flash_of_copy']:5.1%} of copy, "
          f"{n_flash:2d} splits, {row['flash_us']:7.1f} us)  triton {row['triton_gbs']:6.0f} GB/s ({n_triton:2d} splits) "
          f"| flash/triton {row['flash_vs_triton']:.2f}x", flush=True)
    del cache
    torch.cuda.empty_cache()
    return row


def verify_row(ext, batch: int, ctx: int, q_len: int, sms: int) -> dict:
    """A verify step: ``batch`` queries of ``q_len`` tokens after ``ctx - q_len`` cached ones, as CUDA-graph
    replays: flash on its decode kernel (the backend's plan), flash on its prefill kernel (the path
    before short queries), triton on its short-query path (its backend's plan)."""
    cache, table = paged_cache([ctx] * batch, KV_HEADS)
    seq_lens = torch.full((batch,), ctx, dtype=torch.int32, device="cuda")
    qsl = torch.arange(batch + 1, dtype=torch.int32, device="cuda") * q_len
    q = torch.randn(batch * q_len, HEADS, HEAD, dtype=DT, device="cuda")
    out = torch.empty_like(q)
    n_flash, s_flash, n_triton, s_triton = split_plans(batch, q_len, ctx, sms)
    torch.cuda.synchronize()
    ms_short = bench(flash_call(ext, out, q, cache, table, qsl, seq_lens, 0, n_flash, s_flash, q_len), graphed=True)
    ms_prefill = bench(flash_call(ext, out, q, cache, table, qsl, seq_lens, 0), graphed=True)
    ms_triton = bench(lambda: short_query_attention(q, out, cache, table, qsl, seq_lens, 0, q_len, SCALE, None,
                                                    n_triton, s_triton), graphed=True)
    row = dict(batch=batch, ctx=ctx, q_len=q_len, flash_splits=n_flash, triton_splits=n_triton,
               flash_us=ms_short * 1e3, flash_prefill_us=ms_prefill * 1e3, triton_us=ms_triton * 1e3)
    print(f"verify b {batch:3d} x {q_len} ctx {ctx:5d}: flash decode kernel {row['flash_us']:7.1f} us ({n_flash:2d} splits)"
          f"  flash prefill kernel {row['flash_prefill_us']:7.1f} us  triton {row['triton_us']:7.1f} us "
          f"({n_triton:2d} splits) | flash/triton {ms_triton / ms_short:.2f}x", flush=True)
    del cache
    torch.cuda.empty_cache()
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--quick", action="store_true", help="fewer shapes (about a minute)")
    parser.add_argument("--verify", action="store_true",
                        help="only verify steps (4-token queries, batch 1-64; 16-token ones after 1008 cached)")
    args = parser.parse_args()
    ext, reason = extension()
    if ext is None:
        sys.exit(f"flash kernels unavailable: {reason}")
    torch.manual_seed(0)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    copy_gbs = copy_bandwidth()
    print(f"device {torch.cuda.get_device_name()} | {sms} SMs | copy bandwidth {copy_gbs:.0f} GB/s", flush=True)
    result = dict(device=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__,
                  copy_gbs=copy_gbs, shape=dict(heads=HEADS, kv_heads=KV_HEADS, head=HEAD, block=BLOCK, dtype="bf16"),
                  timing="prefill: launches; decode: CUDA-graph replays")
    if args.verify:
        result["verify"] = [verify_row(ext, b, ctx, 4, sms) for ctx in (1024, 4096) for b in (1, 16, 64)]
        # a prompt found whole in the prefix cache recomputes its last block (16 tokens after 1008)
        result["verify"] += [verify_row(ext, b, 1024, 16, sms) for b in (1, 64, 256)]
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1))
        return
    seqs = (512, 2048, 8192, 16384) if args.quick else (512, 1024, 2048, 4096, 8192, 16384)
    result["prefill"] = [prefill_row(ext, seq, 16384) for seq in seqs]
    rows = []
    for ctx in (1024, 4096, 8192, 32768) if not args.quick else (1024, 8192, 32768):
        for batch in (1, 4, 16, 64, 256) if not args.quick else (1, 16, 256):
            if batch * ctx <= 2**21:  # cache under ~8 GiB
                rows.append(decode_row(ext, batch, ctx, copy_gbs, sms))
    result["decode"] = rows
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
