"""CudaPlatform: NVIDIA GPUs through torch.cuda, with the csrc kernels as its custom ops."""

from __future__ import annotations

import functools
import logging
from typing import Any

import torch

from pagoda.interfaces.ops import CustomOps
from pagoda.platforms.cuda_api import GiB, CudaApiPlatform

logger = logging.getLogger("pagoda")


class CudaPlatform(CudaApiPlatform):
    """Memory sizing, pinned buffers and graphs come from CudaApiPlatform (shared with ROCm)."""

    description = "NVIDIA GPUs through torch.cuda, with fused CUDA kernels from csrc/"
    priority = 100

    @classmethod
    def check(cls) -> str | None:
        if torch.version.cuda is None:
            build = "a ROCm build (use platform 'rocm')" if torch.version.hip else "a CPU-only build"
            return f"torch {torch.__version__} is {build}; install a CUDA build of torch"
        if not torch.cuda.is_available():
            return "no CUDA device found (torch.cuda.is_available() is False)"
        return None

    def describe(self) -> str:
        props = torch.cuda.get_device_properties(self.device())
        return f"{props.name} (sm_{props.major}{props.minor}, {props.total_memory / GiB:.1f} GiB)"

    def supports_dtype(self, dtype: torch.dtype) -> str | None:
        """bfloat16 weights and int8 matmuls (W8A8) need compute capability >= 8.0."""
        if dtype == torch.bfloat16 and not self.native_bf16():
            return f"bfloat16 needs compute capability >= 8.0 (this GPU is sm_{self._sm()}); use float16"
        if dtype == torch.int8 and self.compute_capability() < (8, 0):
            return f"int8 matmuls need compute capability >= 8.0 (int8 tensor cores; this GPU is sm_{self._sm()})"
        return None

    def _sm(self) -> str:
        return "".join(map(str, self.compute_capability()))

    def compute_capability(self) -> tuple[int, int]:
        return torch.cuda.get_device_capability(self.device())

    def fp8_dtype(self) -> torch.dtype | None:
        """float8_e4m3fn from compute capability 8.9 (Ada, Hopper) on."""
        return torch.float8_e4m3fn if self.compute_capability() >= (8, 9) else None

    def csrc_kernel_reason(self, name: str) -> str | None:
        return None  # every csrc source is built for NVIDIA GPUs

    def dependent_launch(self) -> bool:
        """Programmatic dependent launch from compute capability 9.0 (Hopper) on (as the csrc kernels decide)."""
        return self.compute_capability() >= (9, 0)

    def fast_all_reduce(self, group: Any, world_size: int) -> Any:
        """The one-shot path (CudaApiPlatform) with the csrc low-latency kernel for decode-sized sums in
        front of it."""
        oneshot = super().fast_all_reduce(group, world_size)
        from pagoda_platform_cuda import ll_all_reduce

        kernels = getattr(_custom_ops(), "kernels", None)
        return ll_all_reduce.create(kernels, group, self.device(), world_size, oneshot) or oneshot

    def custom_ops(self) -> CustomOps:
        """CudaOps on the csrc kernels, or the torch ops (with one warning saying why)."""
        return _custom_ops()


@functools.cache
def _custom_ops() -> CustomOps:
    from pagoda_platform_cuda.build import ExtensionUnavailable, load_extension
    from pagoda_platform_cuda.ops import CudaOps

    try:
        return CudaOps(load_extension())
    except ExtensionUnavailable as error:
        logger.warning("pagoda-platform-cuda: CUDA kernels unavailable (%s); using the torch ops", error)
        return CustomOps()
