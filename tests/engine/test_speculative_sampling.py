"""Speculative decoding for every kind of request: sampled requests keep their exact outputs (a
seeded request's tokens and logprobs equal those of a run without speculation, whatever was
drafted), penalties/min_tokens/top-k/top-p/logprobs/n > 1 work, back-off, proposers that return q,
prefix caching and chunked prefill, and the statistics that reach /metrics."""

from __future__ import annotations

import math

import pytest

from pagoda import LLM, SamplingParams
from pagoda.errors import ConfigError
from pagoda.plugins import manager as plugin_manager
from spec_proposers import OracleProposer, WrongProposer, proposer_module
from tiny_models import VOCAB, random_prompts

K = 4


@pytest.fixture
def proposers():
    previous = plugin_manager._MANAGER
    plugin_manager._MANAGER = plugin_manager.PluginManager(modules={"spec-tests": proposer_module()},
                                                           entry_points=False)
    yield
    plugin_manager._MANAGER = previous


def _llm(path: str, spec: dict | None, **extra) -> LLM:
    config = dict(model=path, skip_tokenizer_init=True, block_size=8, max_num_seqs=8, max_num_batched_tokens=64,
                  kv_cache_memory=1 << 20, speculative_config=spec)
    return LLM(**{**config, **extra})


def _spec(method: str, **options) -> dict:
    return {"method": method, "num_speculative_tokens": K, **options}


def _tokens(outputs) -> list[list[list[int]]]:
    return [[c.token_ids for c in o.outputs] for o in outputs]


def _all_kinds_of_params() -> list[SamplingParams]:
    return [
        SamplingParams(temperature=0.8, seed=1, max_tokens=40, ignore_eos=True, logprobs=2),
        SamplingParams(temperature=1.0, seed=2, max_tokens=40, ignore_eos=True, top_k=20, top_p=0.9, min_p=0.02),
        SamplingParams(temperature=0.7, seed=3, max_tokens=40, ignore_eos=True, repetition_penalty=1.3,
                       frequency_penalty=0.4, presence_penalty=0.3),
        SamplingParams(temperature=0, max_tokens=40, repetition_penalty=1.2, logprobs=1, ignore_eos=True),
        SamplingParams(temperature=1.0, seed=5, max_tokens=30, min_tokens=25, stop_token_ids=[7, 9, 11]),
        SamplingParams(temperature=0.9, seed=6, max_tokens=24, n=2, ignore_eos=True),
    ]


def test_seeded_sampled_outputs_equal_no_speculation(tiny_models, proposers) -> None:
    """Drafts from a reference run (one in three corrupted): most rounds accept several drafts,
    many reject one; every token and logprob still equals the run without speculation."""
    path, _ = tiny_models["llama"]
    prompts = random_prompts(6, range(5, 20), seed=8)
    params = _all_kinds_of_params()
    plain = _llm(path, None).generate(prompts, params, use_tqdm=False)
    ids = [f"{i}#{j}" if p.n > 1 else str(i) for i, p in enumerate(params) for j in range(p.n)]
    flat = [c.token_ids for o in plain for c in o.outputs]
    OracleProposer.reference = {rid: prompts[int(rid.split("#")[0])] + toks for rid, toks in zip(ids, flat)}
    llm = _llm(path, _spec("oracle", backoff=False))
    spec = llm.generate(prompts, params, use_tqdm=False)
    assert _tokens(spec) == _tokens(plain)
    for a, b in zip(plain[0].outputs[0].logprobs + plain[3].outputs[0].logprobs,
                    spec[0].outputs[0].logprobs + spec[3].outputs[0].logprobs):
        assert a.keys() == b.keys() and all(math.isclose(a[t].logprob, b[t].logprob, abs_tol=1e-4) for t in a)
    s = llm.engine.stats
    assert s.spec_num_accepted_tokens > 0.5 * s.spec_num_draft_tokens  # the oracle is mostly right...
    assert s.spec_num_accepted_tokens < s.spec_num_draft_tokens  # ...but not always
    assert len(s.spec_accepted_per_position) == K and s.spec_accepted_per_position[-1] > 0
    assert llm.engine.core.kv_cache.num_free_blocks == llm.engine.core.kv_cache.num_blocks


