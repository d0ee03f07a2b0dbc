"""Engine behaviour: prefix caching, preemption, seeds, n > 1, stop conditions, errors."""

from __future__ import annotations

import json
import os

import pytest

from tiny_models import make_tiny_model, random_prompts, save_word_tokenizer
from pagoda import LLM, SamplingParams
from pagoda.errors import ModelLoadError, RequestError, UnknownChoiceError

GREEDY = SamplingParams(temperature=0, max_tokens=24)


@pytest.fixture(scope="module")
def llama_path(tiny_models):
    return tiny_models["llama"][0]


@pytest.fixture(scope="module")
def llm(llama_path):
    return LLM(model=llama_path, block_size=8)


def tokens(outputs):
    return [o.outputs[0].token_ids for o in outputs]


def test_prefix_caching_on_off_identical_and_hits(llama_path):
    shared = random_prompts(1, range(40, 41), seed=3)[0]
    prompts = [shared + tail for tail in random_prompts(6, range(2, 9), seed=4)]
    cached = LLM(model=llama_path, block_size=8, enable_prefix_caching=True)
    plain = LLM(model=llama_path, block_size=8, enable_prefix_caching=False)
    first = cached.generate(prompts[:1], GREEDY, use_tqdm=False)  # warms the cache with the shared prefix
    rest = cached.generate(prompts[1:], GREEDY, use_tqdm=False)
    assert tokens(first + rest) == tokens(plain.generate(prompts, GREEDY, use_tqdm=False))
    assert cached.engine.core.kv_cache.prefix_cache_stats.hit_rate > 0
    assert all(o.num_cached_tokens >= 40 - 8 for o in rest)
    assert plain.engine.core.kv_cache.prefix_cache_stats.hit_rate == 0


def test_tiny_kv_cache_preempts_with_identical_outputs(llama_path):
    prompts = random_prompts(8, range(10, 30), seed=5)
    params = SamplingParams(temperature=0, max_tokens=40)
    roomy = LLM(model=llama_path, block_size=8)
    per_block = 2 * 2 * 8 * 2 * 16 * 4  # layers * (k, v) * block_size * kv_heads * head_dim * float32 bytes
    tight = LLM(model=llama_path, block_size=8, kv_cache_memory=12 * per_block)
    assert tight.engine.core.kv_cache.num_blocks == 12
    assert tokens(tight.generate(prompts, params, use_tqdm=False)) == tokens(roomy.generate(prompts, params, use_tqdm=False))
    assert tight.engine.stats.num_preemptions > 0


def test_seeded_sampling_reproducible_and_seeds_differ(llm):
    prompt = random_prompts(1, range(8, 9), seed=6)
    def run(seed):
        return tokens(llm.generate(prompt, SamplingParams(temperature=1.0, seed=seed, max_tokens=24), use_tqdm=False))
    assert run(1) == run(1)
    assert run(1) != run(2)
    # a seeded request gives the same tokens whatever it is batched with
    batch = llm.generate(prompt * 3 + random_prompts(3, range(5, 20), seed=9),
                         [SamplingParams(temperature=1.0, seed=1, max_tokens=24)] * 6, use_tqdm=False)
    assert batch[0].outputs[0].token_ids == run(1)[0]


def test_n_greater_than_one(llm):
    out = llm.generate(random_prompts(1, range(6, 7)), SamplingParams(n=3, temperature=1.0, seed=0, max_tokens=12),
                       use_tqdm=False)[0]
    assert [o.index for o in out.outputs] == [0, 1, 2]
    assert all(len(o.token_ids) == 12 for o in out.outputs)
    assert len({tuple(o.token_ids) for o in out.outputs}) > 1


def test_stop_conditions(llm, llama_path, tmp_path):
    prompt = random_prompts(1, range(12, 13), seed=11)
    free = llm.generate(prompt, SamplingParams(temperature=0, max_tokens=20), use_tqdm=False)[0].outputs[0]
    assert free.finish_reason == "length" and len(free.token_ids) == 20
    stop_tok = free.token_ids[5]
    first = free.token_ids.index(stop_tok)
    by_token = llm.generate(prompt, SamplingParams(temperature=0, max_tokens=20, stop_token_ids=[stop_tok]), use_tqdm=False)[0].outputs[0]
    assert (by_token.finish_reason, by_token.stop_reason, by_token.token_ids) == ("stop", stop_tok, free.token_ids[: first + 1])
    assert by_token.text.lstrip() == " ".join(f"t{t}" for t in free.token_ids[:first])  # the stop token's text is left out
    kept = llm.generate(prompt, SamplingParams(temperature=0, max_tokens=20, stop_token_ids=[stop_tok],
                                               include_stop_str_in_output=True), use_tqdm=False)[0].outputs[0]
    assert kept.text.lstrip() == " ".join(f"t{t}" for t in free.token_ids[: first + 1])
    # a stop string spanning two tokens: "tA tB" (words joined by a space)
    stop_str = f"t{free.token_ids[3]} t{free.token_ids[4]}"
    by_str = llm.generate(prompt, SamplingParams(temperature=0, max_tokens=20, stop=[stop_str]), use_tqdm=False)[0].outputs[0]
    assert by_str.finish_reason == "stop" and by_str.stop_reason == stop_str
    assert stop_str not in by_str.text and free.text.startswith(by_str.text)
    # min_tokens suppresses the stop token until enough tokens exist
    late = llm.generate(prompt, SamplingParams(temperature=0, max_tokens=20, min_tokens=first + 2,
                                               stop_token_ids=[stop_tok]), use_tqdm=False)[0].outputs[0]
    assert len(late.token_ids) >= first + 2
    # EOS from the tokenizer ends generation unless ignore_eos
    eos_dir = tmp_path / "eos"
    make_tiny_model(eos_dir, "llama")
    save_word_tokenizer(eos_dir, eos=stop_tok)
    eos_llm = LLM(model=str(eos_dir), block_size=8)
    eos = eos_llm.generate(prompt, SamplingParams(temperature=0, max_tokens=20), use_tqdm=False)[0].outputs[0]
    assert (eos.finish_reason, eos.token_ids) == ("stop", free.token_ids[: first + 1])
    ignored = eos_llm.generate(prompt, SamplingParams(temperature=0, max_tokens=20, ignore_eos=True), use_tqdm=False)[0].outputs[0]
    assert ignored.token_ids == free.token_ids
    # max_model_len caps prompt + output
    short = LLM(model=llama_path, block_size=8, max_model_len=16)
    capped = short.generate(prompt, SamplingParams(temperature=0, max_tokens=20), use_tqdm=False)[0].outputs[0]
    assert capped.finish_reason == "length" and len(capped.token_ids) == 16 - 12


