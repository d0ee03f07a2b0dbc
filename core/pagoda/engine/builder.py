"""Build an engine's parts from an EngineConfig: platform, model, attention, KV cache, scheduler.

Under tensor parallelism every rank builds a :class:`ModelShard` (its part of the model, its KV
cache) with :func:`build_model_shard`, in the same order (loading, profiling and cache sizing
run collectives); rank 0, the driver, also builds the tokenizer and the scheduler.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from dataclasses import dataclass

import torch

from pagoda.config import EngineConfig
from pagoda.distributed.parallel import SINGLE, TensorParallel
from pagoda.engine.kv_cache import KVCacheManager
from pagoda.engine.profiling import profile_activation_bytes
from pagoda.errors import IncompatibleChoiceError, ModelLoadError
from pagoda.interfaces import AttentionBackend, BuildContext, CausalLM, Platform, Scheduler, SchedulerConfig
from pagoda.loader import ModelSource, load_hf_config, load_model, load_tokenizer, resolve_model
from pagoda.models.spec import attention_spec, check_tensor_parallel, num_kv_cache_layers
from pagoda.plugins import get_plugin_manager
from pagoda.pooling.config import PoolerConfig, configure_runner
from pagoda.quantization.select import resolve_quantization
from pagoda.spec_decode.engine import check_proposer_tensor_parallel

logger = logging.getLogger("pagoda")

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


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


@dataclass
class ModelShard:
    """What each tensor-parallel rank builds: its part of the model and its KV cache."""

    dtype: torch.dtype
    max_model_len: int
    attention: AttentionBackend
    attention_name: str
    quant_name: str
    model: CausalLM
    kv_caches: list[torch.Tensor]
    num_blocks: int


def select_platform(config: EngineConfig) -> Platform:
    _, cls = get_plugin_manager().registry("platform").select(config.platform)
    return cls()


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


def build_engine_parts(config: EngineConfig) -> EngineParts:
    """Everything heavy happens here, in order: config -> platform -> (ranks) -> backends -> weights -> cache."""
    platform = select_platform(config)
    source = resolve_model(config.model)
    hf_config = load_hf_config(source)
    config, pooler = configure_runner(config, _model_class(hf_config), hf_config, source.path)
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


def build_model_shard(config: EngineConfig, platform: Platform, source: ModelSource, hf_config,
                      tp: TensorParallel = SINGLE) -> ModelShard:
    """Attention backend, quantization method, this rank's weights and KV cache (every rank runs this)."""
    plugins = get_plugin_manager()
    dtype = resolve_dtype(config, hf_config, platform)
    max_model_len = resolve_max_model_len(config, hf_config)
    model_cls = _model_class(hf_config)
    spec = attention_spec(hf_config, config.block_size, dtype, tp.size)
    if not getattr(model_cls, "causal_attention", True):  # encoder models attend bidirectionally
        spec = dataclasses.replace(spec, causal=False)
    attention_name, backend_cls = plugins.registry("attention").select(config.attention_backend, platform=platform, spec=spec)
    _check_kv_cache_dtype(config.kv_cache_dtype, attention_name, backend_cls)
    attention = backend_cls(spec, platform)
    quant_name, quant_cls = plugins.registry("quantization").select(
        resolve_quantization(config.quantization, hf_config), platform=platform)
    quant = quant_cls(getattr(hf_config, "quantization_config", None))
    ctx = BuildContext(dtype=dtype, quant_method=quant, ops=platform.custom_ops(), attention=attention, tp=tp)
    quant.bind_ops(ctx.ops)
    model = load_model(source, hf_config, ctx, model_cls, config.load_format, platform.device(), progress=tp.rank == 0)
    tuned = ctx.ops.tune(model, tp)
    if tuned and tp.rank == 0:
        logger.info("%s", tuned)
    kv_caches, num_blocks = allocate_kv_cache(config, platform, attention, hf_config, max_model_len, model, tp)
    capacity = num_blocks * config.block_size
    if capacity < max_model_len:
        if tp.rank == 0:
            logger.warning("The KV cache holds %d tokens; max_model_len lowered from %d to fit", capacity, max_model_len)
        max_model_len = capacity
    return ModelShard(dtype, max_model_len, attention, attention_name, quant_name, model, kv_caches, num_blocks)


