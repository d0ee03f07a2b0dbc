"""Argmax over the vocabulary for the few rows of a decode step.

torch reduces each row of ``x.argmax(-1)`` in one thread block: a batch-1 step's 128k-entry row
takes about 28 us on an H100, on one of its 132 SMs (2026-11-27 profile). ``argmax`` splits such a
row into ``groups`` slices, takes each slice's max and its first index in parallel, then the first
slice holding the largest: the same index as ``torch.argmax``, ties (the first) and NaN (the first)
included, since both stages keep the first of equals and a NaN beats every number. On a GPU with
Triton those four kernels are one launch (``argmax_triton``; where it fails to compile: torch's).
"""

from __future__ import annotations

import logging

import torch

from pagoda.triton_support import triton_installed

logger = logging.getLogger(__name__)
_failed = False  # the Triton argmax raised once: torch's kernels from then on
SPLIT_ROWS = 32  # from this many rows on, torch's one-block-per-row reduction fills the GPU well enough
MIN_SLICE = 256  # entries a slice keeps at least


def argmax(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """``torch.argmax(x, dim=-1)`` (into ``out`` if given, an int64 tensor of ``x.shape[:-1]``)."""
    vocab = x.shape[-1]
    rows = x.numel() // max(vocab, 1)
    if 0 < rows < SPLIT_ROWS and vocab > 0 and _one_launch(x):
        index = out.view(rows) if out is not None else torch.empty(rows, dtype=torch.int64, device=x.device)
        flat = x.reshape(rows, vocab)
        if _launched(flat if flat.stride(-1) == 1 else flat.contiguous(), index):
            return index.view(x.shape[:-1])
    groups = _groups(rows, vocab)
    if groups == 1:
        return torch.argmax(x, dim=-1, out=out)
    width = vocab // groups
    best, first = x.reshape(rows, groups, width).max(dim=2)  # [rows, groups]: each slice's max, its first index
    group = best.argmax(dim=1, keepdim=True)  # [rows, 1]
    index = out.view(rows, 1) if out is not None else torch.empty_like(group)
    torch.add(first.gather(1, group), group, alpha=width, out=index)
    return index.view(x.shape[:-1])


def _one_launch(x: torch.Tensor) -> bool:
    """A GPU's few rows in one Triton launch (argmax_triton), unless it failed before."""
    return x.device.type == "cuda" and triton_installed() and not _failed


def _launched(x: torch.Tensor, out: torch.Tensor) -> bool:
    """Whether the Triton argmax wrote ``out``; if it cannot compile here (a GPU its Triton does not serve
    as on NVIDIA's, where it was measured), say so once and leave every later call to torch's kernels."""
    global _failed
    try:
        from pagoda.layers.argmax_triton import argmax_rows

        argmax_rows(x, out)
        return True
    except Exception as error:  # noqa: BLE001 - a compile error of any kind: torch's path is exact too
        _failed = True
        logger.warning("The one-launch argmax failed (%s: %s); using torch's kernels", type(error).__name__, error)
        return False


def _groups(rows: int, vocab: int) -> int:
    """The most slices (a power of two, 256 at most) that divide ``vocab`` evenly and keep
    ``MIN_SLICE`` entries each; 1 (torch's own argmax) for many rows or a row that does not split."""
    if rows == 0 or rows >= SPLIT_ROWS:
        return 1
    groups = 256
    while groups > 1 and (vocab % groups or vocab // groups < MIN_SLICE):
        groups //= 2
    return groups
