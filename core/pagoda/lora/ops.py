"""The LoRA product of a step's rows: the Triton kernels where they run, else the torch reference.

Both add ``(x A_s^T) B_s^T`` of each row's adapter slot to every output slice ``s`` of a layer (see
:mod:`pagoda.lora.triton_kernels` for the shapes). The torch reference computes one matrix product per
slot and slice over that slot's rows (:attr:`LoRAPlan.groups`); a graph plan (no groups) gathers each
decode row's matrices instead.
"""

from __future__ import annotations

from typing import Callable

import torch

from pagoda.lora.plan import LoRAPlan
from pagoda.triton_support import interpreting, triton_installed

# (y, x, a, b, slices [S, 2] on the device, their host copy, plan) -> y
LoRAKernel = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor,
                       list[tuple[int, int]], LoRAPlan], torch.Tensor]


def triton_usable(device: torch.device) -> bool:
    """Whether the Triton kernels run on ``device``: a GPU (CUDA or ROCm) with triton installed, or any
    device under ``TRITON_INTERPRET=1``."""
    return triton_installed() and (device.type == "cuda" or interpreting())


def select_kernel(device: torch.device) -> tuple[LoRAKernel, bool]:
    """The kernel for ``device`` and whether it needs the plan's row groups (the torch reference does)."""
    if triton_usable(device):
        return add_lora_triton_kernels, False
    return add_lora_torch, True


def add_lora_triton_kernels(y: torch.Tensor, x: torch.Tensor, a: torch.Tensor, b: torch.Tensor, slices: torch.Tensor,
                            host_slices: list[tuple[int, int]], plan: LoRAPlan) -> torch.Tensor:
    from pagoda.lora.triton_kernels import add_lora_triton

    return add_lora_triton(y, x, a, b, slices, max(size for _, size in host_slices), plan)


def add_lora_torch(y: torch.Tensor, x: torch.Tensor, a: torch.Tensor, b: torch.Tensor, slices: torch.Tensor,
                   host_slices: list[tuple[int, int]], plan: LoRAPlan) -> torch.Tensor:
    """``y`` [T, N] += the LoRA products of ``x`` [T, K] (``a`` [slots, S, R, K], ``b`` [slots, N, R])."""
    if plan.groups is None:
        return _add_gathered(y, x, a, b, host_slices, plan)
    for slot, rows in plan.groups:
        xs = x.index_select(0, rows)  # [n, K]
        for s, (offset, size) in enumerate(host_slices):
            shrunk = xs @ a[slot, s].t()  # [n, R]
            y[:, offset : offset + size].index_add_(0, rows, (shrunk @ b[slot, offset : offset + size].t()).to(y.dtype))
    return y


def _add_gathered(y: torch.Tensor, x: torch.Tensor, a: torch.Tensor, b: torch.Tensor,
                  host_slices: list[tuple[int, int]], plan: LoRAPlan) -> torch.Tensor:
    """Every row a decode row: gather its slot's matrices (rows of slot -1 add zero)."""
    slots = plan.decode_slots[: x.shape[0]].long()  # [T]
    keep = (slots >= 0).to(x.dtype)[:, None]  # [T, 1]
    gathered_a, gathered_b = a[slots.clamp(min=0)], b[slots.clamp(min=0)]  # [T, S, R, K], [T, N, R]
    shrunk = torch.einsum("tk,tsrk->tsr", x, gathered_a) * keep[:, :, None]  # [T, S, R]
    for s, (offset, size) in enumerate(host_slices):
        y[:, offset : offset + size] += torch.einsum("tr,tnr->tn", shrunk[:, s], gathered_b[:, offset : offset + size])
    return y
