"""Shared test setup (the `gpu` marker and its skip come from pagoda.testing, a pytest plugin)."""

from __future__ import annotations

import torch

# Tests run tiny models: one intra-op thread avoids OpenMP spin contention on small CI machines
# (with 2 threads on a busy 2-core machine a 8x64x128 matmul took 20 ms instead of 10 us).
torch.set_num_threads(1)

# The CPU plugins compile their kernels on first use (about 20 s each, then cached): build them here, once, so
# that no engine a test starts (some in a subprocess, against a deadline) pays for it.
def _build_cpu_kernels() -> None:
    import importlib

    from pagoda.platforms.csrc import ExtensionUnavailable

    for module, loader in (("pagoda_attention_cpu.build", "load_kernel"), ("pagoda_platform_cpu.build", "load_kernels")):
        try:
            getattr(importlib.import_module(module), loader)()
        except (ImportError, ExtensionUnavailable):  # not installed, or `auto` passes it over (its tests say why)
            pass


_build_cpu_kernels()

# Triton binds its standard library (tl.zeros, tl.max, ...) to the interpreter only when triton is
# first imported under TRITON_INTERPRET=1. Without a GPU, import it that way before any test
# module can import it plainly (xgrammar, a core dependency, imports triton too).
try:
    from pagoda.testing import import_triton_kernels

    import_triton_kernels("triton", "triton.language")
except ImportError:  # no triton installed: the Triton tests skip
    pass
