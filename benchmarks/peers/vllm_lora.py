"""vLLM's side of the LoRA workload (part `lora`), run in vLLM's environment (no Pagoda there).

Measures what benchmarks/lora_throughput.py measures, the same way and under the same result keys: the same
token-id prompts (prompts.random_token_prompts == pagoda.bench.common.random_prompts, seed 0), greedy, EOS
ignored, no tokenizer; the adapters that script wrote (`--adapter-dir`, PEFT format, a0..a31), requests spread
round-robin over the first N of them; before each timed run --warmup-prompts other prompts (seed 1) with the
same adapter mix, --warmup-output-len tokens each, then an empty prefix cache; decode step = (best of 3 at 129
new tokens - best of 3 at 1) / 128, the prompts seeded by the batch size.

One phase per process (vLLM's engine is started once per process): `--phase base` an engine without LoRA (the
base model's throughput and decode step), `--phase lora` an engine with LoRA (`enable_lora`, `max_loras`,
`max_lora_rank`, `max_cpu_loras` = the most adapters used): the base model again, each adapter count, the decode
step with one adapter.

    python vllm_lora.py --model DIR --adapter-dir DIR --phase lora --adapter-counts 1,8,32 --result-file out.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from prompts import random_token_prompts
from vllm_offline import engine_kwargs, scheduler_limits, write
from workloads import LIMITS, MATCHED_MAX_NUM_SEQS, SEED

STEP_TOKENS = 129  # decode step = (time for 129 new tokens - time for 1) / 128, as lora_throughput.py


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True, help="folder with config.json (dummy weights)")
    p.add_argument("--adapter-dir", required=True, help="the adapters a0, a1, ... (lora_throughput.write_adapters)")
    p.add_argument("--phase", choices=("base", "lora"), required=True)
    p.add_argument("--num-prompts", type=int, default=1000)
    p.add_argument("--input-len", type=int, default=256)
    p.add_argument("--output-len", type=int, default=256)
    p.add_argument("--rank", type=int, default=16, help="max_lora_rank")
    p.add_argument("--max-loras", type=int, default=8, help="adapters in device slots at once")
    p.add_argument("--adapter-counts", default="1,8,32", help="distinct adapters the requests are spread over")
    p.add_argument("--batch-sizes", default="1,64", help="decode-step batch sizes (base, and one adapter)")
    p.add_argument("--limits", choices=LIMITS, default="matched")
    p.add_argument("--warmup-prompts", type=int, default=MATCHED_MAX_NUM_SEQS)
    p.add_argument("--warmup-output-len", type=int, default=8)
    p.add_argument("--engine-flag", action="append", default=[], help="extra vLLM flag, e.g. --enforce-eager")
    p.add_argument("--result-file", required=True)
    args = p.parse_args(argv)
    args.adapter_counts = [int(n) for n in args.adapter_counts.split(",")]
    args.batch_sizes = [int(n) for n in args.batch_sizes.split(",") if n]
    return args


def lora_kwargs(args: argparse.Namespace) -> dict:
    """The engine's arguments: vllm_offline's (dummy weights, no tokenizer, the limits, --engine-flag) plus
    LoRA's in the lora phase (an --engine-flag of the same name wins)."""
    kwargs = engine_kwargs(args)
    if args.phase == "lora":
        for key, value in dict(enable_lora=True, max_loras=args.max_loras, max_lora_rank=args.rank,
                               max_cpu_loras=max(args.adapter_counts)).items():
            kwargs.setdefault(key, value)
    return kwargs


def lora_requests(adapter_dir: Path, count: int) -> list:
    from vllm.lora.request import LoRARequest

    return [LoRARequest(f"a{i}", i + 1, str(adapter_dir / f"a{i}")) for i in range(count)]


def adapter_mix(loras: list, count: int, num: int) -> list:
    """Requests spread round-robin over the first ``count`` adapters (as lora_throughput.adapter_mix)."""
    return [loras[i % count] for i in range(num)]


def params(tokens: int):
    from vllm import SamplingParams

    return SamplingParams(temperature=0, max_tokens=tokens, ignore_eos=True, detokenize=False)


def as_prompts(ids: list[list[int]]) -> list:
    from vllm import TokensPrompt

    return [TokensPrompt(prompt_token_ids=p) for p in ids]


def timed_generate(llm, prompts, sampling, loras) -> float:
    start = time.perf_counter()
    llm.generate(prompts, sampling, use_tqdm=False, lora_request=loras)
    return time.perf_counter() - start


def throughput(llm, args, vocab: int, loras) -> float:
    """Requests per second, after the warm-up (other prompts, the same adapter mix) and an empty prefix cache."""
    prompts = as_prompts(random_token_prompts(args.num_prompts, args.input_len, vocab, SEED))
    warmup = as_prompts(random_token_prompts(min(args.warmup_prompts, args.num_prompts), args.input_len, vocab, SEED + 1))
    timed_generate(llm, warmup, params(args.warmup_output_len), loras[:len(warmup)] if isinstance(loras, list) else loras)
    llm.reset_prefix_cache()
    return args.num_prompts / timed_generate(llm, prompts, params(args.output_len), loras)


def decode_step_ms(llm, batch: int, input_len: int, lora, vocab: int) -> float:
    prompts = as_prompts(random_token_prompts(batch, input_len, vocab, batch))

    def best(tokens: int) -> float:
        return min(timed_generate(llm, prompts, params(tokens), lora) for _ in range(3))

    return (best(STEP_TOKENS) - best(1)) / (STEP_TOKENS - 1) * 1000


def run_phase(llm, args, vocab: int, result: dict) -> None:
    """Fill ``result`` with the phase's figures, writing the file after each (a timeout keeps what finished)."""
    tag = "lora_engine_" if args.phase == "lora" else ""
    result[f"{tag}base_req_per_s"] = throughput(llm, args, vocab, None)
    write(result, args.result_file)
    result[f"{tag}base_step_ms"] = {b: decode_step_ms(llm, b, args.input_len, None, vocab) for b in args.batch_sizes}
    write(result, args.result_file)
    if args.phase == "base":
        return
    loras = lora_requests(Path(args.adapter_dir), max(args.adapter_counts))
    for count in args.adapter_counts:
        result[f"adapters_{count}_req_per_s"] = throughput(llm, args, vocab, adapter_mix(loras, count, args.num_prompts))
        print(f"adapters_{count}_req_per_s", result[f"adapters_{count}_req_per_s"], flush=True)
        write(result, args.result_file)
    result["one_adapter_step_ms"] = {b: decode_step_ms(llm, b, args.input_len, loras[0], vocab) for b in args.batch_sizes}
    result["adapters_held"] = sorted(llm.llm_engine.list_loras())  # ids in vLLM's host cache: the adapters loaded


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import vllm
    from vllm import LLM

    kwargs = lora_kwargs(args)
    start = time.perf_counter()
    llm = LLM(**kwargs)
    result = {"engine": "vllm", "version": vllm.__version__, "phase": args.phase, "engine_kwargs": kwargs,
              "startup_s": time.perf_counter() - start, "scheduler": scheduler_limits(llm),
              "workload": {k: getattr(args, k) for k in ("num_prompts", "input_len", "output_len", "rank", "max_loras",
                                                          "adapter_counts", "batch_sizes", "warmup_prompts")}}
    run_phase(llm, args, llm.llm_engine.model_config.get_vocab_size(), result)
    write(result, args.result_file)
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
