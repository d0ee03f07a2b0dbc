"""GPU: the CUDA GEMV and the Triton kernels against the float64 product at Llama-3.1-8B shapes, and a
tiny AWQ Llama generating on CUDA like its dequantized weights."""

from __future__ import annotations

import pytest
import torch

from pagoda_quant_awq.dispatch import awq_linear, cuda_extension
from pagoda_quant_awq.packing import dequantize

pytestmark = pytest.mark.gpu
# (in, out) of Llama-3.1-8B's fused qkv, o, fused gate/up and down projections
SHAPES = {"qkv": (4096, 6144), "o": (4096, 4096), "gate_up": (4096, 28672), "down": (14336, 4096)}
TOL = {torch.float16: 3e-3, torch.bfloat16: 1.5e-2}


def _random_awq(k: int, n: int, group: int, seed: int = 0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    qweight = torch.randint(-(2**31), 2**31 - 1, (k, n // 8), dtype=torch.int32, device="cuda", generator=g)
    qzeros = torch.randint(-(2**31), 2**31 - 1, (k // group, n // 8), dtype=torch.int32, device="cuda", generator=g)
    scales = (torch.rand(k // group, n, device="cuda", generator=g) * 0.02 + 0.001).half()
    return qweight, qzeros, scales


def _check(kernel: str, m: int, shape: str, dtype: torch.dtype, group: int = 128) -> None:
    k, n = SHAPES[shape]
    qweight, qzeros, scales = _random_awq(k, n, group, seed=m)
    x = torch.randn(m, k, device="cuda", generator=torch.Generator(device="cuda").manual_seed(1)).to(dtype)
    expected = x.double() @ dequantize(qweight, qzeros, scales, group, torch.float64)  # [m, n]
    got = awq_linear(x, qweight, qzeros, scales, group, kernel=kernel)
    assert got.dtype == dtype and got.shape == (m, n)
    err = ((got.double() - expected).abs().max() / expected.abs().max()).item()
    assert err < TOL[dtype], f"{kernel} m={m} {shape} {dtype}: relative error {err:.2e}"


@pytest.fixture
def cuda_gemv() -> None:
    if cuda_extension() is None:
        pytest.skip("pagoda-platform-cuda's kernels (with awq_gemv) are not built here")


@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("m", [1, 3, 8])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_cuda_gemv_at_llama_8b_shapes(cuda_gemv, shape: str, m: int, dtype: torch.dtype) -> None:
    _check("cuda", m, shape, dtype)


@pytest.mark.parametrize("group", [32, 64])
def test_cuda_gemv_group_sizes(cuda_gemv, group: int) -> None:
    _check("cuda", 2, "down", torch.bfloat16, group)


@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("m", [1, 16, 64])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_triton_gemm_at_llama_8b_shapes(shape: str, m: int, dtype: torch.dtype) -> None:
    _check("triton", m, shape, dtype)


@pytest.mark.parametrize("shape", ["qkv", "down"])
def test_dense_path_at_llama_8b_shapes(shape: str) -> None:
    _check("dense", 256, shape, torch.bfloat16)


def test_tiny_awq_llama_on_cuda(checkpoints_on_gpu) -> None:
    from pagoda import LLM, SamplingParams

    awq, dense = checkpoints_on_gpu
    params = SamplingParams(temperature=0, max_tokens=8)
    prompts = [[5, 17, 99, 3], list(range(40, 70))]
    kwargs = dict(dtype="float32", platform="cuda", block_size=16, max_num_seqs=4)  # fp32: Triton, exact dots

    def greedy(path):
        return [o.outputs[0].token_ids for o in LLM(model=str(path), **kwargs).generate(prompts, params, use_tqdm=False)]

    assert greedy(awq) == greedy(dense)


@pytest.mark.parametrize("dtype, kernel", [("float16", "cuda"), ("bfloat16", "cuda"), ("bfloat16", "triton")])
def test_tiny_awq_llama_logprobs_on_cuda(checkpoints_on_gpu, monkeypatch: pytest.MonkeyPatch, dtype: str,
                                         kernel: str) -> None:
    """Decode steps (CUDA graphs) through one kernel: the tokens' logprobs match the dense model's."""
    from awq_quantizer import logprob_gap

    if kernel == "cuda" and cuda_extension() is None:
        pytest.skip("pagoda-platform-cuda's kernels (with awq_gemv) are not built here")
    monkeypatch.setenv("PAGODA_AWQ_KERNEL", kernel)
    awq, dense = checkpoints_on_gpu
    gap = logprob_gap(awq, dense, [5, 17, 99, 3, 42, 7], 8, dtype=dtype, platform="cuda", block_size=16,
                      max_num_seqs=4, max_num_batched_tokens=64)
    assert gap < 0.1, f"logprob gap {gap:.3f}"
