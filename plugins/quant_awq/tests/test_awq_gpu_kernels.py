"""GPU: the tensor-core tiles kernel, the CUDA GEMV and the Triton kernels against the float64 product
at Llama-3.1-8B shapes, and a tiny AWQ Llama generating on CUDA (CUDA graphs) like its dequantized
weights and like the reference path."""

from __future__ import annotations

import pytest
import torch

from pagoda.testing import built_kernels
from pagoda_quant_awq.dispatch import awq_linear, awq_tiles_linear
from pagoda_quant_awq.packing import dequantize
from pagoda_quant_awq.tiles import dequantize_tiles, repack

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


def _check_tiles(kernel: str, m: int, shape: str, dtype: torch.dtype, group: int = 128, split_k: int = 0) -> None:
    k, n = SHAPES[shape]
    qweight, qzeros, scales = _random_awq(k, n, group, seed=m + group)
    tiles = repack(qweight, qzeros, scales, group, dtype)
    x = torch.randn(m, k, device="cuda", generator=torch.Generator(device="cuda").manual_seed(1)).to(dtype)
    expected = x.double() @ dequantize(qweight, qzeros, scales, group, torch.float64)  # [m, n]
    got = awq_tiles_linear(x, tiles, kernel=kernel, split_k=split_k)
    assert got.dtype == dtype and got.shape == (m, n)
    err = ((got.double() - expected).abs().max() / expected.abs().max()).item()
    assert err < TOL[dtype], f"{kernel} m={m} {shape} {dtype} g{group} split {split_k}: relative error {err:.2e}"
    # against the exact product of the weights the kernel uses (bf16: scales rounded to bf16): up to
    # 16 tokens the zero point and scale apply to fp32 sums (unrounded weights), past 16 the weights
    # are dequantized to the dtype first
    fold = kernel == "tiles" and m <= 16
    exact = x.double() @ dequantize_tiles(tiles, torch.float64 if fold else None).double()
    rows = exact.abs().amax(1, keepdim=True)
    assert ((got.double() - exact).abs() <= exact.abs() * torch.finfo(dtype).eps + rows * 1e-4).all()
    assert not tiles.locks.any(), "the split-K counters must be back at zero"


def kernels_with(op: str):
    """``built_kernels`` for pagoda-platform-cuda's compiled module, which must have ``op``: skips
    without a GPU, fails on one where they did not build."""

    def load():
        from pagoda_platform_cuda.build import load_extension

        ext = load_extension()
        if not hasattr(ext, op):
            raise RuntimeError(f"the installed kernels have no {op}: reinstall pagoda-platform-cuda")
        return ext

    return built_kernels(f"pagoda-platform-cuda's kernels (with {op})", load)


def force_kernel(monkeypatch: pytest.MonkeyPatch, kernel: str) -> None:
    """Every AWQ product of the models built from now on through ``kernel``: a tiles kernel for layers
    repacked as usual, or a kernel of the checkpoint's layout, which then keeps every layer in that
    layout (the CUDA GEMV only where it applies: 1..8 fp16/bf16 tokens; the table's kernel elsewhere)."""
    from pagoda_quant_awq import dispatch

    if kernel in dispatch.TILES_KERNELS:
        monkeypatch.setattr(dispatch, "choose_tiles_kernel", lambda m: kernel)
        return
    table = dispatch.choose_kernel
    monkeypatch.setattr(dispatch, "tiles_reason", lambda *shape: f"the test runs {kernel} on the checkpoint's layout")
    monkeypatch.setattr(dispatch, "choose_kernel", lambda m, device, dtype: kernel
                        if kernel != "cuda" or dispatch._gemv_applies(m, dtype) else table(m, device, dtype))


@pytest.fixture
def tiles_kernels():
    return kernels_with("awq_tiles_gemm")


@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("m", [1, 2, 4, 8, 16, 64, 256])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_tiles_gemm_at_llama_8b_shapes(tiles_kernels, shape: str, m: int, dtype: torch.dtype) -> None:
    _check_tiles("tiles", m, shape, dtype)


@pytest.mark.parametrize("group", [32, 64])
@pytest.mark.parametrize("m", [1, 5, 16, 33])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_tiles_gemm_group_sizes(tiles_kernels, group: int, m: int, dtype: torch.dtype) -> None:
    _check_tiles("tiles", m, "down", dtype, group)
    _check_tiles("tiles", m, "qkv", dtype, group)


@pytest.mark.parametrize("split_k", [1, 2, 3, 7, 64])
@pytest.mark.parametrize("m", [1, 16, 40])
def test_tiles_gemm_forced_splits(tiles_kernels, split_k: int, m: int) -> None:
    """Every split count (uneven ones too, and more than the shape allows: clamped) sums the same."""
    _check_tiles("tiles", m, "o", torch.bfloat16, 128, split_k)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_tiles_dequantize_is_exact(tiles_kernels, dtype: torch.dtype) -> None:
    qweight, qzeros, scales = _random_awq(4096, 6144, 64)
    tiles = repack(qweight, qzeros, scales, 64, dtype)
    got = tiles_kernels.awq_tiles_dequantize(tiles.weights, tiles.scales, tiles.zeros, 64)
    assert torch.equal(got, dequantize_tiles(tiles))
    if dtype == torch.float16:
        assert torch.equal(got, dequantize(qweight, qzeros, scales, 64, torch.float16))


