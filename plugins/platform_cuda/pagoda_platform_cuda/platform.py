"""CudaPlatform: NVIDIA GPUs through torch.cuda, with the csrc kernels as its custom ops."""

from __future__ import annotations

import functools
import logging
from contextlib import AbstractContextManager, contextmanager
from typing import Callable, Iterator, TypeVar

import torch

from pagoda.interfaces.platform import Platform
from pagoda.layers.ops import CustomOps

logger = logging.getLogger("pagoda")
GiB = 1 << 30
T = TypeVar("T")


class CudaPlatform(Platform):
    description = "NVIDIA GPUs through torch.cuda, with fused CUDA kernels from csrc/"
    priority = 100
    device_type = "cuda"

    @classmethod
    def check(cls) -> str | None:
        if torch.version.cuda is None:
            build = "a ROCm build (use platform 'rocm')" if torch.version.hip else "a CPU-only build"
            return f"torch {torch.__version__} is {build}; install a CUDA build of torch"
        if not torch.cuda.is_available():
            return "no CUDA device found (torch.cuda.is_available() is False)"
        return None

    def device(self) -> torch.device:
        return torch.device("cuda", torch.cuda.current_device())

    def describe(self) -> str:
        props = torch.cuda.get_device_properties(self.device())
        return f"{props.name} (sm_{props.major}{props.minor}, {props.total_memory / GiB:.1f} GiB)"

    def default_dtype(self, checkpoint_dtype: torch.dtype | None) -> torch.dtype:
        """bf16 for float32 (or unnamed) checkpoints where supported, else the checkpoint's half type."""
        bf16 = torch.cuda.is_bf16_supported()
        if checkpoint_dtype in (None, torch.float32):
            return torch.bfloat16 if bf16 else torch.float16
        if checkpoint_dtype == torch.bfloat16 and not bf16:
            return torch.float16
        return checkpoint_dtype

    def supports_dtype(self, dtype: torch.dtype) -> str | None:
        if dtype == torch.bfloat16 and not torch.cuda.is_bf16_supported():
            major, minor = torch.cuda.get_device_capability(self.device())
            return f"bfloat16 needs compute capability >= 8.0 (this GPU is sm_{major}{minor}); use float16"
        return None

    def fp8_dtype(self) -> torch.dtype | None:
        """float8_e4m3fn from compute capability 8.9 (Ada, Hopper) on."""
        return torch.float8_e4m3fn if torch.cuda.get_device_capability(self.device()) >= (8, 9) else None

    def host_buffer(self, nbytes: int) -> torch.Tensor:
        # pinned: the copy is asynchronous; torch's caching host allocator reuses a buffer only
        # after the copy that read it has run
        return torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)

    def synchronize(self) -> None:
        torch.cuda.synchronize(self.device())

    def peak_memory_during(self, fn: Callable[[], object]) -> int:
        """Run ``fn`` and return its peak allocation above what was allocated before it."""
        self.synchronize()
        baseline = torch.cuda.memory_allocated(self.device())
        torch.cuda.reset_peak_memory_stats(self.device())
        fn()
        self.synchronize()
        peak = torch.cuda.max_memory_allocated(self.device())
        torch.cuda.empty_cache()  # hand the profile's blocks back, so mem_get_info sees them free
        return max(0, peak - baseline)

    def kv_cache_bytes(self, requested_bytes: int | None, memory_utilization: float, activation_bytes: int) -> int:
        """``util * total - weights (allocated now) - activations - other processes' memory``."""
        if requested_bytes is not None:
            return requested_bytes
        device = self.device()
        free, total = torch.cuda.mem_get_info(device)
        allocated = torch.cuda.memory_allocated(device)
        others = max(0, total - free - torch.cuda.memory_reserved(device))  # other processes, CUDA context
        budget = int(memory_utilization * total) - others - allocated - activation_bytes
        if budget <= 0:
            raise ValueError(
                f"no GPU memory left for the KV cache: --gpu-memory-utilization {memory_utilization} of "
                f"{total / GiB:.1f} GiB leaves {budget / GiB:.2f} GiB after weights ({allocated / GiB:.2f} GiB), "
                f"activations ({activation_bytes / GiB:.2f} GiB) and other processes ({others / GiB:.2f} GiB); "
                "raise --gpu-memory-utilization, or lower --max-num-batched-tokens / --max-num-seqs"
            )
        return budget

    def custom_ops(self) -> CustomOps:
        """CudaOps on the csrc kernels, or the torch ops (with one warning saying why)."""
        return _custom_ops()

    def compute_units(self) -> int:
        return torch.cuda.get_device_properties(self.device()).multi_processor_count

    def supports_graphs(self) -> bool:
        return True

    def capture_graph(self, fn: Callable[[], T]) -> tuple[Callable[[], None], T]:
        """A CUDA graph of ``fn``; all graphs of this platform share one memory pool."""
        if getattr(self, "_graph_pool", None) is None:
            self._graph_pool = torch.cuda.graph_pool_handle()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._graph_pool):
            outputs = fn()
        return graph.replay, outputs

    def graph_capture_context(self) -> AbstractContextManager:
        """Synchronised side stream for ``torch.cuda.graph`` capture (which must not use the default stream)."""
        return _side_stream(self.device())


@functools.cache
def _custom_ops() -> CustomOps:
    from pagoda_platform_cuda.build import ExtensionUnavailable, load_extension
    from pagoda_platform_cuda.ops import CudaOps

    try:
        return CudaOps(load_extension())
    except ExtensionUnavailable as error:
        logger.warning("pagoda-platform-cuda: CUDA kernels unavailable (%s); using the torch ops", error)
        return CustomOps()


@contextmanager
def _side_stream(device: torch.device) -> Iterator[torch.cuda.Stream]:
    torch.cuda.synchronize(device)
    stream = torch.cuda.Stream(device)
    stream.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(stream):
        yield stream
    torch.cuda.current_stream(device).wait_stream(stream)
    torch.cuda.synchronize(device)
