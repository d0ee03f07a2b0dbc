"""Helpers of the server tests: a tiny chat model, a uvicorn server in a thread, /metrics parsing."""

from __future__ import annotations

import json
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "engine"))
from tiny_models import make_tiny_model  # noqa: E402

from pagoda.config import EngineConfig  # noqa: E402
from pagoda.engine.engine import LLMEngine  # noqa: E402
from pagoda.server.app import build_app  # noqa: E402
from pagoda.server.async_engine import AsyncEngine  # noqa: E402
from pagoda.server.launcher import bind_socket, make_server  # noqa: E402
from pagoda.server.metrics import ServerMetrics  # noqa: E402

API_KEY = "test-key"
MODEL_NAME = "tiny-llama"
# Words of the tiny word-level tokenizer only ("t0".."t383"): the template must tokenize cleanly.
CHAT_TEMPLATE = "{% for m in messages %}t1 {{ m['content'] }} t2 {% endfor %}{% if add_generation_prompt %}t3{% endif %}"


def make_chat_model(path: Path) -> str:
    """The tiny random Llama of the engine tests, with a chat template in its tokenizer config."""
    make_tiny_model(path, "llama")
    config_file = path / "tokenizer_config.json"
    config = json.loads(config_file.read_text())
    config["chat_template"] = CHAT_TEMPLATE
    config_file.write_text(json.dumps(config))
    return str(path)


def engine_config(path: str, **overrides) -> EngineConfig:
    return EngineConfig(model=path, block_size=8, **overrides)


@dataclass
class RunningServer:
    url: str
    engine: AsyncEngine
    server: object
    thread: threading.Thread
    step_delay: list  # [seconds]: tests slow the engine loop down to keep requests in flight

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(30)


def start_server(engine: LLMEngine, api_key: str | None = API_KEY, name: str = MODEL_NAME) -> RunningServer:
    """Serve ``engine`` from a background thread on a free loopback port; returns once it listens."""
    step_delay = [0.0]
    real_step = engine.step

    def step():
        if step_delay[0]:
            time.sleep(step_delay[0])
        return real_step()

    engine.step = step
    async_engine = AsyncEngine(engine, ServerMetrics(name), idle_poll_s=0.2)
    app = build_app(async_engine, [name], api_key)
    sock = bind_socket("127.0.0.1", 0)
    port = sock.getsockname()[1]
    server = make_server(app, async_engine, "127.0.0.1", port, shutdown_timeout=5, log_level="warning")
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the test server did not start")
        time.sleep(0.02)
    return RunningServer(f"http://127.0.0.1:{port}", async_engine, server, thread, step_delay)


def read_metrics(url: str) -> dict[str, float]:
    """``/metrics`` as {'name{labels}': value}."""
    import httpx

    text = httpx.get(url + "/metrics", timeout=10).text
    values = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            values[key] = float(value)
    return values


def metric(values: dict[str, float], name: str, **labels: str) -> float:
    """The value of ``name`` whose labels include ``labels``."""
    for key, value in values.items():
        base, _, rest = key.partition("{")
        if base == name and all(f'{k}="{v}"' in rest for k, v in labels.items()):
            return value
    raise KeyError(f"{name} {labels} not in /metrics")
