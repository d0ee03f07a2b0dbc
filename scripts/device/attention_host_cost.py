"""Host time of one attention layer call (``prepare`` once, then ``forward`` N times without a sync)
for the flash and triton backends: Llama-3.1-8B heads, bf16, a pure-decode step of 32 sequences
and a mixed step (32 decodes + one 256-token chunk), as eager engine steps run them. Prints
microseconds a call and, for each backend, the top functions of a cProfile of the decode case.

    python3 scripts/device/attention_host_cost.py [--calls 2000]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time

import torch

from pagoda.attention.testing import make_batch
from pagoda.interfaces.attention import AttentionSpec
from pagoda_platform_cuda.platform import CudaPlatform

SPEC = AttentionSpec(32, 8, 128, 128**-0.5, 16, torch.bfloat16)
CASES = {"decode32": [(1, 1024)] * 32, "mixed": [(1, 1024)] * 32 + [(256, 768)]}


def backend_of(name: str):
    if name == "flash":
        from pagoda_attention_flash.backend import FlashAttentionBackend as cls
    else:
        from pagoda_attention_triton.backend import TritonAttentionBackend as cls
    return cls(SPEC, CudaPlatform())


def host_us(backend, batch, calls: int) -> float:
    meta = backend.prepare(batch.metadata)
    args = (batch.query, batch.key, batch.value, batch.kv_cache, meta)
    for _ in range(20):
        backend.forward(*args)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        backend.forward(*args)
    host = time.perf_counter() - start
    torch.cuda.synchronize()
    return host / calls * 1e6


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=2000)
    args = p.parse_args()
    for name in ("flash", "triton"):
        backend = backend_of(name)
        for case, seqs in CASES.items():
            batch = make_batch(SPEC, seqs, "cuda", seed=1)
            print(f"{name:6s} {case:8s}: {host_us(backend, batch, args.calls):6.1f} us host a layer call", flush=True)
        batch = make_batch(SPEC, CASES["decode32"], "cuda", seed=1)
        meta = backend.prepare(batch.metadata)
        profile = cProfile.Profile()
        profile.enable()
        for _ in range(500):
            backend.forward(batch.query, batch.key, batch.value, batch.kv_cache, meta)
        profile.disable()
        torch.cuda.synchronize()
        pstats.Stats(profile).sort_stats("tottime").print_stats(8)


if __name__ == "__main__":
    main()
