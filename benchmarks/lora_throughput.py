"""LoRA serving against the base model alone, measured in one process: offline throughput with the requests
spread over 1, 8 and 32 adapters, and decode steps with one adapter (docs/lora.md).

The adapters are random rank-``--rank`` LoRA matrices on every projection (q/k/v/o, gate/up/down), written in
PEFT's format for the model's config. Phases (each ``--num-prompts`` x ``--input-len``/``--output-len``,
``ignore_eos``): the base model in an engine without LoRA, then in the LoRA engine (``--max-loras`` slots,
every adapter's host copy kept) the base model again and each adapter count, requests assigned round-robin.
Before each timed run the engine serves ``--warmup-prompts`` other prompts of the same length and adapter mix
(``--warmup-output-len`` tokens each), then its prefix cache is emptied. Ratios are against the engine without
LoRA. ``--adapter-dir`` keeps the adapters in a folder (written once, reused by later runs and by vLLM's side of
``benchmarks/peers``, part ``lora``).

GPU (the device suite ``e2e``, part ``lora``, runs it on dummy Llama-3.1-8B weights):
    python benchmarks/lora_throughput.py benchmarks/configs/llama-3.1-8b --load-format dummy --max-model-len 2048
CPU smoke run:
    python benchmarks/lora_throughput.py benchmarks/configs/smollm2-135m --load-format dummy --num-prompts 8 \\
        --input-len 16 --output-len 8 --adapter-counts 1,2 --max-loras 1 --batch-sizes 1
``--profile-kernels`` adds each decode step's kernels by name (base and one adapter) to the result.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import tempfile
import time
from pathlib import Path

import torch

from pagoda.bench.common import add_common_args, emit, random_prompts, synchronize
from pagoda.entrypoints.engine_args import engine_config

PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def projection_shapes(cfg) -> dict[str, tuple[int, int]]:
    """(out_features, in_features) of each projection of a Llama-style config."""
    d = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    q, kv = cfg.num_attention_heads * d, (cfg.num_key_value_heads or cfg.num_attention_heads) * d
    h, inter = cfg.hidden_size, cfg.intermediate_size
    return {"q_proj": (q, h), "k_proj": (kv, h), "v_proj": (kv, h), "o_proj": (h, q), "gate_proj": (inter, h),
            "up_proj": (inter, h), "down_proj": (h, inter)}


def write_adapter(cfg, folder: Path, rank: int, seed: int) -> Path:
    """A random rank-``rank`` adapter on every projection of every layer, as PEFT saves one."""
    from safetensors.torch import save_file

    g = torch.Generator().manual_seed(seed)
    tensors = {}
    for layer in range(cfg.num_hidden_layers):
        for proj, (out_f, in_f) in projection_shapes(cfg).items():
            group = "self_attn" if proj in PROJECTIONS[:4] else "mlp"
            prefix = f"base_model.model.model.layers.{layer}.{group}.{proj}"
            tensors[f"{prefix}.lora_A.weight"] = (torch.randn(rank, in_f, generator=g) * 0.01).bfloat16()
            tensors[f"{prefix}.lora_B.weight"] = (torch.randn(out_f, rank, generator=g) * 0.01).bfloat16()
    folder.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(folder / "adapter_model.safetensors"))
    config = {"peft_type": "LORA", "r": rank, "lora_alpha": 2 * rank, "target_modules": list(PROJECTIONS),
              "bias": "none"}
    (folder / "adapter_config.json").write_text(json.dumps(config))
    return folder


def write_adapters(cfg, root: Path, rank: int, count: int) -> list[Path]:
    """Adapters ``root/a0`` .. ``a<count - 1>`` (seed = index); a folder already written for the same model
    shapes and rank is kept as it is (``root/adapters.json`` records what was written)."""
    stamp = {"rank": rank, "layers": cfg.num_hidden_layers, "shapes": projection_shapes(cfg)}
    record = root / "adapters.json"
    done = json.loads(record.read_text()) if record.exists() else {}
    if {k: done.get(k) for k in stamp} != json.loads(json.dumps(stamp)):
        done = {**stamp, "count": 0}
    folders = [root / f"a{i}" for i in range(count)]
    for i in range(done.get("count", 0), count):
        write_adapter(cfg, folders[i], rank, i)
    root.mkdir(parents=True, exist_ok=True)
    record.write_text(json.dumps({**done, "count": max(count, done.get("count", 0))}) + "\n")
    return folders


def lora_slots(requested: int, adapter_counts: list[int]) -> int:
    """Device slots: --max-loras, raised to the most adapters used up to 8 (8 slots when not asked for more)."""
    return max(requested, min(8, max(adapter_counts)))


def timed_generate(llm, prompts, params, loras) -> float:
    device = llm.engine.core.parts.platform.device()
    synchronize(device)
    start = time.perf_counter()
    llm.generate(prompts, params, use_tqdm=False, lora_request=loras)
    synchronize(device)
    return time.perf_counter() - start


def adapter_mix(loras: list, count: int, num: int) -> list:
    """Requests spread round-robin over the first ``count`` adapters."""
    return [loras[i % count] for i in range(num)]


def throughput(llm, prompts, params, loras, warmup: list[list[int]], warmup_tokens: int) -> float:
    """Requests per second, after a warm-up: other prompts with the same adapter mix, then an empty prefix cache."""
    from pagoda import SamplingParams

    mix = loras[:len(warmup)] if isinstance(loras, list) else loras
    timed_generate(llm, warmup, SamplingParams(temperature=0, max_tokens=warmup_tokens, ignore_eos=True), mix)
    llm.engine.core.reset_prefix_cache()  # the timed run computes every prefill
    return len(prompts) / timed_generate(llm, prompts, params, loras)


def decode_step_ms(llm, batch: int, input_len: int, lora, vocab: int) -> float:
    """One decode step at ``batch`` rows: (129 new tokens - 1 new token) / 128, the fastest of 3 tries each."""
    from pagoda import SamplingParams

    prompts = random_prompts(batch, input_len, vocab, seed=batch)

    def best(tokens: int) -> float:
        params = SamplingParams(temperature=0, max_tokens=tokens, ignore_eos=True)
        return min(timed_generate(llm, prompts, params, lora) for _ in range(3))

    return (best(129) - best(1)) / 128 * 1000


def decode_kernels(llm, batch: int, input_len: int, lora, vocab: int, steps: int = 32) -> dict[str, float]:
    """One decode step's kernels at ``batch`` rows (pagoda.bench.trace_kernels.step_kernels)."""
    from pagoda.bench import trace_kernels

    return trace_kernels.step_kernels(llm, random_prompts(batch, input_len, vocab, seed=batch), steps, lora)["decode"]