def test_same_seed_same_output_with_a_q_returning_proposer(tiny_models, proposers) -> None:
    """Drafts with their distribution q go through standard rejection sampling: greedy requests
    keep their tokens, seeded sampled requests repeat themselves."""
    path, _ = tiny_models["llama"]
    prompts = random_prompts(4, range(5, 20), seed=9)
    greedy = [SamplingParams(temperature=0, max_tokens=30, ignore_eos=True)] * 2
    sampled = [SamplingParams(temperature=1.0, seed=s, max_tokens=30, ignore_eos=True, logprobs=1) for s in (1, 2)]
    plain = _llm(path, None).generate(prompts[:2], greedy, use_tqdm=False)
    first = _llm(path, _spec("sampled-q", backoff=False)).generate(prompts, greedy + sampled, use_tqdm=False)
    llm = _llm(path, _spec("sampled-q", backoff=False))
    second = llm.generate(prompts, greedy + sampled, use_tqdm=False)
    assert _tokens(first[:2]) == _tokens(plain)
    assert _tokens(first) == _tokens(second)
    assert all(len(c.logprobs) == len(c.token_ids) for o in second[2:] for c in o.outputs)
    assert llm.engine.stats.spec_num_draft_tokens > 0


def test_back_off_stops_hopeless_drafting(tiny_models, proposers) -> None:
    """Drafts that are never accepted: after two misses a request pauses (2, 4, ... 32 steps),
    so only a few rounds are verified; outputs are unchanged."""
    path, _ = tiny_models["llama"]
    prompts = random_prompts(6, range(5, 20), seed=10)
    params = SamplingParams(temperature=0, max_tokens=60, ignore_eos=True)
    plain = _llm(path, None).generate(prompts, params, use_tqdm=False)
    WrongProposer.token = min(set(range(VOCAB)) - {t for o in plain for c in o.outputs for t in c.token_ids})
    stats = {}
    for backoff in (False, True):
        llm = _llm(path, _spec("wrong", backoff=backoff))
        assert _tokens(llm.generate(prompts, params, use_tqdm=False)) == _tokens(plain)
        stats[backoff] = llm.engine.stats
        assert stats[backoff].spec_num_accepted_tokens == 0
    assert stats[False].spec_num_drafts >= 6 * 50  # every step of every request verified drafts
    assert stats[True].spec_num_drafts <= 6 * 8  # 2 misses, then probes after 2, 4, 8, 16 and 32 steps


def test_prefix_caching_and_chunked_prefill_with_speculation(tiny_models) -> None:
    """Long prompts sharing a prefix, chunked by a small token budget while other requests verify
    drafts: greedy tokens equal, the prefix cache hits, nothing left held."""
    path, _ = tiny_models["llama"]
    shared = random_prompts(1, range(40, 41), seed=11)[0]
    tails = random_prompts(6, range(3, 12), seed=12)
    prompts = [shared + t + shared[:10] for t in tails]  # repeated text: the n-gram proposer finds drafts
    params = [SamplingParams(temperature=0, max_tokens=n, ignore_eos=True) for n in (40, 25, 33, 12, 40, 18)]
    extra = dict(max_num_batched_tokens=24, enable_prefix_caching=True, max_model_len=200)
    plain = _llm(path, None, **extra).generate(prompts, params, use_tqdm=False)
    llm = _llm(path, _spec("ngram", prompt_lookup_min=1, prompt_lookup_max=3), **extra)
    assert _tokens(llm.generate(prompts, params, use_tqdm=False)) == _tokens(plain)
    assert llm.engine.stats.prefix_cache_hit_rate > 0.2 and llm.engine.stats.spec_num_accepted_tokens > 0
    assert llm.engine.core.kv_cache.num_free_blocks == llm.engine.core.kv_cache.num_blocks


