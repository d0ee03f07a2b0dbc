"""Run by test_tensor_parallel.py under torchrun on 2 GPUs: the platform's fast all-reduce against NCCL,
eager and replayed from a CUDA graph, for sizes up to its limit and beyond (the fallback); then a chain
of dependent sums between matmuls, as in a decode step, replayed from one graph. Mode (argv[1]):
``oneshot`` torch's one-shot path alone, ``platform`` the platform's (on CUDA the csrc low-latency
kernel in front of the one-shot path, and its fusion with the residual add and RMSNorm, against NCCL
then the csrc norm). Prints 'symm all-reduce ok'."""

import os
import sys

import torch
import torch.distributed as dist

from pagoda.distributed import symm_all_reduce
from pagoda.plugins.manager import get_plugin_manager


def nccl_sum(x: torch.Tensor) -> torch.Tensor:
    expected = x.clone()
    dist.all_reduce(expected)
    return expected


def check_sizes(op, device: torch.device, g: torch.Generator) -> None:
    for dtype in (torch.bfloat16, torch.float32):
        limits = {getattr(path, "max_bytes", 0) for path in (op, getattr(op, "fallback", None))} - {0}
        for numel in (4, 8, 4096, 8192 * 3, *(limit // torch.finfo(dtype).bits * 8 for limit in sorted(limits))):
            x = torch.randn(numel, generator=g, device=device).to(dtype)
            if numel * x.element_size() % 16 and not hasattr(op, "kernels"):
                continue  # 8 bytes: the low-latency kernel's, not torch's one-shot path's
            expected = nccl_sum(x)
            assert op.fits(x) and torch.equal(op(x.clone()), expected), (dtype, numel)
            static = x.clone()
            graph = torch.cuda.CUDAGraph()
            op(static.clone())  # warm: the symmetric buffer is known before capture
            with torch.cuda.graph(graph):
                out = op(static)
            for _ in range(3):
                static.copy_(torch.randn(numel, generator=g, device=device).to(dtype))
                expected = nccl_sum(static)
                graph.replay()
                assert torch.equal(out, expected), ("replay", dtype, numel)
    assert not op.fits(torch.empty(1, dtype=torch.bfloat16, device=device))  # 2 bytes: NCCL


def check_chain(op, device: torch.device, g: torch.Generator, layers: int = 64) -> None:
    """x <- sum(x @ w_i) for 64 layers of one token, captured once and replayed: every call's epoch
    and parity come from the device, so the replays agree with NCCL call after call."""
    hidden = 4096
    weights = [torch.randn(hidden, hidden, generator=g, device=device, dtype=torch.bfloat16) / 91  # x keeps its scale: 2 ranks' sum
               for _ in range(4)]

    def step(x: torch.Tensor, reduce) -> torch.Tensor:
        for i in range(layers):
            x = reduce(x @ weights[i % 4])
        return x

    static = torch.randn(1, hidden, generator=g, device=device, dtype=torch.bfloat16)
    step(static.clone(), op)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = step(static, op)
    for _ in range(3):
        static.copy_(torch.randn(1, hidden, generator=g, device=device, dtype=torch.bfloat16))
        expected = step(static.clone(), nccl_sum)
        graph.replay()
        assert torch.equal(out, expected), "chain replay"


def check_fused(op, device: torch.device, g: torch.Generator) -> None:
    """The LL kernel fused with the residual add and RMSNorm against NCCL then the csrc fused norm, to the
    bit, eager and graph-replayed; plain and fused calls alternate (they share lines and epochs)."""
    for dtype in (torch.bfloat16, torch.float16):
        for tokens, hidden in ((1, 4096), (3, 8192), (64, 4096), (2, 16384)):  # (2, 16384): two chunks a thread
            def fresh() -> tuple[torch.Tensor, torch.Tensor]:
                return (torch.randn(tokens, hidden, generator=g, device=device).to(dtype),
                        torch.randn(tokens, hidden, generator=g, device=device).to(dtype))

            weight = (torch.rand(hidden, generator=g, device=device) + 0.5).to(dtype)
            x, residual = fresh()
            assert op.fits_add_rms_norm(x, residual, weight), (dtype, tokens, hidden)
            expected_x, expected_res = nccl_sum(x), residual.clone()
            op.kernels.fused_add_rms_norm(expected_x, expected_res, weight, 1e-5)
            got_x, got_res = op.add_rms_norm(x.clone(), residual.clone(), weight, 1e-5)
            assert torch.equal(got_x, expected_x) and torch.equal(got_res, expected_res), ("fused", dtype, tokens)
            static_x, static_res = x.clone(), residual.clone()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                op.add_rms_norm(static_x, static_res, weight, 1e-5)
                op(static_res.view(-1)[: 4096])  # a plain sum between fused ones
            for _ in range(3):
                x, residual = fresh()
                static_x.copy_(x)
                static_res.copy_(residual)
                expected_x, expected_res = nccl_sum(x), residual.clone()
                op.kernels.fused_add_rms_norm(expected_x, expected_res, weight, 1e-5)
                expected_res.view(-1)[: 4096] = nccl_sum(expected_res.view(-1)[: 4096].clone())
                graph.replay()
                assert torch.equal(static_x, expected_x) and torch.equal(static_res, expected_res), ("replay", dtype)


def main() -> None:
    rank = int(os.environ["RANK"])
    mode = sys.argv[1] if len(sys.argv) > 1 else "oneshot"
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl")
    device = torch.device("cuda", rank)
    if mode == "oneshot":
        op = symm_all_reduce.create(dist.group.WORLD, device, 2)
    else:
        _, platform_cls = get_plugin_manager().registry("platform").select("auto")
        op = platform_cls().fast_all_reduce(dist.group.WORLD, 2)
    assert op is not None, "the fast path should be available on 2 GPUs of one host"
    if mode == "platform" and torch.version.cuda:
        assert type(op).__name__ == "LLAllReduce", f"expected the low-latency kernel, got {type(op).__name__}"
    g = torch.Generator(device=device).manual_seed(rank)
    check_sizes(op, device, g)
    check_chain(op, device, g)
    if hasattr(op, "kernels"):
        check_fused(op, device, g)
    dist.barrier()
    print("symm all-reduce ok", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
