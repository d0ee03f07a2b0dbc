"""What a scheduler setting would do to a served workload, without a GPU: Pagoda's own scheduler (``fcfs``, with its
KV-cache manager and prefix caching) schedules the peers harness's requests step by step, each step's time comes
from a model of one GPU fitted to measured steps, and the replay reports what a client would see (requests/s, TTFT,
TPOT, ITL). A prediction for choosing what to measure, not a measurement (docs/performance.md).

    python -m benchmarks.scheduler_replay --workload serve,mixed,prefix --max-prefill-tokens-while-decoding 0,4096
    python -m benchmarks.scheduler_replay --workload mixed --rate 8 --long-prefill-token-threshold 0,512

Workloads are the peers harness's (benchmarks/peers/workloads.py): ``serve`` 1000 x 256/256, ``mixed`` 1000
ShareGPT-shaped lengths, ``prefix`` 500 requests over 10 shared 1024-token prefixes; all at once (``--rate inf``,
the default) or Poisson arrivals at ``--rate``. The step model (StepCost) is Llama-3.1-8B's on an H100 at bf16.
It has no host time, API server or network, and reads a shared prefix's keys at full cost (a GPU finds them in
its L2 cache): it follows measured bursts (all at once) more closely than low rates.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks" / "peers"))

import workloads  # noqa: E402
from serving import workload_prompts  # noqa: E402

from pagoda.bench.serve_metrics import percentile  # noqa: E402  (as `pagoda bench serve` reports them)
from pagoda.interfaces.scheduler import SchedulerConfig  # noqa: E402
from pagoda.kv_cache.manager import KVCacheManager  # noqa: E402
from pagoda.request import Request, RequestStatus  # noqa: E402
from pagoda.scheduler import FcfsScheduler  # noqa: E402

LIMITS = ("max_prefill_tokens_while_decoding", "long_prefill_token_threshold", "max_num_partial_prefills",
          "max_long_partial_prefills")


@dataclass(frozen=True)
class StepCost:
    """One step's time in ms: a fixed part (reading the weights, launching), each decode, each key a decode reads,
    each prompt token, and each (query, key) pair of prompt attention. The defaults fit Llama-3.1-8B bf16 on an
    H100 (benchmarks/results/h100_steps/ and the peers runs): decode steps at batch 1 (5.46 ms), 249 sequences of
    385 tokens (11.8 ms) and 240 of 1,090 (18.3 ms); mixed steps of 7,515 and 7,974 prompt tokens (175, 198 ms)."""

    base_ms: float = 5.4
    decode_ms: float = 0.0104
    decode_key_ms: float = 3.98e-5
    prompt_token_ms: float = 0.0215
    prompt_pair_ms: float = 1.5e-6

    def step_ms(self, decodes: int, decode_keys: int, prompt_tokens: int, prompt_pairs: int) -> float:
        return (self.base_ms + self.decode_ms * decodes + self.decode_key_ms * decode_keys
                + self.prompt_token_ms * prompt_tokens + self.prompt_pair_ms * prompt_pairs)


@dataclass
class Trace:
    """When each request arrived and when each of its tokens reached the client (ms)."""

    arrival: dict[str, float] = field(default_factory=dict)
    tokens: dict[str, list[float]] = field(default_factory=dict)
    steps: list[tuple[float, int, int]] = field(default_factory=list)  # (ms, prompt tokens, decodes)


def arrivals(num: int, rate: float, seed: int) -> list[float]:
    """Arrival times in ms: all at 0 (rate inf) or a Poisson process at ``rate`` requests/s."""
    if math.isinf(rate):
        return [0.0] * num
    rng, t, out = random.Random(seed), 0.0, []
    for _ in range(num):
        t += rng.expovariate(rate) * 1000
        out.append(t)
    return out


def step_work(out) -> tuple[int, int, int, int]:
    """(decodes, keys the decodes read, prompt tokens, prompt attention pairs) of a scheduled step."""
    decodes = keys = prompt = pairs = 0
    for r, n in zip(out.requests, out.num_tokens):
        done = r.num_computed_tokens
        if n == 1 and done >= r.num_prompt_tokens:
            decodes, keys = decodes + 1, keys + done + 1
        else:
            prompt += n
            pairs += n * done + n * (n + 1) // 2  # each new query sees the cached keys and the new ones before it
    return decodes, keys, prompt, pairs


def replay(prompts: list[tuple[list[int], int]], times: list[float], config: SchedulerConfig, cost: StepCost,
           num_blocks: int, block_size: int = 16) -> Trace:
    """Runs the scheduler over the requests until every one finished; the trace of what a client saw."""
    sched = FcfsScheduler(config, KVCacheManager(num_blocks, block_size, enable_prefix_caching=True))
    pending = sorted(((t, i) for i, t in enumerate(times)), reverse=True)
    trace, now = Trace(), 0.0
    while pending or sched.has_unfinished():
        while pending and pending[-1][0] <= now:
            t, i = pending.pop()
            rid = f"r{i}"
            ids, output_len = prompts[i]
            sched.add_request(Request(rid, list(ids), SimpleNamespace(max_tokens=output_len), arrival_time=t))
            trace.arrival[rid], trace.tokens[rid] = t, []
        out = sched.schedule()
        if out.is_empty():
            if not pending:
                raise RuntimeError("the scheduler runs nothing while requests wait: raise num_blocks")
            now = pending[-1][0]  # idle until the next arrival
            continue
        work = step_work(out)
        ms = cost.step_ms(*work)
        now += ms
        trace.steps.append((ms, work[2], work[0]))
        finish_step(sched, out, now, trace)
    return trace


def finish_step(sched, out, now: float, trace: Trace) -> None:
    """Samples a token for each request whose prompt is computed by this step, then finishes those at their length."""
    sampled = {r.request_id: 1 for r, n in zip(out.requests, out.num_tokens)
               if r.num_computed_tokens + n >= r.num_tokens}
    sched.update_from_output(out, sampled)
    for r in out.requests:
        if r.request_id in sampled:
            trace.tokens[r.request_id].append(now)
        if r.num_output_tokens >= r.sampling_params.max_tokens:
            sched.finish(r.request_id, RequestStatus.FINISHED_LENGTH)


def summary(trace: Trace) -> dict:
    """What a client measures: requests/s, TTFT, TPOT (per request) and ITL (every gap) at p50/p99."""
    ttft = [trace.tokens[r][0] - trace.arrival[r] for r in trace.arrival]
    itl = [b - a for toks in trace.tokens.values() for a, b in zip(toks, toks[1:])]
    tpot = [(t[-1] - t[0]) / (len(t) - 1) for t in trace.tokens.values() if len(t) > 1]
    span = max(t[-1] for t in trace.tokens.values()) - min(trace.arrival.values())
    big = [s for s in trace.steps if s[1] > 0 and s[2] > 0]  # steps with prompt tokens beside decodes
    return {"requests_per_s": round(len(trace.arrival) / span * 1000, 2),
            "p50_ttft_ms": round(percentile(ttft, 50), 1), "p99_ttft_ms": round(percentile(ttft, 99), 1),
            "p50_tpot_ms": round(percentile(tpot, 50), 2), "p50_itl_ms": round(percentile(itl, 50), 2),
            "p99_itl_ms": round(percentile(itl, 99), 2), "steps": len(trace.steps), "mixed_steps": len(big),
            "max_mixed_step_prompt_tokens": max((s[1] for s in big), default=0)}


WORKLOADS = {"serve": workloads.served_workloads((math.inf,))[0], "mixed": workloads.mixed_workloads((math.inf,))[0],
             "prefix": workloads.PREFIX}


def run(workload: str, rate: float, limits: list[dict], cost: StepCost = StepCost(), num_blocks: int = 27952,
        vocab_size: int = 128256, max_num_seqs: int = 256, max_num_batched_tokens: int = 8192) -> list[dict]:
    """One replay per setting in ``limits`` (SchedulerConfig fields), the same requests and arrivals for each."""
    w = replace(WORKLOADS[workload], request_rate=rate)
    prompts = workload_prompts(w, vocab_size)
    times = arrivals(len(prompts), rate, w.seed)
    base = SchedulerConfig(max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
                           max_model_len=4096)
    return [{"workload": workload, "rate": rate, "limits": lim,
             **summary(replay(prompts, times, replace(base, **lim), cost, num_blocks))} for lim in limits]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("--workload", default="serve", help=f"comma-separated, of {', '.join(WORKLOADS)}")
    p.add_argument("--rate", type=float, default=math.inf, help="requests/s (inf: all at once)")
    for name in LIMITS:
        p.add_argument("--" + name.replace("_", "-"), default="", metavar="N[,N...]",
                       help=f"values of the scheduler's {name} to replay, each on its own (default: its default)")
    p.add_argument("--result-file", type=Path, help="write the rows as JSON")
    args = p.parse_args(argv)
    names = args.workload.split(",")
    if unknown := [n for n in names if n not in WORKLOADS]:
        p.error(f"unknown workload {', '.join(unknown)}; workloads: {', '.join(WORKLOADS)}")
    limits = [{name: int(v)} for name in LIMITS for v in getattr(args, name).split(",") if v] or [{}]
    rows = [row for name in names for row in run(name, args.rate, limits)]
    for row in rows:
        print(json.dumps(row))
    if args.result_file:
        args.result_file.write_text(json.dumps({"model": "StepCost() (Llama-3.1-8B bf16, H100)", "rows": rows},
                                               indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
