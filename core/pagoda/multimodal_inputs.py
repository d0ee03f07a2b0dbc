"""A request's processed images as they travel from the front end to the engine core (msgspec structs).

Each :class:`MultimodalItem` is one encoder input (an image, or one crop of it) and the run of
placeholder tokens it fills in the prompt: ``prompt_token_ids[offset : offset + length]``. Its
``content_hash`` names its pixels: the encoder cache keeps its outputs under it, and the prefix cache
mixes it into the hashes of the KV blocks holding its placeholders, so prompts with the same text and
different images never share KV.
"""

from __future__ import annotations

import hashlib

import msgspec
import torch


class TensorData(msgspec.Struct, array_like=True, frozen=True):
    """A tensor as bytes (C order), its dtype name (``float32``) and shape."""

    dtype: str
    shape: list[int]
    data: bytes

    @classmethod
    def of(cls, tensor: torch.Tensor) -> "TensorData":
        t = tensor.detach().cpu().contiguous()
        return cls(str(t.dtype).removeprefix("torch."), list(t.shape), t.reshape(-1).view(torch.uint8).numpy().tobytes()
                   if t.numel() else b"")

    def tensor(self) -> torch.Tensor:
        dtype = getattr(torch, self.dtype)
        if not self.data:
            return torch.empty(self.shape, dtype=dtype)
        return torch.frombuffer(bytearray(self.data), dtype=dtype).reshape(self.shape)


class MultimodalItem(msgspec.Struct, array_like=True, frozen=True):
    """One encoder input and where its placeholder run sits in the prompt (module docstring)."""

    modality: str  # "image"
    offset: int  # index of its first placeholder token in the prompt
    length: int  # placeholder tokens it fills
    content_hash: str
    tensors: dict[str, TensorData]

    @property
    def end(self) -> int:
        return self.offset + self.length

    def inputs(self) -> dict[str, torch.Tensor]:
        """The encoder input as tensors (``MultimodalModel.encode_images`` takes a list of these)."""
        return {name: data.tensor() for name, data in self.tensors.items()}


def content_hash(tensors: dict[str, torch.Tensor]) -> str:
    """A digest of the tensors' names, dtypes, shapes and values."""
    digest = hashlib.sha256()
    for name in sorted(tensors):
        t = tensors[name].detach().cpu().contiguous()
        digest.update(f"{name}:{t.dtype}:{tuple(t.shape)};".encode())
        digest.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return digest.hexdigest()
