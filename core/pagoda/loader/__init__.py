"""Model loading: resolve a local source, read its config/tokenizer, build and fill the model.

The engine calls, in order: :func:`resolve_model`, :func:`load_hf_config`, :func:`load_tokenizer`
and :func:`load_model`. Nothing here downloads: sources are local paths or the embedded default.
"""

from pagoda.loader.hf_files import eos_token_ids, load_hf_config, load_tokenizer
from pagoda.loader.model_loader import LOAD_FORMATS, load_checkpoint, load_model, resolve_load_format
from pagoda.loader.source import DEFAULT_MODEL_NAME, ModelSource, default_model_source, resolve_model

__all__ = [
    "DEFAULT_MODEL_NAME",
    "LOAD_FORMATS",
    "ModelSource",
    "default_model_source",
    "load_checkpoint",
    "load_hf_config",
    "load_model",
    "load_tokenizer",
    "resolve_load_format",
    "resolve_model",
]