def _check_kv_cache_dtype(kv_cache_dtype: str, name: str, backend_cls: type[AttentionBackend]) -> None:
    if kv_cache_dtype not in backend_cls.kv_cache_dtypes:
        raise IncompatibleChoiceError(
            f"the attention backend {name} does not support an {kv_cache_dtype} KV cache (it stores: "
            f"{', '.join(backend_cls.kv_cache_dtypes)}); leave --kv-cache-dtype at auto"
        )


def _model_class(hf_config) -> type[CausalLM]:
    architectures = getattr(hf_config, "architectures", None) or []
    if not architectures:
        raise ModelLoadError("config.json names no 'architectures'; add e.g. \"architectures\": [\"LlamaForCausalLM\"]")
    registry = get_plugin_manager().registry("model")
    for arch in architectures:
        if arch in registry:
            return registry.get(arch)
    return registry.get(architectures[0])  # raises: names the available ones and the register_models hook


def step_token_budget(config: EngineConfig, max_model_len: int) -> int:
    """The most tokens one step schedules (``--max-num-batched-tokens`` or its default)."""
    budget = config.max_num_batched_tokens or max(8192, config.max_num_seqs)
    return budget if config.enable_chunked_prefill else max(budget, max_model_len)


def _scheduler_config(config: EngineConfig, max_model_len: int) -> SchedulerConfig:
    return SchedulerConfig(
        max_num_seqs=config.max_num_seqs,
        max_num_batched_tokens=step_token_budget(config, max_model_len),
        max_model_len=max_model_len,
        enable_chunked_prefill=config.enable_chunked_prefill,
    )


def allocate_kv_cache(config, platform, attention, hf_config, max_model_len, model=None, tp: TensorParallel = SINGLE):
    """Size the cache from the platform's budget (capped at what max_num_seqs full sequences use);
    returns the per-layer cache tensors and the number of blocks.

    The budget leaves room for the activations of the largest step, measured with ``model``.
    Tensor-parallel ranks agree on the smallest block count (the scheduler hands out block ids).
    """
    layers = num_kv_cache_layers(hf_config)
    per_block = layers * math.prod(attention.kv_cache_shape(1)) * torch.tensor([], dtype=attention.spec.dtype).element_size()
    activation_bytes = 0
    if model is not None and config.kv_cache_memory is None:
        budget_tokens = _scheduler_config(config, max_model_len).max_num_batched_tokens
        activation_bytes = profile_activation_bytes(model, attention, platform, budget_tokens, config.max_num_seqs,
                                                    config.block_size, layers, max_model_len)
    budget = platform.kv_cache_bytes(config.kv_cache_memory, config.gpu_memory_utilization, activation_bytes)
    useful = config.max_num_seqs * -(-max_model_len // config.block_size)
    if config.runner == "pooling":  # blocks are one step's scratch: the largest step's worth suffices
        step_tokens = _scheduler_config(config, max_model_len).max_num_batched_tokens
        useful = min(useful, -(-step_tokens // config.block_size) + config.max_num_seqs)
    num_blocks = tp.min_int(min(budget // per_block, useful), platform.device())
    if num_blocks < 1:
        raise ValueError(
            f"the KV cache budget ({budget} bytes) holds no block of {per_block} bytes; "
            "raise kv_cache_memory / --gpu-memory-utilization"
        )
    device = platform.device()
    kv_caches = [torch.zeros(attention.kv_cache_shape(num_blocks), dtype=attention.spec.dtype, device=device) for _ in range(layers)]
    return kv_caches, num_blocks
