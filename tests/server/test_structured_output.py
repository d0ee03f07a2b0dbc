"""response_format and vLLM's guided_* fields over HTTP, through the official openai client, against
a server of a tiny random Llama over SmolLM2's vocabulary (the grammar alone shapes its output)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import jsonschema
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "guided"))
from guided_models import make_tiny_smollm_vocab_model  # noqa: E402
from server_helpers import API_KEY, MODEL_NAME, engine_config, start_server  # noqa: E402

SCHEMA = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 8},
                                           "rank": {"type": "integer", "minimum": 1, "maximum": 5}},
          "required": ["city", "rank"]}
MESSAGES = [{"role": "user", "content": "Name a city."}]


@pytest.fixture(scope="module")
def guided_server(tmp_path_factory):
    path = make_tiny_smollm_vocab_model(tmp_path_factory.mktemp("tiny-smollm-vocab-server"))
    running = start_server(engine_config(path, max_model_len=512, kv_cache_memory=64 << 20))
    yield running
    running.stop()


@pytest.fixture(scope="module")
def client(guided_server):
    import openai

    return openai.OpenAI(base_url=guided_server.url + "/v1", api_key=API_KEY, max_retries=0, timeout=60)


def test_response_format_json_schema(client) -> None:
    fmt = {"type": "json_schema", "json_schema": {"name": "city", "schema": SCHEMA, "strict": True}}
    reply = client.chat.completions.create(model=MODEL_NAME, messages=MESSAGES, response_format=fmt,
                                           n=3, max_tokens=120, temperature=1.0)
    for choice in reply.choices:
        assert choice.finish_reason == "stop"
        jsonschema.validate(json.loads(choice.message.content), SCHEMA)


def test_response_format_json_schema_streamed(client) -> None:
    fmt = {"type": "json_schema", "json_schema": {"name": "city", "schema": SCHEMA}}
    stream = client.chat.completions.create(model=MODEL_NAME, messages=MESSAGES, response_format=fmt,
                                            max_tokens=120, stream=True)
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    jsonschema.validate(json.loads(text), SCHEMA)


def test_response_format_json_object(client) -> None:
    reply = client.chat.completions.create(model=MODEL_NAME, messages=MESSAGES, max_tokens=60, temperature=0.0,
                                           response_format={"type": "json_object"})
    text = reply.choices[0].message.content
    assert text.startswith("{")
    if reply.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(text), dict)


def test_vllm_guided_fields_on_completions(client) -> None:
    body = {"guided_choice": ["alpha", "beta"]}
    reply = client.completions.create(model=MODEL_NAME, prompt="Pick:", n=4, max_tokens=10, extra_body=body)
    assert {c.text for c in reply.choices} <= {"alpha", "beta"}
    reply = client.completions.create(model=MODEL_NAME, prompt="Code:", max_tokens=20,
                                      extra_body={"guided_regex": r"[A-Z]{3}\d"})
    assert re.fullmatch(r"[A-Z]{3}\d", reply.choices[0].text)
    reply = client.completions.create(model=MODEL_NAME, prompt="Sum:", max_tokens=30,
                                      extra_body={"guided_grammar": 'root ::= [1-9] " + " [1-9]'})
    assert re.fullmatch(r"[1-9] \+ [1-9]", reply.choices[0].text)
    reply = client.completions.create(model=MODEL_NAME, prompt="JSON:", max_tokens=120,
                                      extra_body={"guided_json": SCHEMA})
    jsonschema.validate(json.loads(reply.choices[0].text), SCHEMA)


@pytest.mark.parametrize("body, param, needle", [
    ({"guided_regex": "("}, "guided_regex", "guided regex is not valid for xgrammar"),
    ({"guided_json": {"type": "object"}, "guided_regex": "a"}, "guided_regex", "send only one of them"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}}, "response_format", "needs"),
    ({"guided_choice": "yes"}, "guided_choice", "non-empty list"),
    ({"guided_regex": "a", "guided_decoding_backend": "outlines"}, "guided_regex", "Unknown guided decoding backend"),
])
def test_bad_guided_fields_are_400_naming_the_field(guided_server, body, param, needle) -> None:
    import httpx

    response = httpx.post(guided_server.url + "/v1/chat/completions", timeout=30,
                          headers={"Authorization": f"Bearer {API_KEY}"},
                          json={"model": MODEL_NAME, "messages": MESSAGES, "max_tokens": 5, **body})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == param and needle in error["message"]
