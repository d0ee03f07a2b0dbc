"""Which step features each rank's model runner runs with (:mod:`pagoda.runner.features`).

The runner that samples (the driver's, rank 0; under pipeline parallelism the last stage's tensor-parallel
rank 0) gets guided decoding when the engine has a tokenizer; the driver's the pooling step under
``runner="pooling"``; every rank's runner gets LoRA adapters
under ``--enable-lora`` (each rank adds its part of every adapted layer's product), speculative
verification when ``--speculative-config`` is set (each rank runs the verify steps' forward pass),
the FP8 KV cache's calibration under ``--calculate-kv-scales``, and a KV connector's block transfers under
``--kv-offload-gib`` / ``--kv-transfer-config`` (each rank moves its own heads' blocks).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from pagoda.config import EngineConfig, encoder_cache_rows
from pagoda.errors import ConfigError
from pagoda.executor.kv_scales import KVScaleCalibration
from pagoda.guided.runtime import guided_sampling, guided_sampling_for
from pagoda.interfaces.model import CausalLM
from pagoda.interfaces.platform import Platform
from pagoda.interfaces.multimodal import MultimodalModel
from pagoda.kv_connectors.build import kv_transfer_step
from pagoda.loader import ModelSource, load_tokenizer
from pagoda.lora.step import LoRAStep
from pagoda.multimodal.step import MultimodalStep
from pagoda.pooling.runner import PoolingStep
from pagoda.runner.features import StepFeature
from pagoda.spec_decode.step import SpecDecodeStep
from pagoda.speculative_config import parse_speculative_config

if TYPE_CHECKING:
    from pagoda.engine_core.parts import EngineParts


def driver_features(parts: "EngineParts") -> list[StepFeature]:
    """The features of the driver's runner."""
    features: list[StepFeature] = []
    guided = guided_sampling_for(parts) if parts.pp.size == 1 else None  # the last stage samples: its runner does
    if guided is not None:
        features.append(guided)
    if parts.pooler_config is not None:  # runner "pooling" (single rank: tensor parallelism is refused)
        if parts.config.enable_lora:
            raise ConfigError(f"{type(parts.model).__name__} runs as a pooling model, which takes no LoRA adapters; "
                              "drop enable_lora")
        features.append(PoolingStep(parts.pooler_config, parts.model))
    return features + rank_features(parts.config, parts.model, parts.platform, parts.dtype)


def last_stage_features(config: EngineConfig, source: ModelSource, hf_config, platform: Platform) -> list[StepFeature]:
    """What the sampling rank of a pipeline's last stage adds to :func:`rank_features`: guided decoding (the
    engine's tokenizer loaded again here, unless the engine runs without one)."""
    tokenizer = None if config.skip_tokenizer_init else load_tokenizer(source, config.tokenizer)
    guided = guided_sampling(tokenizer, hf_config, config.guided_decoding_backend, platform.host_buffer)
    return [] if guided is None else [guided]


def rank_features(config: EngineConfig, model: CausalLM, platform: Platform, dtype: torch.dtype) -> list[StepFeature]:
    """The features every rank's runner has (a worker rank's runner has only these)."""
    features: list[StepFeature] = []
    if config.enable_lora:
        features.append(LoRAStep(model, config, platform, dtype))
    if isinstance(model, MultimodalModel):  # every rank encodes the images its steps reach
        features.append(MultimodalStep(model, encoder_cache_rows(config)))
    speculative = parse_speculative_config(config.speculative_config)
    if speculative is not None:
        features.append(SpecDecodeStep(speculative, lora=config.enable_lora))
    if config.calculate_kv_scales:  # an FP8 KV cache's scales from the first real step
        features.append(KVScaleCalibration(model))
    kv_transfers = kv_transfer_step(config, model, platform)  # None without a KV connector
    if kv_transfers is not None:
        features.append(kv_transfers)
    return features
