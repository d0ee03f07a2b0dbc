"""Dequantize GGUF tensors in torch, vectorised over all blocks of a tensor at once.

Each ggml type stores a row of ``n`` values as ``n / block`` blocks of fixed size. The layouts
(little-endian; ``f16`` scales; ``QK_K = 256``):

- ``Q4_0`` (32 values): ``d``, 16 bytes of nibbles; value ``(q - 8) * d``. Nibble order: the low
  nibbles of the 16 bytes are values 0-15, the high nibbles values 16-31 (all 32-value types).
- ``Q4_1``: ``d``, ``m``, nibbles; ``q * d + m``.
- ``Q5_0``: ``d``, a 32-bit word of fifth bits (bit ``i`` for value ``i``), nibbles; ``(q - 16) * d``.
- ``Q5_1``: ``d``, ``m``, the fifth bits, nibbles; ``q * d + m``.
- ``Q8_0``: ``d``, 32 signed bytes; ``q * d``.
- ``Q2_K``: 16 bytes of (4-bit scale, 4-bit min) per 16 values, 64 bytes of 2-bit values, ``d``,
  ``dmin``; ``d * scale * q - dmin * min``.
- ``Q3_K``: 32 bytes of high bits, 64 bytes of 2-bit values, 12 bytes holding sixteen 6-bit scales,
  ``d``; ``d * (scale - 32) * (q - 4 * (1 - high bit))``.
- ``Q4_K``: ``d``, ``dmin``, 12 bytes holding eight 6-bit (scale, min) pairs, 128 bytes of nibbles;
  ``d * scale * q - dmin * min`` per 32 values.
- ``Q5_K``: as ``Q4_K`` with 32 bytes of fifth bits before the nibbles.
- ``Q6_K``: 128 bytes of low nibbles, 64 bytes of 2-bit high parts, 16 signed 8-bit scales, ``d``;
  ``d * scale * (q - 32)`` per 16 values.

Within a 256-value super-block, the 2-bit, 4-bit and 6-bit types interleave: the values are
taken in halves of 128 (``Q2_K``, ``Q3_K``, ``Q6_K``) or chunks of 64 (``Q4_K``, ``Q5_K``) whose
bytes hold several consecutive groups of 32 at different bit positions.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np
import torch

from pagoda.errors import ModelLoadError

F32, F16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 = 0, 1, 2, 3, 6, 7, 8
Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, BF16 = 10, 11, 12, 13, 14, 30
TYPE_NAMES = {F32: "F32", F16: "F16", BF16: "BF16", Q4_0: "Q4_0", Q4_1: "Q4_1", Q5_0: "Q5_0", Q5_1: "Q5_1",
              Q8_0: "Q8_0", Q2_K: "Q2_K", Q3_K: "Q3_K", Q4_K: "Q4_K", Q5_K: "Q5_K", Q6_K: "Q6_K"}
BLOCKS: dict[int, tuple[int, int]] = {  # ggml type -> (values per block, bytes per block)
    F32: (1, 4), F16: (1, 2), BF16: (1, 2),
    Q4_0: (32, 18), Q4_1: (32, 20), Q5_0: (32, 22), Q5_1: (32, 24), Q8_0: (32, 34),
    Q2_K: (256, 84), Q3_K: (256, 110), Q4_K: (256, 144), Q5_K: (256, 176), Q6_K: (256, 210),
}


def type_name(ggml_type: int) -> str:
    return TYPE_NAMES.get(ggml_type, f"type {ggml_type}")


def _unsupported(ggml_type: int) -> ModelLoadError:
    return ModelLoadError(
        f"GGUF tensors of {type_name(ggml_type)} are not supported (Pagoda reads "
        f"{', '.join(TYPE_NAMES.values())}); convert the model to one of those, e.g. Q4_K_M or Q8_0."
    )


def tensor_nbytes(ggml_type: int, shape: tuple[int, ...]) -> int:
    """Bytes a tensor of ``shape`` occupies in the file."""
    if ggml_type not in BLOCKS:
        raise _unsupported(ggml_type)
    values, size = BLOCKS[ggml_type]
    return math.prod(shape) // values * size


def dequantize(raw: np.ndarray | torch.Tensor, ggml_type: int, shape: tuple[int, ...]) -> torch.Tensor:
    """The float32 tensor of ``shape`` stored in ``raw`` (its uint8 bytes) as ``ggml_type``."""
    if ggml_type not in BLOCKS:
        raise _unsupported(ggml_type)
    if isinstance(raw, np.ndarray):
        raw = torch.from_numpy(np.array(raw, dtype=np.uint8, copy=True))  # off the (read-only) memory map
    data = raw.contiguous()
    if ggml_type in (F32, F16, BF16):
        plain = {F32: torch.float32, F16: torch.float16, BF16: torch.bfloat16}[ggml_type]
        return data.view(plain).float().reshape(shape)
    values, size = BLOCKS[ggml_type]
    blocks = data.view(-1, size)  # [num_blocks, bytes per block]
    return DEQUANTIZERS[ggml_type](blocks).reshape(shape)


def _f16(blocks: torch.Tensor, at: int) -> torch.Tensor:
    """The f16 at byte ``at`` of each block, as float32 [num_blocks, 1]."""
    return blocks[:, at : at + 2].contiguous().view(torch.float16).float()


def _nibbles(qs: torch.Tensor) -> torch.Tensor:
    """[..., n] bytes -> [..., 2 * n] values: all low nibbles, then all high nibbles."""
    return torch.cat((qs & 0x0F, qs >> 4), dim=-1).int()


def _bits(word_bytes: torch.Tensor, count: int) -> torch.Tensor:
    """[nb, count / 8] bytes -> [nb, count] bits, bit ``i`` of the little-endian word first."""
    shifts = torch.arange(8, dtype=torch.uint8)
    return ((word_bytes[:, :, None] >> shifts) & 1).reshape(word_bytes.shape[0], count).int()


def _q4_0(b: torch.Tensor) -> torch.Tensor:
    return (_nibbles(b[:, 2:18]) - 8) * _f16(b, 0)


def _q4_1(b: torch.Tensor) -> torch.Tensor:
    return _nibbles(b[:, 4:20]) * _f16(b, 0) + _f16(b, 2)


def _q5_0(b: torch.Tensor) -> torch.Tensor:
    q = _nibbles(b[:, 6:22]) | (_bits(b[:, 2:6], 32) << 4)
    return (q - 16) * _f16(b, 0)


def _q5_1(b: torch.Tensor) -> torch.Tensor:
    q = _nibbles(b[:, 8:24]) | (_bits(b[:, 4:8], 32) << 4)
    return q * _f16(b, 0) + _f16(b, 2)


def _q8_0(b: torch.Tensor) -> torch.Tensor:
    return b[:, 2:34].contiguous().view(torch.int8).float() * _f16(b, 0)


def _crumbs(qs: torch.Tensor) -> torch.Tensor:
    """[nb, 64] bytes of 2-bit values -> [nb, 2 halves, 4 shifts, 32] (value 128 h + 32 s + l)."""
    shifts = torch.arange(0, 8, 2, dtype=torch.uint8)[None, None, :, None]
    return ((qs.reshape(-1, 2, 1, 32) >> shifts) & 3).int()


def _q2_k(b: torch.Tensor) -> torch.Tensor:
    sc = b[:, 0:16].reshape(-1, 2, 4, 2, 1).int()  # one (scale, min) byte per 16 values
    q = _crumbs(b[:, 16:80]).reshape(-1, 2, 4, 2, 16)
    y = _f16(b, 80)[:, :, None, None, None] * (sc & 0xF) * q - _f16(b, 82)[:, :, None, None, None] * (sc >> 4)
    return y.reshape(-1, 256)


def _q3_k_scales(s: torch.Tensor) -> torch.Tensor:
    """12 bytes -> 16 signed 6-bit scales: low 4 bits from bytes 0-7 (low then high nibbles),
    high 2 bits of scale ``i`` at bits ``2 * (i // 4)`` of byte ``8 + i % 4``."""
    low = _nibbles(s[:, 0:8])  # [nb, 16]
    shifts = torch.arange(0, 8, 2, dtype=torch.uint8)[None, :, None]
    high = ((s[:, None, 8:12] >> shifts) & 3).reshape(-1, 16).int()
    return (low | (high << 4)) - 32


def _q3_k(b: torch.Tensor) -> torch.Tensor:
    hmask = b[:, 0:32]  # bit (4 h + s) of byte l: high bit of value 128 h + 32 s + l
    shifts = torch.arange(8, dtype=torch.uint8).reshape(1, 2, 4, 1)
    high = ((hmask[:, None, None, :] >> shifts) & 1).int()  # [nb, 2, 4, 32]
    q = (_crumbs(b[:, 32:96]) - 4 * (1 - high)).reshape(-1, 2, 4, 2, 16)
    scales = _q3_k_scales(b[:, 96:108]).reshape(-1, 2, 4, 2, 1)
    return (_f16(b, 108)[:, :, None, None, None] * scales * q).reshape(-1, 256)


def _k_scale_min(s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """12 bytes -> eight 6-bit scales and eight 6-bit mins ([nb, 8] each). Pairs 0-3: low 6 bits of
    bytes 0-3 (scales) and 4-7 (mins); pairs 4-7: nibbles of bytes 8-11, top 2 bits from the top
    2 bits of bytes 0-3 (scales) and 4-7 (mins)."""
    s = s.int()
    scale = torch.cat((s[:, 0:4] & 63, (s[:, 8:12] & 0xF) | ((s[:, 0:4] >> 6) << 4)), dim=1)
    minimum = torch.cat((s[:, 4:8] & 63, (s[:, 8:12] >> 4) | ((s[:, 4:8] >> 6) << 4)), dim=1)
    return scale, minimum


def _k_nibbles(qs: torch.Tensor) -> torch.Tensor:
    """[nb, 128] bytes -> [nb, 8, 32]: chunk ``c`` of 32 bytes gives groups 2c (low) and 2c+1 (high)."""
    return _nibbles(qs.reshape(-1, 4, 32)).reshape(-1, 8, 32)


def _q4_k(b: torch.Tensor) -> torch.Tensor:
    scale, minimum = _k_scale_min(b[:, 4:16])
    d, dmin = _f16(b, 0), _f16(b, 2)
    y = (d * scale)[:, :, None] * _k_nibbles(b[:, 16:144]) - (dmin * minimum)[:, :, None]
    return y.reshape(-1, 256)


def _q5_k(b: torch.Tensor) -> torch.Tensor:
    scale, minimum = _k_scale_min(b[:, 4:16])
    d, dmin = _f16(b, 0), _f16(b, 2)
    shifts = torch.arange(8, dtype=torch.uint8)[None, :, None]
    fifth = ((b[:, None, 16:48] >> shifts) & 1).int()  # [nb, 8 groups, 32]: bit g of byte l
    q = _k_nibbles(b[:, 48:176]) | (fifth << 4)
    return ((d * scale)[:, :, None] * q - (dmin * minimum)[:, :, None]).reshape(-1, 256)


def _q6_k(b: torch.Tensor) -> torch.Tensor:
    ql = b[:, 0:128].reshape(-1, 2, 2, 32)  # [nb, half, 2, 32]
    low = torch.cat((ql & 0xF, ql >> 4), dim=2).int()  # [nb, half, 4 quarters, 32]
    shifts = torch.arange(0, 8, 2, dtype=torch.uint8)[None, None, :, None]
    high = ((b[:, 128:192].reshape(-1, 2, 1, 32) >> shifts) & 3).int()  # [nb, half, 4, 32]
    q = ((low | (high << 4)) - 32).reshape(-1, 2, 4, 2, 16)
    scales = b[:, 192:208].contiguous().view(torch.int8).reshape(-1, 2, 4, 2, 1).float()
    return (_f16(b, 208)[:, :, None, None, None] * scales * q).reshape(-1, 256)


DEQUANTIZERS: dict[int, Callable[[torch.Tensor], torch.Tensor]] = {
    Q4_0: _q4_0, Q4_1: _q4_1, Q5_0: _q5_0, Q5_1: _q5_1, Q8_0: _q8_0,
    Q2_K: _q2_k, Q3_K: _q3_k, Q4_K: _q4_k, Q5_K: _q5_k, Q6_K: _q6_k,
}
