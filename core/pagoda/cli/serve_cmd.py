"""`pagoda serve [MODEL]`: the OpenAI-compatible HTTP server."""

from __future__ import annotations

import argparse
import functools
import logging
import sys

from pagoda import envs
from pagoda.entrypoints.engine_args import DEFAULT_MODEL_HELP, RegistryName, add_engine_args, engine_config
from pagoda.errors import PagodaError
from pagoda.plugins import get_plugin_manager
from pagoda.server.observability_config import add_observability_args, observability_config

logger = logging.getLogger("pagoda.server")


def add_parser(subparsers, parent: argparse.ArgumentParser) -> None:
    p = subparsers.add_parser(
        "serve", parents=[parent], help="serve a model over an OpenAI-compatible HTTP API",
        description="Serve a model over HTTP (/v1/completions, /v1/chat/completions, /v1/models, /metrics, ...). "
                    "MODEL is " + DEFAULT_MODEL_HELP + ".",
    )
    p.add_argument("model", nargs="?", default=None, metavar="MODEL", help=DEFAULT_MODEL_HELP)
    g = p.add_argument_group("server")
    g.add_argument("--host", default="127.0.0.1", help="address to listen on (0.0.0.0: every interface)")
    g.add_argument("--port", type=int, default=8000, help="TCP port")
    g.add_argument("--api-key", default=envs.API_KEY.get(),
                   help=f"require 'Authorization: Bearer KEY' (env {envs.API_KEY.name}); /health and /metrics stay open")
    g.add_argument("--served-model-name", nargs="+", metavar="NAME",
                   help="model name(s) clients use (default: MODEL as given, or the embedded model's name)")
    g.add_argument("--shutdown-timeout", type=float, default=30.0,
                   help="seconds running requests get to finish after SIGTERM before they are cancelled")
    g.add_argument("--api-server-count", type=int, default=1, metavar="N",
                   help="HTTP server processes sharing the port and feeding the one engine core process "
                        "(raise it when tokenizing, detokenizing and streaming JSON is the bottleneck)")
    g.add_argument("--max-n-per-request", type=int, default=16, metavar="N",
                   help="most choices (n) one request may ask for; each is a sequence with its own KV blocks, "
                        "so a larger n from one client takes seats from every other (default 16)")
    g.add_argument("--request-timeout", type=float, default=None, metavar="SECONDS",
                   help="stop a request still running SECONDS after it arrived (queueing included) and free its "
                        "KV blocks; its client gets 504 (on a stream: an error event, then [DONE]). Off by default")
    g.add_argument("--responses-store-size", type=int, default=1000, metavar="N",
                   help="/v1/responses: finished responses kept for GET and previous_response_id, the oldest dropped "
                        "first (0: none kept; store=true is then a 400)")
    g.add_argument("--responses-store-ttl", type=float, default=3600.0, metavar="SECONDS",
                   help="/v1/responses: seconds a stored response is kept after it finished (default 3600)")
    add_observability_args(p.add_argument_group("metrics, traces and request logs (docs/observability.md)"))
    add_parser_args(p.add_argument_group("tool calling and reasoning (docs/tools.md)"))
    add_lora_args(p.add_argument_group("LoRA adapters (docs/lora.md; with --enable-lora)"))
    add_engine_args(p, get_plugin_manager())
    p.set_defaults(func=run)


