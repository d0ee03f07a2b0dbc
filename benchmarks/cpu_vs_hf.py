"""Pagoda vs HF transformers `generate` on CPU: SmolLM2-135M-Instruct, greedy, float32.

Same prompts, same number of new tokens (EOS ignored on both sides), measured in one run.
Usage: python benchmarks/cpu_vs_hf.py [--num-prompts 32] [--output-len 64] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import torch
import transformers

from pagoda import LLM, SamplingParams

TOPICS = ["the ocean", "volcanoes", "the history of tea", "prime numbers", "honeybees", "the moon landing",
          "bread baking", "jazz music", "glaciers", "the printing press", "solar panels", "chess openings",
          "the Roman empire", "photosynthesis", "lighthouses", "origami"]


def make_prompts(n: int) -> list[str]:
    prompts = []
    for i in range(n):
        topic = TOPICS[i % len(TOPICS)]
        detail = " Explain it simply, with one example, for a curious student." * (1 + i % 3)
        prompts.append(f"Write a short paragraph about {topic}.{detail}")
    return prompts


def time_pagoda(prompts: list[str], output_len: int) -> tuple[float, int]:
    llm = LLM(dtype="float32")
    params = SamplingParams(temperature=0, max_tokens=output_len, ignore_eos=True)
    llm.generate(prompts[:2], SamplingParams(temperature=0, max_tokens=4), use_tqdm=False)  # warm-up
    start = time.perf_counter()
    outputs = llm.generate(prompts, params, use_tqdm=False)
    elapsed = time.perf_counter() - start
    return elapsed, sum(len(o.outputs[0].token_ids) for o in outputs)


def time_hf(prompts: list[str], output_len: int) -> tuple[float, int]:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    import smollm  # transformers' own conversion of the same GGUF file (float32)

    model, tok = smollm.hf_model_and_tokenizer()
    tok.padding_side = "left"
    model.generation_config.eos_token_id = None
    batch = tok(prompts, return_tensors="pt", padding=True)
    model.generate(**tok(prompts[:2], return_tensors="pt", padding=True), max_new_tokens=4, do_sample=False)
    start = time.perf_counter()
    with torch.inference_mode():
        out = model.generate(**batch, max_new_tokens=output_len, min_new_tokens=output_len, do_sample=False,
                             pad_token_id=tok.pad_token_id or 0)
    elapsed = time.perf_counter() - start
    return elapsed, (out.shape[1] - batch["input_ids"].shape[1]) * len(prompts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-prompts", type=int, default=32)
    parser.add_argument("--output-len", type=int, default=64)
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "cpu_smollm2_vs_hf.json"))
    args = parser.parse_args()
    prompts = make_prompts(args.num_prompts)
    p_time, p_tokens = time_pagoda(prompts, args.output_len)
    h_time, h_tokens = time_hf(prompts, args.output_len)
    result = {
        "workload": f"{args.num_prompts} prompts x {args.output_len} new tokens, greedy, float32, SmolLM2-135M-Instruct",
        "machine": f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} torch threads",
        "torch": torch.__version__, "transformers": transformers.__version__,
        "pagoda": {"seconds": round(p_time, 3), "tokens": p_tokens, "tokens_per_s": round(p_tokens / p_time, 1)},
        "hf_generate": {"seconds": round(h_time, 3), "tokens": h_tokens, "tokens_per_s": round(h_tokens / h_time, 1)},
    }
    result["ratio_pagoda_over_hf"] = round(result["pagoda"]["tokens_per_s"] / result["hf_generate"]["tokens_per_s"], 2)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
