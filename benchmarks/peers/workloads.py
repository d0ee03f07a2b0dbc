"""The workloads of the Pagoda-vs-vLLM comparison, grouped in parts that fit one device call each."""

from __future__ import annotations

import math
from dataclasses import dataclass

# Engine settings both sides share (vLLM gets the same values through its own flags).
MAX_MODEL_LEN = 2048
GPU_MEMORY_UTILIZATION = 0.9
SEED = 0
# Scheduler limits: "matched" gives both engines these (the default); "own" leaves each at its own defaults
# (Pagoda 256 / 8192; vLLM 0.26 on an H100/H200 1024 / 16384 offline, 1024 / 8192 served).
LIMITS = ("matched", "own")
MATCHED_MAX_NUM_SEQS = 256
MATCHED_MAX_NUM_BATCHED_TOKENS = 8192


@dataclass(frozen=True)
class Offline:
    """`LLM.generate` over num_prompts random token-id prompts, all submitted at once, EOS ignored."""

    name: str
    num_prompts: int
    input_len: int
    output_len: int


@dataclass(frozen=True)
class Latency:
    """Decode step time at each batch size: (time for output_len tokens - time for 1) / (output_len - 1)."""

    name: str
    batch_sizes: tuple[int, ...]
    input_len: int
    output_len: int
    repeats: int


@dataclass(frozen=True)
class Served:
    """Streamed /v1/completions requests at request_rate (inf: all at once; else Poisson arrivals).

    With num_prefixes > 0 each prompt is one of num_prefixes shared prefixes of prefix_len tokens
    followed by input_len unique tokens (prefix caching). With lengths (a distribution of mixed_lengths.py)
    each request draws its own input and output lengths (input_len/output_len unused; max_len > 0 cuts them).
    Each workload has its own seed, so no two runs share prompts."""

    name: str
    num_prompts: int
    input_len: int
    output_len: int
    request_rate: float = math.inf
    num_prefixes: int = 0
    prefix_len: int = 0
    seed: int = SEED
    lengths: str = ""
    max_len: int = 0

    @property
    def expects_cache_hits(self) -> bool:
        return self.num_prefixes > 0

    @property
    def prompt_len(self) -> int:
        return self.prefix_len + self.input_len


OFFLINE = (Offline("offline_256x256", 1000, 256, 256), Offline("offline_1024x128", 1000, 1024, 128))
LATENCY = Latency("latency", (1, 8, 64), 128, 32, 2)
RATE_SECONDS = 30  # finite-rate runs send rate x RATE_SECONDS requests (about 30 s of arrivals)


def rate_seed(rate: float, offset: int = 0) -> int:
    """A seed of its own for each rate (and workload family: offset), so no rate replays another's prompts."""
    return SEED + offset + (1000 if math.isinf(rate) else 1000 + int(round(rate * 100)))


def served_workloads(rates: tuple[float, ...] = (math.inf, 4, 8, 16), rate_seconds: int = RATE_SECONDS) -> tuple[Served, ...]:
    """256/256 at each rate: 1000 requests at once, or rate x rate_seconds (at least 50) Poisson arrivals."""
    out = []
    for rate in rates:
        if math.isinf(rate):
            out.append(Served("serve_256x256_inf", 1000, 256, 256, seed=rate_seed(rate)))
        else:
            out.append(Served(f"serve_256x256_rate{rate:g}", max(50, int(rate * rate_seconds)), 256, 256, float(rate),
                              seed=rate_seed(rate)))
    return tuple(out)


def mixed_workloads(rates: tuple[float, ...] = (math.inf, 4, 8, 16), rate_seconds: int = RATE_SECONDS) -> tuple[Served, ...]:
    """The ShareGPT-shaped mixed lengths (mixed_lengths.py) at each rate, as many requests as served_workloads."""
    return tuple(Served(w.name.replace("serve_256x256", "mixed_sharegpt_like"), w.num_prompts, 0, 0, w.request_rate,
                        seed=rate_seed(w.request_rate, offset=50_000), lengths="sharegpt_like")
                 for w in served_workloads(rates, rate_seconds))


