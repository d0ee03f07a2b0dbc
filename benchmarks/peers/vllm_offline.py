"""vLLM's side of the offline workloads, run in vLLM's environment (no Pagoda there).

Measures what `pagoda bench throughput` and `pagoda bench latency` measure, the same way: the same
token-id prompts (prompts.random_token_prompts == pagoda.bench.common.random_prompts), greedy, EOS
ignored, no tokenizer (skip_tokenizer_init), the warm-up `pagoda bench throughput` runs (--warmup-prompts
other prompts of the workload's length, --warmup-output-len tokens each) and the prefix cache emptied
after it (the timed run computes every prefill); decode step time = (time for n tokens -
time for 1 token) / (n - 1), best of the repeats, prefix cache reset before each timing.

    python vllm_offline.py --model DIR --workloads offline_256x256:1000:256:256 --latency 1,8,64:128:32:2 \
        --result-file out.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from prompts import random_token_prompts
from workloads import (GPU_MEMORY_UTILIZATION, LIMITS, MATCHED_MAX_NUM_BATCHED_TOKENS, MATCHED_MAX_NUM_SEQS,
                       MAX_MODEL_LEN, SEED)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True, help="folder with config.json (dummy weights)")
    p.add_argument("--workloads", default="", help="name:num_prompts:input_len:output_len, comma-separated")
    p.add_argument("--latency", help="batch_sizes(comma):input_len:output_len:repeats, e.g. 1,8,64:128:32:2")
    p.add_argument("--limits", choices=LIMITS, default="matched",
                   help=f"matched: {MATCHED_MAX_NUM_SEQS} sequences, {MATCHED_MAX_NUM_BATCHED_TOKENS} tokens a step "
                        "(as Pagoda's run); own: vLLM's defaults")
    p.add_argument("--warmup-prompts", type=int, default=MATCHED_MAX_NUM_SEQS,
                   help="warm-up prompts before each workload, at most its count (Pagoda's: its max_num_seqs)")
    p.add_argument("--warmup-output-len", type=int, default=8, help="tokens each warm-up prompt generates")
    p.add_argument("--engine-flag", action="append", default=[], help="extra vLLM flag, e.g. --attention-backend=TRITON_ATTN")
    p.add_argument("--result-file", required=True)
    return p.parse_args()


def engine_kwargs(args: argparse.Namespace) -> dict:
    kwargs = dict(model=args.model, load_format="dummy", skip_tokenizer_init=True, dtype="bfloat16", seed=SEED,
                  max_model_len=MAX_MODEL_LEN, gpu_memory_utilization=GPU_MEMORY_UTILIZATION)
    if args.limits == "matched":
        kwargs.update(max_num_seqs=MATCHED_MAX_NUM_SEQS, max_num_batched_tokens=MATCHED_MAX_NUM_BATCHED_TOKENS)
    for flag in args.engine_flag:  # "--attention-backend=TRITON_ATTN" -> attention_backend="TRITON_ATTN"
        key, _, value = flag.lstrip("-").partition("=")
        kwargs[key.replace("-", "_")] = flag_value(value)
    return kwargs


def flag_value(text: str):
    """'' (a bare switch) -> True; '256' -> 256; '0.5' -> 0.5; anything else stays a string."""
    if text == "":
        return True
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def timed_generate(llm, prompts, params) -> tuple[float, list]:
    start = time.perf_counter()
    outputs = llm.generate(prompts, params, use_tqdm=False)
    return time.perf_counter() - start, outputs


def throughput(llm, spec: str, vocab_size: int, warmup: tuple[int, int]) -> tuple[str, dict]:
    from vllm import SamplingParams, TokensPrompt

    name, num, input_len, output_len = spec.split(":")
    num, input_len, output_len = int(num), int(input_len), int(output_len)
    prompts = [TokensPrompt(prompt_token_ids=p) for p in random_token_prompts(num, input_len, vocab_size, SEED)]
    params = SamplingParams(temperature=0, max_tokens=output_len, ignore_eos=True, detokenize=False)
    count, tokens = min(num, warmup[0]), warmup[1]  # as `pagoda bench throughput`: other prompts, seed + 1
    others = [TokensPrompt(prompt_token_ids=p) for p in random_token_prompts(count, input_len, vocab_size, SEED + 1)]
    llm.generate(others, SamplingParams(temperature=0, max_tokens=tokens, ignore_eos=True, detokenize=False),
                 use_tqdm=False)
    llm.reset_prefix_cache()  # as `pagoda bench throughput`: the timed run computes every prefill
    elapsed, outputs = timed_generate(llm, prompts, params)
    num_out = sum(len(o.outputs[0].token_ids) for o in outputs)
    return name, {"seconds": elapsed, "requests_per_s": num / elapsed,
                  "tokens_per_s": (num * input_len + num_out) / elapsed, "output_tokens_per_s": num_out / elapsed,
                  "num_prompts": num, "input_len": input_len, "output_len": output_len}


def decode_step_seconds(llm, prompts, output_len: int, repeats: int) -> float:
    from vllm import SamplingParams

    def timed(n: int) -> float:
        llm.reset_prefix_cache()  # both timings pay the same prefill
        return timed_generate(llm, prompts, SamplingParams(temperature=0, max_tokens=n, ignore_eos=True,
                                                           detokenize=False))[0]

    timed(2)  # warm-up
    return min((timed(output_len) - timed(1)) / (output_len - 1) for _ in range(repeats))


def latency(llm, spec: str, vocab_size: int) -> dict:
    from vllm import TokensPrompt

    batches, input_len, output_len, repeats = spec.split(":")
    rows = []
    for batch in (int(b) for b in batches.split(",")):
        prompts = [TokensPrompt(prompt_token_ids=p) for p in random_token_prompts(batch, int(input_len), vocab_size, SEED)]
        step = decode_step_seconds(llm, prompts, int(output_len), int(repeats))
        rows.append({"batch": batch, "step_ms": step * 1e3})
    return {"input_len": int(input_len), "output_len": int(output_len), "steps": rows}


def main() -> int:
    args = parse_args()
    import vllm
    from vllm import LLM

    kwargs = engine_kwargs(args)
    start = time.perf_counter()
    llm = LLM(**kwargs)
    result = {"engine": "vllm", "version": vllm.__version__, "engine_kwargs": kwargs,
              "startup_s": time.perf_counter() - start, "scheduler": scheduler_limits(llm), "throughput": {}}
    vocab_size = llm.llm_engine.model_config.get_vocab_size()
    for spec in filter(None, args.workloads.split(",")):
        name, rates = throughput(llm, spec, vocab_size, (args.warmup_prompts, args.warmup_output_len))
        result["throughput"][name] = rates
        print(name, json.dumps(rates), flush=True)
        write(result, args.result_file)  # after each workload: a later timeout keeps what finished
    if args.latency:
        result["latency"] = latency(llm, args.latency, vocab_size)
        print("latency", json.dumps(result["latency"]), flush=True)
    write(result, args.result_file)
    return 0


def scheduler_limits(llm) -> dict:
    """The limits, attention backend and compilation vLLM settled on (its log says the same: vllm_log.py)."""
    config = llm.llm_engine.vllm_config
    compilation = getattr(config, "compilation_config", None)
    return {"max_num_seqs": config.scheduler_config.max_num_seqs,
            "max_num_batched_tokens": config.scheduler_config.max_num_batched_tokens,
            "attention_backend": str(getattr(getattr(config, "attention_config", None), "backend", None)),
            "compilation_mode": str(getattr(compilation, "mode", getattr(compilation, "level", None))),
            "cudagraph_mode": str(getattr(compilation, "cudagraph_mode", None)),
            "cudagraph_capture_sizes": list(getattr(compilation, "cudagraph_capture_sizes", None) or [])}


def write(result: dict, path: str) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    raise SystemExit(main())
