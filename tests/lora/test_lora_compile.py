"""The LoRA kernels compile for sm_90 at the tiles a GPU runs them with (bfloat16, rank 16) and keep their values
in registers (ptxas reports no spills); they compile for the ROCm GPUs too. Compiled here, no GPU needed, in a
subprocess without ``TRITON_INTERPRET`` (the tests' interpreter mode cannot compile)."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile

import pytest

from pagoda.testing import compile_errors, compile_triton, compiled_in_subprocess

pytest.importorskip("triton")

P16, P32, I32 = "*bf16", "*i32", "i32"


def kernels() -> dict:
    """name -> (kernel, argument types, constants, warps) at the GPU tiles."""
    from pagoda.lora import triton_kernels as k

    t = k.tiles(1)
    flags = dict(UPCAST=False)
    plan = dict(block_slot_ptr=P32, block_row_ptr=P32)
    strides_a = dict(stride_al=I32, stride_as=I32, stride_ar=I32)
    return {
        "bgmv_shrink": (k._bgmv_shrink_kernel, dict(x_ptr=P16, a_ptr=P16, buf_ptr="*fp32", **plan, K=I32, R=I32,
                                                    k_per_split=I32, stride_xm=I32, **strides_a, stride_bp=I32,
                                                    stride_bs=I32, stride_bm=I32),
                        dict(**flags, BLOCK_M=16, BLOCK_R=16, BLOCK_K=t.decode_k), 4),
        "bgmv_expand": (k._bgmv_expand_kernel, dict(buf_ptr="*fp32", b_ptr=P16, y_ptr=P16, **plan, slice_ptr=P32,
                                                    R=I32, n_blocks=I32, num_splits=I32, stride_bp=I32, stride_bs=I32,
                                                    stride_bm=I32, stride_bl=I32, stride_bn=I32, stride_ym=I32),
                        dict(**flags, BLOCK_M=16, BLOCK_N=t.block_n, BLOCK_R=16, SPLITS=k.MAX_SPLITS), 4),
        "sgmv_shrink": (k._sgmv_shrink_kernel, dict(x_ptr=P16, a_ptr=P16, buf_ptr="*fp32", seg_ptr=P32, K=I32, R=I32,
                                                    stride_xm=I32, **strides_a, stride_bs=I32, stride_bm=I32),
                        dict(**flags, BLOCK_M=64, BLOCK_R=16, BLOCK_K=t.block_k), 4),
        "sgmv_expand": (k._sgmv_expand_kernel, dict(buf_ptr="*fp32", b_ptr=P16, y_ptr=P16, seg_ptr=P32,
                                                    slice_ptr=P32, R=I32, n_blocks=I32, stride_bs=I32, stride_bm=I32,
                                                    stride_bl=I32, stride_bn=I32, stride_ym=I32),
                        dict(**flags, BLOCK_M=64, BLOCK_N=t.block_n, BLOCK_R=16), 4),
    }


def ptxas_report(name: str) -> str:
    """ptxas -v's lines on the kernel's registers and spills (sm_90a)."""
    from triton.backends.nvidia.compiler import get_ptxas

    fn, signature, constants, warps = kernels()[name]
    ptx = compile_triton(fn, signature, constants, num_warps=warps)
    assert not ptx.startswith("error: "), ptx
    with tempfile.NamedTemporaryFile("w", suffix=".ptx", delete=False) as f:
        f.write(ptx)
    done = subprocess.run([get_ptxas(90).path, "-arch=sm_90a", "-v", f.name, "-o", os.devnull], capture_output=True,
                          text=True)
    os.unlink(f.name)
    return "\n".join(line for line in done.stderr.splitlines() if "spill" in line or "registers" in line)


@pytest.fixture(scope="module")
def reports() -> dict[str, dict]:
    return compiled_in_subprocess(__file__)


@pytest.mark.parametrize("name", ["bgmv_shrink", "bgmv_expand", "sgmv_shrink", "sgmv_expand"])
def test_compiles_for_sm90_without_spills(reports, name: str) -> None:
    report = reports["ptxas"][name]
    assert "Used" in report and "registers" in report, report
    assert "0 bytes spill stores, 0 bytes spill loads" in report, report


def test_compiles_for_rocm(reports) -> None:
    assert reports["rocm"] == {}


if __name__ == "__main__":
    print(json.dumps({"ptxas": {name: ptxas_report(name) for name in kernels()}, "rocm": compile_errors(kernels())}))
