"""Speculation's cost-aware back-off on a GPU (issue 16): n-gram (k = 4) against none, dummy weights.

For each model (dummy weights from benchmarks/configs: SmolLM2-135M, whose steps are host-bound,
and Llama-3.1-8B, whose steps read 16 GB of weights) and each mode (no speculation, the n-gram
proposer with k = 4), one process builds the engine and times output tokens/s at batch 1 and 8
on two workloads of random 128-token prompts, where the dummy model writes freely:

- ``repeat``: greedy. A dummy model soon repeats a token; the n-gram lookup then drafts one token
  per round (its latest occurrence has one token after it), which is accepted: every step verifies
  drafts and gains one token per request, little of the k = 4 it could (the regime of issue 16's
  free-writing batch 8, which ran at 0.58x: rounds accept something, so no request pauses).
- ``sparse``: seeded sampling (temperature 1, top-k 2): drafts now and then, a token or two accepted.

Each batch size runs ``--rounds`` groups of ``batch`` requests after a warm-up group (the engine,
and its goodput controller, carry on from one group to the next as a server would). The driver
prints ``ngram / none`` per model, workload and batch, with the steps the controller ran without
drafts, its measured goodput ratio, the acceptance length and how many outputs equal the run
without speculation. Results: ``$OUT/spec_backoff.json`` (and one file per process).

    python3 scripts/device/spec_backoff.py                 # GPU (scripts/device/spec_backoff.sh)
    python scripts/device/spec_backoff.py --tiny           # CPU smoke run: a tiny random Llama, short, batch 1 and 2
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MODELS = {"smollm2-135m": REPO / "benchmarks/configs/smollm2-135m", "llama-3.1-8b": REPO / "benchmarks/configs/llama-3.1-8b"}
MODES = {"none": None, "ngram": {"method": "ngram", "num_speculative_tokens": 4}}
WORKLOADS = ("repeat", "sparse")
PROMPT_LEN = 128


def sampling(workload: str, max_tokens: int, seed: int):
    from pagoda import SamplingParams

    if workload == "repeat":
        return SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True)
    return SamplingParams(temperature=1.0, top_k=2, seed=seed, max_tokens=max_tokens, ignore_eos=True)


def timed_group(llm, prompts: list[list[int]], workload: str, max_tokens: int) -> tuple[float, list[list[int]]]:
    """Seconds to generate for ``prompts`` at once; their tokens."""
    from pagoda.bench.common import synchronize

    params = [sampling(workload, max_tokens, seed=i) for i in range(len(prompts))]
    device = llm.engine.core.parts.platform.device()
    synchronize(device)
    start = time.perf_counter()
    outputs = llm.generate(prompts, params, use_tqdm=False)
    synchronize(device)
    return time.perf_counter() - start, [list(o.outputs[0].token_ids) for o in outputs]


def run_one(args) -> dict:
    """One engine (model, mode): every workload and batch size."""
    from pagoda import LLM
    from pagoda.bench.common import random_prompts, spec_decode_summary

    llm = LLM(model=args.model, load_format="dummy", skip_tokenizer_init=True, max_model_len=1024,
              max_num_seqs=max(args.batches), speculative_config=MODES[args.mode], enforce_eager=args.tiny,
              attention_backend=args.attention_backend, kv_cache_memory=args.kv_bytes)
    vocab, name = llm.engine.core.parts.hf_config.vocab_size, Path(args.model).name
    rows = []
    for workload in WORKLOADS:
        for batch in args.batches:
            prompts = random_prompts(batch * (args.rounds + 1), PROMPT_LEN, vocab, seed=batch)
            timed_group(llm, prompts[:batch], workload, args.warmup_tokens)  # compiles; the controller starts
            before, seconds, tokens = llm.engine.stats, 0.0, []
            for i in range(1, args.rounds + 1):
                took, out = timed_group(llm, prompts[i * batch : (i + 1) * batch], workload, args.max_tokens)
                seconds, tokens = seconds + took, tokens + out
            row = {"workload": workload, "batch": batch, "seconds": seconds,
                   "tokens_per_s": sum(map(len, tokens)) / seconds, "tokens": tokens}
            summary = spec_decode_summary(llm, before)
            if summary is not None:
                row["speculative"] = summary
            print(f"{name} {args.mode:5s} {workload:6s} batch {batch}: {row['tokens_per_s']:,.0f} tok/s", flush=True)
            rows.append(row)
    return {"model": name, "mode": args.mode, "rows": rows}


def compare(results: list[dict]) -> list[dict]:
    """ngram / none per model, workload and batch."""
    by_key = {(r["model"], r["mode"], row["workload"], row["batch"]): row for r in results for row in r["rows"]}
    out = []
    for (model, mode, workload, batch), spec in by_key.items():
        plain = by_key.get((model, "none", workload, batch))
        if mode == "none" or plain is None:
            continue
        s = spec.get("speculative", {})
        same = sum(a == b for a, b in zip(plain["tokens"], spec["tokens"]))
        out.append({"model": model, "workload": workload, "batch": batch,
                    "ratio": spec["tokens_per_s"] / plain["tokens_per_s"], "none_tokens_per_s": plain["tokens_per_s"],
                    "ngram_tokens_per_s": spec["tokens_per_s"], "steps": s.get("steps"),
                    "suspended_steps": s.get("suspended_steps"), "goodput_ratio": s.get("goodput_ratio"),
                    "mean_acceptance_length": s.get("mean_acceptance_length"),
                    "same_tokens": f"{same}/{len(plain['tokens'])}"})
        print(f"backoff {model} {workload:6s} batch {batch}: ngram / none = {out[-1]['ratio']:.2f}x "
              f"(suspended {s.get('suspended_steps')}/{s.get('steps')} steps, goodput ratio "
              f"{s.get('goodput_ratio', 0):.2f}, acceptance length {s.get('mean_acceptance_length', 0):.2f}, "
              f"same tokens {out[-1]['same_tokens']})", flush=True)
    return out


def drive(args) -> None:
    """One child process per (model, mode); then the ratios."""
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = []
    models = {"tiny-llama": tiny_model(out / "tiny-llama")} if args.tiny else {name: MODELS[name] for name in args.models}
    for model, folder in models.items():
        for mode in MODES:
            path = out / f"spec_backoff_{model}_{mode}.json"
            command = [sys.executable, __file__, "--one", "--model", str(folder), "--mode", mode, "--result", str(path),
                       "--batches", ",".join(map(str, args.batches)), "--rounds", str(args.rounds),
                       "--max-tokens", str(args.max_tokens), "--attention-backend", args.attention_backend]
            if subprocess.run(command + (["--tiny"] if args.tiny else [])).returncode == 0:
                results.append(json.loads(path.read_text()))
            else:
                print(f"{model} {mode}: failed", flush=True)
    summary = {"device": _device(), "models": list(models), "modes": MODES, "comparison": compare(results)}
    (out / "spec_backoff.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(f"wrote {out / 'spec_backoff.json'}")


def tiny_model(folder: Path) -> Path:
    """A tiny random Llama's config (for --tiny)."""
    import transformers

    transformers.LlamaConfig(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                             architectures=["LlamaForCausalLM"]).save_pretrained(folder)
    return folder


