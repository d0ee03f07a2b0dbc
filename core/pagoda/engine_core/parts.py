"""The engine core's parts, built from an EngineConfig: platform, model shard, KV cache manager,
tokenizer and scheduler, plus the worker ranks under tensor and pipeline parallelism.

Every rank builds its :class:`~pagoda.runner.shard.ModelShard` alike; the driver (rank 0) also
builds the tokenizer and the scheduler (under pipeline parallelism one per micro-batch in flight:
:class:`~pagoda.scheduler.virtual_engines.VirtualEngines`).
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass

import torch

from pagoda.config import PREFILL_LIMITS, EngineConfig, step_token_budget
from pagoda.errors import ConfigError, PagodaError
from pagoda.interfaces import AttentionBackend, CausalLM, Platform, Scheduler, SchedulerConfig
from pagoda.interfaces.parallel import SINGLE, WHOLE, PipelineParallel, TensorParallel
from pagoda.kv_cache.manager import KVCacheManager
from pagoda.loader import ModelSource, load_hf_config, load_tokenizer, resolve_model
from pagoda.models.spec import check_tensor_parallel, pipeline_stages
from pagoda.plugins import get_plugin_manager
from pagoda.pooling.config import PoolerConfig, configure_runner
from pagoda.runner.shard import build_model_shard, model_class, select_platform
from pagoda.scheduler.virtual_engines import VirtualEngines
from pagoda.spec_decode.engine import check_proposer_tensor_parallel
from pagoda.speculative_config import parse_speculative_config

logger = logging.getLogger("pagoda")


@dataclass
class EngineParts:
    config: EngineConfig
    platform: Platform
    source: ModelSource
    hf_config: object
    tokenizer: object
    dtype: torch.dtype
    max_model_len: int
    attention: AttentionBackend
    model: CausalLM
    kv_caches: list[torch.Tensor]
    kv_cache: KVCacheManager
    scheduler: Scheduler
    tp: TensorParallel = SINGLE
    workers: object = None  # pagoda.executor.workers.WorkerGroup of the other ranks (world_size > 1)
    pooler_config: PoolerConfig | None = None  # runner "pooling": how hidden states are pooled (docs/pooling.md)
    pp: PipelineParallel = WHOLE  # the driver's pipeline stage (the first), with its layers


def build_engine_parts(config: EngineConfig) -> EngineParts:
    """Everything heavy happens here, in order: config -> platform -> (ranks) -> backends -> weights -> cache."""
    platform = select_platform(config)
    source = resolve_model(config.model)
    hf_config = load_hf_config(source)
    config, pooler = configure_runner(config, model_class(hf_config), hf_config, source.path)
    workers = None
    if config.world_size > 1:
        from pagoda.executor.workers import start_workers

        check_tensor_parallel(hf_config, config.tensor_parallel_size)  # before any process starts
        check_proposer_tensor_parallel(config)
        check_pipeline_parallel(config, hf_config, model_class(hf_config))
        workers = start_workers(config, platform)
    elif config.data_parallel_rank:  # one rank: this replica's device
        from pagoda.executor.workers import device_offset

        device = device_offset(config)
        if device >= platform.device_count():
            raise ValueError(f"data-parallel replica {config.data_parallel_rank} runs on {platform.device_type} device "
                             f"{device}, but this host has {platform.device_count()}; lower data_parallel_size")
        platform.set_device(device)
    try:
        parts = _build_driver_parts(config, platform, source, hf_config, workers)
        parts.pooler_config = pooler
        return parts
    except BaseException:
        if workers is not None:
            workers.shutdown()
        raise


def _build_driver_parts(config, platform, source, hf_config, workers) -> EngineParts:
    tp, pp = (workers.tp, workers.pp) if workers is not None else (SINGLE, WHOLE)
    tokenizer = None if config.skip_tokenizer_init else load_tokenizer(source, config.tokenizer)
    shard = build_model_shard(config, platform, source, hf_config, tp, pp)
    kv_cache = KVCacheManager(shard.num_blocks, config.block_size, enable_prefix_caching=config.enable_prefix_caching)
    schedulers = get_plugin_manager().registry("scheduler")
    scheduler_name, _ = schedulers.select(config.scheduler)
    scheduler_config = _scheduler_config(config, shard.max_model_len)
    if pp.size == 1:
        scheduler = schedulers.create(scheduler_name, scheduler_config, kv_cache)
    else:  # one scheduler per micro-batch in flight, sharing the seats and the KV cache
        seats = -(-config.max_num_seqs // pp.size)
        scheduler = VirtualEngines([schedulers.create(scheduler_name, dataclasses.replace(scheduler_config,
                                                                                          max_num_seqs=seats), kv_cache)
                                    for _ in range(pp.size)])
    logger.info("Pagoda engine: %s", startup_line(config, platform, shard, scheduler_name, kv_cache.num_blocks, tp))
    parts = EngineParts(config, platform, source, hf_config, tokenizer, shard.dtype, shard.max_model_len,
                        shard.attention, shard.model, shard.kv_caches, kv_cache, scheduler, tp, workers)
    parts.pp = shard.pp
    return parts


def check_pipeline_parallel(config: EngineConfig, hf_config, model_cls: type) -> None:
    """ValueError or ConfigError, before any process starts, unless the model and the engine's other choices run
    in ``pipeline_parallel_size`` stages."""
    pp = config.pipeline_parallel_size
    if pp == 1:
        return
    if not getattr(model_cls, "supports_pipeline_parallel", False):
        raise ConfigError(f"{model_cls.__name__} does not run under pipeline parallelism (pipeline_parallel_size "
                          f"{pp}); the families built on the Llama decoder do (Llama, Mistral, Mixtral, Qwen2, Qwen3, "
                          "Qwen3-MoE, Phi-3, DeepSeek-V2/V3); use tensor_parallel_size to split this one")
    pipeline_stages(hf_config, pp, config.pp_layer_partition)  # names the sizes that do not fit
    if config.speculative_config is not None:
        raise ConfigError("speculative decoding (speculative_config) does not run under pipeline parallelism yet; "
                          "drop it, or use pipeline_parallel_size 1")


def startup_line(config: EngineConfig, platform: Platform, shard, scheduler: str, num_blocks: int,
                 tp: TensorParallel = SINGLE) -> str:
    """Every choice the engine made: platform, attention, quantization, scheduler, proposer (when
    speculating), guided decoding backend, then sizes. A choice provided by a plugin names its
    distribution, and one that replaces another's name (--allow-plugin-overrides) says so."""
    plugins = get_plugin_manager()
    platform_name = next((e.name for e in plugins.registry("platform").entries() if e.obj is type(platform)), None)
    platform_source = plugins.registry("platform").describe(platform_name).removeprefix(platform_name or "")
    parts = [f"platform {platform.describe()}{platform_source}",
             f"attention {plugins.registry('attention').describe(shard.attention_name)}",
             f"quantization {plugins.registry('quantization').describe(shard.quant_name)}",
             f"scheduler {plugins.registry('scheduler').describe(scheduler)}"]
    spec = parse_speculative_config(config.speculative_config)
    if spec is not None:
        parts.append(f"proposer {plugins.registry('proposer').describe(spec.method)} (k={spec.num_speculative_tokens})")
    parts.append(f"guided decoding {_guided_backend(config.guided_decoding_backend)}")
    parts.append(f"dtype {str(shard.dtype).removeprefix('torch.')}")
    parts.append(f"KV cache {num_blocks} blocks x {config.block_size} = {num_blocks * config.block_size} tokens")
    parts.append(f"max_model_len {shard.max_model_len}")
    parts.append(f"max_num_seqs {config.max_num_seqs}")
    parts.append(f"max_num_batched_tokens {step_token_budget(config, shard.max_model_len)}")
    if tp.size > 1:
        parts.append(f"tensor parallel {tp.size} ranks")
    if shard.pp.size > 1:
        parts.append(f"pipeline parallel {shard.pp.size} stages ({_stage_layers(config, shard)})")
    return " | ".join(parts)


def _stage_layers(config: EngineConfig, shard) -> str:
    stages = pipeline_stages(shard.model.config, shard.pp.size, config.pp_layer_partition)
    return ", ".join(f"layers {start}-{end - 1}" for start, end in stages)


def _guided_backend(name: str) -> str:
    """The grammar engine guided requests get by default (chosen now, as the first such request will)."""
    registry = get_plugin_manager().registry("guided_decoding")
    try:
        return registry.describe(registry.select(name)[0])
    except PagodaError as exc:  # guided requests will be refused with this reason; the rest runs
        return f"none usable ({exc})"


def _scheduler_config(config: EngineConfig, max_model_len: int) -> SchedulerConfig:
    return SchedulerConfig(
        max_num_seqs=config.max_num_seqs,
        max_num_batched_tokens=step_token_budget(config, max_model_len),
        max_model_len=max_model_len,
        enable_chunked_prefill=config.enable_chunked_prefill,
        **{name: getattr(config, name) for name in PREFILL_LIMITS},
    )
