"""The C++ attention kernel against a float64 reference: decodes (one new token), whole prompts and chunks after
a cached prefix, mixed in one call, the new keys and values written to their slots first (padding slots skipped);
block tables in any order, any lengths, GQA/MQA/MHA, sliding windows, float32/bfloat16/float16, strided
queries, keys and values, head sizes on and off the vector path."""

from __future__ import annotations

import os
import subprocess
import sys

from dataclasses import dataclass

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
    """Sequences of lens[i] positions whose last new_tokens[i] are this call's queries; the cache holds the earlier
    positions, and the new ones' keys and values come with the call (slot_mapping: where they go)."""
    torch.manual_seed(seed)
    per_seq = -(-max(lens) // BLOCK)
    num_blocks = len(lens) * per_seq + 3
    cache = torch.randn(2, num_blocks, BLOCK, kv_heads, d).to(dtype)
    tables = torch.randperm(num_blocks)[: len(lens) * per_seq].view(len(lens), per_seq).to(torch.int32)
    starts = torch.tensor([0, *torch.tensor(new_tokens).cumsum(0).tolist()], dtype=torch.int32)
    slots = torch.cat([tables[i, torch.arange(n - k, n) // BLOCK].long() * BLOCK + torch.arange(n - k, n) % BLOCK
                       for i, (n, k) in enumerate(zip(lens, new_tokens))])
    qkv = torch.randn(int(starts[-1]), heads + 2 * kv_heads, d).to(dtype)  # strided views, as in a model
    q, k, v = qkv.split([heads, kv_heads, kv_heads], dim=1)
    if seed % 2:  # as after a k-norm (Qwen3): keys and values laid out differently
        k = k.contiguous()
    return Case(q, k, v, cache, slots, tables, torch.tensor(lens, dtype=torch.int32), starts)


@dataclass
class Case:
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    cache: torch.Tensor
    slots: torch.Tensor
    tables: torch.Tensor
    lens: torch.Tensor
    starts: torch.Tensor

    def written(self) -> torch.Tensor:
        """The cache with the new keys and values in their slots (what the kernel should attend over)."""
        cache = self.cache.clone()
        for half, x in ((0, self.k), (1, self.v)):
            cache[half].view(-1, *x.shape[1:])[self.slots[self.slots >= 0]] = x[self.slots >= 0]
        return cache

    def expected(self, scale, window=0) -> torch.Tensor:
        return reference(self.q, self.written(), self.tables, self.lens, self.starts, scale, window)

    def attend(self, scale, window=0) -> torch.Tensor:
        out = torch.empty(self.q.shape, dtype=self.q.dtype)
        load_kernel().paged_attention(out, self.q, self.k, self.v, self.cache[0], self.cache[1], self.slots,
                                      self.tables, self.lens, self.starts, scale, window)
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
    case = random_case(heads, kv_heads, d, *layout, torch.float32, seed=int(layout is MIXED))
    expected = case.expected(d**-0.5, window)
    assert (case.attend(d**-0.5, window).double() - expected).abs().max() < 1e-5
    assert case.cache.equal(case.written())  # the new keys and values in their slots, nothing else touched


def test_padding_slots_are_not_written():
    """A negative slot (a padded token) writes nothing; the other tokens still attend as they should."""
    case = random_case(8, 2, 64, *MIXED, torch.float32, seed=3)
    padded = case.starts[2].item()  # a decode's token: its slot becomes padding, its position keeps its old row
    case.slots[padded] = -1
    expected, written = case.expected(0.125), case.written()
    out = case.attend(0.125)
    assert case.cache.equal(written)
    assert (out.double() - expected).abs().max() < 1e-5


@pytest.mark.parametrize("dtype,tolerance", [(torch.bfloat16, 2e-2), (torch.float16, 3e-3)])
def test_half_precisions_match_float64_reference(dtype, tolerance):
    case = random_case(8, 2, 64, [5, 33, 64, 200], [5, 1, 30, 1], dtype, seed=1)
    assert (case.attend(0.125).double() - case.expected(0.125)).abs().max() < tolerance


def test_large_scores_stay_finite():
    """Scores far from zero: the softmax subtracts the maximum before its exponential."""
    case = random_case(4, 2, 64, [50, 70], [1, 30], torch.float32, seed=2)
    case.q = case.q * 40
    out = case.attend(0.125)
    assert torch.isfinite(out).all() and (out.double() - case.expected(0.125)).abs().max() < 1e-4


def test_bad_arguments_are_refused_with_the_reason():
    c = random_case(4, 2, 64, [5, 9], [1, 1], torch.float32)
    kernel = load_kernel().paged_attention

    def call(out=None, q=c.q, slots=c.slots, tables=c.tables, starts=c.starts):
        kernel(torch.empty(q.shape) if out is None else out, q, c.k, c.v, c.cache[0], c.cache[1], slots, tables,
               c.lens, starts, 0.125, 0)

    with pytest.raises(RuntimeError, match="int32"):
        call(tables=c.tables.long())
    with pytest.raises(RuntimeError, match="slot_mapping must be int64"):
        call(slots=c.slots.int())
    with pytest.raises(RuntimeError, match="num_seqs \\+ 1"):
        call(starts=c.starts[:2])
    with pytest.raises(RuntimeError, match="one dtype"):
        call(q=c.q.double())
    with pytest.raises(RuntimeError, match="heads % kv_heads"):
        call(out=torch.empty(2, 3, 64), q=c.q[:, :3])


def test_a_machine_without_a_compiler_gets_the_reason_and_the_fix(tmp_path):
    """No C++ compiler: the build error names what failed and how to go on; nothing half-built is loaded."""
    probe = ("from pagoda_attention_cpu.build import load_kernel\n"
             "from pagoda.platforms.csrc import ExtensionUnavailable\n"
             "try:\n    load_kernel()\nexcept ExtensionUnavailable as error:\n    print(error)\n")
    env = {**os.environ, "CXX": str(tmp_path / "no-such-c++"), "TORCH_EXTENSIONS_DIR": str(tmp_path / "ext")}
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=300).stdout
    assert out.startswith("the C++ build failed (") and "no-such-c++" in out, out
    assert "install a C++ compiler such as g++, or use --attention-backend torch" in out