def test_serial_steps_and_overlap_agree(tiny_models) -> None:
    path, _ = tiny_models["llama"]
    base = random_prompts(4, range(6, 14), seed=3)
    prompts = [p * 3 for p in base]
    params = [SamplingParams(temperature=0, max_tokens=30, ignore_eos=True),
              SamplingParams(temperature=0.8, seed=4, max_tokens=30, ignore_eos=True)] * 2
    spec = _spec("ngram", prompt_lookup_min=1)
    serial = _llm(path, spec, overlap_steps=False).generate(prompts, params, use_tqdm=False)
    overlapped = _llm(path, spec).generate(prompts, params, use_tqdm=False)
    plain = _llm(path, None).generate(prompts, params, use_tqdm=False)
    assert _tokens(serial) == _tokens(overlapped) == _tokens(plain)


def test_unsupported_combinations_are_refused(tiny_models) -> None:
    path, _ = tiny_models["llama"]  # (tensor parallelism: tests/engine/test_tensor_parallel.py)
    with pytest.raises(ConfigError, match='needs "model"'):
        _llm(path, _spec("draft"))
    with pytest.raises(ConfigError, match="backoff must be true or false"):
        _llm(path, _spec("ngram", backoff="yes"))


def test_texts_stop_strings_and_stop_tokens_equal_no_speculation(tiny_models, proposers) -> None:
    """Rounds of several tokens reach the front end at once: it still cuts the text and the tokens
    at a stop string exactly where single tokens would, and keeps the text before a stop token."""
    path, _ = tiny_models["llama"]
    prompts = random_prompts(4, range(5, 20), seed=13)
    free = _llm(path, None, skip_tokenizer_init=False).generate(
        prompts, SamplingParams(temperature=0, max_tokens=40, ignore_eos=True), use_tqdm=False)
    reference = [o.outputs[0].token_ids for o in free]
    OracleProposer.reference = {str(i): p + r for i, (p, r) in enumerate(zip(prompts, reference))}
    params = [SamplingParams(temperature=0, max_tokens=40, stop=[" ".join(f"t{t}" for t in reference[0][9:11])]),
              SamplingParams(temperature=0, max_tokens=40, stop=[f"t{reference[1][7]}"], include_stop_str_in_output=True),
              SamplingParams(temperature=0, max_tokens=40, stop_token_ids=[reference[2][12]]),
              SamplingParams(temperature=0, max_tokens=40, logprobs=1, stop=["no such text"])]

    def summary(llm: LLM) -> list:
        outs = llm.generate(prompts, params, use_tqdm=False)
        return [(c.token_ids, c.text, c.finish_reason, c.stop_reason, len(c.logprobs or [])) for o in outs for c in o.outputs]

    plain = summary(_llm(path, None, skip_tokenizer_init=False))
    spec_llm = _llm(path, _spec("oracle", backoff=False), skip_tokenizer_init=False)
    assert summary(spec_llm) == plain
    assert [p[2] for p in plain] == ["stop", "stop", "stop", "length"]
    assert spec_llm.engine.stats.spec_num_accepted_tokens > 20


def test_preemption_and_best_of_with_speculation(tiny_models) -> None:
    """A KV cache too small for the batch: requests with drafts are preempted (their drafts
    dropped) and recomputed; best_of picks among seeded sequences as without speculation."""
    path, _ = tiny_models["llama"]
    base = random_prompts(6, range(6, 12), seed=14)
    prompts = [p * 3 for p in base]
    params = [SamplingParams(temperature=0, max_tokens=40, ignore_eos=True)] * 5 + [
        SamplingParams(temperature=0.8, seed=9, n=1, best_of=3, max_tokens=30, ignore_eos=True)]
    small = dict(kv_cache_memory=14 * 2 * 2 * 8 * 2 * 16 * 4)  # 14 blocks of 8 tokens
    plain = _llm(path, None, **small).generate(prompts, params, use_tqdm=False)
    llm = _llm(path, _spec("ngram", prompt_lookup_min=1, backoff=False), **small)
    assert _tokens(llm.generate(prompts, params, use_tqdm=False)) == _tokens(plain)
    assert llm.engine.stats.num_preemptions > 0 and llm.engine.stats.spec_num_accepted_tokens > 0
    assert llm.engine.core.kv_cache.num_free_blocks == llm.engine.core.kv_cache.num_blocks
