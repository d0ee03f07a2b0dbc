"""The FP8 KV cache's kernels compile for NVIDIA GPUs, no GPU needed (in a subprocess without
``TRITON_INTERPRET``): e4m3 for sm_89/sm_90, where the KV write rounds with ``cvt.rn.satfinite.e4m3x2`` and
attention converts with ``cvt.rn.f16x2.e4m3x2``; e5m2 for sm_80 too. Triton refuses e4m3 below sm_89, which
is why ``check()`` names the GPU and the way out (``fp8_e5m2`` or ``flash``)."""

from __future__ import annotations

import json

import pytest

from pagoda.testing import compile_triton, compiled_in_subprocess
from triton_attention_kernels import kernels

pytest.importorskip("triton")

def ptx_or_error(name: str, fmt: str, arch: int) -> str:
    return compile_triton(*kernels(fmt)[name], target=("cuda", arch, 32))


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
