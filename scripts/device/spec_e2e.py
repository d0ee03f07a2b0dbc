"""Speculative decoding end to end (issue 16, GPU run part a): the n-gram proposer on real weights.

The SmolLM2-135M-Instruct GGUF (the embedded default, or ``--model PATH.gguf``) with the n-gram
proposer (k = 4) against no speculation, greedy: a prompt-copy workload (the model is asked to
repeat a given text: much to copy) and a free-writing one (little to copy: back-off), at batch 1
and 8. Per workload, batch and mode: output tokens/s, the mean acceptance length (tokens per
verify round) and how many requests gave the same tokens as without speculation. Results go to
``$OUT/spec_e2e.json``.

    python3 scripts/device/spec_e2e.py --model /tmp/pagoda_model/SmolLM2-135M-Instruct.Q4_1.gguf  # GPU
    python scripts/device/spec_e2e.py --tiny        # CPU smoke run: short outputs, batch 1 and 2
(scripts/device/spec_e2e.sh runs it on the GPU machine from the carried model parts.)
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch

SPEC = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 2}

TEXTS = [
    "The lighthouse keeper climbed the spiral stairs every evening at dusk, carrying a can of oil and a cloth "
    "for the great lens. Ships passing the headland never saw him, only the steady beam that swept across the "
    "water every twelve seconds, warning them away from the rocks below the cliff.",
    "To bake the bread, mix four cups of flour with a spoon of salt and a packet of yeast. Add warm water "
    "slowly until the dough holds together, then knead it for ten minutes on a floured table. Leave it covered "
    "in a warm place for an hour, shape it into a loaf, and bake it until the crust sounds hollow.",
    "The committee met on Tuesday to review the budget for the new library. After a long discussion about "
    "the cost of the roof and the size of the reading room, the members agreed to delay the vote until the "
    "architect could present a second plan with fewer windows and a smaller car park.",
    "Rivers carry sand and silt from the mountains to the sea. Where the current slows down near the coast, "
    "the heavier grains settle first and the finest mud travels farthest, so over thousands of years a delta "
    "grows outward in the shape of a fan, split by channels that shift after every flood.",
    "Our train left the station twenty minutes late because of a signal failure near the bridge. The "
    "conductor apologised twice, the coffee trolley ran out of milk before the first stop, and by the time we "
    "reached the coast the sun had already set behind the hills on the far side of the bay.",
    "A good password is long, easy to remember and hard to guess. Instead of replacing letters with numbers, "
    "join four or five unrelated words into a phrase, never reuse it on another website, and keep a written "
    "copy in a safe place in case you forget it after a long holiday.",
    "The orchestra tuned their instruments while the audience found their seats. When the lights dimmed, the "
    "conductor raised her baton, waited for the last cough to fade, and began the slow opening of the "
    "symphony with a single note from the oboe that seemed to hang in the air for a long time.",
    "Every spring the village holds a market on the square in front of the old church. Farmers bring cheese, "
    "eggs and honey, children sell lemonade from folding tables, and a brass band plays in the afternoon "
    "until the baker closes his stall and the first drops of rain send everyone home.",
]
TOPICS = ["a dragon who is afraid of heights", "the history of the bicycle", "why the sky is blue",
          "a day in the life of a city bus driver", "how to plant tomatoes", "the first trip to the moon",
          "a robot learning to paint", "the rules of chess"]


def workloads() -> dict[str, list[list[dict]]]:
    """Chat conversations: ``copy`` (repeat a text word for word) and ``free`` (an essay)."""
    copy = [[{"role": "user", "content": f"Repeat the following text exactly, word for word:\n\n{text}"}]
            for text in TEXTS]
    free = [[{"role": "user", "content": f"Write a short essay about {topic}."}] for topic in TOPICS]
    return {"copy": copy, "free": free}


def timed_run(llm, chats: list, batch: int, params) -> tuple[dict, list[list[int]]]:
    """Run ``chats`` ``batch`` at a time; the row of figures and each request's tokens."""
    from pagoda.bench.common import spec_decode_summary

    before = llm.engine.stats
    start = time.perf_counter()
    outputs = []
    for i in range(0, len(chats), batch):
        outputs += llm.chat(chats[i : i + batch], params, use_tqdm=False)
    seconds = time.perf_counter() - start
    tokens = [list(o.outputs[0].token_ids) for o in outputs]
    total = sum(map(len, tokens))
    row = {"requests": len(chats), "output_tokens": total, "seconds": seconds, "output_tokens_per_s": total / seconds,
           "texts": [o.outputs[0].text[:80] for o in outputs[:2]]}
    summary = spec_decode_summary(llm, before)
    if summary is not None:
        row["speculative"] = summary
    return row, tokens


