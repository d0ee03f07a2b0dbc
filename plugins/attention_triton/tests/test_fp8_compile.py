"""The FP8 KV cache's kernels compile for NVIDIA GPUs, no GPU needed (in a subprocess without
``TRITON_INTERPRET``): e4m3 for sm_89/sm_90, where the KV write rounds with ``cvt.rn.satfinite.e4m3x2`` and
attention converts with ``cvt.rn.f16x2.e4m3x2``; e5m2 for sm_80 too. Triton refuses e4m3 below sm_89, which
is why ``check()`` names the GPU and the way out (``fp8_e5m2`` or ``flash``)."""

from __future__ import annotations

import json

import pytest

from pagoda.testing import compiled_in_subprocess

pytest.importorskip("triton")

P16, I32, I64, F32, PF32 = "*bf16", "i32", "i64", "fp32", "*fp32"
FORMATS = {"e4m3": ("*fp8e4nv", 448.0, 3, -6), "e5m2": ("*fp8e5", 57344.0, 2, -14)}
STRIDES = dict(stride_kv=I64, stride_blk=I64, stride_tok=I64, stride_head=I64, stride_bt=I64)


def sources(fmt: str) -> dict:
    """name -> (kernel, argument types, constants) with an FP8 cache of format ``fmt``."""
    from pagoda_attention_triton.decode import _decode_kernel
    from pagoda_attention_triton.kv_write import _kv_write_kernel
    from pagoda_attention_triton.prefill import _prefill_kernel

    cache, fmax, mbits, emin = FORMATS[fmt]
    common = dict(cache_ptr=cache, k_scale_ptr=PF32, v_scale_ptr=PF32)
    tiles = dict(PAGE=16, HEAD=128, HEAD_P=128, USE_WINDOW=False, DOT_PREC="tf32", UPCAST=False, KV_FP8=True,
                 GROUP=4, GROUP_P=4)
    return {
        "kv_write": (_kv_write_kernel, dict(key_ptr=P16, value_ptr=P16, slot_ptr="*i64", stride_kt=I64, stride_kh=I64,
                                            stride_vt=I64, stride_vh=I64, stride_c_kv=I64, stride_c_slot=I64,
                                            stride_c_head=I64, **common),
                     dict(NUM_HEADS=8, HEAD=128, HEADS_P=8, HEAD_P=128, PDL=False, QUANT=True, FMAX=fmax, MBITS=mbits,
                          EMIN=emin, GRID_ROUND=False)),
        "decode": (_decode_kernel, dict(q_ptr=P16, o_ptr=P16, part_o_ptr=PF32, part_lse_ptr=PF32, bt_ptr="*i32",
                                        seq_lens_ptr="*i32", qsl_ptr="*i32", seq_base=I32, token_base=I32,
                                        stride_qt=I64, stride_qh=I64, stride_ot=I64, stride_oh=I64, scale_log2e=F32,
                                        window=I32, num_heads=I32, **STRIDES, **common),
                   dict(ROWS=16, NUM_SPLITS=4, BLOCK_N=128, PDL=False, **tiles)),
        "prefill": (_prefill_kernel, dict(q_ptr=P16, o_ptr=P16, bt_ptr="*i32", qsl_ptr="*i32", seq_lens_ptr="*i32",
                                          seq_lo=I32, seq_hi=I32, stride_qt=I64, stride_qh=I64, stride_ot=I64,
                                          stride_oh=I64, scale_log2e=F32, window=I32, **STRIDES, **common),
                    dict(BLOCK_Q=16, BLOCK_N=32, **tiles)),
    }


def ptx_or_error(name: str, fmt: str, arch: int) -> str:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    fn, signature, constants = sources(fmt)[name]
    source = ASTSource(fn=fn, signature={**signature, **{k: "constexpr" for k in constants}}, constexprs=constants)
    try:
        return triton.compile(source, target=GPUTarget("cuda", arch, 32)).asm["ptx"]
    except Exception as exc:  # Triton's refusal of a format on an architecture
        return "error: " + str(exc).splitlines()[-1]


@pytest.fixture(scope="module")
def compiled() -> dict:
    """"name fmt arch" -> PTX (or "error: ..."), compiled in one fresh interpreter without TRITON_INTERPRET."""
    return compiled_in_subprocess(__file__)


CASES = [("e4m3", 90), ("e4m3", 89), ("e5m2", 80), ("e5m2", 90)]


@pytest.mark.parametrize("fmt,arch", CASES)
def test_fp8_cache_kernels_compile(compiled: dict, fmt: str, arch: int) -> None:
    for name in ("kv_write", "decode", "prefill"):
        assert not compiled[f"{name} {fmt} {arch}"].startswith("error"), compiled[f"{name} {fmt} {arch}"]
    if arch >= 89:  # hardware conversions: saturating round on the write, to f16x2 on the read (e4m3)
        assert f"cvt.rn.satfinite.{fmt}x2.f32" in compiled[f"kv_write {fmt} {arch}"]
    if fmt == "e4m3":
        assert "cvt.rn.f16x2.e4m3x2" in compiled[f"decode {fmt} {arch}"]


def test_triton_refuses_e4m3_below_sm89(compiled: dict) -> None:
    assert "fp8e4nv not supported in this architecture" in compiled["kv_write e4m3 80"]


if __name__ == "__main__":
    out = {f"{name} {fmt} {arch}": ptx_or_error(name, fmt, arch)
           for fmt, arch in [*CASES, ("e4m3", 80)] for name in ("kv_write", "decode", "prefill")
           if (fmt, arch) in CASES or name == "kv_write"}
    print(json.dumps(out))
