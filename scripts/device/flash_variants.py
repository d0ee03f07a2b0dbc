"""Flash prefill TFLOP/s per kernel variant, each timed in its own process next to torch SDPA's flash
backend (same shapes as benchmarks/attention_flash.py: Llama-3.1-8B attention, causal, bf16, 16k
tokens per batch, paged cache of 16-token blocks). The variants are run-time switches of one build,
read once per process by csrc/attention/flash_prefill.cu:

    skip-rescale   PAGODA_FLASH_SKIP_RESCALE=1 (default): the output is not rescaled at a key tile
                   where no row's running max grew (a warp vote)
    always-rescale PAGODA_FLASH_SKIP_RESCALE=0: rescaled at every key tile

    python3 scripts/device/flash_variants.py --out $OUT/flash_variants.json
    python3 scripts/device/flash_variants.py --profile   # three 16k-token launches, for ncu
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VARIANTS = {"skip-rescale": {"PAGODA_FLASH_SKIP_RESCALE": "1"}, "always-rescale": {"PAGODA_FLASH_SKIP_RESCALE": "0"}}
SEQS = (1024, 2048, 4096, 8192, 16384)


def bench_module():
    """benchmarks/attention_flash.py (its shapes, paged cache and timing), imported by path."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import attention_flash

    return attention_flash


def time_rows(seqs) -> list[dict]:
    """flash and SDPA-flash TFLOP/s at each prompt length (this process's variant)."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    b = bench_module()
    ext, reason = b.extension()
    if ext is None:
        sys.exit(f"flash kernels unavailable: {reason}")
    torch.manual_seed(0)
    rows = []
    for seq in seqs:
        batch = max(1, 16384 // seq)
        seq_lens = torch.full((batch,), seq, dtype=torch.int32, device="cuda")
        qsl = torch.arange(batch + 1, dtype=torch.int32, device="cuda") * seq
        cache, table = b.paged_cache([seq] * batch, b.KV_HEADS)
        q = torch.randn(batch * seq, b.HEADS, b.HEAD, dtype=b.DT, device="cuda")
        out = torch.empty_like(q)
        flops = 4.0 * batch * b.HEADS * b.HEAD * seq * (seq + 1) / 2
        ms_flash = b.bench(b.flash_call(ext, out, q, cache, table, qsl, seq_lens, 0))
        qs, ks, vs = (torch.randn(batch, b.HEADS, seq, b.HEAD, dtype=b.DT, device="cuda") for _ in range(3))
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            ms_sdpa = b.bench(lambda: F.scaled_dot_product_attention(qs, ks, vs, is_causal=True))
        rows.append(dict(seq=seq, batch=batch, flash_tflops=flops / ms_flash / 1e9,
                         sdpa_flash_tflops=flops / ms_sdpa / 1e9, flash_vs_sdpa=ms_sdpa / ms_flash))
        del cache, qs, ks, vs
        torch.cuda.empty_cache()
    return rows


def profile_case() -> None:
    """Three launches of one 16k-token prefill (ncu profiles the last: --launch-skip 2)."""
    import torch

    b = bench_module()
    ext, reason = b.extension()
    if ext is None:
        sys.exit(f"flash kernels unavailable: {reason}")
    seq = 16384
    cache, table = b.paged_cache([seq], b.KV_HEADS)
    q = torch.randn(seq, b.HEADS, b.HEAD, dtype=b.DT, device="cuda")
    call = b.flash_call(ext, torch.empty_like(q), q, cache, table,
                        torch.tensor([0, seq], dtype=torch.int32, device="cuda"),
                        torch.tensor([seq], dtype=torch.int32, device="cuda"), 0)
    for _ in range(3):
        call()
    torch.cuda.synchronize()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--child", action="store_true", help="time this process's variant, print JSON rows")
    parser.add_argument("--profile", action="store_true", help=profile_case.__doc__)
    args = parser.parse_args()
    if args.profile:
        return profile_case()
    if args.child:
        print(json.dumps(time_rows(SEQS)))
        return None
    result = {}
    for name, env in VARIANTS.items():
        proc = subprocess.run([sys.executable, __file__, "--child"], env={**os.environ, **env}, capture_output=True,
                              text=True, timeout=240)
        if proc.returncode != 0:
            print(f"{name}: failed\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}", flush=True)
            continue
        result[name] = json.loads(proc.stdout.strip().splitlines()[-1])
        for row in result[name]:
            print(f"variant {name:15s} seq {row['seq']:6d}: flash {row['flash_tflops']:6.1f}  sdpa-flash "
                  f"{row['sdpa_flash_tflops']:6.1f} TFLOP/s | flash/sdpa {row['flash_vs_sdpa']:.2f}x", flush=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1))
    return None


if __name__ == "__main__":
    main()
