"""GPU: GPTQ and compressed-tensors layers on pagoda-quant-awq's kernels at Llama-3.1-8B shapes against
the float64 reference (the tiles kernel and its dequantizing path; the Triton and CUDA kernels of the
checkpoint layout), and tiny checkpoints generating on CUDA (CUDA graphs) like their dequantized
weights through each kernel. Fails on a GPU whose kernels did not build (pagoda.testing.built_kernels)."""

from __future__ import annotations

import importlib

import pytest
import torch
from awq_quantizer import logprob_gap
from int_quantizer import Layout
from test_awq_gpu_kernels import SHAPES, force_kernel, kernels_with
from tiny_checkpoints import write_tiny_llama

from pagoda_quant_gptq.grouped import GroupedWeights
from pagoda_quant_gptq.int4_form import to_int4
from pagoda_quant_gptq.layout import grouped_linear, store

pytestmark = pytest.mark.gpu
TOL = {torch.float16: 3e-3, torch.bfloat16: 1.5e-2}


def random_layer(k: int, n: int, bits: int, group: int, act_order: bool, dtype: torch.dtype, seed: int = 0):
    """(a module holding random weights in the layout of this GPU, their GroupedWeights on the GPU)."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    groups = k // group
    gid = torch.arange(k, device="cuda") // group
    if act_order:
        gid = gid[torch.randperm(k, device="cuda", generator=g)]
    top = 2**bits
    weights = GroupedWeights(torch.randint(0, top, (k, n), device="cuda", generator=g, dtype=torch.int32),
                             torch.randint(1, top + 1, (groups, n), device="cuda", generator=g, dtype=torch.int32),
                             torch.rand(groups, n, device="cuda", generator=g) * 0.002 / 2 ** (bits - 4) + 1e-4,
                             gid, bits)
    weights.scales = weights.scales.half().float()  # checkpoints store fp16 scales
    layer = torch.nn.Module()
    store(layer, to_int4(weights), dtype)
    return layer, weights


def _check(kernel: str, m: int, shape: str, dtype: torch.dtype, bits: int, act_order: bool, group: int = 128) -> None:
    k, n = SHAPES[shape]
    layer, weights = random_layer(k, n, bits, group, act_order, dtype, seed=m)
    x = torch.randn(m, k, device="cuda", generator=torch.Generator(device="cuda").manual_seed(1)).to(dtype)
    expected = x.double() @ weights.dequantize()  # [m, n]
    got = grouped_linear(layer, x, kernel)
    assert got.dtype == dtype and got.shape == (m, n)
    err = ((got.double() - expected).abs().max() / expected.abs().max()).item()
    assert err < TOL[dtype], f"{kernel} m={m} {shape} {dtype} {bits}-bit act-order {act_order}: relative error {err:.2e}"


@pytest.fixture
def tiles_kernels():
    return kernels_with("awq_tiles_gemm")


@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("m", [1, 4, 16, 64])
@pytest.mark.parametrize("bits, act_order", [(4, False), (4, True), (8, True)])
def test_tiles_kernel_at_llama_8b_shapes(tiles_kernels, shape: str, m: int, bits: int, act_order: bool) -> None:
    _check("tiles", m, shape, torch.bfloat16, bits, act_order)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("bits", [4, 8])
def test_tiles_dense_path(tiles_kernels, dtype: torch.dtype, bits: int) -> None:
    _check("tiles_dense", 256, "down", dtype, bits, act_order=True)
    _check("tiles", 8, "qkv", dtype, bits, act_order=True, group=32)


@pytest.mark.parametrize("kernel", ["triton", "dense", "cuda"])
@pytest.mark.parametrize("bits", [4, 8])
def test_checkpoint_layout_kernels(monkeypatch: pytest.MonkeyPatch, kernel: str, bits: int) -> None:
    """On GPUs without the tiles kernel (or odd shapes) the checkpoint layout's kernels compute."""
    if kernel == "cuda":
        kernels_with("awq_gemv")
    from pagoda_quant_awq import dispatch

    monkeypatch.setattr(dispatch, "tiles_reason", lambda *shape: "the test keeps the checkpoint layout")
    _check(kernel, 1 if kernel == "cuda" else 16, "o", torch.float16, bits, act_order=True)


@pytest.fixture(scope="module")
def gpu_plugins():
    """The CUDA platform and this plugin registered process-wide (skips where pagoda-platform-cuda is missing)."""
    import pagoda.plugins.manager as manager
    from pagoda.plugins.manager import PluginManager

    try:
        modules = {name: importlib.import_module(mod) for name, mod in
                   (("quant-gptq", "pagoda_quant_gptq.plugin"), ("platform-cuda", "pagoda_platform_cuda.plugin"))}
    except ImportError:
        pytest.skip("pagoda-platform-cuda is not available")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(manager, "_MANAGER", PluginManager(modules=modules, entry_points=False))
        yield


INT4_ACT = Layout("gptq", 4, 32, sym=False, act_order=True)
INT8 = Layout("gptq", 8, 32, sym=True)
W4A16 = Layout("compressed-tensors", 4, 32, sym=True, act_order=True)


@pytest.mark.parametrize("layout, kernel", [(INT4_ACT, "tiles"), (INT4_ACT, "tiles_dense"), (INT4_ACT, "cuda"),
                                            (INT8, "tiles"), (INT8, "triton"), (W4A16, "tiles")], ids=str)
def test_tiny_checkpoint_on_cuda(gpu_plugins, tmp_path, monkeypatch: pytest.MonkeyPatch, layout: Layout,
                                 kernel: str) -> None:
    """Decode steps (CUDA graphs) through one kernel: the tokens' logprobs match the dense model's."""
    kernels_with("awq_tiles_gemm" if kernel.startswith("tiles") else "awq_gemv")
    force_kernel(monkeypatch, kernel)
    quant, dense, _ = write_tiny_llama(tmp_path, layout)
    gap = logprob_gap(quant, dense, [5, 17, 99, 3, 42, 7], 8, dtype="bfloat16", platform="cuda", block_size=16,
                      max_num_seqs=4, max_num_batched_tokens=64)
    assert gap < 0.1, f"logprob gap {gap:.3f}"
