"""Config and tokenizer through transformers, from local files only (GGUF metadata included)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pagoda.errors import ModelLoadError
from pagoda.loader.source import ModelSource

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")

# GGUF configs name a model_type but no architectures; the engine selects models by architecture.
ARCHITECTURE_OF_MODEL_TYPE = {
    "llama": "LlamaForCausalLM",
    "mistral": "MistralForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
    "gemma3_text": "Gemma3ForCausalLM",
}


def _where(source: ModelSource) -> str:
    return str(source.gguf_path) if source.is_gguf else str(source.path / "config.json")


def load_hf_config(source: ModelSource) -> Any:
    """The model's ``PretrainedConfig`` (config.json, or the metadata of a GGUF file)."""
    from transformers import AutoConfig

    kwargs: dict[str, Any] = {"local_files_only": True}
    if source.is_gguf:
        kwargs["gguf_file"] = source.gguf_file
    try:
        fast = _fast_gguf_config(source)
        config = fast if fast is not None else AutoConfig.from_pretrained(str(source.path), **kwargs)
    except Exception as exc:  # transformers raises ValueError/OSError/KeyError for bad configs
        raise ModelLoadError(
            f"Cannot read the model config from {_where(source)}: {exc}. Check that the file is complete and "
            "that its model_type is one transformers knows."
        ) from exc
    if not getattr(config, "architectures", None):
        arch = ARCHITECTURE_OF_MODEL_TYPE.get(getattr(config, "model_type", ""))
        if arch:
            config.architectures = [arch]
    expose_text_config(config)
    return config


def expose_text_config(config: Any) -> None:
    """A vision-language config keeps its decoder's fields under ``text_config``; copy those the top level
    lacks up to it, so the engine sizes the KV cache, context and vocabulary from the decoder."""
    text = getattr(config, "text_config", None)
    if text is None or getattr(config, "vision_config", None) is None:
        return
    for key, value in text.to_dict().items():
        if getattr(config, key, None) is None:
            setattr(config, key, value)


def _fast_gguf_config(source: ModelSource) -> Any:
    """The config of a GGUF file read by Pagoda's parser where it can (see pagoda.loader.gguf_config)."""
    if not source.is_gguf:
        return None
    from transformers import AutoConfig

    from pagoda.loader.gguf_config import gguf_config_dict
    from pagoda.loader.gguf_file import GGUFFile

    params = gguf_config_dict(GGUFFile(source.gguf_path))
    return None if params is None else AutoConfig.for_model(**params)


def eos_token_ids(tokenizer: Any, hf_config: Any) -> list[int]:
    """The end-of-sequence ids: the tokenizer's, else the model config's (one id or a list; none: empty)."""
    eos = getattr(tokenizer, "eos_token_id", None)
    if eos is None:
        eos = getattr(hf_config, "eos_token_id", None)
    return [t for t in (eos if isinstance(eos, (list, tuple)) else [eos]) if t is not None]


def load_tokenizer(source: ModelSource, tokenizer: str | None = None) -> Any:
    """The tokenizer (with its chat template): from ``tokenizer`` if given, else next to the model."""
    from transformers import AutoTokenizer

    if tokenizer is not None:
        path, kwargs, where = _tokenizer_path(tokenizer)
    elif source.is_gguf:
        path, kwargs, where = str(source.path), {"gguf_file": source.gguf_file}, str(source.gguf_path)
    else:
        path, kwargs, where = str(source.path), {}, str(source.path)
    if not kwargs and not any((Path(path) / f).is_file() for f in TOKENIZER_FILES):
        # transformers v5 would silently build an empty tokenizer from config.json alone
        raise ModelLoadError(
            f"No tokenizer files in {where} (looked for {', '.join(TOKENIZER_FILES)}); "
            "pass --tokenizer PATH to a folder that has them."
        )
    try:
        tokenizer = cached_gguf_tokenizer(Path(path) / kwargs["gguf_file"]) if kwargs else None
        if tokenizer is None:
            tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True, **kwargs)
            if kwargs:
                save_gguf_tokenizer(Path(path) / kwargs["gguf_file"], tokenizer)
    except Exception as exc:
        raise ModelLoadError(
            f"Cannot load a tokenizer from {where}: {exc}. The folder needs tokenizer.json or "
            "tokenizer_config.json (a .gguf file carries its own); pass --tokenizer PATH to use another one."
        ) from exc
    from pagoda.loader.chat_templates import ensure_chat_template

    folder = None if kwargs else path  # e.g. LLaVA's template in chat_template.json; Gemma GGUF files carry none
    return ensure_chat_template(tokenizer, folder)


def _tokenizer_path(tokenizer: str) -> tuple[str, dict[str, Any], str]:
    path = Path(tokenizer).expanduser()
    if path.is_file() and path.suffix.lower() == ".gguf":
        return str(path.parent), {"gguf_file": path.name}, str(path)
    if path.is_dir():
        return str(path), {}, str(path)
    raise ModelLoadError(
        f"Tokenizer '{tokenizer}' is not a local folder or .gguf file; Pagoda never downloads from the hub."
    )


def gguf_tokenizer_cache(gguf: Path) -> Path:
    """The folder a GGUF file's tokenizer is saved to: keyed by the file's path, size and modification time."""
    import hashlib

    from pagoda import envs

    stat = gguf.stat()
    key = hashlib.sha256(f"{gguf.resolve()}:{stat.st_size}:{stat.st_mtime_ns}".encode()).hexdigest()[:16]
    root = envs.CACHE_DIR.get() or str(Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "pagoda")
    return Path(root) / "gguf_tokenizers" / f"{gguf.stem}-{key}"


def cached_gguf_tokenizer(gguf: Path) -> Any:
    """The tokenizer saved from ``gguf`` by an earlier run, or None."""
    from transformers import AutoTokenizer

    folder = gguf_tokenizer_cache(gguf)
    if not (folder / "tokenizer.json").is_file():
        return None
    return AutoTokenizer.from_pretrained(str(folder), local_files_only=True)


def save_gguf_tokenizer(gguf: Path, tokenizer: Any) -> None:
    """Save ``tokenizer`` for the next run, whole or not at all (a folder renamed into place); a cache that
    cannot be written only costs the next start its time."""
    import shutil
    import tempfile

    folder = gguf_tokenizer_cache(gguf)
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(dir=folder.parent, prefix=".partial-"))
    except OSError:
        return
    try:
        tokenizer.save_pretrained(str(staging))
        staging.rename(folder)
    except OSError:  # unwritable, or another process saved it first
        shutil.rmtree(staging, ignore_errors=True)
