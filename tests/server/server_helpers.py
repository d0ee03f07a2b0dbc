"""Helpers of the server tests: a tiny chat model, an engine core process with a uvicorn server in a
thread, /metrics parsing."""

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
from pagoda.engine_core.client import AsyncMPClient, CoreProcess, SyncMPClient  # noqa: E402
from pagoda.engine_core.core import EngineCore  # noqa: E402
from pagoda.loader import load_tokenizer, resolve_model  # noqa: E402
from pagoda.server.app import build_app  # noqa: E402
from pagoda.multimodal.media import MediaConfig  # noqa: E402
from pagoda.server.async_engine import AsyncEngine  # noqa: E402
from pagoda.server.images import ServerImages  # noqa: E402
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


class ControlledCore(EngineCore):
    """An engine core that tests can slow down (to keep requests in flight) or make fail."""

    UTILITIES = EngineCore.UTILITIES | {"set_step_delay", "fail_next_step"}
    step_delay = 0.0
    failure: str | None = None

    def set_step_delay(self, seconds: float) -> None:
        self.step_delay = seconds

    def fail_next_step(self, message: str) -> None:
        self.failure = message

    def step(self):
        if self.failure is not None:
            raise RuntimeError(self.failure)
        if self.step_delay:
            time.sleep(self.step_delay)
        return super().step()


def build_test_core(config: EngineConfig) -> ControlledCore:
    """The core factory (module level: it is pickled into the spawned core process)."""
    return ControlledCore.from_config(config)


@dataclass
class RunningServer:
    url: str
    engine: AsyncEngine
    server: object
    thread: threading.Thread
    core: CoreProcess
    control: SyncMPClient  # a second client of the core, for the tests' utility calls

    def set_step_delay(self, seconds: float) -> None:
        self.control.call_utility("set_step_delay", seconds)

    def core_state(self) -> dict:
        return self.control.call_utility("kv_cache_state")

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(30)
        self.control.shutdown()
        self.core.shutdown()


def start_server(config: EngineConfig, api_key: str | None = API_KEY, name: str = MODEL_NAME,
                 core_factory=build_test_core, observers: dict | None = None, **app_options) -> RunningServer:
    """Start a core process (made by ``core_factory``) and serve it from a background thread on a free
    loopback port; ``observers`` go to ``AsyncEngine`` (``metrics=``, ``tracer=``, ``request_log=``),
    ``app_options`` to ``build_app`` (``tool_parser=``, ``reasoning_parser=``, ``lora=``); images are read
    within the config's media limits, as ``pagoda serve`` does."""
    core = CoreProcess(config, core_factory=core_factory, log_level="WARNING")
    tokenizer = load_tokenizer(resolve_model(config.model))
    observers = {"metrics": ServerMetrics(name), **(observers or {})}
    async_engine = AsyncEngine(AsyncMPClient(core.address, core.info, core.alive), tokenizer, **observers)
    images = ServerImages(config.model, tokenizer, MediaConfig.from_engine(config))
    app = build_app(async_engine, [name], api_key, **{"images": images, **app_options})
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
    control = SyncMPClient(core.address, core.info, core.alive)
    return RunningServer(f"http://127.0.0.1:{port}", async_engine, server, thread, core, control)


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
