"""The torch reference of the AWQ linear layer: dequantize whole, then a dense matmul (CPU, and the
large-batch path on GPUs, where one dense GEMM beats a fused kernel)."""

from __future__ import annotations

import torch

from pagoda_quant_awq.packing import dequantize


def awq_linear_reference(x: torch.Tensor, qweight: torch.Tensor, qzeros: torch.Tensor, scales: torch.Tensor,
                         group_size: int, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``x`` [tokens, in] -> [tokens, out] = x @ W (+ bias), W dequantized in ``x.dtype``."""
    w = dequantize(qweight, qzeros, scales, group_size, x.dtype)  # [in, out]
    out = x @ w
    return out if bias is None else out + bias
