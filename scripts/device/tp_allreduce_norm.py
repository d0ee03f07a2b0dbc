"""The all-reduce + residual add + RMSNorm of a TP=2 decode step (issue 15), three ways, on 2 GPUs:

- nccl:       NCCL all_reduce, then the csrc fused_add_rms_norm (the path without symmetric memory);
- oneshot:    torch's one-shot symmetric-memory sum (symm_mem.one_shot_all_reduce_copy), then the norm;
- peer_sum:   the csrc peer all-reduce kernel, then the norm (two launches);
- peer_fused: the csrc peer kernel fused with the residual add and the norm (one launch: what the
              decoder runs now);
- norm_only:  the norm alone, no sum (the floor of the other four).

Each as CUDA-graph replays of a chain of 64 dependent calls (each call's output is the next one's
input), at 1 and 8 tokens, hidden 4096 bf16 (Llama-3.1-8B); then Llama-3.1-8B's 32 layers of
linear layers at one token per rank (the GEMMs of scripts/device/tp_costs.py) with each variant
in place of the two sums and norms per layer. Results: microseconds per call, per rank, in --out.

    python3 scripts/device/tp_allreduce_norm.py --out $OUT/tp_allreduce_norm.json   # a host with 2 GPUs
"""

from __future__ import annotations

import argparse
import os
from typing import Callable

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

from tp_costs import HIDDEN, INTER, LAYERS, Q, graphed_ms, join_group, layer_weights, report

CALLS = 2 * LAYERS  # the sums (and norms) of one decode step
EPS = 1e-5
SumNorm = Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]  # (partial, residual) -> both


def variants(kernels, peer, weight: torch.Tensor) -> dict[str, SumNorm]:
    """name -> f(x, residual) = (rms_norm(sum(x) + residual) * weight, sum(x) + residual)."""
    def norm(x: torch.Tensor, residual: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        kernels.fused_add_rms_norm(x, residual, weight, EPS)
        return x, residual

    def nccl(x, residual):
        dist.all_reduce(x)
        return norm(x, residual)

    found = {"nccl": nccl, "peer_sum": lambda x, r: norm(peer(x), r),
             "peer_fused": lambda x, r: peer.add_rms_norm(x, r, weight, EPS), "norm_only": norm}
    if peer.fallback is not None:
        found["oneshot"] = lambda x, r: norm(peer.fallback(x), r)
    return found


def chain_us(sum_norm: SumNorm, tokens: int, device: torch.device) -> float:
    """Microseconds per call of CALLS dependent calls, as one graph's replay."""
    x = torch.randn(tokens, HIDDEN, device=device, dtype=torch.bfloat16)
    residual = torch.zeros_like(x)

    def run() -> None:
        h, r = x, residual
        for _ in range(CALLS):
            h, r = sum_norm(h, r)

    return graphed_ms(run) * 1000 / CALLS


def layers_ms(weights: list[dict[str, torch.Tensor]], sum_norm: SumNorm, tp: int, device: torch.device) -> float:
    """The 32 layers' GEMMs at one token, each row-parallel output through ``sum_norm`` with the residual."""
    x0 = torch.randn(1, HIDDEN, device=device, dtype=torch.bfloat16)
    residual = torch.zeros_like(x0)

    def run() -> None:
        x, r = x0, residual
        for lw in weights:
            qkv = F.linear(x, lw["qkv"])
            x, r = sum_norm(F.linear(qkv[:, : Q // tp], lw["o"]), r)
            gu = F.linear(x, lw["gate_up"])
            x, r = sum_norm(F.linear(gu[:, : INTER // tp] * gu[:, INTER // tp:], lw["down"]), r)

    return graphed_ms(run)


def worker(rank: int, world: int, out: str) -> None:
    device = join_group(rank, world, 29534)
    from pagoda.distributed.peer_all_reduce import PeerAllReduce
    from pagoda_platform_cuda.platform import CudaPlatform

    platform = CudaPlatform()
    peer = platform.fast_all_reduce(dist.group.WORLD, world)
    assert isinstance(peer, PeerAllReduce), f"no peer all-reduce here: {peer!r}"
    weight = (1 + 0.1 * torch.randn(HIDDEN, device=device)).to(torch.bfloat16)
    ways = variants(platform.custom_ops().kernels, peer, weight)
    results: dict[str, object] = {"device": torch.cuda.get_device_name(device), "calls_per_chain": CALLS,
                                  "hidden": HIDDEN, "dtype": "bfloat16"}
    for tokens in (1, 8):
        results[f"us_per_call_T{tokens}"] = {name: chain_us(f, tokens, device) for name, f in ways.items()}
    weights = layer_weights(world, device)
    results["layers_ms_T1"] = {name: layers_ms(weights, f, world, device) for name, f in ways.items()}
    report(rank, results, out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "tp_allreduce_norm.json"))
    args = ap.parse_args()
    mp.spawn(worker, args=(2, args.out), nprocs=2)


if __name__ == "__main__":
    main()
