"""Loading safetensors checkpoints: sharded files, dummy weights, and every way a checkpoint can be wrong."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from pagoda.errors import ModelLoadError
from hf_tiny import hf_logits, load_pagoda, run_prefill, save_tiny

PROMPT = [3, 14, 15, 92, 65, 35, 8, 9, 79]


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A saved tiny Llama checkpoint (treat as read-only) and its HF model."""
    folder = tmp_path_factory.mktemp("llama")
    return folder, save_tiny("llama", folder)


def rewrite(src, dst, edit) -> None:
    """Copy the checkpoint in ``src`` to ``dst`` with ``edit(tensors)`` applied to its weights."""
    dst.mkdir(exist_ok=True)
    (dst / "config.json").write_text((src / "config.json").read_text())
    tensors = load_file(src / "model.safetensors")
    edit(tensors)
    save_file(tensors, dst / "model.safetensors")


def test_missing_tensor_is_named(saved, tmp_path):
    rewrite(saved[0], tmp_path, lambda t: t.pop("model.layers.1.self_attn.k_proj.weight"))
    with pytest.raises(ModelLoadError, match=r"lacks 1 tensor.*model\.layers\.1\.self_attn\.k_proj\.weight"):
        load_pagoda(tmp_path)


def test_missing_lm_head_of_an_untied_model_is_named(saved, tmp_path):
    rewrite(saved[0], tmp_path, lambda t: t.pop("lm_head.weight"))
    with pytest.raises(ModelLoadError, match=r"lm_head\.weight"):
        load_pagoda(tmp_path)


def test_unexpected_tensor_names_tensor_and_file(saved, tmp_path):
    rewrite(saved[0], tmp_path, lambda t: t.update({"model.layers.0.self_attn.extra_proj.weight": torch.zeros(2, 2)}))
    expected = r"Unexpected tensor 'model\.layers\.0\.self_attn\.extra_proj\.weight'.*model\.safetensors"
    with pytest.raises(ModelLoadError, match=expected):
        load_pagoda(tmp_path)


def test_shape_mismatch_names_tensor_and_file(saved, tmp_path):
    def shrink(t):
        t["model.layers.0.mlp.up_proj.weight"] = t["model.layers.0.mlp.up_proj.weight"][:-1]

    rewrite(saved[0], tmp_path, shrink)
    with pytest.raises(ModelLoadError, match=r"up_proj\.weight'.*\(79, 48\).*\(80, 48\).*model\.safetensors"):
        load_pagoda(tmp_path)


def test_truncated_file_is_named(saved, tmp_path):
    rewrite(saved[0], tmp_path, lambda t: None)
    file = tmp_path / "model.safetensors"
    file.write_bytes(file.read_bytes()[: file.stat().st_size // 2])
    with pytest.raises(ModelLoadError, match=r"model\.safetensors.*corrupt or truncated"):
        load_pagoda(tmp_path)


def test_sharded_index_loads_and_matches_transformers(saved, tmp_path):
    folder, hf = saved
    (tmp_path / "config.json").write_text((folder / "config.json").read_text())
    tensors = load_file(folder / "model.safetensors")
    names = sorted(tensors)
    shards = {"model-00001-of-00002.safetensors": names[::2], "model-00002-of-00002.safetensors": names[1::2]}
    for file, keys in shards.items():
        save_file({k: tensors[k] for k in keys}, tmp_path / file)
    weight_map = {k: file for file, keys in shards.items() for k in keys}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    model, ctx = load_pagoda(tmp_path)
    assert (run_prefill(model, ctx, [PROMPT]) - hf_logits(hf, PROMPT)).abs().max().item() < 1e-4

    (tmp_path / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(ModelLoadError, match=r"missing: model-00002-of-00002\.safetensors"):
        load_pagoda(tmp_path)


def test_tied_checkpoint_may_carry_lm_head(tmp_path):
    hf = save_tiny("qwen3", tmp_path, tie_word_embeddings=True)
    tensors = load_file(tmp_path / "model.safetensors")
    tensors["lm_head.weight"] = tensors["model.embed_tokens.weight"].clone()  # older transformers saved both
    save_file(tensors, tmp_path / "model.safetensors")
    model, ctx = load_pagoda(tmp_path)
    assert model.lm_head.weight is model.model.embed_tokens.weight
    assert (run_prefill(model, ctx, [PROMPT]) - hf_logits(hf, PROMPT)).abs().max().item() < 1e-4


def test_dummy_weights_are_deterministic_and_finite(saved, tmp_path):
    (tmp_path / "config.json").write_text((saved[0] / "config.json").read_text())  # config only, no weights
    with pytest.raises(ModelLoadError, match=r"No \*\.safetensors.*--load-format dummy"):
        load_pagoda(tmp_path)
    first, ctx = load_pagoda(tmp_path, "dummy")
    second, _ = load_pagoda(tmp_path, "dummy")
    logits = run_prefill(first, ctx, [PROMPT])
    assert torch.isfinite(logits).all() and logits.std() > 0
    assert torch.equal(logits, run_prefill(second, ctx, [PROMPT]))
    assert torch.equal(first.model.norm.weight, torch.ones_like(first.model.norm.weight))


def test_unknown_and_mismatched_load_formats(saved):
    with pytest.raises(ModelLoadError, match="Unknown load format 'pt'"):
        load_pagoda(saved[0], "pt")
    with pytest.raises(ModelLoadError, match="needs a .gguf file"):
        load_pagoda(saved[0], "gguf")
