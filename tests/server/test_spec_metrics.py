"""Speculative decoding's statistics on the server's Prometheus /metrics: a server speculating with
the n-gram proposer serves a completion whose prompt repeats itself; the counters, the acceptance
rate and length and the per-position counts it then shows agree with each other, and the goodput
controller's counters show it never suspended speculation ("backoff": false)."""

from __future__ import annotations

import httpx
import pytest

from server_helpers import API_KEY, MODEL_NAME, engine_config, metric, read_metrics, start_server


@pytest.fixture(scope="module")
def spec_server(tiny_chat_model):
    spec = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 1, "backoff": False}
    running = start_server(engine_config(tiny_chat_model, speculative_config=spec))
    yield running
    running.stop()


def test_metrics_report_acceptance(spec_server) -> None:
    prompt = " ".join(f"t{i}" for i in (5, 9, 14, 20, 31, 40, 52) * 4)
    body = {"model": MODEL_NAME, "prompt": prompt, "max_tokens": 40, "temperature": 0, "ignore_eos": True}
    reply = httpx.post(spec_server.url + "/v1/completions", json=body, timeout=60,
                       headers={"Authorization": f"Bearer {API_KEY}"})
    assert reply.status_code == 200, reply.text
    values = read_metrics(spec_server.url)
    rounds = metric(values, "pagoda:spec_decode_num_drafts_total")
    drafted = metric(values, "pagoda:spec_decode_num_draft_tokens_total")
    accepted = metric(values, "pagoda:spec_decode_num_accepted_tokens_total")
    assert rounds > 0 and drafted >= rounds and 0 <= accepted <= drafted
    assert metric(values, "pagoda:spec_decode_acceptance_rate") == pytest.approx(accepted / drafted)
    assert metric(values, "pagoda:spec_decode_mean_acceptance_length") == pytest.approx(1 + accepted / rounds)
    per_position = [metric(values, "pagoda:spec_decode_num_accepted_tokens_per_pos_total", position=str(j))
                    for j in range(3)]
    assert sum(per_position) == accepted and per_position == sorted(per_position, reverse=True)
    # "backoff": false: the goodput controller never suspends speculation
    assert metric(values, "pagoda:spec_decode_num_steps_total") >= rounds
    assert metric(values, "pagoda:spec_decode_num_suspended_steps_total") == 0
    assert metric(values, "pagoda:spec_decode_suspended") == 0
