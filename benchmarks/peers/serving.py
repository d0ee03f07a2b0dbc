"""One engine's served part of a run: start its server, serve the shared warm-up, then for each (workload, client)
empty the prefix cache, scrape /metrics, run the client, scrape again (the prefix-cache hit rate and the steps by
tokens over the run: prefix_cache.py, step_sizes.py); stop the server.

Every workload has prompts of its own (its seed), and the cache is emptied before each, so a timed run never
hits the prompts of another; the hit rate each engine reports over the run is recorded to show it (a run
without shared prefixes whose rate is not about 0 is flagged)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import engines
import mixed_lengths
import prefix_cache
import report
import step_sizes
import vllm_log
from prompts import (mixed_prompts, prefix_prompts, random_token_prompts, write_mixed_prompts_file, write_prompts_file,
                     write_sharegpt_file)
from steps import Server, StepRecord, read_json
from workloads import WARMUP, Served, quick

PORTS = {"pagoda": 8100, "vllm": 8200}
STARTUP_S = 300  # the most a server may take to answer GET /v1/models


def workload_prompts(w: Served, vocab_size: int) -> list[tuple[list[int], int]]:
    """(prompt ids, output_len) of each request of ``w``."""
    if w.lengths:
        return mixed_prompts(mixed_lengths.draw(w.num_prompts, w.seed, max_len=w.max_len), vocab_size, w.seed)
    if w.num_prefixes:
        ids = prefix_prompts(w.num_prompts, w.num_prefixes, w.prefix_len, w.input_len, vocab_size, w.seed)
    else:
        ids = random_token_prompts(w.num_prompts, w.input_len, vocab_size, w.seed)
    return [(p, w.output_len) for p in ids]


class ServerSession:
    """Runs ``engine``'s server for the served workloads of a run (``run`` is run.Run: settings, steps, budget)."""

    def __init__(self, run, engine: str, repeat: int = 0) -> None:
        self.run, self.engine, self.repeat = run, engine, repeat
        self.suffix = f"#{repeat + 1}" if repeat else ""  # a repeat's step names and log files
        env = engines.vllm_env(run.s) if engine == "vllm" else engines.pagoda_env()
        self.log = run.logs / f"{engine}_server{self.suffix}.log"
        self.server = Server(engines.server_cmd(engine, run.s, PORTS[engine]), env, PORTS[engine], self.log)

    def serve(self, workloads: list[tuple[Served, tuple[str, ...]]]) -> None:
        record = StepRecord(f"server_start{self.suffix}", self.engine, log=str(self.log))
        self.run.records.append(record)
        try:
            limit = self.run.deadline.limit(STARTUP_S)
            if not self.server.start(limit, " (what was left of --budget-s)" if limit < STARTUP_S else ""):
                record.status = "failed"
                print(f"{self.engine} server did not come up: {self.server.failure}; see {self.log}", flush=True)
                return
            record.status, record.seconds = "ok", self.server.startup_s
            record.result = self.server_info()
            print(f"{self.engine} server up in {self.server.startup_s:.0f} s (model {self.server.model})", flush=True)
            self.warm_up()
            for w, clients in workloads:
                for client in clients:
                    self.timed(client, w)
        finally:
            self.server.stop()

    def server_info(self) -> dict:
        """vLLM's resolved config (GET /server_info, served in its dev mode): saved whole beside the logs."""
        if self.engine != "vllm":
            return {}
        status, body = self.server.request("GET", "/server_info?config_format=json")
        (self.run.logs / "vllm_server_info.json").write_text(body)
        return {"server_info": "saved" if status == 200 else f"HTTP {status}: {body[:200]}"}

    def warm_up(self) -> None:
        """The same requests on both servers (Pagoda's client), then an empty prefix cache."""
        w = quick(WARMUP) if self.run.args.quick else WARMUP
        self.run_client("pagoda", w, record_as=f"{w.name}[warm-up]{self.suffix}")
        self.reset()

    def reset(self) -> str:
        status, body = self.server.request("POST", "/reset_prefix_cache")
        return "ok" if status == 200 else f"failed (HTTP {status}: {body[:200]})"

    def timed(self, client: str, w: Served) -> None:
        reset = self.reset()
        before = self.metrics()
        rec = self.run_client(client, w)
        after = self.metrics()
        window = prefix_cache.window(prefix_cache.parse_metrics(before), prefix_cache.parse_metrics(after))
        steps = step_sizes.window(step_sizes.parse(before), step_sizes.parse(after), rec.result.get("duration"))
        found = report.from_served(w.name, client, self.engine, rec.result, self.run.s.limits)
        for m in found:
            m["prefix_cache"] = {**window, "reset": reset,
                                 "flagged": prefix_cache.flagged(window["hit_rate"], w.expects_cache_hits)}
            if steps is not None:
                m["steps"] = steps
            if self.repeat:
                m["repeat"] = self.repeat
        self.run.measurements += found

    def metrics(self) -> str:
        """The server's /metrics text ('' where it did not answer)."""
        status, body = self.server.request("GET", "/metrics", timeout_s=30)
        return body if status == 200 else ""

    def run_client(self, client: str, w: Served, record_as: str | None = None) -> StepRecord:
        result = self.run.work / "raw" / f"{self.engine}_{w.name}_{client}_client.json"
        result.parent.mkdir(exist_ok=True)
        result.unlink(missing_ok=True)
        prompts = self.prompts_files(w)
        if client == "pagoda":
            cmd = engines.pagoda_client_cmd(self.server.base_url, w, prompts["jsonl"], result)
        else:
            cmd = engines.vllm_client_cmd(self.run.s, self.server.base_url, self.server.model, w, result,
                                          prompts.get("sharegpt"))
        arrivals = 0 if math.isinf(w.request_rate) else w.num_prompts / w.request_rate
        rec = self.run.step(record_as or f"{w.name}[{client} client]{self.suffix}", self.engine, cmd,
                            cap_s=arrivals + 150, min_s=arrivals + 15, runs_in=client)
        rec.result = {k: v for k, v in read_json(result).items() if not isinstance(v, list)}  # no per-request lists
        return rec

    def prompts_files(self, w: Served) -> dict[str, Path]:
        """The workload's requests as Pagoda's client reads them (and, mixed lengths, as vLLM's ShareGPT file)."""
        folder = self.run.work / "prompts"
        paths = {"jsonl": folder / f"{w.name}_{w.seed}.jsonl"}  # the seed: a repeat's prompts are its own
        if w.lengths:
            paths["sharegpt"] = folder / f"{w.name}_{w.seed}.sharegpt.json"
        if not all(p.exists() for p in paths.values()):
            prompts = workload_prompts(w, self.run.vocab_size)
            if w.lengths:
                write_mixed_prompts_file(paths["jsonl"], prompts)
                write_sharegpt_file(paths["sharegpt"], prompts)
            else:
                write_prompts_file(paths["jsonl"], [ids for ids, _ in prompts], w.output_len)
        return paths


