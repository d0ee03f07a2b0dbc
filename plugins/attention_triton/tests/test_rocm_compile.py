"""Every Triton attention kernel compiles for the AMD GPUs docs/rocm.md lists (gfx908, gfx90a, gfx942, gfx950), as the
backend launches them on ROCm (no programmatic dependent launches): Triton is the attention backend there; and the
FP8 KV cache's kernels compile for gfx950 in both formats (the one AMD GPU ``check`` lets take them). Compiled here,
no GPU needed, in a subprocess without ``TRITON_INTERPRET`` (the tests' interpreter mode cannot compile)."""

from __future__ import annotations

import json

import pytest

from pagoda.testing import compile_errors, compiled_in_subprocess
from triton_attention_kernels import kernels

pytest.importorskip("triton")

FP8_KERNELS = ("kv_write", "decode", "prefill")


def test_attention_kernels_compile_for_rocm() -> None:
    assert compiled_in_subprocess(__file__) == {"rocm": {}, "fp8": {}}  # no kernel refused, per target


if __name__ == "__main__":
    fp8 = {f"{name} {fmt}": kernel for fmt in ("e4m3", "e5m2") for name, kernel in kernels(fmt).items()
           if name in FP8_KERNELS}
    print(json.dumps({"rocm": compile_errors(kernels()), "fp8": compile_errors(fp8, (("hip", "gfx950", 64),))}))
