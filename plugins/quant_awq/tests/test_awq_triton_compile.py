"""The AWQ Triton GEMM (the checkpoint-layout kernel, the one ROCm runs) compiles at each of its tile sizes for
sm_90 and for the AMD GPUs docs/rocm.md lists. Compiled here, no GPU needed, in a subprocess without
``TRITON_INTERPRET`` (the tests' interpreter mode cannot compile)."""

from __future__ import annotations

import json

import pytest
import torch

from pagoda.testing import SM90, compile_errors, compiled_in_subprocess

pytest.importorskip("triton")

ROWS = (1, 32, 256)  # one of each tile size


def kernels() -> dict[str, tuple]:
    """name -> (kernel, argument types, constants, warps) as awq_gemm_triton launches it (bfloat16, group 128,
    Llama-8B's o_proj: 4096 x 4096; split K as on a 132-SM GPU: the CPU device counts 4)."""
    from pagoda_quant_awq.triton_kernels import _awq_gemm_kernel, gemm_config

    signature = dict(x_ptr="*bf16", qw_ptr="*i32", qz_ptr="*i32", s_ptr="*bf16", out_ptr="*fp32", M="i32", N="i32",
                     K="i32", stride_xm="i64", stride_om="i64")
    out = {}
    for m in ROWS:
        block_m, block_n, block_k, split = gemm_config(m, 4096, 4096, 128, torch.device("cpu"))
        constants = dict(GROUP=128, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, SPLIT_K=split, UPCAST=False)
        out[f"gemm {m}"] = (_awq_gemm_kernel, signature, constants, 4 if block_m * block_n <= 2048 else 8)
    return out


def test_compiles_for_sm90_and_rocm() -> None:
    assert compiled_in_subprocess(__file__) == {"sm90": {}, "rocm": {}}  # no kernel refused, per target


if __name__ == "__main__":
    print(json.dumps({"sm90": compile_errors(kernels(), (SM90,)), "rocm": compile_errors(kernels())}))