@pytest.mark.parametrize("shape", ["qkv", "down"])
def test_tiles_dense_path(tiles_kernels, shape: str) -> None:
    _check_tiles("tiles_dense", 256, shape, torch.bfloat16)


def test_tiles_gemm_under_cuda_graph_replays(tiles_kernels) -> None:
    """Split-K counters and scratch survive graph capture and repeated replays."""
    k, n = SHAPES["o"]
    tiles = repack(*_random_awq(k, n, 128), 128, torch.bfloat16)
    x = torch.randn(4, k, device="cuda", dtype=torch.bfloat16)
    eager = awq_tiles_linear(x, tiles, kernel="tiles", split_k=4)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        awq_tiles_linear(x, tiles, kernel="tiles", split_k=4)  # warm-up outside the capture
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = awq_tiles_linear(x, tiles, kernel="tiles", split_k=4)
    for _ in range(5):
        graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(captured, eager), "split sums run in a fixed order: replays are bit-identical"
    assert not tiles.locks.any()


@pytest.fixture
def cuda_gemv() -> None:
    kernels_with("awq_gemv")


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


@pytest.mark.parametrize("dtype, kernel", [("float16", "cuda"), ("bfloat16", "cuda"), ("bfloat16", "triton"),
                                           ("float16", "tiles"), ("bfloat16", "tiles"), ("bfloat16", "tiles_dense")])
def test_tiny_awq_llama_logprobs_on_cuda(checkpoints_on_gpu, monkeypatch: pytest.MonkeyPatch, dtype: str,
                                         kernel: str) -> None:
    """Decode steps (CUDA graphs) through one kernel: the tokens' logprobs match the dense model's."""
    from awq_quantizer import logprob_gap

    if kernel == "cuda":
        kernels_with("awq_gemv")
    if kernel.startswith("tiles"):
        kernels_with("awq_tiles_gemm")
    force_kernel(monkeypatch, kernel)
    awq, dense = checkpoints_on_gpu
    gap = logprob_gap(awq, dense, [5, 17, 99, 3, 42, 7], 8, dtype=dtype, platform="cuda", block_size=16,
                      max_num_seqs=4, max_num_batched_tokens=64)
    assert gap < 0.1, f"logprob gap {gap:.3f}"


def test_tiny_awq_llama_tiles_equal_the_reference_path(tiles_kernels, checkpoints_on_gpu,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Greedy decoding through CUDA graphs in float16: the repacked layers (the default; forced onto
    the tensor-core kernel at any size) give the same tokens, and each
    is the reference path's best token at its position (teacher-forced, within a near-tie of 0.02 nats:
    up to 16 tokens the tiles kernel applies zero point and scale to fp32 sums instead of rounding the
    weights to fp16, so exact ties may break differently); forcing a checkpoint-layout kernel keeps
    that layout. (bfloat16 rounds the scales once more at the repack: its logprobs are checked in
    test_tiny_awq_llama_logprobs_on_cuda.)"""
    from pagoda import LLM, SamplingParams
    from pagoda_quant_awq.method import AwqMethod

    awq, _ = checkpoints_on_gpu
    params = SamplingParams(temperature=0, max_tokens=12)
    prompts = [[5, 17, 99, 3], list(range(40, 70)), [7, 7, 8]]
    kwargs = dict(dtype="float16", platform="cuda", block_size=16, max_num_seqs=4, max_num_batched_tokens=64)

    def greedy(kernel: str | None):
        with monkeypatch.context() as patch:
            if kernel is not None:
                force_kernel(patch, kernel)
            llm = LLM(model=str(awq), **kwargs)
            layer = dict(llm.engine.core.parts.model.named_modules())["model.layers.0.mlp.down_proj"]
            assert isinstance(layer.quant_method, AwqMethod)
            return [o.outputs[0].token_ids for o in llm.generate(prompts, params, use_tqdm=False)], \
                hasattr(layer, "awq_weights")

    tiles, repacked = greedy("tiles")
    assert repacked, "forcing the tiles kernel keeps fp16/bf16 layers repacked on an sm_80+ GPU"
    default, repacked = greedy(None)
    assert repacked, "the tiles layout is the default on an sm_80+ GPU"
    assert tiles == default
    force_kernel(monkeypatch, "reference")
    reference = LLM(model=str(awq), **kwargs)
    layer = dict(reference.engine.core.parts.model.named_modules())["model.layers.0.mlp.down_proj"]
    assert not hasattr(layer, "awq_weights")
    forced = SamplingParams(temperature=0, max_tokens=1, prompt_logprobs=1)
    for prompt, tokens in zip(prompts, tiles):
        scored = reference.generate([prompt + tokens], forced, use_tqdm=False)[0].prompt_logprobs
        for i, token in enumerate(tokens):
            position = scored[len(prompt) + i]
            best = max(lp.logprob for lp in position.values())
            assert position[token].logprob > best - 0.02, f"token {i} of {prompt}: {token} is not the reference's best"
