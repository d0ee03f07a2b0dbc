"""Top-k / top-p by a threshold (``pagoda.engine.top_p``, ``PAGODA_SAMPLER_TOP_P=threshold``) against
the sort path (``sampler._apply_top_k_top_p``): the same mask on rows without ties at the threshold,
whether the nucleus ends among the candidates or the whole row is searched (torch on the CPU, the
Triton kernel under the interpreter)."""

from __future__ import annotations

import pytest
import torch

from pagoda.engine import top_p
from pagoda.engine.sampler import TOP_P_OFF, Sampler, SamplingRow, _apply_top_k_top_p
from pagoda.sampling_params import SamplingParams
from pagoda.testing import interpreted_kernels

VOCAB = 3000


@pytest.fixture(scope="module")
def triton_search():
    yield from interpreted_kernels("pagoda.engine.top_p_triton")


def logits(rows: int, seed: int) -> torch.Tensor:
    """Peaked rows (the nucleus among a few values), flat rows (it reaches past the candidates), one
    with -inf entries and one of negative values only."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, VOCAB, generator=g)
    x[: rows // 2] *= 8.0  # peaked
    x[rows // 2 :] *= 0.05  # flat
    x[0, ::3] = float("-inf")
    x[1] = -x[1].abs() - 3.0
    return x


def both(x: torch.Tensor, k: torch.Tensor | None, p: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """(the sort path's masked logits, the threshold path's)."""
    max_k = int(k[k < VOCAB].max()) if k is not None and (k < VOCAB).any() else 1
    by_sort, by_threshold = x.clone(), x.clone()
    _apply_top_k_top_p(by_sort, k, p, max_k)
    top_p.apply_top_k_top_p(by_threshold, k, p, max_k)
    return by_sort, by_threshold


@pytest.mark.parametrize("candidates", [1024, 16])  # 16: most rows searched whole
def test_top_p_equals_the_sort_path(monkeypatch, candidates):
    monkeypatch.setattr(top_p, "CANDIDATES", candidates)
    x = logits(8, seed=candidates)
    p = torch.tensor([0.9, 0.5, 0.999, 0.01, 0.9, 0.7, TOP_P_OFF, 0.95])
    by_sort, by_threshold = both(x, None, p)
    assert torch.equal(by_sort, by_threshold)
    assert (by_threshold[6] == x[6]).all()  # top-p off: nothing masked


@pytest.mark.parametrize("candidates", [1024, 16])
def test_top_k_with_top_p_equals_the_sort_path(monkeypatch, candidates):
    monkeypatch.setattr(top_p, "CANDIDATES", candidates)
    x = logits(6, seed=7)
    k = torch.tensor([5, VOCAB, 40, 2000, VOCAB, 1])
    p = torch.tensor([0.9, 0.8, TOP_P_OFF, 0.95, 0.3, 0.5])
    by_sort, by_threshold = both(x, k, p)
    assert torch.equal(by_sort, by_threshold)
    by_sort, by_threshold = both(x, k, None)  # top-k alone
    assert torch.equal(by_sort, by_threshold)


def test_ties_at_the_threshold_all_stay():
    """The one difference from the sort path: every value equal to the threshold stays."""
    x = torch.tensor([[3.0, 1.0, 1.0, 1.0, -2.0]])
    top_p.apply_top_k_top_p(x, None, torch.tensor([0.9]), 1)
    assert torch.isfinite(x[0, :4]).all() and x[0, 4] == float("-inf")


@pytest.mark.parametrize("seed, chunk", [(0, 4096), (1, 4096), (2, 512)])  # 512: six histogram programs a row
def test_triton_search_equals_the_torch_search(triton_search, monkeypatch, seed, chunk):
    """The kernels keep the same values as the sort-based search in every marked row (flat and peaked,
    -inf entries, a top-k floor; top_p 1.0, which float sums may not reach: every value stays)."""
    monkeypatch.setattr(triton_search, "CHUNK", chunk)
    x = logits(6, seed=seed)
    floor = torch.full((6, 1), float("-inf"))
    floor[2, 0] = x[2].topk(50).values[-1]  # a top-k floor
    lse = torch.logsumexp(x.masked_fill(x < floor, float("-inf")), dim=1, keepdim=True)
    p = torch.tensor([0.9, 0.5, 0.95, 0.2, 0.99, 1.0])
    search = torch.tensor([[True], [True], [True], [False], [True], [True]])
    kernel = triton_search.search_thresholds(x, lse, floor, p, search)
    expected = top_p._search_by_sort(x, lse, floor, p, search)
    rows = search[:, 0]
    assert torch.equal((x >= kernel)[rows], (x >= expected)[rows])
    assert torch.equal(kernel[:3], expected[:3])  # an element's value where the nucleus ends inside the row


def test_sampler_switch(monkeypatch):
    monkeypatch.setenv("PAGODA_SAMPLER_TOP_P", "threshold")
    sampler = Sampler()
    assert sampler.top_p_by_threshold
    x = logits(4, seed=3)
    rows = [SamplingRow(SamplingParams(temperature=0.8, top_p=0.9, top_k=k), [1], []) for k in (0, 20, 0, 5)]
    monkeypatch.setenv("PAGODA_SAMPLER_TOP_P", "sort")
    assert torch.equal(sampler.process(x, rows), Sampler().process(x, rows))
    monkeypatch.setenv("PAGODA_SAMPLER_TOP_P", "radix")
    with pytest.raises(ValueError, match="PAGODA_SAMPLER_TOP_P='radix': use 'sort'"):
        Sampler()


def test_top_p_with_the_triton_search(triton_search, monkeypatch):
    """The whole path with the kernel searching the flat rows (16 candidates): the sort path's mask."""
    monkeypatch.setattr(top_p, "CANDIDATES", 16)
    x = logits(6, seed=11)
    k = torch.tensor([VOCAB, 300, VOCAB, VOCAB, 2500, VOCAB])
    p = torch.tensor([0.9, 0.8, 0.6, 0.95, 0.99, TOP_P_OFF])
    by_sort, by_threshold = both(x, k, p)
    assert torch.equal(by_sort, by_threshold)


