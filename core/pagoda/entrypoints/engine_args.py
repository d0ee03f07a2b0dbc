"""Engine flags shared by `serve`, `generate`, `chat` and `bench`: one place, mirroring EngineConfig."""

from __future__ import annotations

import argparse

from pagoda.config import (DTYPES, EXECUTOR_BACKENDS, KV_CACHE_DTYPES, LOAD_FORMATS, PREFILL_LIMITS, RUNNERS,
                           EngineConfig)
from pagoda.entrypoints.kv_transfer_args import add_kv_transfer_args, kv_transfer_settings
from pagoda.entrypoints.multimodal_args import add_multimodal_args, multimodal_settings
from pagoda.plugins.manager import PluginManager
from pagoda.plugins.registry import AUTO

DEFAULT_MODEL_HELP = "a local HF model folder or .gguf file (default: the embedded smollm2-135m-instruct)"


class RegistryName:
    """An argparse ``type``: a name registered for the kind ``key`` (or ``auto`` where the kind has
    it); any other value fails the flag with the registry's own message: the names that exist, the
    closest one, and which plugin distribution to install for a first-party name."""

    def __init__(self, manager: PluginManager, key: str) -> None:
        self.registry = manager.registry(key)
        self.extra = (AUTO,) if self.registry.kind.auto else ()
        self.__name__ = self.registry.kind.label  # argparse names the type in some of its messages

    def __call__(self, value: str) -> str:
        if value in self.extra or value in self.registry:
            return value
        raise argparse.ArgumentTypeError(self.registry.unknown_message(value))

    @property
    def metavar(self) -> str:
        return "{" + ",".join([*self.extra, *self.registry.names()]) + "}"


def registry_flag(group, flag: str, manager: PluginManager, key: str, **kwargs) -> None:
    """Add ``flag`` choosing a name of the registry ``key`` (its names in --help, its errors)."""
    choice = RegistryName(manager, key)
    group.add_argument(flag, type=choice, metavar=choice.metavar, **kwargs)


def add_engine_args(parser: argparse.ArgumentParser, manager: PluginManager) -> None:
    """Add every EngineConfig flag; one-of-N choices come from the plugin registries."""
    g = parser.add_argument_group("engine")
    _add_model_args(g, manager)
    _add_batch_args(g, manager)
    _add_parallel_args(g)
    _add_feature_args(g, manager)
    add_lora_args(g)
    add_multimodal_args(parser)
    add_kv_transfer_args(parser)


def _add_model_args(g, manager: PluginManager) -> None:
    """How the model is read and computed: tokenizer, kernels, quantization, dtypes, platform."""
    g.add_argument("--tokenizer", help="tokenizer folder (default: the model's)")
    registry_flag(g, "--attention-backend", manager, "attention", default=AUTO,
                  help="attention kernels over the paged KV cache; 'auto' takes the usable one of highest priority "
                       "(install pagoda-attention-triton / -flash for GPU kernels)")
    registry_flag(g, "--quantization", manager, "quantization", default=AUTO,
                  help="how linear layers store weights; 'auto': the method the checkpoint's config.json declares "
                       "(quantization_config), else 'none': an installed method never quantizes a model by itself")
    g.add_argument("--kv-cache-dtype", default="auto", choices=KV_CACHE_DTYPES,
                   help="KV cache element type: auto (the model dtype) or fp8 (e4m3; fp8_e5m2 where the attention "
                        "backend stores it): twice the tokens in the same memory, scaled per layer (docs/kv_cache_fp8.md)")
    g.add_argument("--calculate-kv-scales", action="store_true",
                   help="set an FP8 KV cache's per-layer scales from the first step's keys and values (default: the "
                        "checkpoint's k_scale/v_scale, else 1.0)")
    registry_flag(g, "--platform", manager, "platform", default=AUTO,
                  help="device family; 'auto' takes the usable one of highest priority (e.g. cuda over cpu)")
    g.add_argument("--dtype", default="auto", choices=DTYPES,
                   help="weight and activation dtype; 'auto' = the platform's choice for this checkpoint")
    g.add_argument("--load-format", default="auto", choices=LOAD_FORMATS,
                   help="weights: safetensors, gguf, or 'dummy' (random, for benchmarks); 'auto' detects")


