"""Pagoda's benchmark drivers (benchmarks/README.md): kernels (``python -m benchmarks.kernel_bench``), the vLLM
side-by-side harness (benchmarks/peers/) and a few CPU drivers; end-to-end runs are ``pagoda bench``."""
