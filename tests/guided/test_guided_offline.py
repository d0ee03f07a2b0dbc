"""Guided decoding end to end through LLM(): a tiny random Llama over SmolLM2's real vocabulary,
so every output is shaped by the grammar alone (the random model knows no JSON)."""

from __future__ import annotations

import json
import re

import jsonschema
import pytest

from guided_models import make_tiny_smollm_vocab_model
from pagoda import LLM, SamplingParams
from pagoda.sampling_params import GuidedDecodingParams
from schemas import SCHEMAS

MAX_TOKENS = 200


@pytest.fixture(scope="module")
def llm(tmp_path_factory) -> LLM:
    path = make_tiny_smollm_vocab_model(tmp_path_factory.mktemp("tiny-smollm-vocab"))
    # overlapped steps, as on GPUs (the CPU platform's default is steps in turn): the guided steps must keep them
    return LLM(model=path, max_model_len=512, kv_cache_memory=64 << 20, max_num_seqs=16, overlap_steps=True)


def generate(llm: LLM, guided: GuidedDecodingParams, n: int = 4, temperature: float = 1.0, **kw) -> list:
    params = SamplingParams(n=n, temperature=temperature, max_tokens=MAX_TOKENS, guided_decoding=guided, **kw)
    return llm.generate(["Describe it:"], params, use_tqdm=False)[0].outputs


def test_sampled_outputs_validate_against_each_of_20_schemas(llm) -> None:
    """All 20 schemas in one batch (two sequences each, temperature 1): every output is valid JSON of its schema."""
    names = sorted(SCHEMAS)
    params = [SamplingParams(n=2, temperature=1.0, seed=i, max_tokens=MAX_TOKENS,
                             guided_decoding=GuidedDecodingParams(json=SCHEMAS[name])) for i, name in enumerate(names)]
    results = llm.generate(["Describe it:"] * len(names), params, use_tqdm=False)
    for name, result in zip(names, results):
        for out in result.outputs:
            assert out.finish_reason == "stop", (name, out.text)  # the grammar completed and EOS followed
            jsonschema.validate(json.loads(out.text), SCHEMAS[name])


def test_json_object_outputs_parse_as_objects(llm) -> None:
    for out in generate(llm, GuidedDecodingParams(json_object=True)):
        if out.finish_reason == "stop":
            assert isinstance(json.loads(out.text), dict)
        else:  # an unbounded object may run out of tokens: what there is still follows the grammar
            assert out.text.startswith("{")


def test_regex_outputs_match(llm) -> None:
    pattern = r"[a-z]{2,5}-\d{2}(\.\d)?"
    for out in generate(llm, GuidedDecodingParams(regex=pattern), n=6):
        assert re.fullmatch(pattern, out.text), out.text


def test_choice_outputs_are_one_of_the_choices(llm) -> None:
    choices = ["yes", "no", "maybe so", "ça dépend"]
    texts = {out.text for out in generate(llm, GuidedDecodingParams(choice=choices), n=8)}
    assert texts <= set(choices)


def test_ebnf_grammar(llm) -> None:
    grammar = 'root ::= "(" num (" + " num)* ")"\nnum ::= [1-9] [0-9]?'
    for out in generate(llm, GuidedDecodingParams(grammar=grammar)):
        assert re.fullmatch(r"\([1-9][0-9]?( \+ [1-9][0-9]?)*\)", out.text), out.text


def test_greedy_guided_decoding_is_deterministic(llm) -> None:
    guided = GuidedDecodingParams(json=SCHEMAS["enum"])
    first = generate(llm, guided, n=1, temperature=0.0)[0]
    again = generate(llm, guided, n=1, temperature=0.0)[0]
    assert (first.token_ids, first.text) == (again.token_ids, again.text)
    assert first.finish_reason == "stop"
    jsonschema.validate(json.loads(first.text), SCHEMAS["enum"])


def test_unguided_requests_in_the_same_batch_are_untouched(llm) -> None:
    free = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)
    guided = SamplingParams(temperature=0.0, max_tokens=40, guided_decoding=GuidedDecodingParams(regex=r"\d{3}"))
    alone = llm.generate(["Hello"], free, use_tqdm=False)[0].outputs[0].token_ids
    mixed = llm.generate(["Hello", "Hello"], [free, guided], use_tqdm=False)
    assert mixed[0].outputs[0].token_ids == alone
    assert re.fullmatch(r"\d{3}", mixed[1].outputs[0].text)


def test_guided_steps_keep_the_overlap_and_its_outputs(llm, monkeypatch: pytest.MonkeyPatch) -> None:
    """Overlapped steps: a guided step is launched while the previous one is in flight, its matchers
    read that step's tokens from the runner (pagoda.guided.runtime.in_flight_token), and the outputs
    equal strictly serial steps' (seeded sampling and greedy, several schemas and a regex)."""
    from pagoda.guided import runtime

    read = []
    original = runtime.in_flight_token
    monkeypatch.setattr(runtime, "in_flight_token", lambda prev, rid: read.append(rid) or original(prev, rid))
    names = sorted(SCHEMAS)[:6]
    params = [SamplingParams(temperature=1.0 if i % 2 else 0.0, seed=i, max_tokens=60,
                             guided_decoding=GuidedDecodingParams(json=SCHEMAS[name])) for i, name in enumerate(names)]
    params.append(SamplingParams(temperature=1.0, seed=9, max_tokens=20,
                                 guided_decoding=GuidedDecodingParams(regex=r"[a-z]{2,5}-\d{2}")))
    prompts = ["Describe it:"] * len(params)

    def texts() -> list[tuple[list[int], str]]:
        return [(o.outputs[0].token_ids, o.outputs[0].finish_reason) for o in llm.generate(prompts, params, use_tqdm=False)]

    core = llm.engine.core
    overlapped = texts()
    assert core.overlap and len(read) > 50  # the matchers took in-flight tokens: the steps overlapped
    core.overlap = False
    try:
        read.clear()
        serial = texts()
    finally:
        core.overlap = True
    assert not read and overlapped == serial
