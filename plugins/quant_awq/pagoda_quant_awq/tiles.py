"""The "tiles" layout: AWQ weights repacked once at load for the tensor-core kernel
(``csrc/kernels/awq_tiles.cu``), and the index math both sides share.

The kernel computes ``out = x @ W`` with ``mma.sync.m16n8k16`` (fp16/bf16 operands, fp32
accumulation) with the operands swapped: W^T is the A operand (16 output columns x 16 inputs),
the activations the B operand (16 inputs x 8 tokens), so one MMA serves up to 8 tokens. A warp owns
a *strip* of 64 output columns (four 16-column tiles) and walks K in *steps* of 16. At each step
every lane needs, for each of the four tiles, the eight A-fragment values of PTX's m16n8k16 layout
(columns ``groupID`` and ``groupID + 8``, inputs ``2t, 2t+1, 2t+8, 2t+9``): 32 values, 16 bytes of
int4. The repack puts exactly those 16 bytes at ``weights[strip, step, lane]``, so one coalesced
16-byte copy per lane per step (512 contiguous bytes per warp) feeds four MMAs.

Word ``w`` of a lane holds tile ``w`` (columns ``16w .. 16w + 15``); nibble ``p`` (bits
``4p..4p+3``) and nibble ``p + 4`` (bits ``16+4p..``) form A register ``p``: column
``groupID + 8 * (p & 1)``, inputs ``2t + 8 * (p >> 1)`` (``+1`` in the high half). So
``((word >> 4p) & 0x000F000F) | MAGIC`` is that register's two values plus a magic constant: 1024
for fp16 (``0x6400``), 128 for bf16 (``0x4300``), whose mantissa unit is 1.

Inputs come in *pairs of steps* (32 inputs) whose order is permuted: MMA input ``k`` of step ``s``
(0 or 1) of a pair is input :func:`physical_input` ``(s, k) = 8t + 4s + 2r + h`` of the 32 (for
``k = 2t + h + 8r``). So the B fragments of a lane for both steps (inputs ``2t, 2t+1, 2t+8, 2t+9``
of each) are the eight contiguous activations ``8t .. 8t + 7``: one 16-byte load per token and pair.

Per group of ``G`` inputs and strip, ``scales[group, strip, g, j]`` is the scale of column
``64 * strip + 8 * j + g`` in the model dtype (a lane's eight scales in one 16-byte load: tile
``j >> 1``, column ``g + 8 * (j & 1)``), and ``zeros[group, strip, g]`` packs that column's zero
point in nibble ``j``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from pagoda_quant_awq.packing import unpack_int4

STRIP = 64  # output columns per warp (four 16-column tiles)
STEP = 16  # K per mma step
PAIR = 2 * STEP  # inputs per pair of steps, permuted together (physical_input)
LANES = 32
WORDS = 4  # int32 per lane per step (16 bytes)
MAGIC = {torch.float16: 0x6400, torch.bfloat16: 0x4300}  # 1024.0 / 128.0: mantissa unit 1


def b_fragment_coords(lane: int, reg: int, half: int) -> tuple[int, int]:
    """PTX m16n8k16 B (16x8, .f16/.bf16): element ``b[2 * reg + half]`` of ``lane`` is (row k, col n)."""
    group, tig = lane >> 2, lane & 3
    return tig * 2 + half + 8 * reg, group


def a_fragment_coords(lane: int, reg: int, half: int) -> tuple[int, int]:
    """PTX m16n8k16 A (16x16): element ``a[2 * reg + half]`` of ``lane`` is (row m, col k)."""
    group, tig = lane >> 2, lane & 3
    return group + 8 * (reg & 1), tig * 2 + half + 8 * (reg >> 1)


def c_fragment_coords(lane: int, i: int) -> tuple[int, int]:
    """PTX m16n8k16 C/D (16x8 f32): element ``c[i]`` of ``lane`` is (row m, col n)."""
    group, tig = lane >> 2, lane & 3
    return group + 8 * (i >> 1), tig * 2 + (i & 1)


def nibble_coords(lane: int, word: int, nibble: int) -> tuple[int, int]:
    """(k within the step, column within the strip) of nibble ``nibble`` of word ``word`` of ``lane``."""
    column, k = a_fragment_coords(lane, nibble & 3, nibble >> 2)  # A = W^T: rows are output columns
    return k, 16 * word + column


def physical_input(step: int, k: int) -> int:
    """Input (0..31) of a pair of steps that MMA input ``k`` of step ``step`` (0 or 1) of the pair reads."""
    t, half, reg = (k >> 1) & 3, k & 1, k >> 3
    return 8 * t + 4 * step + 2 * reg + half


# INPUT_ORDER[16 * s + k]: the input of the pair behind MMA input k of step s of the pair
INPUT_ORDER = torch.tensor([physical_input(s, k) for s in range(2) for k in range(STEP)])


def _step_permutation() -> torch.Tensor:
    """``[32 lanes, 4 words, 8 nibbles]`` -> flat index ``k * 64 + n`` in a 16 x 64 block of W."""
    perm = torch.empty(LANES, WORDS, 8, dtype=torch.long)
    for lane in range(LANES):
        for word in range(WORDS):
            for nibble in range(8):
                k, n = nibble_coords(lane, word, nibble)
                perm[lane, word, nibble] = k * STRIP + n
    return perm


PERMUTATION = _step_permutation()


@dataclass
class AwqTiles:
    """One linear layer's weights in the tiles layout (on the device the kernel runs on)."""

    weights: torch.Tensor  # int32 [N/64, K/16, 32, 4]
    scales: torch.Tensor  # model dtype [K/G, N/64, 8, 8]
    zeros: torch.Tensor  # int32 [K/G, N/64, 8], nibble j: column 64 * strip + 8 * j + g
    locks: torch.Tensor  # int32 [N/64], zero between calls: split-K arrival counters
    group_size: int

    @property
    def k(self) -> int:
        return self.weights.shape[1] * STEP

    @property
    def n(self) -> int:
        return self.weights.shape[0] * STRIP

    @property
    def dtype(self) -> torch.dtype:
        return self.scales.dtype


