"""Triton kernels for AWQ weights in the checkpoint's layout (no repacking).

- :func:`awq_gemm_triton`: ``x @ dequant(W)`` fused: each program dequantizes a ``[BLOCK_K,
  BLOCK_N]`` tile of W (one group's zero and scale per column, as ``BLOCK_K`` divides the group)
  and feeds it to ``tl.dot``; few-token batches split K over programs (fp32 atomics) so a decode
  step reads the weights with every SM.
- :func:`awq_dequantize_triton`: W whole in the activation dtype, for the dense-matmul path.

Nibble order: column ``j`` of each group of eight sits at bit ``4 * ((j >> 1) + 4 * (j & 1))``
(AutoAWQ's order, see :mod:`pagoda_quant_awq.packing`).
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from pagoda.triton_jit import dot_upcast


@triton.jit
def _unpack(packed, BLOCK_R: tl.constexpr, BLOCK_N: tl.constexpr):
    """``[BLOCK_R, BLOCK_N // 8]`` int32 -> ``[BLOCK_R, BLOCK_N]`` int32 values 0..15, columns in order."""
    j = tl.arange(0, 8)
    shifts = ((j >> 1) + ((j & 1) << 2)) * 4  # [8]
    values = (packed[:, :, None] >> shifts[None, None, :]) & 0xF  # [BLOCK_R, BLOCK_N // 8, 8]
    return tl.reshape(values, (BLOCK_R, BLOCK_N))


@triton.jit
def _awq_gemm_kernel(
    x_ptr, qw_ptr, qz_ptr, s_ptr, out_ptr,  # x [M, K], qweight [K, N/8], qzeros [K/G, N/8], scales [K/G, N], out [M, N]
    M, N, K, stride_xm, stride_om,
    GROUP: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    SPLIT_K: tl.constexpr, UPCAST: tl.constexpr,
):
    pid_n, pid_m, pid_k = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)  # [BM]
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)  # [BN]
    offs_p = pid_n * (BLOCK_N // 8) + tl.arange(0, BLOCK_N // 8)  # [BN/8] packed columns
    n_ok, p_ok = offs_n < N, offs_p < N // 8
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(pid_k * BLOCK_K, K, BLOCK_K * SPLIT_K):
        offs_k = k0 + tl.arange(0, BLOCK_K)  # [BK]; K is a multiple of the group, BK divides it
        x = tl.load(x_ptr + offs_m[:, None] * stride_xm + offs_k[None, :], mask=offs_m[:, None] < M, other=0.0)
        packed = tl.load(qw_ptr + offs_k[:, None] * (N // 8) + offs_p[None, :], mask=p_ok[None, :], other=0)
        g = k0 // GROUP
        zeros = tl.load(qz_ptr + g * (N // 8) + offs_p, mask=p_ok, other=0)  # [BN/8]
        z = _unpack(zeros[None, :], 1, BLOCK_N)  # [1, BN]
        s = tl.load(s_ptr + g * N + offs_n, mask=n_ok, other=0.0).to(tl.float32)  # [BN]
        w = (_unpack(packed, BLOCK_K, BLOCK_N) - z).to(tl.float32) * s[None, :]  # [BK, BN]
        if UPCAST:
            acc += tl.dot(x.to(tl.float32), w, input_precision="ieee")
        else:
            acc += tl.dot(x, w.to(x.dtype), input_precision="ieee")
    out = out_ptr + offs_m[:, None] * stride_om + offs_n[None, :]
    mask = (offs_m[:, None] < M) & n_ok[None, :]
    if SPLIT_K == 1:
        tl.store(out, acc.to(out_ptr.dtype.element_ty), mask=mask)
    else:
        tl.atomic_add(out, acc, mask=mask)


@triton.jit
def _awq_dequant_kernel(
    qw_ptr, qz_ptr, s_ptr, w_ptr,  # qweight [K, N/8], qzeros [K/G, N/8], scales [K/G, N], w [K, N]
    N, K, GROUP: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_N: tl.constexpr,
):
    pid_k, pid_n = tl.program_id(0), tl.program_id(1)
    offs_k = pid_k * BLOCK_K + tl.arange(0, BLOCK_K)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_p = pid_n * (BLOCK_N // 8) + tl.arange(0, BLOCK_N // 8)
    k_ok, n_ok, p_ok = offs_k < K, offs_n < N, offs_p < N // 8
    packed = tl.load(qw_ptr + offs_k[:, None] * (N // 8) + offs_p[None, :], mask=k_ok[:, None] & p_ok[None, :], other=0)
    g = offs_k // GROUP  # [BK]
    zeros = tl.load(qz_ptr + g[:, None] * (N // 8) + offs_p[None, :], mask=k_ok[:, None] & p_ok[None, :], other=0)
    s = tl.load(s_ptr + g[:, None] * N + offs_n[None, :], mask=k_ok[:, None] & n_ok[None, :], other=0.0)
    w = (_unpack(packed, BLOCK_K, BLOCK_N) - _unpack(zeros, BLOCK_K, BLOCK_N)).to(tl.float32) * s.to(tl.float32)
    tl.store(w_ptr + offs_k[:, None] * N + offs_n[None, :], w.to(w_ptr.dtype.element_ty),
             mask=k_ok[:, None] & n_ok[None, :])


@functools.cache
def _num_sms(device_index: int) -> int:
    return torch.cuda.get_device_properties(device_index).multi_processor_count


def gemm_config(m: int, n: int, k: int, group: int, device: torch.device) -> tuple[int, int, int, int]:
    """(BLOCK_M, BLOCK_N, BLOCK_K, SPLIT_K) for an ``[m, k] @ [k, n]`` product."""
    block_m = 16 if m <= 16 else 32 if m <= 32 else 64
    block_n = 64 if m <= 32 else 128
    block_k = min(group, 128 if m <= 32 else 64)
    tiles = triton.cdiv(n, block_n) * triton.cdiv(m, block_m)
    sms = 4 if device.type != "cuda" else _num_sms(device.index or 0)
    split = 1
    while tiles * split < 2 * sms and k // (block_k * split * 2) >= 4:  # >= 4 K steps per program
        split *= 2
    return block_m, block_n, block_k, split


def awq_gemm_triton(x: torch.Tensor, qweight: torch.Tensor, qzeros: torch.Tensor, scales: torch.Tensor,
                    group_size: int) -> torch.Tensor:
    """``x`` [M, K] (fp16/bf16/fp32, rows contiguous) -> [M, N] in ``x.dtype``."""
    m, k = x.shape
    n = scales.shape[1]
    x = x if x.stride(-1) == 1 else x.contiguous()
    block_m, block_n, block_k, split = gemm_config(m, n, k, group_size, x.device)
    upcast = dot_upcast(x.dtype)
    out = torch.zeros(m, n, dtype=torch.float32, device=x.device) if split > 1 else x.new_empty(m, n)
    grid = (triton.cdiv(n, block_n), triton.cdiv(m, block_m), split)
    _awq_gemm_kernel[grid](x, qweight, qzeros, scales, out, m, n, k, x.stride(0), out.stride(0),
                           GROUP=group_size, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, SPLIT_K=split,
                           UPCAST=upcast, num_warps=4 if block_m * block_n <= 2048 else 8)
    return out if split == 1 else out.to(x.dtype)


def awq_dequantize_triton(qweight: torch.Tensor, qzeros: torch.Tensor, scales: torch.Tensor, group_size: int,
                          dtype: torch.dtype) -> torch.Tensor:
    """W ``[K, N]`` in ``dtype``: ``(q - z) * s`` computed in fp32, rounded once."""
    k, n = qweight.shape[0], scales.shape[1]
    w = torch.empty(k, n, dtype=dtype, device=qweight.device)
    block_k, block_n = 32, 128
    grid = (triton.cdiv(k, block_k), triton.cdiv(n, block_n))
    _awq_dequant_kernel[grid](qweight, qzeros, scales, w, n, k, GROUP=group_size, BLOCK_K=block_k, BLOCK_N=block_n)
    return w
