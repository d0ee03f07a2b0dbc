"""Decoder models (Llama, Qwen3) under runner "pooling": last-token and mean pooling of the final
hidden states equal HF's (float32), and the runner/pooling defaults a sentence-transformers folder
brings (modules.json, 1_Pooling/config.json)."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
import torch.nn.functional as F

from pagoda import LLM, PoolingParams
from tiny_models import make_tiny_model

PROMPTS = [[5, 17, 40, 9], [3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15], [99], [60, 61, 62, 63, 70, 71]]


@pytest.fixture(scope="module", params=["llama", "qwen3"])
def decoder(request, tmp_path_factory):
    path = tmp_path_factory.mktemp(f"pool-{request.param}")
    return str(path), make_tiny_model(path, request.param)


@torch.no_grad()
def hf_final_hidden(model, ids: list[int]) -> torch.Tensor:
    """The decoder's final-norm hidden states [len, hidden] (what its LM head reads)."""
    return model.model(torch.tensor([ids])).last_hidden_state[0]


def test_last_token_and_mean_pooling_equal_hf(decoder):
    path, hf = decoder
    llm = LLM(path, runner="pooling", block_size=4)
    try:
        assert llm.engine.info.pooling.pooling_type == "LAST"
        last = llm.encode(PROMPTS, use_tqdm=False)
        mean = llm.embed(PROMPTS, PoolingParams(pooling_type="MEAN"), use_tqdm=False)
        for ids, out_last, out_mean in zip(PROMPTS, last, mean):
            hidden = hf_final_hidden(hf, ids)
            torch.testing.assert_close(out_last.outputs.data, hidden[-1], atol=1e-5, rtol=1e-5)
            expected = F.normalize(hidden.mean(0), dim=-1)
            torch.testing.assert_close(torch.tensor(out_mean.outputs.embedding), expected, atol=1e-5, rtol=1e-5)
    finally:
        llm.shutdown()


def test_a_sentence_transformers_folder_selects_pooling_and_its_mode(decoder, tmp_path):
    folder = tmp_path / "st-decoder"
    shutil.copytree(decoder[0], folder)
    (folder / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]))
    (folder / "1_Pooling").mkdir()
    (folder / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_mean_tokens": True}))
    llm = LLM(str(folder), block_size=4)  # runner auto: a sentence-transformers pooling config -> pooling
    try:
        info = llm.engine.info
        assert (info.runner, info.pooling.pooling_type, info.pooling.normalize) == ("pooling", "MEAN", False)
        out = llm.embed(PROMPTS[:1], use_tqdm=False)[0].outputs.embedding  # no Normalize module: as it comes
        torch.testing.assert_close(torch.tensor(out), hf_final_hidden(decoder[1], PROMPTS[0]).mean(0), atol=1e-5,
                                   rtol=1e-5)
    finally:
        llm.shutdown()


def test_a_generative_llm_refuses_pooling_calls(decoder):
    llm = LLM(decoder[0], block_size=4)  # runner auto: a plain decoder generates
    try:
        assert llm.engine.info.runner == "generate"
        with pytest.raises(ValueError, match="runner='pooling'"):
            llm.embed(["t1 t2"], use_tqdm=False)
    finally:
        llm.shutdown()
