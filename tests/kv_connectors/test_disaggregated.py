"""Disaggregated prefill on CPU: a producer engine and a consumer engine (two `pagoda serve` processes) behind
`pagoda router`. The producer computes each prompt's KV blocks and hands them over (shared storage, or ZeroMQ
straight into the consumer's host memory); the consumer loads them instead of computing them. Through the
`openai` client, streamed and not, the tokens are those of one engine."""

from __future__ import annotations

import json

import openai
import pytest

from pagoda import LLM, SamplingParams

from connector_engines import prompts
from servers import counters, free_port, serving

FLAGS = ("--served-model-name", "tiny", "--dtype", "float32", "--block-size", "8", "--max-num-seqs", "4", "--port", "0")


def connector_configs(kind: str, tmp_path) -> tuple[dict, dict]:
    """(producer's, consumer's) --kv-transfer-config."""
    if kind == "shared_storage":
        extra = {"path": str(tmp_path / "kv")}
    else:
        extra = {"address": f"tcp://127.0.0.1:{free_port()}"}
    return ({"kv_connector": kind, "kv_role": "kv_producer", "kv_connector_extra_config": extra},
            {"kv_connector": kind, "kv_role": "kv_consumer", "kv_connector_extra_config": extra})


def one_engine(path: str, texts: list[str]) -> list[str]:
    llm = LLM(model=path, dtype="float32", block_size=8, max_num_seqs=4)
    try:
        params = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)
        return [o.outputs[0].text for o in llm.generate(texts, params, use_tqdm=False)]
    finally:
        llm.shutdown()


@pytest.mark.parametrize("kind", ["shared_storage", "zmq"])
def test_router_with_a_producer_and_a_consumer_equals_one_engine(tiny_llama, tmp_path, kind):
    texts = [" ".join(f"t{i}" for i in p) for p in prompts(7, 2, 45)]
    expected = one_engine(tiny_llama, texts)
    producer_config, consumer_config = connector_configs(kind, tmp_path)
    router_port = free_port()
    with serving("serve", tiny_llama, *FLAGS, "--kv-transfer-config", json.dumps(consumer_config)) as (decode, _), \
            serving("serve", tiny_llama, *FLAGS, "--kv-transfer-config", json.dumps(producer_config)) as (prefill, _), \
            serving("router", "--prefill", prefill, "--decode", decode, "--port", str(router_port),
                    url=f"http://127.0.0.1:{router_port}") as (router, _):
        client = openai.OpenAI(base_url=router + "/v1", api_key="none")
        stream = client.completions.create(model="tiny", prompt=texts[0], max_tokens=8, temperature=0, stream=True,
                                           extra_body={"ignore_eos": True})
        streamed = "".join(chunk.choices[0].text for chunk in stream)
        whole = client.completions.create(model="tiny", prompt=texts[1], max_tokens=8, temperature=0,
                                          extra_body={"ignore_eos": True}).choices[0].text
        produced, consumed = counters(prefill), counters(decode)
    assert [streamed, whole] == expected
    blocks = 2 * (44 // 8)  # two prompts of 45 tokens: the last token is computed, 5 full blocks before it
    assert consumed["kv_connector_loaded_blocks_total"] == blocks, consumed
    assert produced["kv_connector_saved_blocks_total"] >= blocks, produced
    assert not consumed.get("kv_connector_load_failed_blocks_total"), consumed


def test_the_prefill_request_is_one_token_not_streamed():
    from pagoda.router.app import prefill_body

    body = {"model": "m", "prompt": "hi", "max_tokens": 50, "stream": True, "stream_options": {"include_usage": True},
            "n": 3, "min_tokens": 4, "temperature": 0.7, "max_completion_tokens": 50}
    assert prefill_body(body) == {"model": "m", "prompt": "hi", "max_tokens": 1, "temperature": 0.7,
                                  "max_completion_tokens": 1}
