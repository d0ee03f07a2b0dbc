"""RMSNorm through ``CustomOps`` (optionally fused with the residual add)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

from pagoda.interfaces.parallel import SINGLE, TensorParallel
from pagoda.layers.linear import copy_checked

if TYPE_CHECKING:
    from pagoda.interfaces.quantization import InputQuantizer
from pagoda.interfaces.ops import CustomOps


class RMSNorm(nn.Module):
    """``weight * x / rms(x)`` over the last axis, computed in float32 by the ops.

    After :meth:`take_all_reduce_of`, the ``x`` given with a residual is a row-parallel layer's partial
    sums: the norm sums them over the ranks first, fused into one kernel where the platform has it.
    """

    def __init__(self, hidden_size: int, eps: float, ops: CustomOps, dtype: torch.dtype) -> None:
        super().__init__()
        self.eps = eps
        self.ops = ops
        self.weight = nn.Parameter(torch.ones(hidden_size, dtype=dtype), requires_grad=False)
        self.input_tp = SINGLE  # the group whose partial sums x holds (take_all_reduce_of), or SINGLE

    def take_all_reduce_of(self, producer: nn.Module, tp: TensorParallel) -> None:
        """Sum ``producer``'s output (the ``x`` this norm adds to the residual) over ``tp``'s ranks here,
        if the producer can leave that to its consumer (its ``defer_all_reduce()``)."""
        defer = getattr(producer, "defer_all_reduce", None)
        if tp.size > 1 and defer is not None and defer():
            self.input_tp = tp

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None, quant: "InputQuantizer | None" = None):
        """``x``: [num_tokens, hidden]. With ``residual``: returns ``(norm(x + residual), x + residual)``.
        With ``quant`` (the consuming linear's ``input_quantizer``) the norm comes out quantized."""
        if self.input_tp.size > 1:
            return self._sum_add_norm(x, residual, quant)
        if quant is not None:
            if residual is None:
                return quant.rms_norm(self.ops, x, self.weight, self.eps)
            return quant.fused_add_rms_norm(self.ops, x, residual, self.weight, self.eps)
        if residual is None:
            return self.ops.rms_norm(x, self.weight, self.eps)
        return self.ops.fused_add_rms_norm(x, residual, self.weight, self.eps)

    def _sum_add_norm(self, x: torch.Tensor, residual: torch.Tensor | None, quant: "InputQuantizer | None"):
        """``x`` holds partial sums: all-reduce, residual add and norm (one kernel unless quantized)."""
        if residual is None:
            raise ValueError("an RMSNorm that sums partial inputs needs the residual stream")
        if quant is not None:  # the quantizer's own fused norm, after a plain all-reduce
            return quant.fused_add_rms_norm(self.ops, self.input_tp.all_reduce(x), residual, self.weight, self.eps)
        return self.input_tp.all_reduce_add_rms_norm(x, residual, self.weight, self.eps, self.ops)

    def load_weight(self, param_name: str, tensor: torch.Tensor, shard_id: str | None = None) -> None:
        copy_checked(getattr(self, param_name).data, tensor)

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, eps={self.eps}"


class GemmaRMSNorm(nn.Module):
    """Gemma's ``x / rms(x) * (1 + weight)``: the checkpoint holds ``weight`` (zero-centred); the product is
    taken in float32 and cast once, as transformers computes it."""

    def __init__(self, hidden_size: int, eps: float, dtype: torch.dtype) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.zeros(hidden_size, dtype=dtype), requires_grad=False)

    def forward(self, x: torch.Tensor, quant: "InputQuantizer | None" = None):
        """``x``: [num_tokens, hidden]; with ``quant`` (the consuming linear's ``input_quantizer``) the
        result comes out quantized."""
        xf = x.float()
        out = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps) * (1.0 + self.weight.float())).to(x.dtype)
        return out if quant is None else quant.quantize(out)

    def load_weight(self, param_name: str, tensor: torch.Tensor, shard_id: str | None = None) -> None:
        copy_checked(getattr(self, param_name).data, tensor)

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, eps={self.eps}, offset=1"
