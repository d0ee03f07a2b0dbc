"""The INT8 kernels compile, no GPU needed (in a subprocess without ``TRITON_INTERPRET``): the GEMM in each of its
tile configurations for sm_80 (int8 ``mma.sync``) and sm_90 (``wgmma`` on the 128-row tiles), and the RMSNorm /
SiLU-and-mul / per-token quantizers writing int8 rows; all of them for the AMD GPUs docs/rocm.md lists too."""

from __future__ import annotations

import json

import pytest

from pagoda.testing import ROCM_TARGETS, SM90, compile_triton, compiled_in_subprocess

pytest.importorskip("triton")

TARGETS = (("cuda", 80, 32), SM90, *ROCM_TARGETS)
ARCHS = [target[1] for target in TARGETS]
ROWS = (1, 64, 4096)  # one of each launch_config tile


def compile_all() -> dict[str, str]:
    from pagoda_quant_fp8.triton_fused import _rms_norm_quant, _silu_mul_quant
    from pagoda_quant_fp8.triton_int8 import _int8_scaled_mm, launch_config

    gemm = dict(a_ptr="*i8", b_ptr="*i8", c_ptr="*bf16", a_scale_ptr="*fp32", b_scale_ptr="*fp32", M="i32", N="i32",
                K="i32", stride_am="i64", stride_bn="i64", stride_cm="i64")
    norm = dict(x_ptr="*bf16", res_ptr="*bf16", res_out_ptr="*bf16", w_ptr="*bf16", q_ptr="*i8", s_ptr="*fp32",
                K="i32", stride_x="i64", stride_r="i64", stride_q="i64", eps="fp32")
    silu = dict(x_ptr="*bf16", q_ptr="*i8", s_ptr="*fp32", D="i32", stride_x="i64", stride_q="i64")
    out = {}
    for target in TARGETS:
        arch = target[1]
        for m in ROWS:
            cfg = {k: v for k, v in launch_config(m).items() if k not in ("num_warps", "num_stages")}
            out[f"gemm {m} {arch}"] = compile_triton(
                _int8_scaled_mm, gemm, dict(A_ROWWISE=True, B_ROWWISE=True, EVEN_K=True, **cfg), target)
        out[f"norm {arch}"] = compile_triton(
            _rms_norm_quant, norm, dict(HAS_RESIDUAL=True, FMAX=127.0, SMIN=1e-12, BLOCK=4096, INT=True), target)
        out[f"silu {arch}"] = compile_triton(
            _silu_mul_quant, silu, dict(FMAX=127.0, SMIN=1e-12, BLOCK=4096, INT=True), target)
    return out


@pytest.fixture(scope="module")
def compiled() -> dict[str, str]:
    return compiled_in_subprocess(__file__)


@pytest.mark.parametrize("arch", ARCHS)
def test_int8_kernels_compile(compiled: dict[str, str], arch) -> None:
    for key, ptx in compiled.items():
        if key.endswith(f" {arch}"):
            assert not ptx.startswith("error"), (key, ptx)
    if isinstance(arch, str):  # an AMD GPU: AMDGCN, not PTX
        return
    assert "mma.sync.aligned.m16n8k32.row.col.satfinite.s32.s8.s8" in compiled[f"gemm 1 {arch}"]  # int8 tensor cores
    if arch == 90:
        assert "wgmma.mma_async.sync.aligned.m64n128k32.s32.s8.s8" in compiled["gemm 4096 90"]
    assert "cvt.rzi.s16.f32" in compiled[f"norm {arch}"]  # the rounded rows to integers (exact: already whole)


if __name__ == "__main__":
    print(json.dumps(compile_all()))
