"""`pagoda bench serve`: load an OpenAI-compatible server (Pagoda's or any) and report serving metrics.

Each request streams (server-sent events) and is timed chunk by chunk: TTFT, ITL, TPOT and E2E
latency, plus request and token throughput, in the style of vLLM's serving benchmark.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
from datetime import datetime, timezone

import httpx

from pagoda.bench.serve_load import LoadShape, run_event_loop, run_load
from pagoda.bench.serve_metrics import format_table, summarize
from pagoda.bench.serve_prompts import Tokenizer, load_prompts_file, random_prompts
from pagoda.bench.serve_requests import ENDPOINTS, RequestInput, RequestResult, RequestSettings

EPILOG = """\
metrics: TTFT = time to the first streamed token; ITL = gap between streamed chunks; TPOT = (E2E -
TTFT) / (output tokens - 1); E2E = whole request. Token counts come from the server's usage
(stream_options.include_usage), else one token per streamed chunk.

examples:
  pagoda serve ./my-llama --port 8000 &
  pagoda bench serve --num-prompts 200 --request-rate 8 --input-len 256 --output-len 128
  pagoda bench serve --base-url http://gpu-box:8000 --endpoint chat --max-concurrency 16 \\
      --prompts-file prompts.jsonl --result-file result.json"""


def add_parser(subparsers, parent: argparse.ArgumentParser) -> None:
    p = subparsers.add_parser(
        "serve", parents=[parent], help="load an OpenAI-compatible server; report TTFT/ITL/TPOT/E2E and throughput",
        description="Load an OpenAI-compatible server (Pagoda's or any) with streamed requests and report "
                    "serving metrics.", epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    g = p.add_argument_group("server")
    g.add_argument("--base-url", default="http://127.0.0.1:8000", help="the server's root URL (default %(default)s)")
    g.add_argument("--model", help="model name to send (default: the first one the server's /v1/models lists)")
    g.add_argument("--endpoint", default="completions", choices=list(ENDPOINTS),
                   help="/v1/completions or /v1/chat/completions (default %(default)s)")
    g = p.add_argument_group("load")
    g.add_argument("--num-prompts", type=int, help="requests to send (default 100; with --prompts-file: its lines)")
    g.add_argument("--request-rate", type=float, default=math.inf,
                   help="mean requests per second, Poisson arrivals; inf (default) sends all at once")
    g.add_argument("--burstiness", type=float, default=1.0,
                   help="gamma shape of the arrival gaps: 1 = Poisson, < 1 burstier, > 1 more even")
    g.add_argument("--max-concurrency", type=int, help="most requests in flight at once (default: no cap)")
    g = p.add_argument_group("prompts")
    g.add_argument("--input-len", type=int, default=128,
                   help="tokens per random prompt (exact when the server has /tokenize, else that many words)")
    g.add_argument("--output-len", type=int, default=128, help="max_tokens of each request")
    g.add_argument("--prompts-file", help="JSONL of prompts: strings or {\"prompt\": ..., \"output_len\": ...}")
    g.add_argument("--seed", type=int, default=0, help="seed of the random prompts and arrival times")
    g.add_argument("--ignore-eos", action="store_true", help="ask the server to generate all --output-len tokens")
    g.add_argument("--temperature", type=float, default=0.0, help="sampling temperature of each request")
    g.add_argument("--extra-body", metavar="JSON", help="a JSON object merged into every request body")
    g = p.add_argument_group("output")
    g.add_argument("--result-file", help="write the run's settings and summary to this JSON file")
    g.add_argument("--save-detailed", action="store_true",
                   help="with --result-file: also every request's lengths, TTFT, ITLs, latency, text and error "
                        "(as vLLM's flag; megabytes for large runs)")
    g.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=run)


def check_args(args: argparse.Namespace) -> LoadShape:
    """Validate before any network traffic; raises ValueError with the flag's name."""
    for flag in ("num_prompts", "input_len", "output_len"):
        value = getattr(args, flag)
        if value is not None and value < 1:
            raise ValueError(f"--{flag.replace('_', '-')} must be >= 1, got {value}")
    if not args.base_url.startswith(("http://", "https://")):
        raise ValueError(f"--base-url must start with http:// or https://, got {args.base_url!r}")
    if args.extra_body is not None and not isinstance(json.loads(args.extra_body), dict):
        raise ValueError("--extra-body must be a JSON object")
    shape = LoadShape(args.request_rate, args.burstiness, args.max_concurrency, args.seed)
    shape.validate()
    return shape


