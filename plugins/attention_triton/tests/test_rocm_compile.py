"""Every Triton attention kernel compiles for the AMD GPUs docs/rocm.md lists (gfx908, gfx90a, gfx942, gfx950), as the
backend launches them on ROCm (no programmatic dependent launches): Triton is the attention backend there. Compiled
here, no GPU needed, in a subprocess without ``TRITON_INTERPRET`` (the tests' interpreter mode cannot compile)."""

from __future__ import annotations

import json

import pytest

from pagoda.testing import compiled_in_subprocess, compile_errors
from triton_attention_kernels import kernels

pytest.importorskip("triton")


def test_attention_kernels_compile_for_rocm() -> None:
    assert compiled_in_subprocess(__file__) == {}


if __name__ == "__main__":
    print(json.dumps(compile_errors(kernels())))
