"""MoE routing, the torch reference MoE and the fused Triton kernel (TRITON_INTERPRET=1 on CPU)
against a float64 dense computation: every expert applied to every token, masked by the routing."""

from __future__ import annotations

import importlib.util
import os

import pytest
import torch
import torch.nn.functional as F

from pagoda.layers.moe import select_experts
from pagoda.interfaces.ops import CustomOps
from pagoda.testing import import_triton_kernels

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
TOL = {torch.float32: 1e-5, torch.bfloat16: 2e-2}


def _case(tokens: int, experts: int, top_k: int, hidden: int, inter: int, seed: int = 0, unused: int | None = None):
    """Random x, w13, w2 and routing; expert ``unused`` (if given) receives no token."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(tokens, hidden, generator=g)
    w13 = torch.randn(experts, 2 * inter, hidden, generator=g) * hidden**-0.5
    w2 = torch.randn(experts, hidden, inter, generator=g) * inter**-0.5
    logits = torch.randn(tokens, experts, generator=g)
    if unused is not None:
        logits[:, unused] = -1e9
    weights, ids = select_experts(logits, top_k, renormalize=True)
    return x, w13, w2, weights, ids


def _dense_float64(x, w13, w2, weights, ids) -> torch.Tensor:
    """[T, hidden]: each expert on all tokens, combined by a [T, E] routing matrix."""
    gate_up = torch.einsum("th,enh->ten", x.double(), w13.double())  # [T, E, 2 * inter]
    gate, up = gate_up.chunk(2, dim=-1)
    y = torch.einsum("tei,ehi->teh", F.silu(gate) * up, w2.double())  # [T, E, hidden]
    mix = torch.zeros(x.shape[0], w13.shape[0], dtype=torch.float64).scatter_add_(1, ids, weights.double())
    return torch.einsum("te,teh->th", mix, y)


def _rel(got: torch.Tensor, expected: torch.Tensor) -> float:
    return ((got.double().cpu() - expected).abs().max() / expected.abs().max()).item()


def test_select_experts_softmax_topk_renormalize():
    logits = torch.tensor([[2.0, 0.0, 1.0, -1.0], [0.0, 3.0, 3.5, 0.0]])
    weights, ids = select_experts(logits, 2, renormalize=False)
    assert ids.tolist() == [[0, 2], [2, 1]]
    probs = torch.softmax(logits, -1)
    assert torch.allclose(weights, probs.gather(1, ids))
    renormed, same_ids = select_experts(logits, 2, renormalize=True)
    assert torch.equal(same_ids, ids) and torch.allclose(renormed.sum(-1), torch.ones(2))


@pytest.mark.parametrize("tokens, experts, top_k", [(1, 4, 2), (9, 6, 1), (13, 5, 3)])
def test_reference_matches_dense_float64(tokens, experts, top_k):
    x, w13, w2, weights, ids = _case(tokens, experts, top_k, hidden=24, inter=20, unused=0)
    got = CustomOps().fused_moe(x, w13, w2, weights, ids)
    assert got.shape == x.shape and _rel(got, _dense_float64(x, w13, w2, weights, ids)) < 1e-5


@pytest.fixture(scope="module")
def triton_moe():
    if importlib.util.find_spec("triton") is None:  # not importorskip: triton must first load under the interpreter
        pytest.skip("needs triton")
    interpret = import_triton_kernels("pagoda.layers.fused_moe_triton")
    from pagoda.layers import fused_moe_triton

    previous = os.environ.get("TRITON_INTERPRET")
    if interpret:
        os.environ["TRITON_INTERPRET"] = "1"
    yield fused_moe_triton
    if interpret and previous is None:
        del os.environ["TRITON_INTERPRET"]


@pytest.mark.parametrize("experts, top_k", [(4, 2), (8, 2), (6, 1)])
def test_align_by_expert_groups_rows_in_padded_runs(triton_moe, experts, top_k):
    _, _, _, _, ids = _case(21, experts, top_k, 8, 8, seed=3, unused=1)
    block = triton_moe.tile_config(1.0).block_m
    rows, block_expert = triton_moe.align_by_expert(ids, experts, block)
    num_rows = ids.numel()
    assert sorted(r for r in rows.tolist() if r < num_rows) == list(range(num_rows))  # each row once
    flat = ids.flatten()
    for b, expert in enumerate(block_expert.tolist()):
        members = [r for r in rows[b * block:(b + 1) * block].tolist() if r < num_rows]
        if expert < 0:
            assert not members
        else:
            assert members and all(flat[r] == expert for r in members)
    assert 1 not in block_expert.tolist()  # the expert without tokens gets no block


@pytest.mark.parametrize("tokens, experts, top_k, hidden, inter", [
    (1, 4, 2, 32, 16),  # decode: one token, two single-row blocks
    (37, 8, 2, 48, 40),  # several blocks per expert; ragged N (80, 48) and K (48, 40) tiles
    (5, 3, 3, 64, 96),  # every token visits every expert
])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_triton_kernel_vs_float64(triton_moe, tokens, experts, top_k, hidden, inter, dtype):
    x, w13, w2, weights, ids = _case(tokens, experts, top_k, hidden, inter, seed=tokens, unused=experts - 1)
    expected = _dense_float64(x.to(dtype), w13.to(dtype), w2.to(dtype), weights, ids)
    args = [t.to(DEVICE) for t in (x.to(dtype), w13.to(dtype), w2.to(dtype), weights, ids)]
    got = triton_moe.fused_moe_triton(*args, CustomOps().silu_and_mul)
    assert got.dtype == dtype and got.shape == (tokens, hidden)
    assert _rel(got, expected) < TOL[dtype]


@pytest.mark.gpu
@pytest.mark.parametrize("tokens", [4, 200, 800, 2048])  # 1, 50, 200 and 512 rows per expert: each tile regime
def test_triton_kernel_tile_regimes_on_gpu(triton_moe, tokens):
    x, w13, w2, weights, ids = _case(tokens, 8, 2, hidden=256, inter=384, seed=tokens)
    expected = _dense_float64(x.bfloat16(), w13.bfloat16(), w2.bfloat16(), weights, ids)
    args = [t.cuda() for t in (x.bfloat16(), w13.bfloat16(), w2.bfloat16(), weights, ids)]
    got = triton_moe.fused_moe_triton(*args, CustomOps().silu_and_mul)
    assert _rel(got, expected) < TOL[torch.bfloat16]