PREFIX = Served("prefix_10x1024+128x128_inf", 500, 128, 128, math.inf, num_prefixes=10, prefix_len=1024, seed=SEED + 7)
# Before the timed runs, each server serves the same warm-up (then its prefix cache is emptied): a full batch at
# once reaches the shapes of the timed runs (the largest prefill steps, every decode batch size up to 256).
WARMUP = Served("warmup_256x32", 256, 256, 32, seed=SEED + 99)

# part name -> (kind, clients). Kinds: offline (throughput + latency), serve (the served rates), prefix, lora, vlm.
PARTS = {
    "offline": ("offline", ()),
    "serve": ("serve", ("pagoda",)),
    "serve_vllm_client": ("serve", ("vllm",)),
    "mixed": ("mixed", ("pagoda",)),
    "mixed_vllm_client": ("mixed", ("vllm",)),
    "prefix": ("prefix", ("pagoda", "vllm")),
    "lora": ("lora", ()),  # lora_part.py: 1, 8, 32 adapters and the base model, offline
    "vlm": ("vlm", ()),  # vlm_part.py: one image a prompt, offline
}


def quick(w):
    """A tiny version of a workload (names prefixed quick_): to check the pipeline end to end in a minute."""
    import dataclasses

    if isinstance(w, Latency):
        small = {"batch_sizes": tuple(sorted({min(b, 4) for b in w.batch_sizes})), "input_len": 8, "output_len": 4, "repeats": 1}
    else:
        small = {"num_prompts": max(4, w.num_prompts // 100), "input_len": max(4, w.input_len // 16),
                 "output_len": max(4, w.output_len // 16)}
    if isinstance(w, Served) and w.prefix_len:  # vLLM's prefix_repetition needs >= 1 request a prefix
        small.update(prefix_len=max(4, w.prefix_len // 16), num_prompts=2 * w.num_prefixes)
    if isinstance(w, Served) and w.lengths:
        small.update(max_len=32)
    fields = {f.name for f in dataclasses.fields(w)}
    return dataclasses.replace(w, name="quick_" + w.name, **{k: v for k, v in small.items() if k in fields})


def parse_parts(text: str) -> list[str]:
    """'offline,serve' -> ['offline', 'serve']; 'all' -> every part; 'none' -> [] (install only)."""
    if text.strip() in ("", "none"):
        return []
    names = list(PARTS) if text.strip() == "all" else [p.strip() for p in text.split(",") if p.strip()]
    unknown = [p for p in names if p not in PARTS]
    if unknown:
        raise ValueError(f"unknown part(s) {', '.join(unknown)}; choose from {', '.join(PARTS)}, all or none")
    return names


def parse_rates(text: str) -> tuple[float, ...]:
    """'inf,4,8,16' -> (inf, 4.0, 8.0, 16.0); each must be > 0."""
    rates = tuple(float(r) for r in text.split(",") if r.strip())
    if not rates or any(not r > 0 for r in rates):
        raise ValueError(f"--rates must be positive numbers or inf, got {text!r}")
    return rates


def parse_offline(text: str) -> tuple[Offline, ...]:
    """'1000:1024:256' (num_prompts:input_len:output_len, comma-separated) -> workloads named offline_1024x256."""
    out = []
    for item in (i.strip() for i in text.split(",") if i.strip()):
        fields = item.split(":")
        if len(fields) != 3 or not all(f.isdigit() and int(f) > 0 for f in fields):
            raise ValueError(f"--offline takes NUM_PROMPTS:INPUT_LEN:OUTPUT_LEN (positive), got {item!r}")
        n, i, o = (int(f) for f in fields)
        out.append(Offline(f"offline_{i}x{o}", n, i, o))
    return tuple(out)


def parse_latency(text: str) -> Latency:
    """'1,8:1024:32:2' (batch sizes:input_len:output_len:repeats) -> the decode-step workload."""
    fields = text.split(":")
    try:
        batches, i, o, r = tuple(int(b) for b in fields[0].split(",")), *(int(f) for f in fields[1:])
    except ValueError:
        batches, i, o, r = (), 0, 0, 0
    if len(fields) != 4 or not batches or min(*batches, i, r) < 1 or o < 2:
        raise ValueError(f"--latency takes BATCHES:INPUT_LEN:OUTPUT_LEN:REPEATS (e.g. 1,8:128:32:2), got {text!r}")
    return Latency("latency", batches, i, o, r)
