"""Where a TP=2 decode step's time goes (issue 15): Llama-3.1-8B's 32 layers of linear layers at one
token, as CUDA-graph replays, at TP=1 and per rank at TP=2, with and without the two all-reduces per
layer (NCCL, the one-shot symmetric-memory sum of pagoda.distributed.symm_all_reduce, or the csrc
low-latency kernel of pagoda_platform_cuda.ll_all_reduce), and the 64 all-reduces alone. Attention, norms and sampling are left out: this is the part TP splits.

    python3 scripts/device/tp_costs.py --out $OUT/tp_costs.json     # on a host with 2 GPUs
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Callable

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

HIDDEN, INTER, Q, KV, LAYERS = 4096, 14336, 4096, 1024, 32


def layer_weights(tp: int, device: torch.device) -> list[dict[str, torch.Tensor]]:
    """Per layer, this rank's slices ([out, in], bf16): qkv and gate_up split by rows, o and down by columns."""
    def w(out: int, inp: int) -> torch.Tensor:
        return torch.randn(out, inp, device=device, dtype=torch.bfloat16) * 0.01
    return [{"qkv": w((Q + 2 * KV) // tp, HIDDEN), "o": w(HIDDEN, Q // tp), "gate_up": w(2 * INTER // tp, HIDDEN),
             "down": w(HIDDEN, INTER // tp)} for _ in range(LAYERS)]


def stack(weights: list[dict[str, torch.Tensor]], x: torch.Tensor, reduce: Callable[[torch.Tensor], torch.Tensor],
          tp: int) -> torch.Tensor:
    for lw in weights:
        qkv = F.linear(x, lw["qkv"])
        h = reduce(F.linear(qkv[:, : Q // tp], lw["o"]))
        gu = F.linear(h, lw["gate_up"])
        x = reduce(F.linear(gu[:, : INTER // tp] * gu[:, INTER // tp:], lw["down"]))
    return x


def graphed_ms(fn: Callable[[], object], reps: int = 30) -> float:
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    for _ in range(3):
        graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / reps


def copy_gbps(device: torch.device) -> float:
    a = torch.empty(1 << 30, dtype=torch.uint8, device=device)
    b = torch.empty_like(a)
    ms = graphed_ms(lambda: b.copy_(a), reps=10)
    return 2 * a.numel() / ms / 1e6


def nccl_sum(x: torch.Tensor) -> torch.Tensor:
    dist.all_reduce(x)
    return x


def worker(rank: int, world: int, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29533")
    torch.cuda.set_device(rank)
    device = torch.device("cuda", rank)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=device)
    from pagoda.distributed.symm_all_reduce import create

    symm = create(dist.group.WORLD, device, world)
    ll = low_latency(world)
    x = torch.randn(1, HIDDEN, device=device, dtype=torch.bfloat16)
    weights = layer_weights(world, device)
    results: dict[str, float] = {}
    results["tp2_gemms_ms"] = graphed_ms(lambda: stack(weights, x, lambda t: t, world))
    results["tp2_gemms_nccl_ms"] = graphed_ms(lambda: stack(weights, x, nccl_sum, world))
    results["nccl_64_sums_ms"] = graphed_ms(lambda: [nccl_sum(x) for _ in range(2 * LAYERS)])
    if symm is not None:
        results["tp2_gemms_symm_ms"] = graphed_ms(lambda: stack(weights, x, symm, world))
        results["symm_64_sums_ms"] = graphed_ms(lambda: [symm(x) for _ in range(2 * LAYERS)])
    if ll is not None:
        results["tp2_gemms_ll_ms"] = graphed_ms(lambda: stack(weights, x, ll, world))
        results["ll_64_sums_ms"] = graphed_ms(lambda: [ll(x) for _ in range(2 * LAYERS)])
    del weights
    dist.barrier()
    if rank == 0:
        full = layer_weights(1, device)
        results["tp1_gemms_ms"] = graphed_ms(lambda: stack(full, x, lambda t: t, 1))
        del full
        results["copy_gbps"] = copy_gbps(device)
        per_layer = 2 * (HIDDEN * (Q + 2 * KV) + Q * HIDDEN + 2 * HIDDEN * INTER + INTER * HIDDEN)
        results["tp1_floor_ms"] = LAYERS * per_layer / results["copy_gbps"] / 1e6
        results["tp2_floor_ms"] = results["tp1_floor_ms"] / world
        results["device"] = torch.cuda.get_device_name(device)
        print(json.dumps(results, indent=1))
        with open(out, "w") as f:
            json.dump(results, f, indent=1)
    dist.barrier()
    dist.destroy_process_group()


def low_latency(world: int):
    """The CUDA platform's low-latency all-reduce (PAGODA_SYMM_ALL_REDUCE=ll), or None where it is unavailable."""
    from pagoda_platform_cuda.ll_all_reduce import LLAllReduce
    from pagoda_platform_cuda.platform import CudaPlatform

    os.environ["PAGODA_SYMM_ALL_REDUCE"] = "ll"
    op = CudaPlatform().fast_all_reduce(dist.group.WORLD, world)
    return op if isinstance(op, LLAllReduce) else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="tp_costs.json")
    args = ap.parse_args()
    mp.spawn(worker, args=(2, args.out), nprocs=2)


if __name__ == "__main__":
    main()
