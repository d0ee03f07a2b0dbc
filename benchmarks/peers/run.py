"""Pagoda and vLLM 0.26 on the same workloads, same GPU, same run: one JSON + one chart per run.

    python benchmarks/peers/run.py --parts offline --out $OUT --budget-s 520
    python benchmarks/peers/run.py --parts serve --out $OUT --rates inf,4,8,16
    python benchmarks/peers/run.py --parts serve_vllm_client,prefix --out $OUT

Parts (benchmarks/peers/README.md): offline (1000 x 256/256, 1000 x 1024/128, batch-1/8/64 decode),
serve (the served rates, driven by `pagoda bench serve`), serve_vllm_client (the same rates driven by
`vllm bench serve`), mixed / mixed_vllm_client (ShareGPT-shaped mixed lengths at the same rates), prefix
(10 shared 1k-token prefixes, both clients), lora (1, 8 and 32 adapters against the base model, offline:
lora_part.py), vlm (one image a prompt, offline: vlm_part.py). Both engines get the same scheduler limits unless
--limits own.
Every step runs in its own process under a time limit, and the whole run under --budget-s: what does not fit
is recorded as skipped.
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import subprocess
import sys
import time
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import engines  # noqa: E402
import lora_part  # noqa: E402
import report  # noqa: E402
import vlm_part  # noqa: E402
from model_dir import build_model_dir  # noqa: E402
from serving import ServerSession, pagoda_choices, vllm_choices  # noqa: E402
from steps import Deadline, StepRecord, read_json, run_step  # noqa: E402
from workloads import (LATENCY, LIMITS, OFFLINE, PARTS, PREFIX, Served, mixed_workloads, parse_latency,  # noqa: E402
                       parse_offline, parse_parts, parse_rates, quick, served_workloads)

ROOT = Path(__file__).resolve().parents[2]
WHOLE_LOGS_MAX_BYTES = 512 * 1024  # the logs file of a run, whole; above this it is gzipped
REPEAT_SEED_STEP = 100_003  # a repeat's prompts: each workload's seed plus this times the repeat (no rate's seed)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="\n".join(__doc__.splitlines()[1:]))
    p.add_argument("--parts", default="offline", help=f"comma-separated: {', '.join(PARTS)}; or all / none")
    p.add_argument("--engines", default="pagoda,vllm", help="which engines run (both for ratios)")
    p.add_argument("--config", default=str(ROOT / "benchmarks/configs/llama-3.1-8b"), help="folder with config.json")
    p.add_argument("--vlm-config", default=str(ROOT / "benchmarks/configs/qwen2.5-vl-7b"),
                   help="the vlm part's model: folder with config.json and preprocessor_config.json")
    p.add_argument("--out", default="peers_out", help="folder for the JSON, the chart and the logs")
    p.add_argument("--work-dir", default="/tmp/peers", help="model folder, prompts files, raw results")
    p.add_argument("--budget-s", type=float, default=520, help="the whole run's time limit (a device call: 600)")
    p.add_argument("--rates", default="inf,4,8,16", help="request rates of the served parts (inf = all at once)")
    p.add_argument("--rate-seconds", type=int, default=30, help="finite rates send rate x this many requests")
    p.add_argument("--repeats", type=int, default=1, help="served parts: start each engine's server this many times, "
                   "alternating which engine goes first, with fresh prompts each time; rows give the medians")
    p.add_argument("--vllm-site", default="/tmp/vllm_site", help="vLLM's install (scripts/device/vllm_install.sh)")
    p.add_argument("--pagoda-flag", action="append", default=None, help="extra flag for Pagoda (repeatable, e.g. "
                   "--attention-backend=triton; default: none, auto picks flash where installed)")
    p.add_argument("--vllm-flag", action="append", default=[], help="extra flag for vLLM, e.g. --attention-backend=TRITON_ATTN")
    p.add_argument("--limits", choices=LIMITS, default="matched",
                   help="matched (default): both engines 256 sequences and 8192 tokens a step; own: each engine at its "
                        "own defaults (the second, labelled table)")
    p.add_argument("--offline", help="the offline part's workloads instead of 1000 x 256/256 and 1000 x 1024/128: "
                   "NUM_PROMPTS:INPUT_LEN:OUTPUT_LEN, comma-separated (e.g. 1000:1024:256)")
    p.add_argument("--latency", help="its decode-step workload instead of 1,8,64:128:32:2: "
                   "BATCHES:INPUT_LEN:OUTPUT_LEN:REPEATS")
    p.add_argument("--quick", action="store_true", help="tiny workloads (quick_*): check the pipeline, not speed")
    p.add_argument("--tag", default="", help="name of this run's files (default: the parts)")
    return p.parse_args(argv)


def settings(args: argparse.Namespace, model_dir: Path) -> engines.Settings:
    s = engines.Settings(model_dir=model_dir, vllm_site=args.vllm_site, vllm_flags=args.vllm_flag, limits=args.limits)
    if args.pagoda_flag is not None:
        s.pagoda_flags = [f for flag in args.pagoda_flag for f in flag.split("=", 1)]
    return s


class Run:
    """One invocation: the steps of the chosen parts for the chosen engines, their records and measurements."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.work = Path(args.work_dir)
        self.logs = self.work / "logs"
        shutil.rmtree(self.logs, ignore_errors=True)  # a run's logs are its own: a warm machine keeps the work dir
        self.logs.mkdir(parents=True)
        self.model_dir = build_model_dir(Path(args.config), self.work / "model")
        self.vocab_size = json.loads((self.model_dir / "config.json").read_text())["vocab_size"]
        self.s = settings(args, self.model_dir)
        self.deadline = Deadline(args.budget_s)
        self.engines = [e.strip() for e in args.engines.split(",") if e.strip()]
        self.records: list[StepRecord] = []
        self.measurements: list[dict] = []
        pick = quick if args.quick else (lambda w: w)
        self.offline_workloads = tuple(pick(w) for w in (parse_offline(args.offline) if args.offline else OFFLINE))
        self.latency = pick(parse_latency(args.latency) if args.latency else LATENCY)
        self.prefix = pick(PREFIX)
        rates = parse_rates(args.rates)
        self.rates = tuple(pick(w) for w in served_workloads(rates, args.rate_seconds))
        self.mixed = tuple(pick(w) for w in mixed_workloads(rates, args.rate_seconds))

    def step(self, name: str, engine: str, cmd: list[str], cap_s: float, min_s: float = 20.0,
             runs_in: str | None = None) -> StepRecord:
        """Run one step for `engine`; the process runs in the environment of `runs_in` (default: engine's)."""
        env = engines.vllm_env(self.s) if (runs_in or engine) == "vllm" else engines.pagoda_env()
        record = run_step(StepRecord(name, engine), cmd, env, self.logs / f"{engine}_{name}.log", self.deadline, cap_s, min_s)
        self.records.append(record)
        print(f"[{time.strftime('%H:%M:%S')}] {engine:<6} {name:<34} {record.status:<8} {record.seconds:6.1f} s "
              f"({self.deadline.left():.0f} s left)", flush=True)
        return record

    def offline(self) -> None:
        raw = self.work / "raw"
        raw.mkdir(exist_ok=True)
        if "pagoda" in self.engines:
            for w in self.offline_workloads:
                rec = self.step(w.name, "pagoda", engines.pagoda_offline_cmd(self.s, w, raw / f"pagoda_{w.name}.json"), 240)
                rec.result = read_json(raw / f"pagoda_{w.name}.json")
                self.measurements += report.from_pagoda_offline(w.name, rec.result, self.s.limits)
            rec = self.step(self.latency.name, "pagoda", engines.pagoda_latency_cmd(self.s, self.latency, raw / "pagoda_latency.json"), 150)
            rec.result = read_json(raw / "pagoda_latency.json")
            self.measurements += report.from_latency("pagoda", rec.result, self.s.limits)
        if "vllm" in self.engines:
            rec = self.step("offline+latency", "vllm", engines.vllm_offline_cmd(self.s, self.offline_workloads, self.latency,
                                                                                raw / "vllm_offline.json"), 420)
            rec.result = read_json(raw / "vllm_offline.json")  # written after each workload: partial on timeout
            self.measurements += report.from_vllm_offline(rec.result, self.s.limits)

    def served(self, workloads: list[tuple[Served, tuple[str, ...]]]) -> None:
        """Per engine: start its server, warm it up, run every (workload, client), stop it; with --repeats, again,
        the other engine first, on prompts of other seeds."""
        for repeat in range(self.args.repeats):
            order = self.engines if repeat % 2 == 0 else self.engines[::-1]
            fresh = [(replace(w, seed=w.seed + REPEAT_SEED_STEP * repeat), clients) for w, clients in workloads]
            for engine in order:
                ServerSession(self, engine, repeat).serve(fresh)

    def execute(self, parts: list[str]) -> None:
        if "offline" in parts:
            self.offline()
        for name, part in (("lora", lora_part), ("vlm", vlm_part)):
            if name in parts:
                part.run(self)
        served = []
        for part in parts:
            kind, clients = PARTS[part]
            workloads = {"serve": self.rates, "mixed": self.mixed, "prefix": (self.prefix,)}.get(kind, ())
            served += [(w, clients) for w in workloads]
        if served:
            self.served(served)


