"""Per-adapter series: a request that names a LoRA adapter is counted under ``model_name`` = the adapter's name,
one to the base model under the served name; the engine gauges stay under the served name."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from metrics_scrape import complete, scrape, total

pytest.importorskip("peft")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lora"))
from lora_models import make_adapter, make_base  # noqa: E402
from lora_server import API_KEY, BASE_NAME, start_lora_server  # noqa: E402

AUTH = {"Authorization": f"Bearer {API_KEY}"}


@pytest.fixture(scope="module")
def lora_server(tmp_path_factory):
    root = tmp_path_factory.mktemp("metrics-lora")
    base = make_base(root / "base", "llama")
    running = start_lora_server(str(base), [("sql", str(make_adapter(base, root / "sql", seed=5)))])
    yield running
    running.stop()


def test_requests_are_labelled_with_the_adapter_they_named(lora_server):
    url = lora_server.url
    sent = {name: [complete(url, AUTH, {"model": name, "prompt": "t3 t4", "max_tokens": k, "temperature": 0})
                   for k in ks] for name, ks in (("sql", (3, 5)), (BASE_NAME, (4,)))}
    samples = scrape(url)
    for name, requests in sent.items():
        assert total(samples, "pagoda:e2e_request_latency_seconds_count", model_name=name) == len(requests)
        assert total(samples, "pagoda:generation_tokens_total", model_name=name) == sum(
            s.completion_tokens for s in requests)
        assert total(samples, "pagoda:request_success_total", model_name=name, engine="0") == len(requests)
    gauges = {dict(labels)["model_name"] for (n, labels), _ in samples.items() if n == "pagoda:num_requests_running"}
    assert gauges == {BASE_NAME}
