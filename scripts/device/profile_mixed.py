"""Where a mixed step's time goes: one new 256-token prompt joining D running decodes (issue 19's ITL p99).

    python3 scripts/device/profile_mixed.py benchmarks/configs/llama-3.1-8b --out $OUT/mixed

For each D, D requests are prefilled and decoding; then one new prompt arrives and the next step
(its prefill + D decode tokens, run eagerly: decode graphs cover pure-decode steps only) is timed
with overlap off, several times. Also timed: the pure-decode step at D and the prefill alone.
For D = --profile-decodes the mixed step runs under torch.profiler: GPU kernel time by kind,
the summed GPU busy time against the step's wall time (the gap is host time the GPU waited for).
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import time
from pathlib import Path

import torch

from pagoda import LLM, SamplingParams
from pagoda.bench.common import random_prompts

KINDS = (("attention", ("attn", "attention", "paged", "unified", "flash_")), ("gemm", ("gemm", "cutlass", "sm90", "xmma", "cublas", "nvjet")),
         ("norm", ("norm",)), ("rotary", ("rotary", "rope")), ("activation", ("silu", "act_and_mul", "gelu")),
         ("cache_write", ("cache", "reshape_and")), ("sampling", ("sort", "argmax", "max", "softmax", "topk")))


def kind(name: str) -> str:
    low = name.lower()
    return next((k for k, keys in KINDS if any(key in low for key in keys)), "other")


def sync() -> None:
    if torch.cuda.is_available():  # the script also runs on a CPU, to check it before device time
        torch.cuda.synchronize()


def timed_step(llm: LLM) -> float:
    sync()
    t = time.perf_counter()
    llm.engine.step()
    sync()
    return (time.perf_counter() - t) * 1e3


class Workload:
    def __init__(self, llm: LLM, vocab: int) -> None:
        self.llm, self.vocab, self.seq = llm, vocab, 0
        self.long = SamplingParams(temperature=0, max_tokens=1500, ignore_eos=True)

    def add(self, n: int, length: int = 256) -> list[str]:
        ids = []
        for prompt in random_prompts(n, length, self.vocab, self.seq):
            self.seq += 1
            rid = f"r{self.seq}"
            self.llm.engine.add_request(rid, prompt, self.long)
            ids.append(rid)
        return ids

    def clear(self) -> None:
        for rid in list(self.llm.engine.outputs.states):
            self.llm.engine.abort(rid)
        while self.llm.engine.has_unfinished_requests() or self.llm.engine.core.has_unfinished():
            self.llm.engine.step()


def measure(w: Workload, decodes: int, reps: int, profile_dir: Path | None) -> dict:
    w.clear()
    w.add(decodes)
    for _ in range(decodes // 32 + 3):  # prefill them (8192 tokens a step), then decode a little
        w.llm.engine.step()
    decode = [timed_step(w.llm) for _ in range(reps)]
    mixed = []
    for i in range(reps + 1):
        rid = w.add(1)[0]
        if i == reps and profile_dir is not None:
            mixed.append(profiled(w.llm, profile_dir))
        else:
            mixed.append(timed_step(w.llm))
        w.llm.engine.abort(rid)
        timed_step(w.llm)
    return {"decodes": decodes, "decode_ms": statistics.median(decode), "mixed_ms": statistics.median(mixed[1:]),
            "mixed_ms_all": [round(m, 2) for m in mixed]}


def profiled(llm: LLM, out: Path) -> float:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        ms = timed_step(llm)
    by_kind: dict[str, float] = collections.defaultdict(float)
    kernels: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0])
    for ev in prof.events():
        if ev.device_type == torch.autograd.DeviceType.CUDA:
            us = ev.device_time if hasattr(ev, "device_time") else ev.cuda_time
            by_kind[kind(ev.name)] += us / 1e3
            kernels[ev.name][0] += us / 1e3
            kernels[ev.name][1] += 1
    top = sorted(kernels.items(), key=lambda kv: -kv[1][0])[:30]
    report = {"wall_ms": ms, "gpu_busy_ms": sum(by_kind.values()), "launches": sum(c for _, c in kernels.values()),
              "by_kind_ms": dict(sorted(by_kind.items(), key=lambda kv: -kv[1])),
              "top_kernels": [{"name": n[:120], "ms": round(t, 3), "count": c} for n, (t, c) in top]}
    (out / "mixed_profile.json").write_text(json.dumps(report, indent=1))
    prof.export_chrome_trace(str(out / "mixed_step_trace.json"))
    print(json.dumps({k: v for k, v in report.items() if k != "top_kernels"}), flush=True)
    return ms


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--decodes", default="0,16,32,64")
    p.add_argument("--profile-decodes", type=int, default=32)
    p.add_argument("--reps", type=int, default=8)
    p.add_argument("--backend", default="triton")
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    llm = LLM(model=args.model, load_format="dummy", attention_backend=args.backend, max_model_len=2048,
              skip_tokenizer_init=True)
    llm.engine.core.overlap = False
    w = Workload(llm, llm.engine.core.parts.hf_config.vocab_size)
    w.add(4)
    for _ in range(8):  # warm-up: compile the eager paths' kernels
        llm.engine.step()
    rows = []
    for d in (int(x) for x in args.decodes.split(",")):
        row = measure(w, d, args.reps, args.out if d == args.profile_decodes else None)
        rows.append(row)
        print(json.dumps(row), flush=True)
    (args.out / "mixed_steps.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