def device_name() -> str:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown (no nvidia-smi)"


def write_outputs(run: Run, parts: list[str], out: Path, tag: str) -> Path:
    result = {"date": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), "device": device_name(),
              "parts": parts, "settings": {"engines": run.engines, "pagoda_flags": run.s.pagoda_flags,
                                           "vllm_flags": run.s.vllm_flags, "limits": run.s.limits,
                                           "limit_flags": run.s.limit_flags(), "fresh_prompts_per_run": True,
                                           "warmup": "same requests on both servers, prefix cache emptied after",
                                           "rates": run.args.rates, "rate_seconds": run.args.rate_seconds,
                                           "repeats": run.args.repeats},
              "pagoda_choices": pagoda_choices(run.logs), "vllm_choices": vllm_choices(run.logs),
              "steps": [r.as_dict() for r in run.records], "measurements": run.measurements,
              "rows": report.side_by_side(run.measurements)}
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"peers_{tag}.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    try:
        report.chart(result["rows"], out / f"peers_{tag}.png", f"Pagoda vs vLLM 0.26: {', '.join(parts)} ({result['device']})")
    except Exception as exc:  # the JSON is written; redraw later with report.py
        print(f"no chart: {type(exc).__name__}: {exc}", file=sys.stderr)
    write_logs(run.logs, out / f"peers_{tag}_logs.txt")
    print(report.format_table(result["rows"]))
    return path


