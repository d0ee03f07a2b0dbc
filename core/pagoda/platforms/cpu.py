"""The built-in CPU platform: always available, runs everything with torch ops."""

from __future__ import annotations

import os

import torch

from pagoda.interfaces.platform import Platform

DEFAULT_CPU_KV_CACHE_BYTES = 4 << 30


class CpuPlatform(Platform):
    description = "CPU with torch ops (always available)"
    priority = 0
    device_type = "cpu"

    @classmethod
    def check(cls) -> str | None:
        return None

    def device(self) -> torch.device:
        return torch.device("cpu")

    def describe(self) -> str:
        return f"CPU ({os.cpu_count()} cores, {torch.get_num_threads()} torch threads)"

    def supports_dtype(self, dtype: torch.dtype) -> str | None:
        if dtype == torch.float16:
            return "float16 matmuls are slow and inexact on CPU; use float32 or bfloat16"
        return None

    def dist_backend(self) -> str | None:
        return "gloo"

    def device_count(self) -> int:
        """CPU ranks are processes: as many as there are cores."""
        return os.cpu_count() or 1

    def kv_cache_bytes(self, requested_bytes: int | None, memory_utilization: float, activation_bytes: int) -> int:
        """CPU memory is shared with everything else: use the explicit size or a 4 GiB default."""
        return requested_bytes if requested_bytes is not None else DEFAULT_CPU_KV_CACHE_BYTES
