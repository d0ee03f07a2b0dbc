"""Speculative decoding's costs on a GPU (issue 16), and what they predict.

Two parts, both written to $OUT/spec_costs.json (OUT defaults to ./out):

costs  Llama-3.1-8B (dummy bf16 weights, benchmarks/configs/llama-3.1-8b): one engine step through
       the model runner (stage inputs, replay the CUDA graph, logits, sampling, copy to the host),
       for the plain 1-token decode step and for verify steps of q = k + 1 query tokens per request
       (q = 2..5), at batch 1 and 8, each request with CONTEXT tokens of context; the graph replay
       alone is timed too. Then the draft side, a Llama-3.2-1B-config draft model
       (benchmarks/configs/llama-3.2-1b, dummy bf16, graphed) attached as the target's ``draft``
       proposer: whole draft rounds (``DraftProposer.propose``: k steps, each one graph replay of
       forward + LM head + argmax, one copy in, one read) after a round that accepted one draft
       and after one that accepted all (two known tokens: the first step has two query slots),
       with the host time until the round's first step is launched and the same k replays back
       to back without host work (the floor); and, for comparison, the draft's plain runner step
       (launch + result, its own decode graphs). From these, the speed-up of each mean acceptance
       length L (tokens emitted per verify round, 1 + accepted drafts):

           S(L) = L * T_decode / (T_verify(k + 1) + T_propose(k))

       T_propose = 0 for the n-gram proposer (a host lookup), the measured round for the draft
       model (printed per draft step: round / k).

e2e    scripts/device/spec_e2e.py: SmolLM2-135M with the n-gram proposer (k = 4) on a
       prompt-copy and a free-writing workload, batch 1 and 8, against no speculation.

On the GPU machine (see scripts/device/spec_costs.sh, which installs the carried wheels first):
    python3 scripts/device/spec_costs.py --mode all
On CPU, a smoke run of both parts with tiny random models and short outputs:
    python scripts/device/spec_costs.py --tiny
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import spec_e2e  # noqa: E402 - the end-to-end part, beside this script

REPO = Path(__file__).resolve().parents[2]
TARGET = REPO / "benchmarks" / "configs" / "llama-3.1-8b"
DRAFT = REPO / "benchmarks" / "configs" / "llama-3.2-1b"
GiB = 1 << 30

# -- costs ---------------------------------------------------------------------------------------
def build_engine(model: str, kv_bytes: int, args, draft: str | None):
    """The target with the draft proposer (its verify graphs for q = k + 1, the draft's runner)."""
    from pagoda import LLM

    spec = {"method": "draft", "model": draft, "num_speculative_tokens": args.k} if draft else None
    return LLM(model=model, load_format="dummy", skip_tokenizer_init=True, max_model_len=args.max_model_len,
               kv_cache_memory=kv_bytes, max_num_seqs=max(args.batches), speculative_config=spec,
               enforce_eager=args.tiny, attention_backend=args.attention_backend)


def step_batch(kv_cache, batch: int, q: int, context: int, vocab: int, seed: int):
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
        assert kv_cache.allocate_slots(req, q), "the KV cache is too small for the cost batch"
        requests.append(req)
    tables = [kv_cache.block_ids(r.request_id) for r in requests]
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


def measure_steps(runner, kv_cache, vocab: int, query_lens: list[int], args, seed: int) -> list[dict]:
    """Per (batch, q): the runner step (launch + result) and the forward alone, in ms."""
    device, batches = runner.device, args.batches
    rows = []
    for q in query_lens:
        graphs = _verify_graphs_for(runner, q, batches, args.max_model_len) if q > 1 else runner.graphs
        for batch in batches:
            out, tables, requests = step_batch(kv_cache, batch, q, args.context, vocab, seed + 97 * q + batch)
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
                kv_cache.free(req)
            print(f"  batch {batch:2d}  q={q}  step {row['step_ms']:.3f} ms"
                  + (f"  forward {row['forward_ms']:.3f} ms" if "forward_ms" in row else "  (eager)"), flush=True)
    return rows


def measure_draft_rounds(proposer, batches: list[int], args, vocab: int) -> list[dict]:
    """Per (batch, k, accepted): ``DraftProposer.propose`` in a steady state, in ms per round and
    per draft (round / k). Each round follows one where the target accepted one draft
    (``accepted = "one"``: the draft is one token behind) or all ``k`` (``"all"``: two behind).
    Also, per round: the host time from ``propose`` until its first step is launched (the device
    idles meanwhile) and, where the steps are graphs, the same steps replayed back to back with
    no host work (forward, LM head and argmax of each: the round's floor)."""
    from pagoda.interfaces.proposer import ProposalInput

    device, rows, steps = proposer.runner.device, [], proposer.chain.steps
    launched = _first_step_clock(steps)
    for batch in batches:
        for k in range(1, args.k + 1):
            for accepted in ("one", "all"):
                g = torch.Generator().manual_seed(1000 * batch + 10 * k)
                seqs = {f"round-{batch}-{k}-{accepted}-{i}": torch.randint(0, vocab, (args.context,), generator=g).tolist()
                        for i in range(batch)}
                proposal = proposer.propose([ProposalInput(r, tuple(t)) for r, t in seqs.items()], k)  # the prompts
                host_ms: list[float] = []

                def one_round() -> None:
                    nonlocal proposal
                    for (rid, tokens), drafts in zip(seqs.items(), proposal.token_ids):
                        tokens += (drafts[:1] if accepted == "one" else drafts) + [int(torch.randint(0, vocab, (1,)))]
                    inputs = [ProposalInput(r, tuple(t)) for r, t in seqs.items()]
                    launched.clear()
                    start = time.perf_counter()
                    proposal = proposer.propose(inputs, k)
                    host_ms.append((launched[0] - start) * 1e3)

                ms = timed(one_round, args.iters, device) * 1e3
                row = {"batch": batch, "k": k, "accepted": accepted, "round_ms": ms, "per_step_ms": ms / k,
                       "host_to_first_step_ms": sorted(host_ms)[len(host_ms) // 2]}
                size = steps.size_for(batch, 1)
                if size is not None:  # graphs (on the last round's inputs): two query slots first after all accepted
                    first_q = 2 if accepted == "all" or k == 1 else 1  # k = 1: "one" is all
                    row["replays_ms"] = timed(lambda: _replay_round(steps, size, first_q, k), args.iters, device) * 1e3
                for rid in seqs:
                    proposer.release(rid)
                rows.append(row)
                print(f"  batch {batch:2d}  k={k}  after {accepted:3s} accepted: round {ms:.3f} ms, "
                      f"{ms / k:.3f} ms per draft; host to first step {row['host_to_first_step_ms']:.3f} ms"
                      + (f"; the steps' replays alone {row['replays_ms']:.3f} ms" if "replays_ms" in row else ""),
                      flush=True)
    return rows


def _first_step_clock(steps) -> list[float]:
    """Wrap ``DraftSteps.run``: the list gets the time of each step's launch (cleared per round)."""
    clock, run = [], steps.run

    def timed_run(*a, **kw):
        clock.append(time.perf_counter())
        return run(*a, **kw)

    steps.run = timed_run
    return clock


def _replay_round(steps, size: int, first_q: int, k: int) -> None:
    with steps.runner.platform.inference_context():
        steps.replay(size, first_q)
        for _ in range(k - 1):
            steps.replay(size, 1)


def _verify_graphs_for(runner, q: int, batches: list[int], max_model_len: int):
    """Verify graphs of ``q`` query tokens (the engine's own for q = k + 1; others captured here)."""
    if runner.graphs is None:  # no device graphs (CPU, --enforce-eager)
        return None
    if runner.verify_graphs is not None and runner.verify_graphs.q == q:
        return runner.verify_graphs
    from pagoda.spec_decode.verify_graphs import VerifyGraphs

    graphs = VerifyGraphs(runner.model, runner.attention, runner.platform, runner.kv_caches, runner.block_size, q,
                          max_model_len, max(batches))
    graphs.sizes = sorted({next(s for s in graphs.sizes if s >= b) for b in batches})
    graphs.capture()
    runner.verify_graphs = graphs  # the runner picks the graphs whose q fits the step
    return graphs


def predictions(decode_ms: float, verify_ms: float, propose_ms: float, k: int) -> dict[str, float]:
    """S(L) for L = 1 .. k + 1 tokens per round."""
    return {str(L): L * decode_ms / (verify_ms + propose_ms) for L in range(1, k + 2)}


def run_costs(args) -> dict:
    target, draft = (args.tiny_target, args.tiny_draft) if args.tiny else (str(TARGET), str(DRAFT))
    print(f"costs: target {target}, draft {draft}", flush=True)
    llm = build_engine(target, args.target_kv, args, draft)
    core = llm.engine.core
    proposer = core.speculator.proposer
    query_lens = sorted({1, *range(2, args.k + 2)})
    vocab = core.parts.hf_config.vocab_size
    steps = measure_steps(core.runner, core.kv_cache, vocab, query_lens, args, seed=1)
    print("costs: the draft's runner step (launch + result; for comparison: rounds do not use it)", flush=True)
    if core.runner.graphs is not None and proposer.runner.graphs is None:  # its own decode graphs, as a peer
        proposer.runner.capture_decode_graphs(args.max_model_len, max(args.batches))
    draft_steps = measure_steps(proposer.runner, proposer.kv_cache, vocab, [1], args, seed=2)
    print("costs: draft rounds (DraftProposer.propose)", flush=True)
    rounds = measure_draft_rounds(proposer, args.batches, args, vocab)
    device = core.parts.platform.device()
    del llm, core, proposer
    _free(device)
    result = {"context": args.context, "k": args.k, "target_steps": steps, "draft_steps": draft_steps,
              "draft_rounds": rounds, "formula": FORMULA, "predictions": {}}
    print(f"\nPredicted speed-up S(L) (L = tokens per verify round): {FORMULA}", flush=True)
    for batch in args.batches:
        for k in range(1, args.k + 1):
            result["predictions"][f"batch{batch}_k{k}"] = predict(steps, draft_steps, rounds, batch, k)
    return result


FORMULA = ("S(L) = L * T_decode / (T_verify(k+1) + T_propose(k)); T_propose = 0 (ngram), the measured draft "
           "round (draft_1b: after one accepted draft for L <= k, after all for L = k + 1), or k runner steps "
           "(draft_1b_runner_steps: the draft's plain engine step, for comparison)")


def predict(steps: list[dict], draft_steps: list[dict], rounds: list[dict], batch: int, k: int) -> dict:
    """S(L) at ``batch`` and ``k`` with each proposer's cost, printed and returned."""
    t = {r["query_len"]: r["step_ms"] for r in steps if r["batch"] == batch}
    d = next(r["step_ms"] for r in draft_steps if r["batch"] == batch)
    mine = {r["accepted"]: r for r in rounds if r["batch"] == batch and r["k"] == k}
    rd = {a: r["round_ms"] for a, r in mine.items()}
    ngram = predictions(t[1], t[k + 1], 0.0, k)
    drafted = predictions(t[1], t[k + 1], rd["one"], k)
    drafted[str(k + 1)] = predictions(t[1], t[k + 1], rd["all"], k)[str(k + 1)]
    runner_steps = predictions(t[1], t[k + 1], k * d, k)
    out = {"verify_over_decode": t[k + 1] / t[1], "draft_step_over_decode": rd["one"] / k / t[1],
           "draft_step_over_decode_after_all_accepted": rd["all"] / k / t[1],
           "draft_runner_step_over_decode": d / t[1],
           "ngram": ngram, "draft_1b": drafted, "draft_1b_runner_steps": runner_steps}
    floor = ""
    if all("replays_ms" in r for r in mine.values()):  # the rounds' steps with no host work: the floor
        out["draft_replay_over_decode"] = mine["one"]["replays_ms"] / k / t[1]
        out["draft_1b_replays_only"] = predictions(t[1], t[k + 1], mine["one"]["replays_ms"], k)
        out["draft_1b_replays_only"][str(k + 1)] = predictions(t[1], t[k + 1], mine["all"]["replays_ms"], k)[str(k + 1)]
        floor = f", replays alone {out['draft_replay_over_decode']:.3f}"
    print(f"  batch {batch} k={k}: verify/decode {t[k + 1] / t[1]:.3f}, draft step/decode {rd['one'] / k / t[1]:.3f} "
          f"(after all accepted {rd['all'] / k / t[1]:.3f}{floor}; runner step {d / t[1]:.3f}) | ngram "
          + " ".join(f"L{L}={s:.2f}x" for L, s in ngram.items())
          + " | draft-1B " + " ".join(f"L{L}={s:.2f}x" for L, s in drafted.items()), flush=True)
    return out


def _free(device: torch.device) -> None:
    import gc

    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


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
    p.add_argument("--attention-backend", default="auto")
    p.add_argument("--out", default=os.environ.get("OUT", "out"))
    spec_e2e.add_arguments(p)
    args = p.parse_args()
    args.batches = [int(b) for b in args.batches.split(",")]
    args.max_model_len, args.target_kv, args.kv_bytes = 4096, 8 * GiB, 4 * GiB
    if args.tiny:
        folder = Path(tempfile.mkdtemp(prefix="spec-costs-"))
        args.tiny_target, args.tiny_draft = tiny_models(folder)
        args.context, args.iters, args.max_tokens, args.requests = 48, 3, 24, 2
        args.batches = [1, 2]
        args.max_model_len, args.target_kv, args.kv_bytes = 256, 16 << 20, 256 << 20
    result = spec_e2e.header(args.tiny)
    if args.mode in ("costs", "all"):
        result["costs"] = run_costs(args)
    if args.mode in ("e2e", "all"):
        result["e2e"] = spec_e2e.run_e2e(args)
    spec_e2e.write_result(result, Path(args.out) / "spec_costs.json")


if __name__ == "__main__":
    main()