def run_phases(args, config, prompts, params, adapters, lora_engine: bool, result: dict) -> None:
    """The phases of one engine, each figure added to ``result`` as it is measured."""
    from pagoda import LLM, LoRARequest

    llm = LLM(**{**vars(config), "enable_lora": lora_engine, "max_cpu_loras": len(adapters) if lora_engine else None})
    vocab = llm.engine.info.vocab_size
    warmup = random_prompts(min(args.warmup_prompts, len(prompts)), args.input_len, vocab, seed=1)
    try:
        tag = "lora_engine_" if lora_engine else ""
        result[f"{tag}base_req_per_s"] = throughput(llm, prompts, params, None, warmup, args.warmup_output_len)
        result[f"{tag}base_step_ms"] = {b: decode_step_ms(llm, b, args.input_len, None, vocab) for b in args.batch_sizes}
        if args.profile_kernels:
            result[f"{tag}base_step_kernels"] = {b: decode_kernels(llm, b, args.input_len, None, vocab)
                                                 for b in args.batch_sizes}
        if not lora_engine:
            return
        loras = [LoRARequest(f"a{i}", i + 1, str(path)) for i, path in enumerate(adapters)]
        for count in args.adapter_counts:
            mix = adapter_mix(loras, count, len(prompts))
            result[f"adapters_{count}_req_per_s"] = throughput(llm, prompts, params, mix, warmup, args.warmup_output_len)
        result["one_adapter_step_ms"] = {b: decode_step_ms(llm, b, args.input_len, loras[0], vocab)
                                         for b in args.batch_sizes}
        if args.profile_kernels:
            result["one_adapter_step_kernels"] = {b: decode_kernels(llm, b, args.input_len, loras[0], vocab)
                                                  for b in args.batch_sizes}
    finally:
        llm.shutdown()
        del llm
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-prompts", type=int, default=1000)
    parser.add_argument("--input-len", type=int, default=256)
    parser.add_argument("--output-len", type=int, default=256)
    parser.add_argument("--rank", type=int, default=16, help="rank of every adapter")
    parser.add_argument("--adapter-counts", default="1,8,32", help="distinct adapters the requests are spread over")
    parser.add_argument("--batch-sizes", default="1,64", help="decode-step batch sizes timed with one adapter")
    parser.add_argument("--adapter-dir", help="keep the adapters here (written once; default: a temporary folder)")
    parser.add_argument("--warmup-prompts", type=int, default=256,
                        help="other prompts run before each timed run, at most --num-prompts (default: a full batch)")
    parser.add_argument("--warmup-output-len", type=int, default=8, help="tokens each warm-up prompt generates")
    parser.add_argument("--profile-kernels", action="store_true",
                        help="also record each timed decode step's kernels (time by name, from torch profiler traces "
                             "in PAGODA_TORCH_PROFILER_DIR, default a temporary folder), base and adapter")
    add_common_args(parser)
    args = parser.parse_args(argv)
    args.adapter_counts = [int(n) for n in args.adapter_counts.split(",")]
    args.batch_sizes = [int(n) for n in args.batch_sizes.split(",")]
    return args