def vllm_choices(logs: Path) -> dict:
    """What vLLM chose, per log (server and offline): vllm_log.py's values."""
    out = {}
    for log in (logs / "vllm_server.log", logs / "vllm_offline+latency.log"):
        if not log.exists():
            continue
        parsed = vllm_log.values(vllm_log.parse(log.read_text(errors="replace")))
        if parsed:
            out[log.stem] = parsed
    info = logs / "vllm_server_info.json"
    if info.exists():
        out["server_info"] = server_info_choices(read_json(info))
    return out


STARTUP = "Pagoda engine: "
TWO_WORD_KEYS = ("KV cache", "guided decoding", "tensor parallel", "pipeline parallel")


def pagoda_choices(logs: Path) -> dict:
    """What Pagoda's server chose, from the last start-up line in its log: each ' | '-separated part as its name
    ("max_num_seqs", "attention", "KV cache", ...) against the rest (a number where it is one)."""
    log = logs / "pagoda_server.log"
    lines = [ln for ln in log.read_text(errors="replace").splitlines() if STARTUP in ln] if log.exists() else []
    out: dict = {}
    for part in lines[-1].split(STARTUP, 1)[1].split(" | ") if lines else []:
        words = part.strip().split(" ")
        cut = 2 if " ".join(words[:2]) in TWO_WORD_KEYS else 1
        value = " ".join(words[cut:])
        out[" ".join(words[:cut])] = int(value) if value.isdigit() else value
    return out


def server_info_choices(info: dict) -> dict:
    """The scheduler limits, attention backend and compilation of vLLM's /server_info JSON (where present)."""
    config = info.get("vllm_config", info)
    if isinstance(config, str):
        try:
            config = json.loads(config)
        except ValueError:
            return {}
    pick = {"scheduler_config": ("max_num_seqs", "max_num_batched_tokens"), "attention_config": ("backend",),
            "compilation_config": ("mode", "cudagraph_mode", "cudagraph_capture_sizes")}
    return {f"{section}.{key}": config[section][key] for section, keys in pick.items()
            if isinstance(config.get(section), dict) for key in keys if key in config[section]}
