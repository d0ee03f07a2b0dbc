"""Run by test_tensor_parallel.py under torchrun (2 CPU processes, gloo): `pagoda generate ... -tp 2`
with the CPU platform's fast all-reduce replaced, in both processes, by a torch reference of the
fused op (the sum over the ranks in rank order, then the residual add and RMSNorm), so the
deferred sums of the row-parallel layers go through ``FastAllReduce.add_rms_norm`` as on GPUs.
Each rank prints to stderr how many fused and plain sums it ran."""

import atexit
import os
import sys

import torch
import torch.distributed as dist

from pagoda.distributed.parallel import FastAllReduce
from pagoda.layers.ops import CustomOps
from pagoda.platforms.cpu import CpuPlatform


class ReferenceFusedAllReduce(FastAllReduce):
    """What the CUDA peer kernels compute, in torch over the group's backend."""

    def __init__(self, group) -> None:
        self.group, self.fused, self.plain = group, 0, 0
        atexit.register(lambda: print(f"rank {os.environ['RANK']}: fused {self.fused} plain {self.plain}",
                                      file=sys.stderr, flush=True))

    def fits(self, x: torch.Tensor) -> bool:
        return True

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        self.plain += 1
        dist.all_reduce(x, group=self.group)
        return x

    def fits_add_rms_norm(self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor) -> bool:
        return True

    def add_rms_norm(self, x, residual, weight, eps):
        self.fused += 1
        parts = [torch.empty_like(x) for _ in range(dist.get_world_size(self.group))]
        dist.all_gather(parts, x.contiguous(), group=self.group)
        total = parts[0].float()
        for part in parts[1:]:  # rank order, in float32, rounded to the dtype once
            total = total + part.float()
        return CustomOps().fused_add_rms_norm(total.to(x.dtype), residual, weight, eps)


CpuPlatform.fast_all_reduce = lambda self, group, world_size: ReferenceFusedAllReduce(group)

if __name__ == "__main__":
    from pagoda.cli.main import main

    sys.exit(main(sys.argv[1:]))
