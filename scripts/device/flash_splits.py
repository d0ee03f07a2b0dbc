"""Flash decode KV bandwidth against the split count, at the shapes that miss 85% of copy
(Llama-3.1-8B attention, bf16, CUDA-graph replays; benchmarks/attention_flash.py's cache and timing):

    python3 scripts/device/flash_splits.py --out $OUT/flash_splits.json

Prints one line per (batch, context, splits) with GB/s and the share of the copy bandwidth, and
triton at its own split choice for reference.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
from attention_flash import HEAD, HEADS, KV_HEADS, SCALE, DT, bench, copy_bandwidth, decode_inputs, flash_call  # noqa: E402
from pagoda_attention_triton.decode import decode_attention  # noqa: E402
from pagoda.attention.split_kv import balance_waves, choose_num_splits, decode_scratch  # noqa: E402
from pagoda_attention_flash.kernels import decode_programs_per_sm, extension  # noqa: E402

CASES = {  # (batch, context): split counts to try
    (1, 32768): (16, 24, 32, 48, 64),
    (1, 16384): (8, 16, 32, 48),
    (4, 32768): (8, 16, 24),
    (64, 1024): (1, 2, 3),
    (64, 4096): (1, 2, 3),
    (64, 8192): (1, 3),
    (32, 8192): (1, 2, 3),
}
SHORT_CASES = {  # --short: the pure-decode steps of a serving run (contexts of a few hundred tokens)
    (32, 256): (1,),
    (128, 256): (1,),
    (256, 256): (1,),
    (128, 512): (1,),
    (64, 1024): (1,),
}


def launch_once(ext, batch: int, ctx: int, splits: int) -> None:
    cache, table, seq_lens, qsl, q = decode_inputs(batch, ctx)
    call = flash_call(ext, torch.empty_like(q), q, cache, table, qsl, seq_lens, batch, splits,
                      decode_scratch(batch, HEADS, HEAD, splits, q.device))
    for _ in range(3):
        call()
    torch.cuda.synchronize()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--batches", type=int, nargs="+", help="only the cases of these batch sizes")
    parser.add_argument("--short", action="store_true", help="short contexts (256-1024) at batch 32-256 instead")
    parser.add_argument("--once", type=int, nargs=3, metavar=("BATCH", "CTX", "SPLITS"),
                        help="only launch flash 3 times at one shape (for ncu)")
    args = parser.parse_args()
    ext, reason = extension()
    if ext is None:
        sys.exit(f"flash kernels unavailable: {reason}")
    if args.once:
        return launch_once(ext, *args.once)
    copy_gbs = copy_bandwidth()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    print(f"{torch.cuda.get_device_name()} | copy {copy_gbs:.0f} GB/s", flush=True)
    rows = []
    for (batch, ctx), splits in (SHORT_CASES if args.short else CASES).items():
        if args.batches and batch not in args.batches:
            continue
        cache, table, seq_lens, qsl, q = decode_inputs(batch, ctx)
        out = torch.empty_like(q)
        kv_bytes = 2 * batch * ctx * KV_HEADS * HEAD * 2
        n_triton = choose_num_splits(batch, KV_HEADS, ctx, sms)
        s_triton = decode_scratch(batch, HEADS, HEAD, n_triton, q.device)
        torch.cuda.synchronize()
        ms = bench(lambda: decode_attention(q, out, cache, table, seq_lens, batch, SCALE, None, n_triton, s_triton),
                   graphed=True)
        rows.append(dict(batch=batch, ctx=ctx, backend="triton", splits=n_triton, gbs=kv_bytes / ms / 1e6, us=ms * 1e3))
        for n in splits:
            scratch = decode_scratch(batch, HEADS, HEAD, n, q.device)
            torch.cuda.synchronize()
            ms = bench(flash_call(ext, out, q, cache, table, qsl, seq_lens, batch, n, scratch), graphed=True)
            rows.append(dict(batch=batch, ctx=ctx, backend="flash", splits=n, gbs=kv_bytes / ms / 1e6, us=ms * 1e3))
        plan = balance_waves(batch * KV_HEADS, choose_num_splits(batch, KV_HEADS, ctx, sms), ctx, sms,
                             decode_programs_per_sm(HEAD, DT, torch.cuda.current_device()))
        print(f"b {batch:3d} ctx {ctx:5d}: the flash backend plans {plan} splits", flush=True)
        for row in rows[-len(splits) - 1 :]:
            row["of_copy"] = row["gbs"] / copy_gbs
            row["planned"] = row["backend"] == "flash" and row["splits"] == plan
            print(f"b {batch:3d} ctx {ctx:5d} {row['backend']:6s} splits {row['splits']:3d}: {row['gbs']:6.0f} GB/s "
                  f"({row['of_copy']:.1%} of copy, {row['us']:.1f} us)", flush=True)
        del cache
        torch.cuda.empty_cache()
    args.out.write_text(json.dumps(dict(device=torch.cuda.get_device_name(), copy_gbs=copy_gbs, rows=rows), indent=1))


if __name__ == "__main__":
    main()
