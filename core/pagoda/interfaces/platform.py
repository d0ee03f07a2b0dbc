"""Platform: everything that differs between CPU, CUDA and ROCm lives behind this class."""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Iterator, TypeVar

import torch

from pagoda.interfaces.base import Capability

if TYPE_CHECKING:
    from pagoda.interfaces.ops import CustomOps

T = TypeVar("T")


class SideWork:
    """Device work queued beside the compute stream (:meth:`Platform.side_work`); here, already done."""

    def done(self) -> bool:
        """Whether the work finished (never blocks)."""
        return True

    def wait(self) -> None:
        """Block the host until the work finished."""

    def order_before_compute(self) -> None:
        """Make the compute work queued from now on wait for this work (on the device, not the host)."""


class Platform(Capability, ABC):
    """A device family Pagoda runs on.

    Implement ``check`` (is this platform usable on this machine?), ``device`` and
    ``kv_cache_bytes``; override the rest where the defaults (CPU-like) do not fit.
    One instance is created per engine.
    """

    device_type: ClassVar[str] = "cpu"  # the torch device type

    @classmethod
    @abstractmethod
    def check(cls) -> str | None:
        """Return ``None`` if usable here, else a one-line reason (e.g. "no CUDA device found")."""

    @abstractmethod
    def device(self) -> torch.device:
        """The torch device that model weights and the KV cache live on."""

    @abstractmethod
    def kv_cache_bytes(self, requested_bytes: int | None, memory_utilization: float, activation_bytes: int) -> int:
        """Bytes to give the KV cache, called after the model is loaded and profiled.

        ``requested_bytes`` is an explicit user choice (``kv_cache_memory``); otherwise use
        ``memory_utilization`` of the device memory minus what is allocated now (weights) and
        ``activation_bytes`` (the peak a forward of the largest batch needs beyond that).
        """

    def peak_memory_during(self, fn: Callable[[], object]) -> int:
        """Device bytes ``fn`` needs at its peak beyond what was allocated before it ran.

        Platforms that size memory from a measurement (CUDA, ROCm) run ``fn`` (a dummy forward of
        the largest batch); the default neither runs it nor measures anything and returns 0.
        """
        return 0

    def describe(self) -> str:
        """One line for start-up logs, e.g. ``"NVIDIA H100 80GB HBM3 (sm_90, 79.1 GiB)"``."""
        return self.device_type

    def default_dtype(self, checkpoint_dtype: torch.dtype | None) -> torch.dtype:
        """The model dtype for ``dtype="auto"``, given the checkpoint's (``None`` if it names none).

        The default (CPU) computes in float32; GPU platforms prefer the checkpoint's half type.
        """
        return torch.float32

    def supports_dtype(self, dtype: torch.dtype) -> str | None:
        """``None`` if model weights may use ``dtype`` here, else the reason."""
        return None

    def fp8_dtype(self) -> torch.dtype | None:
        """The FP8 e4m3 dtype this device computes in, or ``None`` if it has no FP8 arithmetic.

        ``float8_e4m3fn`` on NVIDIA sm_89+ and AMD gfx950; ``float8_e4m3fnuz`` on AMD gfx942
        (other exponent bias, no infinities): FP8 code asks here rather than assuming one.
        """
        return None

    def compute_capability(self) -> tuple[int, int] | None:
        """The NVIDIA compute capability ``(major, minor)`` of the device, or ``None`` on every other device
        (CPUs, AMD GPUs): kernels with an NVIDIA architecture floor compare against this, not torch's."""
        return None

    def csrc_kernel_reason(self, name: str) -> str | None:
        """``None`` if the csrc kernels ``name`` are built for this platform, else why not.

        ``name`` is a path, file stem or folder of ``csrc/manifest.txt`` (e.g. ``"attention"``);
        a backend or quantization method that needs csrc kernels returns this from its ``check``.
        """
        return f"the {self.device_type} platform builds no csrc kernels"

    def custom_ops(self) -> "CustomOps":
        """The fused non-attention kernels (RMSNorm, rotary, SiLU-and-mul, KV write)."""
        from pagoda.interfaces.ops import CustomOps

        return CustomOps()

    def compute_units(self) -> int:
        """Units that run kernels in parallel (streaming multiprocessors on GPUs, cores on CPUs)."""
        return os.cpu_count() or 1

    def host_buffer(self, nbytes: int) -> torch.Tensor:
        """A host byte buffer for a step's inputs, copied to the device once per step.

        Pinned (page-locked) where the device copies from it without staging (CUDA, ROCm);
        a new buffer each call (the platform's allocator may recycle them once copied).
        """
        return torch.empty(nbytes, dtype=torch.uint8)

    def prepare_process(self) -> None:
        """Process-wide settings the platform computes best with, made once in each process that loads a model
        shard, before its weights (the CPU's host allocator, for one). Default: none."""

    def kv_cache_tensor(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        """One layer's KV cache, zeroed (attention masks unwritten slots, but a NaN there would still poison
        the weighted sum). Platforms whose memory is committed lazily may return pages the OS zeroes on first
        touch, so memory grows with the blocks actually used."""
        return torch.zeros(shape, dtype=dtype, device=self.device())

    def allocator_counts(self) -> dict[str, int]:
        """Cumulative counts of device-allocator events that cost host time, for traces
        (``PAGODA_TRACE_DIR``): e.g. device allocations, and allocations retried after freeing the cache."""
        return {}

    def synchronize(self) -> None:
        """Wait for queued device work (a no-op where execution is synchronous)."""

    def copy_to_host_async(self, tensors: list[torch.Tensor], beside: bool = False) -> Callable[[], list[torch.Tensor]]:
        """Start copying ``tensors`` to host memory behind the work queued so far; return a
        function that waits for the copies and returns the host tensors.

        Lets the engine queue the next step before it reads this one's sampled tokens. ``beside``: no
        later work writes these tensors (they are new, not buffers used again), so the platform may copy them
        beside the work queued after them rather than ahead of it. The default (synchronous devices) hands
        the tensors back as they are.
        """
        return lambda: tensors

    @contextmanager
    def side_work(self) -> Iterator[SideWork]:
        """Queue the device work of the ``with`` block (copies between host and device, small kernels) on a
        stream of the platform's own, behind the compute work queued so far and beside the compute work queued
        after it; the :class:`SideWork` it yields tells when it finished. KV connectors move blocks this way.
        The default (synchronous devices) runs it in place: done when the block ends."""
        yield SideWork()

    def inference_context(self) -> AbstractContextManager:
        """A context wrapped around each model step (``torch.inference_mode`` by default)."""
        return torch.inference_mode()

    def graph_capture_context(self) -> AbstractContextManager:
        """Context for capturing a step as a device graph; platforms without graphs ignore it."""
        return nullcontext()

    def overlaps_steps(self) -> bool:
        """``overlap_steps``'s default: schedule step N+1 on the host while the device runs step N. It pays where the
        device computes apart from the host; the CPU platform says no (its device is the host's cores)."""
        return True

    def supports_graphs(self) -> bool:
        """Whether decode steps can be captured as device graphs (CUDA graphs, HIP graphs)."""
        return False

    def dependent_launch(self) -> bool:
        """Whether Python-launched kernels (Triton's) may be programmatic dependents of the kernel before
        them (CUDA sm_90+); the csrc kernels decide for themselves. False by default."""
        return False

    def dist_backend(self) -> str | None:
        """The torch.distributed backend for tensor-parallel collectives (``"nccl"``, ``"gloo"``), or
        ``None`` if this platform has none (then only ``tensor_parallel_size=1`` runs on it)."""
        return None

    def fast_all_reduce(self, group: Any, world_size: int) -> Any:
        """Called by every rank of a one-host group together: a
        :class:`~pagoda.interfaces.parallel.FastAllReduce` (``fits(x)``, ``__call__(x)``: the sum over the
        ranks; optionally ``add_rms_norm``: the sum fused with the residual add and RMSNorm after it) that
        beats the backend on small messages, or None (the backend's only)."""
        return None

    def device_count(self) -> int:
        """Devices of this kind on this host (one tensor-parallel rank per device)."""
        return 1

    def set_device(self, local_rank: int) -> None:
        """Make device ``local_rank`` of this host the one :meth:`device` returns in this process."""

    def capture_graph(self, fn: Callable[[], T]) -> tuple[Callable[[], None], T]:
        """Record ``fn``'s device work once; return ``(replay, outputs)``.

        ``replay()`` reruns the recorded work on whatever the input buffers hold now and
        refills ``outputs`` (the tensors ``fn`` returned). Only called when ``supports_graphs()``.
        """
        raise NotImplementedError(f"{type(self).__name__} has no device graphs")

