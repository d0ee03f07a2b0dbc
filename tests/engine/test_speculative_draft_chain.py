"""The draft proposer's rounds (pagoda.spec_decode.draft_chain): a first step through the draft's
runner, then the one-token steps chained on the device (inputs staged once per round, no host
read in between; decode graphs replayed where the draft has them). The drafts must be the draft
model's own greedy continuation, whatever each request's budget, across rounds that accept some,
none or all of the previous drafts; no KV block may be left behind."""

from __future__ import annotations

import numpy as np
import pytest
from pagoda import LLM, SamplingParams
from pagoda.interfaces.proposer import ProposalInput
from pagoda.spec_decode.draft_chain import ChainRow, chain_arrays
from test_decode_graphs import REPLAYS, replay_plugins  # noqa: F401 - the fixture
from tiny_models import VOCAB, random_prompts

K = 4


def _engine(target: str, draft: str, **extra) -> LLM:
    spec = {"method": "draft", "model": draft, "num_speculative_tokens": K}
    return LLM(model=target, skip_tokenizer_init=True, block_size=8, max_num_seqs=8, max_num_batched_tokens=64,
               kv_cache_memory=1 << 20, speculative_config=spec, **extra)


def _greedy(llm: LLM, sequences: list[list[int]], n: int) -> list[list[int]]:
    params = SamplingParams(temperature=0, max_tokens=n, ignore_eos=True)
    return [o.outputs[0].token_ids for o in llm.generate(sequences, params, use_tqdm=False)]


def _rounds(proposer, reference: LLM) -> int:
    """Three rounds over six requests (budgets k, 1, 0, 2, k and a prompt longer than the draft's
    token budget); each round's drafts checked against the draft model's greedy continuation.
    Returns the drafts proposed."""
    prompts = random_prompts(5, range(5, 30), seed=11) + random_prompts(1, range(60, 61), seed=12)
    budgets = [None, 1, 0, 2, None, None]
    sequences, total = [list(p) for p in prompts], 0
    for round_ in range(3):
        inputs = [ProposalInput(f"r{i}", tuple(s), max_drafts=b) for i, (s, b) in enumerate(zip(sequences, budgets))]
        drafts = proposer.propose(inputs, K).token_ids
        wanted = [min(K, K if b is None else b) for b in budgets]
        expected = _greedy(reference, sequences, K)
        for i, d in enumerate(drafts):
            if i == 5 and round_ == 0:  # its prompt is caught up over two rounds: no drafts yet
                assert d == []
                continue
            assert d == expected[i][: wanted[i]], (round_, i)
        total += sum(map(len, drafts))
        for i, d in enumerate(drafts):  # the target accepts all, some or none, then emits a token
            accepted = d[: (round_ + i) % (len(d) + 1)] if d else []
            sequences[i] += accepted + [(7 * round_ + 13 * i + 5) % VOCAB]
    return total


def _check_released(proposer) -> None:
    for i in range(6):
        proposer.release(f"r{i}")
    assert not proposer._shadows and proposer.kv_cache.num_free_blocks == proposer.kv_cache.num_blocks


def test_chain_arrays_feed_known_tokens_then_drafts_and_pad_rows_past_their_steps() -> None:
    rows = [ChainRow(start=13, steps=3, blocks=[4, 9]), ChainRow(start=5, steps=1, blocks=[2]),
            ChainRow(start=6, steps=3, blocks=[3, 6], fed=(11, 12))]
    a = chain_arrays(rows, num_steps=3, size=4, block_size=8)
    assert a["input_ids"].tolist() == [[0, 0, 11, 0], [0, 0, 12, 0], [0, 0, 0, 0]]
    assert a["from_prev"].tolist() == [[1, 1, 0, 0], [1, 0, 0, 0], [1, 0, 1, 0]]
    assert a["positions"].tolist() == [[13, 5, 6, 0], [14, 0, 7, 0], [15, 0, 8, 0]]
    assert a["slot_mapping"].tolist() == [[9 * 8 + 5, 2 * 8 + 5, 3 * 8 + 6, -1], [9 * 8 + 6, -1, 3 * 8 + 7, -1],
                                          [9 * 8 + 7, -1, 6 * 8 + 0, -1]]
    assert a["seq_lens"].dtype == np.int32
    assert a["seq_lens"].tolist() == [[14, 6, 7, 1], [15, 1, 8, 1], [16, 1, 9, 1]]


def test_draft_rounds_are_the_draft_models_greedy_tokens(tiny_models) -> None:
    target, draft = tiny_models["llama"][0], tiny_models["qwen3"][0]
    proposer = _engine(target, draft).engine.core.speculator.proposer
    assert proposer.runner.graphs is None  # CPU: eager chained steps
    reference = LLM(model=draft, skip_tokenizer_init=True, block_size=8, kv_cache_memory=1 << 20)
    assert _rounds(proposer, reference) > 30
    _check_released(proposer)


def test_draft_rounds_replay_decode_graphs(replay_plugins, tiny_models) -> None:  # noqa: F811
    """The chained steps replay the draft's decode graphs (one per step, padded to a captured size)."""
    target, draft = tiny_models["llama"][0], tiny_models["qwen3"][0]
    extra = dict(platform="replay-cpu", attention_backend="torch-graphs")
    proposer = _engine(target, draft, **extra).engine.core.speculator.proposer
    graphs = proposer.runner.graphs
    assert graphs is not None
    replayed, replay = [], graphs.replay
    graphs.replay = lambda size: replayed.append(size) or replay(size)
    reference = LLM(model=draft, skip_tokenizer_init=True, block_size=8, kv_cache_memory=1 << 20, enforce_eager=True,
                    **extra)
    REPLAYS["count"] = 0
    assert _rounds(proposer, reference) > 30
    assert len(replayed) >= 3 * K and set(replayed) <= {1, 4, 8}  # 4-5 drafting rows; the long prompt's alone
    _check_released(proposer)


@pytest.mark.gpu
def test_draft_rounds_on_cuda_graphs(tiny_models) -> None:
    """On a GPU (Triton backend, float32): the chained steps replay CUDA graphs and give the draft
    model's greedy tokens (computed eagerly); the round waits for the device once per chain."""
    target, draft = tiny_models["llama"][0], tiny_models["qwen3"][0]
    extra = dict(attention_backend="triton", dtype="float32")
    proposer = _engine(target, draft, **extra).engine.core.speculator.proposer
    assert proposer.runner.graphs is not None
    reference = LLM(model=draft, skip_tokenizer_init=True, block_size=8, kv_cache_memory=1 << 20, enforce_eager=True,
                    **extra)
    assert _rounds(proposer, reference) > 30
    _check_released(proposer)
