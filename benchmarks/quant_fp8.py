"""FP8 vs bf16 GEMMs at Llama-3.1-8B layer shapes (GPU, compute capability >= 8.9; needs pagoda-quant-fp8).

For each layer (qkv, o, gate_up, down) and M tokens in 1..8192, times with CUDA graphs (so launch
overhead does not hide small kernels) and reports TFLOP/s (2*M*N*K / time):

- ``bf16``: ``F.linear`` on bf16 weights (the unquantized method)
- ``fp8_mm_tensor`` / ``fp8_mm_row``: ``torch._scaled_mm`` alone, tensor-wise / row-wise scales
  (``fp8_mm_row_fast``: with ``use_fast_accum=True``, the engine's default)
- ``fp8_linear``: the whole FP8 layer fed a bf16 input (per-token activation quantization + row-wise
  matmul, fast accumulation), as the engine runs ``o``
- ``quant_us`` / ``quant_torch_us``: the activation quantization alone, Triton / torch ops

- ``producer_bf16`` / ``producer_fp8_unfused`` / ``producer_fp8_fused``: the op that makes the layer's
  input (residual add + RMSNorm for qkv and gate_up, SiLU-and-mul for down; csrc kernels through the
  CUDA platform's ops): alone, followed by the per-token quantizer, and as one fused Triton kernel
- ``block_speedup``: (bf16 producer + ``F.linear``) / (fused producer + the FP8 matmul), the
  producer-and-layer speedup the engine sees (``o`` has no fusable producer: its input is attention's)

and, per M, the share of the FP8 linears' time spent quantizing activations.

    python3 benchmarks/quant_fp8.py --out $OUT/quant_fp8_gemm.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
import torch.nn.functional as F

SHAPES = {"qkv": (4096, 6144), "o": (4096, 4096), "gate_up": (4096, 28672), "down": (14336, 4096)}  # (K, N)
M_VALUES = (1, 16, 64, 256, 1024, 4096, 8192)


def graph_us(fn, reps: int = 20) -> float:
    """Microseconds per call of ``fn``, replaying a CUDA graph of ``reps`` calls."""
    fn()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(reps):
            fn()
    graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    best = float("inf")
    for _ in range(3):
        start.record()
        graph.replay()
        end.record()
        torch.cuda.synchronize()
        best = min(best, start.elapsed_time(end) * 1e3 / reps)
    return best


def graph_us_or_nan(fn) -> float:
    """:func:`graph_us`, or NaN where this torch/GPU refuses the variant (e.g. fast accumulation)."""
    try:
        return graph_us(fn)
    except RuntimeError as exc:
        print(f"  (variant unavailable: {str(exc).splitlines()[0]})")
        return float("nan")


def fp8_layer(k: int, n: int, w: torch.Tensor):
    from pagoda.layers.linear import Linear
    from pagoda_quant_fp8.method import Fp8Method

    with torch.device("cuda"):
        layer = Linear(k, n, bias=False, quant_method=Fp8Method(None), dtype=torch.bfloat16)
    layer.weight.data.copy_(w)
    layer.process_weights_after_loading()
    return layer


def measure(name: str, k: int, n: int, m_values: tuple[int, ...]) -> list[dict]:
    from pagoda_quant_fp8.fp8_math import quantize_per_row
    from pagoda_quant_fp8.triton_quant import fused_per_token_quantizer

    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02
    layer = fp8_layer(k, n, w)
    wq, ws = layer.weight, layer.weight_scale  # [N, K] fp8, [1, N]
    ws_tensor = ws.max().reshape(())
    fused = fused_per_token_quantizer()
    rows = []
    for m in m_values:
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        xq, xs = quantize_per_row(x)
        xs_tensor = xs.max().reshape(())
        flops = 2 * m * n * k
        times = {
            "bf16": graph_us(lambda: F.linear(x, w)),
            "fp8_mm_tensor": graph_us(lambda: torch._scaled_mm(xq, wq.t(), scale_a=xs_tensor, scale_b=ws_tensor,
                                                               out_dtype=torch.bfloat16)),
            "fp8_mm_row": graph_us(lambda: torch._scaled_mm(xq, wq.t(), scale_a=xs, scale_b=ws,
                                                            out_dtype=torch.bfloat16)),
            "fp8_mm_row_fast": graph_us_or_nan(lambda: torch._scaled_mm(xq, wq.t(), scale_a=xs, scale_b=ws,
                                                                 out_dtype=torch.bfloat16, use_fast_accum=True)),
            "fp8_linear": graph_us(lambda: layer(x)),
        }
        row = {"layer": name, "M": m, "K": k, "N": n, **{f"{key}_us": round(t, 2) for key, t in times.items()}}
        row.update({f"{key}_tflops": round(flops / t / 1e6, 1) for key, t in times.items()})
        row["quant_torch_us"] = round(graph_us(lambda: quantize_per_row(x)), 2)
        row["quant_us"] = round(graph_us(lambda: fused(x)), 2) if fused else row["quant_torch_us"]
        row["speedup_fp8_linear_over_bf16"] = round(times["bf16"] / times["fp8_linear"], 3)
        row.update(producer_times(name, m, k, layer, times["bf16"]))
        rows.append(row)
        print(f"{name:8s} M={m:5d}  bf16 {row['bf16_tflops']:7.1f}  fp8 mm tensor {row['fp8_mm_tensor_tflops']:7.1f}"
              f"  row {row['fp8_mm_row_tflops']:7.1f}  fp8 linear {row['fp8_linear_tflops']:7.1f} TFLOP/s"
              f"  (x{row['speedup_fp8_linear_over_bf16']:.2f}; quant {row['quant_us']:.1f} us,"
              f" torch ops {row['quant_torch_us']:.1f} us)", flush=True)
    return rows


PRODUCERS = {"qkv": "norm", "gate_up": "norm", "down": "silu"}


def producer_times(name: str, m: int, k: int, layer, bf16_linear_us: float) -> dict:
    """The input's producer, bf16 / then quantized / fused, and the producer+layer speedup."""
    if name not in PRODUCERS:
        return {}
    from pagoda.interfaces.quantization import QuantizedInput
    from pagoda_platform_cuda.platform import CudaPlatform

    ops, quant = CudaPlatform().custom_ops(), layer.input_quantizer
    w = torch.ones(k, device="cuda", dtype=torch.bfloat16)
    if PRODUCERS[name] == "norm":
        x, res = torch.randn(2, m, k, device="cuda", dtype=torch.bfloat16)
        variants = {"bf16": lambda: ops.fused_add_rms_norm(x, res, w, 1e-5),
                    "fp8_unfused": lambda: quant.quantize(ops.fused_add_rms_norm(x, res, w, 1e-5)[0]),
                    "fp8_fused": lambda: quant.fused_add_rms_norm(ops, x, res, w, 1e-5)}
    else:
        x = torch.randn(m, 2 * k, device="cuda", dtype=torch.bfloat16)
        variants = {"bf16": lambda: ops.silu_and_mul(x), "fp8_unfused": lambda: quant.quantize(ops.silu_and_mul(x)),
                    "fp8_fused": lambda: quant.silu_and_mul(ops, x)}
    out = {f"producer_{key}_us": round(graph_us(fn), 2) for key, fn in variants.items()}
    q = variants["fp8_fused"]()
    q = q if isinstance(q, QuantizedInput) else q[0]  # the norms also return the residual
    mm_us = graph_us(lambda: layer(q))
    out["fp8_mm_quantized_input_us"] = round(mm_us, 2)
    out["block_speedup"] = round((out["producer_bf16_us"] + bf16_linear_us) / (out["producer_fp8_fused_us"] + mm_us), 3)
    return out


