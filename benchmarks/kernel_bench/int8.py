"""INT8 W8A8 linear layers against bf16 (``F.linear``) at Llama-3.1-8B's projections, M = 1..8192 tokens.

Implementations: ``bf16`` (the peer); ``int8_triton`` (the Triton GEMM: int8 dots, the scales in its
epilogue; the engine's on a GPU); ``int8_int_mm`` (``torch._int_mm`` into int32, then the scales in torch);
``int8_linear`` (the whole layer on a bf16 input: per-token quantization, then the Triton GEMM);
``quant`` (the activation quantization alone). For the layers whose input another op makes (qkv and
gate_up: residual add + RMSNorm; down: SiLU-and-mul), ``block_speedup`` is (bf16 producer + bf16 matmul)
/ (fused INT8 producer + INT8 matmul): what the engine sees. CUDA-graph replays; the floor is the FLOPs at
the bf16 matmul rate (int8 tensor cores run at twice it). ``--small`` runs a CPU smoke case
(``torch._int_mm`` against ``F.linear``). Needs pagoda-quant-fp8.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F

from benchmarks.kernel_bench import fp8
from benchmarks.kernel_bench.fp8 import SHAPES, timed
from benchmarks.kernel_bench.report import Report, make_row
from benchmarks.kernel_bench.timing import device, on_gpu

TIMING = "CUDA-graph replays, median"


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tokens", default="1,16,64,256,1024,4096,8192", help="comma-separated M (default %(default)s)")


def unavailable(args: argparse.Namespace) -> str | None:
    if not on_gpu() and not args.small:
        return "needs a CUDA GPU (compute capability >= 8.0), or --small for a CPU smoke run"
    if on_gpu() and torch.cuda.get_device_capability() < (8, 0):
        return f"needs compute capability >= 8.0 (this GPU: {torch.cuda.get_device_capability()})"
    try:
        import pagoda_quant_fp8  # noqa: F401
    except ImportError as exc:
        return f"needs pagoda-quant-fp8 (pip install ./plugins/quant_fp8): {exc}"
    return None


def int8_layer(k: int, n: int, w: torch.Tensor):
    from pagoda.layers.linear import Linear
    from pagoda_quant_fp8.int8_method import Int8Method

    with torch.device(device()):
        layer = Linear(k, n, bias=False, quant_method=Int8Method(None), dtype=w.dtype)
    layer.weight.data.copy_(w)
    layer.process_weights_after_loading()  # on a GPU: the Triton kernels; on a CPU: torch._int_mm
    return layer


def matmul_calls(x: torch.Tensor, w: torch.Tensor, layer) -> dict:
    from pagoda_quant_fp8.int8_math import quantize_per_row
    from pagoda_quant_fp8.int8_method import int_mm

    xq, xs = quantize_per_row(x)
    wq, ws = layer.weight, layer.weight_scale  # [n, k] int8, [1, n]
    calls = {"bf16": lambda: F.linear(x, w), "int8_int_mm": lambda: int_mm(xq, xs, wq, ws, x.dtype),
             "int8_linear": lambda: layer(x), "quant": lambda: layer.input_quantizer.quantize(x)}
    if on_gpu():
        from pagoda_quant_fp8.triton_int8 import int8_scaled_mm

        calls["int8_triton"] = lambda: int8_scaled_mm(xq, xs, wq, ws, x.dtype)
    return calls


def block_speedup(layer_name: str, m: int, k: int, layer, bf16_us: float) -> dict:
    """The input's producer in bf16 and fused with the INT8 quantization, and the producer + layer speedup."""
    return fp8.block_speedup(layer_name, m, k, layer, bf16_us, label="int8_fused") if on_gpu() else {}


def run(args: argparse.Namespace, report: Report) -> None:
    torch.backends.cuda.matmul.allow_tf32 = False
    dtype = torch.bfloat16 if on_gpu() else torch.float32
    shapes = {"o": (256, 128)} if args.small and not on_gpu() else ({"o": SHAPES["o"]} if args.small else SHAPES)
    tokens = "1,17,64" if args.small and not on_gpu() else args.tokens
    for name, (k, n) in shapes.items():
        w = torch.randn(n, k, device=device(), dtype=dtype) * 0.02
        layer = int8_layer(k, n, w)
        for m in (int(t) for t in tokens.split(",")):
            x = torch.randn(m, k, device=device(), dtype=dtype)
            us = timed(matmul_calls(x, w, layer))
            report.add(make_row({"layer": name, "m": m, "k": k, "n": n}, us, peer="bf16",
                                floor_us=report.rates.floor_us(flops=2 * m * n * k),
                                **block_speedup(name, m, k, layer, us["bf16"])))
