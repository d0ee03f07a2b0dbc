"""Host-to-device copies queued behind the device's work instead of waiting for it."""

from __future__ import annotations

import torch


def to_device(values, device: torch.device, dtype: torch.dtype = torch.long) -> torch.Tensor:
    """``torch.tensor(values, dtype=dtype, device=device)`` (``values``: a list, or a CPU tensor kept in
    its dtype) queued behind the device's work instead of waiting for it: torch synchronises the
    stream for a copy from pageable memory, so the host would idle until every kernel queued so far (a
    step's forward pass) had run; a copy from pinned memory is queued (torch's host allocator keeps
    the buffer until the copy has run)."""
    host = values if isinstance(values, torch.Tensor) else torch.tensor(values, dtype=dtype)
    return host if device.type == "cpu" else host.pin_memory().to(device, non_blocking=True)


def fill_entries(x: torch.Tensor, rows, columns, value: float) -> None:
    """``x[rows, columns] = value`` for a contiguous 2-D ``x``, queued without a sync: an indexed
    assignment of a Python number copies it to the device from pageable memory first."""
    flat = [r * x.shape[1] + c for r, c in zip(rows, columns)]
    x.view(-1).index_fill_(0, to_device(flat, x.device), value)
