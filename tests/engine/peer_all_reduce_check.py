"""Run by test_tensor_parallel.py under torchrun on 2 GPUs (NCCL): the CUDA platform's peer all-reduce
kernels (csrc/kernels/allreduce_norm.cu) against NCCL's all_reduce followed by the csrc fused_add_rms_norm:

- the fused op (sum + residual add + RMSNorm) and the plain sum, for several token counts and hidden
  sizes (vector and scalar paths), bf16 and fp16: the same bits on both ranks, within the dtype's
  rounding of the reference (bit-equal where the reference rounds alike);
- 200 calls back to back (mixed sizes, plain and fused), one rank delayed now and then so the other
  runs ahead: each result checked afterwards (the epoch and the alternating slots);
- a CUDA graph of a chain of calls replayed with fresh inputs, with eager calls in between.

Prints 'peer all-reduce ok' on each rank."""

import os

import torch
import torch.distributed as dist

from pagoda.distributed.peer_all_reduce import PeerAllReduce
from pagoda_platform_cuda.platform import CudaPlatform

EPS = 1e-5
SHAPES = [(1, 4096), (2, 4096), (8, 4096), (1, 8192), (7, 8192), (64, 8192), (33, 5120), (5, 100), (3, 4093)]
TOLERANCE = {torch.bfloat16: dict(atol=3e-2, rtol=2e-2), torch.float16: dict(atol=4e-3, rtol=2e-3)}


class Case:
    """One call's inputs (x differs per rank; residual and weight are the same everywhere)."""

    def __init__(self, tokens: int, hidden: int, dtype: torch.dtype, fused: bool, seed: int, rank: int) -> None:
        shared = torch.Generator(device="cuda").manual_seed(seed)
        own = torch.Generator(device="cuda").manual_seed(seed * 8 + rank + 1)
        self.fused = fused
        self.x = torch.randn(tokens, hidden, generator=own, device="cuda").to(dtype)
        self.residual = torch.randn(tokens, hidden, generator=shared, device="cuda").to(dtype)
        self.weight = (1 + 0.2 * torch.randn(hidden, generator=shared, device="cuda")).to(dtype)

    def reference(self, kernels) -> tuple[torch.Tensor, ...]:
        total = self.x.clone()
        dist.all_reduce(total)
        if not self.fused:
            return (total,)
        residual = self.residual.clone()
        kernels.fused_add_rms_norm(total, residual, self.weight, EPS)
        return total, residual

    def run(self, op: PeerAllReduce, x: torch.Tensor, residual: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return op.add_rms_norm(x, residual, self.weight, EPS) if self.fused else (op(x),)


def same_on_every_rank(t: torch.Tensor) -> bool:
    parts = [torch.empty_like(t) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, t.contiguous())
    return all(torch.equal(parts[0], p) for p in parts[1:])


def check(got: tuple[torch.Tensor, ...], expected: tuple[torch.Tensor, ...], what) -> int:
    """Asserts the bits agree across ranks and the values agree with the reference; 1 if bit-equal to it."""
    exact = 1
    for g, e in zip(got, expected):
        assert same_on_every_rank(g), ("ranks differ", what)
        torch.testing.assert_close(g, e, **TOLERANCE[g.dtype], msg=lambda m: f"{what}: {m}")
        exact &= int(torch.equal(g, e))
    return exact


def sizes_and_dtypes(op: PeerAllReduce, kernels, rank: int) -> None:
    exact = total = 0
    for dtype in (torch.bfloat16, torch.float16):
        for seed, (tokens, hidden) in enumerate(SHAPES):
            for fused in (True, False):
                case = Case(tokens, hidden, dtype, fused, seed, rank)
                assert op.fits(case.x) and (not fused or op.fits_add_rms_norm(case.x, case.residual, case.weight))
                expected = case.reference(kernels)
                exact += check(case.run(op, case.x.clone(), case.residual.clone()), expected,
                               (dtype, tokens, hidden, fused))
                total += 1
    print(f"rank {rank}: {exact} of {total} size/dtype cases bit-equal to NCCL + fused_add_rms_norm", flush=True)


def back_to_back(op: PeerAllReduce, kernels, rank: int, calls: int = 200) -> None:
    cases = [Case(*SHAPES[i % len(SHAPES)], torch.bfloat16, i % 3 != 0, 1000 + i, rank) for i in range(calls)]
    inputs = [(c.x.clone(), c.residual.clone()) for c in cases]
    torch.cuda.synchronize()
    dist.barrier()
    outputs = []
    for i, (case, (x, residual)) in enumerate(zip(cases, inputs)):
        if i % 17 == rank * 5:
            torch.cuda._sleep(200_000)  # this rank falls behind; the other runs ahead into the next calls
        outputs.append(case.run(op, x, residual))
    torch.cuda.synchronize()
    for i, (case, got) in enumerate(zip(cases, outputs)):
        check(got, case.reference(kernels), ("call", i))


def graph_replays(op: PeerAllReduce, kernels, rank: int) -> None:
    chain = [(1, 4096, True), (1, 4096, True), (8, 4096, False), (8, 4096, True), (3, 4093, True), (64, 8192, True)]
    static = [Case(t, h, torch.bfloat16, fused, 7, rank) for t, h, fused in chain]
    buffers = [(c.x.clone(), c.residual.clone()) for c in static]
    for c, (x, residual) in zip(static, buffers):  # warm up eagerly before capture
        c.run(op, x, residual)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outputs = [c.run(op, x, residual) for c, (x, residual) in zip(static, buffers)]
    for replay in range(20):
        fresh = [Case(t, h, torch.bfloat16, fused, 2000 + 10 * replay + j, rank)
                 for j, (t, h, fused) in enumerate(chain)]
        for c, s, (x, residual) in zip(fresh, static, buffers):  # the graph reads the static tensors
            x.copy_(c.x)
            residual.copy_(c.residual)
            s.weight.copy_(c.weight)
        graph.replay()
        for j, (c, got) in enumerate(zip(fresh, outputs)):
            check(got, c.reference(kernels), ("replay", replay, j))
        eager = Case(replay % 4 + 1, 4096, torch.bfloat16, replay % 2 == 0, 3000 + replay, rank)  # between replays
        check(eager.run(op, eager.x.clone(), eager.residual.clone()), eager.reference(kernels), ("eager", replay))


def main() -> None:
    rank = int(os.environ["RANK"])
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", device_id=torch.device("cuda", rank))
    platform = CudaPlatform()
    op = platform.fast_all_reduce(dist.group.WORLD, dist.get_world_size())
    assert isinstance(op, PeerAllReduce), f"the peer all-reduce should be set up on 2 GPUs of one host, got {op!r}"
    kernels = platform.custom_ops().kernels
    sizes_and_dtypes(op, kernels, rank)
    back_to_back(op, kernels, rank)
    graph_replays(op, kernels, rank)
    big = torch.ones(op.slot_bytes // 2 + 8, dtype=torch.bfloat16, device="cuda")  # past one slot: the fallback
    assert not op._takes(big) and op.fits(big) == (op.fallback is not None)
    dist.barrier()
    print("peer all-reduce ok", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