def add_parser_args(g) -> None:
    manager = get_plugin_manager()
    tools = ", ".join(manager.registry("tool_parser").names()) or "none installed"
    reasoning = ", ".join(manager.registry("reasoning_parser").names()) or "none installed"
    g.add_argument("--tool-call-parser", default=None, metavar="NAME", type=RegistryName(manager, "tool_parser"),
                   help="how the model writes tool calls, for requests with tools and tool_choice 'auto' (the default "
                        "with tools): the parser finds the calls in the output and answers them as OpenAI tool_calls. "
                        f"Registered: {tools} (hermes: Hermes/Qwen2.5/Qwen3 <tool_call> blocks; llama3_json: "
                        "Llama 3.x JSON; mistral: [TOOL_CALLS]). Without it, tool_choice 'auto' is a 400; "
                        "'required' and a named function work without it (enforced by guided decoding)")
    g.add_argument("--enable-auto-tool-choice", action="store_true",
                   help="accepted for vLLM compatibility: tool_choice 'auto' is on whenever --tool-call-parser is given")
    g.add_argument("--reasoning-parser", default=None, metavar="NAME", type=RegistryName(manager, "reasoning_parser"),
                   help="split a reasoning model's <think>...</think> block from its answer: reasoning goes to "
                        f"message.reasoning_content (streamed as delta.reasoning_content). Registered: {reasoning} "
                        "(deepseek_r1: reasoning until </think>; qwen3: only inside a <think> block that opens "
                        "the output)")


def add_lora_args(g, runtime_updates: bool = True) -> None:
    g.add_argument("--lora-modules", nargs="+", metavar="NAME=PATH",
                   help="LoRA adapters to load at start, each NAME=PATH (or JSON {\"name\": ..., \"path\": ...}); a "
                        "request selects one by its model field, /v1/models lists them (needs --enable-lora)")
    if not runtime_updates:
        return
    g.add_argument("--allow-runtime-lora-updating", action="store_true",
                   help="answer POST /v1/load_lora_adapter and /v1/unload_lora_adapter (behind --api-key), loading "
                        "adapters from folders the server can read (needs --enable-lora)")


def check_lora_args(args: argparse.Namespace, enable_lora: bool) -> list[tuple[str, str]]:
    """The --lora-modules as (name, path) pairs, after checking they go with --enable-lora."""
    from pagoda.server.lora_modules import parse_lora_modules

    runtime_updates = getattr(args, "allow_runtime_lora_updating", False)
    if (args.lora_modules or runtime_updates) and not enable_lora:
        flag = "--lora-modules" if args.lora_modules else "--allow-runtime-lora-updating"
        raise ValueError(f"{flag} needs --enable-lora")
    return parse_lora_modules(args.lora_modules, served_names(args))


def check_args(args: argparse.Namespace):
    """Validate flags and one-of-N choices before anything heavy loads; returns the EngineConfig."""
    if not 0 <= args.port <= 65535:
        raise ValueError(f"--port must be in [0, 65535], got {args.port}")
    if args.shutdown_timeout < 0:
        raise ValueError(f"--shutdown-timeout must be >= 0 seconds, got {args.shutdown_timeout}")
    if args.api_server_count < 1:
        raise ValueError(f"--api-server-count must be >= 1, got {args.api_server_count}")
    if args.max_n_per_request < 1:
        raise ValueError(f"--max-n-per-request must be >= 1, got {args.max_n_per_request}")
    if args.responses_store_size < 0 or not args.responses_store_ttl > 0:
        raise ValueError("--responses-store-size must be >= 0 and --responses-store-ttl > 0 seconds, got "
                         f"{args.responses_store_size} and {args.responses_store_ttl}")
    if args.request_timeout is not None and not args.request_timeout > 0:
        raise ValueError(f"--request-timeout must be > 0 seconds (leave it out for no limit), got {args.request_timeout}")
    args.observability = observability_config(args)
    return check_engine(args)


def check_engine(args: argparse.Namespace):
    """The EngineConfig of the engine flags, its one-of-N choices, parsers, LoRA modules and model path
    checked (shared with ``run-batch``)."""
    from pagoda.loader import resolve_model

    config = engine_config(args, args.model)
    args.lora_pairs = check_lora_args(args, config.enable_lora)
    manager = get_plugin_manager()
    _, platform_cls = manager.registry("platform").select(config.platform)
    manager.registry("quantization").select(config.quantization or "none", platform=platform_cls())
    manager.registry("scheduler").select(config.scheduler)
    if args.tool_call_parser is not None:
        manager.registry("tool_parser").get(args.tool_call_parser)
    if args.reasoning_parser is not None:
        manager.registry("reasoning_parser").get(args.reasoning_parser)
    resolve_model(config.model)
    return config


