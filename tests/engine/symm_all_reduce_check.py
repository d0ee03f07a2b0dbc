"""Run by test_tensor_parallel.py under torchrun on 2 GPUs: the symmetric-memory all-reduce against
NCCL, eager and replayed from a CUDA graph, for sizes up to its limit; prints 'symm all-reduce ok'."""

import os

import torch
import torch.distributed as dist

from pagoda.distributed import symm_all_reduce


def main() -> None:
    rank = int(os.environ["RANK"])
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl")
    device = torch.device("cuda", rank)
    op = symm_all_reduce.create(dist.group.WORLD, device, 2)
    assert op is not None, "the fast path should be available on 2 GPUs of one host"
    g = torch.Generator(device=device).manual_seed(rank)
    for dtype in (torch.bfloat16, torch.float32):
        for numel in (8, 4096, 8192 * 3, op.max_bytes // torch.finfo(dtype).bits * 8):
            x = torch.randn(numel, generator=g, device=device).to(dtype)
            expected = x.clone()
            dist.all_reduce(expected)
            assert op.fits(x) and torch.equal(op(x), expected), (dtype, numel)
            static = x.clone()
            graph = torch.cuda.CUDAGraph()
            op(static)  # warm: the symmetric buffer is known before capture
            with torch.cuda.graph(graph):
                out = op(static)
            for _ in range(3):
                static.copy_(torch.randn(numel, generator=g, device=device).to(dtype))
                expected = static.clone()
                dist.all_reduce(expected)
                graph.replay()
                assert torch.equal(out, expected), ("replay", dtype, numel)
    assert not op.fits(torch.empty(op.max_bytes + 16, dtype=torch.uint8, device=device))
    assert not op.fits(torch.empty(1, dtype=torch.bfloat16, device=device))  # 2 bytes: torch's kernel refuses it
    dist.barrier()
    print("symm all-reduce ok", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
