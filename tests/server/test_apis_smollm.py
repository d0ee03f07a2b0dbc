"""`pagoda serve` on the embedded SmolLM2-135M-Instruct, asked the same greedy question through OpenAI's
Chat Completions and Responses APIs and Anthropic's Messages API (each whole and streamed, with the
official SDKs): every answer is the chat route's, word for word."""

from __future__ import annotations

import openai
import pytest
from serve_process import start_serve, stop

from pagoda.loader import resolve_model
from pagoda.testing import import_or_skip

anthropic = import_or_skip("anthropic")

SYSTEM = "You are a geography teacher."
QUESTION = "What is the capital of France? Answer in one sentence."


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    source = resolve_model(None)  # the embedded SmolLM2 GGUF
    proc, url, log = start_serve(str(source.gguf_path or source.path), tmp_path_factory.mktemp("smollm-serve"),
                                 "--max-model-len", "512")
    yield url
    stop(proc, log)


def test_every_api_answers_the_chat_routes_greedy_text(served) -> None:
    client = openai.OpenAI(base_url=served + "/v1", api_key="none", max_retries=0, timeout=120)
    claude = anthropic.Anthropic(base_url=served, api_key="none", max_retries=0, timeout=120)
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}]
    chat = client.chat.completions.create(model="tiny", messages=messages, temperature=0, max_tokens=40)
    expected = chat.choices[0].message.content
    assert chat.choices[0].finish_reason == "stop" and "Paris" in expected
    response = client.responses.create(model="tiny", instructions=SYSTEM, input=QUESTION, temperature=0,
                                       max_output_tokens=40)
    with client.responses.stream(model="tiny", instructions=SYSTEM, input=QUESTION, temperature=0,
                                 max_output_tokens=40) as stream:
        streamed = stream.get_final_response()
    assert response.status == streamed.status == "completed"
    assert response.output_text == streamed.output_text == expected
    assert response.usage.input_tokens == chat.usage.prompt_tokens
    assert response.usage.output_tokens == chat.usage.completion_tokens
    request = dict(model="tiny", max_tokens=40, system=SYSTEM, messages=[{"role": "user", "content": QUESTION}],
                   extra_body={"temperature": 0})
    message = claude.messages.create(**request)
    with claude.messages.stream(**request) as stream:
        final = stream.get_final_message()
    assert message.content[0].text == final.content[0].text == expected
    assert message.stop_reason == final.stop_reason == "end_turn"
    counted = claude.messages.count_tokens(model="tiny", system=SYSTEM, messages=[{"role": "user", "content": QUESTION}])
    assert counted.input_tokens == chat.usage.prompt_tokens
