"""Shared test setup (the `gpu` marker and its skip come from pagoda.testing, a pytest plugin)."""

from __future__ import annotations

import torch

# Tests run tiny models: one intra-op thread avoids OpenMP spin contention on small CI machines
# (with 2 threads on a busy 2-core machine a 8x64x128 matmul took 20 ms instead of 10 us).
torch.set_num_threads(1)

# The cpu attention plugin compiles its kernel on first use (about 20 s, then cached): build it here, once, so
# that no engine a test starts (some in a subprocess, against a deadline) pays for it.
try:
    from pagoda_attention_cpu.build import load_kernel
except ImportError:  # the plugin is not installed: nothing to build
    pass
else:
    from pagoda.platforms.csrc import ExtensionUnavailable

    try:
        load_kernel()
    except ExtensionUnavailable:  # `auto` keeps the torch backend; the plugin's own tests fail with the reason
        pass

# Triton binds its standard library (tl.zeros, tl.max, ...) to the interpreter only when triton is
# first imported under TRITON_INTERPRET=1. Without a GPU, import it that way before any test
# module can import it plainly (xgrammar, a core dependency, imports triton too).
try:
    from pagoda.testing import import_triton_kernels

    import_triton_kernels("triton", "triton.language")
except ImportError:  # no triton installed: the Triton tests skip
    pass
