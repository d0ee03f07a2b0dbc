"""Chat roles checked against the chat template: a message the template would silently drop, a
template that raises (roles must alternate) or does not parse, is a 400 naming the problem."""

from __future__ import annotations

import httpx
import pytest

from server_helpers import API_KEY, MODEL_NAME

AUTH = {"Authorization": f"Bearer {API_KEY}"}
# Templates in the tiny tokenizer's words ("t0".."t383"), as a model's tokenizer_config would hold them.
USER_AND_ASSISTANT_ONLY = ("{% for m in messages %}{% if m['role'] == 'user' %}t1 {{ m['content'] }} t2 "
                           "{% elif m['role'] == 'assistant' %}t4 {{ m['content'] | trim }} t2 {% endif %}{% endfor %}t3")
ALTERNATING = ("{% for m in messages %}{% if (m['role'] == 'user') != (loop.index0 % 2 == 0) %}"
               "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
               "{% endif %}t1 {{ m['content'] }} t2 {% endfor %}t3")
# Renders every message, but keeps only what follows a reasoning block (as reasoning models' templates do).
STRIPS_REASONING = "{% for m in messages %}t1 {{ m['content'].split('</think>')[-1] | trim }} t2 {% endfor %}t3"


def chat(server, messages: list[dict], template: str, **extra) -> httpx.Response:
    body = {"model": MODEL_NAME, "messages": messages, "max_tokens": 2, "chat_template": template, **extra}
    return httpx.post(server.url + "/v1/chat/completions", json=body, headers=AUTH, timeout=30)


def error_400(response: httpx.Response) -> dict:
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and set(error) == {"message", "type", "param", "code"}
    return error


@pytest.mark.parametrize("stream", [False, True])
def test_a_role_the_template_does_not_render_is_400_not_dropped(server, stream):
    messages = [{"role": "system", "content": "t20"}, {"role": "user", "content": "t21"}]
    error = error_400(chat(server, messages, USER_AND_ASSISTANT_ONLY, stream=stream))
    assert error["param"] == "messages.0.role"
    assert "messages[0] (role 'system')" in error["message"] and "silently dropped" in error["message"]
    assert "renders roles user" in error["message"]  # what it does render, and the fix
    ok = chat(server, messages[1:] + [{"role": "assistant", "content": " t22 "}, messages[1]], USER_AND_ASSISTANT_ONLY)
    assert ok.status_code == 200, ok.text
    assert ok.json()["usage"]["prompt_tokens"] == 10  # t1 t21 t2 t4 t22 t2 t1 t21 t2 t3


def test_a_dropped_message_is_found_even_when_its_text_appears_elsewhere(server):
    messages = [{"role": "user", "content": "t21 t5"}, {"role": "developer", "content": "t21"}]
    error = error_400(chat(server, messages, USER_AND_ASSISTANT_ONLY))
    assert error["param"] == "messages.1.role" and "role 'developer'" in error["message"]


def test_a_template_that_raises_is_400_with_its_message(server):
    messages = [{"role": "user", "content": "t21"}, {"role": "user", "content": "t22"}]
    error = error_400(chat(server, messages, ALTERNATING))
    assert error["param"] == "messages"
    assert "rejects this conversation: Conversation roles must alternate" in error["message"]
    assert chat(server, messages[:1], ALTERNATING).status_code == 200


def test_a_template_that_does_not_parse_is_400_naming_chat_template(server):
    error = error_400(chat(server, [{"role": "user", "content": "t21"}], "{% for m in messages %}t1"))
    assert error["param"] == "chat_template" and "not valid Jinja" in error["message"]


def test_reworded_content_is_not_taken_for_a_dropped_message(server):
    messages = [{"role": "user", "content": "t21"}, {"role": "assistant", "content": "t8 t9 </think> t22"},
                {"role": "user", "content": "t23"}, {"role": "tool", "content": "  "}]
    response = chat(server, messages, STRIPS_REASONING)
    assert response.status_code == 200, response.text
    assert response.json()["usage"]["prompt_tokens"] == 12  # t1 t21 t2 t1 t22 t2 t1 t23 t2 t1 t2 t3

