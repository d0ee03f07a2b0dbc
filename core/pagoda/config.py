"""Engine configuration: one dataclass, validated once, mirrored by the CLI flags and ``LLM(...)``."""

from __future__ import annotations

import os
from dataclasses import dataclass, fields

from pagoda.kv_transfer_config import engine_kv_transfer
from pagoda.speculative_config import parse_speculative_config

DTYPES = ("auto", "float32", "float16", "bfloat16")
LOAD_FORMATS = ("auto", "safetensors", "gguf", "dummy")
KV_CACHE_DTYPES = ("auto", "fp8", "fp8_e4m3", "fp8_e5m2")  # auto: the model dtype
# mp: spawn one worker process per extra rank on this host; torchrun: the ranks were started by
# torchrun (one host or several), rank 0 runs the engine; ray: the ranks are actors of a Ray cluster
# (one host or several); auto: torchrun when its variables are set, else mp
EXECUTOR_BACKENDS = ("auto", "mp", "torchrun", "ray")
RUNNERS = ("auto", "generate", "pooling")  # pooling: embeddings/scores, no generation (docs/pooling.md)
MODALITIES = ("image",)  # what limit_mm_per_prompt may limit
DEFAULT_MAX_IMAGE_BYTES = 20 << 20  # 20 MiB, OpenAI's limit per image
DEFAULT_MAX_IMAGE_PIXELS = 50_000_000  # a 48-megapixel photo fits; a decompression bomb does not
MIN_ENCODER_CACHE_ROWS = 8192
# the scheduler's latency limits on prefills (docs/performance.md#tuning-for-inter-token-latency), passed on as is
PREFILL_LIMITS = ("max_num_partial_prefills", "max_long_partial_prefills", "long_prefill_token_threshold",
                  "max_prefill_tokens_while_decoding")


