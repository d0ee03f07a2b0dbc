"""POST /reset_prefix_cache (vLLM's route): a prompt served before is a prefix-cache hit, and after the reset it
is computed in full again."""

from __future__ import annotations

import httpx

from server_helpers import API_KEY, MODEL_NAME

HEADERS = {"Authorization": f"Bearer {API_KEY}"}
PROMPT = " ".join(f"t{i}" for i in range(40, 90))  # 50 words: several full blocks of 8 tokens


def cached_tokens(url: str) -> int:
    reply = httpx.post(url + "/v1/responses", headers=HEADERS, timeout=60,
                       json={"model": MODEL_NAME, "input": PROMPT, "max_output_tokens": 2})
    assert reply.status_code == 200, reply.text
    return reply.json()["usage"]["input_tokens_details"]["cached_tokens"]


def test_reset_prefix_cache_makes_a_served_prompt_compute_again(server):
    cached_tokens(server.url)
    assert cached_tokens(server.url) >= 48  # the same prompt again: its full blocks are hits
    reset = httpx.post(server.url + "/reset_prefix_cache", headers=HEADERS, timeout=60)
    assert reset.status_code == 200 and reset.json() == {}
    assert cached_tokens(server.url) == 0
    assert httpx.post(server.url + "/reset_prefix_cache", timeout=10).status_code == 401  # the API key guards it
