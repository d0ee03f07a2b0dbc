"""FP8 linear layers against bf16 (``F.linear``) at Llama-3.1-8B's projections, M = 1..8192 tokens.

Implementations: ``bf16`` (the peer); ``fp8_mm_tensor`` / ``fp8_mm_row`` (``torch._scaled_mm`` alone,
tensor-wise / row-wise scales; ``fp8_mm_row_fast``: fast accumulation, the engine's default);
``fp8_linear`` (the whole layer on a bf16 input: per-token quantization, then the row-wise matmul);
``quant`` (the activation quantization alone). For the layers whose input another op makes (qkv and
gate_up: residual add + RMSNorm; down: SiLU-and-mul), ``block_speedup`` is (bf16 producer + bf16
matmul) / (fused FP8 producer + FP8 matmul): what the engine sees. CUDA-graph replays; the floor is
the FLOPs at the bf16 matmul rate. Needs compute capability >= 8.9 and pagoda-quant-fp8.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F

from benchmarks.kernel_bench.report import Report, make_row
from benchmarks.kernel_bench.timing import on_gpu, time_us

TIMING = "CUDA-graph replays, median"
SHAPES = {"qkv": (4096, 6144), "o": (4096, 4096), "gate_up": (4096, 28672), "down": (14336, 4096)}  # (k, n)
PRODUCERS = {"qkv": "norm", "gate_up": "norm", "down": "silu"}


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tokens", default="1,16,64,256,1024,4096,8192", help="comma-separated M (default %(default)s)")


def unavailable(args: argparse.Namespace) -> str | None:
    if not on_gpu():
        return "needs a CUDA GPU of compute capability >= 8.9"
    if torch.cuda.get_device_capability() < (8, 9):
        return f"needs compute capability >= 8.9 (this GPU: {torch.cuda.get_device_capability()})"
    try:
        import pagoda_quant_fp8  # noqa: F401
    except ImportError as exc:
        return f"needs pagoda-quant-fp8 (pip install ./plugins/quant_fp8): {exc}"
    return None


def fp8_layer(k: int, n: int, w: torch.Tensor):
    from pagoda.layers.linear import Linear
    from pagoda_quant_fp8.method import Fp8Method

    with torch.device("cuda"):
        layer = Linear(k, n, bias=False, quant_method=Fp8Method(None), dtype=torch.bfloat16)
    layer.weight.data.copy_(w)
    layer.process_weights_after_loading()
    return layer


def matmul_calls(x: torch.Tensor, w: torch.Tensor, layer) -> dict:
    from pagoda_quant_fp8.fp8_math import quantize_per_row

    xq, xs = quantize_per_row(x)
    wq, ws = layer.weight, layer.weight_scale  # [n, k] fp8, [1, n]
    xs_t, ws_t = xs.max().reshape(()), ws.max().reshape(())
    mm = lambda a, b, **kw: torch._scaled_mm(xq, wq.t(), scale_a=a, scale_b=b, out_dtype=torch.bfloat16, **kw)  # noqa: E731
    return {"bf16": lambda: F.linear(x, w), "fp8_mm_tensor": lambda: mm(xs_t, ws_t), "fp8_mm_row": lambda: mm(xs, ws),
            "fp8_mm_row_fast": lambda: mm(xs, ws, use_fast_accum=True), "fp8_linear": lambda: layer(x),
            "quant": lambda: layer.input_quantizer.quantize(x)}


def timed(calls: dict) -> dict[str, float]:
    """Each call's time; a variant this torch or GPU refuses (fast accumulation, say) is left out."""
    us = {}
    for name, fn in calls.items():
        try:
            us[name] = time_us(fn, graphed=True)
        except RuntimeError as exc:
            print(f"  {name} unavailable here: {str(exc).splitlines()[0]}")
    return us


def block_speedup(layer_name: str, m: int, k: int, layer, bf16_us: float, label: str = "fp8_fused") -> dict:
    """The input's producer in bf16 and fused with the layer's (FP8 or INT8) quantization, and the producer +
    layer speedup."""
    if layer_name not in PRODUCERS:
        return {}
    from pagoda.interfaces.quantization import QuantizedInput
    from pagoda_platform_cuda.platform import CudaPlatform

    ops, quant, eps = CudaPlatform().custom_ops(), layer.input_quantizer, 1e-5
    w = torch.ones(k, device="cuda", dtype=torch.bfloat16)
    if PRODUCERS[layer_name] == "norm":
        x, res = torch.randn(2, m, k, device="cuda", dtype=torch.bfloat16)
        bf16, fused = (lambda: ops.fused_add_rms_norm(x, res, w, eps)), (lambda: quant.fused_add_rms_norm(ops, x, res, w, eps))
    else:
        x = torch.randn(m, 2 * k, device="cuda", dtype=torch.bfloat16)
        bf16, fused = (lambda: ops.silu_and_mul(x)), (lambda: quant.silu_and_mul(ops, x))
    q = fused()
    q = q if isinstance(q, QuantizedInput) else q[0]  # the norms also return the residual
    producer_bf16, producer_fused, mm = time_us(bf16, True), time_us(fused, True), time_us(lambda: layer(q), True)
    return {"producer_us": {"bf16": round(producer_bf16, 2), label: round(producer_fused, 2)},
            "block_speedup": round((producer_bf16 + bf16_us) / (producer_fused + mm), 3)}


def run(args: argparse.Namespace, report: Report) -> None:
    torch.backends.cuda.matmul.allow_tf32 = False
    for name, (k, n) in ({"o": SHAPES["o"]} if args.small else SHAPES).items():
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02
        layer = fp8_layer(k, n, w)
        for m in (int(t) for t in args.tokens.split(",")):
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            us = timed(matmul_calls(x, w, layer))
            report.add(make_row({"layer": name, "m": m, "k": k, "n": n}, us, peer="bf16",
                                floor_us=report.rates.floor_us(flops=2 * m * n * k),
                                **block_speedup(name, m, k, layer, us["bf16"])))