def _add_batch_args(g, manager: PluginManager) -> None:
    """What a step holds and how steps run: lengths, limits, the KV cache, graphs, the scheduler."""
    g.add_argument("--max-model-len", type=int, help="longest prompt + output in tokens (default: the model's)")
    g.add_argument("--max-num-seqs", type=int, default=256, help="most requests in one batch")
    g.add_argument("--max-num-batched-tokens", type=int,
                   help="token budget of one step (prefill chunks + decodes; default 8192)")
    add_prefill_limit_args(g)
    g.add_argument("--block-size", type=int, default=16, help="tokens per KV cache block (a power of two)")
    g.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction, default=True,
                   help="reuse KV blocks of shared prompt prefixes")
    g.add_argument("--gpu-memory-utilization", type=float, default=0.9,
                   help="fraction of device memory for weights, activations and KV cache (GPU platforms)")
    g.add_argument("--kv-cache-memory", type=int, help="bytes for the KV cache (overrides --gpu-memory-utilization)")
    g.add_argument("--enforce-eager", action="store_true",
                   help="never capture device graphs (by default decode steps are captured as CUDA graphs at "
                        "start-up when the platform and the attention backend support it)")
    g.add_argument("--overlap-steps", action=argparse.BooleanOptionalAction, default=None,
                   help="schedule and launch step N+1 while step N runs on the device, reading N's tokens "
                        "afterwards (default: on GPUs, off on CPUs; --no-overlap-steps runs steps strictly in turn)")
    registry_flag(g, "--scheduler", manager, "scheduler", default="fcfs",
                  help="request scheduling policy: fcfs, priority (lower value first), or a plugin's; 'auto' takes "
                       "the one of highest priority")
    g.add_argument("--seed", type=int, default=0, help="seed for unseeded sampling and dummy weights")


def _add_parallel_args(g) -> None:
    """Tensor, pipeline and data parallelism, and how their ranks start and sum."""
    g.add_argument("--tensor-parallel-size", "-tp", type=int, default=1,
                   help="split every layer over this many devices (one process per device; docs/distributed.md)")
    g.add_argument("--pipeline-parallel-size", "-pp", type=int, default=1,
                   help="split the layers into this many stages, each on its own device(s) (tensor-parallel-size "
                        "each); stages pass activations on and run micro-batches at once (docs/distributed.md)")
    g.add_argument("--pp-layer-partition", default=None, metavar="N,N,...",
                   help="decoder layers per pipeline stage, in order (e.g. 10,6 for 16 layers over 2 stages); "
                        "default: an even split, which needs the stages to divide the layers")
    g.add_argument("--data-parallel-size", "-dp", type=int, default=1,
                   help="run this many engine cores (replicas), each with its own devices "
                        "(tensor x pipeline parallel size each); the API server balances requests over them")
    g.add_argument("--data-parallel-rank", type=int, default=None, metavar="K",
                   help="external load balancing: this server runs only replica K of --data-parallel-size (on "
                        "the K-th group of devices); start one server per replica and balance in front of them")
    g.add_argument("--distributed-executor-backend", default="auto", choices=EXECUTOR_BACKENDS,
                   help="how the ranks of a tensor- or pipeline-parallel engine start: mp (worker processes on "
                        "this host), torchrun (started by torchrun, on one host or several), ray (actors of a "
                        "Ray cluster, one host or several: pip install 'pagoda[ray]'); auto: torchrun when "
                        "launched by it, else mp")
    g.add_argument("--disable-custom-all-reduce", action="store_true",
                   help="sum the tensor-parallel ranks' partial results over NCCL (RCCL) alone; by default ranks "
                        "of one host sum small messages (decode steps) with the platform's own all-reduce over "
                        "peer-to-peer memory where it has one, and fall back to NCCL where it does not")


def _add_feature_args(g, manager: PluginManager) -> None:
    """Structured output, pooling runners, speculative decoding."""
    registry_flag(g, "--guided-decoding-backend", manager, "guided_decoding", default=AUTO,
                  help="grammar engine for structured output (guided_decoding, response_format); 'auto' takes the "
                       "usable one of highest priority (docs/structured_output.md)")
    g.add_argument("--runner", default="auto", choices=RUNNERS,
                   help="generate text, or pool hidden states (embeddings, scores: /v1/embeddings, /score, "
                        "/rerank); auto: pooling for encoder-only models such as BertModel (docs/pooling.md)")
    g.add_argument("--speculative-config", default=None, metavar="JSON",
                   help='speculative decoding, as in vLLM: \'{"method": "ngram", "num_speculative_tokens": 4}\' '
                        "(prompt lookup; prompt_lookup_min/max set the n-gram sizes), or "
                        '\'{"method": "draft", "model": DIR, "num_speculative_tokens": 4}\' (a small model of the '
                        'same tokenizer); "backoff": false keeps k drafts always. Outputs are unchanged '
                        "(exact verification), greedy or sampled (docs/speculative.md)")


