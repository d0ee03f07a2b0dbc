"""A GGUF file's config read by Pagoda's parser equals transformers' own reading, and its tokenizer, saved after
the first load, loads again from the cache with the same vocabulary, special tokens and chat template."""

from __future__ import annotations

import pytest

from pagoda.loader import default_model_source
from pagoda.loader.hf_files import gguf_tokenizer_cache, load_hf_config, load_tokenizer

NAME_FIELDS = ("_name_or_path", "_model_name_or_path", "transformers_version")


def comparable(config) -> dict:
    return {k: v for k, v in config.to_dict().items() if k not in NAME_FIELDS}


def test_the_fast_llama_config_equals_transformers():
    from transformers import AutoConfig

    source = default_model_source()
    slow = AutoConfig.from_pretrained(str(source.path), gguf_file=source.gguf_file, local_files_only=True)
    slow.architectures = ["LlamaForCausalLM"]
    assert comparable(load_hf_config(source)) == comparable(slow)


def test_a_gguf_tokenizer_is_cached_after_its_first_load(tmp_path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("PAGODA_CACHE_DIR", str(tmp_path))
    source = default_model_source()
    folder = gguf_tokenizer_cache(source.gguf_path)
    assert folder.is_relative_to(tmp_path) and not folder.exists()
    first = load_tokenizer(source)
    assert (folder / "tokenizer.json").is_file()
    again = load_tokenizer(source)
    text = "The three primary colors are <|im_start|> naïve 12345 ⚡"
    assert again.encode(text) == first.encode(text)
    assert (again.eos_token_id, again.bos_token_id, len(again)) == (first.eos_token_id, first.bos_token_id, len(first))
    chat = [{"role": "user", "content": "Hi"}]
    assert again.apply_chat_template(chat, tokenize=False) == first.apply_chat_template(chat, tokenize=False)


def test_a_cache_that_cannot_be_written_is_skipped(tmp_path, monkeypatch: pytest.MonkeyPatch):
    blocked = tmp_path / "file"
    blocked.write_text("")  # a file where the cache folder would go
    monkeypatch.setenv("PAGODA_CACHE_DIR", str(blocked))
    assert load_tokenizer(default_model_source()).encode("Hello") == [19556]
