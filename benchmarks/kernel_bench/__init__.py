"""Kernel benchmarks: one module per kernel family, one command, one result schema.

    python -m benchmarks.kernel_bench --list
    python -m benchmarks.kernel_bench NAME [--out FILE.json] [--small] [family flags]   (NAME --help for them)

Each family times Pagoda's kernels against a peer (cuBLAS, torch SDPA, torch ops) and the device's
roofline (benchmarks/kernel_bench/report.py describes the JSON). GPU figures need the plugins a family
names (``pip install ./plugins/platform_cuda`` and so on); ``--small`` runs a CPU-sized smoke case
where the family has a CPU path.
"""

from __future__ import annotations

# name -> one line; each is the module benchmarks.kernel_bench.NAME
FAMILIES = {
    "gemm": "bf16 GEMM paths (cuBLAS, cuBLASLt, Inductor max-autotune) at Llama-3.1-8B shapes vs the floor",
    "gemv": "dense GEMV (csrc, 1-4 tokens) vs cuBLAS at Llama-3.1-8B / 3.2-1B shapes",
    "attention": "paged attention backends: prefill vs torch SDPA, decode and verify steps vs the copy floor",
    "moe": "fused MoE Triton kernel vs the per-expert torch reference at Mixtral shapes",
    "awq": "AWQ int4 linear kernels (tiles, GEMV, Triton, dequant) vs the bf16 matmul",
    "fp8": "FP8 linear (per-token quant + scaled matmul, fused producers) vs the bf16 matmul",
    "int8": "INT8 W8A8 linear (per-token quant + int8 GEMM, fused producers) vs the bf16 matmul",
    "lora": "LoRA decode adds (Triton BGMV) on a Llama-3.1-8B layer, 1 and 8 adapters, vs the layer's matmuls",
    "sampler": "greedy argmax and sampled steps (temperature, top-k, top-p) over a 128k vocabulary",
}
