"""Golden outputs: the embedded SmolLM2-135M-Instruct's tokens for a fixed set of requests, recorded
once (``python tests/engine/test_golden_outputs.py`` rewrites golden/smollm2.json) and asserted
exactly afterwards, so a restructuring that changes what the engine generates fails here.

The cases cover the step features a refactor moves around: plain greedy batches, a shared prefix
(prefix caching), chunked prefill, seeded sampling with top-k/top-p/penalties, logprobs, guided
decoding, n-gram speculative decoding and beam search.
"""

from __future__ import annotations

import json
import pathlib
import sys

import pytest

from pagoda import LLM, SamplingParams
from pagoda.sampling_params import BeamSearchParams
from pagoda.sampling_params import GuidedDecodingParams

GOLDEN = pathlib.Path(__file__).parent / "golden" / "smollm2.json"
PROMPTS = [
    "The three primary colors are",
    "def fibonacci(n):",
    "Write a haiku about the sea.",
    "The capital of France is Paris. The capital of Germany is",
]
SHARED = "You are a careful assistant. Answer in one short sentence. Question: "
ENGINE = dict(seed=0, max_model_len=512, kv_cache_memory=64 << 20)


def _tokens(outputs) -> list[list[list[int]]]:
    return [[list(o.token_ids) for o in out.outputs] for out in outputs]


def _logprobs(outputs) -> list[list[dict[str, float]]]:
    """Each step's logprobs by token id (the chosen token's and the top 2): ids exact, values to 1e-3."""
    steps = outputs[0].outputs[0].logprobs
    return [{str(t): round(lp.logprob, 4) for t, lp in step.items()} for step in steps]


def run_cases() -> dict:
    results: dict = {}
    llm = LLM(**ENGINE)
    greedy = SamplingParams(temperature=0, max_tokens=24)
    results["greedy"] = _tokens(llm.generate(PROMPTS, greedy, use_tqdm=False))
    results["shared_prefix"] = _tokens(llm.generate([SHARED + q for q in ("Why is the sky blue?", "What is rain?")],
                                                    greedy, use_tqdm=False))
    sampled = SamplingParams(temperature=0.8, top_k=40, top_p=0.9, repetition_penalty=1.2, presence_penalty=0.3,
                             seed=1234, max_tokens=24, n=2)
    results["seeded_sampling"] = _tokens(llm.generate(PROMPTS[:2], sampled, use_tqdm=False))
    results["logprobs"] = _logprobs(llm.generate(PROMPTS[0], SamplingParams(temperature=0, max_tokens=8, logprobs=2),
                                                 use_tqdm=False))
    guided = SamplingParams(temperature=0, max_tokens=16,
                            guided_decoding=GuidedDecodingParams(choice=["red", "green", "blue"]))
    results["guided_choice"] = _tokens(llm.generate(PROMPTS[0], guided, use_tqdm=False))
    regex = SamplingParams(temperature=0, max_tokens=16, guided_decoding=GuidedDecodingParams(regex=r"[0-9]{3}-[a-z]+"))
    results["guided_regex"] = _tokens(llm.generate(PROMPTS[1], regex, use_tqdm=False))
    results["beam"] = _tokens(llm.beam_search(PROMPTS[:2], BeamSearchParams(beam_width=3, max_tokens=12)))
    llm.shutdown()

    chunked = LLM(**ENGINE, max_num_batched_tokens=16, enable_prefix_caching=False)
    results["chunked_prefill"] = _tokens(chunked.generate([SHARED + PROMPTS[2]], greedy, use_tqdm=False))
    chunked.shutdown()

    spec = LLM(**ENGINE, speculative_config={"method": "ngram", "num_speculative_tokens": 3,
                                             "prompt_lookup_max": 3, "prompt_lookup_min": 1})
    results["ngram_speculative"] = _tokens(spec.generate(PROMPTS, greedy, use_tqdm=False))
    spec.shutdown()
    return results


@pytest.fixture(scope="module")
def outputs() -> dict:
    return run_cases()


CASES = ("greedy", "shared_prefix", "seeded_sampling", "logprobs", "guided_choice", "guided_regex", "beam",
         "chunked_prefill", "ngram_speculative")


@pytest.mark.parametrize("case", CASES)
def test_outputs_equal_the_recorded_ones(outputs, case):
    recorded = json.loads(GOLDEN.read_text())[case]
    if case != "logprobs":
        assert outputs[case] == recorded
        return
    assert [list(step) for step in outputs[case]] == [list(step) for step in recorded]  # the same ids
    for got, want in zip(outputs[case], recorded):
        assert got == pytest.approx(want, abs=1e-3)


if __name__ == "__main__":  # record: python tests/engine/test_golden_outputs.py
    GOLDEN.parent.mkdir(exist_ok=True)
    lines = [f" {json.dumps(k)}: {json.dumps(v)}" for k, v in run_cases().items()]
    GOLDEN.write_text("{\n" + ",\n".join(lines) + "\n}\n")
    print(f"wrote {GOLDEN}", file=sys.stderr)
