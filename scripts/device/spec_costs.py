"""Speculative decoding's costs on a GPU (issue 16), and what they predict.

Two parts, both written to $OUT/spec_costs.json (OUT defaults to ./out):

costs  Llama-3.1-8B (dummy bf16 weights, benchmarks/configs/llama-3.1-8b): one engine step through
       the model runner (stage inputs, replay the CUDA graph, logits, sampling, copy to the host),
       for the plain 1-token decode step and for verify steps of q = k + 1 query tokens per request
       (q = 2..5), at batch 1 and 8, each request with CONTEXT tokens of context; the graph replay
       alone is timed too. Then the 1-token decode step of a Llama-3.2-1B-config draft model
       (benchmarks/configs/llama-3.2-1b, graphed). From these, the speed-up of each mean
       acceptance length L (tokens emitted per verify round, 1 + accepted drafts):

           S(L) = L * T_decode / (T_verify(k + 1) + T_propose(k))

       T_propose = 0 for the n-gram proposer (a host lookup), k * T_draft for a draft model
       (k draft steps per round; the first is a 1-token step unless every draft was accepted).

e2e    The embedded SmolLM2-135M with the n-gram proposer (k = 4): a prompt-copy workload (the
       model is asked to repeat a given text) and a free-writing one (little to copy: back-off),
       at batch 1 and 8, greedy; output tokens/s and acceptance against no speculation.

On the GPU machine (see scripts/device/spec_costs.sh, which installs the carried wheels first):
    python3 scripts/device/spec_costs.py --mode all
On CPU, a smoke run of both parts with tiny random models and short outputs:
    python scripts/device/spec_costs.py --tiny
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[2]
TARGET = REPO / "benchmarks" / "configs" / "llama-3.1-8b"
DRAFT = REPO / "benchmarks" / "configs" / "llama-3.2-1b"
GiB = 1 << 30

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


# -- costs ---------------------------------------------------------------------------------------
def build_engine(model: str, kv_bytes: int, args, speculate: bool):
    from pagoda import LLM

    spec = {"method": "ngram", "num_speculative_tokens": args.k} if speculate else None
    return LLM(model=model, load_format="dummy", skip_tokenizer_init=True, max_model_len=args.max_model_len,
               kv_cache_memory=kv_bytes, max_num_seqs=max(args.batches), speculative_config=spec,
               enforce_eager=args.tiny, attention_backend=args.attention_backend)


def step_batch(core, batch: int, q: int, context: int, vocab: int, seed: int):
    """``batch`` running requests of ``context`` tokens, each computing its last token plus ``q - 1``
    drafts; their KV blocks allocated. Returns (SchedulerOutput, block tables, requests)."""
    from pagoda import SamplingParams
    from pagoda.engine.request import Request, RequestStatus
    from pagoda.interfaces.scheduler import SchedulerOutput

    g = torch.Generator().manual_seed(seed)
    requests = []
    for i in range(batch):
        tokens = torch.randint(0, vocab, (context + q - 1,), generator=g).tolist()
        req = Request(f"cost-{seed}-{i}", tokens[:context], SamplingParams(temperature=0, max_tokens=None),
                      status=RequestStatus.RUNNING)
        req.num_computed_tokens = context - 1
        if q > 1:
            req.add_drafts(tokens[context:])
        assert core.kv_cache.allocate_slots(req, q), "the KV cache is too small for the cost batch"
        requests.append(req)
    tables = [core.kv_cache.block_ids(r.request_id) for r in requests]
    return SchedulerOutput(requests, [q] * batch), tables, requests


def timed(fn, iters: int, device: torch.device) -> float:
    """Mean seconds of ``fn()`` over ``iters`` runs (after three warm-ups), the device synchronised."""
    for _ in range(3):
        fn()
    _sync(device)
    start = time.perf_counter()
    for _ in range(iters):
        fn()
    _sync(device)
    return (time.perf_counter() - start) / iters


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure_steps(llm, batches: list[int], query_lens: list[int], args, seed: int) -> list[dict]:
    """Per (batch, q): the runner step (launch + result) and the forward alone, in ms."""
    core = llm.engine.core
    runner, device = core.runner, core.parts.platform.device()
    vocab = core.parts.hf_config.vocab_size
    rows = []
    for q in query_lens:
        graphs = _verify_graphs_for(runner, q, batches, core) if q > 1 else runner.graphs
        for batch in batches:
            out, tables, requests = step_batch(core, batch, q, args.context, vocab, seed + 97 * q + batch)
            step = timed(lambda: runner.launch(out, tables).result(), args.iters, device)
            row = {"batch": batch, "query_len": q, "step_ms": step * 1e3, "graphed": graphs is not None}
            if graphs is not None and graphs.size_for(out) is not None:
                size = graphs.size_for(out)
                graphs.stage(out, tables, size)
                row["forward_ms"] = timed(lambda: graphs.replay(size), args.iters, device) * 1e3
            else:
                row["graphed"] = False
            rows.append(row)
            for req in requests:
                core.kv_cache.free(req)
            print(f"  batch {batch:2d}  q={q}  step {row['step_ms']:.3f} ms"
                  + (f"  forward {row['forward_ms']:.3f} ms" if "forward_ms" in row else "  (eager)"), flush=True)
    return rows


def _verify_graphs_for(runner, q: int, batches: list[int], core):
    """Verify graphs of ``q`` query tokens (the engine's own for q = k + 1; others captured here)."""
    if runner.graphs is None:  # no device graphs (CPU, --enforce-eager)
        return None
    if runner.verify_graphs is not None and runner.verify_graphs.q == q:
        return runner.verify_graphs
    from pagoda.spec_decode.verify_graphs import VerifyGraphs

    graphs = VerifyGraphs(runner.model, runner.attention, runner.platform, runner.kv_caches, runner.block_size, q,
                          core.max_model_len, max(batches))
    graphs.sizes = sorted({next(s for s in graphs.sizes if s >= b) for b in batches})
    graphs.capture()
    runner.verify_graphs = graphs  # the runner picks the graphs whose q fits the step
    return graphs


def predictions(decode_ms: float, verify_ms: float, propose_ms: float, k: int) -> dict[str, float]:
    """S(L) for L = 1 .. k + 1 tokens per round."""
    return {str(L): L * decode_ms / (verify_ms + propose_ms) for L in range(1, k + 2)}


def run_costs(args) -> dict:
    target, draft = (args.tiny_target, args.tiny_draft) if args.tiny else (str(TARGET), str(DRAFT))
    print(f"costs: target {target}", flush=True)
    llm = build_engine(target, args.target_kv, args, speculate=True)
    device = llm.engine.core.parts.platform.device()
    query_lens = sorted({1, *range(2, args.k + 2)})
    steps = measure_steps(llm, args.batches, query_lens, args, seed=1)
    del llm
    _free(device)
    print(f"costs: draft {draft}", flush=True)
    draft_llm = build_engine(draft, args.draft_kv, args, speculate=False)
    draft_steps = measure_steps(draft_llm, args.batches, [1], args, seed=2)
    del draft_llm
    _free(device)
    result = {"context": args.context, "k": args.k, "target_steps": steps, "draft_steps": draft_steps,
              "formula": "S(L) = L * T_decode / (T_verify(k+1) + T_propose); T_propose = 0 (ngram) or k * T_draft",
              "predictions": {}}
    print("\nPredicted speed-up S(L) (L = tokens per verify round):", flush=True)
    for batch in args.batches:
        t = {r["query_len"]: r["step_ms"] for r in steps if r["batch"] == batch}
        d = {r["query_len"]: r["step_ms"] for r in draft_steps if r["batch"] == batch}
        for k in range(1, args.k + 1):
            ngram = predictions(t[1], t[k + 1], 0.0, k)
            drafted = predictions(t[1], t[k + 1], k * d[1], k)
            result["predictions"][f"batch{batch}_k{k}"] = {
                "verify_over_decode": t[k + 1] / t[1], "draft_step_over_decode": d[1] / t[1],
                "ngram": ngram, "draft_1b": drafted}
            print(f"  batch {batch} k={k}: verify/decode {t[k + 1] / t[1]:.3f}, draft/decode {d[1] / t[1]:.3f} | "
                  f"ngram " + " ".join(f"L{L}={s:.2f}x" for L, s in ngram.items()) + " | draft-1B "
                  + " ".join(f"L{L}={s:.2f}x" for L, s in drafted.items()), flush=True)
    return result


def _free(device: torch.device) -> None:
    import gc

    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


# -- end to end ----------------------------------------------------------------------------------
def run_e2e(args) -> dict:
    from pagoda import LLM, SamplingParams
    from pagoda.bench.common import spec_decode_summary

    spec = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 2}
    copy = [[{"role": "user", "content": f"Repeat the following text exactly, word for word:\n\n{text}"}]
            for text in TEXTS]
    free = [[{"role": "user", "content": f"Write a short essay about {topic}."}] for topic in TOPICS]
    params = SamplingParams(temperature=0, max_tokens=args.max_tokens)
    result: dict = {"model": "SmolLM2-135M-Instruct (embedded)", "max_tokens": args.max_tokens, "spec": spec}
    for name, config in (("none", None), ("ngram", spec)):
        llm = LLM(model=None, max_model_len=2048, max_num_seqs=max(args.batches), speculative_config=config,
                  enforce_eager=args.tiny, attention_backend=args.attention_backend, kv_cache_memory=args.e2e_kv)
        for batch in args.batches:  # warm-up: kernels compiled on first use compile here
            llm.chat(copy[:batch], SamplingParams(temperature=0, max_tokens=32), use_tqdm=False)
        for workload, conversations in (("copy", copy), ("free", free)):
            for batch in args.batches:
                chats = conversations[: max(batch, args.e2e_requests)]
                before = llm.engine.stats
                start = time.perf_counter()
                outputs = []
                for i in range(0, len(chats), batch):
                    outputs += llm.chat(chats[i : i + batch], params, use_tqdm=False)
                seconds = time.perf_counter() - start
                tokens = sum(len(o.outputs[0].token_ids) for o in outputs)
                row = {"requests": len(chats), "output_tokens": tokens, "seconds": seconds,
                       "output_tokens_per_s": tokens / seconds, "texts": [o.outputs[0].text[:80] for o in outputs[:2]]}
                summary = spec_decode_summary(llm, before)
                if summary is not None:
                    row["speculative"] = summary
                result.setdefault(workload, {}).setdefault(f"batch{batch}", {})[name] = row
                accepted = f", acceptance length {summary['mean_acceptance_length']:.2f}" if summary else ""
                print(f"e2e {workload:4s} batch {batch} {name:5s}: {row['output_tokens_per_s']:.1f} tok/s{accepted}",
                      flush=True)
        del llm
        _free(torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu"))
    for workload in ("copy", "free"):
        for batch, rows in result[workload].items():
            rows["speedup"] = rows["ngram"]["output_tokens_per_s"] / rows["none"]["output_tokens_per_s"]
            print(f"e2e {workload} {batch}: ngram / none = {rows['speedup']:.2f}x", flush=True)
    return result


# -- main ----------------------------------------------------------------------------------------
def tiny_models(folder: Path) -> tuple[str, str]:
    import transformers

    for name, hidden, layers in (("target", 64, 2), ("draft", 32, 1)):
        transformers.LlamaConfig(vocab_size=512, hidden_size=hidden, intermediate_size=2 * hidden,
                                 num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                                 max_position_embeddings=512, architectures=["LlamaForCausalLM"]
                                 ).save_pretrained(folder / name)
    return str(folder / "target"), str(folder / "draft")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mode", choices=("costs", "e2e", "all"), default="all")
    p.add_argument("--tiny", action="store_true", help="CPU smoke run: tiny random models, short outputs")
    p.add_argument("--k", type=int, default=4, help="drafts per round (verify steps of k + 1 tokens)")
    p.add_argument("--context", type=int, default=512, help="tokens of context per request in the cost steps")
    p.add_argument("--batches", default="1,8")
    p.add_argument("--iters", type=int, default=50)
    p.add_argument("--max-tokens", type=int, default=256, help="e2e: new tokens per request")
    p.add_argument("--e2e-requests", type=int, default=8, help="e2e: requests per workload (batch 1 runs them one by one)")
    p.add_argument("--attention-backend", default="auto")
    p.add_argument("--out", default=os.environ.get("OUT", "out"))
    args = p.parse_args()
    args.batches = [int(b) for b in args.batches.split(",")]
    args.max_model_len, args.target_kv, args.draft_kv, args.e2e_kv = 4096, 8 * GiB, 2 * GiB, 4 * GiB
    if args.tiny:
        folder = Path(tempfile.mkdtemp(prefix="spec-costs-"))
        args.tiny_target, args.tiny_draft = tiny_models(folder)
        args.context, args.iters, args.max_tokens, args.e2e_requests = 48, 3, 24, 2
        args.batches = [1, 2]
        args.max_model_len, args.target_kv, args.draft_kv, args.e2e_kv = 256, 16 << 20, 8 << 20, 256 << 20
    result: dict = {"device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
                    "torch": torch.__version__, "tiny": args.tiny}
    if args.mode in ("costs", "all"):
        result["costs"] = run_costs(args)
    if args.mode in ("e2e", "all"):
        result["e2e"] = run_e2e(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "spec_costs.json").write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out / 'spec_costs.json'}")


if __name__ == "__main__":
    main()
