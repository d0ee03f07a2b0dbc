"""The FP8 linear's compute: activation quantization, then a scaled matmul.

Two matmuls share one contract, ``(x_q, x_scale, w, w_scale, out_dtype) -> [M, N]``:

- :func:`scaled_mm`: ``torch._scaled_mm`` (cuBLASLt/CUTLASS FP8 tensor cores on sm_89+; torch also
  runs it on CPU, slowly). ``w`` [N, K] is passed transposed, i.e. column-major as it requires.
  Tensor-wise: both scales are 0-dim float32. Row-wise: ``x_scale`` [M, 1] and ``w_scale`` [1, N].
  K and N must be multiples of 16.
  :func:`scaled_mm_fast_accum` is the same with fast accumulation (the ``cuda`` backend's default).
- :func:`reference_mm`: dequantize both operands to float32 and multiply (any device); it sees
  the same FP8-rounded activations, so it differs from the tensor cores only by summation order.
"""

from __future__ import annotations

from typing import Callable

import torch

from pagoda_quant_fp8.fp8_math import quantize_per_row
from pagoda_quant_fp8.formats import FP8, QuantFormat

Matmul = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.dtype], torch.Tensor]
TokenQuantizer = Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]
ALIGNMENT = 16  # torch._scaled_mm needs K and N divisible by 16


def scaled_mm(x_q: torch.Tensor, x_scale: torch.Tensor, w: torch.Tensor, w_scale: torch.Tensor,
              out_dtype: torch.dtype) -> torch.Tensor:
    """``x_q`` [M, K] fp8 @ ``w`` [N, K] fp8 ^T -> [M, N] ``out_dtype`` on the FP8 tensor cores."""
    return torch._scaled_mm(x_q, w.t(), scale_a=x_scale, scale_b=w_scale, out_dtype=out_dtype)


def scaled_mm_fast_accum(x_q: torch.Tensor, x_scale: torch.Tensor, w: torch.Tensor, w_scale: torch.Tensor,
                        out_dtype: torch.dtype) -> torch.Tensor:
    """:func:`scaled_mm` with the tensor cores' fast FP8 accumulation (Hopper: partial sums are not
    promoted to full float32 along K; 5-15% faster at prefill sizes, see docs/quant_fp8.md)."""
    return torch._scaled_mm(x_q, w.t(), scale_a=x_scale, scale_b=w_scale, out_dtype=out_dtype, use_fast_accum=True)


def reference_mm(x_q: torch.Tensor, x_scale: torch.Tensor, w: torch.Tensor, w_scale: torch.Tensor,
                 out_dtype: torch.dtype) -> torch.Tensor:
    """The same product in float32 from dequantized operands (the CPU/test path)."""
    x = x_q.float() * x_scale  # [M, K]
    wt = w.float().t() * w_scale  # [K, N] (w_scale [] or [1, N])
    return (x @ wt).to(out_dtype)


def quantize_activations(x: torch.Tensor, mode: str, input_scale: torch.Tensor | None, rowwise: bool,
                         per_token: TokenQuantizer = quantize_per_row,
                         fmt: QuantFormat = FP8) -> tuple[torch.Tensor, torch.Tensor]:
    """``x`` [M, K] -> (``fmt`` [M, K], scale): [M, 1] when ``rowwise``, else 0-dim.

    ``mode``: ``token`` (dynamic, one scale per row: ``per_token``), ``tensor`` (dynamic, one scale) or
    ``static`` (the checkpoint's ``input_scale``).
    """
    if mode == "token":
        return per_token(x)
    if mode == "static":
        x_q, scale = fmt.with_scale(x, input_scale), input_scale
    else:
        x_q, scale = fmt.per_tensor(x)
    if rowwise:  # one scale for all rows, in the [M, 1] layout row-wise scaling takes
        scale = scale.reshape(1, 1).expand(x.shape[0], 1).contiguous()
    return x_q, scale
