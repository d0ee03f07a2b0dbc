"""The engine core's parts, built from an EngineConfig: platform, model shard, KV cache manager,
tokenizer and scheduler, plus the worker ranks under tensor parallelism.

Every rank builds its :class:`~pagoda.runner.shard.ModelShard` alike; the driver (rank 0) also
builds the tokenizer and the scheduler.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch

from pagoda.config import EngineConfig, step_token_budget
from pagoda.interfaces import AttentionBackend, CausalLM, Platform, Scheduler, SchedulerConfig
from pagoda.interfaces.parallel import SINGLE, TensorParallel
from pagoda.kv_cache.manager import KVCacheManager
from pagoda.loader import ModelSource, load_hf_config, load_tokenizer, resolve_model
from pagoda.models.spec import check_tensor_parallel
from pagoda.plugins import get_plugin_manager
from pagoda.pooling.config import PoolerConfig, configure_runner
from pagoda.runner.shard import build_model_shard, model_class, select_platform
from pagoda.spec_decode.engine import check_proposer_tensor_parallel

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
    workers: object = None  # pagoda.executor.workers.WorkerGroup of the other ranks (tensor_parallel_size > 1)
    pooler_config: PoolerConfig | None = None  # runner "pooling": how hidden states are pooled (docs/pooling.md)


def build_engine_parts(config: EngineConfig) -> EngineParts:
    """Everything heavy happens here, in order: config -> platform -> (ranks) -> backends -> weights -> cache."""
    platform = select_platform(config)
    source = resolve_model(config.model)
    hf_config = load_hf_config(source)
    config, pooler = configure_runner(config, model_class(hf_config), hf_config, source.path)
    workers = None
    if config.tensor_parallel_size > 1:
        from pagoda.executor.workers import start_workers

        check_tensor_parallel(hf_config, config.tensor_parallel_size)  # before any process starts
        check_proposer_tensor_parallel(config)
        workers = start_workers(config, platform)
    try:
        parts = _build_driver_parts(config, platform, source, hf_config, workers)
        parts.pooler_config = pooler
        return parts
    except BaseException:
        if workers is not None:
            workers.shutdown()
        raise


def _build_driver_parts(config, platform, source, hf_config, workers) -> EngineParts:
    tp = workers.tp if workers is not None else SINGLE
    tokenizer = None if config.skip_tokenizer_init else load_tokenizer(source, config.tokenizer)
    shard = build_model_shard(config, platform, source, hf_config, tp)
    kv_cache = KVCacheManager(shard.num_blocks, config.block_size, enable_prefix_caching=config.enable_prefix_caching)
    tp_note = f" | tensor parallel {tp.size} ranks" if tp.size > 1 else ""
    logger.info(
        "Pagoda engine: platform %s | attention %s | quantization %s | dtype %s | KV cache %d blocks x %d = %d tokens"
        " | max_model_len %d%s", platform.describe(), shard.attention_name, shard.quant_name,
        str(shard.dtype).removeprefix("torch."), kv_cache.num_blocks, config.block_size,
        kv_cache.num_blocks * config.block_size, shard.max_model_len, tp_note,
    )
    scheduler_cls = get_plugin_manager().registry("scheduler").get(config.scheduler)
    scheduler = scheduler_cls(_scheduler_config(config, shard.max_model_len), kv_cache)
    return EngineParts(config, platform, source, hf_config, tokenizer, shard.dtype, shard.max_model_len,
                       shard.attention, shard.model, shard.kv_caches, kv_cache, scheduler, tp, workers)


def _scheduler_config(config: EngineConfig, max_model_len: int) -> SchedulerConfig:
    return SchedulerConfig(
        max_num_seqs=config.max_num_seqs,
        max_num_batched_tokens=step_token_budget(config, max_model_len),
        max_model_len=max_model_len,
        enable_chunked_prefill=config.enable_chunked_prefill,
    )