PREFILL_LIMIT_FLAGS = (  # (flag, default, metavar, help): the scheduler's latency limits on prefills
    ("--max-num-partial-prefills", 1, "N", "prompts that may be mid-prefill (split over several steps) at once; a "
     "prompt that finishes its prefill within a step is always admitted (default 1)"),
    ("--max-long-partial-prefills", 1, "N", "of them, long prompts (see --long-prefill-token-threshold); shorter "
     "prompts queued behind a long one that must wait are admitted ahead of it (default 1)"),
    ("--long-prefill-token-threshold", 0, "T", "a prompt with more than T tokens to compute is long and computes at "
     "most T tokens a step, so decodes and short prompts share its steps (default 0: off)"),
    ("--max-prefill-tokens-while-decoding", 0, "N", "prompt tokens a step that also runs decodes may compute at "
     "most: bounds the inter-token latency, delays new prompts' first tokens (default 0: off)"),
)


def add_prefill_limit_args(group) -> None:
    """The scheduler's latency limits on prefills (docs/performance.md#tuning-for-inter-token-latency)."""
    for flag, default, metavar, text in PREFILL_LIMIT_FLAGS:
        group.add_argument(flag, type=int, default=default, metavar=metavar, help=text)


def engine_config(args: argparse.Namespace, model: str | None) -> EngineConfig:
    """Build (and validate) an EngineConfig from parsed flags.

    Under torchrun, every rank runs the same command; ranks > 0 become worker ranks
    here (before any command loads a model or opens a port) and exit when the engine stops.
    """
    config = _engine_config(args, model)
    from pagoda.executor.workers import launched_by_torchrun, use_torchrun

    if config.world_size > 1 and launched_by_torchrun() and use_torchrun(config):
        import os

        if int(os.environ["RANK"]) > 0:
            from pagoda.executor.worker import run_torchrun_worker

            raise SystemExit(run_torchrun_worker(config))
    return config


def _engine_config(args: argparse.Namespace, model: str | None) -> EngineConfig:
    return EngineConfig(
        model=model,
        tokenizer=args.tokenizer,
        dtype=args.dtype,
        seed=args.seed,
        max_model_len=args.max_model_len,
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        **{name: getattr(args, name) for name in PREFILL_LIMITS},
        block_size=args.block_size,
        enable_prefix_caching=args.enable_prefix_caching,
        attention_backend=args.attention_backend,
        quantization=args.quantization,
        kv_cache_dtype=args.kv_cache_dtype,
        calculate_kv_scales=args.calculate_kv_scales,
        load_format=args.load_format,
        kv_cache_memory=args.kv_cache_memory,
        gpu_memory_utilization=args.gpu_memory_utilization,
        enforce_eager=args.enforce_eager,
        scheduler=args.scheduler,
        platform=args.platform,
        overlap_steps=args.overlap_steps,
        tensor_parallel_size=args.tensor_parallel_size,
        pipeline_parallel_size=args.pipeline_parallel_size,
        pp_layer_partition=args.pp_layer_partition,
        data_parallel_size=args.data_parallel_size,
        data_parallel_rank=args.data_parallel_rank,
        distributed_executor_backend=args.distributed_executor_backend,
        disable_custom_all_reduce=args.disable_custom_all_reduce,
        guided_decoding_backend=args.guided_decoding_backend,
        speculative_config=args.speculative_config,
        runner=args.runner,
        **lora_settings(args),
        **multimodal_settings(args),
        **kv_transfer_settings(args),
    )


def add_lora_args(group) -> None:
    """The LoRA flags (docs/lora.md), mirroring EngineConfig's LoRA fields."""
    group.add_argument("--enable-lora", action="store_true",
                       help="serve LoRA adapters over the model: requests name their adapter (docs/lora.md)")
    group.add_argument("--max-loras", type=int, default=1,
                       help="distinct adapters one step may run (device slots; more wait for a free slot)")
    group.add_argument("--max-lora-rank", type=int, default=16, help="the largest adapter rank served")
    group.add_argument("--max-cpu-loras", type=int, default=None,
                       help="adapters kept in host memory, ready to swap in (default: --max-loras)")


def lora_settings(args: argparse.Namespace) -> dict:
    return dict(enable_lora=args.enable_lora, max_loras=args.max_loras, max_lora_rank=args.max_lora_rank,
                max_cpu_loras=args.max_cpu_loras)
