"""Where a decode step's time goes, on the GPU machine (dummy weights, CUDA graphs on).

Prints and writes (JSON + a kernel table) under --out: the full step time as `pagoda bench
latency` measures it, the captured forward replayed alone, lm_head + sampling alone, the host
time left between them, each linear layer's GEMV bandwidth, and torch.profiler's kernel table;
and from the profiler's trace, rank 0's kernel time per decode step by kind (linears, all-reduces,
NCCL, attention, norms, ...) with the device's idle time per step. Under ``-tp N`` (issue 15: the
TP=2 step is 0.59-0.60x TP=1's, 1.41-1.44x its per-rank floor against 1.19x) only the step time and
the per-kind split: a graph replayed on rank 0 alone would wait for the other ranks' collectives.

    python3 scripts/device/profile_decode.py benchmarks/configs/llama-3.1-8b --out $OUT/profile [-tp 2]
    ... --batch 256 --temperature 0.7 --top-p 0.9     # a sampled step (files named *_t0.7_p0.9)
"""

from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict
from pathlib import Path

import torch

from pagoda import LLM, SamplingParams
from pagoda.bench.common import random_prompts
from trace_kernels import device_events, timed  # scripts/device: this script's own folder


def events_ms(fn, reps: int = 50) -> float:
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / reps


SAMPLING = {"temperature": 0.0, "top_p": 1.0}  # the decode steps' sampling (--temperature, --top-p)


def sampling(tokens: int) -> SamplingParams:
    return SamplingParams(max_tokens=tokens, ignore_eos=True, **SAMPLING)


def step_ms(llm: LLM, prompts: list[list[int]], n: int = 64) -> float:
    def timed(tokens: int) -> float:
        llm.engine.core.kv_cache.reset_prefix_cache()
        torch.cuda.synchronize()
        t = time.perf_counter()
        llm.generate(prompts, sampling(tokens), use_tqdm=False)
        torch.cuda.synchronize()
        return time.perf_counter() - t

    timed(4)
    return min((timed(n) - timed(1)) / (n - 1) for _ in range(3)) * 1e3


# kind -> substrings of kernel names, first match wins (order matters: "gemv" before "gemm")
KINDS = {
    "all_reduce_ll": ("ll_all_reduce",),  # with the fused add + RMSNorm after it
    "nccl": ("nccl",),
    "symm_one_shot": ("one_shot_all_reduce", "multimem", "barrier_kernel"),
    "linear": ("gemv", "nvjet", "gemm", "cutlass", "splitKreduce", "sm90_xmma", "awq"),
    "attention": ("_decode_kernel", "_reduce_kernel", "_prefill_kernel", "flash", "_short"),
    "norm": ("rms_norm",),
    "rotary_kv": ("rotary", "_kv_write", "reshape_and_cache"),
    "activation": ("silu", "gelu"),
    "sampling": ("ArgMax", "argmax", "softmax", "sort", "topk", "exponential", "Categorical"),
    "copy": ("Memcpy", "Memset", "copy_kernel", "elementwise", "index"),
}


def kind_of(name: str) -> str:
    return next((k for k, keys in KINDS.items() if any(key in name for key in keys)), "other")


def step_summary(kernels: list[dict], steps: int) -> dict:
    """Per decode step: each kind's summed kernel time (``by_kind_us``: raw, so a programmatic dependent
    launched early counts its wait for the kernel before; ``exclusive_by_kind_us``: only the time past
    the end of every earlier kernel, which sums to ``busy_us``), the kernels' span and the idle time."""
    kernels = timed(kernels)
    by_kind: dict[str, float] = defaultdict(float)
    exclusive: dict[str, float] = defaultdict(float)
    for e in kernels:
        kind = kind_of(e["name"])
        by_kind[kind] += e["dur"]
        exclusive[kind] += e["exclusive"]
    busy = sum(exclusive.values())
    span = max(e["ts"] + e["dur"] for e in kernels) - kernels[0]["ts"] if kernels else 0.0
    return {"steps": steps, "span_us": span / steps, "busy_us": busy / steps, "idle_us": (span - busy) / steps,
            "kernels": len(kernels) / steps, "by_kind_us": _per_step(by_kind, steps),
            "exclusive_by_kind_us": _per_step(exclusive, steps)}


def _per_step(times: dict[str, float], steps: int) -> dict[str, float]:
    return {k: round(v / steps, 1) for k, v in sorted(times.items(), key=lambda kv: -kv[1])}


