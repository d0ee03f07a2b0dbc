"""CudaApiPlatform: what every platform reached through ``torch.cuda`` shares.

torch drives NVIDIA GPUs (CUDA builds) and AMD GPUs (ROCm/HIP builds) through the same
``torch.cuda`` API and device type ``cuda``: memory statistics, pinned host memory, streams
and graphs (``torch.cuda.CUDAGraph`` records a HIP graph on ROCm). pagoda-platform-cuda and
pagoda-platform-rocm subclass this and add what differs: ``check``, ``describe``, dtypes,
and their compiled kernels.
"""

from __future__ import annotations

import functools
from abc import ABC
from contextlib import AbstractContextManager, contextmanager, nullcontext as _nothing
from typing import Any, Callable, Iterator, TypeVar

import torch

from pagoda.interfaces.platform import Platform, SideWork

GiB = 1 << 30
T = TypeVar("T")


class CudaApiPlatform(Platform, ABC):
    device_type = "cuda"  # torch's device type on both CUDA and ROCm builds

    @staticmethod
    def visible_gpu() -> str | None:
        """``"cuda"`` or ``"rocm"``: the kind of GPU this torch sees (ROCm builds report theirs through
        ``torch.cuda``), or ``None`` without one."""
        if not torch.cuda.is_available():
            return None
        return "rocm" if torch.version.hip else "cuda"

    def device(self) -> torch.device:
        return torch.device("cuda", torch.cuda.current_device())

    def default_dtype(self, checkpoint_dtype: torch.dtype | None) -> torch.dtype:
        """bf16 for float32 (or unnamed) checkpoints where supported, else the checkpoint's half type."""
        bf16 = self.native_bf16()
        if checkpoint_dtype in (None, torch.float32):
            return torch.bfloat16 if bf16 else torch.float16
        if checkpoint_dtype == torch.bfloat16 and not bf16:
            return torch.float16
        return checkpoint_dtype

    @staticmethod
    def native_bf16() -> bool:
        """Whether the GPU computes bfloat16 natively (NVIDIA sm_80+, every ROCm GPU): not torch's default answer,
        which counts GPUs that only emulate it (sm_70/sm_75)."""
        return torch.cuda.is_bf16_supported(including_emulation=False)

    def host_buffer(self, nbytes: int) -> torch.Tensor:
        # pinned: the copy is asynchronous; torch's caching host allocator reuses a buffer only
        # after the copy that read it has run
        return torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)

    def copy_to_host_async(self, tensors: list[torch.Tensor], beside: bool = False) -> Callable[[], list[torch.Tensor]]:
        """Pinned host copies, queued on the current stream or (``beside``) on a
        stream of their own that waits for it, so that the current stream's next work (the next step's
        input copies) does not queue behind them."""
        hosts = [torch.empty(t.shape, dtype=t.dtype, pin_memory=True) for t in tensors]
        stream = self._copy_stream() if beside else None
        with torch.cuda.stream(stream) if stream is not None else _nothing():
            for host, tensor in zip(hosts, tensors):
                host.copy_(tensor, non_blocking=True)
                if stream is not None:
                    tensor.record_stream(stream)  # its memory is not reused before the copy ran
            done = torch.cuda.Event()
            done.record()

        def wait() -> list[torch.Tensor]:
            done.synchronize()  # releases the GIL while it waits
            return hosts

        return wait

    def _copy_stream(self) -> "torch.cuda.Stream | None":
        """The device-to-host copy stream, made to wait for the current stream; None (while capturing a
        graph): copy on the current one."""
        if torch.cuda.is_current_stream_capturing():
            return None
        stream = _copy_stream_of(torch.cuda.current_device())
        stream.wait_stream(torch.cuda.current_stream())
        return stream

    def synchronize(self) -> None:
        torch.cuda.synchronize(self.device())

    @contextmanager
    def side_work(self) -> Iterator[SideWork]:
        """On the device's transfer stream (not the sampled tokens' copy stream, whose copies are waited on
        each step), made to wait for the current stream; an event recorded at the end tells when it ran."""
        stream = _transfer_stream_of(torch.cuda.current_device())
        stream.wait_stream(torch.cuda.current_stream())
        work = _StreamWork()
        with torch.cuda.stream(stream):
            yield work
            work.event.record(stream)

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
        others = max(0, total - free - torch.cuda.memory_reserved(device))  # other processes, driver context
        budget = int(memory_utilization * total) - others - allocated - activation_bytes
        if budget <= 0:
            raise ValueError(
                f"no GPU memory left for the KV cache: --gpu-memory-utilization {memory_utilization} of "
                f"{total / GiB:.1f} GiB leaves {budget / GiB:.2f} GiB after weights ({allocated / GiB:.2f} GiB), "
                f"activations ({activation_bytes / GiB:.2f} GiB) and other processes ({others / GiB:.2f} GiB); "
                "raise --gpu-memory-utilization, or lower --max-num-batched-tokens / --max-num-seqs"
            )
        return budget

    def dist_backend(self) -> str | None:
        """NCCL on CUDA builds; ROCm builds of torch run RCCL under the same name."""
        return "nccl"

    def fast_all_reduce(self, group: Any, world_size: int) -> Any:
        """One-shot sums over symmetric (peer-to-peer) memory; None where torch or the GPUs lack it."""
        from pagoda.distributed import symm_all_reduce

        return symm_all_reduce.create(group, self.device(), world_size)

    def device_count(self) -> int:
        return torch.cuda.device_count()

    def set_device(self, local_rank: int) -> None:
        torch.cuda.set_device(local_rank)

    def compute_units(self) -> int:
        """Streaming multiprocessors (NVIDIA) or compute units (AMD)."""
        return torch.cuda.get_device_properties(self.device()).multi_processor_count

    def supports_graphs(self) -> bool:
        return True

    def allocator_counts(self) -> dict[str, int]:
        """cudaMalloc calls, and failed ones that emptied torch's cache to retry (a device-wide sync)."""
        stats = torch.cuda.memory_stats(self.device())
        return {"device_allocs": stats.get("num_device_alloc", 0), "alloc_retries": stats.get("num_alloc_retries", 0)}

    def capture_graph(self, fn: Callable[[], T]) -> tuple[Callable[[], None], T]:
        """A CUDA (or HIP) graph of ``fn``; all graphs of this platform share one memory pool."""
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._pool()):
            outputs = fn()
        return graph.replay, outputs

    def _pool(self) -> tuple[int, int]:
        if getattr(self, "_graph_pool", None) is None:
            self._graph_pool = torch.cuda.graph_pool_handle()
        return self._graph_pool

    def graph_capture_context(self) -> AbstractContextManager:
        """Synchronised side stream for ``torch.cuda.graph`` capture (which must not use the default stream)."""
        return _side_stream(self.device())


@contextmanager
def _side_stream(device: torch.device) -> Iterator[torch.cuda.Stream]:
    torch.cuda.synchronize(device)
    stream = torch.cuda.Stream(device)
    stream.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(stream):
        yield stream
    torch.cuda.current_stream(device).wait_stream(stream)
    torch.cuda.synchronize(device)


@functools.cache
def _copy_stream_of(device: int) -> "torch.cuda.Stream":
    return torch.cuda.Stream(device)


@functools.cache
def _transfer_stream_of(device: int) -> "torch.cuda.Stream":
    return torch.cuda.Stream(device)


class _StreamWork(SideWork):
    """Work on the transfer stream, up to its event."""

    def __init__(self) -> None:
        self.event = torch.cuda.Event()

    def done(self) -> bool:
        return self.event.query()

    def wait(self) -> None:
        self.event.synchronize()  # releases the GIL while it waits

    def order_before_compute(self) -> None:
        torch.cuda.current_stream().wait_event(self.event)
