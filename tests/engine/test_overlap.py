"""Overlapped steps (the core launches step N+1 before it reads step N's tokens) change nothing
that comes out: the same tokens, texts, finish reasons and logprobs as strictly serial steps,
through EOS-like stops mid-batch, stop strings, n > 1, seeds, penalties and preemption."""

from __future__ import annotations

import math

import pytest

from tiny_models import random_prompts
from pagoda import LLM, SamplingParams
from pagoda.runner import model_runner

BLOCK = 8


def run(path: str, prompts, params, overlap: bool, **config):
    llm = LLM(model=path, block_size=BLOCK, overlap_steps=overlap, **config)
    return llm.generate(prompts, params, use_tqdm=False), llm


def summary(outputs):
    return [[(c.token_ids, c.text, c.finish_reason, c.stop_reason) for c in o.outputs] for o in outputs]


def mixed_params(reference_tokens: list[list[int]]) -> list[SamplingParams]:
    """A stop token met mid-generation, stop strings, n > 1, seeds, logprobs, penalties, min_tokens."""
    stop_token = reference_tokens[0][5]
    stop_text = " ".join(f"t{t}" for t in reference_tokens[1][3:5])
    variants = [
        SamplingParams(temperature=0, max_tokens=30, stop_token_ids=[stop_token]),
        SamplingParams(temperature=0, max_tokens=30, stop=[stop_text]),
        SamplingParams(temperature=0.8, seed=7, max_tokens=20, n=2),
        SamplingParams(temperature=0, max_tokens=12, logprobs=2),
        SamplingParams(temperature=0, max_tokens=25, repetition_penalty=1.3, presence_penalty=0.5),
        SamplingParams(temperature=0, max_tokens=18, min_tokens=10, stop_token_ids=[stop_token]),
    ]
    return [variants[i % len(variants)] if i < 6 else SamplingParams(temperature=0, max_tokens=6 + 3 * i)
            for i in range(len(reference_tokens))]


@pytest.mark.parametrize("kv_blocks", [None, 14], ids=["roomy", "preempting"])
def test_overlap_on_and_off_give_identical_outputs(tiny_models, kv_blocks):
    path = tiny_models["llama"][0]
    prompts = random_prompts(12, range(3, 30), seed=21)
    config = {} if kv_blocks is None else {"kv_cache_memory": kv_blocks * 2 * 2 * BLOCK * 2 * 16 * 4}
    reference, _ = run(path, prompts, SamplingParams(temperature=0, max_tokens=30), overlap=False)
    params = mixed_params([o.outputs[0].token_ids for o in reference])
    serial, serial_llm = run(path, prompts, params, overlap=False, **config)
    overlapped, overlapped_llm = run(path, prompts, params, overlap=True, **config)
    assert summary(overlapped) == summary(serial)
    assert serial[0].outputs[0].finish_reason == "stop" and serial[1].outputs[0].stop_reason is not None
    for a, b in zip(serial[3].outputs[0].logprobs, overlapped[3].outputs[0].logprobs):
        assert a.keys() == b.keys() and all(math.isclose(a[t].logprob, b[t].logprob, abs_tol=1e-5) for t in a)
    if kv_blocks is not None:
        assert overlapped_llm.engine.stats.num_preemptions > 0
    for llm in (serial_llm, overlapped_llm):  # nothing left behind
        assert llm.engine.core.kv_cache.num_free_blocks == llm.engine.core.kv_cache.num_blocks
        assert not llm.engine.core.has_unfinished() and not llm.engine.core.scheduler.has_unfinished()


def test_overlapped_core_launches_the_next_step_before_reading_tokens(tiny_models, monkeypatch):
    """The order of launches and token reads: L1 L2 R1 L3 R2 ... with overlap, L1 R1 L2 R2 without."""
    events = []
    real_launch, real_result = model_runner.ModelRunner.launch, model_runner.PendingStep.result

    def launch(self, *args, **kwargs):
        pending = real_launch(self, *args, **kwargs)
        pending.number = len([e for e in events if e[0] == "L"]) + 1
        events.append(("L", pending.number))
        return pending

    def result(self):
        events.append(("R", self.number))
        return real_result(self)

    monkeypatch.setattr(model_runner.ModelRunner, "launch", launch)
    monkeypatch.setattr(model_runner.PendingStep, "result", result)
    prompts = random_prompts(4, range(5, 9), seed=3)
    for overlap in (True, False):
        events.clear()
        run(tiny_models["llama"][0], prompts, SamplingParams(temperature=0, max_tokens=6, ignore_eos=True), overlap)
        launches = [n for kind, n in events if kind == "L"]
        assert len(launches) == 6  # one prefill step, then five decode steps
        read_before_next_launch = [events.index(("R", n)) < events.index(("L", n + 1)) for n in launches[:-1]]
        assert read_before_next_launch == [not overlap] * 5, events


@pytest.mark.parametrize("overlap", [False, True])
def test_prompt_logprobs_of_a_one_token_request(tiny_models, overlap):
    """The step that computes the prompt's logprobs is also the one that finishes the request."""
    prompt = random_prompts(1, range(13, 14), seed=8)[0]
    out, _ = run(tiny_models["llama"][0], [prompt], SamplingParams(temperature=0, max_tokens=1, prompt_logprobs=0), overlap)
    assert out[0].prompt_logprobs[0] is None and len(out[0].prompt_logprobs) == len(prompt)
    assert all(prompt[i] in entry for i, entry in enumerate(out[0].prompt_logprobs) if entry is not None)


def test_the_platform_chooses_the_default(tiny_models):
    """Unset, ``overlap_steps`` is the platform's choice: off on the CPU platform (its host cores are the device);
    set, it is obeyed."""
    path = tiny_models["llama"][0]
    assert LLM(model=path, block_size=BLOCK).engine.core.overlap is False
    assert LLM(model=path, block_size=BLOCK, overlap_steps=True).engine.core.overlap is True
