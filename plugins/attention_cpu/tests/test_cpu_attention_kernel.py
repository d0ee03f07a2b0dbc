"""The C++ attention kernel against a float64 reference: decodes (one new token), whole prompts and chunks after
a cached prefix, mixed in one call; block tables in any order, any lengths, GQA/MQA/MHA, sliding windows,
float32/bfloat16/float16, a strided query, head sizes on and off the vector path."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from pagoda_attention_cpu.build import load_kernel

BLOCK = 16


def reference(q, cache, tables, lens, starts, scale, window):
    """float64 causal attention of each sequence's new tokens (the last of its positions) over its cached rows."""
    heads, d = q.shape[1:]
    kv_heads = cache.shape[3]
    out = torch.zeros(q.shape, dtype=torch.float64)
    for i in range(len(lens)):
        length, begin, end = int(lens[i]), int(starts[i]), int(starts[i + 1])
        rows = cache[:, tables[i].long()].flatten(1, 2)[:, :length].double()  # [2, length, kv_heads, d]
        k, v = (x.repeat_interleave(heads // kv_heads, dim=1) for x in rows)
        for token in range(begin, end):
            position = length - (end - token)
            first = max(0, position + 1 - window) if window else 0
            probs = (torch.einsum("hd,thd->ht", q[token].double(), k[first : position + 1]) * scale).softmax(-1)
            out[token] = torch.einsum("ht,thd->hd", probs, v[first : position + 1])
    return out


def random_case(heads, kv_heads, d, lens, new_tokens, dtype, seed=0):
    """Sequences of lens[i] positions whose last new_tokens[i] are this call's queries."""
    torch.manual_seed(seed)
    per_seq = -(-max(lens) // BLOCK)
    num_blocks = len(lens) * per_seq + 3
    cache = torch.randn(2, num_blocks, BLOCK, kv_heads, d).to(dtype)
    tables = torch.randperm(num_blocks)[: len(lens) * per_seq].view(len(lens), per_seq).to(torch.int32)
    starts = torch.tensor([0, *torch.tensor(new_tokens).cumsum(0).tolist()], dtype=torch.int32)
    qkv = torch.randn(int(starts[-1]), heads + 2 * kv_heads, d).to(dtype)  # the query is a strided view, as in a model
    return qkv[:, :heads], cache, tables, torch.tensor(lens, dtype=torch.int32), starts


def attend(q, cache, tables, lens, starts, scale, window=0):
    out = torch.empty(q.shape, dtype=q.dtype)
    load_kernel().paged_attention(out, q, cache[0], cache[1], tables, lens, starts, scale, window)
    return out


DECODES = ([1, 15, 16, 17, 40, 97, 3], [1] * 7)  # one token, block edges, several blocks
# A whole prompt, decodes, a chunk after a cached prefix, a prompt of one tile + 1, a long prompt.
MIXED = ([23, 40, 1, 50, 17, 90], [23, 1, 1, 20, 17, 90])


# On AVX-512 the vector path sums 4 rows x 64 lanes at a time: groups of 1, 3, 4, 5 and 8 heads, head sizes of
# 1 to 4 vectors and past 64 lanes; 40 takes the row-at-a-time path.
@pytest.mark.parametrize("heads,kv_heads,d", [(8, 2, 64), (4, 1, 128), (3, 3, 32), (6, 2, 40), (16, 2, 96),
                                              (5, 1, 80), (2, 1, 256), (9, 3, 64), (4, 2, 48)])
@pytest.mark.parametrize("window", [0, 7])
@pytest.mark.parametrize("layout", [DECODES, MIXED], ids=["decodes", "mixed"])
def test_float32_matches_float64_reference(heads, kv_heads, d, window, layout):
    q, cache, tables, lens, starts = random_case(heads, kv_heads, d, *layout, torch.float32)
    expected = reference(q, cache, tables, lens, starts, d**-0.5, window)
    assert (attend(q, cache, tables, lens, starts, d**-0.5, window).double() - expected).abs().max() < 1e-5


@pytest.mark.parametrize("dtype,tolerance", [(torch.bfloat16, 2e-2), (torch.float16, 3e-3)])
def test_half_precisions_match_float64_reference(dtype, tolerance):
    q, cache, tables, lens, starts = random_case(8, 2, 64, [5, 33, 64, 200], [5, 1, 30, 1], dtype, seed=1)
    expected = reference(q, cache, tables, lens, starts, 0.125, 0)
    assert (attend(q, cache, tables, lens, starts, 0.125).double() - expected).abs().max() < tolerance


def test_large_scores_stay_finite():
    """Scores far from zero: the softmax subtracts the maximum before its exponential."""
    q, cache, tables, lens, starts = random_case(4, 2, 64, [50, 70], [1, 30], torch.float32, seed=2)
    q = q * 40
    out = attend(q, cache, tables, lens, starts, 0.125)
    expected = reference(q, cache, tables, lens, starts, 0.125, 0)
    assert torch.isfinite(out).all() and (out.double() - expected).abs().max() < 1e-4


def test_bad_arguments_are_refused_with_the_reason():
    q, cache, tables, lens, starts = random_case(4, 2, 64, [5, 9], [1, 1], torch.float32)
    kernel = load_kernel().paged_attention
    with pytest.raises(RuntimeError, match="int32"):
        kernel(torch.empty(q.shape), q, cache[0], cache[1], tables.long(), lens, starts, 0.125, 0)
    with pytest.raises(RuntimeError, match="num_seqs \\+ 1"):
        kernel(torch.empty(q.shape), q, cache[0], cache[1], tables, lens, starts[:2], 0.125, 0)
    with pytest.raises(RuntimeError, match="one dtype"):
        kernel(torch.empty(q.shape), q.double(), cache[0], cache[1], tables, lens, starts, 0.125, 0)
    with pytest.raises(RuntimeError, match="heads % kv_heads"):
        kernel(torch.empty(2, 3, 64), q[:, :3], cache[0], cache[1], tables, lens, starts, 0.125, 0)


def test_a_machine_without_a_compiler_gets_the_reason_and_the_fix(tmp_path):
    """No C++ compiler: the build error names what failed and how to go on; nothing half-built is loaded."""
    probe = ("from pagoda_attention_cpu.build import load_kernel\n"
             "from pagoda.platforms.csrc import ExtensionUnavailable\n"
             "try:\n    load_kernel()\nexcept ExtensionUnavailable as error:\n    print(error)\n")
    env = {**os.environ, "CXX": str(tmp_path / "no-such-c++"), "TORCH_EXTENSIONS_DIR": str(tmp_path / "ext")}
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=300).stdout
    assert out.startswith("the C++ build failed (") and "no-such-c++" in out, out
    assert "install a C++ compiler such as g++, or use --attention-backend torch" in out
