"""Benchmark the ``triton`` attention backend's kernels on a GPU (writes a JSON of results).

Prefill: causal attention TFLOP/s over the paged cache (block 16, shuffled tables) against torch
``scaled_dot_product_attention`` with the flash backend on contiguous tensors, head dim 128,
bf16, 16k tokens per batch. Decode: KV bytes read per second against the measured device copy
bandwidth (bytes read + written), 32 q / 8 kv heads, batch 1-256, context 512-32k. Prefill is
timed launch by launch (the engine runs prefills eagerly), decode as CUDA-graph replays (the
engine replays decode steps from graphs, so launch overhead is not part of them).

    python benchmarks/attention_triton.py --out benchmarks/results/attention_triton_h100.json
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "plugins" / "attention_triton"))
from pagoda_attention_triton.decode import decode_attention, decode_scratch  # noqa: E402
from pagoda_attention_triton.plan import choose_num_splits  # noqa: E402
from pagoda_attention_triton.prefill import prefill_attention, prefill_config  # noqa: E402

HEAD, BLOCK = 128, 16
DT = torch.bfloat16


def bench(fn, graphed: bool = False) -> float:
    """Median milliseconds (CUDA events, after warm-up); ``graphed``: replays of a CUDA graph of
    ``fn``, as the engine runs decode steps (no launch overhead)."""
    if graphed:
        return triton.testing.do_bench_cudagraph(fn, rep=100, return_mode="median")
    return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")


def copy_bandwidth() -> float:
    """Device-to-device copy, bytes read + written per second (GB/s), 2 GiB buffers."""
    src = torch.randn(2**29, device="cuda")  # 2 GiB of fp32
    dst = torch.empty_like(src)
    ms = bench(lambda: dst.copy_(src))
    return 2 * src.numel() * 4 / ms / 1e6


def paged_cache(seq_lens: list[int], kv_heads: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A random bf16 cache holding ``seq_lens`` tokens in shuffled blocks, and its block table."""
    blocks = [-(-n // BLOCK) for n in seq_lens]
    perm = torch.randperm(sum(blocks), device="cuda").to(torch.int32)
    table = torch.zeros(len(seq_lens), max(blocks), dtype=torch.int32, device="cuda")
    start = 0
    for i, n in enumerate(blocks):
        table[i, :n] = perm[start : start + n]
        start += n
    cache = torch.randn(2, sum(blocks), BLOCK, kv_heads, HEAD, dtype=DT, device="cuda")
    return cache, table


def prefill_case(seq: int, heads: int, kv_heads: int, tokens: int = 16384, config=None) -> float:
    """Triton prefill milliseconds for ``tokens // seq`` fresh prompts of ``seq`` tokens."""
    batch = max(1, tokens // seq)
    seq_lens = torch.full((batch,), seq, dtype=torch.int32, device="cuda")
    qsl = torch.arange(batch + 1, dtype=torch.int32, device="cuda") * seq
    cache, table = paged_cache([seq] * batch, kv_heads)
    q = torch.randn(batch * seq, heads, HEAD, dtype=DT, device="cuda")
    out = torch.empty_like(q)
    return bench(lambda: prefill_attention(q, out, cache, table, qsl, seq_lens, 0, HEAD**-0.5, None, seq, config))


def sdpa_case(seq: int, heads: int, tokens: int = 16384) -> float:
    batch = max(1, tokens // seq)
    q, k, v = (torch.randn(batch, heads, seq, HEAD, dtype=DT, device="cuda") for _ in range(3))
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        return bench(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))


def causal_flops(seq: int, heads: int, tokens: int = 16384) -> float:
    batch = max(1, tokens // seq)
    return 4.0 * batch * heads * HEAD * seq * (seq + 1) / 2


def prefill_rows() -> list[dict]:
    rows = []
    small, large = prefill_config(HEAD, 1, 1), prefill_config(HEAD, 1, 1 << 30)
    for seq in (512, 1024, 2048, 4096, 8192, 16384):
        flops = causal_flops(seq, 32)
        ours, ours_gqa, ref = prefill_case(seq, 32, 32), prefill_case(seq, 32, 8), sdpa_case(seq, 32)
        other = prefill_case(seq, 32, 32, config=large if prefill_config(HEAD, 1, seq) == small else small)
        rows.append(dict(
            seq=seq, triton_mha_tflops=flops / ours / 1e9, triton_gqa4_tflops=flops / ours_gqa / 1e9,
            sdpa_flash_tflops=flops / ref / 1e9, ratio_mha=ref / ours, other_tile_tflops=flops / other / 1e9,
            tile=prefill_config(HEAD, 1, seq),
        ))
        print(f"prefill seq {seq:6d}: triton {rows[-1]['triton_mha_tflops']:6.1f} (gqa4 {rows[-1]['triton_gqa4_tflops']:6.1f},"
              f" other tile {rows[-1]['other_tile_tflops']:6.1f}) sdpa-flash {rows[-1]['sdpa_flash_tflops']:6.1f} TFLOP/s"
              f"  ratio {rows[-1]['ratio_mha']:.2f}", flush=True)
    return rows


def prefill_sweep(seq: int = 4096) -> list[dict]:
    """A few tile shapes at one size, to see how far the default is from the best."""
    rows = []
    for bq, bn, w, s in ((128, 32, 4, 3), (128, 64, 4, 3), (128, 64, 8, 2), (128, 32, 8, 3), (64, 32, 4, 3), (64, 64, 4, 3)):
        cfg = dict(BLOCK_Q=bq, BLOCK_N=bn, num_warps=w, num_stages=s)
        try:
            tflops = causal_flops(seq, 32) / prefill_case(seq, 32, 32, config=cfg) / 1e9
        except Exception as exc:  # out of shared memory for a shape, say
            tflops = float("nan")
            print("config", cfg, "failed:", type(exc).__name__)
        rows.append(dict(cfg, seq=seq, tflops=tflops))
        print(f"prefill sweep {cfg}: {tflops:6.1f} TFLOP/s", flush=True)
    return rows


def decode_case(batch: int, ctx: int, splits: int | None, config=None) -> tuple[float, int]:
    heads, kv_heads = 32, 8
    cache, table = paged_cache([ctx] * batch, kv_heads)
    seq_lens = torch.full((batch,), ctx, dtype=torch.int32, device="cuda")
    q = torch.randn(batch, heads, HEAD, dtype=DT, device="cuda")
    out = torch.empty_like(q)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    n = splits or choose_num_splits(batch, kv_heads, ctx, sms)
    scratch = decode_scratch(batch, heads, HEAD, n, q.device)
    torch.cuda.synchronize()  # do_bench_cudagraph runs on a side stream: the inputs must be ready
    ms = bench(lambda: decode_attention(q, out, cache, table, seq_lens, batch, HEAD**-0.5, None, n, scratch, config),
               graphed=True)
    kv_bytes = 2 * batch * ctx * kv_heads * HEAD * 2
    return kv_bytes / ms / 1e6, n  # GB/s


def decode_rows(copy_gbs: float) -> list[dict]:
    rows = []
    for ctx in (512, 2048, 8192, 32768):
        for batch in (1, 4, 16, 64, 256):
            if batch * ctx > 2**21:  # keep the cache under ~8 GiB
                continue
            gbs, n = decode_case(batch, ctx, None)
            single = decode_case(batch, ctx, 1)[0] if n > 1 else gbs
            rows.append(dict(batch=batch, ctx=ctx, splits=n, gbs=gbs, no_split_gbs=single, of_copy=gbs / copy_gbs))
            print(f"decode b {batch:3d} ctx {ctx:5d}: {gbs:7.0f} GB/s ({gbs / copy_gbs:5.1%} of copy) splits {n:2d}"
                  f" | no split {single:7.0f}", flush=True)
            torch.cuda.empty_cache()
    return rows


def decode_sweep() -> list[dict]:
    rows = []
    for bn, w, s in ((64, 4, 3), (128, 4, 3), (64, 4, 4), (32, 4, 4)):
        cfg = dict(BLOCK_N=bn, num_warps=w, num_stages=s)
        gbs = decode_case(64, 32768, None, cfg)[0]
        rows.append(dict(cfg, batch=64, ctx=32768, gbs=gbs))
        print(f"decode sweep {cfg}: {gbs:7.0f} GB/s", flush=True)
    return rows


def focus_sweep() -> list[dict]:
    """Decode tile shapes around the default for the weakest point: batch 1 at 32k."""
    rows = []
    for splits, bn, w, st in ((32, 128, 4, 4), (32, 128, 4, 5), (32, 128, 2, 4), (32, 256, 8, 3), (16, 256, 8, 3),
                              (16, 128, 4, 4), (64, 64, 4, 2), (32, 64, 4, 4)):
        cfg = dict(BLOCK_N=bn, num_warps=w, num_stages=st)
        try:
            gbs = decode_case(1, 32768, splits, cfg)[0]
        except Exception as exc:
            gbs = float("nan")
            print("config", cfg, "failed:", type(exc).__name__)
        rows.append(dict(cfg, splits=splits, batch=1, ctx=32768, gbs=gbs))
        print(f"focus decode b1 32k splits {splits} {cfg}: {gbs:7.0f} GB/s", flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--sweep", action="store_true", help="also try a few tile configurations")
    parser.add_argument("--focus", action="store_true", help="also sweep decode tiles at batch 1, 32k")
    args = parser.parse_args()
    torch.manual_seed(0)
    copy_gbs = copy_bandwidth()
    print(f"device {torch.cuda.get_device_name()} | copy bandwidth {copy_gbs:.0f} GB/s", flush=True)
    result = dict(device=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__,
                  copy_gbs=copy_gbs, timing="prefill: launches; decode: CUDA-graph replays")
    result["prefill"] = prefill_rows()
    result["decode"] = decode_rows(copy_gbs)
    if args.sweep:
        result["prefill_sweep"] = prefill_sweep()
        result["decode_sweep"] = decode_sweep()
    if args.focus:
        result["focus"] = focus_sweep()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
