"""The ``draft`` proposer (a second model run by Pagoda's own runner and paged KV cache) and verify
steps replayed as device graphs (on CPU, through a platform whose "graph" reruns the recorded step
on its static buffers, as in test_decode_graphs.py)."""

from __future__ import annotations

import pytest

from pagoda import LLM, SamplingParams
from pagoda.errors import ConfigError
from pagoda.spec_decode.step import SpecDecodeStep
from test_decode_graphs import REPLAYS, replay_plugins  # noqa: F401 - the fixture
from tiny_models import random_prompts


def _prompts() -> list[list[int]]:
    base = random_prompts(4, range(6, 14), seed=3)
    return [p * 3 for p in base] + random_prompts(2, range(5, 30), seed=4)


def _params() -> list[SamplingParams]:
    greedy = [SamplingParams(temperature=0, max_tokens=n, ignore_eos=True) for n in (30, 3, 17, 30)]
    return greedy + [SamplingParams(temperature=0.8, seed=3, max_tokens=20, ignore_eos=True, top_p=0.9),
                     SamplingParams(temperature=0, max_tokens=25, ignore_eos=True, repetition_penalty=1.2)]


def _llm(path: str, spec: dict | None, **extra) -> LLM:
    return LLM(model=path, skip_tokenizer_init=True, block_size=8, max_num_seqs=8, max_num_batched_tokens=64,
               kv_cache_memory=1 << 20, speculative_config=spec, **extra)


def _tokens(outputs) -> list[list[int]]:
    return [o.outputs[0].token_ids for o in outputs]


def test_draft_model_greedy_tokens_equal_no_speculation(tiny_models) -> None:
    """Target: the tiny Llama; draft: the tiny Qwen3 (another random model, same vocabulary)."""
    target, draft = tiny_models["llama"][0], tiny_models["qwen3"][0]
    plain = _tokens(_llm(target, None).generate(_prompts(), _params(), use_tqdm=False))
    llm = _llm(target, {"method": "draft", "model": draft, "num_speculative_tokens": 3, "backoff": False})
    assert _tokens(llm.generate(_prompts(), _params(), use_tqdm=False)) == plain
    proposer = llm.engine.core.speculator.proposer
    assert llm.engine.stats.spec_num_draft_tokens > 50
    assert not proposer._shadows and proposer.kv_cache.num_free_blocks == proposer.kv_cache.num_blocks
    kv = llm.engine.core.kv_cache
    assert kv.num_free_blocks == kv.num_blocks


def test_draft_equal_to_the_target_is_accepted(tiny_models) -> None:
    """The target as its own draft: (near) every greedy draft is accepted, 1 + k tokens a round."""
    target = tiny_models["llama"][0]
    greedy = [SamplingParams(temperature=0, max_tokens=40, ignore_eos=True)] * 6
    plain = _tokens(_llm(target, None).generate(_prompts(), greedy, use_tqdm=False))
    llm = _llm(target, {"method": "draft", "model": target, "num_speculative_tokens": 4})
    assert _tokens(llm.generate(_prompts(), greedy, use_tqdm=False)) == plain
    s = llm.engine.stats
    assert s.spec_num_accepted_tokens >= 0.95 * s.spec_num_draft_tokens > 0
    assert 1 + s.spec_num_accepted_tokens / s.spec_num_drafts > 4.5


