"""Time the csrc kernels against the torch reference ops at Llama-3-8B shapes (bf16).

Prints one row per op and batch: median microseconds of each, the speed-up, and the kernel's
achieved bandwidth (bytes each op must move / time) against a measured device copy.
Usage: python bench_kernels.py [--tokens 8192 256] [--out FILE]
"""

from __future__ import annotations

import argparse
from typing import Callable

import torch
from triton.testing import do_bench

from pagoda.interfaces.ops import CustomOps
from pagoda_platform_cuda.build import load_extension
from pagoda_platform_cuda.ops import CudaOps

HIDDEN, INTER, HEADS, KV_HEADS, HEAD = 4096, 14336, 32, 8, 128
DT = torch.bfloat16


def copy_bandwidth() -> float:
    """Bytes read + written per second by a 1 GiB device-to-device copy."""
    src = torch.randn(1 << 28, device="cuda")
    dst = torch.empty_like(src)
    ms = do_bench(lambda: dst.copy_(src), warmup=50, rep=200, return_mode="median")
    return 2 * src.numel() * 4 / (ms * 1e-3)


def cases(t: int) -> list[tuple[str, int, Callable[[CustomOps], Callable[[], object]]]]:
    """(name, bytes moved, ops -> thunk) for each op with ``t`` tokens."""
    x, res = (torch.randn(t, HIDDEN, device="cuda", dtype=DT) for _ in range(2))
    w = torch.randn(HIDDEN, device="cuda", dtype=DT)
    gate_up = torch.randn(t, 2 * INTER, device="cuda", dtype=DT)
    qkv = torch.randn(t, (HEADS + 2 * KV_HEADS) * HEAD, device="cuda", dtype=DT)
    q, k, v = qkv.split([HEADS * HEAD, KV_HEADS * HEAD, KV_HEADS * HEAD], dim=-1)
    pos = torch.randint(0, 8192, (t,), device="cuda")
    inv = 1.0 / 500000 ** (torch.arange(0, HEAD, 2, device="cuda") / HEAD)
    ang = torch.arange(8192, device="cuda")[:, None].float() * inv
    cache = torch.cat((ang.cos(), ang.sin()), -1)
    blocks = t // 16 + 64
    kv_cache = torch.randn(2, blocks, 16, KV_HEADS, HEAD, device="cuda", dtype=DT)
    slots = torch.randperm(blocks * 16, device="cuda")[:t]
    kk, vv = k.view(t, KV_HEADS, HEAD), v.view(t, KV_HEADS, HEAD)
    e = 2  # bytes per element
    return [
        ("rms_norm", 2 * t * HIDDEN * e, lambda o: lambda: o.rms_norm(x, w, 1e-5)),
        ("fused_add_rms_norm", 4 * t * HIDDEN * e, lambda o: lambda: o.fused_add_rms_norm(x, res, w, 1e-5)),
        ("rotary_embedding", 2 * t * (HEADS + KV_HEADS) * HEAD * e, lambda o: lambda: o.rotary_embedding(pos, q, k, HEAD, cache, True)),
        ("silu_and_mul", 3 * t * INTER * e, lambda o: lambda: o.silu_and_mul(gate_up)),
        ("reshape_and_cache", 4 * t * KV_HEADS * HEAD * e, lambda o: lambda: o.reshape_and_cache(kk, vv, kv_cache, slots)),
    ]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", type=int, nargs="+", default=[8192, 256])
    parser.add_argument("--out")
    args = parser.parse_args()
    torch.manual_seed(0)
    ref, fast = CustomOps(), CudaOps(load_extension())
    peak = copy_bandwidth()
    lines = [f"# {torch.cuda.get_device_name()} | torch {torch.__version__} | bf16, Llama-3-8B shapes | "
             f"device copy {peak / 1e12:.2f} TB/s (read + write)",
             f"{'op':<20}{'tokens':>7}{'torch us':>11}{'cuda us':>10}{'speed-up':>10}{'cuda TB/s':>11}{'of copy':>9}"]
    for t in args.tokens:
        for name, nbytes, make in cases(t):
            t_ref = do_bench(make(ref), warmup=25, rep=100, return_mode="median") * 1e3
            t_fast = do_bench(make(fast), warmup=25, rep=100, return_mode="median") * 1e3
            bw = nbytes / (t_fast * 1e-6)
            lines.append(f"{name:<20}{t:>7}{t_ref:>11.1f}{t_fast:>10.1f}{t_ref / t_fast:>9.1f}x{bw / 1e12:>11.2f}{bw / peak:>8.0%}")
    text = "\n".join(lines)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
