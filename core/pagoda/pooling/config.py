"""Which runner a model gets, and how its hidden states are pooled by default.

``runner="auto"`` picks ``pooling`` for encoder-only models (a :class:`PoolingModel` such as
``BertModel``) and for checkpoints that ship a sentence-transformers pooling config
(``modules.json`` naming a ``Pooling`` module, e.g. decoder embedding models), else ``generate``.

The pooling defaults come from the sentence-transformers files next to the weights when they
exist (``1_Pooling/config.json``: the pooling mode; a ``Normalize`` module: unit vectors;
``sentence_bert_config.json``: ``max_seq_length``), else from the model class (CLS for BERT,
the last token for decoders) with normalized embeddings.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pagoda.errors import ConfigError, ModelLoadError
from pagoda.interfaces.model import PoolingModel

if TYPE_CHECKING:
    from pagoda.config import EngineConfig

logger = logging.getLogger("pagoda")

RUNNERS = ("auto", "generate", "pooling")
ST_MODULE = "sentence_transformers.models."
ST_POOLING_MODES = {  # 1_Pooling/config.json flag -> Pagoda pooling type
    "pooling_mode_cls_token": "CLS",
    "pooling_mode_mean_tokens": "MEAN",
    "pooling_mode_lasttoken": "LAST",
}
ST_UNSUPPORTED_MODES = ("pooling_mode_max_tokens", "pooling_mode_mean_sqrt_len_tokens",
                        "pooling_mode_weightedmean_tokens")
ST_KNOWN_MODULES = ("Transformer", "Pooling", "Normalize")


@dataclass(frozen=True)
class PoolerConfig:
    """A model's pooling defaults (requests may override pooling type, normalization, dimensions)."""

    pooling_type: str  # LAST | MEAN | CLS
    normalize: bool  # default of embed requests
    hidden_size: int  # length of a pooled vector (before the head)
    num_labels: int = 0  # > 0: a classifier; its outputs are label logits
    max_seq_length: int | None = None  # sentence-transformers' truncation length, if it has one


@dataclass(frozen=True)
class SentenceTransformersConfig:
    pooling_type: str | None
    normalize: bool
    max_seq_length: int | None


def read_sentence_transformers(folder: Path) -> SentenceTransformersConfig | None:
    """The pooling facts of a sentence-transformers checkpoint, or None if ``folder`` is not one."""
    modules_file = folder / "modules.json"
    if not modules_file.is_file():
        return None
    modules = _read_json(modules_file)
    kinds = {m.get("type", "").removeprefix(ST_MODULE): m for m in modules if isinstance(m, dict)}
    others = [k for k in kinds if k not in ST_KNOWN_MODULES]
    if others:
        logger.warning("sentence-transformers modules %s of %s are not applied by Pagoda; its embeddings will "
                       "differ from SentenceTransformer's", ", ".join(others), folder)
    pooling_type = None
    if "Pooling" in kinds:
        pooling_type = _st_pooling_type(folder / kinds["Pooling"].get("path", "1_Pooling") / "config.json")
    max_len = None
    bert_config = folder / "sentence_bert_config.json"
    if bert_config.is_file():
        max_len = _read_json(bert_config).get("max_seq_length")
    return SentenceTransformersConfig(pooling_type, "Normalize" in kinds, int(max_len) if max_len else None)


def _st_pooling_type(config_file: Path) -> str:
    config = _read_json(config_file) if config_file.is_file() else {}
    unsupported = [k for k in ST_UNSUPPORTED_MODES if config.get(k)]
    if unsupported:
        raise ModelLoadError(f"{config_file} asks for {', '.join(unsupported)}, which Pagoda does not implement "
                             f"(supported: {', '.join(ST_POOLING_MODES)})")
    chosen = [kind for key, kind in ST_POOLING_MODES.items() if config.get(key)]
    if len(chosen) != 1:
        raise ModelLoadError(f"{config_file} must enable exactly one pooling mode of {', '.join(ST_POOLING_MODES)}")
    return chosen[0]


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"cannot read {path}: {exc}") from exc


def resolve_runner(requested: str, model_cls: type, folder: Path | None) -> str:
    """``auto`` -> ``pooling`` or ``generate`` (module docstring); refuses generating with an encoder."""
    if requested not in RUNNERS:
        raise ConfigError(f"runner must be one of {', '.join(RUNNERS)}, got {requested!r}")
    encoder = issubclass(model_cls, PoolingModel)
    if requested == "generate" and encoder:
        raise ConfigError(f"{model_cls.__name__} is an encoder-only (pooling) model: it has no LM head and cannot "
                          "generate text; use runner='pooling' (--runner pooling) and embed/score with it")
    if requested != "auto":
        return requested
    has_st_pooling = folder is not None and (folder / "modules.json").is_file()
    return "pooling" if encoder or has_st_pooling else "generate"


def pooler_config(hf_config: Any, model_cls: type, folder: Path | None) -> PoolerConfig:
    """The pooling defaults of a model (module docstring)."""
    encoder = issubclass(model_cls, PoolingModel)
    st = read_sentence_transformers(folder) if folder is not None else None
    default_type = model_cls.default_pooling_type if encoder else "LAST"
    num_labels = int(getattr(hf_config, "num_labels", 0)) if getattr(model_cls, "is_classifier", False) else 0
    pooling_type = default_type if num_labels or st is None or st.pooling_type is None else st.pooling_type
    return PoolerConfig(
        pooling_type=pooling_type,
        normalize=st.normalize if st is not None else True,
        hidden_size=int(hf_config.hidden_size),
        num_labels=num_labels,
        max_seq_length=st.max_seq_length if st is not None else None,
    )


def configure_runner(config: "EngineConfig", model_cls: type, hf_config: Any,
                     folder: Path | None) -> tuple["EngineConfig", PoolerConfig | None]:
    """The config with its runner resolved and, for pooling, the settings pooling needs: every
    prompt runs whole in one step (no chunked prefill), and no prefix caching (pooled states of
    all prompt tokens are needed, and an encoder's keys depend on the tokens after them)."""
    runner = resolve_runner(config.runner, model_cls, folder)
    if runner == "generate":
        return dataclasses.replace(config, runner=runner), None
    if config.tensor_parallel_size > 1:
        raise ConfigError("runner 'pooling' does not support tensor parallelism yet; use tensor_parallel_size=1 "
                          "(embedding models are small enough for one device)")
    if config.speculative_config:
        raise ConfigError("speculative decoding has nothing to do for a pooling model (nothing is generated); "
                          "drop --speculative-config")
    pooler = pooler_config(hf_config, model_cls, folder)
    max_model_len = config.max_model_len
    positions = getattr(hf_config, "max_position_embeddings", None)
    if max_model_len is None and pooler.max_seq_length:  # sentence-transformers' truncation length
        max_model_len = min(pooler.max_seq_length, positions or pooler.max_seq_length)
    logger.info("Pooling runner: %s pooling, %snormalized embeddings of %d values%s; max_model_len %s; "
                "chunked prefill and prefix caching off", pooler.pooling_type, "" if pooler.normalize else "not ",
                pooler.hidden_size, f", {pooler.num_labels} labels" if pooler.num_labels else "",
                max_model_len or positions)
    config = dataclasses.replace(config, runner=runner, enable_chunked_prefill=False, enable_prefix_caching=False,
                                 max_model_len=max_model_len)
    return config, pooler