def tiles_fit(k: int, n: int, group_size: int) -> str | None:
    """``None`` if an ``[k, n]`` weight can use the tiles layout, else why not."""
    if n % STRIP:
        return f"{n} output features are not a multiple of {STRIP}"
    if k % group_size or group_size % PAIR:
        return f"{k} input features do not split into groups of {group_size} (a multiple of {PAIR})"
    return None


def _pack_nibbles(values: torch.Tensor) -> torch.Tensor:
    """``[..., 8]`` ints 0..15 -> ``[...]`` int32, value ``i`` in bits ``4i..4i+3``."""
    shifts = torch.arange(0, 32, 4, dtype=torch.int64, device=values.device)
    words = (values.to(torch.int64) << shifts).sum(-1)
    return torch.where(words >= 2**31, words - 2**32, words).to(torch.int32)


def repack_weights(q: torch.Tensor) -> torch.Tensor:
    """Unpacked ``[K, N]`` values 0..15 -> int32 ``[N/64, K/16, 32, 4]`` (the kernel's A order)."""
    k, n = q.shape
    q = q.reshape(k // PAIR, PAIR, n)[:, INPUT_ORDER.to(q.device)].reshape(k, n)  # rows in MMA order
    blocks = q.reshape(k // STEP, STEP, n // STRIP, STRIP).permute(2, 0, 1, 3)  # [N/64, K/16, 16, 64]
    flat = blocks.reshape(n // STRIP, k // STEP, STEP * STRIP)
    perm = PERMUTATION.to(q.device).reshape(-1)
    return _pack_nibbles(flat[:, :, perm].reshape(n // STRIP, k // STEP, LANES, WORDS, 8))


def repack(qweight: torch.Tensor, qzeros: torch.Tensor, scales: torch.Tensor, group_size: int,
           dtype: torch.dtype) -> AwqTiles:
    """AutoAWQ GEMM tensors -> :class:`AwqTiles` for a model computing in ``dtype`` (fp16/bf16)."""
    return repack_values(lambda k0, k1: unpack_int4(qweight[k0:k1]), qweight.shape[0], unpack_int4(qzeros), scales,
                         group_size, dtype)


def repack_values(rows_of: Callable[[int, int], torch.Tensor], k: int, z: torch.Tensor, scales: torch.Tensor,
                  group_size: int, dtype: torch.dtype) -> AwqTiles:
    """Unpacked 4-bit weights -> :class:`AwqTiles`: ``rows_of(k0, k1)`` gives rows ``k0 .. k1 - 1`` of q
    (``[k1 - k0, N]`` values 0..15, asked for in chunks so that a large layer is never unpacked whole),
    ``z`` the zero points ``[K/G, N]`` (0..15), ``scales`` ``[K/G, N]``. Other formats of grouped 4-bit
    weights (pagoda-quant-gptq) share the kernels through this."""
    if dtype not in MAGIC:
        raise ValueError(f"the tiles layout is for fp16/bf16 models, not {dtype}")
    n = scales.shape[1]
    reason = tiles_fit(k, n, group_size)
    if reason:
        raise ValueError(f"AWQ weight [{k}, {n}] cannot use the tiles layout: {reason}")
    weights = torch.empty(n // STRIP, k // STEP, LANES, WORDS, dtype=torch.int32, device=scales.device)
    rows = max(PAIR, (1 << 24) // n // PAIR * PAIR)  # bound the unpacked temporaries (~16M values)
    for k0 in range(0, k, rows):
        weights[:, k0 // STEP:(k0 + rows) // STEP] = repack_weights(rows_of(k0, min(k0 + rows, k)))
    by_column = z.reshape(k // group_size, n // STRIP, 8, 8).transpose(2, 3)  # [K/G, strip, g, j]
    packed_scales = scales.reshape(k // group_size, n // STRIP, 8, 8).transpose(2, 3).to(dtype).contiguous()
    return AwqTiles(weights=weights, scales=packed_scales, zeros=_pack_nibbles(by_column).contiguous(),
                    locks=torch.zeros(n // STRIP, dtype=torch.int32, device=scales.device), group_size=group_size)


def unpack_tiles(tiles: AwqTiles) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Inverse of the repack: (q ``[K, N]``, zeros ``[K/G, N]``, scales ``[K/G, N]``), for tests."""
    weights = tiles.weights.to(torch.int64) & 0xFFFFFFFF  # [N/64, K/16, 32, 4]
    nibbles = (weights[..., None] >> torch.arange(0, 32, 4, device=weights.device)) & 0xF  # [.., 32, 4, 8]
    strips, steps = weights.shape[:2]
    block = torch.empty(strips, steps, STEP * STRIP, dtype=torch.int64, device=weights.device)
    block[:, :, PERMUTATION.reshape(-1).to(weights.device)] = nibbles.reshape(strips, steps, -1)
    mma_order = block.reshape(strips, steps // 2, PAIR, STRIP)
    q = torch.empty_like(mma_order)
    q[:, :, INPUT_ORDER.to(weights.device)] = mma_order
    q = q.permute(1, 2, 0, 3).reshape(steps * STEP, strips * STRIP)
    groups = tiles.zeros.shape[0]
    zw = tiles.zeros.to(torch.int64) & 0xFFFFFFFF  # [K/G, strip, g]
    z = (zw[..., None] >> torch.arange(0, 32, 4, device=zw.device)) & 0xF  # [K/G, strip, g, j]
    z = z.transpose(2, 3).reshape(groups, -1)
    s = tiles.scales.transpose(2, 3).reshape(groups, -1)
    return q, z, s


def dequantize_tiles(tiles: AwqTiles, dtype: torch.dtype | None = None) -> torch.Tensor:
    """W ``[K, N]``: ``(q - z) * s`` with the stored (model-dtype) scale, exact, then rounded once to
    ``dtype`` (default the tiles' dtype: the weights the dequantizing kernels compute; float64: the
    weights the fold path applies to fp32 sums)."""
    q, z, s = unpack_tiles(tiles)
    g = tiles.group_size
    w = (q - z.repeat_interleave(g, 0)).double() * s.double().repeat_interleave(g, 0)
    return w.to(dtype or tiles.dtype)