def gemv_rates(model: torch.nn.Module, batch: int) -> list[dict]:
    rows = []
    layer = model.model.layers[0]
    mods = dict(qkv=layer.self_attn.qkv_proj, o=layer.self_attn.o_proj, gate_up=layer.mlp.gate_up_proj,
                down=layer.mlp.down_proj, lm_head=model.lm_head)
    for name, mod in mods.items():
        w = next(mod.parameters())
        x = torch.randn(batch, w.shape[1], dtype=w.dtype, device=w.device)
        fn = (lambda: model.compute_logits(x)) if name == "lm_head" else (lambda mod=mod, x=x: mod(x))
        ms = events_ms(fn)
        rows.append(dict(name=name, shape=list(w.shape), us=ms * 1e3, gbs=w.numel() * w.element_size() / ms / 1e6))
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--input-len", type=int, default=128, help="prompt tokens: the decode steps' context")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--backend", default="triton")
    p.add_argument("-tp", "--tensor-parallel-size", type=int, default=1)
    p.add_argument("--temperature", type=float, default=0.0, help="the decode steps' temperature (0: greedy)")
    p.add_argument("--top-p", type=float, default=1.0)
    args = p.parse_args()
    SAMPLING.update(temperature=args.temperature, top_p=args.top_p)
    args.out.mkdir(parents=True, exist_ok=True)
    tp = args.tensor_parallel_size
    llm = LLM(model=args.model, load_format="dummy", attention_backend=args.backend, max_model_len=2048,
              skip_tokenizer_init=True, tensor_parallel_size=tp)
    engine = llm.engine
    prompts = random_prompts(args.batch, args.input_len, engine.core.parts.hf_config.vocab_size, 0)
    result = {"batch": args.batch, "tp": tp, **SAMPLING, "step_ms": step_ms(llm, prompts)}
    tag = f"tp{tp}_b{args.batch}" + (f"_t{args.temperature:g}_p{args.top_p:g}" if args.temperature > 0 else "")
    result["decode_by_kind"] = kinds_per_step(llm, prompts, args.out / f"trace_{tag}.json")
    print(json.dumps(result, indent=1), flush=True)
    if tp == 1:
        replay_parts(llm, prompts, args, result)
    (args.out / f"profile_{tag}.json").write_text(json.dumps(result, indent=1))
    llm.shutdown()


def kinds_per_step(llm: LLM, prompts: list[list[int]], trace: Path, steps: int = 32) -> dict:
    """Rank 0's kernels of ``steps`` decode steps after a prefill and its first token, summed by kind
    (the first of them left out: :func:`decode_window`)."""
    llm.engine.core.kv_cache.reset_prefix_cache()
    llm.generate(prompts, SamplingParams(temperature=0, max_tokens=1), use_tqdm=False)  # the prefill, cached
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        llm.generate(prompts, sampling(steps + 1), use_tqdm=False)
    prof.export_chrome_trace(str(trace))
    return step_summary(*decode_window(device_events(str(trace))))


def decode_window(kernels: list[dict]) -> tuple[list[dict], int]:
    """The kernels of the decode steps after the first one, and their count. Each step ends with its
    tokens' copy to the host; the host's start-up gap before the first decode step is not a step's."""
    ends = [i for i, e in enumerate(kernels) if "DtoH" in e["name"]]  # the first token's step, then one a step
    return kernels[ends[1] + 1 : ends[-1] + 1], len(ends) - 2


def replay_parts(llm: LLM, prompts: list[list[int]], args, result: dict) -> None:
    """TP=1: the captured forward alone, its launch, lm_head + argmax, GEMV rates, host and kernel tables."""
    runner = llm.engine.core.runner
    replay, hidden, _ = runner.graphs.graphs[next(s for s in runner.graphs.sizes if s >= args.batch)]
    result["replay_ms"] = events_ms(replay)
    launches = []
    for _ in range(20):  # host time of one graph launch (the GPU idles through it between steps)
        torch.cuda.synchronize()
        t = time.perf_counter()
        replay()
        launches.append(time.perf_counter() - t)
    result["replay_launch_us"] = sorted(launches)[10] * 1e6
    h = hidden[: args.batch]
    result["logits_argmax_ms"] = events_ms(lambda: runner.model.compute_logits(h).float().argmax(1))
    result["host_gap_ms"] = result["step_ms"] - result["replay_ms"] - result["logits_argmax_ms"]
    result["gemv"] = gemv_rates(runner.model, args.batch)
    import cProfile
    import io
    import pstats

    host = cProfile.Profile()  # Python time of the loop (the GPU idles through what runs between steps)
    host.enable()
    llm.generate(prompts, SamplingParams(temperature=0, max_tokens=64, ignore_eos=True), use_tqdm=False)
    host.disable()
    text = io.StringIO()
    pstats.Stats(host, stream=text).sort_stats("tottime").print_stats(45)
    (args.out / f"python_b{args.batch}.txt").write_text(text.getvalue())
    params = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]) as prof:
        llm.generate(prompts, params, use_tqdm=False)
    table = prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=40)
    cpu_table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=40)
    (args.out / f"kernels_b{args.batch}.txt").write_text(table + "\n\n" + cpu_table)
    prof.export_chrome_trace(str(args.out / f"trace_b{args.batch}.json"))
    print(table[:6000])


if __name__ == "__main__":
    main()