def test_request_errors(llama_path):
    llm = LLM(model=llama_path, max_model_len=32)
    with pytest.raises(RequestError, match="max_model_len is 32"):
        llm.generate([list(range(40))], use_tqdm=False)
    with pytest.raises(RequestError, match="empty"):
        llm.generate([[]], use_tqdm=False)
    with pytest.raises(ValueError, match="temperature"):
        SamplingParams(temperature=-1)
    with pytest.raises(TypeError, match="unknown arguments"):
        LLM(model=llama_path, max_num_seq=3)


def test_unknown_architecture_names_the_model_hook(llama_path, tmp_path):
    for name in os.listdir(llama_path):
        os.symlink(os.path.join(llama_path, name), tmp_path / name)
    (tmp_path / "config.json").unlink()
    config = json.load(open(os.path.join(llama_path, "config.json")))
    config["architectures"] = ["FooForCausalLM"]
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises((UnknownChoiceError, ModelLoadError), match="register_models"):
        LLM(model=str(tmp_path))


def test_corrupt_safetensors_is_named(llama_path, tmp_path):
    for name in os.listdir(llama_path):
        if name != "model.safetensors":
            os.symlink(os.path.join(llama_path, name), tmp_path / name)
    data = open(os.path.join(llama_path, "model.safetensors"), "rb").read()
    (tmp_path / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelLoadError, match="model.safetensors"):
        LLM(model=str(tmp_path))


def test_priority_scheduler_runs_urgent_requests_first(llama_path):
    prompts = random_prompts(4, range(6, 12), seed=13)
    fcfs = LLM(model=llama_path, block_size=8).generate(prompts, GREEDY, use_tqdm=False)
    llm = LLM(model=llama_path, block_size=8, scheduler="priority", max_num_seqs=1)
    outs = llm.generate(prompts, GREEDY, use_tqdm=False, priority=[3, 2, 1, 0])
    assert tokens(outs) == tokens(fcfs)  # same tokens, in input order
    finished = [o.metrics.finished_time for o in outs]
    assert finished == sorted(finished, reverse=True)  # the lowest priority value finished first


def test_streamed_deltas_add_up_to_the_full_output(llm):
    prompt = random_prompts(1, range(10, 11), seed=21)[0]
    params = SamplingParams(temperature=0, max_tokens=16, logprobs=1, stop=["t5 t6"])
    full = llm.generate([prompt], params, use_tqdm=False)[0].outputs[0]
    engine = llm.engine
    engine.add_request("s", prompt, params, stream=True)
    deltas = []
    while engine.has_unfinished_requests():
        deltas += [o.outputs[0] for o in engine.step() if o.request_id == "s"]
    assert "".join(d.text for d in deltas) == full.text
    assert sum((d.token_ids for d in deltas), []) == full.token_ids
    streamed = sum((d.logprobs for d in deltas), [])
    assert [sorted(e) for e in streamed] == [sorted(e) for e in full.logprobs]  # float noise aside (cached prefix)
    assert all(abs(a[t].logprob - b[t].logprob) < 1e-4 for a, b in zip(streamed, full.logprobs) for t in a)
    assert deltas[-1].finish_reason == full.finish_reason and all(d.finish_reason is None for d in deltas[:-1])


def test_cumulative_logprob_only_when_logprobs_are_asked(llm):
    """As in vLLM: without ``logprobs`` the sampler skips them and ``cumulative_logprob`` is None;
    with ``logprobs=0`` it is the sum of the sampled tokens' logprobs. Mixed in one batch."""
    prompts = random_prompts(2, range(5, 9), seed=3)
    plain, asked = SamplingParams(temperature=0, max_tokens=6), SamplingParams(temperature=0, max_tokens=6, logprobs=0)
    out = llm.generate(prompts, [plain, asked], use_tqdm=False)
    assert out[0].outputs[0].cumulative_logprob is None and out[0].outputs[0].logprobs is None
    c = out[1].outputs[0]
    chosen = [step[token].logprob for step, token in zip(c.logprobs, c.token_ids)]
    assert len(chosen) == 6 and all(lp <= 0 for lp in chosen)
    assert abs(c.cumulative_logprob - sum(chosen)) < 1e-6
    alone = llm.generate(prompts[:1], plain, use_tqdm=False)[0].outputs[0]
    assert alone.token_ids == out[0].outputs[0].token_ids and alone.cumulative_logprob is None
