"""The csrc dense GEMV (``CudaOps.linear`` for a decode step's token; the kernel takes 1-4 tokens) against
float64, with a rounding-error bound.

The kernel sums in fp32 (a lane's share of the row, then a 5-step warp reduction; split-K over S warps,
then S - 1 additions of their partial sums, a lane's share being no longer than unsplit) and rounds
once: |out - ref| <= (k / 32 + 8 + S - 1) * 2^-24 * sum|x||w| + u(T) * |ref| (u: fp16 2^-11, bf16
2^-8), plus slack for the fp32 bound itself; S = 4 (the most) where the kernel picks it. Every split,
rows, tokens and shares at every tail, strided inputs, bias, CUDA graph replays, and a chain of
dependent kernels (each launched as a programmatic dependent of the one before it, reading its output).
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

from pagoda.layers.gemv_tuning import ROWS, SPLITS  # rows a warp, warps sharing a row's k (0 for either: the rule)

pytest.importorskip("pagoda_platform_cuda", reason="pagoda-platform-cuda is not installed")
pytestmark = pytest.mark.gpu

UNIT = {torch.float16: 2.0**-11, torch.bfloat16: 2.0**-8}


def assert_within_bound(out: torch.Tensor, x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None,
                        split: int = 0) -> None:
    ref = x.double() @ w.double().T + (0 if bias is None else bias.double())
    magnitude = x.double().abs() @ w.double().abs().T + (0 if bias is None else bias.double().abs())
    fp32 = (x.shape[1] / 32 + 8 + (split or max(SPLITS)) - 1) * 2.0**-24 * magnitude
    bound = fp32 + UNIT[out.dtype] * (ref.abs() + fp32) + 1e-30
    worst = ((out.double() - ref).abs() / bound).max().item()
    assert worst <= 1.0, f"error {worst:.2f}x the bound"


@pytest.fixture(scope="module")
def ops(cuda_ops):
    assert cuda_ops.dense_gemv_tokens, "CudaOps sends one-token dense layers to the GEMV"
    return cuda_ops


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("n,k", [(4096, 4096), (6144, 4096), (28672, 4096), (4096, 14336), (16392, 64), (100, 8),
                                 (17, 1032), (2048, 8192), (3072, 2048)])
@pytest.mark.parametrize("m", [1, 2, 3, 4])
@pytest.mark.parametrize("split", SPLITS)
def test_gemv_against_float64(ops, dtype, n, k, m, split):
    """Each split forced: k = 8 leaves all but one share empty, k = 1032 (129 chunks) a short last one."""
    torch.manual_seed(n + k + m)
    x = torch.randn(m, k, device="cuda").to(dtype)
    w = (torch.randn(n, k, device="cuda") / k**0.5).to(dtype)
    assert_within_bound(ops.kernels.dense_gemv(x, w, None, split), x, w, None, split)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("split", (0, *SPLITS))
def test_bias_and_strided_rows(ops, dtype, split):
    """The bias added once, whichever split (0: the kernel's rule; 4 for this shape on an H100)."""
    wide = torch.randn(3, 4096 + 64, device="cuda").to(dtype)
    x = wide[:, 8:4104]  # rows 4160 apart, starting 16 bytes in
    w = (torch.randn(2056, 4096, device="cuda") / 64).to(dtype)
    bias = torch.randn(2056, device="cuda").to(dtype)
    assert_within_bound(ops.kernels.dense_gemv(x, w, bias, split), x, w, bias, split)
    assert_within_bound(ops.linear(x, w, bias), x, w, bias)


@pytest.mark.parametrize("n,k", [(4096, 4096), (6144, 4096), (28672, 4096), (4096, 14336), (17, 1032), (100, 8)])
@pytest.mark.parametrize("m", [1, 4])
@pytest.mark.parametrize("split", (0, 4))
def test_one_or_two_rows_a_warp_give_the_same_bits(ops, n, k, m, split):
    """CsrcOps.tune may pick either for speed: the sums must not change."""
    torch.manual_seed(n + k + m)
    x = torch.randn(m, k, device="cuda").to(torch.bfloat16)
    w = (torch.randn(n, k, device="cuda") / k**0.5).to(torch.bfloat16)
    one, two = (ops.kernels.dense_gemv(x, w, None, split, rows) for rows in (1, 2))
    assert torch.equal(one, two)
    assert_within_bound(two, x, w, None, split)


def test_tune_times_each_dense_shape_and_linear_launches_its_choice(ops):
    from torch import nn

    from pagoda.layers.embedding import LMHead
    from pagoda.layers.linear import Linear
    from pagoda.quantization.unquantized import UnquantizedMethod

    launched = []

    class Recording:  # the kernels, noting the split and rows each GEMV launch asks for
        def __getattr__(self, name):
            return getattr(ops.kernels, name)

        def dense_gemv(self, x, w, bias=None, split=0, rows=0):
            launched.append((split, rows))
            return ops.kernels.dense_gemv(x, w, bias, split, rows)

    tuned = type(ops)(Recording())
    dense = [Linear(4096, n, bias=False, quant_method=UnquantizedMethod(), dtype=torch.bfloat16) for n in (4096, 6144)]
    model = nn.ModuleList([*dense, LMHead(32000, 4096, torch.bfloat16)]).cuda()
    for layer in dense:
        layer.weight.data.normal_(0, 4096**-0.5)
    summary = tuned.tune(model)
    configs = {(split, rows) for split in SPLITS for rows in ROWS}
    assert set(tuned.gemv_configs) == {(n, 4096, torch.bfloat16) for n in (4096, 6144, 32000)}, summary
    assert set(tuned.gemv_configs.values()) <= configs and set(launched) == configs  # each timed
    x = torch.randn(1, 4096, device="cuda", dtype=torch.bfloat16)
    for layer in dense:
        launched.clear()
        config = tuned.gemv_configs[(layer.weight.shape[0], 4096, torch.bfloat16)]
        assert torch.equal(tuned.linear(x, layer.weight), ops.kernels.dense_gemv(x, layer.weight, None, *config))
        assert launched == [config]
        assert_within_bound(tuned.linear(x, layer.weight), x, layer.weight, None, config[0])


def test_the_timer_times_each_configuration(ops):
    """graph_timer: a time for each of the six configurations, in a plausible range for 2 MB of weights."""
    from pagoda.layers.gemv_tuning import graph_timer

    weights = [(torch.randn(512, 2048, device="cuda") / 45).to(torch.bfloat16) for _ in range(4)]
    times = graph_timer(ops.kernels, reps=3)(weights)
    assert set(times) == {(split, rows) for split in SPLITS for rows in ROWS}
    assert all(0.2 < us < 500 for us in times.values()), times


@pytest.mark.parametrize("call,message", [
    ("dense_gemv(x, w, None, 3)", "split must be 1, 2 or 4"),
    ("dense_gemv(x, w, None, 0, 3)", "rows (weight rows a warp) must be 1 or 2"),
    ("dense_gemv(torch.randn(1, 72, device='cuda', dtype=torch.bfloat16)[:, 1:65], w)", "16-byte aligned"),
    ("dense_gemv(torch.randn(5, 64, device='cuda', dtype=torch.bfloat16), w)", "1 to 4 tokens, not 5"),
])
def test_bad_arguments_raise_a_clear_error(ops, call, message):
    """A RuntimeError naming the problem, in a child process: checks whose message formats an integer
    crashed the process (SIGSEGV) while the extension carried its own static libstdc++ (docs/cuda.md),
    so a crash must fail this test, not end the session."""
    code = ("import torch\nfrom pagoda_platform_cuda.build import load_extension\n"
            "k = load_extension(); dense_gemv = k.dense_gemv\n"
            "x = torch.randn(1, 64, device='cuda', dtype=torch.bfloat16)\n"
            "w = torch.randn(32, 64, device='cuda', dtype=torch.bfloat16)\n"
            f"try:\n    {call}\nexcept RuntimeError as exc:\n    print('RuntimeError:', exc)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and message in done.stdout, (done.returncode, done.stdout[-500:], done.stderr[-2000:])


def test_ops_route_by_shape(ops):
    """Up to dense_gemv_tokens aligned tokens go to the kernel; more tokens, fp32 or a misaligned row to F.linear."""
    from pagoda.layers.csrc_ops import gemv_fits

    w = torch.randn(256, 64, device="cuda", dtype=torch.bfloat16)
    most = ops.dense_gemv_tokens
    assert gemv_fits(torch.randn(most, 64, device="cuda", dtype=torch.bfloat16), w, None, most)
    assert not gemv_fits(torch.randn(most + 1, 64, device="cuda", dtype=torch.bfloat16), w, None, ops.dense_gemv_tokens)
    assert not gemv_fits(torch.randn(1, 64, device="cuda"), w.float(), None, ops.dense_gemv_tokens)
    odd = torch.randn(1, 72, device="cuda", dtype=torch.bfloat16)[:, 1:65]  # starts 2 bytes in
    assert not gemv_fits(odd, w, None, ops.dense_gemv_tokens)
    x = torch.randn(7, 64, device="cuda", dtype=torch.bfloat16)
    torch.testing.assert_close(ops.linear(x, w), F.linear(x, w))


def test_graph_replays_a_chain_of_dependent_kernels(ops):
    """norm -> GEMV -> SiLU-and-mul -> GEMV -> norm, captured once, replayed on fresh inputs: each
    kernel reads what the one before it wrote (the programmatic dependents wait for it)."""
    dtype, hidden, inter = torch.bfloat16, 4096, 14336
    w_gate_up = (torch.randn(2 * inter, hidden, device="cuda") / 64).to(dtype)
    w_down = (torch.randn(hidden, inter, device="cuda") / 120).to(dtype)
    norm_w = torch.rand(hidden, device="cuda").to(dtype) + 0.5
    x = torch.empty(ops.dense_gemv_tokens, hidden, device="cuda", dtype=dtype)

    def chain() -> torch.Tensor:
        h = ops.linear(ops.rms_norm(x, norm_w, 1e-6), w_gate_up)
        return ops.rms_norm(ops.linear(ops.silu_and_mul(h), w_down), norm_w, 1e-6)

    def reference() -> torch.Tensor:
        h = F.linear(ops.rms_norm(x, norm_w, 1e-6), w_gate_up)
        return ops.rms_norm(F.linear(ops.silu_and_mul(h), w_down), norm_w, 1e-6)

    x.copy_(torch.randn_like(x))
    chain()  # warm-up (lazy module loads) before capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = chain()
    for seed in range(3):
        torch.manual_seed(seed)
        x.copy_(torch.randn_like(x))
        graph.replay()
        eager = chain()
        assert torch.equal(out, eager), "graph replay differs from eager"
        torch.testing.assert_close(out.float(), reference().float(), rtol=0.05, atol=0.05)
