"""BERT under runner "pooling": hidden states, pooled embeddings and cross-encoder scores equal HF
transformers on tiny random checkpoints (float32), prompts of different lengths batched together."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
import transformers

from pagoda import LLM, PoolingParams
from pagoda.errors import ConfigError, RequestError

PROMPTS = [[2, 17, 40, 9, 3], [2, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 3], [2, 99], [2, 60, 61, 62, 3, 70, 71, 3]]
ATOL = 2e-5


@torch.no_grad()
def hf_hidden(model, ids: list[int]) -> torch.Tensor:
    return model(torch.tensor([ids])).last_hidden_state[0]  # [len, hidden]


@pytest.fixture(scope="module")
def bert_llm(tiny_bert):
    llm = LLM(tiny_bert[0], block_size=4, max_num_seqs=3)  # runner auto -> pooling; 3 seats: several steps
    yield llm
    llm.shutdown()


def test_bert_model_is_detected_as_a_pooling_model(bert_llm):
    info = bert_llm.engine.info
    assert info.runner == "pooling"
    assert (info.pooling.pooling_type, info.pooling.normalize, info.pooling.hidden_size) == ("CLS", True, 48)


def test_hidden_states_of_every_token_equal_hf(bert_llm, tiny_bert):
    outs = bert_llm.encode(PROMPTS, PoolingParams(pooling_type="ALL"), use_tqdm=False)
    for ids, out in zip(PROMPTS, outs):
        assert out.outputs.data.shape == (len(ids), 48)
        torch.testing.assert_close(out.outputs.data, hf_hidden(tiny_bert[1], ids), atol=ATOL, rtol=0)


@pytest.mark.parametrize("pooling_type", ["CLS", "MEAN", "LAST"])
def test_pooled_embeddings_equal_hf(bert_llm, tiny_bert, pooling_type):
    outs = bert_llm.embed(PROMPTS, PoolingParams(pooling_type=pooling_type), use_tqdm=False)
    for ids, out in zip(PROMPTS, outs):
        hidden = hf_hidden(tiny_bert[1], ids)
        pooled = {"CLS": hidden[0], "MEAN": hidden.mean(0), "LAST": hidden[-1]}[pooling_type]
        torch.testing.assert_close(torch.tensor(out.outputs.embedding), F.normalize(pooled, dim=-1), atol=ATOL, rtol=0)


def test_encode_is_raw_and_dimensions_truncate_before_normalizing(bert_llm, tiny_bert):
    raw = bert_llm.encode(PROMPTS[:1], use_tqdm=False)[0].outputs.data
    torch.testing.assert_close(raw, hf_hidden(tiny_bert[1], PROMPTS[0])[0], atol=ATOL, rtol=0)
    short = bert_llm.embed(PROMPTS[:1], PoolingParams(dimensions=8), use_tqdm=False)[0].outputs.embedding
    torch.testing.assert_close(torch.tensor(short), F.normalize(raw[:8], dim=-1), atol=ATOL, rtol=0)
    unnormalized = bert_llm.embed(PROMPTS[:1], PoolingParams(normalize=False), use_tqdm=False)[0].outputs.embedding
    torch.testing.assert_close(torch.tensor(unnormalized), raw, atol=ATOL, rtol=0)


def test_text_prompts_and_bi_encoder_scores(bert_llm, tiny_bert):
    tokenizer = transformers.AutoTokenizer.from_pretrained(tiny_bert[0])
    texts = ["t1 t2 t3", "t4 t5", "t1 t2 t3 t9"]
    scores = bert_llm.score(texts[0], texts, use_tqdm=False)
    refs = [F.normalize(hf_hidden(tiny_bert[1], tokenizer(t)["input_ids"])[0], dim=-1) for t in texts]
    assert [round(s.outputs.score, 5) for s in scores] == [round(float(refs[0] @ r), 5) for r in refs]
    assert scores[0].outputs.score == pytest.approx(1.0, abs=1e-5)


def test_a_batch_equals_its_prompts_one_by_one_and_frees_every_block(bert_llm):
    many = [PROMPTS[i % len(PROMPTS)][: 2 + i % 7] for i in range(20)]
    together = bert_llm.embed(many, use_tqdm=False)
    alone = [bert_llm.embed([p], use_tqdm=False)[0] for p in many[:4]]
    for a, b in zip(together, alone):
        torch.testing.assert_close(torch.tensor(a.outputs.embedding), torch.tensor(b.outputs.embedding), atol=1e-6,
                                   rtol=0)
    kv = bert_llm.engine.core.kv_cache
    assert kv.num_free_blocks == kv.num_blocks
    assert not bert_llm.engine.core.requests


def test_cross_encoder_scores_equal_hf_on_text_pairs(tiny_cross_encoder):
    path, hf = tiny_cross_encoder
    tokenizer = transformers.AutoTokenizer.from_pretrained(path)
    query, docs = "t1 t2 t3", ["t1 t2", "t7 t8 t9 t10", "t3"]
    llm = LLM(path, block_size=4)
    try:
        assert llm.engine.info.pooling.num_labels == 1
        scores = [s.outputs.score for s in llm.score(query, docs, use_tqdm=False)]
        with torch.no_grad():
            refs = [torch.sigmoid(hf(**tokenizer(query, d, return_tensors="pt")).logits)[0, 0].item() for d in docs]
        assert scores == pytest.approx(refs, abs=1e-5)
        probs = llm.classify(["t1 t2 t3"], use_tqdm=False)[0].outputs.probs
        with torch.no_grad():
            ref = torch.sigmoid(hf(**tokenizer("t1 t2 t3", return_tensors="pt")).logits)[0].tolist()
        assert probs == pytest.approx(ref, abs=1e-5)
        with pytest.raises(ValueError, match="classifier"):
            llm.embed(["t1"], use_tqdm=False)
    finally:
        llm.shutdown()


def test_wrong_runner_and_wrong_task_are_clear_errors(bert_llm, tiny_bert):
    with pytest.raises(ConfigError, match="encoder-only"):
        LLM(tiny_bert[0], runner="generate")
    with pytest.raises(RequestError, match="pooling model"):
        bert_llm.generate(["t1 t2"], use_tqdm=False)
    with pytest.raises(ValueError, match="classifier"):
        bert_llm.classify(["t1"], use_tqdm=False)
    with pytest.raises(RequestError, match="max_model_len is 64"):
        bert_llm.embed([[2] * 65], use_tqdm=False)
    assert len(bert_llm.embed([[2] * 65], truncate_prompt_tokens=-1, use_tqdm=False)[0].prompt_token_ids) == 64
    with pytest.raises(RequestError, match="pooling_type"):
        PoolingParams(pooling_type="MAX")


def test_serial_steps_and_small_batches_give_the_same_embeddings(bert_llm, tiny_bert):
    llm = LLM(tiny_bert[0], block_size=8, max_num_seqs=2, overlap_steps=False, max_num_batched_tokens=16)
    try:
        got = [o.outputs.embedding for o in llm.embed(PROMPTS, use_tqdm=False)]
    finally:
        llm.shutdown()
    expected = [o.outputs.embedding for o in bert_llm.embed(PROMPTS, use_tqdm=False)]
    torch.testing.assert_close(torch.tensor(got), torch.tensor(expected), atol=1e-6, rtol=0)
