"""Issue 16, measured through the engine: one speculative iteration (the verify step and the draft
round after it, with every host step between) against the plain decode step, at batch 1.

The pair of spec_costs.py (Llama-3.1-8B target, Llama-3.2-1B-config draft, dummy bf16 weights):
their drafts are almost never accepted, so every iteration yields one token and ``generate`` of
``n`` tokens runs ``n - 1`` iterations; speculation stays on (``"backoff": false``). Each
iteration costs the same whatever is accepted, but for the draft's first step, which feeds two
known tokens after all were accepted: a round queued behind the verify step feeds two slots
always, and one after the read feeds two only then (spec_costs.py times both). So an acceptance
length ``L`` gives ``S(L) = L x decode step / iteration``.
Prints and writes ``spec_iteration.json``: decode step, iteration, their ratio and S(1..k+1), with
``PAGODA_DRAFT_PRELAUNCH`` as set (run it with 1 and 0 for the round queued behind the verify step
or after the read).

    python3 scripts/device/spec_iteration.py --k 2 --out $OUT/prelaunch1
    python scripts/device/spec_iteration.py --tiny        # CPU smoke run on tiny random models
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import torch

import spec_costs


def seconds_per_token(llm, prompt: list[int], tokens: int) -> float:
    """(time of ``tokens`` tokens - time of 1) / (tokens - 1), best of three (the prefill cancels)."""
    from pagoda import SamplingParams

    def timed(n: int) -> float:
        llm.engine.core.kv_cache.reset_prefix_cache()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        start = time.perf_counter()
        llm.generate([prompt], SamplingParams(temperature=0, max_tokens=n, ignore_eos=True), use_tqdm=False)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        return time.perf_counter() - start

    timed(4)
    return min((timed(tokens) - timed(1)) / (tokens - 1) for _ in range(3))


def measure(model: str, draft: str | None, args) -> tuple[float, dict]:
    llm = spec_costs.build_engine(model, args.kv_bytes, args, draft)
    if draft is not None:
        llm.engine.core.speculator.backoff.enabled = False  # keep drafting though nothing is accepted
        llm.engine.core.speculator.goodput.enabled = False
    prompt = [(13 * i) % 300 + 10 for i in range(args.context)]  # in every vocabulary here
    per_token = seconds_per_token(llm, prompt, args.tokens)
    stats = llm.engine.stats
    llm.shutdown()
    return per_token, {"drafts": stats.spec_num_draft_tokens, "accepted": stats.spec_num_accepted_tokens}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--k", type=int, default=2)
    p.add_argument("--context", type=int, default=512)
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--attention-backend", default="triton")
    p.add_argument("--tiny", action="store_true")
    p.add_argument("--out", default=os.environ.get("OUT", "out"))
    args = p.parse_args()
    args.batches, args.max_model_len, args.kv_bytes = [1], 4096, 8 << 30
    target, draft = str(spec_costs.TARGET), str(spec_costs.DRAFT)
    if args.tiny:
        target, draft = spec_costs.tiny_models(Path(tempfile.mkdtemp(prefix="spec-iteration-")))
        args.max_model_len, args.context, args.tokens, args.kv_bytes = 256, 48, 16, 16 << 20
        args.attention_backend = "auto"
    decode, _ = measure(target, None, args)
    iteration, counts = measure(target, draft, args)
    ratio = iteration / decode
    result = {"k": args.k, "prelaunch": os.environ.get("PAGODA_DRAFT_PRELAUNCH", "1"), "decode_ms": decode * 1e3,
              "iteration_ms": iteration * 1e3, "iteration_over_decode": ratio, **counts,
              "speedup": {f"S({n})": n / ratio for n in range(1, args.k + 2)}}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "spec_iteration.json").write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