def quant_share(rows: list[dict]) -> dict[int, float]:
    """Per M: activation quantization time / FP8 linear time, summed over the four layers."""
    out = {}
    for m in sorted({r["M"] for r in rows}):
        sel = [r for r in rows if r["M"] == m]
        out[m] = round(sum(r["quant_us"] for r in sel) / sum(r["fp8_linear_us"] for r in sel), 4)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--m", default=",".join(map(str, M_VALUES)), help="comma-separated token counts")
    args = p.parse_args()
    m_values = tuple(int(v) for v in args.m.split(","))
    torch.backends.cuda.matmul.allow_tf32 = False
    rows = [row for name, (k, n) in SHAPES.items() for row in measure(name, k, n, m_values)]
    for r in rows:
        if "block_speedup" in r:
            print(f"{r['layer']:8s} M={r['M']:5d}  producer bf16 {r['producer_bf16_us']:.1f} us, then quantized "
                  f"{r['producer_fp8_unfused_us']:.1f}, fused {r['producer_fp8_fused_us']:.1f};"
                  f" producer+layer x{r['block_speedup']:.2f} over bf16")
    result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows,
              "quant_share_of_fp8_linears": quant_share(rows)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print("activation quantization share of the FP8 linears' time, by M:", result["quant_share_of_fp8_linears"])


if __name__ == "__main__":
    main()