def server_root(base_url: str) -> str:
    root = base_url.rstrip("/")
    return root[: -len("/v1")] if root.endswith("/v1") else root


def first_model(client: httpx.Client, root: str) -> str:
    response = client.get(root + "/v1/models")
    response.raise_for_status()
    models = response.json().get("data") or []
    if not models:
        raise ValueError(f"{root}/v1/models lists no model; pass --model")
    return models[0]["id"]


def make_inputs(args: argparse.Namespace, client: httpx.Client, root: str, model: str) -> list[RequestInput]:
    if args.prompts_file:
        return load_prompts_file(args.prompts_file, args.num_prompts, args.output_len)
    tokenizer = Tokenizer(root, model, client)
    return random_prompts(tokenizer, args.num_prompts or 100, args.input_len, args.output_len, args.seed)


def run(args: argparse.Namespace) -> int:
    if args.log_level != "debug":
        logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request drowns the report
    try:
        shape = check_args(args)
    except ValueError as exc:
        print(f"pagoda bench serve: error: {exc}", file=sys.stderr)
        return 2
    root = server_root(args.base_url)
    try:
        with httpx.Client(timeout=60.0) as client:
            model = args.model or first_model(client, root)
            inputs = make_inputs(args, client, root, model)
    except httpx.HTTPError as exc:
        print(f"pagoda bench serve: error: cannot use the server at {root}: {exc}", file=sys.stderr)
        return 1
    except (ValueError, OSError) as exc:
        print(f"pagoda bench serve: error: {exc}", file=sys.stderr)
        return 1
    extra = json.loads(args.extra_body) if args.extra_body else {}
    settings = RequestSettings(root, model, args.endpoint, args.temperature, args.ignore_eos, extra)
    print(f"Sending {len(inputs)} requests to {root}{ENDPOINTS[args.endpoint]} (model {model}, request rate "
          f"{shape.request_rate}, max concurrency {shape.max_concurrency or 'none'})", file=sys.stderr)
    results, duration = benchmark(settings, inputs, shape, progress=not args.no_progress)
    summary = summarize(results, duration)
    print(format_table(summary))
    failed = [r.error for r in results if not r.success]
    if failed:
        print(f"{len(failed)} requests failed; the first error: {failed[0]}", file=sys.stderr)
    if args.result_file:
        write_result(args.result_file, args, settings, shape, summary, results)
    return 0 if summary["completed"] else 1


def benchmark(settings: RequestSettings, inputs: list[RequestInput], shape: LoadShape,
              progress: bool = False) -> tuple[list[RequestResult], float]:
    """Run the load (blocking); returns the results in input order and the wall time in seconds."""
    from tqdm.auto import tqdm

    with tqdm(total=len(inputs), unit="req", disable=not progress, file=sys.stderr) as bar:
        return run_event_loop(run_load(settings, inputs, shape, on_done=lambda _: bar.update(1)))


def write_result(path: str, args: argparse.Namespace, settings: RequestSettings, shape: LoadShape,
                 summary: dict, results: list[RequestResult]) -> None:
    """The run's settings and summary, and with ``--save-detailed`` the per-request measurements, as JSON."""
    record = {
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "base_url": settings.base_url,
        "endpoint": ENDPOINTS[settings.endpoint],
        "model": settings.model,
        "num_prompts": len(results),
        "request_rate": "inf" if math.isinf(shape.request_rate) else shape.request_rate,
        "burstiness": shape.burstiness,
        "max_concurrency": shape.max_concurrency,
        "input_len": None if args.prompts_file else args.input_len,
        "output_len": args.output_len,
        "seed": args.seed,
        **summary,
    }
    if args.save_detailed:
        record.update(
            input_lens=[r.prompt_len for r in results],
            output_lens=[r.output_tokens for r in results],
            start_times=[r.start_time for r in results],  # time.perf_counter(): CLOCK_MONOTONIC on Linux, as the core's traces
            ttfts=[r.ttft for r in results],
            itls=[r.itl for r in results],
            e2els=[r.latency for r in results],
            generated_texts=[r.generated_text for r in results],
            errors=[r.error for r in results],
        )
    with open(path, "w") as f:
        json.dump(record, f, indent=2)
    print(f"results written to {path}", file=sys.stderr)
