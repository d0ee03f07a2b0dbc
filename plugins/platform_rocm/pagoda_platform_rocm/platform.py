"""RocmPlatform: AMD GPUs through torch's HIP build, with the hipified csrc kernels as its custom ops."""

from __future__ import annotations

import functools
import logging

import torch

from pagoda.interfaces.ops import CustomOps
from pagoda.platforms.cuda_api import GiB, CudaApiPlatform
from pagoda_platform_rocm.arch import GfxArch, parse_arch

logger = logging.getLogger("pagoda")
FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e4m3fnuz, torch.float8_e5m2, torch.float8_e5m2fnuz)


class RocmPlatform(CudaApiPlatform):
    """Memory sizing, pinned buffers and HIP graphs come from CudaApiPlatform (torch.cuda on ROCm).

    Attention: the csrc kernels that use NVIDIA-only instructions are left out of the ROCm
    build (``csrc_kernel_reason`` says so to the backends needing them), so ``auto`` picks the
    Triton backend here.
    """

    description = "AMD GPUs through torch's ROCm (HIP) build, with the csrc kernels hipified"
    priority = 100

    @classmethod
    def check(cls) -> str | None:
        if torch.version.hip is None:
            build = "a CUDA build (use platform 'cuda')" if torch.version.cuda else "a CPU-only build"
            return f"torch {torch.__version__} is {build}; install a ROCm build of torch"
        if not torch.cuda.is_available():
            return f"no ROCm device found (torch.cuda.is_available() is False; torch {torch.__version__}, HIP {torch.version.hip})"
        return None

    def arch(self) -> GfxArch:
        return parse_arch(torch.cuda.get_device_properties(self.device()).gcnArchName)

    def describe(self) -> str:
        props = torch.cuda.get_device_properties(self.device())
        arch = parse_arch(props.gcnArchName)
        return (f"{props.name} ({arch.name}, {props.multi_processor_count} CUs, {props.total_memory / GiB:.1f} GiB, "
                f"HIP {torch.version.hip})")

    def supports_dtype(self, dtype: torch.dtype) -> str | None:
        if dtype not in FP8_DTYPES:
            return None  # float32, float16 and bfloat16 run on every CDNA GPU
        arch = self.arch()
        if arch.fp8 is None:
            return f"{arch.name} ({arch.products}) has no FP8 arithmetic; gfx942 and gfx950 have it"
        if dtype not in (arch.fp8, _e5m2_of(arch.fp8)):
            return f"{arch.name} computes FP8 as {arch.fp8} (not {dtype}); convert the weights to {arch.fp8}"
        return None

    def fp8_dtype(self) -> torch.dtype | None:
        """float8_e4m3fnuz on gfx942, float8_e4m3fn on gfx950, None before them."""
        return self.arch().fp8

    def csrc_kernel_reason(self, name: str) -> str | None:
        """Why the csrc kernels ``name`` do not run here: NVIDIA-only, or not built for this arch."""
        from pagoda_platform_rocm.build import excluded_reason

        return excluded_reason(name) or _wave_reason(self.arch())

    def custom_ops(self) -> CustomOps:
        """RocmOps on the hipified csrc kernels, or the torch ops (with one warning saying why)."""
        return _custom_ops(self.arch())


def _e5m2_of(e4m3: torch.dtype) -> torch.dtype:
    return torch.float8_e5m2fnuz if e4m3 == torch.float8_e4m3fnuz else torch.float8_e5m2


def _wave_reason(arch: GfxArch) -> str | None:
    if arch.wave64:
        return None
    return f"the csrc kernels are written for 64-wide wavefronts (CDNA, gfx9); {arch.name} runs 32-wide"


@functools.cache
def _custom_ops(arch: GfxArch) -> CustomOps:
    from pagoda_platform_rocm.build import ExtensionUnavailable, load_extension
    from pagoda_platform_rocm.ops import RocmOps

    try:
        reason = _wave_reason(arch)
        if reason:
            raise ExtensionUnavailable(reason)
        return RocmOps(load_extension(arch.name))
    except ExtensionUnavailable as error:
        logger.warning("pagoda-platform-rocm: ROCm kernels unavailable (%s); using the torch ops", error)
        return CustomOps()