def test_draft_rounds_after_all_accepted_replay_two_slot_graphs(replay_plugins, tiny_models) -> None:  # noqa: F811
    """The target as its own draft on replayed graphs: nearly every round starts two tokens behind
    (all drafts accepted), caught up in the first step's two query slots; outputs unchanged."""
    target = tiny_models["llama"][0]
    extra = dict(platform="replay-cpu", attention_backend="torch-graphs")
    greedy = [SamplingParams(temperature=0, max_tokens=30, ignore_eos=True)] * 6
    plain = _tokens(_llm(target, None, enforce_eager=True, **extra).generate(_prompts(), greedy, use_tqdm=False))
    llm = _llm(target, {"method": "draft", "model": target, "num_speculative_tokens": 2, "backoff": False}, **extra)
    chain = llm.engine.core.speculator.proposer.chain
    chains, queue, replay = [], chain.queue_steps, chain.steps.replay  # per round: (fed rows?, the q of each replay)

    def queue_round(staged, size, graphed, tokens, seed=None, first_ids=None):
        chains.append((seed is None, []))
        return queue(staged, size, graphed, tokens, seed, first_ids)

    chain.queue_steps, chain.steps.replay = queue_round, lambda size, q: chains[-1][1].append(q) or replay(size, q)
    assert _tokens(llm.generate(_prompts(), greedy, use_tqdm=False)) == plain
    s = llm.engine.stats
    assert s.spec_num_accepted_tokens >= 0.95 * s.spec_num_draft_tokens > 0
    fed = [qs for is_fed, qs in chains if is_fed]
    assert all(1 <= len(qs) <= 2 for qs in fed)  # k = 2 steps at most: no catch-up step
    assert sum(qs[0] == 2 for qs in fed) >= len(fed) - 2 >= 5  # two slots: all but the first and last rounds


def test_draft_model_must_share_the_vocabulary(tiny_models, tmp_path) -> None:
    import transformers

    config = transformers.LlamaConfig(vocab_size=100, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=256)
    transformers.LlamaForCausalLM(config).save_pretrained(tmp_path)
    with pytest.raises(ConfigError, match="vocabulary has 100 tokens and the target's 384"):
        _llm(tiny_models["llama"][0], {"method": "draft", "model": str(tmp_path), "num_speculative_tokens": 2})


def test_verify_steps_replay_graphs(replay_plugins, tiny_models) -> None:  # noqa: F811
    """Verify steps padded to k + 1 query slots per request and to the captured batch sizes give
    the tokens of eager steps (and of no speculation); the draft model's decode steps replay too."""
    target, draft = tiny_models["llama"][0], tiny_models["qwen3"][0]
    extra = dict(platform="replay-cpu", attention_backend="torch-graphs")
    spec = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 1, "backoff": False}
    eager = _tokens(_llm(target, None, enforce_eager=True, **extra).generate(_prompts(), _params(), use_tqdm=False))
    llm = _llm(target, spec, **extra)
    graphs = llm.engine.core.runner.feature(SpecDecodeStep).step_graphs
    assert graphs is not None and sorted(graphs.graphs) == [1, 2, 4, 8] and graphs.q == 4
    replayed, replay = [], graphs.replay
    graphs.replay = lambda size: replayed.append(size) or replay(size)
    REPLAYS[0] = 0
    assert _tokens(llm.generate(_prompts(), _params(), use_tqdm=False)) == eager
    assert len(replayed) > 10 and REPLAYS[0] > len(replayed)  # verify steps, and plain decodes
    assert llm.engine.stats.spec_num_accepted_tokens > 0
    drafted = _llm(target, {"method": "draft", "model": draft, "num_speculative_tokens": 3}, **extra)
    assert drafted.engine.core.speculator.proposer.chain.steps.sizes == [1, 2, 4, 8]  # the draft's step graphs
    assert _tokens(drafted.generate(_prompts(), _params(), use_tqdm=False)) == eager


@pytest.mark.gpu
def test_verify_graphs_on_cuda_match_eager(tiny_models) -> None:
    """On a GPU with the Triton backend: verify steps replayed from CUDA graphs (and the draft
    model's decode graphs) give the tokens of eager steps (float32, greedy). The draft model is the
    target itself, so that drafts are accepted (on the H100 the tiny target's greedy text gave the
    n-gram proposer nothing to match: 58 drafts, none accepted)."""
    target = tiny_models["llama"][0]
    extra = dict(attention_backend="triton", dtype="float32")
    for spec in ({"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 1, "backoff": False},
                 {"method": "draft", "model": target, "num_speculative_tokens": 3}):
        eager = _tokens(_llm(target, spec, enforce_eager=True, **extra).generate(_prompts(), _params(), use_tqdm=False))
        llm = _llm(target, spec, **extra)
        assert llm.engine.core.runner.feature(SpecDecodeStep).step_graphs is not None
        assert _tokens(llm.generate(_prompts(), _params(), use_tqdm=False)) == eager
        assert llm.engine.stats.spec_num_draft_tokens > 0
        if spec["method"] == "draft":
            assert llm.engine.stats.spec_num_accepted_tokens > 0