def write_logs(logs: Path, path: Path) -> Path:
    """Every step's log and vLLM's /server_info, whole, in one file (gzipped, .txt.gz, when large)."""
    parts = []
    for log in sorted([*logs.glob("*.log"), *logs.glob("*.json")]):
        text = log.read_text(errors="replace")
        parts.append(f"===== {log.name} ({len(text.splitlines())} lines, whole)\n{text.rstrip()}\n")
    data = "".join(parts).encode()
    if len(data) > WHOLE_LOGS_MAX_BYTES:
        path = path.with_suffix(".txt.gz")
        path.write_bytes(gzip.compress(data, mtime=0))
    else:
        path.write_bytes(data)
    return path


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        parts = parse_parts(args.parts)
        parse_rates(args.rates)
        if args.repeats < 1:
            raise ValueError(f"--repeats must be at least 1 (got {args.repeats})")
    except ValueError as exc:
        print(f"run.py: error: {exc}", file=sys.stderr)
        return 2
    run = Run(args)
    try:
        run.execute(parts)
    except KeyboardInterrupt:  # the device driver's limit (SIGINT): keep every measurement that finished
        run.records.append(StepRecord("interrupted", "-", status="timeout"))
        print("run.py: interrupted; writing what finished", file=sys.stderr)
    path = write_outputs(run, parts, Path(args.out), args.tag or "_".join(parts) or "none")
    print(f"results: {path}")
    return 0 if all(r.status in ("ok", "skipped") for r in run.records) else 1


if __name__ == "__main__":
    raise SystemExit(main())
