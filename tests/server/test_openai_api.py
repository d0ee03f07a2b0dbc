"""The OpenAI-compatible endpoints, driven by the official ``openai`` client against a tiny model."""

from __future__ import annotations

import httpx

from server_helpers import API_KEY, MODEL_NAME

AUTH = {"Authorization": f"Bearer {API_KEY}"}
GREEDY = {"temperature": 0, "max_tokens": 8}


def test_models_list(client):
    models = client.models.list().data
    assert [m.id for m in models] == [MODEL_NAME]
    assert models[0].object == "model" and models[0].owned_by == "pagoda"


def test_completion_shape_usage_and_prompt_forms(client, server):
    text = client.completions.create(model=MODEL_NAME, prompt="t5 t6 t7", **GREEDY)
    assert text.id.startswith("cmpl-") and text.object == "text_completion" and text.model == MODEL_NAME
    choice = text.choices[0]
    assert choice.index == 0 and choice.finish_reason == "length" and len(choice.text.split()) == 8
    assert (text.usage.prompt_tokens, text.usage.completion_tokens, text.usage.total_tokens) == (3, 8, 11)
    ids = httpx.post(server.url + "/tokenize", json={"prompt": "t5 t6 t7"}, headers=AUTH).json()["tokens"]
    by_ids = client.completions.create(model=MODEL_NAME, prompt=ids, **GREEDY)
    assert by_ids.choices[0].text == choice.text
    many = client.completions.create(model=MODEL_NAME, prompt=[ids, [9, 10]], **GREEDY)
    assert [c.index for c in many.choices] == [0, 1] and many.choices[0].text == choice.text
    assert many.usage.prompt_tokens == 5 and many.usage.completion_tokens == 16
    strings = client.completions.create(model=MODEL_NAME, prompt=["t5 t6 t7", "t9 t10"], **GREEDY)
    assert [c.text for c in strings.choices] == [c.text for c in many.choices]


def test_completion_streaming_matches_whole_and_reports_usage(client):
    whole = client.completions.create(model=MODEL_NAME, prompt="t11 t12", **GREEDY)
    chunks = list(client.completions.create(model=MODEL_NAME, prompt="t11 t12", stream=True,
                                            stream_options={"include_usage": True}, **GREEDY))
    assert len(chunks) >= 9  # one per token, then the usage chunk
    assert "".join(c.choices[0].text for c in chunks if c.choices) == whole.choices[0].text
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 8
    assert chunks[-1].usage.prompt_tokens == 2


def test_chat_completion_and_streaming(client):
    messages = [{"role": "system", "content": "t20"}, {"role": "user", "content": "t21 t22"}]
    whole = client.chat.completions.create(model=MODEL_NAME, messages=messages, **GREEDY)
    assert whole.id.startswith("chatcmpl-") and whole.object == "chat.completion"
    message = whole.choices[0].message
    assert message.role == "assistant" and len(message.content.split()) == 8
    assert whole.usage.prompt_tokens == 8  # the template renders t1 t20 t2 t1 t21 t22 t2 t3
    chunks = list(client.chat.completions.create(model=MODEL_NAME, messages=messages, stream=True,
                                                 stream_options={"include_usage": True}, **GREEDY))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == message.content
    assert chunks[-1].usage.total_tokens == whole.usage.total_tokens
    capped = client.chat.completions.create(model=MODEL_NAME, messages=messages, temperature=0,
                                            max_completion_tokens=3)
    assert capped.usage.completion_tokens == 3 and capped.choices[0].finish_reason == "length"


def test_n_choices_sampled_with_seed(client):
    args = dict(model=MODEL_NAME, prompt="t30 t31", n=2, temperature=1.0, seed=7, max_tokens=12)
    first = client.completions.create(**args)
    assert [c.index for c in first.choices] == [0, 1]
    assert first.choices[0].text != first.choices[1].text  # each choice has its own seed
    assert [c.text for c in client.completions.create(**args).choices] == [c.text for c in first.choices]
    chat = client.chat.completions.create(model=MODEL_NAME, messages=[{"role": "user", "content": "t4"}],
                                          n=2, temperature=1.0, seed=7, max_tokens=12)
    assert [c.index for c in chat.choices] == [0, 1] and chat.usage.completion_tokens == 24


def test_logprobs(client):
    out = client.completions.create(model=MODEL_NAME, prompt="t40 t41", logprobs=3, **GREEDY)
    lp = out.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == 8
    assert " ".join(lp.tokens) == out.choices[0].text.strip()
    for token, logprob, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
        assert len(top) == 3 and max(top.values()) == logprob and top[token] == logprob  # greedy: top-1
    chat = client.chat.completions.create(model=MODEL_NAME, messages=[{"role": "user", "content": "t40"}],
                                          logprobs=True, top_logprobs=2, **GREEDY)
    content = chat.choices[0].logprobs.content
    assert len(content) == 8
    assert all(len(t.top_logprobs) == 2 and t.top_logprobs[0].token == t.token for t in content)
    assert all(t.top_logprobs[0].logprob >= t.top_logprobs[1].logprob for t in content)
    plain = client.chat.completions.create(model=MODEL_NAME, messages=[{"role": "user", "content": "t40"}], **GREEDY)
    assert plain.choices[0].logprobs is None


def test_stop_string_ends_generation(client):
    free = client.completions.create(model=MODEL_NAME, prompt="t50 t51", temperature=0, max_tokens=12)
    words = free.choices[0].text.split()
    stop_word = words[4]
    first = words.index(stop_word)
    stopped = client.completions.create(model=MODEL_NAME, prompt="t50 t51", temperature=0, max_tokens=12,
                                        stop=[" " + stop_word])
    assert stopped.choices[0].finish_reason == "stop"
    assert stopped.choices[0].text.split() == words[:first]


def test_tokenize_detokenize_version_health(server, client):
    toks = httpx.post(server.url + "/tokenize", json={"prompt": "t7 t8 t9"}, headers=AUTH).json()
    assert toks["tokens"] == [7, 8, 9] and toks["count"] == 3 and toks["max_model_len"] == 256
    chat = httpx.post(server.url + "/tokenize", json={"messages": [{"role": "user", "content": "t7"}]}, headers=AUTH)
    assert chat.json()["tokens"] == [1, 7, 2, 3]
    back = httpx.post(server.url + "/detokenize", json={"tokens": [7, 8, 9]}, headers=AUTH).json()
    assert back == {"prompt": "t7 t8 t9"}
    from pagoda import __version__

    assert httpx.get(server.url + "/version", headers=AUTH).json() == {"version": __version__}
    assert httpx.get(server.url + "/health").json() == {"status": "ok"}
