"""A transformers config from a GGUF file's metadata, read by Pagoda's own parser.

transformers builds a GGUF model's config (and tokenizer) with the gguf package's reader, which
walks every element of the vocabulary arrays: tens of seconds for Gemma 3's 262k tokens. For the
architectures in ``FAST_ARCHITECTURES`` Pagoda reads the metadata with :mod:`pagoda.loader.gguf_file`
(a fraction of a second) and maps the keys with transformers' own table (``GGUF_CONFIG_MAPPING``),
as transformers does; any other architecture, or a transformers without that table, takes
transformers' own path.
"""

from __future__ import annotations

from typing import Any

from pagoda.loader.gguf_file import GGUFFile

FAST_ARCHITECTURES = {"gemma3": "gemma3_text", "llama": "llama"}  # GGUF architecture -> transformers model_type


def _plain(value: Any) -> Any:
    """numpy scalars/arrays -> Python values."""
    return value.tolist() if hasattr(value, "tolist") else value


def gguf_config_dict(file: GGUFFile) -> dict[str, Any] | None:
    """``AutoConfig.for_model`` keyword arguments for ``file``, or None where transformers must read it."""
    arch = file.string("general.architecture")
    if arch not in FAST_ARCHITECTURES:
        return None
    try:
        from transformers.integrations.ggml import GGUF_CONFIG_MAPPING
    except ImportError:
        return None
    tables = {arch: GGUF_CONFIG_MAPPING[arch], "tokenizer": GGUF_CONFIG_MAPPING["tokenizer"]}
    out: dict[str, Any] = {"model_type": FAST_ARCHITECTURES[arch], "tie_word_embeddings": "output.weight" not in file.tensors}
    for key, value in file.metadata.items():
        prefix, _, rest = key.partition(".")
        target = tables.get(prefix, {}).get(rest)
        if target:
            out[target] = _plain(value)
    if "vocab_size" not in out and "tokenizer.ggml.tokens" in file.metadata:
        out["vocab_size"] = len(file.metadata["tokenizer.ggml.tokens"])
    return out
