"""What every tensor-parallel rank builds to run a model: the platform's attention backend and
quantization method, this rank's weights, and its KV cache tensors (:func:`build_model_shard`, run
by every rank in the same order: loading, profiling and cache sizing run collectives). The engine
core's driver adds the tokenizer and the scheduler (:mod:`pagoda.engine_core.parts`); a draft model
for speculative decoding is built the same way.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from dataclasses import dataclass

import torch

from pagoda.config import EngineConfig, step_token_budget
from pagoda.errors import ModelLoadError
from pagoda.interfaces import AttentionBackend, BuildContext, CausalLM, Platform
from pagoda.interfaces.parallel import SINGLE, WHOLE, PipelineParallel, TensorParallel
from pagoda.loader import ModelSource, load_model
from pagoda.models.spec import attention_spec, num_kv_cache_layers, pipeline_stages
from pagoda.plugins import get_plugin_manager
from pagoda.quantization.select import resolve_quantization
from pagoda.runner.encoder_profile import encoder_profile
from pagoda.runner.profiling import profile_activation_bytes

logger = logging.getLogger("pagoda")

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


@dataclass
class ModelShard:
    """What each rank builds: its part of the model (its tensor-parallel shard of its pipeline stage's layers)
    and its KV cache (of those layers)."""

    dtype: torch.dtype
    max_model_len: int
    attention: AttentionBackend
    attention_name: str
    quant_name: str
    model: CausalLM
    kv_caches: list[torch.Tensor]
    num_blocks: int
    pp: PipelineParallel = WHOLE  # the stage, with its layers


def select_platform(config: EngineConfig) -> Platform:
    """The platform ``config`` names (``auto``: the usable one of highest priority), constructed."""
    registry = get_plugin_manager().registry("platform")
    name, _ = registry.select(config.platform)
    return registry.create(name)


def resolve_dtype(config: EngineConfig, hf_config, platform: Platform) -> torch.dtype:
    if config.dtype != "auto":
        dtype = DTYPES[config.dtype]
    else:
        checkpoint = getattr(hf_config, "dtype", None) or getattr(hf_config, "torch_dtype", None)
        if isinstance(checkpoint, str):
            checkpoint = DTYPES.get(checkpoint)
        dtype = platform.default_dtype(checkpoint)
    reason = platform.supports_dtype(dtype)
    if reason:
        raise ValueError(f"dtype {dtype} is not usable on {platform.describe()}: {reason}")
    return dtype


def resolve_max_model_len(config: EngineConfig, hf_config) -> int:
    derived = getattr(hf_config, "max_position_embeddings", None) or 2048
    if config.max_model_len is None:
        return derived
    if config.max_model_len > derived:
        raise ValueError(
            f"max_model_len {config.max_model_len} exceeds the model's max_position_embeddings {derived}; "
            f"pass --max-model-len {derived} or less"
        )
    return config.max_model_len


def build_model_shard(config: EngineConfig, platform: Platform, source: ModelSource, hf_config,
                      tp: TensorParallel = SINGLE, pp: PipelineParallel = WHOLE) -> ModelShard:
    """Attention backend, quantization method, this rank's weights and KV cache (every rank runs this)."""
    platform.prepare_process()
    plugins = get_plugin_manager()
    pp = stage_layers_of(config, hf_config, pp)
    dtype = resolve_dtype(config, hf_config, platform)
    max_model_len = resolve_max_model_len(config, hf_config)
    model_cls = model_class(hf_config)
    spec = attention_spec(hf_config, config.block_size, dtype, tp.size)
    spec = dataclasses.replace(spec, kv_cache_dtype=config.kv_cache_dtype)  # selection refuses backends that lack it
    if not getattr(model_cls, "causal_attention", True):  # encoder models attend bidirectionally
        spec = dataclasses.replace(spec, causal=False)
    attentions = plugins.registry("attention")
    attention_name, backend_cls = attentions.select(config.attention_backend, platform=platform, spec=spec)
    attention = attentions.create(attention_name, spec, platform)
    methods = plugins.registry("quantization")
    quant_name, _ = methods.select(resolve_quantization(config.quantization, hf_config), platform=platform)
    quant = methods.create(quant_name, getattr(hf_config, "quantization_config", None))
    ctx = BuildContext(dtype=dtype, quant_method=quant, ops=platform.custom_ops(), attention=attention, tp=tp, pp=pp)
    with methods.blame(quant_name, "bind_ops()"):
        quant.bind_ops(ctx.ops)
    lead = tp.rank == 0 and pp.is_first  # the rank that reports
    model = load_model(source, hf_config, ctx, model_cls, config.load_format, platform.device(), progress=lead)
    tuned = ctx.ops.tune(model, tp)
    if tuned and lead:
        logger.info("%s", tuned)
    kv_caches, num_blocks = allocate_kv_cache(config, platform, attention, hf_config, max_model_len, model, tp,
                                              str(source.path), pp)
    capacity = num_blocks * config.block_size
    if capacity < max_model_len:
        if lead:
            logger.warning("The KV cache holds %d tokens; max_model_len lowered from %d to fit", capacity, max_model_len)
        max_model_len = capacity
    return ModelShard(dtype, max_model_len, attention, attention_name, quant_name, model, kv_caches, num_blocks, pp)


def stage_layers_of(config: EngineConfig, hf_config, pp: PipelineParallel) -> PipelineParallel:
    """``pp`` with its decoder layers (``config.pp_layer_partition``, else an even split)."""
    if pp.size == 1:
        return pp
    start, end = pipeline_stages(hf_config, pp.size, config.pp_layer_partition)[pp.rank]
    return dataclasses.replace(pp, start_layer=start, end_layer=end)


def model_class(hf_config) -> type[CausalLM]:
    architectures = getattr(hf_config, "architectures", None) or []
    if not architectures:
        raise ModelLoadError("config.json names no 'architectures'; add e.g. \"architectures\": [\"LlamaForCausalLM\"]")
    registry = get_plugin_manager().registry("model")
    for arch in architectures:
        if arch in registry:
            return registry.get(arch)
    return registry.get(architectures[0])  # raises: names the available ones and the register_models hook


def allocate_kv_cache(config, platform, attention, hf_config, max_model_len, model=None, tp: TensorParallel = SINGLE,
                      model_path: str | None = None, pp: PipelineParallel = WHOLE):
    """Size the cache from the platform's budget (capped at what max_num_seqs full sequences use);
    returns the per-layer cache tensors and the number of blocks. A pipeline stage holds caches for its
    own layers only (the other layers' entries are empty tensors of zero blocks).

    The budget leaves room for the activations of the largest step, measured with ``model`` (and for a
    vision-language model, its encoder on the largest images, read through ``model_path``'s processor).
    All ranks agree on the smallest block count (the scheduler hands out block ids for every stage).
    """
    layers = num_kv_cache_layers(hf_config)
    own = pp.layers(layers)
    cache_dtype = attention.spec.cache_dtype  # an FP8 cache holds twice the tokens of a 16-bit one
    per_block = len(own) * math.prod(attention.kv_cache_shape(1)) * torch.tensor([], dtype=cache_dtype).element_size()
    activation_bytes = 0
    if model is not None and config.kv_cache_memory is None:
        budget_tokens = step_token_budget(config, max_model_len)
        encoder = (encoder_profile(config, model, model_path, hf_config, budget_tokens, max_model_len)
                   if model_path else None)
        activation_bytes = profile_activation_bytes(model, attention, platform, budget_tokens, config.max_num_seqs,
                                                    config.block_size, layers, max_model_len, encoder, pp)
    budget = platform.kv_cache_bytes(config.kv_cache_memory, config.gpu_memory_utilization, activation_bytes)
    useful = config.max_num_seqs * -(-max_model_len // config.block_size)
    if config.runner == "pooling":  # blocks are one step's scratch: the largest step's worth suffices
        step_tokens = step_token_budget(config, max_model_len)
        useful = min(useful, -(-step_tokens // config.block_size) + config.max_num_seqs)
    num_blocks = pp.min_int(tp.min_int(min(budget // per_block, useful), platform.device()), platform.device())
    if num_blocks < 1:
        raise ValueError(
            f"the KV cache budget ({budget} bytes) holds no block of {per_block} bytes; "
            "raise kv_cache_memory / --gpu-memory-utilization"
        )
    kv_caches = [platform.kv_cache_tensor(attention.kv_cache_shape(num_blocks if i in own else 0), cache_dtype)
                 for i in range(layers)]
    return kv_caches, num_blocks