COMPILE = """
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from pagoda.engine.top_p_triton import BLOCK, BUCKETS, CHUNK, DIGIT, _histogram_kernel, _select_kernel
kernels = {
    _histogram_kernel: (dict(x_ptr="*fp32", lse_ptr="*fp32", floor_ptr="*fp32", search_ptr="*i8", prefix_ptr="*i64",
                             hist_ptr="*fp32", vocab="i32", stride_x="i64", num_chunks="i32", shift="i32"),
                        dict(BLOCK=BLOCK, CHUNK=CHUNK, DIGIT=DIGIT, BUCKETS=BUCKETS)),
    _select_kernel: (dict(hist_ptr="*fp32", prefix_ptr="*i64", above_ptr="*fp32", top_p_ptr="*fp32", search_ptr="*i8",
                          num_chunks="i32"), dict(CHUNKS=32, BUCKETS=BUCKETS)),
}
for fn, (signature, constants) in kernels.items():
    source = ASTSource(fn=fn, signature={**signature, **{k: "constexpr" for k in constants}}, constexprs=constants)
    assert triton.compile(source, target=GPUTarget("cuda", 90, 32)).asm["ptx"]
print(True)
"""


def test_search_kernels_compile_for_sm90():
    """The interpreter is lenient: the kernels must also compile for a GPU (sm_90 PTX, no GPU needed)."""
    import os
    import subprocess
    import sys

    pytest.importorskip("triton")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, "-c", COMPILE], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and done.stdout.strip().endswith("True"), done.stderr[-3000:]


@pytest.mark.gpu
def test_threshold_equals_sort_on_the_gpu():
    """Batch 256 x 128256 on the GPU: peaked rows end among the candidates, flat ones are searched whole
    by the kernel; the masks equal the sort path's, but for the one token at the nucleus's edge where a
    flat row's mass reaches top_p within float32 summation error (H100, 2026-11-27: 2 of 128 flat rows,
    each one token of mass 8e-6 in or out, either path's kept mass within 1e-5 of top_p)."""
    g = torch.Generator(device="cuda").manual_seed(5)
    x = torch.randn(256, 128256, device="cuda", generator=g)
    x[:128] *= 6.0
    x[128:] *= 0.02
    p = torch.rand(256, device="cuda", generator=g) * 0.9 + 0.05
    k = torch.where(torch.arange(256, device="cuda") % 4 == 0, 50, 128256)
    by_sort, by_threshold = x.clone(), x.clone()
    _apply_top_k_top_p(by_sort, k, p, 50)
    top_p.apply_top_k_top_p(by_threshold, k, p, 50)
    kept_sort, kept_threshold = by_sort > float("-inf"), by_threshold > float("-inf")
    differ = kept_sort != kept_threshold
    assert torch.equal(by_sort[kept_sort & kept_threshold], x[kept_sort & kept_threshold])
    assert not differ[:128].any() and int(differ.any(dim=1).sum()) <= 8  # peaked rows exact; flat rows at most
    assert int(differ.sum(dim=1).max()) <= 1  # one edge token a row
    probs = torch.softmax(x.double(), dim=-1)
    mass_sort, mass_threshold = (probs * kept_sort).sum(-1), (probs * kept_threshold).sum(-1)
    assert float((mass_sort - mass_threshold).abs().max()) < 2e-5
    no_k = k == 128256  # the nucleus holds top_p of the mass where top-k does not cut first
    assert bool((mass_threshold[no_k] > p[no_k].double() - 2e-5).all())