def served_names(args: argparse.Namespace) -> list[str]:
    from pagoda.loader import DEFAULT_MODEL_NAME

    return args.served_model_name or [args.model or DEFAULT_MODEL_NAME]


def run(args: argparse.Namespace) -> int:
    from pagoda.server.launcher import bind_socket

    try:
        config = check_args(args)
        sock = bind_socket(args.host, args.port)
    except (ValueError, OSError, PagodaError) as exc:
        print(f"pagoda serve: {exc}", file=sys.stderr)
        return 2
    try:
        return _serve(args, config, sock)
    finally:
        sock.close()


def core_factory(args: argparse.Namespace):
    """What builds the engine core: with --lora-modules the core loads them before it serves (a bad
    adapter fails the start)."""
    from pagoda.engine_core.core import EngineCore
    from pagoda.server.lora_modules import core_with_lora_modules

    if args.lora_pairs:
        return functools.partial(core_with_lora_modules, args.lora_pairs)
    return EngineCore.from_config


def _serve(args: argparse.Namespace, config, sock) -> int:
    from pagoda.engine_core.client import CoreProcess, EngineStartError
    from pagoda.multimodal.media import MediaConfig
    from pagoda.server.api_server import ApiServerSpec, serve_api
    from pagoda.server.launcher import run_api_processes, url_of

    try:  # each core logs "Pagoda engine: platform ..."
        cores = _start_cores(args, config)
    except EngineStartError as exc:
        print(f"pagoda serve: {exc}", file=sys.stderr)
        return 1
    core = cores[0]
    names = served_names(args)
    port = sock.getsockname()[1]
    spec = ApiServerSpec(args.host, port, names, args.api_key, args.shutdown_timeout, args.log_level, config.model,
                         config.tokenizer, config.skip_tokenizer_init, core.address, core.pid, core.info,
                         args.api_server_count, args.max_n_per_request, args.request_timeout, args.tool_call_parser,
                         args.reasoning_parser, config.enable_lora, args.allow_runtime_lora_updating,
                         MediaConfig.from_engine(config), responses_store_size=args.responses_store_size,
                         responses_store_ttl=args.responses_store_ttl, observability=args.observability,
                         data_parallel_cores=[(c.address, c.pid) for c in cores] if len(cores) > 1 else [])
    parsers = "".join(f"; {label} {name}" for label, name in (("tool-call parser", args.tool_call_parser),
                                                                ("reasoning parser", args.reasoning_parser)) if name)

    def announce() -> None:
        logger.info("Serving %s at %s/v1 (API key %s; %d API server process(es), engine core pid %s%s)", ", ".join(names),
                    url_of(args.host, port), "required" if args.api_key else "not required", args.api_server_count,
                    ", ".join(str(c.pid) for c in cores), parsers)

    try:
        if args.api_server_count == 1:
            return serve_api(sock, spec, core_alive=core.alive if len(cores) == 1 else None, on_ready=announce)
        return run_api_processes(sock, spec, args.api_server_count, announce)
    finally:
        for c in cores:
            c.shutdown(args.shutdown_timeout)


def _start_cores(args: argparse.Namespace, config) -> list:
    """The engine core, or under --data-parallel-size (without --data-parallel-rank) one per replica."""
    from pagoda.engine_core.client import CoreProcess

    if config.data_parallel_size > 1 and config.data_parallel_rank is None:
        from pagoda.engine_core.dp_client import start_cores

        return start_cores(config, core_factory(args), args.log_level)
    return [CoreProcess(config, core_factory(args), log_level=args.log_level)]
