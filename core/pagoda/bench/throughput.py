"""`pagoda bench throughput`: offline throughput on random prompts, like vLLM's benchmark.

With ``--hf`` the same workload also runs through HF transformers' continuous batching
(``generate_batch``) on the same weights, in the same process, and the ratio is reported.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

from pagoda import envs
from pagoda.bench.common import (active_params, add_common_args, build_llm, device_rates, emit, folder_variable,
                                 kv_cache_summary, random_prompts, spec_decode_summary, streamed_weights, synchronize)
from pagoda.bench.step_floor import attention_flops_per_pair, read_steps, step_costs, step_report


def add_parser(subparsers, parent: argparse.ArgumentParser) -> None:
    p = subparsers.add_parser("throughput", parents=[parent], help="offline throughput (requests/s, tokens/s)",
                              description=__doc__.splitlines()[0])
    p.add_argument("--num-prompts", type=int, default=1000, help="number of requests")
    p.add_argument("--input-len", type=int, default=256, help="prompt tokens per request (random ids)")
    p.add_argument("--output-len", type=int, default=256, help="new tokens per request (EOS ignored)")
    p.add_argument("--temperature", type=float, default=0.0,
                   help="sampling temperature of every request (default 0: greedy; vLLM's benchmark samples at 1.0)")
    p.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling mass of every request (1.0: off)")
    p.add_argument("--hf", action="store_true", help="also run HF transformers generate_batch on the same weights")
    p.add_argument("--step-report", action="store_true",
                   help="also time every engine step of the timed run (the engine core's trace, in the folder "
                        "PAGODA_TRACE_DIR names, a temporary one where unset) and report decode-only and mixed "
                        "steps against each step's roofline floor (pagoda.bench.step_floor)")
    add_common_args(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    with folder_variable(envs.TRACE_DIR, args.step_report, "pagoda_steps_"):  # the engine core's step trace
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    from pagoda import SamplingParams

    llm = build_llm(args)
    engine = llm.engine
    model, device, dtype = engine.core.parts.model, engine.core.parts.platform.device(), engine.core.parts.dtype
    hf_model = _hf_model_with_same_weights(engine) if args.hf else None
    prompts = random_prompts(args.num_prompts, args.input_len, engine.core.parts.hf_config.vocab_size, args.seed)
    params = SamplingParams(temperature=args.temperature, top_p=args.top_p, max_tokens=args.output_len, ignore_eos=True)
    # Warm-up with a full batch of full-length prompts: kernels compiled on first use (Triton's
    # prefill tiles, decode splits) compile here, not inside the timed run. Other prompts than the
    # timed ones, and the prefix cache emptied after: the timed run computes every prompt's prefill.
    vocab = engine.core.parts.hf_config.vocab_size
    warmup = random_prompts(min(len(prompts), engine.core.config.max_num_seqs), args.input_len, vocab, args.seed + 1)
    llm.generate(warmup, SamplingParams(temperature=0, max_tokens=8, ignore_eos=True), use_tqdm=False)
    engine.core.reset_prefix_cache()
    synchronize(device)
    stats_before, since = llm.engine.stats, time.monotonic()
    start = time.perf_counter()
    outputs = llm.generate(prompts, params)
    synchronize(device)
    elapsed = time.perf_counter() - start
    num_out = sum(len(o.outputs[0].token_ids) for o in outputs)
    weight_bytes, num_params = streamed_weights(model)
    result = {
        "workload": vars_subset(args, "num_prompts", "input_len", "output_len", "temperature", "top_p", "model",
                                "load_format"),
        "platform": engine.core.parts.platform.describe(), "attention_backend": args.attention_backend,
        "dtype": str(dtype).removeprefix("torch."), "params": num_params,
        "active_params": active_params(model, num_params, engine.core.parts.hf_config),
        "pagoda": _rates(elapsed, args.num_prompts, args.num_prompts * args.input_len, num_out),
        "cached_prompt_tokens": sum(o.num_cached_tokens for o in outputs),  # 0 unless prompts repeat
        "kv_cache": kv_cache_summary(engine.core.parts),
    }
    speculative = spec_decode_summary(llm, stats_before)
    if speculative is not None:  # acceptance of the timed run's drafts
        result["speculative"] = {"config": engine.core.config.speculative_config, **speculative}
    rates = device_rates(device, dtype)
    flops = 2 * result["active_params"] * args.num_prompts * (args.input_len + args.output_len)
    flops += _attention_flops(engine.core.parts.hf_config, args.num_prompts, args.input_len + args.output_len)
    result["roofline"] = {"matmul_tflops": rates["matmul_flops"] / 1e12, "copy_gbps": rates["copy_bytes"] / 1e9,
                          "compute_floor_s": flops / rates["matmul_flops"], "weight_bytes": weight_bytes}
    if args.step_report:
        result["steps"] = _step_report(engine.core, rates, since, elapsed)
    if hf_model is not None:
        del llm, engine, model, outputs
        torch.cuda.empty_cache() if device.type == "cuda" else None
        result["hf_generate_batch"] = _run_hf(hf_model, prompts, args.output_len, device)
        result["ratio_pagoda_over_hf"] = result["pagoda"]["tokens_per_s"] / result["hf_generate_batch"]["tokens_per_s"]
    emit(result, args.result_file)
    return 0


def vars_subset(args: argparse.Namespace, *names: str) -> dict:
    return {n: getattr(args, n) for n in names}


def _rates(elapsed: float, num_requests: int, prompt_tokens: int, output_tokens: int) -> dict[str, float]:
    return {
        "seconds": elapsed, "requests_per_s": num_requests / elapsed,
        "tokens_per_s": (prompt_tokens + output_tokens) / elapsed, "output_tokens_per_s": output_tokens / elapsed,
    }


def _hf_model_with_same_weights(engine):
    """An HF model from the same config; its (random) weights are loaded into Pagoda's model too."""
    import transformers

    parts = engine.core.parts
    with parts.platform.device():  # build (and randomly initialise) directly on the device
        hf = transformers.AutoModelForCausalLM.from_config(parts.hf_config, dtype=parts.dtype)
    parts.model.load_weights((name, t) for name, t in hf.state_dict().items())
    return hf.eval()


def _run_hf(hf_model, prompts: list[list[int]], output_len: int, device: torch.device) -> dict[str, float]:
    from transformers import GenerationConfig

    config = GenerationConfig(max_new_tokens=output_len, min_new_tokens=output_len, do_sample=False,
                              eos_token_id=None, pad_token_id=0)
    hf_model.generate_batch(prompts[:8], generation_config=config, max_new_tokens=4)  # warm-up
    synchronize(device)
    start = time.perf_counter()
    out = hf_model.generate_batch(prompts, generation_config=config, progress_bar=True)
    synchronize(device)
    elapsed = time.perf_counter() - start
    num_out = sum(len(o.generated_tokens) for o in out.values())
    return _rates(elapsed, len(prompts), len(prompts) * len(prompts[0]), num_out)


def _attention_flops(hf_config, num_requests: int, length: int) -> int:
    """Causal attention's FLOPs over ``num_requests`` sequences of ``length`` tokens."""
    return attention_flops_per_pair(hf_config) * num_requests * length * (length + 1) // 2


def _step_report(core, rates: dict[str, float], since: float, elapsed: float) -> dict:
    """The timed run's steps against their floors (pagoda.bench.step_floor), from the engine core's trace."""
    core.trace.flush()
    steps = read_steps(Path(envs.TRACE_DIR.get()), since)
    return step_report(steps, step_costs(core.parts, rates), core.overlap, elapsed, since)
