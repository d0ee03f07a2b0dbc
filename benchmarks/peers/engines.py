"""Command lines and environments of the two engines: offline runs, servers and serving clients.

Pagoda runs from the current environment (the `pagoda` CLI); vLLM runs with its own site folder on
PYTHONPATH (scripts/device/vllm_install.sh puts it in /tmp/vllm_site) and nothing of Pagoda's.
"""

from __future__ import annotations

import math
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from workloads import (GPU_MEMORY_UTILIZATION, MATCHED_MAX_NUM_BATCHED_TOKENS, MATCHED_MAX_NUM_SEQS, MAX_MODEL_LEN,
                       SEED, Latency, Offline, Served)

HERE = Path(__file__).resolve().parent
VLLM_MAIN = ["-m", "vllm.entrypoints.cli.main"]


@dataclass
class Settings:
    """What a run shares: the model folder, where vLLM lives, extra flags for each engine."""

    model_dir: Path
    vllm_site: str = "/tmp/vllm_site"
    python: str = sys.executable
    pagoda_flags: list[str] = field(default_factory=list)  # Pagoda's defaults (auto: flash where installed)
    vllm_flags: list[str] = field(default_factory=list)  # e.g. ["--attention-backend", "TRITON_ATTN"]
    limits: str = "matched"  # matched: both engines get MATCHED_LIMITS; own: each its own defaults

    def limit_flags(self) -> list[str]:
        """The scheduler-limit flags both engines take (the same names on both), none at their own defaults."""
        return MATCHED_LIMITS if self.limits == "matched" else []


MATCHED_LIMITS = ["--max-num-seqs", str(MATCHED_MAX_NUM_SEQS), "--max-num-batched-tokens",
                  str(MATCHED_MAX_NUM_BATCHED_TOKENS)]
PAGODA_DEFAULT_MAX_NUM_SEQS = 256  # `pagoda bench throughput` warms up with this many prompts at its defaults


def shared_flags() -> list[str]:
    return ["--max-model-len", str(MAX_MODEL_LEN), "--gpu-memory-utilization", str(GPU_MEMORY_UTILIZATION),
            "--seed", str(SEED), "--load-format", "dummy"]


OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}  # no internet on the GPU machine: never wait on it


def vllm_env(s: Settings) -> dict[str, str]:
    env = {**os.environ, **OFFLINE_ENV}
    env["PYTHONPATH"] = s.vllm_site  # not Pagoda's /tmp/site: its fastapi is newer than vLLM allows
    env.setdefault("VLLM_CACHE_ROOT", "/tmp/vllm_cache")  # compile cache survives between warm calls
    env.setdefault("VLLM_NO_USAGE_STATS", "1")
    env.setdefault("DO_NOT_TRACK", "1")
    # FlashInfer is not carried (its wheels are GBs); vLLM imports it only for its top-k/top-p
    # sampler, which greedy runs never use: off, so the torch sampler path is taken.
    env.setdefault("VLLM_USE_FLASHINFER_SAMPLER", "0")
    env.setdefault("VLLM_SERVER_DEV_MODE", "1")  # vLLM serves POST /reset_prefix_cache only in its dev mode
    return env


def pagoda_env() -> dict[str, str]:
    return {**os.environ, **OFFLINE_ENV}


def pagoda_offline_cmd(s: Settings, w: Offline, result: Path) -> list[str]:
    return ["pagoda", "bench", "throughput", str(s.model_dir), *shared_flags(), *s.limit_flags(), *s.pagoda_flags,
            "--num-prompts", str(w.num_prompts), "--input-len", str(w.input_len), "--output-len", str(w.output_len),
            "--log-level", "warning", "--result-file", str(result)]


def pagoda_latency_cmd(s: Settings, w: Latency, result: Path) -> list[str]:
    return ["pagoda", "bench", "latency", str(s.model_dir), *shared_flags(), *s.limit_flags(), *s.pagoda_flags,
            "--batch-sizes", ",".join(map(str, w.batch_sizes)), "--input-len", str(w.input_len),
            "--output-len", str(w.output_len), "--repeats", str(w.repeats), "--log-level", "warning",
            "--result-file", str(result)]


