"""What core's and the plugins' Triton kernels share: whether dots upcast a dtype, and the start of a kernel
launched as a programmatic dependent. Imports triton: import it only where a Triton kernel runs
(:mod:`pagoda.triton_support` says whether one can)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from pagoda.triton_support import interpreting


def dot_upcast(dtype: torch.dtype) -> bool:
    """Whether a kernel upcasts its ``tl.dot`` operands to float32: bfloat16 under ``TRITON_INTERPRET=1``, whose
    CPU interpreter (Triton 3.9) computes bfloat16 dots wrongly (loads and stores stay bfloat16). Compiled
    kernels use the native half-precision dots.

    Every dot takes ``input_precision="ieee"``: exact float32 dots (not tf32), and the only value every GPU
    accepts (ROCm's Triton refuses "tf32" but on gfx942); for half-precision operands the choice changes no
    instruction."""
    return dtype == torch.bfloat16 and interpreting()


@triton.jit
def dependent_start(PDL: tl.constexpr):
    """A kernel launched as a programmatic dependent (``launch_pdl``, sm_90+; ``PDL`` true) starts here: it
    lets the next kernel be scheduled first, so that kernel's programs become resident and read what no
    kernel writes (a GEMV's weights) while this one runs, then waits for the kernel before it (finished,
    its writes visible). Every dependent still waits before it reads this kernel's output."""
    if PDL:
        tl.extra.cuda.gdc_launch_dependents()
        tl.extra.cuda.gdc_wait()


def pdl_launch(pdl: bool) -> dict[str, bool]:
    """Launch options of a kernel that starts with ``dependent_start`` (``PDL=pdl``)."""
    return {"launch_pdl": True} if pdl else {}
