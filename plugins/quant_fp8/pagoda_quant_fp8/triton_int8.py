"""The INT8 W8A8 matmul in Triton: int8 tensor-core dots into int32, the scales applied in the epilogue.

``out [M, N] = (x_q [M, K] @ w [N, K]^T) * x_scale * w_scale`` in one kernel: the int32 accumulator never
leaves the registers (``torch._int_mm`` writes it to memory for a separate scaling pass, 4 bytes per output
read and written again: at prefill sizes that costs about as much as the GEMM's own traffic). Tiles are
picked by the number of rows (decode-sized, medium, prefill-sized); a grouped launch order keeps the
``GROUP_M`` row blocks that share weight columns on the device together. Imported where Triton is (the
``int8`` method imports it on first use); tests import it under the interpreter.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _int8_scaled_mm(a_ptr, b_ptr, c_ptr, a_scale_ptr, b_scale_ptr, M, N, K, stride_am, stride_bn, stride_cm,
                    A_ROWWISE: tl.constexpr, B_ROWWISE: tl.constexpr, EVEN_K: tl.constexpr,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    pid = tl.program_id(0)
    num_m, num_n = tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N)
    group = GROUP_M * num_n
    first_m = pid // group * GROUP_M
    size_m = tl.minimum(num_m - first_m, GROUP_M)
    pid_m = first_m + (pid % group) % size_m
    pid_n = (pid % group) // size_m
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    m_ok, n_ok = rm < M, rn < N
    a_ptrs = a_ptr + rm[:, None].to(tl.int64) * stride_am + rk[None, :]  # [BLOCK_M, BLOCK_K]
    b_ptrs = b_ptr + rn[None, :].to(tl.int64) * stride_bn + rk[:, None]  # [BLOCK_K, BLOCK_N]: w^T
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.int32)
    for k in range(0, K, BLOCK_K):
        if EVEN_K:
            a = tl.load(a_ptrs, mask=m_ok[:, None], other=0)
            b = tl.load(b_ptrs, mask=n_ok[None, :], other=0)
        else:
            k_ok = k + rk < K
            a = tl.load(a_ptrs, mask=m_ok[:, None] & k_ok[None, :], other=0)
            b = tl.load(b_ptrs, mask=n_ok[None, :] & k_ok[:, None], other=0)
        acc = tl.dot(a, b, acc, out_dtype=tl.int32)
        a_ptrs += BLOCK_K
        b_ptrs += BLOCK_K
    if A_ROWWISE:
        a_scale = tl.load(a_scale_ptr + rm, mask=m_ok, other=0.0)[:, None]
    else:
        a_scale = tl.load(a_scale_ptr)
    if B_ROWWISE:
        b_scale = tl.load(b_scale_ptr + rn, mask=n_ok, other=0.0)[None, :]
    else:
        b_scale = tl.load(b_scale_ptr)
    out = acc.to(tl.float32) * a_scale * b_scale
    c_ptrs = c_ptr + rm[:, None].to(tl.int64) * stride_cm + rn[None, :]
    tl.store(c_ptrs, out.to(c_ptr.dtype.element_ty), mask=m_ok[:, None] & n_ok[None, :])


def launch_config(m: int) -> dict[str, int]:
    """Tiles by the number of rows: decode-sized batches stream the weights in thin tiles (more programs
    along N), prefill-sized ones take 128 x 128 tiles (data reuse)."""
    if m <= 32:
        return dict(BLOCK_M=16, BLOCK_N=64, BLOCK_K=256, GROUP_M=1, num_warps=4, num_stages=4)
    if m <= 128:
        return dict(BLOCK_M=64, BLOCK_N=128, BLOCK_K=128, GROUP_M=4, num_warps=4, num_stages=4)
    return dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=128, GROUP_M=8, num_warps=8, num_stages=3)


def int8_scaled_mm(x_q: torch.Tensor, x_scale: torch.Tensor, w: torch.Tensor, w_scale: torch.Tensor,
                   out_dtype: torch.dtype, config: dict[str, int] | None = None) -> torch.Tensor:
    """``x_q`` [M, K] int8 @ ``w`` [N, K] int8 ^T, times ``x_scale`` ([M, 1] or 0-dim) and ``w_scale`` ([1, N] or
    0-dim) -> [M, N] ``out_dtype``. ``config`` overrides :func:`launch_config` (benchmarks)."""
    if x_q.stride(-1) != 1:
        x_q = x_q.contiguous()
    m, k = x_q.shape
    n = w.shape[0]
    out = torch.empty((m, n), dtype=out_dtype, device=x_q.device)
    if m == 0:
        return out
    cfg = config or launch_config(m)
    grid = (triton.cdiv(m, cfg["BLOCK_M"]) * triton.cdiv(n, cfg["BLOCK_N"]),)
    _int8_scaled_mm[grid](x_q, w, out, x_scale, w_scale, m, n, k, x_q.stride(0), w.stride(0), out.stride(0),
                          A_ROWWISE=x_scale.numel() > 1 or x_scale.dim() > 0, B_ROWWISE=w_scale.numel() > 1,
                          EVEN_K=k % cfg["BLOCK_K"] == 0, **cfg)
    return out