def main() -> None:
    args = parse_args()
    if args.profile_kernels and not os.environ.get("PAGODA_TORCH_PROFILER_DIR"):
        os.environ["PAGODA_TORCH_PROFILER_DIR"] = tempfile.mkdtemp(prefix="lora_traces_")
    from pagoda import SamplingParams
    from pagoda.loader import load_hf_config, resolve_model

    config = engine_config(args, args.model)
    config.skip_tokenizer_init = True
    config.max_loras = lora_slots(config.max_loras, args.adapter_counts)
    config.max_lora_rank = max(config.max_lora_rank, args.rank)
    hf_config = load_hf_config(resolve_model(config.model))
    params = SamplingParams(temperature=0, max_tokens=args.output_len, ignore_eos=True)
    prompts = random_prompts(args.num_prompts, args.input_len, hf_config.vocab_size, seed=0)
    result = {"workload": f"{args.num_prompts} x {args.input_len}/{args.output_len}, rank {args.rank} on all "
                          f"projections, max_loras {config.max_loras}", "model": args.model}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            start = time.perf_counter()
            adapters = write_adapters(hf_config, Path(args.adapter_dir or tmp), args.rank, max(args.adapter_counts))
            result["adapters_written_s"] = round(time.perf_counter() - start, 1)
            run_phases(args, config, prompts, params, adapters, False, result)
            run_phases(args, config, prompts, params, adapters, True, result)
    finally:  # a run cut short (Ctrl-C, the device driver's time limit) keeps the figures it measured
        emit(_rounded({**result, **ratios(result, args)}), args.result_file)


def ratios(result: dict, args: argparse.Namespace) -> dict:
    """Each measured figure against the engine without LoRA (those both sides of were measured)."""
    out, base, step = {}, result.get("base_req_per_s"), result.get("base_step_ms", {})
    for name, key in [*((f"ratio_adapters_{n}", f"adapters_{n}_req_per_s") for n in args.adapter_counts),
                      ("ratio_lora_engine_base", "lora_engine_base_req_per_s")]:
        if base and key in result:
            out[name] = result[key] / base
    adapter_step = result.get("one_adapter_step_ms", {})
    if adapter_step:
        out["ratio_one_adapter_step"] = {b: adapter_step[b] / step[b] for b in adapter_step if b in step}
    return out


def _rounded(value):
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    return round(value, 3) if isinstance(value, float) else value


if __name__ == "__main__":
    main()