def run_mode(name: str, config: dict | None, args, result: dict, tokens: dict) -> None:
    """Every workload and batch size with one engine (no speculation, or the n-gram proposer)."""
    from pagoda import LLM, SamplingParams

    llm = LLM(model=args.model, max_model_len=2048, max_num_seqs=max(args.batches), speculative_config=config,
              enforce_eager=args.tiny, attention_backend=args.attention_backend, kv_cache_memory=args.kv_bytes)
    loads = workloads()
    for batch in args.batches:  # warm-up: kernels compiled on first use compile here
        llm.chat(loads["copy"][:batch], SamplingParams(temperature=0, max_tokens=32), use_tqdm=False)
    params = SamplingParams(temperature=0, max_tokens=args.max_tokens)
    for workload, conversations in loads.items():
        for batch in args.batches:
            chats = conversations[: max(batch, args.requests)]
            row, tokens[workload, batch, name] = timed_run(llm, chats, batch, params)
            result.setdefault(workload, {}).setdefault(f"batch{batch}", {})[name] = row
            summary = row.get("speculative")
            accepted = f", acceptance length {summary['mean_acceptance_length']:.2f}" if summary else ""
            print(f"e2e {workload:4s} batch {batch} {name:5s}: {row['output_tokens_per_s']:.1f} tok/s{accepted}",
                  flush=True)
    del llm
    import gc

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def run_e2e(args) -> dict:
    result: dict = {"model": args.model or "smollm2-135m-instruct (embedded)", "max_tokens": args.max_tokens,
                    "spec": SPEC}
    tokens: dict = {}
    for name, config in (("none", None), ("ngram", SPEC)):
        run_mode(name, config, args, result, tokens)
    for workload in ("copy", "free"):
        for batch in args.batches:
            rows = result[workload][f"batch{batch}"]
            rows["speedup"] = rows["ngram"]["output_tokens_per_s"] / rows["none"]["output_tokens_per_s"]
            same = sum(a == b for a, b in zip(tokens[workload, batch, "none"], tokens[workload, batch, "ngram"]))
            rows["same_tokens_as_none"] = f"{same}/{len(tokens[workload, batch, 'none'])}"
            print(f"e2e {workload} batch {batch}: ngram / none = {rows['speedup']:.2f}x, "
                  f"same tokens {rows['same_tokens_as_none']}", flush=True)
    return result


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default=None, help="a .gguf file or model folder (default: the embedded SmolLM2-135M)")
    p.add_argument("--max-tokens", type=int, default=256, help="new tokens per request")
    p.add_argument("--requests", type=int, default=8, help="requests per workload (batch 1 runs them one by one)")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(p)
    p.add_argument("--tiny", action="store_true", help="CPU smoke run: short outputs, 2 requests, batch 1 and 2")
    p.add_argument("--batches", default="1,8")
    p.add_argument("--attention-backend", default="auto")
    p.add_argument("--out", default=os.environ.get("OUT", "out"))
    args = p.parse_args()
    args.batches = [int(b) for b in args.batches.split(",")]
    args.kv_bytes = 4 << 30
    if args.tiny:
        args.max_tokens, args.requests, args.batches, args.kv_bytes = 24, 2, [1, 2], 256 << 20
    write_result({**header(args.tiny), "e2e": run_e2e(args)}, Path(args.out) / "spec_e2e.json")


def header(tiny: bool) -> dict:
    """What every result file starts with: the device and torch."""
    return {"device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
            "torch": torch.__version__, "tiny": tiny}


def write_result(result: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
