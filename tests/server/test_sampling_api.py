"""The rest of the OpenAI surface on the server: logit_bias, allowed_token_ids, bad_words, best_of,
echo (with prompt logprobs, and max_tokens 0), use_beam_search (equal to HF's beams), and the
400s for what cannot be honoured."""

from __future__ import annotations

import httpx
import pytest
import torch

from server_helpers import API_KEY, MODEL_NAME

AUTH = {"Authorization": f"Bearer {API_KEY}"}
GREEDY = {"temperature": 0, "max_tokens": 6}


def post(server, path: str, body: dict) -> httpx.Response:
    return httpx.post(server.url + path, json={"model": MODEL_NAME, **body}, headers=AUTH, timeout=60)


def words(text: str) -> list[int]:
    return [int(w[1:]) for w in text.split()]


def test_logit_bias_allowed_token_ids_and_bad_words(client) -> None:
    forced = client.completions.create(model=MODEL_NAME, prompt="t5 t6", logit_bias={"42": 100}, **GREEDY)
    assert words(forced.choices[0].text) == [42] * 6
    allowed = client.completions.create(model=MODEL_NAME, prompt="t5 t6", temperature=1.0, seed=2, max_tokens=12,
                                        extra_body={"allowed_token_ids": [7, 8, 9]})
    assert set(words(allowed.choices[0].text)) <= {7, 8, 9}
    messages = [{"role": "user", "content": "t5"}]
    plain = words(client.chat.completions.create(model=MODEL_NAME, messages=messages, **GREEDY).choices[0].message.content)
    banned = client.chat.completions.create(model=MODEL_NAME, messages=messages, extra_body={"bad_words": [f"t{plain[0]}"]},
                                            **GREEDY)
    assert len(words(banned.choices[0].message.content)) == 6 and plain[0] not in words(banned.choices[0].message.content)


@pytest.mark.parametrize("body, param, needle", [
    ({"logit_bias": {"384": 1}}, "logit_bias", "outside the vocabulary [0, 384): [384]"),
    ({"logit_bias": {"5": 150}}, "logit_bias", "logit_bias values must be numbers in [-100, 100], got 150"),
    ({"allowed_token_ids": [1, 999]}, "allowed_token_ids", "outside the vocabulary"),
    ({"best_of": 1, "n": 2}, "best_of", "best_of must be >= 2"),
    ({"best_of": 3, "stream": True}, "best_of", "cannot stream"),
    ({"use_beam_search": True, "n": 2, "temperature": 0.7}, "temperature", "cannot be combined with use_beam_search"),
    ({"use_beam_search": True, "n": 2, "stop": ["t1"]}, "stop", "cannot be combined with use_beam_search"),
    ({"use_beam_search": True, "n": 2, "echo": True, "logprobs": 1}, "use_beam_search", "echo with logprobs"),
])
def test_what_cannot_be_honoured_is_400_naming_the_field(server, body, param, needle) -> None:
    response = post(server, "/v1/completions", {"prompt": "t1 t2", "max_tokens": 3, **body})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == param and needle in error["message"]


def test_echo_with_logprobs_scores_the_prompt_like_decoding_does(client) -> None:
    step = client.completions.create(model=MODEL_NAME, prompt="t9 t10", logprobs=2, **{**GREEDY, "max_tokens": 2})
    generated = step.choices[0].logprobs
    prompt = "t9 t10 " + " ".join(generated.tokens)
    echoed = client.completions.create(model=MODEL_NAME, prompt=prompt, echo=True, logprobs=2, **GREEDY)
    lp = echoed.choices[0].logprobs
    assert echoed.choices[0].text.startswith(prompt) and lp.tokens[:4] == ["t9", "t10", *generated.tokens]
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    assert lp.token_logprobs[2:4] == pytest.approx(generated.token_logprobs, abs=1e-4)  # prefill == decode
    assert len(lp.tokens) == 4 + 6 and lp.text_offset[0] == 0 and lp.text_offset == sorted(lp.text_offset)
    scored = client.completions.create(model=MODEL_NAME, prompt=[9, 10], echo=True, logprobs=0, max_tokens=0)
    choice = scored.choices[0]
    assert choice.text == "t9 t10" and choice.logprobs.tokens == ["t9", "t10"] and choice.finish_reason == "length"
    assert choice.logprobs.token_logprobs == pytest.approx([None, lp.token_logprobs[1]], abs=1e-4)
    assert scored.usage.completion_tokens == 0
    streamed = list(client.completions.create(model=MODEL_NAME, prompt=prompt, echo=True, logprobs=2, stream=True,
                                              **GREEDY))
    assert "".join(c.choices[0].text for c in streamed) == echoed.choices[0].text
    assert sum((c.choices[0].logprobs.tokens for c in streamed), []) == lp.tokens


def test_best_of_keeps_the_most_likely_sequences(client) -> None:
    args = dict(model=MODEL_NAME, prompt="t3 t4", temperature=1.0, seed=5, max_tokens=6)
    every = client.completions.create(n=4, logprobs=0, **args).choices
    best = client.completions.create(n=2, best_of=4, **args).choices
    ranked = sorted(every, key=lambda c: -sum(c.logprobs.token_logprobs))
    assert [c.text for c in best] == [c.text for c in ranked[:2]] and [c.index for c in best] == [0, 1]


@torch.no_grad()
def test_use_beam_search_equals_hf_beams(client, tiny_chat_model) -> None:
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(tiny_chat_model, dtype=torch.float32).eval()
    out = hf.generate(torch.tensor([[12, 13, 14]]), num_beams=3, num_return_sequences=3, do_sample=False,
                      max_new_tokens=7, pad_token_id=0)
    expected = [row[3:] for row in out.tolist()]
    args = dict(model=MODEL_NAME, prompt="t12 t13 t14", n=3, max_tokens=7, extra_body={"use_beam_search": True})
    whole = client.completions.create(**args)
    assert [words(c.text) for c in whole.choices] == expected
    assert whole.usage.completion_tokens == 21
    chunks = list(client.completions.create(stream=True, **args))
    texts = {i: "" for i in range(3)}
    for chunk in chunks:
        texts[chunk.choices[0].index] += chunk.choices[0].text
    assert [words(texts[i]) for i in range(3)] == expected


def test_tokenize_returns_token_strings_on_request(server) -> None:
    body = post(server, "/tokenize", {"prompt": "t7 t8", "return_token_strs": True}).json()
    assert body == {"tokens": [7, 8], "count": 2, "max_model_len": 256, "token_strs": ["t7", "t8"]}
    assert post(server, "/tokenize", {"prompt": "t7"}).json()["token_strs"] is None