def vllm_offline_cmd(s: Settings, workloads: tuple[Offline, ...], latency: Latency | None, result: Path) -> list[str]:
    """One vLLM process runs every offline workload (its start-up, torch.compile included, is paid once)."""
    cmd = [s.python, str(HERE / "vllm_offline.py"), "--model", str(s.model_dir), "--result-file", str(result),
           "--workloads", ",".join(f"{w.name}:{w.num_prompts}:{w.input_len}:{w.output_len}" for w in workloads)]
    if latency is not None:
        cmd += ["--latency", f"{','.join(map(str, latency.batch_sizes))}:{latency.input_len}:{latency.output_len}"
                f":{latency.repeats}"]
    # the warm-up `pagoda bench throughput` runs: a full batch (its max_num_seqs) of other prompts, 8 tokens each
    seqs = MATCHED_MAX_NUM_SEQS if s.limits == "matched" else PAGODA_DEFAULT_MAX_NUM_SEQS
    cmd += ["--limits", s.limits, "--warmup-prompts", str(seqs), "--warmup-output-len", "8"]
    return cmd + [f"--engine-flag={f}" for f in s.vllm_flags]


def server_cmd(engine: str, s: Settings, port: int) -> list[str]:
    if engine == "pagoda":
        return ["pagoda", "serve", str(s.model_dir), "--port", str(port), *shared_flags(), *s.limit_flags(),
                *s.pagoda_flags]  # info: its start-up line names its choices (serving.pagoda_choices)
    return [s.python, *VLLM_MAIN, "serve", str(s.model_dir), "--port", str(port), *shared_flags(), *s.limit_flags(),
            "--dtype", "bfloat16", "--disable-uvicorn-access-log", "--uvicorn-log-level", "warning", *s.vllm_flags]


def pagoda_client_cmd(base_url: str, w: Served, prompts_file: Path, result: Path) -> list[str]:
    """Each line of a mixed-length file carries its own output_len (the workload's is 0, unused). The raw file keeps
    every request's start time and inter-token gaps (``--save-detailed``), to join with a ``PAGODA_TRACE_DIR`` trace."""
    lengths = ["--output-len", str(w.output_len)] if w.output_len > 0 else []
    return ["pagoda", "bench", "serve", "--base-url", base_url, "--prompts-file", str(prompts_file),
            "--num-prompts", str(w.num_prompts), *lengths,
            "--request-rate", "inf" if math.isinf(w.request_rate) else f"{w.request_rate:g}",
            "--ignore-eos", "--no-progress", "--seed", str(w.seed), "--save-detailed", "--result-file", str(result)]


def vllm_client_cmd(s: Settings, base_url: str, model: str, w: Served, result: Path,
                    sharegpt_file: Path | None = None) -> list[str]:
    """vLLM's own client, its own datasets (random / prefix_repetition) through the same tokenizer; the mixed
    lengths as a ShareGPT-format file of the requests Pagoda's client sends (prompts.write_sharegpt_file)."""
    cmd = [s.python, *VLLM_MAIN, "bench", "serve", "--backend", "vllm", "--base-url", base_url, "--model", model,
           "--tokenizer", str(s.model_dir), "--num-prompts", str(w.num_prompts),
           "--request-rate", "inf" if math.isinf(w.request_rate) else f"{w.request_rate:g}",
           "--ignore-eos", "--seed", str(w.seed), "--temperature", "0",  # greedy, as Pagoda's client asks
           "--ready-check-timeout-sec", "0",  # no test request before the run: it would leave a prompt in the cache
           "--percentile-metrics", "ttft,tpot,itl,e2el",
           "--metric-percentiles", "50,90,99", "--disable-tqdm", "--save-result",
           "--result-dir", str(result.parent), "--result-filename", result.name]
    if w.lengths:
        if sharegpt_file is None:
            raise ValueError(f"{w.name}: the mixed lengths reach vLLM's client as a ShareGPT-format file; pass it")
        return cmd + ["--dataset-name", "sharegpt", "--dataset-path", str(sharegpt_file)]
    if w.num_prefixes:
        return cmd + ["--dataset-name", "prefix_repetition", "--prefix-repetition-prefix-len", str(w.prefix_len),
                      "--prefix-repetition-suffix-len", str(w.input_len), "--prefix-repetition-num-prefixes",
                      str(w.num_prefixes), "--prefix-repetition-output-len", str(w.output_len)]
    return cmd + ["--dataset-name", "random", "--random-input-len", str(w.input_len),
                  "--random-output-len", str(w.output_len), "--random-range-ratio", "0"]
