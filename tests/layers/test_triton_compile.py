"""Core's Triton kernels other than LoRA's (the fused MoE grouped GEMM at each of its tile configurations, the
decode argmax, the guided-decoding bitmask) compile for sm_90 and for the AMD GPUs docs/rocm.md lists. Compiled
here, no GPU needed, in a subprocess without ``TRITON_INTERPRET`` (the tests' interpreter mode cannot compile)."""

from __future__ import annotations

import json

import pytest

from pagoda.testing import SM90, compile_errors, compiled_in_subprocess

pytest.importorskip("triton")

I32, I64, P16, P32 = "i32", "i64", "*bf16", "*fp32"
MOE_ROWS = (8, 32, 128, 1024)  # rows per expert, one of each tile configuration


def kernels() -> dict[str, tuple]:
    """name -> (kernel, argument types, constants, warps) as the layers launch them (bfloat16)."""
    from pagoda.guided.bitmask_triton import _forbid_kernel
    from pagoda.layers import argmax_triton, fused_moe_triton as moe

    out = {}
    for rows in MOE_ROWS:
        t = moe.tile_config(rows)
        out[f"moe {rows}"] = (moe._grouped_gemm_kernel,
                              dict(a_ptr=P16, w_ptr=P16, out_ptr=P16, row_weight_ptr=P32, sorted_rows_ptr="*i32",
                                   block_expert_ptr="*i32", N=I32, K=I32, num_rows=I32, stride_am=I64, stride_we=I64,
                                   stride_wn=I64, stride_om=I64),
                              dict(A_ROW_DIV=1, MUL_ROW_WEIGHT=True, UPCAST=False, BLOCK_M=t.block_m,
                                   BLOCK_N=t.block_n, BLOCK_K=t.block_k), t.num_warps)
    out["argmax"] = (argmax_triton._argmax_kernel,
                     dict(x_ptr=P16, out_ptr="*i64", val_ptr=P32, idx_ptr="*i32", count_ptr="*i32", vocab=I32,
                          stride_row=I64, width=I32),
                     dict(SLICES=64, BLOCK=argmax_triton.BLOCK, NONE=argmax_triton.NONE), 4)
    out["bitmask"] = (_forbid_kernel, dict(logits_ptr=P32, words_ptr="*i32", index_ptr="*i64", vocab_size=I32,
                                           logits_row_stride=I64, num_words=I32),
                      dict(HAS_INDEX=True, BLOCK=4096), 4)
    return out


def test_compile_for_sm90_and_rocm() -> None:
    assert compiled_in_subprocess(__file__) == {"sm90": {}, "rocm": {}}  # no kernel refused, per target


if __name__ == "__main__":
    print(json.dumps({"sm90": compile_errors(kernels(), (SM90,)), "rocm": compile_errors(kernels())}))