def _device() -> str:
    import torch

    return torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default=",".join(MODELS), help="comma-separated, of: " + ", ".join(MODELS))
    p.add_argument("--batches", default="1,8")
    p.add_argument("--rounds", type=int, default=3, help="timed groups of `batch` requests per batch size")
    p.add_argument("--max-tokens", type=int, default=256, help="new tokens per request")
    p.add_argument("--attention-backend", default="auto")
    p.add_argument("--tiny", action="store_true", help="CPU smoke run: a tiny random Llama, 24 tokens, batch 1 and 2")
    p.add_argument("--out", default=os.environ.get("OUT", "out"))
    p.add_argument("--one", action="store_true", help=argparse.SUPPRESS)  # a child: one (model, mode)
    p.add_argument("--model", help=argparse.SUPPRESS)  # its config folder
    p.add_argument("--mode", choices=list(MODES), help=argparse.SUPPRESS)
    p.add_argument("--result", help=argparse.SUPPRESS)
    args = p.parse_args()
    args.models = args.models.split(",")
    args.batches = [int(b) for b in args.batches.split(",")]
    args.kv_bytes, args.warmup_tokens = 4 << 30, 32
    if args.tiny:
        args.batches, args.rounds, args.max_tokens = [1, 2], 1, 24
        args.kv_bytes, args.warmup_tokens = 128 << 20, 8
    if args.one:
        Path(args.result).write_text(json.dumps(run_one(args)) + "\n")
    else:
        drive(args)


if __name__ == "__main__":
    main()
