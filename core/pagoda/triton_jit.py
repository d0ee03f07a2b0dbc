"""What core's and the plugins' Triton kernels share: the dot precision of a dtype, and the start of a kernel
launched as a programmatic dependent. Imports triton: import it only where a Triton kernel runs
(:mod:`pagoda.triton_support` says whether one can)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from pagoda.triton_support import interpreting


def dot_precision(dtype: torch.dtype) -> tuple[str, bool]:
    """(``input_precision`` for ``tl.dot``, whether to upcast dot operands to float32).

    float32 operands use exact ("ieee") dots, not tf32. The CPU interpreter of Triton 3.9 computes bfloat16
    dots wrongly, so under ``TRITON_INTERPRET=1`` bfloat16 operands are upcast (loads and stores stay
    bfloat16); compiled kernels always use the native half-precision dots."""
    upcast = dtype == torch.bfloat16 and interpreting()
    return ("ieee" if dtype == torch.float32 or upcast else "tf32"), upcast


@triton.jit
def dependent_start(PDL: tl.constexpr):
    """A kernel launched as a programmatic dependent (``launch_pdl``, sm_90+; ``PDL`` true) starts here: it
    lets the next kernel be scheduled first, so that kernel's programs become resident and read what no
    kernel writes (a GEMV's weights) while this one runs, then waits for the kernel before it (finished,
    its writes visible). Every dependent still waits before it reads this kernel's output."""
    if PDL:
        tl.extra.cuda.gdc_launch_dependents()
        tl.extra.cuda.gdc_wait()


@triton.jit
def dependent_wait_start(PDL: tl.constexpr):
    """The usual start of a programmatic dependent (the csrc kernels' ``start_as_dependent``): wait for the
    kernel before it, then let the next kernel be scheduled. For kernels not followed by a long one whose
    successor streams weights (triggering first before every GEMV was slower: docs/cuda.md)."""
    if PDL:
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()


def pdl_launch(pdl: bool) -> dict[str, bool]:
    """Launch options of a kernel that starts with ``dependent_start`` or ``dependent_wait_start`` (``PDL=pdl``)."""
    return {"launch_pdl": True} if pdl else {}
