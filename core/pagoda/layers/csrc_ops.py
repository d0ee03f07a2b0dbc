"""CsrcOps: the CustomOps contract on the compiled csrc kernels (CUDA, or hipified for ROCm).

The GPU platform plugins wrap their compiled module in it (``CudaOps``, ``RocmOps``): torch
reaches both vendors' devices as device type ``cuda``, so the checks below hold for both.

Same signatures and results as :class:`pagoda.interfaces.ops.CustomOps` (the torch reference), up
to floating-point rounding. ``fused_add_rms_norm`` works in place: ``x`` receives the
normalised output and ``residual`` the sum, and both are returned; callers use the returned
tensors. Inputs the kernels do not take (another dtype, a layout they do not cover) go to the
torch reference, so every call is answered.
"""

from __future__ import annotations

import importlib.util
import time
from types import ModuleType
from typing import TYPE_CHECKING

import torch

from pagoda.layers.gemv_tuning import Config, choose_configs, graph_timer, slowest_rank
from pagoda.interfaces.ops import CustomOps

if TYPE_CHECKING:
    from pagoda.interfaces.parallel import TensorParallel

KERNEL_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


class CsrcOps(CustomOps):
    name = "csrc"
    # Dense layers of at most this many tokens go to the csrc GEMV (0: all to F.linear); a platform's
    # subclass turns it on where the kernel was measured to pay.
    dense_gemv_tokens = 0

    def __init__(self, kernels: ModuleType) -> None:
        self.kernels = kernels  # the compiled csrc module (a platform plugin's _C or its JIT build)
        self.gemv_configs: dict[tuple[int, int, torch.dtype], Config] = {}  # weight shape -> (split, rows) (tune)

    def tune(self, model: torch.nn.Module, tp: "TensorParallel | None" = None) -> str:
        """Times the GEMV's splits and rows a warp for each dense weight shape (pagoda.layers.gemv_tuning; under
        tensor parallelism each configuration's time is the slowest rank's, so that every rank chooses alike).
        Returns what to log ("" for nothing)."""
        if self.dense_gemv_tokens == 0:
            return ""
        begin = time.perf_counter()
        timer = graph_timer(self.kernels)
        chosen = choose_configs(model, timer if tp is None else slowest_rank(timer, tp))
        if not chosen:
            return ""
        self.gemv_configs.update(chosen)  # the ops object is shared by every model of the process
        summary = ", ".join(f"{n}x{k}: {split}/{rows}" for (n, k, _), (split, rows) in chosen.items())
        how = f", the slowest of {tp.size} ranks" if tp is not None and tp.size > 1 else ""
        return (f"dense GEMV configurations (warps a row / rows a warp) timed{how} in "
                f"{time.perf_counter() - begin:.2f} s: {summary}")

    def rms_norm(self, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        """``x``: [..., hidden] (last dim contiguous) -> a new contiguous tensor."""
        if not _same_kernel_dtype(x, weight) or x.stride(-1) != 1:
            return super().rms_norm(x, weight, eps)
        rows = x if x.dim() == 2 else x.reshape(-1, x.shape[-1])  # [num_tokens, hidden]
        out = torch.empty(rows.shape, dtype=x.dtype, device=x.device)
        self.kernels.rms_norm(out, rows, weight, eps)
        return out.view(x.shape)

    def fused_add_rms_norm(
        self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """In place: returns ``(x <- rms_norm(x + residual), residual <- x + residual)``."""
        if not (_same_kernel_dtype(x, residual, weight) and x.dim() == 2 and x.is_contiguous()
                and residual.is_contiguous() and x.shape == residual.shape):
            return super().fused_add_rms_norm(x, residual, weight, eps)
        self.kernels.fused_add_rms_norm(x, residual, weight, eps)
        return x, residual

    def rotary_embedding(
        self,
        positions: torch.Tensor,  # [num_tokens]
        query: torch.Tensor,  # [num_tokens, num_heads * head_size]
        key: torch.Tensor,  # [num_tokens, num_kv_heads * head_size]
        head_size: int,
        cos_sin_cache: torch.Tensor,  # [max_position, rotary_dim]
        is_neox: bool,
    ) -> None:
        cache_ok = cos_sin_cache.dtype in (torch.float32, query.dtype) and cos_sin_cache.is_contiguous()
        if not (_same_kernel_dtype(query, key) and cache_ok and query.dim() == 2 and key.dim() == 2
                and query.stride(-1) == 1 and key.stride(-1) == 1):
            return super().rotary_embedding(positions, query, key, head_size, cos_sin_cache, is_neox)
        self.kernels.rotary_embedding(positions.long().contiguous(), query, key, head_size, cos_sin_cache, is_neox)

    def silu_and_mul(self, x: torch.Tensor) -> torch.Tensor:
        """``x``: [num_tokens, 2 * d] -> silu(x[:, :d]) * x[:, d:]."""
        if not _same_kernel_dtype(x) or x.dim() != 2 or x.stride(-1) != 1:
            return super().silu_and_mul(x)
        out = torch.empty(x.shape[0], x.shape[1] // 2, dtype=x.dtype, device=x.device)
        self.kernels.silu_and_mul(out, x)
        return out

    def masked_embedding(self, ids: torch.Tensor, weight: torch.Tensor, start: int) -> torch.Tensor:
        """[num_tokens] int ids -> [num_tokens, hidden]: this rank's rows, zeros for the others' (one kernel)."""
        if not (_same_kernel_dtype(weight) and weight.dim() == 2 and weight.is_contiguous() and ids.dim() == 1
                and ids.device == weight.device and not ids.is_floating_point()):
            return super().masked_embedding(ids, weight, start)
        out = torch.empty(ids.shape[0], weight.shape[1], dtype=weight.dtype, device=weight.device)
        self.kernels.masked_embedding(out, ids.long().contiguous(), weight, start)
        return out

    def linear(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        """The csrc GEMV for a few tokens (weights streamed, the kernel before it overlapped), else F.linear."""
        if gemv_fits(x, weight, bias, self.dense_gemv_tokens):
            n, k = weight.shape
            split, rows = self.gemv_configs.get((n, k, weight.dtype), (0, 0))  # 0: the kernel's rules
            return self.kernels.dense_gemv(x, weight, bias, split, rows)
        return super().linear(x, weight, bias)

    def reshape_and_cache(
        self,
        key: torch.Tensor,  # [num_tokens, num_kv_heads, head_size]
        value: torch.Tensor,  # [num_tokens, num_kv_heads, head_size]
        kv_cache: torch.Tensor,  # [2, num_blocks, block_size, num_kv_heads, head_size]
        slot_mapping: torch.Tensor,  # [num_tokens]; negative slots are skipped
        k_scale: torch.Tensor | None = None,
        v_scale: torch.Tensor | None = None,
    ) -> None:
        """The csrc KV write; into an FP8 cache (scales given) the NVIDIA kernel where it is built; else torch's."""
        rows = kv_cache.is_contiguous() and key.stride(-1) == 1 and value.stride(-1) == 1
        if k_scale is not None and v_scale is not None:
            if rows and _fp8_write_fits(key, value, kv_cache) and hasattr(self.kernels, "reshape_and_cache_fp8"):
                return self.kernels.reshape_and_cache_fp8(key, value, kv_cache, slot_mapping.long().contiguous(),
                                                          k_scale, v_scale)
            return super().reshape_and_cache(key, value, kv_cache, slot_mapping, k_scale, v_scale)
        if not (_same_kernel_dtype(key, value, kv_cache) and rows):
            return super().reshape_and_cache(key, value, kv_cache, slot_mapping)
        self.kernels.reshape_and_cache(key, value, kv_cache, slot_mapping.long().contiguous())

    def fused_moe(
        self, x: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor, topk_weights: torch.Tensor,
        topk_ids: torch.Tensor,
    ) -> torch.Tensor:
        """The Triton grouped GEMM (:mod:`pagoda.layers.fused_moe_triton`), or the reference without triton."""
        if x.device.type != "cuda" or importlib.util.find_spec("triton") is None:
            return super().fused_moe(x, w13, w2, topk_weights, topk_ids)
        from pagoda.layers.fused_moe_triton import fused_moe_triton

        return fused_moe_triton(x, w13, w2, topk_weights, topk_ids, self.silu_and_mul)


def gemv_fits(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, max_tokens: int) -> bool:
    """Whether the csrc GEMV takes ``x @ weight^T + bias``: 1..``max_tokens`` rows, fp16/bf16 on one GPU,
    16-byte aligned rows (``in`` and ``x``'s row stride multiples of 8, ``weight`` contiguous)."""
    tensors = (x, weight) if bias is None else (x, weight, bias)
    return (
        x.dim() == 2 and 1 <= x.shape[0] <= max_tokens and _same_kernel_dtype(*tensors) and gemv_weight_fits(weight)
        and x.stride(-1) == 1 and x.shape[1] % 8 == 0 and x.stride(0) % 8 == 0 and x.data_ptr() % 16 == 0
        and (bias is None or bias.is_contiguous())
    )


def gemv_weight_fits(weight: torch.Tensor) -> bool:
    """The GEMV's part of ``gemv_fits`` that rests on the weight alone: [n, k] fp16/bf16, contiguous, rows of a
    multiple of 16 bytes from a 16-byte aligned start (any device: the tuning reads it too)."""
    return (weight.dim() == 2 and weight.dtype in (torch.float16, torch.bfloat16) and weight.is_contiguous()
            and weight.shape[1] % 8 == 0 and weight.data_ptr() % 16 == 0)


def _same_kernel_dtype(*tensors: torch.Tensor) -> bool:
    """All on one GPU (torch device type ``cuda``, NVIDIA or AMD), in one dtype the kernels are built for."""
    first = tensors[0]
    return (
        first.device.type == "cuda"
        and first.dtype in KERNEL_DTYPES
        and all(t.dtype == first.dtype and t.device == first.device for t in tensors)
    )


def _fp8_write_fits(key: torch.Tensor, value: torch.Tensor, kv_cache: torch.Tensor) -> bool:
    """The FP8 KV write kernel's inputs: key/value on the cache's GPU in one kernel dtype, an FP8 cache, even
    head size and strides (it converts pairs of values)."""
    return (_same_kernel_dtype(key, value) and kv_cache.device == key.device
            and kv_cache.dtype in (torch.float8_e4m3fn, torch.float8_e5m2)
            and key.shape[-1] % 2 == 0 and all(s % 2 == 0 for s in (*key.stride()[:2], *value.stride()[:2])))
