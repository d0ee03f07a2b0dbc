"""One API server: the FastAPI app, its front end (tokenizer, detokenizer) and a client of the
engine core process, served by uvicorn on a listening socket that may be shared with other API
server processes (``--api-server-count``)."""

from __future__ import annotations

import logging
import signal
import sys
from dataclasses import dataclass, field
from typing import Callable

from pagoda.logs import configure_logging
from pagoda.messages import EngineInfo
from pagoda.multimodal.media import MediaConfig
from pagoda.server.observability_config import ObservabilityConfig

logger = logging.getLogger("pagoda.server")


@dataclass
class ApiServerSpec:
    """Everything an API server process needs (picklable: it crosses to spawned processes)."""

    host: str
    port: int
    served_model_names: list[str]
    api_key: str | None
    shutdown_timeout: float
    log_level: str
    model: str | None
    tokenizer: str | None
    skip_tokenizer_init: bool
    core_address: str
    core_pid: int
    info: EngineInfo
    api_server_count: int = 1
    max_n_per_request: int = 16
    request_timeout: float | None = None  # seconds; None: no limit
    tool_call_parser: str | None = None  # --tool-call-parser
    reasoning_parser: str | None = None  # --reasoning-parser
    enable_lora: bool = False  # --enable-lora: requests may name LoRA adapters in ``model``
    allow_runtime_lora_updating: bool = False  # --allow-runtime-lora-updating
    media: MediaConfig = field(default_factory=MediaConfig)  # where images may come from, how large (docs/multimodal.md)
    responses_store_size: int = 1000  # --responses-store-size: stored /v1/responses kept (docs/api_responses.md)
    responses_store_ttl: float = 3600.0  # --responses-store-ttl: seconds a stored response is kept once finished
    # --data-parallel-size: every engine core as (address, pid), the first being core_address; empty: one core
    data_parallel_cores: list[tuple[str, int]] = field(default_factory=list)
    observability: ObservabilityConfig = field(default_factory=ObservabilityConfig)  # metric names, traces, logs


def serve_api(sock, spec: ApiServerSpec, core_alive: Callable[[], bool] | None = None,
              on_ready: Callable[[], None] | None = None) -> int:
    """Serve HTTP on ``sock`` until SIGTERM/SIGINT (running requests drain first)."""
    from pagoda.engine_core.gc_freeze import freeze_startup_objects
    from pagoda.loader import load_tokenizer, resolve_model
    from pagoda.server.app import LoRAServing, build_app
    from pagoda.server.async_engine import AsyncEngine
    from pagoda.server.images import ServerImages
    from pagoda.server.launcher import make_server
    from pagoda.server.responses_api.store import ResponseStore

    tokenizer = None if spec.skip_tokenizer_init else load_tokenizer(resolve_model(spec.model), spec.tokenizer)
    engine = AsyncEngine(_core_client(spec, core_alive), tokenizer, share_metrics=spec.api_server_count > 1,
                         request_timeout=spec.request_timeout, **observers(spec))
    lora = LoRAServing(spec.enable_lora, spec.allow_runtime_lora_updating, shared=spec.api_server_count > 1)
    store = ResponseStore(spec.responses_store_size, spec.responses_store_ttl, spec.api_server_count)
    app = build_app(engine, spec.served_model_names, spec.api_key, spec.max_n_per_request, spec.tool_call_parser,
                    spec.reasoning_parser, lora, ServerImages(spec.model, tokenizer, spec.media), store)
    server = make_server(app, engine, spec.host, spec.port, spec.shutdown_timeout, spec.log_level, on_ready)
    freeze_startup_objects()
    server.run(sockets=[sock])
    return 0


def observers(spec: ApiServerSpec) -> dict:
    """AsyncEngine's metrics, tracer and request log, as the observability flags ask."""
    from pagoda.server.metrics import ServerMetrics
    from pagoda.server.request_log import RequestLog
    from pagoda.server.tracing import RequestTracer

    config = spec.observability
    return {"metrics": ServerMetrics(spec.served_model_names[0], config.metrics_name_prefix, spec.info.max_model_len),
            "tracer": RequestTracer(config.otlp_traces_endpoint) if config.otlp_traces_endpoint else None,
            "request_log": RequestLog(config.log_request_prompts) if config.log_requests else None}


def _core_client(spec: ApiServerSpec, core_alive: Callable[[], bool] | None):
    """The client of the engine core, or of every data-parallel core (requests routed over them)."""
    from pagoda.engine_core.client import AsyncMPClient, pid_alive

    if spec.data_parallel_cores:
        from pagoda.engine_core.dp_client import AsyncDataParallelClient

        return AsyncDataParallelClient([(address, lambda pid=pid: pid_alive(pid))
                                        for address, pid in spec.data_parallel_cores], spec.info)
    return AsyncMPClient(spec.core_address, spec.info, core_alive or (lambda: pid_alive(spec.core_pid)))


def api_server_process(sock, spec: ApiServerSpec, index: int, ready) -> None:
    """Entry point of the spawned API server processes (``--api-server-count`` > 1); sets the
    ``ready`` event once it serves."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # stopped while starting: a clean exit (uvicorn takes over)
    configure_logging(spec.log_level, tag=f"api{index}")
    raise SystemExit(serve_api(sock, spec, on_ready=ready.set))
