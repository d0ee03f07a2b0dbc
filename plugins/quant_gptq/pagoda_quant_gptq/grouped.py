"""One linear layer's weights as integers, whatever the checkpoint format: the form both formats are
read into before the repack (and the tests' float64 reference)."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class GroupedWeights:
    """``W[k, n] = (q[k, n] - zeros[gid[k], n]) * scales[gid[k], n]`` for this rank's ``K`` inputs."""

    q: torch.Tensor  # [K, N] uint8 (or wider) values 0 .. 2**bits - 1
    zeros: torch.Tensor  # [G, N] int16 zero points 0 .. 2**bits (GPTQ v1 reaches 2**bits)
    scales: torch.Tensor  # [G, N] float
    gid: torch.Tensor  # [K] long: the group of each input row, 0 .. G - 1
    bits: int

    def dequantize(self, dtype: torch.dtype = torch.float64) -> torch.Tensor:
        """W ``[K, N]`` computed in float64, rounded once to ``dtype``."""
        z = self.zeros.to(torch.float64)[self.gid]  # [K, N]
        s = self.scales.to(torch.float64)[self.gid]
        return ((self.q.to(torch.float64) - z) * s).to(dtype)