@dataclass
class EngineConfig:
    """Everything needed to build an engine. Field names match vLLM's ``LLM``/``vllm serve``."""

    model: str | None = None  # a local HF folder, a .gguf file, or None for the embedded default
    tokenizer: str | None = None  # defaults to the model's
    skip_tokenizer_init: bool = False  # no tokenizer: prompts are token ids, outputs have no text
    dtype: str = "auto"
    seed: int = 0
    max_model_len: int | None = None  # defaults to the model's max_position_embeddings
    max_num_seqs: int = 256
    max_num_batched_tokens: int | None = None  # defaults to max(8192, max_model_len) capped below
    block_size: int = 16
    enable_prefix_caching: bool = True
    enable_chunked_prefill: bool = True
    max_num_partial_prefills: int = 1  # prompts split over several steps at once
    max_long_partial_prefills: int = 1  # of them, prompts with more than long_prefill_token_threshold tokens
    long_prefill_token_threshold: int = 0  # 0: off; a longer prompt computes at most this many tokens a step
    max_prefill_tokens_while_decoding: int = 0  # 0: off; prompt tokens a step that runs decodes takes at most
    attention_backend: str = "auto"
    quantization: str | None = None
    kv_cache_dtype: str = "auto"  # "auto" (the model dtype) or an FP8 type the attention backend must support
    calculate_kv_scales: bool = False  # an FP8 KV cache's scales from the first step's keys/values (docs/kv_cache_fp8.md)
    load_format: str = "auto"
    kv_cache_memory: int | None = None  # bytes for the KV cache; overrides gpu_memory_utilization
    gpu_memory_utilization: float = 0.9
    enforce_eager: bool = False
    scheduler: str = "fcfs"
    platform: str = "auto"
    overlap_steps: bool | None = None  # schedule step N+1 while step N runs (engine_core/core.py); None: the platform's default
    tensor_parallel_size: int = 1  # ranks that split each layer (docs/distributed.md)
    pipeline_parallel_size: int = 1  # stages that split the layers, each tensor_parallel_size ranks (docs/distributed.md)
    pp_layer_partition: list[int] | str | None = None  # layers per stage, e.g. [10, 6] or "10,6"; None: an even split
    data_parallel_size: int = 1  # engine cores, each with its own ranks and devices (docs/distributed.md)
    data_parallel_rank: int | None = None  # this engine is replica k of data_parallel_size (its devices: the k-th group)
    distributed_executor_backend: str = "auto"  # how the ranks start: see EXECUTOR_BACKENDS
    disable_custom_all_reduce: bool = False  # tensor-parallel sums over the backend (NCCL) alone, as in vLLM
    guided_decoding_backend: str = "auto"  # grammar engine of requests that set guided_decoding (docs/structured_output.md)
    runner: str = "auto"  # generate | pooling | auto (pooling for encoder-only models; docs/pooling.md)
    speculative_config: str | dict | None = None  # vLLM's JSON, e.g. {"method": "ngram", "num_speculative_tokens": 4}
    enable_lora: bool = False  # requests may name LoRA adapters (docs/lora.md)
    max_loras: int = 1  # adapters in one step (device slots)
    max_lora_rank: int = 16  # the largest adapter rank served
    max_cpu_loras: int | None = None  # adapters kept in host memory (default: max_loras)
    # images of vision-language models (docs/multimodal.md)
    limit_mm_per_prompt: dict[str, int] | None = None  # most images one prompt may carry, e.g. {"image": 2}; None: no limit
    allowed_local_media_path: str | None = None  # file:// image URLs are read from under this folder only
    allow_remote_media: bool = False  # fetch http(s):// image URLs
    max_image_bytes: int = DEFAULT_MAX_IMAGE_BYTES  # an image's encoded size (data:, file:// or http(s):// URL)
    max_image_pixels: int = DEFAULT_MAX_IMAGE_PIXELS  # width x height of a decoded image
    media_fetch_timeout: float = 10.0  # seconds to fetch one http(s):// image
    # KV cache beyond the device (docs/kv_offload.md): a host-memory tier of this many GiB, a disk tier under it,
    # or any KV connector by vLLM's JSON, e.g. {"kv_connector": "shared_storage", "kv_role": "kv_producer"}
    kv_offload_gib: float = 0.0
    kv_offload_dir: str | None = None
    kv_transfer_config: str | dict | None = None

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raise ValueError naming the field, the value and what is allowed."""
        _require(self.dtype in DTYPES, "dtype", self.dtype, f"one of {', '.join(DTYPES)}")
        _require(self.kv_cache_dtype in KV_CACHE_DTYPES, "kv_cache_dtype", self.kv_cache_dtype,
                 f"one of {', '.join(KV_CACHE_DTYPES)}")
        if self.calculate_kv_scales and self.kv_cache_dtype == "auto":
            raise ValueError("calculate_kv_scales calibrates the scales of an FP8 KV cache; set kv_cache_dtype='fp8' "
                             "(--kv-cache-dtype fp8) too, or drop it")
        _require(self.load_format in LOAD_FORMATS, "load_format", self.load_format, f"one of {', '.join(LOAD_FORMATS)}")
        _require(_is_pow2(self.block_size) and 1 <= self.block_size <= 256, "block_size", self.block_size, "a power of two in [1, 256]")
        _require(self.max_num_seqs >= 1, "max_num_seqs", self.max_num_seqs, ">= 1")
        _require(self.max_model_len is None or self.max_model_len >= 1, "max_model_len", self.max_model_len, ">= 1")
        _require(
            self.max_num_batched_tokens is None or self.max_num_batched_tokens >= 1,
            "max_num_batched_tokens", self.max_num_batched_tokens, ">= 1",
        )
        _require(0 < self.gpu_memory_utilization <= 1, "gpu_memory_utilization", self.gpu_memory_utilization, "in (0, 1]")
        parse_speculative_config(self.speculative_config)  # ConfigError naming what is wrong
        _require(self.kv_cache_memory is None or self.kv_cache_memory > 0, "kv_cache_memory", self.kv_cache_memory, "> 0 bytes")
        _require(isinstance(self.seed, int), "seed", self.seed, "an integer")
        _require(isinstance(self.tensor_parallel_size, int) and self.tensor_parallel_size >= 1,
                 "tensor_parallel_size", self.tensor_parallel_size, "an integer >= 1")
        _require(self.runner in RUNNERS, "runner", self.runner, f"one of {', '.join(RUNNERS)}")
        _require(isinstance(self.disable_custom_all_reduce, bool), "disable_custom_all_reduce",
                 self.disable_custom_all_reduce, "True or False")
        _require(self.distributed_executor_backend in EXECUTOR_BACKENDS, "distributed_executor_backend",
                 self.distributed_executor_backend, f"one of {', '.join(EXECUTOR_BACKENDS)}")
        self._validate_prefill_limits()
        self._validate_parallel()
        self._validate_lora()
        self._validate_media()
        self._validate_kv_transfer()

    def _validate_prefill_limits(self) -> None:
        for name in ("max_num_partial_prefills", "max_long_partial_prefills"):
            value = getattr(self, name)
            _require(isinstance(value, int) and value >= 1, name, value, "an integer >= 1")
        for name in ("long_prefill_token_threshold", "max_prefill_tokens_while_decoding"):
            value = getattr(self, name)
            _require(isinstance(value, int) and value >= 0, name, value, "an integer >= 0 (0: off)")
        if self.max_long_partial_prefills > self.max_num_partial_prefills:
            raise ValueError(f"max_long_partial_prefills ({self.max_long_partial_prefills}) counts prompts among "
                             f"max_num_partial_prefills ({self.max_num_partial_prefills}); make it no larger")
        cutting = [n for n in ("long_prefill_token_threshold", "max_prefill_tokens_while_decoding") if getattr(self, n)]
        if cutting and not self.enable_chunked_prefill:
            raise ValueError(f"{' and '.join(cutting)} cut prompts into chunks, which needs chunked prefill; "
                             "keep enable_chunked_prefill on or set them to 0")

    def _validate_parallel(self) -> None:
        for name in ("pipeline_parallel_size", "data_parallel_size"):
            value = getattr(self, name)
            _require(isinstance(value, int) and value >= 1, name, value, "an integer >= 1")
        self.pp_layer_partition = _layer_counts(self.pp_layer_partition)
        if self.pp_layer_partition is not None and len(self.pp_layer_partition) != self.pipeline_parallel_size:
            raise ValueError(f"pp_layer_partition gives {len(self.pp_layer_partition)} stages but "
                             f"pipeline_parallel_size is {self.pipeline_parallel_size}; give one layer count per stage")
        rank = self.data_parallel_rank
        _require(rank is None or (isinstance(rank, int) and 0 <= rank < self.data_parallel_size), "data_parallel_rank",
                 rank, f"None or an integer in [0, data_parallel_size) = [0, {self.data_parallel_size})")

    @property
    def world_size(self) -> int:
        """The ranks of one engine core: pipeline stages x tensor-parallel ranks."""
        return self.pipeline_parallel_size * self.tensor_parallel_size

    def _validate_lora(self) -> None:
        _require(isinstance(self.max_loras, int) and self.max_loras >= 1, "max_loras", self.max_loras, "an integer >= 1")
        _require(isinstance(self.max_lora_rank, int) and 1 <= self.max_lora_rank <= 512, "max_lora_rank",
                 self.max_lora_rank, "an integer in [1, 512]")
        _require(self.max_cpu_loras is None or (isinstance(self.max_cpu_loras, int) and self.max_cpu_loras >= self.max_loras),
                 "max_cpu_loras", self.max_cpu_loras, f"None or an integer >= max_loras ({self.max_loras})")
        if self.enable_lora and self.runner == "pooling":
            raise ValueError("enable_lora serves generative models; pooling (runner 'pooling') takes no adapters")

    def _validate_media(self) -> None:
        limits = self.limit_mm_per_prompt
        _require(limits is None or (isinstance(limits, dict) and all(isinstance(v, int) and v >= 0
                                                                    for v in limits.values())),
                 "limit_mm_per_prompt", limits, 'None or a dict of counts >= 0, e.g. {"image": 2}')
        unknown = sorted(set(limits or ()) - set(MODALITIES))
        if unknown:
            raise ValueError(f"limit_mm_per_prompt limits {', '.join(MODALITIES)} only; got {', '.join(unknown)}")
        folder = self.allowed_local_media_path
        _require(folder is None or os.path.isdir(folder), "allowed_local_media_path", folder, "an existing folder")
        _require(isinstance(self.max_image_bytes, int) and self.max_image_bytes > 0, "max_image_bytes",
                 self.max_image_bytes, "> 0 bytes")
        _require(isinstance(self.max_image_pixels, int) and self.max_image_pixels > 0, "max_image_pixels",
                 self.max_image_pixels, "> 0 pixels")
        _require(self.media_fetch_timeout > 0, "media_fetch_timeout", self.media_fetch_timeout, "> 0 seconds")

    def _validate_kv_transfer(self) -> None:
        connector = engine_kv_transfer(self.kv_transfer_config, self.kv_offload_gib, self.kv_offload_dir)  # ConfigError
        if connector is None:
            return
        if not self.enable_prefix_caching:
            raise ValueError(f"the KV connector '{connector.kv_connector}' finds blocks by their prefix-cache hashes; "
                             "drop --no-enable-prefix-caching")
        if self.runner == "pooling":
            raise ValueError("KV connectors serve generative models; pooling (runner 'pooling') keeps no KV cache")
        if self.pipeline_parallel_size > 1:
            raise ValueError("KV connectors do not run under pipeline parallelism yet; use pipeline_parallel_size 1 "
                             "(tensor parallelism works)")
        if self.calculate_kv_scales:
            raise ValueError("--calculate-kv-scales sets an FP8 cache's scales per run, so stored FP8 blocks of one run "
                             "would be read with another run's scales; give the scales in the checkpoint (k_scale, "
                             "v_scale) or drop --calculate-kv-scales with a KV connector")

    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in fields(cls)]


def step_token_budget(config: EngineConfig, max_model_len: int) -> int:
    """The most tokens one step schedules (``--max-num-batched-tokens`` or its default)."""
    budget = config.max_num_batched_tokens or max(8192, config.max_num_seqs)
    return budget if config.enable_chunked_prefill else max(budget, max_model_len)


def encoder_cache_rows(config: EngineConfig) -> int:
    """The budget of a vision-language model's encoder cache, in rows (image tokens): a step's worth of
    tokens, at least 8192 (a few large images; docs/multimodal.md)."""
    return max(config.max_num_batched_tokens or 0, MIN_ENCODER_CACHE_ROWS)


def _layer_counts(value: list[int] | str | None) -> list[int] | None:
    """``pp_layer_partition`` as a list of layer counts ("10,6" -> [10, 6]); ValueError for anything else."""
    if value is None:
        return None
    try:
        counts = [int(x) for x in value.split(",")] if isinstance(value, str) else [int(x) for x in value]
    except (TypeError, ValueError):
        counts = []
    _require(bool(counts) and min(counts) >= 1, "pp_layer_partition", value,
             'layer counts >= 1, one per pipeline stage, e.g. "10,6" or [10, 6]')
    return counts


def _is_pow2(n: int) -> bool:
    return isinstance(n, int) and n > 0 and n & (n - 1) == 0


def _require(ok: bool, name: str, value: object, allowed: str) -> None:
    if not ok:
        raise ValueError(f"{name} must be {allowed}, got {value!r}")
