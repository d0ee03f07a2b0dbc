"""Multi-turn chats whose history the device cache cannot keep: TTFT and throughput with the host-memory KV tier
(``--kv-offload-gib``) against without it, in one run (docs/kv_offload.md).

``--conversations`` chats of ``--turns`` turns each; a chat starts with ``--history-len`` random tokens of its own,
each turn adds ``--user-len`` new tokens and the ``--output-len`` tokens the model answers (greedy, EOS ignored),
and the next turn's prompt is the whole chat so far. Every chat runs turn 1, then every chat turn 2, and so on:
between two turns of a chat all the others run theirs, so with more history than the device cache holds
(``--kv-cache-memory``) a chat's prefix is evicted before its next turn. The same workload runs twice on the same
engine settings, without the offload connector and with ``--kv-offload-gib`` (default 64): per request, TTFT is
its arrival to its first token (``RequestMetrics``: queueing included, as a turn's requests arrive together).
"Evicted" turns are those (turn 2 and later) whose baseline run found less than half their history in the
device's prefix cache; the headline is their TTFT p50 without offload over with it.

GPU (the device suite ``kvoffload``):
    python benchmarks/kv_offload_multiturn.py benchmarks/configs/llama-3.1-8b --load-format dummy \\
        --max-model-len 8192 --kv-cache-memory 17179869184 --conversations 200 --turns 10 --kv-offload-gib 64
CPU smoke run: tests/benchmarks/test_kv_offload_bench.py.
"""

from __future__ import annotations

import argparse
import dataclasses
import time

import numpy as np

from pagoda.bench.common import add_common_args, emit, synchronize
from pagoda.entrypoints.engine_args import engine_config


@dataclasses.dataclass
class Turn:
    """One request of the run: its chat, turn, history tokens, TTFT and prefix-cache hit."""

    chat: int
    turn: int
    history: int  # prompt tokens before this turn's user tokens
    ttft: float
    cached: int  # prompt tokens the device's prefix cache held


def chats(args, vocab_size: int) -> list[list[int]]:
    rng = np.random.default_rng(0)
    return [rng.integers(0, vocab_size, args.history_len).tolist() for _ in range(args.conversations)]


def run_workload(llm, args, vocab_size: int) -> tuple[list[Turn], dict]:
    """Every chat's turns, turn by turn: each request's TTFT, and the run's seconds and token counts."""
    from pagoda import SamplingParams

    rng = np.random.default_rng(1)
    params = SamplingParams(temperature=0, max_tokens=args.output_len, ignore_eos=True)
    histories, turns = chats(args, vocab_size), []
    device = llm.engine.core.parts.platform.device()
    synchronize(device)
    start = time.perf_counter()
    for turn in range(1, args.turns + 1):
        prompts = [h + rng.integers(0, vocab_size, args.user_len).tolist() for h in histories]
        outputs = llm.generate(prompts, params, use_tqdm=False)
        for chat, (history, out) in enumerate(zip(histories, outputs)):
            metrics = out.metrics
            turns.append(Turn(chat, turn, len(history), metrics.first_token_time - metrics.arrival_time,
                              out.num_cached_tokens))
        histories = [p + out.outputs[0].token_ids for p, out in zip(prompts, outputs)]
    synchronize(device)
    seconds = time.perf_counter() - start
    stats = llm.engine.core.snapshot_stats()
    return turns, {"seconds": round(seconds, 3), "prompt_tokens_computed": stats.prompt_tokens,
                   "output_tokens_per_s": round(len(turns) * args.output_len / seconds, 1),
                   "kv_loaded_blocks": stats.kv_connector_loaded_blocks,
                   "kv_saved_blocks": stats.kv_connector_saved_blocks,
                   "kv_load_failed_blocks": stats.kv_connector_load_failed_blocks}


def ttft_summary(turns: list[Turn]) -> dict:
    if not turns:
        return {"requests": 0}
    ttft = np.array([t.ttft for t in turns]) * 1000
    return {"requests": len(turns), "p50_ttft_ms": round(float(np.percentile(ttft, 50)), 2),
            "p99_ttft_ms": round(float(np.percentile(ttft, 99)), 2)}


def one_run(args, offload_gib: float) -> tuple[list[Turn], dict]:
    from pagoda import LLM

    config = engine_config(args, args.model)
    config.skip_tokenizer_init = True
    config.kv_offload_gib = offload_gib
    llm = LLM(**vars(config))
    try:
        turns, totals = run_workload(llm, args, llm.engine.core.parts.hf_config.vocab_size)
    finally:
        llm.shutdown()
    return turns, totals


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conversations", type=int, default=200)
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--history-len", type=int, default=2048, help="tokens a chat starts with")
    parser.add_argument("--user-len", type=int, default=128, help="new tokens each turn's user message adds")
    parser.add_argument("--output-len", type=int, default=64, help="tokens each turn answers")
    add_common_args(parser)
    parser.set_defaults(kv_offload_gib=64.0)
    args = parser.parse_args()
    header = {"workload": f"{args.conversations} chats x {args.turns} turns, history {args.history_len} + "
                          f"{args.user_len} per turn, {args.output_len} out",
              "model": args.model, "kv_offload_gib": args.kv_offload_gib}
    baseline, base_totals = one_run(args, 0.0)
    emit({**header, "no_offload": {**base_totals, "all": ttft_summary(baseline)}}, args.result_file)  # if cut short
    offloaded, totals = one_run(args, args.kv_offload_gib)
    evicted = {(t.chat, t.turn) for t in baseline if t.turn > 1 and t.cached < t.history / 2}
    pick = lambda turns: [t for t in turns if (t.chat, t.turn) in evicted]  # noqa: E731
    base_evicted, off_evicted = ttft_summary(pick(baseline)), ttft_summary(pick(offloaded))
    result = {
        **header,
        "no_offload": {**base_totals, "all": ttft_summary(baseline), "evicted": base_evicted},
        "offload": {**totals, "all": ttft_summary(offloaded), "evicted": off_evicted},
        "ratio_evicted_p50_ttft": (round(base_evicted["p50_ttft_ms"] / off_evicted["p50_ttft_ms"], 2)
                                   if evicted else None),
        "throughput_ratio": round(base_totals["seconds"] / totals["seconds"], 3),
    }
    emit(result, args.result_file)


if __name__ == "__main__":
    main()
