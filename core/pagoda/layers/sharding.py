"""Checkpoint tensors as loaders hand them over: a torch.Tensor, or a lazy slice of a file.

Under tensor parallelism a layer keeps part of each checkpoint tensor. Readers that can read
part of a tensor (safetensors) hand over a :class:`LazyTensor`, so a rank reads only its slice;
layers narrow it with :func:`narrow` and copy it with ``copy_checked`` (which materializes it).
"""

from __future__ import annotations

from typing import Protocol, Union, runtime_checkable

import torch

from pagoda.errors import ModelLoadError


@runtime_checkable
class LazyTensor(Protocol):
    """A checkpoint tensor not read yet."""

    shape: tuple[int, ...]

    def narrow(self, dim: int, start: int, length: int) -> "LazyTensor": ...

    def materialize(self) -> torch.Tensor: ...


CheckpointTensor = Union[torch.Tensor, LazyTensor]


def narrow(tensor: CheckpointTensor, dim: int, start: int, length: int) -> CheckpointTensor:
    """``tensor.narrow(dim, start, length)``, for tensors and lazy slices alike."""
    if length > tensor.shape[dim] - start:
        raise ModelLoadError(f"cannot take [{start}, {start + length}) of a checkpoint axis of {tensor.shape[dim]}")
    return tensor.narrow(dim, start, length)


def materialize(tensor: CheckpointTensor) -> torch.Tensor:
    """The data of ``tensor`` (reads a lazy slice from its file)."""
    return tensor if isinstance(tensor, torch.Tensor) else tensor.materialize()
