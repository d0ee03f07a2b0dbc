"""One engine's offline run for the CPU comparison: run by run.py in the engine's own environment (Pagoda's,
vLLM's CPU build's, or HF transformers'), so it imports nothing of Pagoda's at module level.

Prints one JSON line: load, warm-up and timed seconds, tokens, and the first prompt's greedy tokens (the
engines should agree on most of them: the same float32 weights)."""

from __future__ import annotations

import argparse
import json
import sys
import time

WARMUP_PROMPTS, WARMUP_TOKENS = 8, 8  # the same warm-up for every engine: the first prompts, a few tokens


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--engine", choices=["pagoda", "vllm", "hf"], required=True)
    p.add_argument("--model", required=True, help="an HF folder")
    p.add_argument("--prompts", required=True, help="a JSON file: a list of token-id lists")
    p.add_argument("--output-len", type=int, required=True)
    p.add_argument("--dtype", default="float32")
    p.add_argument("--max-model-len", type=int, default=2048)
    p.add_argument("--max-num-seqs", type=int, default=256)
    p.add_argument("--max-num-batched-tokens", type=int, default=8192)
    return p.parse_args(argv)


def build(args: argparse.Namespace):
    """(generate(prompts, max_tokens) -> list of token-id lists, engine version)."""
    return build_hf(args) if args.engine == "hf" else build_llm(args)


def build_llm(args):
    """Pagoda's and vLLM's offline API: the same ``LLM`` and ``SamplingParams`` names and arguments."""
    import importlib

    engine = importlib.import_module(args.engine)
    llm = engine.LLM(model=args.model, dtype=args.dtype, max_model_len=args.max_model_len,
                     max_num_seqs=args.max_num_seqs, max_num_batched_tokens=args.max_num_batched_tokens, seed=0)

    def generate(prompts, max_tokens):
        params = engine.SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True)
        outs = llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
        return [list(o.outputs[0].token_ids) for o in outs]

    return generate, engine.__version__


def build_hf(args):
    import torch
    import transformers
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=getattr(torch, args.dtype)).eval()

    def generate(prompts, max_tokens):
        width = max(len(p) for p in prompts)
        ids = torch.tensor([[0] * (width - len(p)) + p for p in prompts])  # left padding, masked
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
        with torch.inference_mode():
            out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max_tokens,
                                 min_new_tokens=max_tokens, do_sample=False, pad_token_id=0)
        return out[:, width:].tolist()

    return generate, transformers.__version__


def main(argv: list[str]) -> None:
    args = parse_args(argv)
    with open(args.prompts) as f:
        prompts = json.load(f)
    start = time.perf_counter()
    generate, version = build(args)
    loaded = time.perf_counter()
    generate(prompts[:WARMUP_PROMPTS], WARMUP_TOKENS)
    warm = time.perf_counter()
    tokens = generate(prompts, args.output_len)
    done = time.perf_counter()
    output_tokens = sum(len(t) for t in tokens)
    elapsed = done - warm
    print(json.dumps({
        "engine": args.engine, "version": version, "load_s": loaded - start, "warmup_s": warm - loaded,
        "elapsed_s": elapsed, "num_prompts": len(prompts), "output_tokens": output_tokens,
        "requests_per_s": len(prompts) / elapsed, "output_tokens_per_s": output_tokens / elapsed,
        "total_tokens_per_s": (output_tokens + sum(len(p) for p in prompts)) / elapsed,
        "first_tokens": tokens[0],
    }), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
